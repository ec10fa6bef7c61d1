"""The body of ``trio-delegate serve``: check the configuration, then serve over stdio."""

from __future__ import annotations

import functools
import importlib.util
import logging
import sys
from pathlib import Path

import trio

from .._checks import terminal_safe
from .._errors import StoreError
from .._mcp_config import DEFAULT_CONFIG
from .._server_config import ConfigError, ServerConfig, load_server_config
from .._stores._postgres import PostgresStore
from .._stores._protocol import ResultStore
from .._stores._sqlite import SQLiteStore

__all__ = ["run_serve"]

#: Exit code for a configuration that cannot be served (argparse's usage code).
EXIT_CONFIG: int = 2
#: Exit code when the MCP SDK is missing.
EXIT_MISSING_SDK: int = 1
#: The store named by ``[runtime] store`` could not be opened.
EXIT_STORE: int = 1


def run_serve(config_path: str | None, *, owner: str | None = None) -> int:
    """Load *config_path* and serve its subagents over stdio until the client leaves.

    Args:
        config_path: the TOML configuration file; ``None`` (no ``--config``)
            for ``./subagents.toml``, the file ``trio-delegate init`` writes.
        owner: the owner of the server's runs (``--owner``, checked by the
            caller); it overrides ``[server] owner``. ``None``: the file's.

    Returns:
        0 after the client closed the connection; 2 for a bad configuration
        (reported on stderr before anything starts); 1 when the ``mcp``
        package is missing or the store cannot be opened.
    """
    if config_path is None:
        if not Path(DEFAULT_CONFIG).is_file():
            print(
                f"trio-delegate serve: no --config given, and there is no {DEFAULT_CONFIG} "
                f"in this folder ({terminal_safe(str(Path.cwd()))})\n"
                f"  fix: run `trio-delegate init` here to write a starter {DEFAULT_CONFIG}, "
                "or pass the path of your configuration with --config FILE",
                file=sys.stderr,
            )
            return EXIT_CONFIG
        config_path = DEFAULT_CONFIG
    try:
        server_config = load_server_config(config_path)
    except ConfigError as exc:
        # Names, keys and import errors come from the file: shown, never acted on.
        print(f"trio-delegate serve: {terminal_safe(str(exc))}", file=sys.stderr)
        return EXIT_CONFIG
    if importlib.util.find_spec("mcp") is None:
        return _missing_sdk("No module named 'mcp'")
    return _serve(server_config, owner)


def _serve(server_config: ServerConfig, owner: str | None) -> int:
    try:
        # Imported only now, so that a bad configuration is reported quickly
        # and without the MCP SDK.
        from ..mcp._serve import serve_stdio
    except ImportError as exc:
        if not (exc.name or "").startswith(("mcp", "pydantic", "anyio")):
            raise
        return _missing_sdk(str(exc))
    # stdout carries the protocol: every diagnostic goes to stderr.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_TerminalSafeFormatter("trio-delegate: %(message)s"))
    logging.basicConfig(handlers=[handler])
    logging.getLogger("trio_delegate").setLevel(logging.INFO)
    logging.getLogger("trio_delegate.mcp").info(
        "configuration %s; serving over stdio", server_config.path.resolve()
    )
    try:
        store = _store(server_config)
        trio.run(
            functools.partial(
                serve_stdio,
                server_config.subagents,
                config=server_config.config,
                store=store,
                foreground_limit_seconds=server_config.foreground_limit_seconds,
                progress_interval_seconds=server_config.progress_interval_seconds,
                parent_budget=server_config.parent_budget,
                owner=owner if owner is not None else server_config.owner,
            )
        )
    except StoreError as exc:
        print(f"trio-delegate serve: {terminal_safe(str(exc))}", file=sys.stderr)
        return EXIT_STORE
    return 0


def _missing_sdk(problem: str) -> int:
    print(
        f"trio-delegate serve: the MCP SDK is missing ({problem}); install it with "
        "pip install 'trio-delegate[mcp]'",
        file=sys.stderr,
    )
    return EXIT_MISSING_SDK


class _TerminalSafeFormatter(logging.Formatter):
    """Log lines with what a terminal would act on escaped: they quote
    subagent names, paths and errors that come from files and processes."""

    def format(self, record: logging.LogRecord) -> str:
        return terminal_safe(super().format(record))


def _store(server_config: ServerConfig) -> ResultStore | None:
    """The store ``[runtime] store`` names (an SQLite file or a PostgreSQL URI),
    keeping ended runs as ``store_max_rows`` and ``store_retention_seconds`` say."""
    location = server_config.store
    if location is None:
        return None
    max_rows = server_config.store_max_rows
    retention_seconds = server_config.store_retention_seconds
    if isinstance(location, str):
        return PostgresStore(location, max_rows=max_rows, retention_seconds=retention_seconds)
    return SQLiteStore(location, max_rows=max_rows, retention_seconds=retention_seconds)
