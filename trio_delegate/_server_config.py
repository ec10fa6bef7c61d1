"""The configuration file of ``trio-delegate serve``: TOML, checked before anything starts.

The file has a ``[runtime]`` table (any :class:`Config` field; ``runtime_budget``
and each subagent's ``budget`` are tables of :class:`Budget` fields), a
``[server]`` table (how the MCP server answers) and one ``[[subagents]]``
table per subagent, each either a command (``command = [...]``, see
:class:`CommandRunner`), a Python runner (``python = "module:function"``)
an agent CLI (``kind = "claude"`` or ``kind = "codex"``), a model with instructions and tools
(``kind = "model"``, see :func:`~trio_delegate.model_runner`), or runs on Temporal workers
(``kind = "temporal"``, with a ``[temporal]`` table saying where). Every problem is reported as one
:class:`ConfigError` naming the file, the key (``subagents[1].command``) and
the fix; relative paths are resolved against the file's directory.

Reading is declarative: each table is an attrs class in
``trio_delegate._config_file._sections`` with one field per key, structured
by one cattrs converter (``_config_file._structure``) whose errors become
:class:`ConfigError`. A new key is one field there, for instance a
subagent's limit on turns::

    max_turns: int = key(20, check=check.positive_int,
                         fix="write e.g. max_turns = 20")

then read here, where the tables become a :class:`ServerConfig`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import ParamSpec, TypeVar, final

import attrs

from ._config import Config
from ._config_file._problems import ConfigError, Problem, key_text
from ._config_file._reading import MAX_CONFIG_BYTES, read_toml
from ._config_file._resolve import (
    agent_runner,
    command_runner,
    model_runner_of,
    python_runner,
    store_path,
    temporal_runner,
)
from ._config_file._sections import (
    DEFAULT_FOREGROUND_LIMIT_SECONDS,
    DEFAULT_PROGRESS_INTERVAL_SECONDS,
    DELEGATING,
    CommandSubagent,
    FileSections,
    ModelSubagent,
    PythonSubagent,
    SubagentSection,
    TemporalSettings,
    TemporalSubagent,
    runtime_config,
)
from ._config_file._structure import structure
from ._config_file._values import owner_problem, store
from ._errors import InvalidArgumentsError
from ._stores._protocol import DEFAULT_MAX_ROWS, DEFAULT_RETENTION_SECONDS
from ._subagent import Runner, Subagent
from ._usage import Budget

__all__ = [
    "DEFAULT_FOREGROUND_LIMIT_SECONDS",
    "DEFAULT_PROGRESS_INTERVAL_SECONDS",
    "MAX_CONFIG_BYTES",
    "ConfigError",
    "ServerConfig",
    "TemporalSettings",
    "load_server_config",
    "owner_problem",
    "store_in_config",
]

_P = ParamSpec("_P")
_T = TypeVar("_T")


@final
@attrs.frozen
class ServerConfig:
    """A checked server configuration, ready to open a runtime with.

    Attributes:
        path: the file it was read from.
        config: the runtime's limits and policy (``[runtime]``).
        subagents: the subagents, in file order.
        store: where runs are recorded (``[runtime] store``), if anywhere: the
            SQLite file, or a ``postgresql://`` URI (its password comes from
            the environment).
        foreground_limit_seconds: how long a foreground tool call may run before
            it answers with the running handle (``[server]``); ``None``: no limit.
        progress_interval_seconds: how often a running foreground call reports
            progress (``[server]``).
        owner: the owner of the server's runs (``[server]``); ``None``: a new
            one per connection.
        parent_budget: what each connection's runs may spend together
            (``[server] budget``: its parent's budget), if anything.
        temporal: where ``kind = "temporal"`` subagents' runs go, and what
            ``trio-delegate temporal-worker`` polls (``[temporal]``), if anywhere.
        store_max_rows: how many ended runs the store keeps (``[runtime]
            store_max_rows``); ``None``: every one.
        store_retention_seconds: how long the store keeps an ended run
            (``[runtime] store_retention_seconds``); ``None``: for ever.
    """

    path: Path
    config: Config
    subagents: tuple[Subagent, ...]
    store: Path | str | None = None
    foreground_limit_seconds: float | None = DEFAULT_FOREGROUND_LIMIT_SECONDS
    progress_interval_seconds: float = DEFAULT_PROGRESS_INTERVAL_SECONDS
    owner: str | None = None
    temporal: TemporalSettings | None = None
    parent_budget: Budget | None = None
    store_max_rows: int | None = DEFAULT_MAX_ROWS
    store_retention_seconds: float | None = DEFAULT_RETENTION_SECONDS


def load_server_config(path: str | os.PathLike[str]) -> ServerConfig:
    """Read and check a server configuration file.

    Every key is read before anything is looked up on the disk or imported;
    then Python runners are imported, so a configuration that loads is one
    the server can start with. The file's directory is added (last) to the
    module search path for them.

    Raises:
        ConfigError: for the first problem found, naming the key and the fix.
    """
    path = Path(path)
    sections = structure(_read(path), FileSections, path)
    base = path.resolve().parent
    config = runtime_config(sections.runtime)
    stored = None
    if sections.runtime.store is not None:
        stored = _at(path, ("runtime", "store"), None, store_path, base, sections.runtime.store)
    subagents = tuple(
        _subagent(path, index, table, base, config, sections.temporal)
        for index, table in enumerate(sections.subagents)
    )
    server = sections.server
    return ServerConfig(
        path,
        config,
        subagents,
        stored,
        server.foreground_limit_seconds,
        server.progress_interval_seconds,
        server.owner,
        sections.temporal,
        server.budget,
        sections.runtime.store_max_rows,
        sections.runtime.store_retention_seconds,
    )


def store_in_config(path: str | os.PathLike[str]) -> Path | str | None:
    """Where a server configuration records its runs (``[runtime] store``), resolved
    as ``serve`` resolves it (a file relative to the configuration's folder).

    Reads that key only: nothing of the subagents is imported.

    Raises:
        ConfigError: the file cannot be read, or the key is malformed.
    """
    path = Path(path)
    runtime = _read(path).get("runtime", {})
    if not isinstance(runtime, dict) or "store" not in runtime:
        return None
    value = _at(path, ("runtime", "store"), None, store, runtime["store"])
    return _at(path, ("runtime", "store"), None, store_path, path.resolve().parent, value)


def _read(path: Path) -> dict[str, object]:
    try:
        return read_toml(path)
    except Problem as problem:
        raise ConfigError(path, None, problem.problem, problem.fix or "fix the file") from None


def _at(
    path: Path,
    at: tuple[str | int, ...],
    subagent: str | None,
    read: Callable[_P, _T],
    *args: _P.args,
    **kwargs: _P.kwargs,
) -> _T:
    """``read(*args, **kwargs)``, its :class:`Problem` said about the key *at* of *path*.

    Raises:
        ConfigError: what *read* found wrong.
    """
    try:
        return read(*args, **kwargs)
    except Problem as problem:
        key = key_text((*at, *problem.at))
        fix = problem.fix or "fix the value it names"
        raise ConfigError(path, key, problem.problem, fix, subagent=subagent) from None


def _subagent(
    path: Path,
    index: int,
    table: SubagentSection,
    base: Path,
    config: Config,
    temporal: TemporalSettings | None,
) -> Subagent:
    """The subagent one ``[[subagents]]`` table says, its runner found or imported."""
    at = ("subagents", index)
    runner: Runner
    if isinstance(table, CommandSubagent):
        runner = _at(path, at, table.name, command_runner, table, base, config)
    elif isinstance(table, PythonSubagent):
        runner = _at(path, at, table.name, python_runner, table.python, base)
    elif isinstance(table, TemporalSubagent):
        runner = _at(path, at, table.name, temporal_runner, table, temporal)
    elif isinstance(table, ModelSubagent):
        runner = _at(path, at, table.name, model_runner_of, table, base)
    else:
        runner = _at(path, at, table.name, agent_runner, table, base)
    children = table.children if isinstance(table, DELEGATING) else ()
    try:
        return Subagent(
            table.name,
            runner,
            description=table.description,
            timeout_seconds=table.timeout_seconds,
            final_schema=table.final_schema,
            children=children,
            budget=table.budget,
            asks=table.asks,
        )
    except InvalidArgumentsError as exc:
        key = key_text(at)
        fix = "fix the value it names"
        raise ConfigError(path, key, exc.message, fix, subagent=table.name) from None
