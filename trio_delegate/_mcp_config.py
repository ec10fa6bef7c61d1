"""``trio-delegate mcp-config CLIENT``: the client configuration for ``serve``.

Prints the snippet a client needs to start ``trio-delegate serve`` (Claude
Code's ``.mcp.json``, Claude Desktop's ``claude_desktop_config.json``,
Cursor's and VS Code's ``mcp.json``, Codex's ``config.toml``) with absolute paths to this
installation's executable and to the configuration file, so it works from
any working directory and without ``PATH``, and with the settings that let
headless runs (``claude -p``, ``codex exec``) call the tools. It refuses
when a path does not resolve or the configuration does not load, or when
the MCP SDK is not installed, since the client would fail silently then.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import tomli_w

from ._checks import describe, terminal_safe, terminal_safe_strings
from ._errors import McpConfigError
from ._json import text_problem
from ._self import installed_script
from ._server_config import DEFAULT_FOREGROUND_LIMIT_SECONDS, ConfigError, load_server_config
from ._urls import docs_page

__all__ = [
    "CLIENTS",
    "DEFAULT_SERVER_NAME",
    "McpConfigError",
    "claude_desktop_json",
    "claude_mcp_json",
    "codex_config_toml",
    "cursor_mcp_json",
    "is_server_name",
    "run_mcp_config",
    "serve_command",
    "vscode_mcp_json",
]

#: The clients a snippet can be printed for.
CLIENTS: Final = ("claude", "claude-desktop", "cursor", "vscode", "codex")

#: The server's name in the client's configuration; the tools are
#: ``mcp__delegate__<tool>`` (Claude Code) and ``mcp__delegate`` (Codex).
DEFAULT_SERVER_NAME: Final = "delegate"

#: The configuration file looked for when ``--config`` is not given.
DEFAULT_CONFIG: Final = "subagents.toml"

#: Exit code when the snippet cannot be made (argparse's usage code).
EXIT_REFUSED: Final = 2

#: How long Codex gives the server to start and list its tools.
_STARTUP_SECONDS: Final = 30
#: Codex's per-call timeout: beyond the foreground limit, so a call always
#: answers (with the running handle at worst) before Codex gives up.
_TOOL_TIMEOUT_MARGIN_SECONDS: Final = 60
#: Codex's per-call timeout when the server sets no foreground limit.
_NO_LIMIT_TOOL_TIMEOUT_SECONDS: Final = 3600


#: A server name every client takes: tool names are built from it.
_SERVER_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,32}")


def is_server_name(name: str) -> bool:
    """Whether *name* is one every client takes (1 to 32 letters, digits, '_' or '-')."""
    return _SERVER_NAME.fullmatch(name) is not None


def serve_command(config: str | os.PathLike[str]) -> list[str]:
    """The absolute command line that starts ``serve`` on *config* with this installation.

    The ``trio-delegate`` script next to this Python, when there is one;
    else this Python with ``-m trio_delegate``.

    Raises:
        McpConfigError: *config* does not exist, or does not load.
    """
    path = Path(config).expanduser()
    if not path.is_file():
        raise McpConfigError(
            f"the configuration file {str(path)!r} does not exist (resolved to {path.absolute()})",
            f"pass the path of your serve configuration with --config FILE (or create "
            f"one here with trio-delegate init; see {docs_page('mcp', 'the-configuration-file')})",
        )
    try:
        load_server_config(path)
    except ConfigError as exc:
        raise McpConfigError(
            f"the configuration does not load: {exc.message}",
            "fix it first: the client would start a server that exits at once",
        ) from None
    if importlib.util.find_spec("mcp") is None:
        raise McpConfigError(
            "the MCP SDK is not installed in this Python, so serve would exit at once",
            f"install the mcp extra into it: {sys.executable} -m pip install "
            "'trio-delegate[mcp]' (from a checkout: -e '.[mcp]')",
        )
    config_path = str(path.resolve())
    script = installed_script()
    if script is not None:
        return [str(script), "serve", "--config", config_path]
    python = Path(sys.executable).absolute()
    return [str(python), "-m", "trio_delegate", "serve", "--config", config_path]


def _checked(command: Sequence[str], name: str) -> None:
    """Check that the client's file can hold *command* and *name* as they are.

    Raises:
        McpConfigError: one is not valid Unicode (a path of bytes that are not
            UTF-8): JSON would carry it as an escape no client reads back as
            that path, and TOML cannot carry it at all.
    """
    for what, text in (("the server's name", name), *(("the path", part) for part in command)):
        problem = text_problem(text)
        if problem is not None:
            raise McpConfigError(
                f"{what} {terminal_safe(describe(text))} cannot be written into a client's "
                f"configuration: {problem}",
                "use a folder and a file name of UTF-8 text (and, for --name, letters, "
                "digits, '_' and '-')",
            )


def _mcp_servers_json(command: Sequence[str], name: str) -> str:
    # The "mcpServers" object of a stdio server, as Claude Code, Claude Desktop
    # and Cursor read it: {"mcpServers": {NAME: {"command": ..., "args": [...]}}}.
    _checked(command, name)
    entry = {"command": command[0], "args": list(command[1:])}
    return json.dumps({"mcpServers": {name: entry}}, indent=2) + "\n"


def claude_mcp_json(command: Sequence[str], *, name: str = DEFAULT_SERVER_NAME) -> str:
    """Claude Code's ``.mcp.json`` starting *command* as the server *name*."""
    return _mcp_servers_json(command, name)


