"""The checks that read one key's value: each returns the value read, or raises a Problem.

A check knows the value only, not its key: the key, and the fix when the
check leaves it to the field (``Problem.fix is None``), are added where the
problem is caught (see ``_structure``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Final

import attrs

from .._checks import describe
from .._config import Config
from .._errors import InvalidArgumentsError
from .._runners._agents import AGENT_KINDS
from .._schema import compile_result_schema
from .._stores._postgres import is_postgres_dsn, mask_dsn
from .._subagent import NAME_PATTERN
from .._usage import MAX_COUNT
from ._problems import NO_DEADLINE, Problem, cut, toml_text

__all__ = [
    "agent_kind",
    "boolean",
    "cost_limit",
    "command",
    "config_value",
    "deadline",
    "env",
    "grace_seconds",
    "json_schema",
    "model",
    "module_function",
    "names",
    "non_empty_text",
    "owner",
    "owner_problem",
    "path_text",
    "positive_int",
    "program_args",
    "seconds",
    "store",
    "subagent_name",
    "token_limit",
    "temporal_address",
    "text",
]

Check = Callable[[Any], Any]

#: The example a Python subagent's key follows.
PYTHON_EXAMPLE: Final = 'python = "mypackage.agents:researcher"'


def _finite(value: Any) -> bool:
    """Whether *value* is a number (not a bool) that a float holds finitely."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer of hundreds of digits
        return False


def deadline(value: Any) -> float | None:
    """A number of seconds > 0, or ``"none"``: no deadline (``None``).

    Raises:
        Problem: the value is not that, naming it.
    """
    if value == NO_DEADLINE:
        return None
    if not (_finite(value) and value > 0):
        raise Problem(
            f"must be a finite number of seconds > 0 or {NO_DEADLINE!r}, got {toml_text(value)}",
            f'write e.g. 120, or "{NO_DEADLINE}" for no deadline',
        )
    return float(value)


def row_bound(value: Any) -> int | None:
    """An integer >= 1, or ``"none"``: no bound (``None``).

    Raises:
        Problem: the value is not that, naming it.
    """
    if value == NO_DEADLINE:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise Problem(
            f"must be an integer >= 1 or {NO_DEADLINE!r}, got {toml_text(value)}",
            f'write e.g. 100000, or "{NO_DEADLINE}" to keep every ended run',
        )
    return value


def age_bound(value: Any) -> float | None:
    """A number of seconds > 0, or ``"none"``: no bound (``None``).

    Raises:
        Problem: the value is not that, naming it.
    """
    if value == NO_DEADLINE:
        return None
    if not (_finite(value) and value > 0):
        raise Problem(
            f"must be a finite number of seconds > 0 or {NO_DEADLINE!r}, got {toml_text(value)}",
            f'write e.g. 2592000 (30 days), or "{NO_DEADLINE}" to keep ended runs of any age',
        )
    return float(value)


def seconds(example: str) -> Check:
    """A number of seconds > 0 where ``"none"`` makes no sense; *example* is the fix.

    Returns:
        The check, raising :class:`Problem` for any other value.
    """

    def check(value: Any) -> float:
        read = deadline(value)
        if read is None:
            raise Problem(f'must be a number of seconds > 0, got "{NO_DEADLINE}"', example)
        return read

    return check


def grace_seconds(value: Any) -> float:
    """How long a process group has between SIGTERM and SIGKILL: seconds >= 0.

    Raises:
        Problem: the value is not that, naming it.
    """
    if not (_finite(value) and value >= 0):
        raise Problem(
            f"must be a finite number of seconds >= 0, got {toml_text(value)}",
            "write e.g. kill_grace_seconds = 2",
        )
    return float(value)


def token_limit(name: str) -> Check:
    """A budget's limit on a count (*name*, e.g. ``max_total_tokens``): an integer >= 0.

    Returns:
        The check, raising :class:`Problem` for any other value.
    """

    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
            raise Problem(
                f"must be an integer from 0 to {MAX_COUNT}, got {toml_text(value)}",
                f"write e.g. {name} = {50 if name == 'max_requests' else 100000}, "
                "or remove the key for no limit",
            )
        return value

    return check


