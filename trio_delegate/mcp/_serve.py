"""Serving the delegation tools over stdio, as a process's main job.

The server reads stdin itself rather than through the SDK's transport: on
a thread whose end of input is reported to the :class:`ExitGuard` at once
(even while a runner holds the event loop up), through :class:`Screened`
(the lines the SDK's parser misreads are answered before it), and in reads
that a connection ending first (the client closed its end of stdout)
abandons instead of waiting for the client to close stdin too.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import signal
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import Any, Final, final

import trio
from mcp.server import Server
from mcp.server.stdio import stdio_server

from .. import Budget, Config, ResultStore, Runtime, Subagent, open_runtime
from ._exit import ExitGuard, relayed_signals, signal_name, stuck_runs
from ._server import (
    DEFAULT_FOREGROUND_LIMIT_SECONDS,
    DEFAULT_NAME,
    DEFAULT_PROGRESS_INTERVAL_SECONDS,
    build_server,
    logger,
)
from ._wire import Screened, mended

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
    parent_budget: Budget | None = None,
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
    of stdin does: its runs are cancelled and joined, one line is logged,
    and the call returns without waiting for stdin to end.

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
        parent_budget: what the connection's runs may spend together (its
            parent's budget, contract §20), or ``None``.

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
            parent_budget=parent_budget,
        ),
        _ready_line(subagents, config, store, foreground_limit_seconds),
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
    guard: ExitGuard,
    signals: AsyncIterator[int] | None,
) -> None:
    # The reading thread reports the end of the input itself: the event
    # loop may be held up by a runner.
    with _claimed_stdin(functools.partial(guard.arm, "stdin ended", None)) as stdin:
        await _serve_runtime(subagents, config, store, make_server, ready, stdin, guard, signals)


async def _serve_runtime(
    subagents: tuple[Subagent, ...],
    config: Config,
    store: ResultStore | None,
    make_server: Callable[[Runtime], Server[Any]],
    ready: str,
    stdin: Screened | None,
    guard: ExitGuard,
    signals: AsyncIterator[int] | None,
) -> None:
    async with open_runtime(subagents, config=config, store=store) as runtime:
        guard.runtime = runtime
        try:
            async with stdio_server(stdin=stdin) as streams:
                server = make_server(runtime)
                logger.info("%s", ready)
                received = await _connection(server, streams, stdin, guard, signals)
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


@contextlib.contextmanager
def _claimed_stdin(on_end: Callable[[], None]) -> Iterator[Screened | None]:
    """The client's lines, read from stdin by this server rather than the SDK's transport.

    For as long as the block runs, descriptor 0 points at the null device
    (as the SDK's transport would point it), so that nothing else in the
    process, and no process it starts, reads the client's bytes; the input
    is read from a duplicate that subagents' processes do not inherit.

    Args:
        on_end: called on the reading thread as soon as a read finds the
            end of the input (or fails).

    Yields:
        the lines for ``stdio_server(stdin=)``: UTF-8, undecodable bytes
        replaced, as the SDK's transport reads them. ``None`` where stdin
        is no descriptor of this process (a host that replaced
        ``sys.stdin``) or on Windows: the SDK's transport reads it then.
    """
    if sys.platform == "win32" or not _reads_descriptor_0(sys.stdin):  # pragma: no cover
        yield None
        return
    import fcntl  # POSIX only (above)

    try:
        # Above the standard range, and not inherited by subagents' processes.
        private = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
        null = os.open(os.devnull, os.O_RDONLY)
    except OSError:  # pragma: no cover - no descriptor left
        yield None
        return
    try:
        os.dup2(null, 0)
    finally:
        os.close(null)
    try:
        yield Screened(
            io.TextIOWrapper(
                io.BufferedReader(_Input(private, on_end)), encoding="utf-8", errors="replace"
            )
        )
    finally:
        # The duplicate is never closed: a worker thread can still be blocked
        # reading it (the read is abandoned, not interrupted).
        os.dup2(private, 0)


def _reads_descriptor_0(stream: Any) -> bool:
    try:
        return bool(stream.fileno() == 0)
    except (AttributeError, OSError, ValueError):
        return False


@final
class _Input(io.RawIOBase):
    """The bytes of descriptor *fd*; *on_end* is called when a read finds the end (or fails).

    Closing it leaves the descriptor open: a worker thread can still block
    on it after the transport exits.
    """

    def __init__(self, fd: int, on_end: Callable[[], None]) -> None:
        self._fd = fd
        self._on_end = on_end

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        try:
            data = os.read(self._fd, len(buffer))
        except OSError:
            self._on_end()
            raise
        if not data:
            self._on_end()
        buffer[: len(data)] = data
        return len(data)
