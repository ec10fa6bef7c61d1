"""The tables of a configuration file, as attrs classes: one field per key.

A key is one field, declared with :func:`~._structure.key`: its default, the
check that reads its value and the fix shown when the value is wrong. Adding
a key to a table is adding a field here (and using it where the table is put
to work, in ``trio_delegate._server_config``); a field's name is its key,
the class's ``keys_say`` introduces the list of keys shown for an unknown
one, and ``[runtime]`` takes every field of :class:`Config` by itself.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, ClassVar, Final, final

import attrs

from .._checks import describe
from .._config import INHERIT, Config, TimeoutSetting
from .._runners._model_live import Prices
from .._stores._protocol import DEFAULT_MAX_ROWS, DEFAULT_RETENTION_SECONDS
from .._usage import Budget
from . import _values as check
from ._problems import Problem, cut
from ._structure import converter, key, structure_items, structure_table

__all__ = [
    "DEFAULT",
    "DEFAULT_FOREGROUND_LIMIT_SECONDS",
    "DEFAULT_PROGRESS_INTERVAL_SECONDS",
    "AgentSubagent",
    "BudgetSection",
    "CommandSubagent",
    "ModelSubagent",
    "PricesSection",
    "FileSections",
    "PythonSubagent",
    "RuntimeSection",
    "ServerSection",
    "SubagentSection",
    "TemporalSettings",
    "TemporalSubagent",
    "budget",
    "prices",
    "runtime_config",
]

#: The defaults of ``[server]`` (those of trio_delegate.mcp.build_server; not
#: imported from there, which would need the MCP SDK).
DEFAULT_FOREGROUND_LIMIT_SECONDS: Final = 45.0
DEFAULT_PROGRESS_INTERVAL_SECONDS: Final = 5.0

_ENV_FIX: Final = 'write env = { NAME = "value" } (values are strings: quote numbers)'
_NO_SUBAGENTS: Final = (
    "there are no subagents",
    "add at least one [[subagents]] table with a name and a command or python key",
)
_TEMPORAL_FIX: Final = 'write e.g. address = "127.0.0.1:7233", task_queue = "trio-delegate"'


class _Default(enum.Enum):
    DEFAULT = "DEFAULT"


#: A key left out where the default is another module's (the Temporal runner's).
DEFAULT: Final = _Default.DEFAULT


@final
@attrs.frozen(kw_only=True)
class BudgetSection:
    """A budget (``budget = { ... }``): the fields of :class:`~trio_delegate.Budget`."""

    keys_say: ClassVar[str] = "a budget takes the fields of trio_delegate.Budget"

    max_requests: int | None = key(None, check=check.token_limit("max_requests"))
    max_input_tokens: int | None = key(None, check=check.token_limit("max_input_tokens"))
    max_output_tokens: int | None = key(None, check=check.token_limit("max_output_tokens"))
    max_total_tokens: int | None = key(None, check=check.token_limit("max_total_tokens"))
    max_cost_usd: float | None = key(None, check=check.cost_limit)


def budget(value: Any) -> Budget:
    """The :class:`~trio_delegate.Budget` a TOML table says.

    Raises:
        Problem: *value* is not a table.
        ClassValidationError: its keys are wrong (an unknown one, a limit
            that is not a number >= 0), each said with its key.
    """
    table = structure_table(value, BudgetSection)
    # Every limit is checked as Budget checks it: this cannot refuse.
    return Budget(**attrs.asdict(table))


_BUDGET_FIX: Final = "write e.g. budget = { max_total_tokens = 100000, max_cost_usd = 2.5 }"


@final
@attrs.frozen(kw_only=True)
class PricesSection:
    """A model's prices (``prices = { ... }``): the fields of :class:`~trio_delegate.Prices`."""

    keys_say: ClassVar[str] = (
        "prices take the fields of trio_delegate.Prices (US dollars per million tokens)"
    )

    input: float = key(
        check=check.price("input"),
        missing=("has no input price", "add input = <US dollars per million input tokens>"),
    )
    output: float = key(
        check=check.price("output"),
        missing=("has no output price", "add output = <US dollars per million output tokens>"),
    )
    cache_read: float | None = key(None, check=check.price("cache_read"))
    cache_write: float | None = key(None, check=check.price("cache_write"))