def cost_limit(value: Any) -> float:
    """A budget's limit on cost: a finite number of US dollars >= 0.

    Raises:
        Problem: the value is not that, naming it.
    """
    if isinstance(value, str):
        # A quoted number is the likely slip: say how to write it.
        raise Problem(
            f"must be a number of US dollars, got the string {toml_text(value)}",
            "write the number without quotes, e.g. max_cost_usd = 2.5",
        )
    if not (_finite(value) and value >= 0):
        raise Problem(
            f"must be a finite number of US dollars >= 0, got {toml_text(value)}",
            "write e.g. max_cost_usd = 2.5, or remove the key for no limit",
        )
    return float(value)


def price(name: str) -> Check:
    """A model's price (*name*, e.g. ``output``): US dollars per million tokens, >= 0.

    Returns:
        The check, raising :class:`Problem` for any other value.
    """

    def check(value: Any) -> float:
        if isinstance(value, str):
            raise Problem(
                f"must be a number of US dollars per million tokens, got the string "
                f"{toml_text(value)}",
                f"write the number without quotes, e.g. {name} = 3.0",
            )
        if not (_finite(value) and value >= 0):
            raise Problem(
                f"must be a finite number of US dollars per million tokens >= 0, got "
                f"{toml_text(value)}",
                f"write e.g. {name} = 3.0",
            )
        return float(value)

    return check