def claude_desktop_json(command: Sequence[str], *, name: str = DEFAULT_SERVER_NAME) -> str:
    """Claude Desktop's ``claude_desktop_config.json`` entry starting *command* as *name*.

    The format of the MCP user quickstart (modelcontextprotocol.io/quickstart/user):
    ``{"mcpServers": {NAME: {"command": ..., "args": [...]}}}``, in
    ``~/Library/Application Support/Claude/claude_desktop_config.json`` (macOS)
    or ``%APPDATA%\\Claude\\claude_desktop_config.json`` (Windows).
    """
    return _mcp_servers_json(command, name)


def cursor_mcp_json(command: Sequence[str], *, name: str = DEFAULT_SERVER_NAME) -> str:
    """Cursor's ``mcp.json`` starting *command* as the server *name*.

    The stdio format of Cursor's MCP documentation (cursor.com/docs/mcp):
    ``{"mcpServers": {NAME: {"command": ..., "args": [...]}}}``, in
    ``.cursor/mcp.json`` of a project or ``~/.cursor/mcp.json``.
    """
    return _mcp_servers_json(command, name)


def vscode_mcp_json(command: Sequence[str], *, name: str = DEFAULT_SERVER_NAME) -> str:
    """VS Code's ``mcp.json`` starting *command* as the server *name*.

    The format of VS Code's MCP configuration reference
    (code.visualstudio.com/docs/copilot/reference/mcp-configuration): a
    top-level ``servers`` object, each stdio server with ``"type": "stdio"``,
    ``command`` and ``args``, in ``.vscode/mcp.json`` of a workspace or the
    user profile's ``mcp.json``.
    """
    _checked(command, name)
    entry = {"type": "stdio", "command": command[0], "args": list(command[1:])}
    return json.dumps({"servers": {name: entry}}, indent=2) + "\n"


def codex_config_toml(
    command: Sequence[str],
    *,
    name: str = DEFAULT_SERVER_NAME,
    foreground_limit_seconds: float | None = DEFAULT_FOREGROUND_LIMIT_SECONDS,
) -> str:
    """Codex's ``config.toml`` entry starting *command* as the server *name*.

    Every tool is approved (``default_tools_approval_mode = "approve"``):
    ``codex exec`` runs with the approval policy ``never`` and refuses a tool
    that needs approval. The server is ``required``: Codex waits for an
    optional server only ``mcp_optional_startup_grace_ms`` (1 s by default)
    before it builds the model's tool list, and a server still starting then
    is left out of that session, so its model calls tools Codex does not
    know; a required one is waited for up to ``startup_timeout_sec`` (and
    Codex refuses to start, naming it, when it fails). The tool timeout
    leaves room for the foreground limit.
    """
    _checked(command, name)
    if foreground_limit_seconds is None:
        # No limit: a foreground call takes as long as its run.
        timeout = _NO_LIMIT_TOOL_TIMEOUT_SECONDS
    else:
        timeout = math.ceil(foreground_limit_seconds) + _TOOL_TIMEOUT_MARGIN_SECONDS
    entry = {
        "command": command[0],
        "args": list(command[1:]),
        "startup_timeout_sec": _STARTUP_SECONDS,
        "required": True,
        "tool_timeout_sec": timeout,
        "default_tools_approval_mode": "approve",
    }
    # A TOML writer: every string escaped as TOML wants it (a path may hold
    # quotes, backslashes, controls, DEL), and what a terminal would act on
    # as \uNNNN escapes, which TOML reads back as the character.
    table = terminal_safe_strings(tomli_w.dumps({"mcp_servers": {name: entry}}))
    namespace = f"mcp__{name}" if is_server_name(name) else "mcp__ and the server's name"
    return (
        "# Codex config.toml (~/.codex/config.toml, or .codex/config.toml of a trusted\n"
        f"# project). The model sees the tools as one namespace, {namespace}.\n"
        "# required: Codex waits only 1 s (mcp_optional_startup_grace_ms) for a server\n"
        "# that is not, then starts without its tools; this one is waited for up to\n"
        "# startup_timeout_sec. tool_timeout_sec is above [server]\n"
        "# foreground_limit_seconds, so a call answers before Codex gives up.\n"
        "# default_tools_approval_mode: codex exec never asks, and without it refuses\n"
        "# every tool call.\n"
        f"{table}"
        "# Codex passes the server a few variables only: forward what subagents need.\n"
        '# env_vars = ["OPENAI_API_KEY"]\n'
    )