def prices(value: Any) -> Prices:
    """The :class:`~trio_delegate.Prices` a TOML table says.

    Raises:
        Problem: *value* is not a table.
        ClassValidationError: its keys are wrong (an unknown one, a missing
            input or output price, a price that is not a number >= 0).
    """
    table = structure_table(value, PricesSection)
    # Every price is checked as Prices checks it: this cannot refuse.
    return Prices(
        table.input, table.output, cache_read=table.cache_read, cache_write=table.cache_write
    )


def _runtime_section() -> type[Any]:
    # Every field of Config is a key, checked by Config itself: a new field
    # of Config is a new key of [runtime] without a line here.
    fields = {
        field.name: key(field.default, check=check.config_value(field.name))
        for field in attrs.fields(Config)
    }
    # A Budget is written as a table, which Config itself cannot read.
    fields["runtime_budget"] = key(
        None, check=budget, fix=_BUDGET_FIX.replace("budget =", "runtime_budget =")
    )
    fields["store"] = key(None, check=check.store)
    # The store's own retention of ended runs (SQLiteStore / PostgresStore
    # max_rows and retention_seconds; their defaults when absent).
    fields["store_max_rows"] = key(DEFAULT_MAX_ROWS, check=check.row_bound)
    fields["store_retention_seconds"] = key(DEFAULT_RETENTION_SECONDS, check=check.age_bound)
    cls = attrs.make_class("RuntimeSection", fields, frozen=True, kw_only=True)
    # A class attribute, as the other tables' ClassVar (attrs.make_class takes fields only).
    setattr(  # noqa: B010
        cls,
        "keys_say",
        "[runtime] takes the fields of trio_delegate.Config, store, store_max_rows and "
        "store_retention_seconds",
    )
    return cls


#: ``[runtime]``: the fields of :class:`Config`, and ``store``.
RuntimeSection: Final = _runtime_section()


def runtime_config(runtime: Any) -> Config:
    """The :class:`Config` a ``[runtime]`` table says."""
    return Config(**{field.name: getattr(runtime, field.name) for field in attrs.fields(Config)})


@final
@attrs.frozen(kw_only=True)
class ServerSection:
    """``[server]``: how the MCP server answers."""

    keys_say: ClassVar[str] = "[server] takes these keys"

    foreground_limit_seconds: float | None = key(
        DEFAULT_FOREGROUND_LIMIT_SECONDS, check=check.deadline
    )
    progress_interval_seconds: float = key(
        DEFAULT_PROGRESS_INTERVAL_SECONDS,
        check=check.seconds(f"write e.g. {DEFAULT_PROGRESS_INTERVAL_SECONDS:g}"),
    )
    owner: str | None = key(
        None,
        check=check.owner,
        fix='write e.g. owner = "delegate", or remove the key for a new owner per connection',
    )
    budget: Budget | None = key(None, check=budget, fix=_BUDGET_FIX)


@final
@attrs.frozen
class TemporalSettings:
    """Where runs on Temporal go (``[temporal]``): the server, task queue and namespace."""

    keys_say: ClassVar[str] = "[temporal] says where runs on Temporal go"

    address: str = key(
        check=check.temporal_address,
        fix=_TEMPORAL_FIX,
        missing=(
            "has no address",
            'add address = "host:port" (the Temporal server\'s gRPC address)',
        ),
    )
    task_queue: str = key("trio-delegate", check=check.non_empty_text, fix=_TEMPORAL_FIX)
    namespace: str = key("default", check=check.non_empty_text, fix=_TEMPORAL_FIX)


@attrs.frozen(kw_only=True)
class _Subagent:
    """The keys of every ``[[subagents]]`` table."""

    keys_say: ClassVar[str]

    name: str = key(check=check.subagent_name)
    description: str = key(
        "", check=check.text, fix='write description = "what this subagent is for"'
    )
    timeout_seconds: TimeoutSetting = key(INHERIT, check=check.deadline)
    budget: Budget | None = key(None, check=budget, fix=_BUDGET_FIX)
    asks: bool = key(
        False,
        check=check.boolean,
        fix="write asks = true (its runner may ask its parent questions) or asks = false",
    )
    final_schema: Any = key(
        None,
        check=check.json_schema,
        fix='write a JSON Schema as a TOML table, e.g. final_schema = { type = "object", '
        'properties = { summary = { type = "string" } } }',
    )


