"""The configuration file of ``trio-delegate serve``: TOML, checked before anything starts.

The file has a ``[runtime]`` table (any :class:`Config` field), a
``[server]`` table (how the MCP server answers) and one ``[[subagents]]``
table per subagent, each either a command (``command = [...]``, see
:class:`CommandRunner`), a Python runner (``python = "module:function"``)
or an agent CLI (``kind = "claude"`` or ``kind = "codex"``), or runs on Temporal workers
(``kind = "temporal"``, with a ``[temporal]`` table saying where). Every problem is reported as one
:class:`ConfigError` naming the file, the key (``subagents[1].command``) and
the fix; relative paths are resolved against the file's directory.
"""

from __future__ import annotations

import difflib
import importlib
import math
import os
import shutil
import stat
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, NoReturn, final

import attrs

from ._checks import describe
from ._config import INHERIT, Config, TimeoutSetting
from ._errors import ConfigError, InvalidArgumentsError
from ._runners._agents import AGENT_KINDS, AgentCLIRunner
from ._runners._command import CommandRunner
from ._schema import compile_result_schema
from ._stores._postgres import is_postgres_dsn, mask_dsn
from ._subagent import NAME_PATTERN, Runner, Subagent, _is_async_callable

__all__ = [
    "ConfigError",
    "ServerConfig",
    "TemporalSettings",
    "load_server_config",
    "owner_problem",
]

