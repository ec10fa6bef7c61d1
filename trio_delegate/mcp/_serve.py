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
from .._core._runtime import unstopped_runs
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
    first: FirstAnswer | None,
    signals: AsyncIterator[int] | None,
) -> None:
    received: int | None = None
    stdin = None
    if first is not None:
        # As the SDK's transport reads stdin: UTF-8, undecodable bytes replaced.
        stdin = Screened(io.TextIOWrapper(first.stdin(), encoding="utf-8", errors="replace"))
    async with (
        open_runtime(subagents, config=config, store=store) as runtime,
        stdio_server(stdin=stdin) as streams,
    ):
        server = make_server(runtime)
        logger.info("%s", ready)
        exit_guard = _ExitGuard(runtime)
        async with trio.open_nursery() as nursery:
            if signals is not None:

                async def watch(signals: AsyncIterator[int]) -> None:
                    nonlocal received
                    async for signum in signals:
                        if received is not None:
                            # A second signal: do not wait out the grace.
                            exit_guard.exit_now(f"stopped by a second {_name(signum)}", signum)
                        received = signum
                        exit_guard.arm(f"stopped by {_name(signum)}", signum)
                        nursery.cancel_scope.cancel()

                # A system task: it must still hear a second signal while the
                # runtime's close waits for runners that do not stop.
                trio.lowlevel.spawn_system_task(watch, signals)
            read_stream, write_stream = streams
            if first is not None:
                write_stream = _Answered(write_stream, first)
            watched = _Watched(read_stream, lambda: exit_guard.arm("stdin ended", None))
            async with mended(watched, write_stream, stdin) as readable:
                await server.run(readable, write_stream, server.create_initialization_options())
            exit_guard.arm("the connection ended", None)
            nursery.cancel_scope.cancel()
        if received is not None:
            # The connection's runs are settled and their processes gone;
            # only the stdin reader is left, blocked for good.
            logger.info("stopped by %s; the connection's runs were cancelled", _name(received))
            stuck = _stuck(runtime)
            if stuck:
                logger.warning(
                    "exiting and abandoning the runs whose runners did not stop: %s",
                    ", ".join(stuck),
                )
            signal.signal(received, signal.SIG_DFL)
            os.kill(os.getpid(), received)


#: How long after the grace the server waits for its runtime to close before it
#: exits anyway (contract §18): room for the stores to commit the last records.
_EXIT_MARGIN_SECONDS: Final = 3.0


class _ExitGuard:
    """Ends the process if the runtime's close outlasts the grace (contract §18).

    A runner that does not stop is decided ``cancel_grace_seconds`` after
    its cancellation, but its task holds the runtime open until it returns,
    and Trio cannot kill it. Once the server is stopping, a timer on a
    daemon thread (which a runner blocking the event loop cannot hold up
    either) names the runs it abandons on stderr and exits with a non-zero
    status: 128 plus the signal's number, or 1 when the input ended.
    """

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._timer: threading.Timer | None = None

    def arm(self, why: str, signum: int | None) -> None:
        """Start the countdown (once: later calls keep the first one)."""
        if self._timer is not None:
            return
        delay = self._runtime.config.cancel_grace_seconds + _EXIT_MARGIN_SECONDS
        timer = threading.Timer(delay, self.exit_now, (why, signum))
        timer.daemon = True
        self._timer = timer
        timer.start()

    def exit_now(self, why: str, signum: int | None) -> None:
        """Name the runs that are still running on stderr, and end the process."""
        try:
            stuck = ", ".join(_stuck(self._runtime)) or "none"
        except Exception:  # pragma: no cover - read from the timer's thread, racing the loop
            stuck = "(they could not be listed)"
        line = (
            f"trio-delegate: {why}, and the runtime did not close within "
            f"Config.cancel_grace_seconds ({self._runtime.config.cancel_grace_seconds:g} s) "
            f"plus {_EXIT_MARGIN_SECONDS:g} s; exiting and abandoning the runs whose runners "
            f"did not stop: {stuck}\n"
        )
        try:
            os.write(2, line.encode("utf-8", "backslashreplace"))
        finally:
            os._exit(1 if signum is None else 128 + signum)


def _stuck(runtime: Runtime) -> list[str]:
    """The runs still running in *runtime*: decided without their runners, or live."""
    abandoned, live = unstopped_runs(runtime)
    named = [
        f"{run_id} (subagent {subagent!r}, still running {seconds:.1f} s after it was decided)"
        for run_id, subagent, seconds in abandoned
    ]
    named += [
        f"{run_id} (subagent {subagent!r}, {status.value})" for run_id, subagent, status in live
    ]
    return named


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


def _name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:  # pragma: no cover - only the signals above are received
        return str(signum)