@final
@attrs.frozen(kw_only=True)
class CommandSubagent(_Subagent):
    """A program run for each run: task on stdin, result on stdout."""

    keys_say: ClassVar[str] = "a command subagent takes these keys"

    command: tuple[str, ...] = key(
        check=check.command, fix='write command = ["program", "arg", ...]'
    )
    cwd: str | None = key(None, check=check.path_text, fix='write cwd = "dir"')
    env: Mapping[str, str] = key(attrs.Factory(dict), check=check.env, fix=_ENV_FIX)
    kill_grace_seconds: float = key(2.0, check=check.grace_seconds)


@final
@attrs.frozen(kw_only=True)
class PythonSubagent(_Subagent):
    """An async runner imported from a module; only it can delegate further."""

    keys_say: ClassVar[str] = "a Python subagent takes these keys"

    python: str = key(check=check.module_function)
    children: tuple[str, ...] = key((), check=check.names, fix='write children = ["name", ...]')


@final
@attrs.frozen(kw_only=True)
class AgentSubagent(_Subagent):
    """An agent CLI (``kind = "claude"`` or ``"codex"``) run headless for each run."""

    keys_say: ClassVar[str] = "an agent CLI subagent takes these keys"

    kind: str = key(
        check=check.agent_kind,
        fix='write kind = "claude" (Claude Code), "codex" (Codex), "model" (a model with '
        'instructions and tools) or "temporal"',
    )
    program: str | None = key(
        None, check=check.path_text, fix='write program = "/usr/local/bin/claude"'
    )
    args: tuple[str, ...] = key(
        (), check=check.program_args, fix='write e.g. args = ["--permission-mode", "acceptEdits"]'
    )
    model: str | None = key(None, check=check.model, fix='write e.g. model = "sonnet"')
    cwd: str | None = key(None, check=check.path_text, fix='write cwd = "dir"')
    env: Mapping[str, str] = key(attrs.Factory(dict), check=check.env, fix=_ENV_FIX)
    kill_grace_seconds: float = key(2.0, check=check.grace_seconds)


@final
@attrs.frozen(kw_only=True)
class TemporalSubagent(_Subagent):
    """A subagent whose runs go to the Temporal workers of ``[temporal]``."""

    keys_say: ClassVar[str] = "a subagent run on Temporal workers takes these keys"

    kind: str = key(check=lambda value: value)  # "temporal": how it was picked
    lease_seconds: float | _Default | None = key(DEFAULT, check=check.deadline)
    heartbeat_timeout_seconds: float | _Default = key(
        DEFAULT, check=check.seconds("write e.g. heartbeat_timeout_seconds = 10")
    )
    max_attempts: int | _Default = key(
        DEFAULT, check=check.positive_int, fix="write e.g. max_attempts = 3"
    )


@final
@attrs.frozen(kw_only=True)
class ModelSubagent(_Subagent):
    """A model with instructions and tools (``kind = "model"``, ``td.model_runner``)."""

    keys_say: ClassVar[str] = "a model subagent takes these keys"

    kind: str = key(check=lambda value: value)  # "model": how it was picked
    model: str = key(
        check=check.non_empty_text,
        fix='write e.g. model = "anthropic:claude-sonnet-4-5" or "openai:gpt-5"',
        missing=("has no model", 'add model = "<provider>:<model id>", e.g. "openai:gpt-5"'),
    )
    instructions: str = key("", check=check.text, fix='write instructions = "the system prompt"')
    tools: tuple[str, ...] = key(
        (), check=check.module_functions, fix='write tools = ["module:function", ...]'
    )
    children: tuple[str, ...] = key((), check=check.names, fix='write children = ["name", ...]')
    max_turns: int = key(20, check=check.positive_int, fix="write e.g. max_turns = 20")
    base_url: str | None = key(
        None, check=check.non_empty_text, fix='write e.g. base_url = "http://127.0.0.1:8000/v1"'
    )
    api_key_env: str | None = key(
        None,
        check=check.optional_text,
        fix='write e.g. api_key_env = "OPENAI_API_KEY", or "" for a server that needs no key',
    )
    api: str = key("responses", check=check.model_api, fix='write api = "responses" or "chat"')
    mcp_servers: tuple[Mapping[str, Any], ...] = key(
        (),
        check=check.mcp_servers,
        fix='write e.g. mcp_servers = [{ command = ["uvx", "mcp-server-fetch"] }]',
    )
    prices: Prices | None = key(
        None, check=prices, fix="write e.g. prices = { input = 3.0, output = 15.0 }"
    )


