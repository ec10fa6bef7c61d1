"""Serving the delegation tools over stdio, as a process's main job."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import AsyncIterator, Iterable
from typing import Final

import trio
from mcp.server.stdio import stdio_server

from .. import Config, ResultStore, Subagent, open_runtime
from ._server import DEFAULT_NAME, build_server, logger

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
) -> None:
    """Serve the delegation tools over this process's stdin and stdout.

    Opens a runtime for the life of the server and serves one MCP
    connection (see :func:`build_server`) until the client closes stdin.
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

    Raises:
        InvalidArgumentsError: malformed subagents or config.
    """
    if threading.current_thread() is not threading.main_thread():
        await _serve(subagents, config, store, name, None)
        return
    with trio.open_signal_receiver(*_STOP_SIGNALS) as signals:
        await _serve(subagents, config, store, name, signals)


async def _serve(
    subagents: Iterable[Subagent],
    config: Config | None,
    store: ResultStore | None,
    name: str,
    signals: AsyncIterator[int] | None,
) -> None:
    received: int | None = None
    async with (
        open_runtime(subagents, config=config, store=store) as runtime,
        stdio_server() as streams,
    ):
        server = build_server(runtime, name=name)
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
            await server.run(read_stream, write_stream, server.create_initialization_options())
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
