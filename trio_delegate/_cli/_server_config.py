"""The configuration file of ``trio-delegate serve``: TOML, checked before anything starts.

The file has a ``[runtime]`` table (any :class:`Config` field) and one
``[[subagents]]`` table per subagent, each either a command (``command =
[...]``, see :class:`CommandRunner`) or a Python runner (``python =
"module:function"``). Every problem is reported as one
:class:`ConfigError` naming the file, the key (``subagents[1].command``) and
the fix; relative paths are resolved against the file's directory.
"""

from __future__ import annotations

import difflib
import importlib
import os
import shutil
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, NoReturn, final

import attrs

from .._checks import describe
from .._config import INHERIT, Config, TimeoutSetting
from .._errors import DelegationError, InvalidArgumentsError
from .._schema import compile_result_schema
from .._stores._postgres import is_postgres_dsn, mask_dsn
from .._subagent import NAME_PATTERN, Runner, Subagent, _is_async_callable
from ._command import CommandRunner

__all__ = ["ConfigError", "ServerConfig", "load_server_config"]

_TOP_LEVEL: Final = ("runtime", "subagents")
_COMMON_KEYS: Final = ("name", "description", "timeout_seconds", "final_schema")
_COMMAND_KEYS: Final = ("command", "cwd", "env", "kill_grace_seconds")
# Only a Python runner can delegate further (through ctx.parent).
_PYTHON_KEYS: Final = ("python", "children")
#: What a timeout setting says for "no deadline": TOML has no null.
_NO_DEADLINE: Final = "none"


class ConfigError(DelegationError, ValueError):
    """The server's configuration file is missing, malformed or inconsistent.

    Attributes:
        path: the configuration file.
        key: the offending key (``"subagents[1].command"``), or ``None`` for
            the file as a whole.
        fix: what to change.
    """

    def __init__(
        self, path: Path, key: str | None, problem: str, fix: str, *, subagent: str | None = None
    ) -> None:
        where = f"{path}: {key}" if key else str(path)
        if subagent is not None:
            where += f" (subagent {subagent!r})"
        super().__init__(f"{where}: {problem}\n  fix: {fix}", subagent=subagent)
        self.path = path
        self.key = key
        self.fix = fix


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
    """

    path: Path
    config: Config
    subagents: tuple[Subagent, ...]
    store: Path | str | None = None


def load_server_config(path: str | os.PathLike[str]) -> ServerConfig:
    """Read and check a server configuration file.

    Python runners are imported here, so a configuration that loads is one
    the server can start with. The file's directory is added (last) to the
    module search path for them.

    Raises:
        ConfigError: for the first problem found, naming the key and the fix.
    """
    return _Loader(Path(path)).load()


@attrs.define
class _Loader:
    path: Path
    # The subagent being read, named in errors about its keys.
    current: str | None = None

    @property
    def base(self) -> Path:
        return self.path.resolve().parent

    def fail(self, key: str | None, problem: str, fix: str) -> NoReturn:
        raise ConfigError(self.path, key, problem, fix, subagent=self.current)

    # -- the file ----------------------------------------------------------------

    def load(self) -> ServerConfig:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            self.fail(None, "no such file", "pass the path of an existing TOML file to --config")
        except (OSError, UnicodeDecodeError) as exc:
            self.fail(None, f"cannot be read: {exc}", "check the path and its permissions")
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            self.fail(None, f"is not valid TOML: {exc}", "fix the syntax at that place")
        self.check_keys(data, _TOP_LEVEL, None, "the file has a [runtime] table and [[subagents]]")
        runtime = data.get("runtime", {})
        config = self.runtime(runtime)
        store = self.store(runtime["store"], "runtime.store") if "store" in runtime else None
        subagents = self.subagents(data.get("subagents"), config)
        return ServerConfig(self.path, config, subagents, store)

    def check_keys(
        self, table: Mapping[str, Any], allowed: tuple[str, ...], prefix: str | None, what: str
    ) -> None:
        for key in table:
            if key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                self.fail(
                    _join(prefix, key),
                    "unknown key",
                    f"{hint}{what}; the keys allowed here are: {', '.join(allowed)}",
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
            "[runtime] takes the fields of trio_delegate.Config",
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
        return path

    def timeout(self, value: Any, where: str) -> float | None:
        if value == _NO_DEADLINE:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            self.fail(
                where,
                f"must be a number of seconds > 0 or {_NO_DEADLINE!r}, got {_toml(value)}",
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
        if "command" in table and "python" in table:
            self.fail(
                prefix,
                "has both command and python",
                "a subagent is either a command or a Python runner: keep one of the two",
            )
        allowed: tuple[str, ...]
        if "command" in table:
            allowed = (*_COMMON_KEYS, *_COMMAND_KEYS)
            what = "a command subagent takes"
        elif "python" in table:
            allowed = (*_COMMON_KEYS, *_PYTHON_KEYS)
            what = "a Python subagent takes"
        else:
            self.fail(
                prefix,
                "has neither command nor python",
                'add command = ["program", "arg", ...] (task on stdin, result on stdout) or '
                'python = "module:function" (an async runner)',
            )
        self.check_keys(table, allowed, prefix, what)
        runner = (
            self.command(prefix, table, config)
            if "command" in table
            else self.python_runner(f"{prefix}.python", table["python"])
        )
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
        env = table.get("env", {})
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            self.fail(
                f"{prefix}.env",
                f"must be a table of strings, got {_toml(env)}",
                'write env = { NAME = "value" } (values are strings: quote numbers)',
            )
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


def _join(prefix: str | None, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def _strip_field(message: str, field: str) -> str:
    """``"Config.x must be ..."`` → ``"must be ..."``: the key is named already."""
    return message.removeprefix(field).lstrip()


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
