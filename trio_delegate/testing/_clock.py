"""Running a runtime on ``trio.testing.MockClock``, and moving its time by hand.

Everything in trio_delegate is timed on the Trio clock (contract §14), so a
test can run hours of virtual time in milliseconds:

* with **autojump** (``run(..., autojump=True)``) the clock jumps to the
  next deadline whenever every task is blocked; a test just awaits;
* with a **manual** clock, time moves only when the test says so:
  :func:`advance` walks it forward deadline by deadline, letting every task
  run until all are blocked at each step, so each wake-up happens at its own
  time and in time order, as it would in real life.

:func:`settle` is the "until all tasks are blocked" part on its own, and
:func:`drive` awaits something while jumping the clock whenever everything
is blocked (an autojump limited to one call).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import TypeVar, TypeVarTuple, Unpack, final

import trio
import trio.testing

__all__ = [
    "advance",
    "advance_until_idle",
    "current_mock_clock",
    "drive",
    "mock_clock",
    "run",
    "settle",
    "jump_to_next_deadline",
]

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

#: drive()'s default bound on virtual time: about 31 years.
DEFAULT_DRIVE_LIMIT = 1e9


def mock_clock(*, autojump: bool = False) -> trio.testing.MockClock:
    """A fresh ``MockClock`` at time 0 that never moves with real time.

    Args:
        autojump: jump to the next deadline whenever every task is blocked
            (threshold 0), instead of moving only when the test jumps it.
    """
    return trio.testing.MockClock(rate=0, autojump_threshold=0 if autojump else math.inf)


def run(async_fn: Callable[[Unpack[Ts]], Awaitable[T]], *args: *Ts, autojump: bool = True) -> T:
    """``trio.run(async_fn, *args)`` on a fresh :func:`mock_clock`.

    Args:
        async_fn: the async function to run.
        args: its positional arguments.
        autojump: whether the clock jumps by itself (see :func:`mock_clock`).

    Returns:
        what *async_fn* returned.
    """

    async def main() -> T:
        return await async_fn(*args)

    return trio.run(main, clock=mock_clock(autojump=autojump))


def current_mock_clock() -> trio.testing.MockClock:
    """The ``MockClock`` of the current Trio run.

    Raises:
        TypeError: the run does not use a ``MockClock``.
    """
    clock = trio.lowlevel.current_clock()
    if not isinstance(clock, trio.testing.MockClock):
        raise TypeError(
            f"this Trio run uses {type(clock).__name__}, not trio.testing.MockClock; start it "
            "with trio_delegate.testing.run(...) or trio.run(..., clock=MockClock())"
        )
    return clock


#: Scheduler rounds (batches of task steps) a :func:`settle` waits for
#: every task to be blocked before it takes a task that never blocks (a loop
#: on ``trio.sleep(0)``) as busy: far more rounds than any chain of wake-ups
#: at one instant takes, few enough to cost milliseconds.
BUSY_ROUNDS = 10_000


@final
class _BusyWatch(trio.abc.Instrument):
    """Counts the scheduler's rounds during one settle; ends it when there are too many.

    Only ``before_io_wait`` is hooked, once a round: an instrument hooked on
    every task step would slow every test that settles.
    """

    def __init__(self, scope: trio.CancelScope) -> None:
        self._scope = scope
        self._rounds = 0

    def before_io_wait(self, timeout: float) -> None:
        self._rounds += 1
        if self._rounds == BUSY_ROUNDS:
            # Some task never blocks; the others are as settled as they will be.
            self._scope.cancel()


async def settle() -> None:
    """Let every other task run until all are blocked, without moving the clock.

    After it returns, everything due at the current instant has happened.
    It wins over autojump: the clock does not move meanwhile.

    A task that never blocks (a loop on ``trio.sleep(0)``) would keep every
    task from being blocked for ever: after :data:`BUSY_ROUNDS` rounds of
    the scheduler the others are taken as settled, and time can move on
    (its deadline, say, can stop it).
    """
    scope = trio.CancelScope()
    watch = _BusyWatch(scope)
    trio.lowlevel.add_instrument(watch)
    try:
        with scope:
            await trio.testing.wait_all_tasks_blocked()
    finally:
        trio.lowlevel.remove_instrument(watch)


async def jump_to_next_deadline() -> bool:
    """Settle, then jump the clock to the next deadline and settle again.

    Returns:
        False when no deadline is pending (every task waits for something
        other than time), without moving the clock; else True.

    Raises:
        TypeError: the run does not use a ``MockClock``.
    """
    clock = current_mock_clock()
    await settle()
    gap = trio.lowlevel.current_statistics().seconds_to_next_deadline
    if gap == math.inf:
        return False
    if gap > 0:
        clock.jump(gap)
    await settle()
    return True


async def advance(seconds: float) -> None:
    """Move the clock forward by *seconds*, one deadline at a time.

    Each deadline on the way is reached exactly and every task runs until all
    are blocked before the clock moves again, so a wake-up at 3 s sees the
    clock at 3 s even when advancing by 10 s. The clock ends exactly
    *seconds* later, settled.

    Args:
        seconds: how far to move, >= 0.

    Raises:
        ValueError: *seconds* is negative or not finite.
        TypeError: the run does not use a ``MockClock``.
    """
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"seconds must be a finite number >= 0, got {seconds!r}")
    clock = current_mock_clock()
    target = trio.current_time() + seconds
    await settle()
    while True:
        gap = trio.lowlevel.current_statistics().seconds_to_next_deadline
        now = trio.current_time()
        if now + gap > target:
            break
        if gap > 0:
            clock.jump(gap)
        await settle()
    now = trio.current_time()
    if target > now:
        clock.jump(target - now)
    await settle()


async def advance_until_idle(*, limit: float = DEFAULT_DRIVE_LIMIT) -> float:
    """Step from deadline to deadline until none is left.

    Args:
        limit: the most virtual seconds to move (a guard against a task that
            sleeps in a loop forever).

    Returns:
        how many virtual seconds the clock moved.

    Raises:
        TimeoutError: a deadline was still pending *limit* seconds later.
        TypeError: the run does not use a ``MockClock``.
    """
    start = trio.current_time()
    await settle()
    while True:
        gap = trio.lowlevel.current_statistics().seconds_to_next_deadline
        if gap == math.inf:
            return trio.current_time() - start
        if trio.current_time() + gap - start > limit:
            raise TimeoutError(
                f"tasks still had deadlines after {limit:g} virtual seconds; something "
                "sleeps in a loop, or the limit is too small"
            )
        await jump_to_next_deadline()


async def drive(
    async_fn: Callable[[*Ts], Awaitable[T]],
    *args: *Ts,
    limit: float | None = None,
) -> T:
    """Await ``async_fn(*args)`` in this task, autojumping the clock meanwhile.

    For a manual clock: while the call is blocked and so is every other task,
    the clock jumps to the next deadline. The previous autojump setting comes
    back when the call ends, and then every task due at that instant runs
    until all are blocked. The call runs in the calling task, so it may leave
    an ``async with`` block that this task entered (a runtime, a parent).

    Args:
        async_fn: the async function to await.
        args: its positional arguments.
        limit: virtual seconds after which a call still blocked is taken as
            blocked forever. It puts the call in a cancel scope, so with a
            limit the call must not leave a block entered outside it. Without
            one, a call waiting for something that never happens waits forever
            (as under autojump).

    Returns:
        what the call returned.

    Raises:
        TimeoutError: the call was still blocked *limit* virtual seconds later.
        TypeError: the run does not use a ``MockClock``.
    """
    clock = current_mock_clock()
    previous = clock.autojump_threshold
    clock.autojump_threshold = 0
    try:
        if limit is None:
            result = await async_fn(*args)
        else:
            with trio.move_on_after(limit) as guard:
                result = await async_fn(*args)
            if guard.cancelled_caught:
                raise TimeoutError(
                    f"the call was still blocked after {limit:g} virtual seconds: it is "
                    "waiting for something that never happens"
                )
    finally:
        clock.autojump_threshold = previous
    await settle()
    return result