def positive_int(value: Any) -> int:
    """An integer >= 1.

    Raises:
        Problem: the value is not that, naming it.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise Problem(f"must be an integer >= 1, got {toml_text(value)}")
    return value


def boolean(value: Any) -> bool:
    """``true`` or ``false``.

    Raises:
        Problem: the value is not that, naming it.
    """
    if not isinstance(value, bool):
        raise Problem(f"must be true or false, got {toml_text(value)}")
    return value


def text(value: Any) -> str:
    """Any string.

    Raises:
        Problem: the value is not that, naming it.
    """
    if not isinstance(value, str):
        raise Problem(f"must be a string, got {toml_text(value)}")
    return value


def non_empty_text(value: Any) -> str:
    """A string with something in it, and no NUL.

    Raises:
        Problem: the value is not that, naming it.
    """
    if not isinstance(value, str) or not value.strip() or "\0" in value:
        raise Problem(f"must be a non-empty string, got {toml_text(value)}")
    return value


def temporal_address(value: Any) -> str:
    """A Temporal server's ``host:port``.

    Raises:
        Problem: the value is not that, naming it.
    """
    address = non_empty_text(value)
    if ":" not in address:
        raise Problem(
            f"{toml_text(address)} has no port", 'write it as "host:port", e.g. "127.0.0.1:7233"'
        )
    return address


def path_text(value: Any) -> str:
    """A path (checked against the disk later).

    Raises:
        Problem: the value is not that, naming it.
    """
    if not isinstance(value, str) or not value or "\0" in value:
        raise Problem(f"must be a path string, got {toml_text(value)}")
    return value


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
    return f"must be a name of 1 to 128 printable characters without '/', got {toml_text(value)}"


def owner(value: Any) -> str:
    """The owner of a server's runs.

    Raises:
        Problem: the value is not that, naming it.
    """
    problem = owner_problem(value)
    if problem is not None:
        raise Problem(problem)
    return str(value)


def store(value: Any) -> str:
    """An SQLite file (resolved later) or a ``postgresql://`` URI without a password.

    Raises:
        Problem: the value is not that, naming it.
    """
    if not isinstance(value, str) or not value.strip() or "\0" in value:
        raise Problem(
            f"must be the path of an SQLite file or a postgresql:// URI, got {toml_text(value)}",
            'write e.g. store = "runs.db" (relative to this file), or remove the key '
            "to keep runs in memory only",
        )
    if is_postgres_dsn(value) and mask_dsn(value) != value:
        raise Problem(
            f"holds a password ({cut(mask_dsn(value))!r}); a configuration file is no "
            "place for one",
            "remove it from the URI and give it to the server in PGPASSWORD, a "
            "password file (~/.pgpass) or a service file",
        )
    return value


def config_value(name: str) -> Check:
    """A value of the :class:`Config` field *name*, checked by Config itself.

    Returns:
        The check, raising :class:`Problem` with Config's own words for a
        value Config refuses.
    """
    default = attrs.fields_dict(Config)[name].default

    def check(value: Any) -> Any:
        if name == "subagent_timeout_seconds":
            value = deadline(value)
        try:
            Config(**{name: value})
        except InvalidArgumentsError as exc:
            raise Problem(
                exc.message.removeprefix(f"Config.{name}").lstrip(),
                f"change it, or remove it to use the default ({toml_text(default)})",
            ) from None
        return value

    return check


def subagent_name(value: Any) -> str:
    """A subagent's name, as :class:`Subagent` takes it.

    Raises:
        Problem: the value is not that, naming it.
    """
    if not isinstance(value, str) or NAME_PATTERN.fullmatch(value) is None:
        raise Problem(
            f"{toml_text(value)} is not a valid subagent name",
            "use a lowercase letter, then up to 63 lowercase letters, digits, '_' or '-'",
        )
    return value


def names(value: Any) -> tuple[str, ...]:
    """A list of subagent names (whether they are subagents is checked later).

    Raises:
        Problem: the value is not that, naming it.
    """
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise Problem(f"must be a list of subagent names, got {toml_text(value)}")
    return tuple(value)


def json_schema(value: Any) -> Any:
    """A run's JSON Schema, written as a TOML table.

    Raises:
        Problem: the value is not that, naming it.
    """
    try:
        compile_result_schema(value)
    except InvalidArgumentsError as exc:
        raise Problem(exc.message.removeprefix("final_schema").lstrip()) from None
    return value


def command(value: Any) -> tuple[str, ...]:
    """A program and its arguments.

    Raises:
        Problem: the value is not that, naming it.
    """
    if isinstance(value, str):
        raise Problem(
            f"must be a list of strings, got the string {cut(value)!r}",
            f"write the program and its arguments as a list: command = {toml_text(value.split())}",
        )
    if not isinstance(value, list):
        raise Problem(f"must be a list of strings, got {toml_text(value)}")
    if not value:
        raise Problem("must name a program; it is empty")
    for index, part in enumerate(value):
        if not isinstance(part, str) or "\0" in part:
            raise Problem(
                f"command[{index}] must be a string without NUL characters, got {describe(part)}"
            )
    if not value[0]:
        raise Problem("command[0], the program, must not be empty")
    return tuple(value)


def program_args(value: Any) -> tuple[str, ...]:
    """More arguments for an agent CLI.

    Raises:
        Problem: the value is not that, naming it.
    """
    if not isinstance(value, list) or not all(
        isinstance(item, str) and "\0" not in item for item in value
    ):
        raise Problem(f"must be a list of strings, got {toml_text(value)}")
    return tuple(value)


def env(value: Any) -> dict[str, str]:
    """Variables for a process: a table of strings, named as an environment allows.

    Raises:
        Problem: the value is not that, naming it.
    """
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise Problem(f"must be a table of strings, got {toml_text(value)}")
    for name, setting in value.items():
        if not name or "=" in name or "\0" in name:
            raise Problem(
                f"has the variable name {toml_text(name)}; names are non-empty strings "
                "without '=' or NUL",
                "rename it",
            )
        if "\0" in setting:
            raise Problem(
                f"{cut(name)!r} holds a NUL character", "remove it: no process can take it"
            )
    return value


def agent_kind(value: Any) -> str:
    """The agent CLI a subagent runs.

    Raises:
        Problem: the value is not that, naming it.
    """
    if value not in AGENT_KINDS:
        raise Problem(f"{toml_text(value)} is not an agent CLI this server can run")
    return str(value)


def model(value: Any) -> str:
    """A model name.

    Raises:
        Problem: the value is not that, naming it.
    """
    if not isinstance(value, str) or not value.strip():
        raise Problem(f"must be a model name, got {toml_text(value)}")
    return value


def module_function(value: Any) -> str:
    """A Python runner's ``module:function`` (imported later).

    Raises:
        Problem: the value is not that, naming it.
    """
    if not isinstance(value, str) or value.count(":") != 1:
        raise Problem(
            f"must be 'module:function', got {toml_text(value)}",
            f"name the module and the async runner in it: {PYTHON_EXAMPLE}",
        )
    module_name, _, attribute = value.partition(":")
    if not module_name or not attribute:
        raise Problem(f"must be 'module:function', got {cut(value)!r}", PYTHON_EXAMPLE)
    return value


def module_functions(value: Any) -> tuple[str, ...]:
    """A model subagent's tools: a list of ``module:function`` (imported later).

    Raises:
        Problem: the value is not that, naming it.
    """
    if not isinstance(value, list):
        raise Problem(
            f"must be a list of 'module:function' strings, got {toml_text(value)}",
            'write e.g. tools = ["mytools:search"]',
        )
    for index, item in enumerate(value):
        try:
            module_function(item)
        except Problem as problem:
            raise Problem(problem.problem, problem.fix, at=(index,)) from None
    return tuple(value)


def model_api(value: Any) -> str:
    """A model subagent's OpenAI API: ``"responses"`` or ``"chat"``.

    Raises:
        Problem: the value is not that, naming it.
    """
    if value not in ("responses", "chat"):
        raise Problem(f'must be "responses" or "chat", got {toml_text(value)}')
    return str(value)


def optional_text(value: Any) -> str:
    """A string, possibly empty (``api_key_env = ""``: no key).

    Raises:
        Problem: the value is not that, naming it.
    """
    if not isinstance(value, str) or "\0" in value:
        raise Problem(f"must be a string, got {toml_text(value)}")
    return value


#: The keys of one ``mcp_servers`` entry of a model subagent.
_MCP_SERVER_KEYS: Final = ("command", "url", "env", "cwd")


def _http_url(value: Any) -> str:
    url = non_empty_text(value)
    if not url.startswith(("http://", "https://")):
        raise Problem(f"must be an http:// or https:// URL, got {toml_text(url)}")
    return url


def mcp_servers(value: Any) -> tuple[dict[str, Any], ...]:
    """A model subagent's MCP servers: tables of ``command`` (stdio) or ``url`` (HTTP).

    Raises:
        Problem: the value is not that, naming the entry and key.
    """
    fix = 'write e.g. mcp_servers = [{ command = ["uvx", "mcp-server-fetch"] }]'
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise Problem(f"must be a list of tables, got {toml_text(value)}", fix)
    servers = []
    for index, table in enumerate(value):
        unknown = [name for name in table if name not in _MCP_SERVER_KEYS]
        if unknown:
            raise Problem(
                f"has the unknown key {cut(unknown[0])!r}",
                f"an MCP server takes these keys: {', '.join(_MCP_SERVER_KEYS)}",
                at=(index, unknown[0]),
            )
        present = [name for name in ("command", "url") if name in table]
        if len(present) != 1:
            raise Problem(
                "must have either command (a server run over stdio) or url (Streamable HTTP)",
                fix,
                at=(index,),
            )
        server: dict[str, Any] = {}
        try:
            if "command" in table:
                server["command"] = command(table["command"])
            else:
                server["url"] = _http_url(table["url"])
        except Problem as problem:
            raise Problem(problem.problem, problem.fix, at=(index, present[0])) from None
        for name, check in (("env", env), ("cwd", path_text)):
            if name in table:
                try:
                    server[name] = check(table[name])
                except Problem as problem:
                    raise Problem(problem.problem, problem.fix, at=(index, name)) from None
        if "url" in server and ("env" in server or "cwd" in server):
            raise Problem(
                "env and cwd are for a server run over stdio (command), not one at a url",
                "remove them",
                at=(index,),
            )
        servers.append(server)
    return tuple(servers)
