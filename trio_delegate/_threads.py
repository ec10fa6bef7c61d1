"""Work on worker threads that a ``MockClock`` does not mistake for idleness.

A Trio task waiting for a worker thread counts as blocked. On a
``trio.testing.MockClock`` with autojump, or under
``trio.testing.wait_all_tasks_blocked`` (what a test's manual clock steps
with), the clock would then jump to the next deadline while the thread still
works: a run whose large result is being encoded could meet its deadline, a
store's poll could fire early, and the same test would end differently from
one run to the next. Virtual time should stand still while real work is done,
as it does for work on the event loop itself.

Trio decides that a run is idle when, after an I/O wait as long as the
smallest ``wait_all_tasks_blocked`` cushion (none: zero), no task is
runnable. Holding ``MockClock.autojump_threshold`` at infinity would stop
the autojump, but not ``wait_all_tasks_blocked``; and no signal keeps a run
from being idle without a task that is runnable at every turn of the loop.
So on a ``MockClock`` (and on a :class:`VirtualClock`; nowhere else) one *keeper* task per run stays
runnable while any thread job is in flight, and in each of its steps, when
no other task is runnable, it waits for a job to end (at most
:data:`KEEPER_WAIT_SECONDS` of real time) on a ``threading.Event``: that
wait releases the GIL, so the worker runs at full speed instead of
competing with a task that checkpoints in a loop; and the loop still turns
a few hundred times a second, so cancellation, I/O and other tasks go on.
Waiting on the Event costs the event loop's thread no CPU time. The clock
does not move, and ``wait_all_tasks_blocked`` returns only once every
thread is done. Everything else about ``trio.to_thread.run_sync`` is kept:
the limiter, the caller's cancellation as the thread sees it
(``trio.from_thread``), and the result or exception.

Computation that may run away (a result checked against a costly schema)
releases the clock from its worker thread (:func:`let_clock_move`) once it
has done a bounded amount of counted work: from then on the clock moves as it
would while anything else blocks, so that a virtual deadline still stops the
work, as a real deadline would, after the same amount of work on any machine.
"""

from __future__ import annotations

import contextvars
import sys
import threading
from collections.abc import Callable
from typing import Final, TypeVar, TypeVarTuple, Unpack, final

import outcome
import trio

__all__ = ["KEEPER_WAIT_SECONDS", "VirtualClock", "let_clock_move", "run_sync"]

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

#: Longest real time one step of the keeper waits for a thread job to end.
#: The loop turns at least this often while jobs are in flight: short enough
#: that a cancellation or another task waits little, long enough that the
#: keeper costs its workers nothing measurable.
KEEPER_WAIT_SECONDS: Final = 0.005


class VirtualClock(trio.abc.Clock):
    """A clock whose time moves only while the run is idle, as a ``MockClock``'s does.

    Thread jobs of :func:`run_sync` keep it still, as they keep a
    ``MockClock`` still: a clock of this kind (the demo's paced clock) tells
    them so by its type.
    """

    __slots__ = ()


@final
class _Job:
    """One thread job in flight; ``holding`` while it keeps the clock still."""

    __slots__ = ("holding",)

    def __init__(self) -> None:
        self.holding = True


