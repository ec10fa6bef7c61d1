"""A Trio run in a helper thread, driven step by step from synchronous code.

Hypothesis state machines call their rules from plain synchronous code, and
a Trio runtime must live in one Trio run from the first rule to the last.
:class:`TrioThread` keeps that run in a helper thread and runs every call
in **one** long-lived Trio task, one call at a time. Because it is always
the same task, a test may enter ``open_runtime(...)`` or ``open_parent(...)``
in one call and leave it in a later one (Trio requires a nursery to be left
by the task that entered it).
"""

from __future__ import annotations

import concurrent.futures
import math
import threading
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager, suppress
from typing import Any, Generic, Self, TypeVar, TypeVarTuple, Unpack, final

import attrs
import trio
import trio.testing

from ._clock import settle

__all__ = ["Entered", "TrioThread"]

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


@attrs.define(eq=False)
class _Job:
    call: Callable[[], Awaitable[Any]]
    future: concurrent.futures.Future[Any] = attrs.Factory(concurrent.futures.Future)


@final
@attrs.define(eq=False)
class Entered(Generic[T]):
    """An ``async with`` block entered by :meth:`TrioThread.enter`, not left yet.

    Attributes:
        value: what the block's ``__aenter__`` returned (``as value``).
    """

    value: T
    _manager: AbstractAsyncContextManager[T]
    _thread: TrioThread
    _open: bool = True

    @property
    def is_open(self) -> bool:
        """Whether the block has not been left yet."""
        return self._open

    async def aexit(self) -> None:
        """Leave the block normally; call it inside the Trio thread (e.g. via ``call``).

        Raises:
            RuntimeError: the block was left already.
            BaseException: whatever leaving the block raised.
        """
        if not self._open:
            raise RuntimeError("this block was left already")
        self._open = False
        self._thread._forget(self)
        await self._manager.__aexit__(None, None, None)

    def exit(self) -> None:
        """Leave the block normally, from the calling thread.

        Raises:
            RuntimeError: the block was left already.
            BaseException: whatever leaving the block raised.
        """
        self._thread.call(self.aexit)