_TOP_LEVEL: Final = ("runtime", "server", "subagents", "temporal")
_TEMPORAL_KEYS: Final = ("address", "task_queue", "namespace")
# A subagent whose runs go to Temporal workers: how its runs are watched.
_TEMPORAL_SUBAGENT_KEYS: Final = (
    "kind",
    "lease_seconds",
    "heartbeat_timeout_seconds",
    "max_attempts",
)
_SERVER_KEYS: Final = ("foreground_limit_seconds", "progress_interval_seconds", "owner")
#: The defaults of ``[server]`` (those of trio_delegate.mcp.build_server; not
#: imported from there, which would need the MCP SDK).
DEFAULT_FOREGROUND_LIMIT_SECONDS: Final = 45.0
DEFAULT_PROGRESS_INTERVAL_SECONDS: Final = 5.0
_COMMON_KEYS: Final = ("name", "description", "timeout_seconds", "final_schema")
_COMMAND_KEYS: Final = ("command", "cwd", "env", "kill_grace_seconds")
# Only a Python runner can delegate further (through ctx.parent).
_PYTHON_KEYS: Final = ("python", "children")
_AGENT_KEYS: Final = ("kind", "program", "args", "model", "cwd", "env", "kill_grace_seconds")
#: Where an agent CLI comes from when `program` is not given and it is not on
#: PATH: the executables bundled in these Python packages.
_BUNDLED: Final = {
    "claude": ("claude_agent_sdk", "_bundled/claude", "pip install claude-agent-sdk"),
    "codex": ("codex_cli_bin", "bin/codex", "pip install openai-codex-cli-bin"),
}
#: What a timeout setting says for "no deadline": TOML has no null.
_NO_DEADLINE: Final = "none"


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
        temporal: where ``kind = "temporal"`` subagents' runs go, and what
            ``trio-delegate temporal-worker`` polls (``[temporal]``), if anywhere.
    """

    path: Path
    config: Config
    subagents: tuple[Subagent, ...]
    store: Path | str | None = None
    foreground_limit_seconds: float | None = DEFAULT_FOREGROUND_LIMIT_SECONDS
    progress_interval_seconds: float = DEFAULT_PROGRESS_INTERVAL_SECONDS
    owner: str | None = None
    temporal: TemporalSettings | None = None


@final
@attrs.frozen
class TemporalSettings:
    """Where runs on Temporal go (``[temporal]``): the server, task queue and namespace."""

    address: str
    task_queue: str = "trio-delegate"
    namespace: str = "default"


#: Largest configuration file read: far above any real one.
MAX_CONFIG_BYTES: Final = 1024 * 1024


def load_server_config(path: str | os.PathLike[str]) -> ServerConfig:
    """Read and check a server configuration file.

    Python runners are imported here, so a configuration that loads is one
    the server can start with. The file's directory is added (last) to the
    module search path for them.

    Raises:
        ConfigError: for the first problem found, naming the key and the fix.
    """
    return _Loader(Path(path)).load()


def store_in_config(path: str | os.PathLike[str]) -> Path | str | None:
    """Where a server configuration records its runs (``[runtime] store``), resolved
    as ``serve`` resolves it (a file relative to the configuration's folder).

    Reads that key only: nothing of the subagents is imported.

    Raises:
        ConfigError: the file cannot be read, or the key is malformed.
    """
    return _Loader(Path(path)).store_only()


@attrs.define
class _Loader:
    path: Path
    # The subagent being read, named in errors about its keys.
    current: str | None = None
    # [temporal], once read: kind = "temporal" subagents need it.
    temporal_settings: TemporalSettings | None = None

    @property
    def base(self) -> Path:
        return self.path.resolve().parent

    def fail(self, key: str | None, problem: str, fix: str) -> NoReturn:
        raise ConfigError(self.path, key, problem, fix, subagent=self.current)

    # -- the file ----------------------------------------------------------------

    def read(self) -> dict[str, Any]:
        try:
            data = _read_regular_file(self.path, MAX_CONFIG_BYTES + 1)
        except FileNotFoundError:
            self.fail(None, "no such file", "pass the path of an existing TOML file to --config")
        except _NotRegular as exc:
            self.fail(
                None,
                f"is {exc.args[0]}, not a regular file",
                "pass the path of the server's TOML configuration file to --config",
            )
        except OSError as exc:
            self.fail(None, f"cannot be read: {exc}", "check the path and its permissions")
        if len(data) > MAX_CONFIG_BYTES:
            self.fail(
                None,
                f"is larger than {MAX_CONFIG_BYTES // 1024} KiB",
                "pass the server's configuration file, not another file",
            )
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            self.fail(None, f"is not UTF-8 text: {exc}", "save it as UTF-8, as TOML requires")
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            self.fail(None, f"is not valid TOML: {exc}", "fix the syntax at that place")
        except RecursionError:
            # tomllib parses nested arrays and inline tables recursively.
            self.fail(
                None,
                "nests arrays or inline tables too deeply to read",
                "a server configuration needs a few levels at most: flatten it",
            )
        except ValueError as exc:
            # An integer with more digits than Python converts (4,300 by default).
            self.fail(
                None, f"holds a number that cannot be read: {str(exc)[:200]}", "write it shorter"
            )

    def store_only(self) -> Path | str | None:
        runtime = self.read().get("runtime", {})
        if not isinstance(runtime, dict) or "store" not in runtime:
            return None
        return self.store(runtime["store"], "runtime.store")

    def load(self) -> ServerConfig:
        data = self.read()
        self.check_keys(data, _TOP_LEVEL, None, "the file takes these tables")
        runtime = data.get("runtime", {})
        config = self.runtime(runtime)
        store = self.store(runtime["store"], "runtime.store") if "store" in runtime else None
        limit, interval, owner = self.server(data.get("server", {}))
        if "temporal" in data:
            self.temporal_settings = self.temporal(data["temporal"])
        subagents = self.subagents(data.get("subagents"), config)
        return ServerConfig(
            self.path, config, subagents, store, limit, interval, owner, self.temporal_settings
        )

    def check_keys(
        self, table: Mapping[str, Any], allowed: tuple[str, ...], prefix: str | None, what: str
    ) -> None:
        for key in table:
            if key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1)
                # One sentence per part: the likely fix first, then what is allowed.
                hint = f"did you mean {close[0]!r}? Otherwise remove it: " if close else ""
                self.fail(
                    _join(prefix, key),
                    "unknown key",
                    f"{hint}{what}: {', '.join(allowed)}",
                )

    # -- [runtime] -----------------------------------------------------------------

    def runtime(self, table: Any) -> Config:
        if not isinstance(table, dict):
            self.fail("runtime", f"must be a table, got {describe(table)}", "write it as [runtime]")
        fields = attrs.fields_dict(Config)
        self.check_keys(
            table,
            (*fields, "store"),
            "runtime",
            "[runtime] takes the fields of trio_delegate.Config and store",
        )
        values: dict[str, Any] = {}
        for key, value in table.items():
            where = f"runtime.{key}"
            if key == "store":
                continue  # read by store()
            if key == "subagent_timeout_seconds":
                value = self.timeout(value, where)
            try:
                Config(**{key: value})
            except InvalidArgumentsError as exc:
                default = fields[key].default
                self.fail(
                    where,
                    _strip_field(exc.message, f"Config.{key}"),
                    f"change it, or remove it to use the default ({_toml(default)})",
                )
            values[key] = value
        return Config(**values)

    # -- [server] ------------------------------------------------------------------

    def server(self, table: Any) -> tuple[float | None, float, str | None]:
        if not isinstance(table, dict):
            self.fail("server", f"must be a table, got {describe(table)}", "write it as [server]")
        self.check_keys(table, _SERVER_KEYS, "server", "[server] takes these keys")
        limit: float | None = DEFAULT_FOREGROUND_LIMIT_SECONDS
        if "foreground_limit_seconds" in table:
            limit = self.timeout(
                table["foreground_limit_seconds"], "server.foreground_limit_seconds"
            )
        interval = DEFAULT_PROGRESS_INTERVAL_SECONDS
        if "progress_interval_seconds" in table:
            value = self.timeout(
                table["progress_interval_seconds"], "server.progress_interval_seconds"
            )
            if value is None:
                self.fail(
                    "server.progress_interval_seconds",
                    f'must be a number of seconds > 0, got "{_NO_DEADLINE}"',
                    f"write e.g. {DEFAULT_PROGRESS_INTERVAL_SECONDS:g}",
                )
            interval = value
        owner = table.get("owner")
        if owner is not None and (problem := owner_problem(owner)) is not None:
            self.fail(
                "server.owner",
                problem,
                'write e.g. owner = "delegate", or remove the key for a new owner per connection',
            )
        return limit, interval, owner

    # -- [temporal] ----------------------------------------------------------------

    def temporal(self, table: Any) -> TemporalSettings:
        if not isinstance(table, dict):
            self.fail(
                "temporal", f"must be a table, got {describe(table)}", "write it as [temporal]"
            )
        self.check_keys(
            table, _TEMPORAL_KEYS, "temporal", "[temporal] says where runs on Temporal go"
        )
        if "address" not in table:
            self.fail(
                "temporal",
                "has no address",
                'add address = "host:port" (the Temporal server\'s gRPC address)',
            )
        values: dict[str, str] = {}
        for key in _TEMPORAL_KEYS:
            if key not in table:
                continue
            value = table[key]
            if not isinstance(value, str) or not value.strip() or "\0" in value:
                self.fail(
                    f"temporal.{key}",
                    f"must be a non-empty string, got {_toml(value)}",
                    'write e.g. address = "127.0.0.1:7233", task_queue = "trio-delegate"',
                )
            if key == "address" and ":" not in value:
                self.fail(
                    "temporal.address",
                    f"{_toml(value)} has no port",
                    'write it as "host:port", e.g. "127.0.0.1:7233"',
                )
            values[key] = value
        return TemporalSettings(**values)

    def store(self, value: Any, where: str) -> Path | str:
        """The SQLite file (relative to this file's folder), or a PostgreSQL URI."""
        if not isinstance(value, str) or not value.strip():
            self.fail(
                where,
                f"must be the path of an SQLite file or a postgresql:// URI, got {_toml(value)}",
                'write e.g. store = "runs.db" (relative to this file), or remove the key '
                "to keep runs in memory only",
            )
        if is_postgres_dsn(value):
            if mask_dsn(value) != value:
                self.fail(
                    where,
                    f"holds a password ({mask_dsn(value)!r}); a configuration file is no place "
                    "for one",
                    "remove it from the URI and give it to the server in PGPASSWORD, a "
                    "password file (~/.pgpass) or a service file",
                )
            return value
        path = self.base / Path(value).expanduser()
        if path.is_dir():
            self.fail(where, f"{value!r} is a folder", 'name a file in it, e.g. "runs.db"')
        kind = _special_kind(path)
        if kind is not None:
            # SQLite would block on a FIFO, or fail on it after the server started.
            self.fail(
                where,
                f"{value!r} is {kind}, not a regular file",
                'name an SQLite file (it is created if missing), e.g. "runs.db"',
            )
        return path

    def timeout(self, value: Any, where: str) -> float | None:
        if value == _NO_DEADLINE:
            return None
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or not value > 0
        ):
            self.fail(
                where,
                f"must be a finite number of seconds > 0 or {_NO_DEADLINE!r}, got {_toml(value)}",
                f'write e.g. 120, or "{_NO_DEADLINE}" for no deadline',
            )
        return float(value)

    # -- [[subagents]] -----------------------------------------------------------------

    def subagents(self, tables: Any, config: Config) -> tuple[Subagent, ...]:
        if tables is None:
            self.fail(
                None,
                "there are no subagents",
                "add at least one [[subagents]] table with a name and a command or python key",
            )
        if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
            self.fail(
                "subagents",
                f"must be an array of tables, got {describe(tables)}",
                "write one [[subagents]] table per subagent",
            )
        names: dict[str, int] = {}
        subagents = []
        for index, table in enumerate(tables):
            subagent = self.subagent(index, table, config)
            self.current = None
            if subagent.name in names:
                self.fail(
                    f"subagents[{index}].name",
                    f"{subagent.name!r} is already the name of subagents[{names[subagent.name]}]",
                    "give every subagent its own name",
                )
            names[subagent.name] = index
            subagents.append(subagent)
        for index, subagent in enumerate(subagents):
            for position, child in enumerate(subagent.children):
                if child not in names:
                    self.fail(
                        f"subagents[{index}].children[{position}]",
                        f"{child!r} is not a subagent in this file",
                        f"name one of: {', '.join(names)}",
                    )
        return tuple(subagents)

    def subagent(self, index: int, table: dict[str, Any], config: Config) -> Subagent:
        prefix = f"subagents[{index}]"
        name = table.get("name")
        if name is None:
            self.fail(prefix, "has no name", 'add name = "..." (lowercase letters first)')
        if not isinstance(name, str) or NAME_PATTERN.fullmatch(name) is None:
            self.fail(
                f"{prefix}.name",
                f"{_toml(name)} is not a valid subagent name",
                "use a lowercase letter, then up to 63 lowercase letters, digits, '_' or '-'",
            )
        self.current = name
        present = [key for key in ("command", "python", "kind") if key in table]
        if len(present) > 1:
            self.fail(
                prefix,
                f"has both {present[0]} and {present[1]}",
                "a subagent is a command, a Python runner or an agent CLI (kind): keep one",
            )
        allowed: tuple[str, ...]
        if "command" in table:
            allowed = (*_COMMON_KEYS, *_COMMAND_KEYS)
            what = "a command subagent takes these keys"
        elif "python" in table:
            allowed = (*_COMMON_KEYS, *_PYTHON_KEYS)
            what = "a Python subagent takes these keys"
        elif table.get("kind") == "temporal":
            allowed = (*_COMMON_KEYS, *_TEMPORAL_SUBAGENT_KEYS)
            what = "a subagent run on Temporal workers takes these keys"
        elif "kind" in table:
            allowed = (*_COMMON_KEYS, *_AGENT_KEYS)
            what = "an agent CLI subagent takes these keys"
        else:
            self.fail(
                prefix,
                "has neither command nor python nor kind",
                'add command = ["program", "arg", ...] (task on stdin, result on stdout), '
                'python = "module:function" (an async runner) or kind = "claude" / "codex" '
                "(an agent CLI)",
            )
        self.check_keys(table, allowed, prefix, what)
        runner: Runner | CommandRunner | AgentCLIRunner
        if "command" in table:
            runner = self.command(prefix, table, config)
        elif "python" in table:
            runner = self.python_runner(f"{prefix}.python", table["python"])
        elif table["kind"] == "temporal":
            runner = self.temporal_runner(prefix, table)
        else:
            runner = self.agent(prefix, table)
        description = table.get("description", "")
        if not isinstance(description, str):
            self.fail(
                f"{prefix}.description",
                f"must be a string, got {_toml(description)}",
                'write description = "what this subagent is for"',
            )
        timeout: TimeoutSetting = INHERIT
        if "timeout_seconds" in table:
            timeout = self.timeout(table["timeout_seconds"], f"{prefix}.timeout_seconds")
        final_schema = table.get("final_schema")
        if final_schema is not None:
            try:
                compile_result_schema(final_schema)
            except InvalidArgumentsError as exc:
                self.fail(
                    f"{prefix}.final_schema",
                    _strip_field(exc.message, "final_schema"),
                    "write a JSON Schema as a TOML table, e.g. final_schema = { type = "
                    '"object", properties = { summary = { type = "string" } } }',
                )
        children = table.get("children", [])
        if not isinstance(children, list) or not all(isinstance(c, str) for c in children):
            self.fail(
                f"{prefix}.children",
                f"must be a list of subagent names, got {_toml(children)}",
                'write children = ["name", ...]',
            )
        try:
            return Subagent(
                name,
                runner,
                description=description,
                timeout_seconds=timeout,
                final_schema=final_schema,
                children=children,
            )
        except InvalidArgumentsError as exc:
            self.fail(prefix, exc.message, "fix the value it names")

    def command(self, prefix: str, table: dict[str, Any], config: Config) -> CommandRunner:
        command = table["command"]
        where = f"{prefix}.command"
        if isinstance(command, str):
            self.fail(
                where,
                f"must be a list of strings, got the string {command!r}",
                "write the program and its arguments as a list: "
                f"command = {_toml(command.split())}",
            )
        cwd = self.cwd(f"{prefix}.cwd", table.get("cwd"))
        env = self.env(f"{prefix}.env", table.get("env", {}))
        options: dict[str, Any] = {}
        if "kill_grace_seconds" in table:
            options["kill_grace_seconds"] = table["kill_grace_seconds"]
        try:
            runner = CommandRunner(
                command,
                cwd=cwd,
                env=env,
                max_output_bytes=config.max_result_bytes,
                **options,
            )
        except InvalidArgumentsError as exc:
            key = "kill_grace_seconds" if exc.message.startswith("kill_grace") else "command"
            if exc.message.startswith("env"):
                key = "env"
            self.fail(f"{prefix}.{key}", exc.message, "fix the value as described")
        self.check_program(where, runner)
        return runner

    def temporal_runner(self, prefix: str, table: dict[str, Any]) -> Runner:
        """A ``kind = "temporal"`` subagent: its runs go to the workers of ``[temporal]``."""
        settings = self.temporal_settings
        if settings is None:
            self.fail(
                f"{prefix}.kind",
                '"temporal" needs a [temporal] table saying where the workers are',
                'add [temporal] with address = "host:port" (and task_queue, namespace if not '
                "the defaults)",
            )
        options: dict[str, Any] = {}
        for key in ("lease_seconds", "heartbeat_timeout_seconds"):
            if key in table:
                options[key] = self.timeout(table[key], f"{prefix}.{key}")
        if "heartbeat_timeout_seconds" in options and options["heartbeat_timeout_seconds"] is None:
            self.fail(
                f"{prefix}.heartbeat_timeout_seconds",
                f'must be a number of seconds > 0, got "{_NO_DEADLINE}"',
                "write e.g. heartbeat_timeout_seconds = 10",
            )
        if "max_attempts" in table:
            options["max_attempts"] = table["max_attempts"]
        # Imported only for such a subagent: the Temporal SDK loads on first use.
        from .adapters.temporal import temporal_runner

        try:
            runner: Runner = temporal_runner(
                settings.address,
                task_queue=settings.task_queue,
                namespace=settings.namespace,
                **options,
            )
        except InvalidArgumentsError as exc:
            key = next((k for k in options if k in exc.message), "kind")
            self.fail(f"{prefix}.{key}", exc.message, "fix the value it names")
        return runner

    def agent(self, prefix: str, table: dict[str, Any]) -> AgentCLIRunner:
        kind = table["kind"]
        if kind not in AGENT_KINDS:
            self.fail(
                f"{prefix}.kind",
                f"{_toml(kind)} is not an agent CLI this server can run",
                'write kind = "claude" (Claude Code) or kind = "codex" (Codex)',
            )
        args = table.get("args", [])
        if not isinstance(args, list) or not all(
            isinstance(a, str) and "\0" not in a for a in args
        ):
            self.fail(
                f"{prefix}.args",
                f"must be a list of strings, got {_toml(args)}",
                'write e.g. args = ["--permission-mode", "acceptEdits"]',
            )
        model = table.get("model")
        if model is not None and (not isinstance(model, str) or not model.strip()):
            self.fail(
                f"{prefix}.model",
                f"must be a model name, got {_toml(model)}",
                'write e.g. model = "sonnet"',
            )
        env = self.env(f"{prefix}.env", table.get("env", {}))
        cwd = self.cwd(f"{prefix}.cwd", table.get("cwd"))
        program = self.agent_program(f"{prefix}.program", kind, table.get("program"), cwd, env)
        grace = table.get("kill_grace_seconds", 2.0)
        if (
            isinstance(grace, bool)
            or not isinstance(grace, int | float)
            or not (math.isfinite(grace) and grace >= 0)
        ):
            self.fail(
                f"{prefix}.kill_grace_seconds",
                f"must be a finite number of seconds >= 0, got {_toml(grace)}",
                "write e.g. kill_grace_seconds = 2",
            )
        return AgentCLIRunner(
            kind,
            program,
            args=tuple(args),
            model=model,
            cwd=str(cwd),
            env=env,
            kill_grace_seconds=float(grace),
        )

    def agent_program(
        self, where: str, kind: str, value: Any, cwd: Path, env: Mapping[str, str]
    ) -> str:
        """The CLI's executable: *value*, else on PATH, else the one a Python package bundles."""
        if value is not None:
            if not isinstance(value, str) or not value:
                self.fail(
                    where,
                    f"must be a path string, got {_toml(value)}",
                    'write program = "/usr/local/bin/claude"',
                )
            found = self.find_program(value, cwd, env)
            if found is None:
                self.fail(
                    where,
                    f"{value!r} is not an executable file, nor a program on PATH",
                    "fix the path (relative to this file's directory), or remove the key to "
                    f"use {kind} from PATH",
                )
            return found
        found = self.find_program(kind, cwd, env)
        if found is not None:
            return found
        module, inside, install = _BUNDLED[kind]
        try:
            package = importlib.import_module(module)
        except ImportError:
            package = None
        bundled = Path(package.__file__ or "").parent / inside if package is not None else None
        if bundled is None or not (bundled.is_file() and os.access(bundled, os.X_OK)):
            self.fail(
                where,
                f"{kind!r} was not found on PATH, and no Python package here bundles it",
                f'install it ({install}), or give its path with program = "..."',
            )
        return str(bundled)

    def find_program(self, program: str, cwd: Path, env: Mapping[str, str]) -> str | None:
        if os.sep in program or (os.altsep and os.altsep in program):
            found = cwd / Path(program).expanduser()
            ok = found.is_file() and os.access(found, os.X_OK)
            return str(found) if ok else None
        return shutil.which(program, path=env.get("PATH", os.environ.get("PATH", os.defpath)))

    def env(self, where: str, env: Any) -> dict[str, str]:
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            self.fail(
                where,
                f"must be a table of strings, got {_toml(env)}",
                'write env = { NAME = "value" } (values are strings: quote numbers)',
            )
        return env

    def cwd(self, where: str, value: Any) -> Path:
        if value is None:
            return self.base
        if not isinstance(value, str):
            self.fail(where, f"must be a path string, got {_toml(value)}", 'write cwd = "dir"')
        cwd = self.base / Path(value).expanduser()
        if not cwd.is_dir():
            self.fail(
                where,
                f"{value!r} is not a directory (resolved to {cwd})",
                "relative paths count from the configuration file's directory: fix the path",
            )
        return cwd

    def check_program(self, where: str, runner: CommandRunner) -> None:
        program = runner.command[0]
        cwd = Path(runner.cwd or self.base)
        if os.sep in program or (os.altsep and os.altsep in program):
            found = cwd / Path(program).expanduser()
            ok = found.is_file() and os.access(found, os.X_OK)
            problem = f"the program {program!r} ({found}) is not an executable file"
            fix = "fix the path (relative to cwd), or make the file executable (chmod +x)"
        else:
            search = runner.env.get("PATH", os.environ.get("PATH", os.defpath))
            ok = shutil.which(program, path=search) is not None
            problem = f"the program {program!r} was not found on PATH"
            fix = "install it, fix its name, or give its path"
        if not ok:
            self.fail(f"{where}[0]", problem, fix)

    def python_runner(self, where: str, spec: Any) -> Runner:
        example = 'python = "mypackage.agents:researcher"'
        if not isinstance(spec, str) or spec.count(":") != 1:
            self.fail(
                where,
                f"must be 'module:function', got {_toml(spec)}",
                f"name the module and the async runner in it: {example}",
            )
        module_name, _, attribute = spec.partition(":")
        if not module_name or not attribute:
            self.fail(where, f"must be 'module:function', got {spec!r}", example)
        base = str(self.base)
        if base not in sys.path:
            # Last, so a file next to the configuration never shadows an
            # installed module of the same name.
            sys.path.append(base)
        try:
            value: Any = importlib.import_module(module_name)
        except Exception as exc:
            self.fail(
                where,
                f"cannot import {module_name!r}: {type(exc).__name__}: {exc}",
                f"check the module name; it is searched on PYTHONPATH, in the installed "
                f"packages and in {base}",
            )
        for part in attribute.split("."):
            if not hasattr(value, part):
                self.fail(
                    where,
                    f"module {module_name!r} has no {attribute!r}",
                    "check the name after the colon",
                )
            value = getattr(value, part)
        if not _is_async_callable(value):
            self.fail(
                where,
                f"{spec!r} is {describe(value)}, not an async runner",
                "point it at `async def runner(ctx) -> result`",
            )
        runner: Runner = value
        return runner


class _NotRegular(OSError):
    """A path names something that is not a regular file; the argument says what."""


def _special_kind(path: Path) -> str | None:
    """What *path* is when it exists and is not a regular file (or a folder)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return None  # missing (created later) or unreadable: said when opened
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a file"


def _read_regular_file(path: Path, most: int) -> bytes:
    """At most *most* bytes of the regular file *path*.

    Opened without blocking and checked on the open descriptor: a FIFO
    would block the open (and every read) until a writer came, a device
    could be read for ever.

    Raises:
        _NotRegular: *path* is a FIFO, a socket, a device or a folder.
        OSError: it cannot be opened or read.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except IsADirectoryError:
        raise _NotRegular("a folder") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _NotRegular(
                "a folder" if stat.S_ISDIR(mode) else _special_kind(path) or "special"
            )
        with os.fdopen(fd, "rb", closefd=True) as file:
            fd = -1
            return file.read(most)
    finally:
        if fd >= 0:
            os.close(fd)


def _join(prefix: str | None, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def _strip_field(message: str, field: str) -> str:
    """``"Config.x must be ..."`` → ``"must be ..."``: the key is named already."""
    return message.removeprefix(field).lstrip()


def owner_problem(value: Any) -> str | None:
    """What is wrong with *value* as a server's owner (``[server] owner``, ``--owner``).

    Returns:
        ``None`` for a good owner: 1 to 128 printable characters without
        ``/``; else the problem, naming the value.
    """
    if (
        isinstance(value, str)
        and 0 < len(value) <= 128
        and value.isprintable()
        and "/" not in value
    ):
        return None
    return f"must be a name of 1 to 128 printable characters without '/', got {_toml(value)}"


def _toml(value: Any) -> str:
    """*value* as it would be written in TOML, for messages."""
    if value is None:
        return f'"{_NO_DEADLINE}"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    return describe(value)
