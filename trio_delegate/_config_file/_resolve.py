"""What a configuration needs the disk or an import for: folders, programs, runners, the store.

Each function raises :class:`Problem` with ``at`` naming the key inside the
subagent's table (``("command", 0)``), so the caller adds where the table is.
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from .._checks import describe
from .._config import Config
from .._errors import InvalidArgumentsError
from .._runners._agents import AgentCLIRunner
from .._runners._command import CommandRunner
from .._stores._postgres import is_postgres_dsn
from .._subagent import Runner, _is_async_callable
from ._problems import Problem, cut
from ._reading import special_kind
from ._sections import (
    DEFAULT,
    AgentSubagent,
    CommandSubagent,
    ModelSubagent,
    TemporalSettings,
    TemporalSubagent,
)

__all__ = [
    "agent_runner",
    "command_runner",
    "model_runner_of",
    "python_runner",
    "store_path",
    "temporal_runner",
]

#: Where an agent CLI comes from when `program` is not given and it is not on
#: PATH: the executables bundled in these Python packages.
_BUNDLED: Final = {
    "claude": ("claude_agent_sdk", "_bundled/claude", "pip install claude-agent-sdk"),
    "codex": ("codex_cli_bin", "bin/codex", "pip install openai-codex-cli-bin"),
}


def _under(base: Path, value: str) -> Path:
    """*value* as a path, relative ones counting from *base*."""
    try:
        path = Path(value).expanduser()
    except RuntimeError:  # "~someone" with no such user: a name like any other
        path = Path(value)
    return base / path


def store_path(base: Path, value: str) -> Path | str:
    """The SQLite file ``[runtime] store`` names (relative to *base*), or its PostgreSQL URI.

    Raises:
        Problem: the file is a folder, a FIFO, a socket or a device.
    """
    if is_postgres_dsn(value):
        return value
    path = _under(base, value)
    if path.is_dir():
        raise Problem(f"{cut(value)!r} is a folder", 'name a file in it, e.g. "runs.db"')
    kind = special_kind(path)
    if kind is not None:
        # SQLite would block on a FIFO, or fail on it after the server started.
        raise Problem(
            f"{cut(value)!r} is {kind}, not a regular file",
            'name an SQLite file (it is created if missing), e.g. "runs.db"',
        )
    return path


def _folder(base: Path, value: str | None) -> Path:
    if value is None:
        return base
    cwd = _under(base, value)
    if not cwd.is_dir():
        raise Problem(
            f"{cut(value)!r} is not a directory (resolved to {cut(str(cwd))})",
            "relative paths count from the configuration file's directory: fix the path",
            at=("cwd",),
        )
    return cwd


def _find(program: str, cwd: Path, env: Mapping[str, str]) -> str | None:
    """*program*'s executable: a path (relative to *cwd*), else a name on the PATH."""
    if os.sep in program or (os.altsep and os.altsep in program):
        found = _under(cwd, program)
        return str(found) if found.is_file() and os.access(found, os.X_OK) else None
    return shutil.which(program, path=env.get("PATH", os.environ.get("PATH", os.defpath)))


def command_runner(table: CommandSubagent, base: Path, config: Config) -> CommandRunner:
    """A command subagent's runner, its program found.

    Raises:
        Problem: its ``cwd`` is not a folder, or its program is not found.
    """
    cwd = _folder(base, table.cwd)
    try:
        runner = CommandRunner(
            table.command,
            cwd=cwd,
            env=table.env,
            max_output_bytes=config.max_result_bytes,
            kill_grace_seconds=table.kill_grace_seconds,
        )
    except InvalidArgumentsError as exc:  # checked as the keys were read: a last guard
        raise Problem(exc.message, "fix the value it names") from None
    program = runner.command[0]
    if _find(program, cwd, runner.env) is None:
        if os.sep in program or (os.altsep and os.altsep in program):
            found = _under(cwd, program)
            raise Problem(
                f"the program {cut(program)!r} ({cut(str(found))}) is not an executable file",
                "fix the path (relative to cwd), or make the file executable (chmod +x)",
                at=("command", 0),
            )
        raise Problem(
            f"the program {cut(program)!r} was not found on PATH",
            "install it, fix its name, or give its path",
            at=("command", 0),
        )
    return runner


def agent_runner(table: AgentSubagent, base: Path) -> AgentCLIRunner:
    """An agent CLI subagent's runner: its program given, on PATH, or bundled.

    Raises:
        Problem: its ``cwd`` is not a folder, or its program is not found.
    """
    cwd = _folder(base, table.cwd)
    args: Any = table.args  # AgentCLIRunner converts with tuple(), which mypy cannot follow
    return AgentCLIRunner(
        table.kind,  # type: ignore[arg-type]  # one of AGENT_KINDS, checked when read
        _agent_program(table.kind, table.program, cwd, table.env),
        args=args,
        model=table.model,
        cwd=str(cwd),
        env=dict(table.env),
        kill_grace_seconds=table.kill_grace_seconds,
    )


