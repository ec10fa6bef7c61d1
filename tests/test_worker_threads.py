"""Work the runtime does on worker threads keeps a ``MockClock`` still (contract §14).

A task waiting for a thread counts as blocked, so without care an autojump
clock (or a test stepping with ``wait_all_tasks_blocked``) jumps to the next
deadline while the thread still works, and the same test ends differently
from one run to the next.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import trio
import trio.testing

import trio_delegate as td
from trio_delegate._threads import run_sync

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
    # Checking this result would take minutes: past RUNAWAY_SECONDS of real
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
