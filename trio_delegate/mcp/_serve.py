"""Serving the delegation tools over stdio, as a process's main job."""

from __future__ import annotations

import functools
import io
import json
import os
import signal
import threading
from collections.abc import AsyncIterator, Callable, Iterable
from typing import TYPE_CHECKING, Any, Final

import mcp_types
import trio
from mcp.server import Server
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

from .. import Config, ResultStore, Runtime, Subagent, open_runtime
from ._exit import ExitGuard, relayed_signals, signal_name, stuck_runs
from ._server import (
    DEFAULT_FOREGROUND_LIMIT_SECONDS,
    DEFAULT_NAME,
    DEFAULT_PROGRESS_INTERVAL_SECONDS,
    build_server,
    logger,
)
from ._wire import Screened, mended

if TYPE_CHECKING:
    from .._first_answer import FirstAnswer

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
    normally would wait for the client to close stdin.) The signals are
    also heard on a thread of their own, so that the process exits
    ``cancel_grace_seconds`` plus 3 s later even while a runner blocks the
    event loop (see ``trio_delegate.mcp._exit``).

    A client that closes its end of stdout ends the connection as the end
    of stdin does: its runs are cancelled and joined, and one line is
    logged. (The SDK's own reader of stdin, used here, cannot be abandoned:
    the call returns once stdin ends too. ``trio-delegate serve`` reads
    stdin itself and exits at once.)

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
    await serve_answered(
        None,
        subagents,
        config=config,
        store=store,
        name=name,
        foreground_limit_seconds=foreground_limit_seconds,
        progress_interval_seconds=progress_interval_seconds,
        owner=owner,
    )


async def serve_answered(
    first: FirstAnswer | None,
    subagents: Iterable[Subagent],
    *,
    config: Config | None = None,
    store: ResultStore | None = None,
    name: str = DEFAULT_NAME,
    foreground_limit_seconds: float | None = DEFAULT_FOREGROUND_LIMIT_SECONDS,
    progress_interval_seconds: float = DEFAULT_PROGRESS_INTERVAL_SECONDS,
    owner: str | None = None,
) -> None:
    """:func:`serve_stdio`, reading stdin through *first* when given.

    ``trio-delegate serve`` starts reading (and maybe answering) the
    client's first line before it imports the SDK (see
    ``trio_delegate._first_answer``); the connection then goes on from there.

    Args:
        first: the first line's reader, or ``None`` to read stdin afresh.
        subagents: as for :func:`serve_stdio`.
        config: as for :func:`serve_stdio`.
        store: as for :func:`serve_stdio`.
        name: as for :func:`serve_stdio`.
        foreground_limit_seconds: as for :func:`serve_stdio`.
        progress_interval_seconds: as for :func:`serve_stdio`.
        owner: as for :func:`serve_stdio`.

    Raises:
        InvalidArgumentsError: malformed subagents, config or limits.
    """
    subagents = tuple(subagents)
    config = config if config is not None else Config()
    guard = ExitGuard(config.cancel_grace_seconds)
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
        first,
        guard,
    )
    if threading.current_thread() is not threading.main_thread():
        await serve(None)
        return
    with (
        trio.open_signal_receiver(*_STOP_SIGNALS) as signals,
        # The countdown to a forced exit starts even while a runner holds
        # the event loop (and Trio's signal watcher with it).
        relayed_signals(_STOP_SIGNALS, guard.signalled),
    ):
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
    first: FirstAnswer | None,
    guard: ExitGuard,
    signals: AsyncIterator[int] | None,
) -> None:
    stdin = None
    if first is not None:
        # As the SDK's transport reads stdin: UTF-8, undecodable bytes replaced.
        # The reading thread reports the end of the input itself: the event
        # loop may be held up by a runner.
        stdin = Screened(
            io.TextIOWrapper(
                first.stdin(on_end=functools.partial(guard.arm, "stdin ended", None)),
                encoding="utf-8",
                errors="replace",
            )
        )
    async with open_runtime(subagents, config=config, store=store) as runtime:
        guard.runtime = runtime
        try:
            async with stdio_server(stdin=stdin) as streams:
                server = make_server(runtime)
                logger.info("%s", ready)
                received = await _connection(server, streams, first, stdin, guard, signals)
                if received is not None:
                    # The connection's runs are settled and their processes gone;
                    # only the stdin reader is left, blocked for good.
                    logger.info(
                        "stopped by %s; the connection's runs were cancelled",
                        signal_name(received),
                    )
                    stuck = stuck_runs(runtime)
                    if stuck:
                        logger.warning(
                            "exiting and abandoning the runs whose runners did not stop: %s",
                            ", ".join(stuck),
                        )
                    signal.signal(received, signal.SIG_DFL)
                    os.kill(os.getpid(), received)
        except* (BrokenPipeError, ConnectionResetError):
            # The client closed its end of stdout (it exited, or stopped
            # reading): the end of the connection, as the end of its input is.
            # Its runs were cancelled and joined on the way here.
            logger.warning(
                "the client stopped reading (its end of stdout is closed); "
                "the connection ended and its runs were cancelled"
            )