SubagentSection = (
    CommandSubagent | PythonSubagent | AgentSubagent | TemporalSubagent | ModelSubagent
)

#: The subagents that may delegate: their children are checked against the file.
DELEGATING: Final = (PythonSubagent, ModelSubagent)


def _subagent(table: Any) -> SubagentSection:
    """One ``[[subagents]]`` table, as the class its runner key picks.

    Raises:
        Problem: it has no name or a malformed one, or not one runner key.
        ClassValidationError: its keys are wrong.
    """
    if "name" not in table:
        raise Problem("has no name", 'add name = "..." (lowercase letters first)')
    try:
        check.subagent_name(table["name"])
    except Problem as problem:
        raise Problem(problem.problem, problem.fix, at=("name",)) from None
    present = [name for name in ("command", "python", "kind") if name in table]
    if len(present) > 1:
        raise Problem(
            f"has both {present[0]} and {present[1]}",
            "a subagent is a command, a Python runner or an agent CLI (kind): keep one",
        )
    if not present:
        raise Problem(
            "has neither command nor python nor kind",
            'add command = ["program", "arg", ...] (task on stdin, result on stdout), '
            'python = "module:function" (an async runner), kind = "claude" / "codex" '
            '(an agent CLI) or kind = "model" (a model with instructions and tools)',
        )
    picked: type[SubagentSection]
    if present == ["command"]:
        picked = CommandSubagent
    elif present == ["python"]:
        picked = PythonSubagent
    elif table["kind"] == "temporal":
        picked = TemporalSubagent
    elif table["kind"] == "model":
        picked = ModelSubagent
    else:
        picked = AgentSubagent
    return converter.structure(table, picked)


def _subagents(value: Any) -> tuple[SubagentSection, ...]:
    """The ``[[subagents]]`` tables, each named once.

    Raises:
        Problem: not a list of tables, an empty one, a name taken twice or
            a child that is not in the file.
        IterableValidationError: a table's keys are wrong.
    """
    if not isinstance(value, list) or not all(isinstance(table, dict) for table in value):
        raise Problem(
            f"must be an array of tables, got {describe(value)}",
            "write one [[subagents]] table per subagent",
        )
    if not value:
        # A server with nothing to delegate to: as if the tables were missing.
        raise Problem("is empty: there are no subagents", _NO_SUBAGENTS[1])
    subagents = tuple(structure_items(value, _subagent))
    _check_names(subagents)
    return subagents


def _check_names(subagents: tuple[SubagentSection, ...]) -> None:
    """Every subagent has its own name, and names only subagents of the file as children.

    Raises:
        Problem: a name taken twice, or a child that is not in the file.
    """
    names: dict[str, int] = {}
    for index, subagent in enumerate(subagents):
        if subagent.name in names:
            raise Problem(
                f"{subagent.name!r} is already the name of subagents[{names[subagent.name]}]",
                "give every subagent its own name",
                at=(index, "name"),
            )
        names[subagent.name] = index
    for index, subagent in enumerate(subagents):
        children = subagent.children if isinstance(subagent, DELEGATING) else ()
        for position, child in enumerate(children):
            if child not in names:
                raise Problem(
                    f"{cut(child)!r} is not a subagent in this file",
                    cut(f"name one of: {', '.join(names)}"),
                    at=(index, "children", position),
                )


@final
@attrs.frozen(kw_only=True)
class FileSections:
    """The whole file."""

    keys_say: ClassVar[str] = "the file takes these tables"

    runtime: Any = key(
        attrs.Factory(RuntimeSection), table=RuntimeSection, fix="write it as [runtime]"
    )
    server: ServerSection = key(
        attrs.Factory(ServerSection), table=ServerSection, fix="write it as [server]"
    )
    temporal: TemporalSettings | None = key(
        None, table=TemporalSettings, fix="write it as [temporal]"
    )
    subagents: tuple[SubagentSection, ...] = key(
        check=_subagents,
        missing=_NO_SUBAGENTS,
    )