def _claude_help(name: str) -> str:
    return (
        "# Save the JSON above as .mcp.json at your project's root, or pass it with\n"
        "# --mcp-config FILE. Headless runs must allow the tools, since claude -p cannot\n"
        "# ask (and ignores .claude/settings.json in an untrusted folder):\n"
        f'#   claude -p --mcp-config .mcp.json --allowedTools "mcp__{name}" "your task"\n'
        "# Interactive sessions ask once per tool, or allow them in .claude/settings.json:\n"
        f'#   {{"permissions": {{"allow": ["mcp__{name}"]}}}}\n'
    )


def _json_help(where: Sequence[str], merge: str) -> str:
    places = "".join(f"#   {place}\n" for place in where)
    return (
        f"# Save the JSON above as\n{places}"
        f"# or merge its {merge} entry into the file that is there. It holds this\n"
        "# machine's absolute paths: keep it out of version control. Restart the\n"
        "# client (or reload its MCP servers) to connect.\n"
    )


#: The JSON clients: the snippet, and how to use it (on stderr: JSON carries no comments).
_JSON_CLIENTS: Final = {
    "claude-desktop": (
        claude_desktop_json,
        _json_help(
            (
                "~/Library/Application Support/Claude/claude_desktop_config.json (macOS)",
                "%APPDATA%\\Claude\\claude_desktop_config.json (Windows)",
            ),
            '"mcpServers"',
        ),
    ),
    "cursor": (
        cursor_mcp_json,
        _json_help(
            (".cursor/mcp.json of a project", "~/.cursor/mcp.json (every project)"), '"mcpServers"'
        ),
    ),
    "vscode": (
        vscode_mcp_json,
        _json_help(
            (
                ".vscode/mcp.json of a workspace",
                "the profile's mcp.json (MCP: Open User Configuration)",
            ),
            '"servers"',
        ),
    ),
}


def run_mcp_config(client: str, config: str | None, name: str = DEFAULT_SERVER_NAME) -> int:
    """Print *client*'s snippet for ``serve --config CONFIG``; return the exit code.

    Returns:
        0 with the snippet on stdout (how to use it on stderr, for the
        JSON clients, whose files cannot carry comments); 2 with the problem
        and the fix on stderr.
    """
    try:
        command = serve_command(config if config is not None else DEFAULT_CONFIG)
        if client == "claude":
            sys.stdout.write(claude_mcp_json(command, name=name))
            sys.stderr.write(_claude_help(name))
        elif client in _JSON_CLIENTS:
            snippet, usage = _JSON_CLIENTS[client]
            sys.stdout.write(snippet(command, name=name))
            sys.stderr.write(usage)
        else:
            limit = load_server_config(command[-1]).foreground_limit_seconds
            sys.stdout.write(codex_config_toml(command, name=name, foreground_limit_seconds=limit))
    except McpConfigError as exc:
        # It names paths and values from outside: shown, never acted on.
        print(f"trio-delegate mcp-config: {terminal_safe(str(exc))}", file=sys.stderr)
        return EXIT_REFUSED
    return 0