async def _connection(
    server: Server[Any],
    streams: tuple[Any, Any],
    first: FirstAnswer | None,
    screened: Screened | None,
    guard: ExitGuard,
    signals: AsyncIterator[int] | None,
) -> int | None:
    """Serve the connection on *streams* until it ends, or a stop signal cuts
    it short; return that signal's number, or ``None``."""
    received: int | None = None
    async with trio.open_nursery() as nursery:
        if signals is not None:

            async def watch(signals: AsyncIterator[int]) -> None:
                nonlocal received
                async for signum in signals:
                    if received is None:
                        received = signum
                        # The signal relay may not have been scheduled yet: the
                        # countdown must be the signal's, not the cancelled
                        # connection's. (A second signal is the relay's to count.)
                        guard.arm(f"stopped by {signal_name(signum)}", signum)
                    nursery.cancel_scope.cancel()

            # A system task: it keeps the signals' queue drained while the
            # runtime's close waits for runners that do not stop.
            trio.lowlevel.spawn_system_task(watch, signals)
        # The connection can also be cancelled from outside (the transport
        # failed): the countdown starts then, not once its runs are joined.
        nursery.start_soon(_arm_when_cancelled, guard)
        read_stream, write_stream = streams
        if first is not None:
            write_stream = _Answered(write_stream, first)
        watched = _Watched(read_stream, lambda: guard.arm("stdin ended", None))
        async with mended(watched, write_stream, screened) as readable:
            await server.run(readable, write_stream, server.create_initialization_options())
        guard.arm("the connection ended", None)
        nursery.cancel_scope.cancel()
    return received


async def _arm_when_cancelled(guard: ExitGuard) -> None:
    try:
        await trio.sleep_forever()
    finally:
        guard.arm("the connection ended", None)


class _Answered:
    """*stream*, the way to the client, without the SDK's answer to a first
    line already answered (the one carrying *first*'s private id).

    That answer is checked to be the one given: a difference (an SDK whose
    answers changed) is logged as a warning, naming both.
    """

    def __init__(self, stream: Any, first: FirstAnswer) -> None:
        self._stream = stream
        self._first = first

    async def send(self, item: SessionMessage) -> None:
        message = item.message
        answered = self._first.answer
        if (
            answered is not None
            and isinstance(message, mcp_types.JSONRPCResponse | mcp_types.JSONRPCError)
            and message.id == self._first.private_id
        ):
            given = json.loads(message.model_dump_json(by_alias=True, exclude_unset=True))
            given["id"] = answered["id"]
            if given != answered:
                logger.warning(
                    "the first answer differed from the MCP SDK's: %s was sent, the SDK answers %s",
                    json.dumps(answered),
                    json.dumps(given),
                )
            return
        await self._stream.send(item)

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def __aenter__(self) -> _Answered:
        await self._stream.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._stream.__aexit__(*exc_info)


class _Watched:
    """*stream* (iterated by ``async for``), calling *on_end* when it ends."""

    def __init__(self, stream: Any, on_end: Callable[[], None]) -> None:
        self._stream = stream
        self._on_end = on_end

    def __aiter__(self) -> _Watched:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self._stream.__anext__()
        except StopAsyncIteration:
            self._on_end()
            raise
