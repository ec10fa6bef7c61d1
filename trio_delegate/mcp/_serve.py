"""Serving the delegation tools over stdio, as a process's main job."""

from __future__ import annotations

import functools
import os
import signal
import threading
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, Final

import trio
from mcp.server import Server
from mcp.server.stdio import stdio_server

from .. import Config, ResultStore, Runtime, Subagent, open_runtime
from ._server import (
    DEFAULT_FOREGROUND_LIMIT_SECONDS,
    DEFAULT_NAME,
    DEFAULT_PROGRESS_INTERVAL_SECONDS,
    build_server,
    logger,
)
from ._wire import mended

__all__ = ["serve_stdio"]

#: Signals that end the server cleanly: the session's runs are cancelled and
#: joined (their processes killed) first.
_STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


async def serve_stdio(
    subagents: Iterable[Subagent],
    *,
    config: Config | None = None,
    store: ResultStore | None = None,
    name: str = DEFAULT_NAME,
    foreground_limit_seconds: float | None = DEFAULT_FOREGROUND_LIMIT_SECONDS,
    progress_interval_seconds: float = DEFAULT_PROGRESS_INTERVAL_SECONDS,
    owner: str | None = None,
) -> None:
    """Serve the delegation tools over this process's stdin and stdout.

    Opens a runtime for the life of the server and serves one MCP
    connection (see :func:`build_server`) until the client closes stdin.
    Once the runtime is open, it logs one ``ready`` line (INFO, on the
    ``trio_delegate.mcp`` logger) naming the subagents, the store and the
    limits; the runs left unresolved are logged on every way out.
    While serving, file descriptors 0 and 1 point at the null device and at
    stderr, so stray output of runners cannot corrupt the protocol stream.

    Called in the main thread, it also handles SIGINT, SIGTERM and SIGHUP:
    the connection's runs are cancelled and joined, then the process ends
    by that signal as its default action would have ended it. (Reading stdin
    blocks in a worker thread that cannot be interrupted, so returning
    normally would wait for the client to close stdin.)

    Args:
        subagents: the subagent definitions.
        config: the runtime's limits and policy; ``Config()`` when omitted.
        store: a durable store for the runs, or ``None``.
        name: the server's name in the MCP handshake.
        foreground_limit_seconds: how long a foreground call may run before it
            answers with the running handle; ``None`` for no limit.
        progress_interval_seconds: how often a running foreground call reports
            progress to a client that asked for it.
        owner: the owner of the connection's runs (see :func:`build_server`);
            ``None`` for a new one.

    Raises:
        InvalidArgumentsError: malformed subagents, config or limits.
    """
    subagents = tuple(subagents)
    config = config if config is not None else Config()
    serve = functools.partial(
        _serve,
        subagents,
        config,
        store,
        functools.partial(
            build_server,
            name=name,
            foreground_limit_seconds=foreground_limit_seconds,
            progress_interval_seconds=progress_interval_seconds,
            owner=owner,
        ),
        _ready_line(subagents, config, store, foreground_limit_seconds),
    )
    if threading.current_thread() is not threading.main_thread():
        await serve(None)
        return
    with trio.open_signal_receiver(*_STOP_SIGNALS) as signals:
        await serve(signals)


def _ready_line(
    subagents: tuple[Subagent, ...],
    config: Config,
    store: ResultStore | None,
    foreground_limit_seconds: float | None,
) -> str:
    names = ", ".join(subagent.name for subagent in subagents)
    where = getattr(store, "path", None)
    stored = "none (runs are kept in memory)" if store is None else str(where or store)
    limit = "none" if foreground_limit_seconds is None else f"{foreground_limit_seconds:g} s"
    deadline = config.subagent_timeout_seconds
    return (
        f"ready: subagents {names}; store {stored}; foreground limit {limit}; "
        f"default deadline {'none' if deadline is None else f'{deadline:g} s'}; "
        f"{config.max_concurrent_runs} concurrent runs per connection"
    )


async def _serve(
    subagents: tuple[Subagent, ...],
    config: Config,
    store: ResultStore | None,
    make_server: Callable[[Runtime], Server[Any]],
    ready: str,
    signals: AsyncIterator[int] | None,
) -> None:
    received: int | None = None
    async with (
        open_runtime(subagents, config=config, store=store) as runtime,
        stdio_server() as streams,
    ):
        server = make_server(runtime)
        logger.info("%s", ready)
        async with trio.open_nursery() as nursery:
            if signals is not None:

                async def watch(signals: AsyncIterator[int]) -> None:
                    nonlocal received
                    async for signum in signals:
                        received = signum
                        nursery.cancel_scope.cancel()
                        return

                nursery.start_soon(watch, signals)
            read_stream, write_stream = streams
            async with mended(read_stream, write_stream) as readable:
                await server.run(readable, write_stream, server.create_initialization_options())
            nursery.cancel_scope.cancel()
        if received is not None:
            # The connection's runs are settled and their processes gone;
            # only the stdin reader is left, blocked for good.
            logger.info("stopped by %s; the connection's runs were cancelled", _name(received))
            signal.signal(received, signal.SIG_DFL)
            os.kill(os.getpid(), received)


def _name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:  # pragma: no cover - only the signals above are received
        return str(signum)
