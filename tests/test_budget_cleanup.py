"""A budget stop and the runner's shielded cleanup (contract §18 and §20).

A budget stop is a cancel request: the runner may go on in a shielded
cleanup, within ``Config.cancel_grace_seconds``, and report usage there. The
contract bounds the overrun: "The overrun is at most the one report that
crossed the limit." It does not say what becomes of the reports after that
one; the runtime drops them: once a scope was stopped, a report of a run in
it counts nowhere (not for the run, its parent, or the runtime), as a report
after the run settled is dropped. A run cancelled for another reason (a
request, its deadline) still reports in its cleanup as ever, until one of
its reports stops a scope.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

import trio_delegate as td

LOOSE = td.Config(fail_closed=False, cancel_grace_seconds=30)


async def test_reports_in_a_shielded_cleanup_after_the_stop_are_dropped(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The run's spend passes its limit by the crossing report only, whatever its
    shielded cleanup reports; the run reads ``running`` during the cleanup and ends
    ``cancelled`` with the budget as the cause."""
    in_cleanup = trio.Event()
    finish = trio.Event()

    async def runner(ctx: td.ChildContext) -> object:
        try:
            ctx.add_usage(td.Usage(requests=2))
            ctx.add_usage(td.Usage(requests=3))  # 5 > 4: the crossing report
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                in_cleanup.set()
                await finish.wait()
                # What the model call in flight spent, reported on the way out.
                ctx.add_usage(td.Usage(requests=7, output_tokens=100))
                ctx.add_usage(td.Usage(requests=1))
        raise AssertionError("unreachable")

    sub = td.Subagent("w", runner, budget=td.Budget(max_requests=4))
    async with td.open_runtime([sub], config=LOOSE) as rt, rt.open_parent() as p:
        h = await p.start("w", "t")
        await in_cleanup.wait()
        assert p.status(h.run_id).status is td.RunStatus.RUNNING
        finish.set()
        with pytest.raises(td.RunCancelledError) as info:
            await p.wait(h.run_id)
        cause = info.value.__cause__
        assert isinstance(cause, td.BudgetExceededError)
        assert (cause.scope, cause.limit_value, cause.spent) == ("run", 4, 5)
        assert p.usage(h.run_id) == td.Usage(requests=5)
        assert p.usage() == td.Usage(requests=5)
        assert rt.usage == td.Usage(requests=5)


async def test_a_cleanup_past_the_grace_period_reports_into_a_settled_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§18: the grace period decides a run whose runner does not stop; what that
    runner reports afterwards is a report after the run settled: dropped."""
    reported = trio.Event()

    async def runner(ctx: td.ChildContext) -> object:
        try:
            ctx.add_usage(td.Usage(requests=2))  # 2 > 1
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await trio.sleep(100)  # far past the 30 s of grace
                ctx.add_usage(td.Usage(requests=50))
                reported.set()
        raise AssertionError("unreachable")

    sub = td.Subagent("w", runner, budget=td.Budget(max_requests=1))
    async with td.open_runtime([sub], config=LOOSE) as rt, rt.open_parent() as p:
        h = await p.start("w", "t")
        t0 = trio.current_time()
        with pytest.raises(td.RunCancelledError):
            await p.wait(h.run_id)
        assert trio.current_time() - t0 == 30
        await reported.wait()
        assert p.usage(h.run_id) == td.Usage(requests=2)
        assert rt.usage == td.Usage(requests=2)


async def test_the_other_runs_of_a_stopped_parent_report_nothing_more_in_cleanup(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A parent's stop cancels its other runs too: their cleanups' reports are
    dropped, so the parent's spend passes its limit by the crossing report only."""
    spend = trio.Event()
    cleaned = trio.Event()

    async def spender(ctx: td.ChildContext) -> object:
        await spend.wait()
        ctx.add_usage(td.Usage(requests=4))  # 1 + 4 > 4: the crossing report
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def bystander(ctx: td.ChildContext) -> object:
        ctx.add_usage(td.Usage(requests=1))
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await trio.sleep(1)
                ctx.add_usage(td.Usage(requests=10))
                cleaned.set()
        raise AssertionError("unreachable")

    subs = [td.Subagent("s", spender), td.Subagent("b", bystander)]
    async with td.open_runtime(subs, config=LOOSE) as rt:
        async with rt.open_parent(budget=td.Budget(max_requests=4)) as p:
            b = await p.start("b", "t")
            s = await p.start("s", "t")
            await trio.testing.wait_all_tasks_blocked()
            spend.set()
            await cleaned.wait()
            await trio.testing.wait_all_tasks_blocked()
            assert p.status(b.run_id).status is td.RunStatus.CANCELLED
            assert p.usage(b.run_id) == td.Usage(requests=1)
            assert p.usage(s.run_id) == td.Usage(requests=4)
            assert p.usage() == td.Usage(requests=5)
        assert rt.usage == td.Usage(requests=5)


async def test_a_nested_run_of_a_stopped_run_reports_nothing_more_in_cleanup(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A run's budget covers what it delegates: once it was stopped, its nested
    runs' cleanup reports count nowhere."""
    cleaned = trio.Event()

    async def lead(ctx: td.ChildContext) -> object:
        assert ctx.parent is not None
        await ctx.parent.start("leaf", "x")
        await trio.testing.wait_all_tasks_blocked()
        ctx.add_usage(td.Usage(requests=3))  # 3 > 2: the crossing report
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def leaf(ctx: td.ChildContext) -> object:
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await trio.sleep(1)
                ctx.add_usage(td.Usage(requests=10))
                cleaned.set()
        raise AssertionError("unreachable")

    subs = [
        td.Subagent("lead", lead, children=["leaf"], budget=td.Budget(max_requests=2)),
        td.Subagent("leaf", leaf),
    ]
    async with td.open_runtime(subs, config=LOOSE) as rt:
        async with rt.open_parent(subagents=["lead"]) as p:
            h = await p.start("lead", "t")
            await cleaned.wait()
            with pytest.raises(td.RunCancelledError):
                await p.wait(h.run_id)
            assert p.usage(h.run_id) == td.Usage(requests=3)
        assert rt.usage == td.Usage(requests=3)


async def test_a_cleanup_after_a_cancel_request_counts_until_it_crosses_a_limit(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Cancelled by request, a runner's cleanup reports count as ever; the one
    that crosses the limit counts and stops the scope, and the later ones are
    dropped. The run stays ``cancelled`` by the request (it came first, §3)."""
    in_cleanup = trio.Event()

    async def runner(ctx: td.ChildContext) -> object:
        try:
            in_cleanup.set()
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await trio.lowlevel.checkpoint()  # a shielded cleanup that awaits
                ctx.add_usage(td.Usage(requests=2))  # 2: within the limit
                ctx.add_usage(td.Usage(requests=2))  # 4 > 3: crosses
                ctx.add_usage(td.Usage(requests=9))  # dropped
        raise AssertionError("unreachable")

    sub = td.Subagent("w", runner, budget=td.Budget(max_requests=3))
    async with td.open_runtime([sub], config=LOOSE) as rt, rt.open_parent() as p:
        h = await p.start("w", "t")
        await in_cleanup.wait()
        p.cancel(h.run_id)
        with pytest.raises(td.RunCancelledError) as info:
            await p.wait(h.run_id)
        assert not isinstance(info.value.__cause__, td.BudgetExceededError)
        assert p.usage(h.run_id) == td.Usage(requests=4)
        assert rt.usage == td.Usage(requests=4)