@final
class TrioThread:
    """One Trio run in a helper thread; every call runs in the same Trio task.

    Args:
        clock: the run's clock, e.g. ``mock_clock()``; Trio's default when omitted.
        call_timeout: real seconds to wait for one call before giving up
            (a deadlock guard, not a sleep), or ``None`` to wait forever.

    Use it as a context manager. Leaving it leaves every block still entered
    (newest first), then ends the run.

    Example::

        with TrioThread(clock=mock_clock()) as host:
            runtime = host.enter(td.open_runtime(subagents)).value
            parent = host.enter(runtime.open_parent("root"))
            handle = host.call(parent.value.start, "worker", "task")
            parent.exit()
    """

    def __init__(
        self, *, clock: trio.abc.Clock | None = None, call_timeout: float | None = 60.0
    ) -> None:
        self._clock = clock
        self._call_timeout = call_timeout
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._send: trio.MemorySendChannel[_Job] | None = None
        self._crash: BaseException | None = None
        self._entered: list[Entered[Any]] = []

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def start(self) -> None:
        """Start the helper thread and its Trio run.

        Raises:
            RuntimeError: it was started already, or Trio failed to start.
        """
        if self._thread is not None:
            raise RuntimeError("this TrioThread was started already")
        self._thread = threading.Thread(
            target=self._thread_main, name="trio_delegate.testing.TrioThread", daemon=True
        )
        self._thread.start()
        self._ready.wait()
        if self._token is None:
            raise RuntimeError("the Trio run did not start") from self._crash

    def call(self, async_fn: Callable[[Unpack[Ts]], Awaitable[T]], *args: *Ts) -> T:
        """Run ``await async_fn(*args)`` in the Trio task and return its result.

        Raises:
            TimeoutError: it took longer than *call_timeout* real seconds.
            RuntimeError: the thread is not running.
            BaseException: whatever the call raised.
        """

        async def job() -> T:
            return await async_fn(*args)

        return self._submit(job)

    def call_sync(self, fn: Callable[[Unpack[Ts]], T], *args: *Ts) -> T:
        """Run ``fn(*args)`` in the Trio task (so it may read the Trio clock).

        Raises:
            as :meth:`call`.
        """

        async def job() -> T:
            return fn(*args)

        return self._submit(job)

    def enter(self, manager: AbstractAsyncContextManager[T]) -> Entered[T]:
        """Enter an ``async with`` block in the Trio task, leaving it open.

        Returns:
            an :class:`Entered` handle: ``.value`` is what the block yields;
            ``.exit()`` leaves it.

        Raises:
            as :meth:`call`, with whatever entering raised.
        """

        async def job() -> Entered[T]:
            value = await manager.__aenter__()
            entered = Entered(value, manager, self)
            self._entered.append(entered)
            return entered

        return self._submit(job)

    def close(self) -> None:
        """Leave every block still entered (newest first), then end the run.

        Raises:
            BaseException: the first error a block raised while being left,
                after everything has been stopped.
        """
        if self._thread is None:
            return
        errors: list[BaseException] = []
        if self._token is not None:
            while self._entered:
                entered = self._entered[-1]
                try:
                    entered.exit()
                except BaseException as exc:
                    errors.append(exc)
                finally:
                    self._forget(entered)
            send = self._send
            if send is not None:
                with suppress(trio.RunFinishedError):
                    self._token.run_sync_soon(send.close)
        self._thread.join(self._call_timeout)
        self._thread = None
        if self._crash is not None:
            errors.append(self._crash)
        if errors:
            raise errors[0]

    def _forget(self, entered: Entered[Any]) -> None:
        if entered in self._entered:
            self._entered.remove(entered)

    def _submit(self, call: Callable[[], Awaitable[T]]) -> T:
        token, send = self._token, self._send
        if token is None or send is None or self._thread is None:
            raise RuntimeError("this TrioThread is not running: use it in a `with` block")
        if threading.current_thread() is self._thread:
            # The job would wait in this very thread's queue while the thread
            # blocks on its answer: a deadlock until call_timeout.
            raise RuntimeError(
                "TrioThread.call, call_sync and enter cannot be used from inside the "
                "TrioThread's own Trio run (a runner or task it runs): await the function "
                "directly there"
            )
        job = _Job(call)
        try:
            token.run_sync_soon(send.send_nowait, job)
        except trio.RunFinishedError:
            raise RuntimeError("the Trio run of this TrioThread has ended") from self._crash
        try:
            result: T = job.future.result(timeout=self._call_timeout)
        except concurrent.futures.TimeoutError:
            raise TimeoutError(
                f"the call did not finish within {self._call_timeout} s of real time; the "
                "Trio run may be deadlocked (a wait nobody will ever satisfy?)"
            ) from None
        return result

    def _thread_main(self) -> None:
        try:
            trio.run(self._host, clock=self._clock)
        except BaseException as exc:
            self._crash = exc
        finally:
            self._ready.set()

    async def _host(self) -> None:
        send, receive = trio.open_memory_channel[_Job](math.inf)
        self._send = send
        self._token = trio.lowlevel.current_trio_token()
        self._ready.set()
        async with receive, trio.open_nursery() as nursery:
            async for job in receive:
                try:
                    value = await job.call()
                except trio.Cancelled:
                    # The host task itself is being cancelled: report it and stop.
                    job.future.set_exception(
                        RuntimeError("the call was cancelled inside the Trio thread")
                    )
                    raise
                except BaseException as exc:
                    nursery.start_soon(_report, job.future.set_exception, exc)
                else:
                    nursery.start_soon(_report, job.future.set_result, value)


async def _report(answer: Callable[[Any], None], value: Any) -> None:
    """Hand a call's outcome to the calling thread once the Trio run is idle.

    The next call then always finds every task parked, whatever the calling
    thread's timing: the order in which Trio runs tasks stays a function of
    the calls alone, so a run under ``MockClock`` (and a seeded scheduler, as
    pytest-trio sets up under Hypothesis) is reproducible.
    """
    await settle()
    answer(value)
