"""Work on worker threads that a ``MockClock`` does not mistake for idleness.

A Trio task waiting for a worker thread counts as blocked. On a
``trio.testing.MockClock`` with autojump, or under
``trio.testing.wait_all_tasks_blocked`` (what a test's manual clock steps
with), the clock would then jump to the next deadline while the thread still
works: a run whose large result is being encoded could meet its deadline, a
store's poll could fire early, and the same test would end differently from
one run to the next. Virtual time should stand still while real work is done,
as it does for work on the event loop itself.

So on a ``MockClock`` (and only there) a task waits for its thread while a
companion task keeps checkpointing: the run is never idle, the clock does not
move, and ``wait_all_tasks_blocked`` returns only once the thread is done.
Everything else about ``trio.to_thread.run_sync`` is kept: the limiter, the
caller's cancellation as the thread sees it (``trio.from_thread``), and the
result or exception.

Computation that may run away (a result checked against a costly schema)
keeps the clock still only for a bounded real time (*still_for*): past it,
the clock moves as it would while anything else blocks, so that a virtual
deadline still stops the work, as a real deadline would.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from typing import TypeVar, TypeVarTuple, Unpack

import outcome
import trio

__all__ = ["run_sync"]

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


async def run_sync(
    fn: Callable[[Unpack[Ts]], T],
    *args: *Ts,
    limiter: trio.CapacityLimiter | None = None,
    still_for: float | None = None,
) -> T:
    """``await trio.to_thread.run_sync(fn, *args, limiter=limiter)``, keeping a mock clock still.

    Args:
        fn: the function to call on a worker thread.
        args: its arguments.
        limiter: as for ``trio.to_thread.run_sync``.
        still_for: real seconds for which a mock clock is kept still; ``None``
            for as long as the thread works.

    Raises:
        whatever *fn* raised; ``trio.Cancelled`` as ``trio.to_thread.run_sync``
        would raise it.
    """
    if not _on_mock_clock():
        return await trio.to_thread.run_sync(fn, *args, limiter=limiter)
    done = False
    until = math.inf if still_for is None else time.perf_counter() + still_for

    async def work() -> T:
        return await trio.to_thread.run_sync(fn, *args, limiter=limiter)

    async def keep_busy() -> None:
        # A busy wait on purpose: a task waiting on an Event would be blocked.
        # Shielded, so that the caller's cancellation cannot stop it early
        # while the thread (which is not abandoned) still runs.
        while not done and time.perf_counter() < until:
            await trio.lowlevel.cancel_shielded_checkpoint()
        if done:
            return
        try:
            # Past *still_for*: the clock may move, so that a virtual deadline
            # stops the work.
            await trio.sleep_forever()
        finally:
            # Cancelled (that deadline, or the work ended): the thread is only
            # winding down now, and the clock stands still again until it is
            # done, so that the grace a run gets to stop in (contract §18) is
            # not spent in an instant of real time.
            while not done:
                await trio.lowlevel.cancel_shielded_checkpoint()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(keep_busy)
        try:
            # Captured, so that an error comes out of the nursery as itself
            # rather than inside an ExceptionGroup.
            result = await outcome.acapture(work)
        finally:
            done = True
            nursery.cancel_scope.cancel()  # a keep_busy left waiting ends
    return result.unwrap()


def _on_mock_clock() -> bool:
    # A MockClock exists only once trio.testing is imported: a production run
    # pays one dictionary lookup.
    testing = sys.modules.get("trio.testing")
    if testing is None:
        return False
    return isinstance(trio.lowlevel.current_clock(), testing.MockClock)
