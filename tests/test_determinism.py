"""Contract §14: everything time-based runs on the Trio clock, deterministically,
under ``trio.testing.MockClock`` with and without autojump; runtimes share no state."""

from __future__ import annotations

import pytest
import trio
import trio.testing

import trio_delegate as td
from tests.helpers import advance, forever, open_parent, returning, sleeping, slow_cleanup, sub

S = td.RunStatus


async def test_manual_clock_drives_deadlines_slots_and_retention(
    mock_clock: trio.testing.MockClock,
) -> None:
    config = td.Config(max_concurrent_runs=1, retention_seconds=10, fail_closed=False)
    async with open_parent(
        sub("work", sleeping(3, "w")), sub("idle", forever, timeout_seconds=4), config=config
    ) as parent:
        work = await parent.start("work", "t")
        idle = await parent.start("idle", "t")
        # Without the clock moving nothing happens, however long we let tasks run.
        for _ in range(5):
            await trio.testing.wait_all_tasks_blocked()
        assert trio.current_time() == 0
        assert parent.status(work.run_id).status is S.RUNNING
        assert parent.status(idle.run_id).status is S.PENDING
        await advance(mock_clock, 3)  # work ends at 3; idle starts, deadline 7
        assert parent.status(work.run_id).status is S.COMPLETED
        assert parent.status(idle.run_id).status is S.RUNNING
        await advance(mock_clock, 3.999)
        assert parent.status(idle.run_id).status is S.RUNNING
        await advance(mock_clock, 0.001)
        assert parent.status(idle.run_id).status is S.TIMED_OUT
        await advance(mock_clock, 6)  # t=13: work ended 10 s ago, still kept
        assert parent.status(work.run_id).status is S.COMPLETED
        await advance(mock_clock, 0.5)
        with pytest.raises(td.ExpiredRunError):
            parent.status(work.run_id)
        assert parent.status(idle.run_id).status is S.TIMED_OUT  # ended at 7


async def _timeline() -> list[tuple[float, str]]:
    """One scenario; returns what happened when, relative to its start."""
    origin = trio.current_time()
    events: list[tuple[float, str]] = []

    def note(what: str) -> None:
        events.append((trio.current_time() - origin, what))

    config = td.Config(max_concurrent_runs=2, fail_closed=False)
    async with open_parent(
        sub("fast", sleeping(1, "f")),
        sub("slow", sleeping(4.5, "s")),
        sub("stuck", slow_cleanup(2), timeout_seconds=3),
        config=config,
    ) as parent:
        handles = {name: await parent.start(name, "t") for name in ("fast", "slow", "stuck")}
        note(f"stuck {handles['stuck'].status.value}")
        for name in ("fast", "stuck", "slow"):
            try:
                out = await parent.wait(handles[name].run_id, timeout=2)
                note(f"{name} {getattr(out, 'status', 'result')}")
            except td.DelegationError as exc:
                note(f"{name} {exc.kind()}")
        for name in ("fast", "stuck", "slow"):
            note(f"{name} {parent.status(handles[name].run_id).status.value}")
    note("closed")
    return events


async def test_same_scenario_same_timeline_under_autojump(
    autojump_clock: trio.testing.MockClock,
) -> None:
    first = await _timeline()
    second = await _timeline()
    assert first == second
    assert first == [
        (0, "stuck pending"),
        (1, "fast result"),
        (3, "stuck running"),
        (4.5, "slow result"),
        (4.5, "fast completed"),
        (4.5, "stuck running"),
        (4.5, "slow completed"),
        (6, "closed"),  # stuck: deadline at 1 + 3, then 2 s of cleanup
    ]


async def test_runtimes_share_no_state(autojump_clock: trio.testing.MockClock) -> None:
    config = td.Config(max_live_runs=1, fail_closed=False)
    async with (
        td.open_runtime([sub("idle", forever)], config=config) as first_rt,
        td.open_runtime([sub("idle", forever), sub("ok", returning(1))], config=config) as second,
        first_rt.open_parent("root") as a,
        second.open_parent("root") as b,  # the same owner in another runtime is fine
    ):
        in_a = await a.start("idle", "t")
        in_b = await b.start("idle", "t")  # a's live run does not count here
        assert first_rt.live_runs == 1
        assert second.live_runs == 1
        with pytest.raises(td.UnknownRunError):
            b.status(in_a.run_id)
        with pytest.raises(td.UnknownRunError):
            a.status(in_b.run_id)
        assert a.subagents == ("idle",)
        assert b.subagents == ("idle", "ok")