def _agent_program(kind: str, value: str | None, cwd: Path, env: Mapping[str, str]) -> str:
    """The CLI's executable: *value*, else on PATH, else the one a Python package bundles."""
    if value is not None:
        found = _find(value, cwd, env)
        if found is None:
            raise Problem(
                f"{cut(value)!r} is not an executable file, nor a program on PATH",
                "fix the path (relative to this file's directory), or remove the key to "
                f"use {kind} from PATH",
                at=("program",),
            )
        return found
    found = _find(kind, cwd, env)
    if found is not None:
        return found
    module, inside, install = _BUNDLED[kind]
    try:
        package = importlib.import_module(module)
    except ImportError:
        package = None
    bundled = Path(package.__file__ or "").parent / inside if package is not None else None
    if bundled is None or not (bundled.is_file() and os.access(bundled, os.X_OK)):
        raise Problem(
            f"{kind!r} was not found on PATH, and no Python package here bundles it",
            f'install it ({install}), or give its path with program = "..."',
            at=("program",),
        )
    return str(bundled)


def python_runner(spec: str, base: Path) -> Runner:
    """The async runner *spec* (``module:function``) names, imported.

    Raises:
        Problem: the module does not import, lacks the name, or the name is
            not an async runner.
    """
    value = _import(spec, base, ("python",))
    if not _is_async_callable(value):
        raise Problem(
            f"{cut(spec)!r} is {describe(value)}, not an async runner",
            "point it at `async def runner(ctx) -> result`",
            at=("python",),
        )
    runner: Runner = value
    return runner


def model_runner_of(table: ModelSubagent, base: Path) -> Runner:
    """A ``kind = "model"`` subagent's runner, its tools imported.

    Raises:
        Problem: a tool does not import or is no function a model can call,
            or a key is malformed (the model, the address...), naming it.
    """
    from .._runners._model import model_runner

    tools = [_import(spec, base, ("tools", index)) for index, spec in enumerate(table.tools)]
    servers = [_mcp_server(server, base, index) for index, server in enumerate(table.mcp_servers)]
    try:
        return model_runner(
            table.model,
            instructions=table.instructions,
            tools=tools,
            max_turns=table.max_turns,
            base_url=table.base_url,
            api_key_env=table.api_key_env,
            api=table.api,  # type: ignore[arg-type]  # "responses" or "chat", checked when read
            mcp_servers=servers,
            prices=table.prices,
        )
    except InvalidArgumentsError as exc:
        # The message names the argument: the key of the same name.
        named = next(
            (
                name
                for name in (
                    "mcp_servers",
                    "tools",
                    "model",
                    "instructions",
                    "base_url",
                    "api_key_env",
                    "api",
                )
                if f"({name}=" in exc.message or f"{name}=..." in exc.message
            ),
            "model",
        )
        raise Problem(exc.message, "fix the value it names", at=(named,)) from None


def _mcp_server(server: Mapping[str, Any], base: Path, index: int) -> Any:
    """What ``mcp.Client`` connects to for one ``mcp_servers`` entry (checked when read).

    Raises:
        Problem: the mcp SDK is not installed, or the entry's ``cwd`` is no folder.
    """
    try:
        from mcp import StdioServerParameters
    except ImportError:
        raise Problem(
            "MCP servers need the mcp SDK, which is not installed",
            "install the [mcp] extra of trio-delegate",
            at=("mcp_servers",),
        ) from None
    if "url" in server:
        return server["url"]
    try:
        cwd = _folder(base, server.get("cwd"))
    except Problem as problem:
        raise Problem(problem.problem, problem.fix, at=("mcp_servers", index, "cwd")) from None
    program, *args = server["command"]
    return StdioServerParameters(
        command=program, args=args, env=dict(server["env"]) if "env" in server else None, cwd=cwd
    )


def _import(spec: str, base: Path, at: tuple[str | int, ...]) -> Any:
    """What *spec* (``module:name``) names, imported; problems are said about the key *at*."""
    module_name, _, attribute = spec.partition(":")
    if str(base) not in sys.path:
        # Last, so a file next to the configuration never shadows an
        # installed module of the same name.
        sys.path.append(str(base))
    try:
        value: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise Problem(
            f"cannot import {cut(module_name)!r}: {type(exc).__name__}: {cut(str(exc))}",
            f"check the module name; it is searched on PYTHONPATH, in the installed "
            f"packages and in {base}",
            at=at,
        ) from None
    for part in attribute.split("."):
        if not hasattr(value, part):
            raise Problem(
                f"module {cut(module_name)!r} has no {cut(attribute)!r}",
                "check the name after the colon",
                at=at,
            )
        value = getattr(value, part)
    return value


def temporal_runner(table: TemporalSubagent, settings: TemporalSettings | None) -> Runner:
    """A ``kind = "temporal"`` subagent's runner: its runs go to the workers of ``[temporal]``.

    Raises:
        Problem: there is no ``[temporal]`` table.
    """
    if settings is None:
        raise Problem(
            '"temporal" needs a [temporal] table saying where the workers are',
            'add [temporal] with address = "host:port" (and task_queue, namespace if not '
            "the defaults)",
            at=("kind",),
        )
    keys = ("lease_seconds", "heartbeat_timeout_seconds", "max_attempts")
    options = {name: getattr(table, name) for name in keys if getattr(table, name) is not DEFAULT}
    # Imported only for such a subagent: the Temporal SDK loads on first use.
    from ..adapters.temporal import temporal_runner

    try:
        return temporal_runner(
            settings.address,
            task_queue=settings.task_queue,
            namespace=settings.namespace,
            **options,
        )
    except InvalidArgumentsError as exc:  # checked as the keys were read: a last guard
        name = next((name for name in options if name in exc.message), "kind")
        raise Problem(exc.message, "fix the value it names", at=(name,)) from None