@final
class _Keeper(trio.abc.Instrument):
    """The thread jobs of one Trio run on a ``MockClock``, and the task that keeps it busy.

    As an instrument (while the task runs), it counts the other tasks of each
    turn of the loop: the task waits only in a turn that has none.
    """

    def __init__(self) -> None:
        # Changed by the event loop's thread only.
        self.jobs: set[_Job] = set()
        self.running = False
        self.others = 0
        # Set by a worker when its job ends or lets the clock move.
        self.changed = threading.Event()

    def after_io_wait(self, timeout: float) -> None:
        # The turn about to run is every task runnable now, this one included.
        self.others = trio.lowlevel.current_statistics().tasks_runnable - 1

    def holding(self) -> bool:
        return any(job.holding for job in self.jobs)

    def start(self, job: _Job) -> None:
        self.jobs.add(job)
        self.hold(job)

    def hold(self, job: _Job) -> None:
        job.holding = True
        if not self.running:
            self.running = True
            trio.lowlevel.spawn_system_task(self._keep_busy, name="trio_delegate thread keeper")

    async def _keep_busy(self) -> None:
        trio.lowlevel.add_instrument(self)
        try:
            while self.holding():
                if self.others <= 0:
                    # Nothing else to run: block the loop's thread until a job
                    # ends, with the GIL released, rather than spin.
                    self.changed.wait(KEEPER_WAIT_SECONDS)
                self.changed.clear()
                # Shielded: only the run's end cancels system tasks, and no job
                # can be in flight then (callers wait for their threads).
                await trio.lowlevel.cancel_shielded_checkpoint()
        finally:
            self.running = False
            trio.lowlevel.remove_instrument(self)


_KEEPER: trio.lowlevel.RunVar[_Keeper] = trio.lowlevel.RunVar("trio_delegate_thread_keeper")
#: The job of the worker thread running it (threads run in a copy of the caller's context).
_JOB: contextvars.ContextVar[tuple[_Keeper, _Job] | None] = contextvars.ContextVar(
    "trio_delegate_thread_job", default=None
)


async def run_sync(
    fn: Callable[[Unpack[Ts]], T],
    *args: *Ts,
    limiter: trio.CapacityLimiter | None = None,
) -> T:
    """``await trio.to_thread.run_sync(fn, *args, limiter=limiter)``, keeping a mock clock still.

    Args:
        fn: the function to call on a worker thread; it may call
            :func:`let_clock_move` to let a mock clock move before it ends.
        args: its arguments.
        limiter: as for ``trio.to_thread.run_sync``.

    Raises:
        whatever *fn* raised; ``trio.Cancelled`` as ``trio.to_thread.run_sync``
        would raise it.
    """
    if not _on_mock_clock():
        return await trio.to_thread.run_sync(fn, *args, limiter=limiter)
    try:
        keeper = _KEEPER.get()
    except LookupError:
        keeper = _Keeper()
        _KEEPER.set(keeper)
    job = _Job()

    def work() -> T:
        _JOB.set((keeper, job))
        try:
            return fn(*args)
        finally:
            # Wakes the keeper at once, so that the loop delivers the result
            # without waiting out its wait; the job still holds the clock until
            # its task has the result (below), or the run would be idle between.
            keeper.changed.set()

    keeper.start(job)
    done = False

    async def in_thread() -> T:
        return await trio.to_thread.run_sync(work, limiter=limiter)

    async def hold_once_cancelled() -> None:
        # A job that let the clock move (a runaway check) is stopped by a
        # virtual deadline; from its cancellation on, the clock stands still
        # again until the thread has wound down, so that the grace a run gets
        # to stop in (contract §18) is not spent in an instant of real time.
        try:
            await trio.sleep_forever()
        finally:
            if not done:
                keeper.hold(job)

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(hold_once_cancelled)
            try:
                # Captured, so that an error comes out of the nursery as itself
                # rather than inside an ExceptionGroup.
                result = await outcome.acapture(in_thread)
            finally:
                done = True
                nursery.cancel_scope.cancel()
    finally:
        keeper.jobs.discard(job)
    return result.unwrap()


def let_clock_move() -> None:
    """From a worker thread of :func:`run_sync`: stop keeping a mock clock still.

    The job goes on; the clock moves again as soon as no other job keeps it
    still and every task is blocked. Anywhere else, this does nothing.
    """
    entry = _JOB.get()
    if entry is None:
        return
    keeper, job = entry
    job.holding = False
    keeper.changed.set()


def _on_mock_clock() -> bool:
    clock = trio.lowlevel.current_clock()
    if isinstance(clock, VirtualClock):
        return True
    # A MockClock exists only once trio.testing is imported: a production run
    # pays one dictionary lookup.
    testing = sys.modules.get("trio.testing")
    if testing is None:
        return False
    return isinstance(clock, testing.MockClock)
