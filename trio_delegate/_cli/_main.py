"""The ``trio-delegate`` command line.

One sub-command per job (``demo``, ``init``, ``serve``, ``mcp-config``, ``runs``). Each
sub-command registers its parser with :func:`_add_demo`-style functions and sets a ``handler`` that
takes the parsed arguments and returns the exit code, so adding one (``serve``,
``runs`` ...) is one more ``_add_...`` function.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from .. import __version__
from .._checks import describe, terminal_safe
from .._urls import docs_page
from ._runs import DEFAULT_DB, add_runs_parser

__all__ = ["build_parser", "main"]

#: A sub-command's body: parsed arguments in, exit code out.
Handler = Callable[[argparse.Namespace], int]

#: The longest usage error shown (argparse quotes the arguments it refuses).
_MAX_ERROR_CHARS = 1_000

# At 1000 the whole scenario is over in about 10 ms of real time: there is
# nothing more to see faster, and a typo such as 1e9 is better refused.
_MAX_SPEED = 1000.0


def _speed(text: str) -> float:
    """Parse ``--speed``: a finite factor in (0, 1000]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (math.isfinite(value) and 0 < value <= _MAX_SPEED):
        raise argparse.ArgumentTypeError(
            f"must be a number > 0 and at most {_MAX_SPEED:g}, got {text!r}"
        )
    return value


def _run_demo(args: argparse.Namespace) -> int:
    # Imported here so that other sub-commands do not pay for rich's live display.
    from ._demo import run_demo

    return run_demo(live=not args.no_live, speed=args.speed, db=None if args.no_store else args.db)


