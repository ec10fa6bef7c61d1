"""Contract §18's watchdog on every run: what it keeps, and what a push costs.

Counted, not timed: live run records after many runs, and how often the
watchdog reads whether a run is still live.
"""

from __future__ import annotations

import gc

import pytest
import trio
import trio.testing

import trio_delegate as td
from trio_delegate._core._grace import Grace
from trio_delegate._core._run import Run

from .helpers import ignores_cancellation


async def _done(ctx: td.ChildContext) -> str:
    return "ok"


def _run_records(owner: str) -> int:
    """The run records of *owner* still alive (others' runs in the process aside)."""
    gc.collect()
    return sum(1 for obj in gc.get_objects() if type(obj) is Run and obj.owner == owner)


async def test_settled_runs_with_a_deadline_are_not_kept_by_the_watchdog(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Each run has a deadline, so each start gives the watchdog an entry; the
    # entries of runs that settled must not keep their records for long.
    config = td.Config(retention_max_runs=1, subagent_timeout_seconds=3_600)
    async with (
        td.open_runtime([td.Subagent("done", _done)], config=config) as rt,
        rt.open_parent("watched") as parent,
    ):
        for _ in range(1_000):
            await parent.delegate("done", "t")
        # One retained, and the watchdog's rebuild bound (a small constant with
        # one run task at a time); never the 1,000 runs.
        assert _run_records("watched") <= 100


class _Pending:
    """Stands in for a pending run the close reached: live, without a task."""

    reads = 0

    def __init__(self) -> None:
        self.deadline = float("inf")

    @property
    def is_live(self) -> bool:
        _Pending.reads += 1
        return True


async def test_entries_of_pending_runs_do_not_make_every_push_rebuild_the_heap() -> None:
    # A close delivers its cancellation to every live run, the pending runs of
    # nested parents too: live entries without a run task. Rebuilding the heap
    # on each push while they wait would read every entry per push (quadratic).
    grace = Grace(30.0, trio.current_time)
    entries = 2_000
    _Pending.reads = 0
    for _ in range(entries):
        grace.delivered(_Pending(), trio.current_time())  # type: ignore[arg-type]
    assert _Pending.reads <= 4 * entries


GRACE = 7.0


async def test_a_stubborn_run_after_one_that_settled_is_decided_a_grace_after_its_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    subagents = [
        td.Subagent("done", _done, timeout_seconds=5),
        td.Subagent("stubborn", ignores_cancellation, timeout_seconds=5),
        td.Subagent("quick", ignores_cancellation, timeout_seconds=2),
    ]
    config = td.Config(cancel_grace_seconds=GRACE, fail_closed=False)
    async with td.open_runtime(subagents, config=config) as rt, rt.open_parent() as parent:
        await parent.delegate("done", "t")  # its watchdog entry would be due at 5 + GRACE
        await trio.sleep(1)
        late = await parent.start("stubborn", "t")  # due at 6 + GRACE
        quick = await parent.start("quick", "t")  # due at 3 + GRACE: earlier than both
        with pytest.raises(td.RunTimedOutError, match="did not stop"):
            await parent.wait(quick.run_id)
        assert trio.current_time() == pytest.approx(3 + GRACE)
        with pytest.raises(td.RunTimedOutError, match="did not stop"):
            await parent.wait(late.run_id)
        assert trio.current_time() == pytest.approx(6 + GRACE)


class _Steps(trio.abc.Instrument):
    """Counts the steps of the grace watchdog's task."""

    def __init__(self) -> None:
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name == "trio_delegate grace":
            self.steps += 1


async def test_the_watchdog_does_not_run_once_per_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Every run has a deadline, and every run settles long before it: none
    # of them needs the watchdog to look, so it must not be woken per run.
    steps = _Steps()
    trio.lowlevel.add_instrument(steps)
    try:
        async with (
            td.open_runtime([td.Subagent("done", _done)]) as rt,
            rt.open_parent() as parent,
        ):
            for _ in range(500):
                await parent.delegate("done", "t")
                handle = await parent.start("done", "t")
                await parent.wait(handle.run_id)
            assert steps.steps <= 10
    finally:
        trio.lowlevel.remove_instrument(steps)
