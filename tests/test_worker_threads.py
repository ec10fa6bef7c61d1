"""Work the runtime does on worker threads keeps a ``MockClock`` still (contract §14).

A task waiting for a thread counts as blocked, so without care an autojump
clock (or a test stepping with ``wait_all_tasks_blocked``) jumps to the next
deadline while the thread still works, and the same test ends differently
from one run to the next.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import trio
import trio.testing

import trio_delegate as td
from trio_delegate._threads import let_clock_move, run_sync

from .helpers import sleeping, sub
from .hostile_strategies import _exponential_refs

#: Large enough that the result is checked and encoded on a worker thread.
BIG = list(range(20_000))


async def test_a_result_encoded_on_a_thread_does_not_meet_the_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with (
        td.open_runtime([sub("worker", sleeping(1, BIG), timeout_seconds=2)]) as rt,
        rt.open_parent("root") as parent,
    ):
        for _ in range(5):
            start = trio.current_time()
            assert (await parent.delegate("worker", "big")).final_result == BIG
            assert trio.current_time() - start == 1.0


async def test_a_result_checked_on_a_thread_does_not_meet_the_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    schema = {"type": "array", "items": {"type": "integer", "minimum": 0}}
    async with (
        td.open_runtime([sub("worker", sleeping(1, BIG), timeout_seconds=2)]) as rt,
        rt.open_parent("root") as parent,
    ):
        for _ in range(5):
            start = trio.current_time()
            result = await parent.delegate("worker", "big", final_schema=schema)
            assert result.final_result == BIG
            assert trio.current_time() - start == 1.0


async def test_store_work_on_a_thread_does_not_move_the_clock(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    # The watcher polls the file every 0.5 virtual seconds, each poll a
    # thread call; the clock must still read exactly the runner's sleeps.
    store = td.SQLiteStore(tmp_path / "runs.db", poll_interval=0.5)
    async with (
        td.open_runtime([sub("worker", sleeping(0.75))], store=store) as rt,
        rt.open_parent("root") as parent,
    ):
        start = trio.current_time()
        for _ in range(8):
            assert (await parent.delegate("worker", "step")).final_result == "done"
        assert trio.current_time() - start == 8 * 0.75


async def test_a_cancelled_caller_still_waits_for_its_thread(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # As trio.to_thread.run_sync: the thread is not abandoned, its result is
    # delivered, and the clock stays put until it is.
    with trio.CancelScope() as scope:

        def work() -> int:
            trio.from_thread.run_sync(scope.cancel)
            return 7

        assert await run_sync(work) == 7
        await trio.lowlevel.checkpoint()
        raise AssertionError("the scope was cancelled")
    assert scope.cancelled_caught
    assert trio.current_time() == 0.0


async def test_an_error_on_the_thread_comes_out_as_itself() -> None:
    def fail() -> None:
        raise KeyError("nope")

    with pytest.raises(KeyError, match="nope"):
        await run_sync(fail)


async def test_a_runaway_check_still_meets_its_virtual_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Checking this result would take minutes: past RUNAWAY_STEPS of counted
    # time the clock may move again, and the run's deadline stops the check.
    schema = _exponential_refs(40)
    async with (
        td.open_runtime(
            [sub("worker", sleeping(1, "a" * 30 + "b"), timeout_seconds=5)],
            config=td.Config(fail_closed=False),
        ) as rt,
        rt.open_parent("root") as parent,
    ):
        started = time.monotonic()
        with pytest.raises(td.RunTimedOutError):
            await parent.delegate("worker", "costly", final_schema=schema)
        assert trio.current_time() == 5.0  # its deadline, 5 s after it started
        assert time.monotonic() - started < 30


def _count(n: int) -> int:
    """A fixed amount of pure-Python work (it holds the GIL while it runs)."""
    total = 0
    for i in range(n):
        total += i
    return total


def _timed_count(n: int) -> float:
    started = time.thread_time()
    _count(n)
    return time.thread_time() - started


async def test_waiting_for_a_thread_does_not_compete_with_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Keeping the clock still by checkpointing in a loop took the GIL from the
    # worker: the event loop's thread spent as much CPU time as the worker,
    # or more. Waiting costs it a small share of the worker's.
    await trio.lowlevel.checkpoint()
    loop_started = time.thread_time()
    worker = await run_sync(_timed_count, 5_000_000)
    loop = time.thread_time() - loop_started
    assert loop < worker / 4, f"the loop's thread spent {loop:.3f} s, the worker {worker:.3f} s"


async def test_wait_all_tasks_blocked_waits_for_a_thread(
    mock_clock: trio.testing.MockClock,
) -> None:
    done: list[int] = []

    async def job() -> None:
        done.append(await run_sync(_count, 2_000_000))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(job)
        await trio.testing.wait_all_tasks_blocked()
        assert done == [_count(2_000_000)]


async def test_a_job_that_lets_the_clock_move_waits_for_the_others(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # One job lets the clock move at once and then waits for the other; the
    # other keeps the clock still until its own task has its result.
    other_done = threading.Event()
    woke_after: list[bool] = []

    def patient() -> None:
        let_clock_move()
        other_done.wait()

    def busy() -> int:
        try:
            return _count(2_000_000)
        finally:
            other_done.set()

    async def sleeper() -> None:
        await trio.sleep(1)
        woke_after.append(busy_result != [])

    busy_result: list[int] = []

    async def run_busy() -> None:
        busy_result.append(await run_sync(busy))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_sync, patient)
        nursery.start_soon(run_busy)
        nursery.start_soon(sleeper)
    assert woke_after == [True]
    assert trio.current_time() == 1.0