def _add_demo(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = commands.add_parser(
        "demo",
        help="watch a scripted, offline delegation session (about 15 s)",
        description=(
            "Play a scripted session offline: a parent delegates to an investigator, a "
            "writer and a flaky checker, in the foreground and the background, with timed "
            "waits, a cancellation, a child deadline, a failure and its replacement, and "
            "the fail-closed check. Exits 0 when the final check passes."
        ),
    )
    demo.add_argument(
        "--no-live",
        action="store_true",
        help="print one plain line per event instead of the live table "
        "(automatic when stdout is not a terminal)",
    )
    demo.add_argument(
        "--speed",
        type=_speed,
        default=1.0,
        metavar="FACTOR",
        help=f"play FACTOR times faster (default: 1.0, about 15 s; at most {_MAX_SPEED:g})",
    )
    demo.add_argument(
        "--db",
        type=Path,
        default=DEFAULT_DB,
        metavar="PATH",
        help=f"the SQLite store to record the runs in (default: {DEFAULT_DB})",
    )
    demo.add_argument("--no-store", action="store_true", help="record nothing (no database file)")
    demo.set_defaults(handler=_run_demo)


def _run_serve(args: argparse.Namespace) -> int:
    # Imported here so that other sub-commands do not pay for the MCP SDK.
    from ._serve import run_serve

    return run_serve(args.config, owner=args.owner)


def _add_serve(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = commands.add_parser(
        "serve",
        help="serve the delegation tools to an MCP client (Claude Code, Codex ...) over stdio",
        description=(
            "Serve the delegation tools over stdio to one MCP client, with the subagents "
            f"of a TOML configuration file ({docs_page('mcp')}). The client's runs are "
            "cancelled, and their processes killed, when it disconnects. Exits 2 on a bad "
            "configuration, before serving."
        ),
    )
    serve.add_argument(
        "--config",
        metavar="FILE",
        help="the TOML file with [runtime] and [[subagents]] (default: ./subagents.toml, "
        "which `trio-delegate init` writes)",
    )
    serve.add_argument(
        "--owner",
        type=_owner,
        metavar="NAME",
        help="a stable owner for the server's runs, so that a store's task ids outlive a "
        "restart (overrides [server] owner; default: a new owner per connection)",
    )
    serve.set_defaults(handler=_run_serve)


def _owner(text: str) -> str:
    """Parse ``--owner``: checked as ``[server] owner`` is."""
    from .._server_config import owner_problem

    problem = owner_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def _run_temporal_worker(args: argparse.Namespace) -> int:
    # Imported here so that other sub-commands do not pay for the Temporal SDK.
    from ._temporal_worker import run_temporal_worker

    return run_temporal_worker(args.config)


def _add_temporal_worker(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    worker = commands.add_parser(
        "temporal-worker",
        help="run the subagents of a serve configuration as Temporal workers' activities",
        description=(
            "Serve the subagents of a TOML configuration file (the one `serve` reads, with "
            "a [temporal] table saying where) to parents whose runs go to Temporal (see "
            "docs/scaling.md). [runtime] max_concurrent_runs bounds the runs this worker "
            "takes. SIGTERM or SIGINT stops it once its runs are cancelled and cleaned up. "
            "Exits 2 on a bad configuration, 1 when Temporal cannot be reached."
        ),
    )
    worker.add_argument(
        "--config",
        required=True,
        metavar="FILE",
        help="the TOML file with [temporal] and [[subagents]]",
    )
    worker.set_defaults(handler=_run_temporal_worker)


def _server_name(text: str) -> str:
    """Parse ``--name``: letters, digits, '_' and '-' (clients build tool names from it)."""
    from .._mcp_config import is_server_name

    if not is_server_name(text):
        raise argparse.ArgumentTypeError(
            f"must be 1 to 32 letters, digits, '_' or '-', got {describe(text)}"
        )
    return text


def _run_mcp_config(args: argparse.Namespace) -> int:
    from .._mcp_config import run_mcp_config

    return run_mcp_config(args.client, args.config, args.name)


def _add_mcp_config(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from .._mcp_config import CLIENTS, DEFAULT_CONFIG, DEFAULT_SERVER_NAME

    command = commands.add_parser(
        "mcp-config",
        help="print the client configuration that starts `serve` (Claude Code, Codex, ...)",
        description=(
            "Print the snippet that makes a client start `trio-delegate serve`: Claude Code's "
            ".mcp.json, Claude Desktop's claude_desktop_config.json, Cursor's or VS Code's "
            "mcp.json, or Codex's config.toml entry, with absolute paths to this "
            "installation and to the configuration file, and the settings headless runs "
            "need to call the tools. Exits 2, saying what to fix, when the configuration "
            "does not load or the MCP SDK is missing."
        ),
    )
    command.add_argument("client", choices=CLIENTS, help="the client to configure")
    command.add_argument(
        "--config",
        metavar="FILE",
        help=f"the serve configuration (default: ./{DEFAULT_CONFIG})",
    )
    command.add_argument(
        "--name",
        type=_server_name,
        default=DEFAULT_SERVER_NAME,
        help=f"the server's name in the client (default: {DEFAULT_SERVER_NAME})",
    )
    command.set_defaults(handler=_run_mcp_config)


def _run_init(args: argparse.Namespace) -> int:
    from ._init import run_init

    return run_init()


def _add_init(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from ._init import CONFIG_NAME, RUNNERS_NAME

    init = commands.add_parser(
        "init",
        help=f"write a starter {CONFIG_NAME} (and {RUNNERS_NAME}) here for `serve`",
        description=(
            f"Write a commented starter {CONFIG_NAME} and the runner module it names "
            f"({RUNNERS_NAME}) into the current directory, so that `trio-delegate serve` "
            "works right after it. Refuses (exit 2) when either "
            "file is already there."
        ),
    )
    init.set_defaults(handler=_run_init)


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose errors show the arguments they quote literally.

    argparse quotes what it was given (``unrecognized arguments: …``, an
    invalid choice): an escape sequence there would reach the terminal.
    Its sub-command parsers are of this class too.
    """

    def error(self, message: str) -> NoReturn:
        if len(message) > _MAX_ERROR_CHARS:  # an argument of a megabyte, quoted whole
            message = message[: _MAX_ERROR_CHARS - 1] + "…"
        super().error(terminal_safe(message))


def build_parser() -> argparse.ArgumentParser:
    """The ``trio-delegate`` argument parser with every sub-command."""
    parser: argparse.ArgumentParser = _Parser(
        prog="trio-delegate",
        description="Delegate work from an LLM agent to subagents on Trio.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(title="commands", dest="command", metavar="COMMAND")
    commands.required = True
    _add_demo(commands)
    _add_init(commands)
    _add_serve(commands)
    _add_mcp_config(commands)
    add_runs_parser(commands)
    _add_temporal_worker(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``trio-delegate`` command; return its exit code.

    Bad arguments print argparse's usage error and raise ``SystemExit(2)``.
    """
    args = build_parser().parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except KeyboardInterrupt:
        print("trio-delegate: interrupted", file=sys.stderr)
        return 130
