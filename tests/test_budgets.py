"""Contract §20: runners report usage, the runtime adds it up the tree and stops a
scope that goes over its budget."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

import trio_delegate as td
from tests.helpers import returning

S = td.RunStatus
LENIENT = td.Config(fail_closed=False)


def tokens(count: int, cost: float = 0.0) -> td.Usage:
    return td.Usage(requests=1, input_tokens=count, cost_usd=cost)


def spender(*reports: td.Usage, then: float = 1_000.0, result: Any = "done") -> Any:
    """A runner that reports *reports* one second apart, then works *then* seconds."""

    async def runner(ctx: td.ChildContext) -> Any:
        for usage in reports:
            await trio.sleep(1)
            ctx.add_usage(usage)
        await trio.sleep(then)
        return result

    return runner


async def cancelled_cause(parent: td.Parent, run_id: str) -> td.BudgetExceededError:
    with pytest.raises(td.RunCancelledError) as raised:
        await parent.wait(run_id)
    cause = raised.value.__cause__
    assert isinstance(cause, td.BudgetExceededError), raised.value
    assert "by a budget stop" in str(raised.value)
    return cause


# -- counting ------------------------------------------------------------------------


async def test_a_grandchilds_report_counts_once_in_every_scope_above_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: dict[str, str] = {}

    async def leaf(ctx: td.ChildContext) -> str:
        seen["leaf"] = ctx.run_id
        ctx.add_usage(tokens(7, 0.1))
        return "leaf"

    async def middle(ctx: td.ChildContext) -> str:
        assert ctx.parent is not None
        seen["middle"] = ctx.run_id
        seen["middle_owner"] = ctx.parent.owner
        await ctx.parent.delegate("leaf", "go")
        ctx.add_usage(tokens(1))
        return "middle"

    async def top(ctx: td.ChildContext) -> str:
        assert ctx.parent is not None
        await ctx.parent.delegate("middle", "go")
        return "top"

    subagents = [
        td.Subagent("top", top, children=("middle",)),
        td.Subagent("middle", middle, children=("leaf",)),
        td.Subagent("leaf", leaf),
    ]
    async with td.open_runtime(subagents) as rt:
        async with rt.open_parent() as parent, rt.open_parent("other") as other:
            result = await parent.delegate("top", "go")
            assert parent.usage() == td.Usage(requests=2, input_tokens=8, cost_usd=0.1)
            assert parent.usage(result.run_id) == parent.usage()
            assert other.usage() == td.Usage()
            assert parent.status(result.run_id).usage == parent.usage()
        assert rt.usage == td.Usage(requests=2, input_tokens=8, cost_usd=0.1)


async def test_status_settled_and_a_timed_out_wait_carry_the_runs_usage(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runner = spender(td.Usage(output_tokens=3), td.Usage(output_tokens=4), then=5)
    async with (
        td.open_runtime([td.Subagent("w", runner), td.Subagent("q", returning(1))]) as rt,
        rt.open_parent() as parent,
    ):
        quiet = await parent.start("q", "go")
        assert (await parent.wait(quiet.run_id)) is not None
        assert parent.status(quiet.run_id).usage is None  # nothing reported
        async with parent.settled() as settled:
            handle = await parent.start("w", "go")
            assert handle.usage is None
            await trio.sleep(1.5)
            assert parent.status(handle.run_id).usage == td.Usage(output_tokens=3)
            waited = await parent.wait(handle.run_id, timeout=1)
            assert waited == td.RunHandle(
                handle.run_id, "w", S.RUNNING, usage=td.Usage(output_tokens=7)
            )
            async for ended in settled:
                assert ended.usage == td.Usage(output_tokens=7)
                break
        await parent.wait(handle.run_id)


async def test_a_report_of_all_zeros_still_counts_as_reported(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with (
        td.open_runtime([td.Subagent("w", spender(td.Usage(), then=0))]) as rt,
        rt.open_parent() as parent,
    ):
        result = await parent.delegate("w", "go")
        assert parent.status(result.run_id).usage == td.Usage()


async def test_a_report_after_the_run_settled_is_dropped(
    autojump_clock: trio.testing.MockClock,
) -> None:
    kept: list[td.ChildContext] = []

    async def leaky(ctx: td.ChildContext) -> str:
        kept.append(ctx)
        ctx.add_usage(tokens(1))
        return "done"

    async with td.open_runtime([td.Subagent("w", leaky)]) as rt:
        async with rt.open_parent() as parent:
            result = await parent.delegate("w", "go")
            kept[0].add_usage(tokens(100))
            assert parent.usage(result.run_id) == tokens(1)
            assert parent.usage() == tokens(1)
        assert rt.usage == tokens(1)


async def test_add_usage_takes_only_a_usage() -> None:
    async def wrong(ctx: td.ChildContext) -> str:
        ctx.add_usage({"input_tokens": 1})  # type: ignore[arg-type]
        return "unreachable"

    async with (
        td.open_runtime([td.Subagent("w", wrong)], config=LENIENT) as rt,
        rt.open_parent() as parent,
    ):
        with pytest.raises(td.RunFailedError) as raised:
            await parent.delegate("w", "go")
    assert isinstance(raised.value.__cause__, td.InvalidArgumentsError)
    assert "usage must be a trio_delegate.Usage" in str(raised.value.__cause__)


async def test_output_usage_counts_even_when_the_result_fails_validation(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def bad(ctx: td.ChildContext) -> td.Output:
        return td.Output("not an object", usage=tokens(5))

    schema = {"type": "object"}
    async with (
        td.open_runtime([td.Subagent("w", bad, final_schema=schema)], config=LENIENT) as rt,
        rt.open_parent() as parent,
    ):
        with pytest.raises(td.InvalidResultError):
            await parent.delegate("w", "go")
        assert parent.usage() == tokens(5)


async def test_output_usage_stops_other_runs_in_its_scope_but_never_its_own_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def finisher(ctx: td.ChildContext) -> td.Output:
        await trio.sleep(1)
        # A large result is checked on a worker thread after the runner
        # returned: an await, where a cancellation of its own would land.
        return td.Output(list(range(5_000)), usage=tokens(50))

    subagents = [td.Subagent("f", finisher), td.Subagent("w", spender(then=1_000))]
    async with (
        td.open_runtime(subagents, config=LENIENT) as rt,
        rt.open_parent(budget=td.Budget(max_input_tokens=10)) as parent,
    ):
        other = await parent.start("w", "go")
        result = await parent.delegate("f", "go")
        assert result.final_result == list(range(5_000))
        cause = await cancelled_cause(parent, other.run_id)
        assert (cause.scope, cause.limit, cause.limit_value, cause.spent) == (
            "parent",
            "max_input_tokens",
            10,
            50,
        )


def test_a_context_built_alone_takes_reports_and_has_no_budget() -> None:
    ctx = td.ChildContext("r", "w", "task")
    ctx.add_usage(tokens(1))
    assert ctx.remaining() is None
    with pytest.raises(td.InvalidArgumentsError):
        ctx.add_usage(3)  # type: ignore[arg-type]


# -- budget stops -----------------------------------------------------------------


async def test_a_parent_budget_stop_cancels_live_and_pending_runs_and_refuses_admission(
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = td.Config(fail_closed=False, max_concurrent_runs=2)
    subagents = [
        td.Subagent("spend", spender(tokens(6), tokens(6))),
        td.Subagent("idle", spender()),
    ]
    async with (
        td.open_runtime(subagents, config=config) as rt,
        rt.open_parent(budget=td.Budget(max_input_tokens=10)) as parent,
        rt.open_parent("other", budget=td.Budget(max_input_tokens=10)) as other,
    ):
        spending = await parent.start("spend", "go")
        idle = await parent.start("idle", "go")
        pending = await parent.start("idle", "go")
        assert pending.status is S.PENDING
        elsewhere = await other.start("idle", "go")
        await trio.sleep(1.5)
        assert parent.status(spending.run_id).status is S.RUNNING  # 6 of 10
        await trio.sleep(1)  # 12 of 10: stopped
        # The pending run ended at once; the others once they stopped.
        for handle in (spending, idle, pending):
            cause = await cancelled_cause(parent, handle.run_id)
            assert (cause.scope, cause.limit, cause.limit_value, cause.spent) == (
                "parent",
                "max_input_tokens",
                10,
                12,
            )
            assert "parent 'root' spent 12 input tokens" in str(cause)
        with pytest.raises(td.BudgetExceededError) as refused:
            await parent.start("idle", "again")
        assert refused.value.scope == "parent"
        assert rt.live_runs == 1  # nothing was started
        # Another parent's scope is untouched.
        assert other.status(elsewhere.run_id).status is S.RUNNING
        assert (await other.start("idle", "fine")).status is S.RUNNING


async def test_spending_exactly_the_limit_stops_nothing_but_leaves_nothing_for_admission(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with (
        td.open_runtime([td.Subagent("w", spender(tokens(10), then=5))]) as rt,
        rt.open_parent(budget=td.Budget(max_input_tokens=10)) as parent,
    ):
        handle = await parent.start("w", "go")
        await trio.sleep(2)
        with pytest.raises(td.BudgetExceededError, match="no budget left"):
            await parent.start("w", "again")
        result = await parent.wait(handle.run_id)
        assert isinstance(result, td.RunResult)
        assert result.final_result == "done"


async def test_a_limit_of_zero_is_a_real_limit(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with td.open_runtime([td.Subagent("w", spender(tokens(0, 0.01)))]) as rt:
        async with rt.open_parent(budget=td.Budget(max_cost_usd=0)) as parent:
            # Nothing is left of a zero limit: nothing is admitted.
            with pytest.raises(td.BudgetExceededError) as refused:
                await parent.start("w", "go")
            assert (refused.value.limit, refused.value.limit_value) == ("max_cost_usd", 0.0)
        budget = td.Budget(max_cost_usd=0)
        async with rt.open_parent("zero-run") as parent:
            limited = td.Subagent("w", spender(tokens(0, 0.01)), budget=budget)
            del limited  # a run's own zero limit: see the run-scope tests
        assert rt.usage == td.Usage()


async def test_a_run_budget_stops_the_run_and_what_it_delegated_and_nothing_else(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ids: dict[str, str] = {}

    async def boss(ctx: td.ChildContext) -> str:
        assert ctx.parent is not None
        helper = await ctx.parent.start("helper", "go")
        ids["helper"] = helper.run_id
        ids["nested_owner"] = ctx.parent.owner
        await trio.sleep(1)
        ctx.add_usage(tokens(30))
        await trio.sleep(1_000)
        return "boss"

    subagents = [
        td.Subagent("boss", boss, children=("helper",), budget=td.Budget(max_input_tokens=20)),
        td.Subagent("helper", spender()),
        td.Subagent("bystander", spender(tokens(5))),
    ]
    store = td.MemoryStore()
    async with (
        td.open_runtime(subagents, config=LENIENT, store=store) as rt,
        rt.open_parent() as parent,
    ):
        bystander = await parent.start("bystander", "go")
        handle = await parent.start("boss", "go")
        await trio.sleep(3)
        cause = await cancelled_cause(parent, handle.run_id)
        assert (cause.scope, cause.run_id, cause.limit, cause.spent) == (
            "run",
            handle.run_id,
            "max_input_tokens",
            30,
        )
        assert parent.status(bystander.run_id).status is S.RUNNING
        # The parent's scope is not stopped: it still admits.
        assert (await parent.start("bystander", "more")).status is S.RUNNING
        assert parent.usage(handle.run_id) == tokens(30)
    # What it delegated was stopped by the budget too, not merely by its end.
    helper = await store.get(ids["helper"])
    assert helper is not None
    assert helper.status is S.CANCELLED
    assert helper.error_message is not None
    assert helper.error_message.startswith(f"by a budget stop (run {handle.run_id}")


async def test_a_parent_budget_stop_reaches_the_nested_runs_of_its_runs(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ids: dict[str, str] = {}

    async def boss(ctx: td.ChildContext) -> str:
        assert ctx.parent is not None
        ids["helper"] = (await ctx.parent.start("helper", "go")).run_id
        await trio.sleep_forever()
        return "boss"  # pragma: no cover

    subagents = [
        td.Subagent("boss", boss, children=("helper",)),
        td.Subagent("helper", spender()),
        td.Subagent("spend", spender(tokens(30))),
    ]
    store = td.MemoryStore()
    async with (
        td.open_runtime(subagents, config=LENIENT, store=store) as rt,
        rt.open_parent(budget=td.Budget(max_input_tokens=20)) as parent,
    ):
        handle = await parent.start("boss", "go")
        await parent.start("spend", "go")
        cause = await cancelled_cause(parent, handle.run_id)
        assert cause.scope == "parent"
    helper = await store.get(ids["helper"])
    assert helper is not None
    assert helper.status is S.CANCELLED
    assert helper.error_message is not None
    assert helper.error_message.startswith("by a budget stop (parent 'root' spent 30")


async def test_a_runtime_budget_stops_every_parent_and_refuses_admission_everywhere(
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = td.Config(fail_closed=False, runtime_budget=td.Budget(max_requests=2))
    subagents = [td.Subagent("w", spender(tokens(1), tokens(1), tokens(1)))]
    async with td.open_runtime(subagents, config=config) as rt:
        async with rt.open_parent() as first, rt.open_parent("second") as second:
            a = await first.start("w", "go")
            await trio.sleep(0.5)
            b = await second.start("w", "go")
            await trio.sleep(1)  # two reports: at the limit, not past it
            assert first.status(a.run_id).status is S.RUNNING
            await trio.sleep(1)  # a third: past it
            for parent, handle in ((first, a), (second, b)):
                cause = await cancelled_cause(parent, handle.run_id)
                assert (cause.scope, cause.limit, cause.spent) == ("runtime", "max_requests", 3)
            for parent in (first, second):
                with pytest.raises(td.BudgetExceededError, match="the runtime"):
                    await parent.start("w", "again")
        async with rt.open_parent("late") as late:
            with pytest.raises(td.BudgetExceededError):
                await late.delegate("w", "go")


async def test_a_report_past_several_budgets_stops_each_and_names_the_innermost(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runner = spender(tokens(50))
    limited = td.Subagent("w", runner, budget=td.Budget(max_input_tokens=10))
    async with (
        td.open_runtime([limited, td.Subagent("idle", spender())], config=LENIENT) as rt,
        rt.open_parent(budget=td.Budget(max_input_tokens=10)) as parent,
    ):
        spending = await parent.start("w", "go")
        idle = await parent.start("idle", "go")
        assert (await cancelled_cause(parent, spending.run_id)).scope == "run"
        assert (await cancelled_cause(parent, idle.run_id)).scope == "parent"


# -- precedence (contract §3, §18) ---------------------------------------------------


async def test_a_cancel_request_before_the_budget_stop_decides(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def slow_to_stop(ctx: td.ChildContext) -> str:
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await trio.sleep(5)
        return "never"

    subagents = [td.Subagent("slow", slow_to_stop), td.Subagent("spend", spender(tokens(50)))]
    async with (
        td.open_runtime(subagents, config=LENIENT) as rt,
        rt.open_parent(budget=td.Budget(max_input_tokens=10)) as parent,
    ):
        slow = await parent.start("slow", "go")
        await parent.start("spend", "go")
        parent.cancel(slow.run_id)
        await trio.sleep(2)  # the budget stop comes while it cleans up
        with pytest.raises(td.RunCancelledError, match="by request") as raised:
            await parent.wait(slow.run_id)
        assert raised.value.__cause__ is None


async def test_a_deadline_before_the_budget_stop_decides(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def slow_to_stop(ctx: td.ChildContext) -> str:
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await trio.sleep(5)
        return "never"

    subagents = [
        td.Subagent("slow", slow_to_stop, timeout_seconds=1),
        td.Subagent("spend", spender(tokens(1), tokens(50))),
    ]
    async with (
        td.open_runtime(subagents, config=LENIENT) as rt,
        rt.open_parent(budget=td.Budget(max_input_tokens=10)) as parent,
    ):
        slow = await parent.start("slow", "go")
        await parent.start("spend", "go")
        await trio.sleep(3)  # deadline at 1 s, budget stop at 2 s
        with pytest.raises(td.RunTimedOutError):
            await parent.wait(slow.run_id)


async def test_a_budget_stop_before_the_deadline_decides(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def slow_to_stop(ctx: td.ChildContext) -> str:
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await trio.sleep(5)
        return "never"

    subagents = [
        td.Subagent("slow", slow_to_stop, timeout_seconds=2),
        td.Subagent("spend", spender(tokens(50))),
    ]
    async with (
        td.open_runtime(subagents, config=LENIENT) as rt,
        rt.open_parent(budget=td.Budget(max_input_tokens=10)) as parent,
    ):
        slow = await parent.start("slow", "go")
        await parent.start("spend", "go")
        # Stopped at 1 s, still cleaning up when its deadline passes at 2 s.
        await cancelled_cause(parent, slow.run_id)


async def test_the_grace_period_bounds_a_budget_stopped_runner_that_does_not_stop(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def stubborn(ctx: td.ChildContext) -> str:
        ctx.add_usage(tokens(50))
        while True:
            with trio.CancelScope(shield=True):
                await trio.sleep(1)
            if trio.current_time() > 1_000:
                return "late"

    config = td.Config(fail_closed=False, cancel_grace_seconds=5)
    async with (
        td.open_runtime([td.Subagent("w", stubborn)], config=config) as rt,
        rt.open_parent(budget=td.Budget(max_input_tokens=10)) as parent,
    ):
        handle = await parent.start("w", "go")
        start = trio.current_time()
        with pytest.raises(td.RunCancelledError, match="did not stop") as raised:
            await parent.wait(handle.run_id)
        assert trio.current_time() - start <= 6
        assert isinstance(raised.value.__cause__.__cause__, td.BudgetExceededError)  # type: ignore[union-attr]


# -- fail-closed, close, remaining -----------------------------------------------------


async def test_a_spent_parent_cannot_replace_its_budget_cancelled_runs(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def spend_then_try_to_replace(rt: td.Runtime) -> None:
        async with rt.open_parent(budget=td.Budget(max_input_tokens=10)) as parent:
            handle = await parent.start("w", "go")
            with pytest.raises(td.RunCancelledError):
                await parent.wait(handle.run_id)
            with pytest.raises(td.BudgetExceededError):
                await parent.start("w", "again", replaces=handle.run_id)

    async with td.open_runtime([td.Subagent("w", spender(tokens(50)))]) as rt:
        with pytest.raises(td.UnresolvedDelegationError) as unresolved:
            await spend_then_try_to_replace(rt)
    (entry,) = unresolved.value.unresolved
    assert "a budget stop cancelled it" in entry.why
    assert "max_input_tokens=10" in entry.why


async def test_usage_is_readable_after_close_and_nothing_else_is(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with (
        td.open_runtime([td.Subagent("w", spender(tokens(3), then=0))]) as rt,
        rt.open_parent() as parent,
    ):
        result = await parent.delegate("w", "go")
    assert parent.usage() == tokens(3)
    assert parent.usage(result.run_id) == tokens(3)
    assert rt.usage == tokens(3)
    with pytest.raises(td.RuntimeClosedError):
        parent.status(result.run_id)


async def test_usage_of_a_run_that_is_not_the_parents_is_unknown() -> None:
    async with td.open_runtime([td.Subagent("w", returning(1))]) as rt, rt.open_parent() as parent:
        with pytest.raises(td.UnknownRunError):
            parent.usage("run_nope")
        with pytest.raises(td.InvalidArgumentsError):
            parent.usage(5)  # type: ignore[arg-type]


async def test_open_parent_checks_its_budget() -> None:
    async with td.open_runtime([td.Subagent("w", returning(1))]) as rt:
        with pytest.raises(td.InvalidArgumentsError, match="budget must be a trio_delegate"):
            async with rt.open_parent(budget={"max_requests": 1}):  # type: ignore[arg-type]
                pass  # pragma: no cover


async def test_remaining_is_the_tightest_limit_over_every_scope_clamped_at_zero(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[td.Budget | None] = []

    async def reader(ctx: td.ChildContext) -> str:
        seen.append(ctx.remaining())
        ctx.add_usage(td.Usage(input_tokens=4, output_tokens=2, cost_usd=0.25))
        seen.append(ctx.remaining())
        return "done"

    config = td.Config(runtime_budget=td.Budget(max_total_tokens=100, max_cost_usd=1))
    run_budget = td.Budget(max_input_tokens=5, max_total_tokens=50)
    subagents = [td.Subagent("w", reader, budget=run_budget), td.Subagent("free", reader)]
    async with (
        td.open_runtime(subagents, config=config) as rt,
        rt.open_parent(budget=td.Budget(max_total_tokens=8)) as parent,
    ):
        await parent.delegate("w", "go")
    assert seen == [
        td.Budget(max_input_tokens=5, max_total_tokens=8, max_cost_usd=1.0),
        td.Budget(max_input_tokens=1, max_total_tokens=2, max_cost_usd=0.75),
    ]
    seen.clear()
    async with td.open_runtime([td.Subagent("free", reader)]) as rt, rt.open_parent() as parent:
        await parent.delegate("free", "go")
    assert seen == [None, None]


async def test_costs_roll_up_as_exact_decimals(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runner = spender(*[td.Usage(cost_usd=0.1)] * 10, then=0)
    async with td.open_runtime([td.Subagent("w", runner)]) as rt:
        async with rt.open_parent() as parent:
            await parent.delegate("w", "go")
            assert parent.usage().cost_usd == 1.0
        assert rt.usage.cost_usd == 1.0


# -- model-facing tools ----------------------------------------------------------


async def test_status_and_wait_tools_add_usage_only_when_there_is_any(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runner = spender(tokens(3, 0.5), then=5)
    subagents = [td.Subagent("w", runner), td.Subagent("q", returning({"x": 1}))]
    async with td.open_runtime(subagents) as rt, rt.open_parent() as parent:
        tools = parent.tools()
        quiet = await tools.call("delegate_task", {"subagent": "q", "task": "go"})
        assert "usage" not in quiet
        assert "usage" not in await tools.call("subagent_status", {"run_id": quiet["run_id"]})
        started = await tools.call(
            "delegate_task", {"subagent": "w", "task": "go", "background": True}
        )
        assert "usage" not in started
        await trio.sleep(2)
        expected = {
            "requests": 1,
            "input_tokens": 3,
            "output_tokens": 0,
            "cache_read_input_tokens": 0,
            "cache_creation_input_tokens": 0,
            "reasoning_output_tokens": 0,
            "cost_usd": 0.5,
        }
        status = await tools.call("subagent_status", {"run_id": started["run_id"]})
        assert status["usage"] == expected
        timed_out = await tools.call("wait_subagent", {"run_id": started["run_id"], "timeout": 1})
        assert (timed_out["status"], timed_out["usage"]) == ("running", expected)
        done = await tools.call("wait_subagent", {"run_id": started["run_id"]})
        assert (done["final_result"], done["usage"]) == ("done", expected)
        listed = await tools.call("list_subagent_runs", {})
        usages = {entry["run_id"]: entry.get("usage") for entry in listed["runs"]}
        assert usages == {quiet["run_id"]: None, started["run_id"]: expected}


# -- stores ----------------------------------------------------------------------


async def test_a_memory_store_keeps_usage_with_the_terminal_record(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = td.MemoryStore()
    config = td.Config(retention_seconds=1)
    subagents = [td.Subagent("w", spender(tokens(3, 0.25), then=0)), td.Subagent("q", returning(1))]
    async with (
        td.open_runtime(subagents, config=config, store=store) as rt,
        rt.open_parent() as parent,
    ):
        result = await parent.delegate("w", "go")
        quiet = await parent.delegate("q", "go")
        await trio.sleep(5)  # both evicted from memory: answered from the store
        assert parent.status(result.run_id).usage == tokens(3, 0.25)
        assert parent.usage(result.run_id) == tokens(3, 0.25)
        assert parent.status(quiet.run_id).usage is None
    record = await store.get(result.run_id)
    assert record is not None
    assert record.usage == tokens(3, 0.25)
    # After a restart, too.
    async with td.open_runtime(subagents, store=store) as rt, rt.open_parent() as parent:
        assert parent.status(result.run_id).usage == tokens(3, 0.25)
        assert parent.usage(result.run_id) == tokens(3, 0.25)
        assert parent.usage() == td.Usage()  # this parent started nothing


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_database_store_keeps_usage_in_the_terminal_record_and_answers_it_on_restart(
    kind: str, tmp_path: Any, request: pytest.FixtureRequest
) -> None:
    async def reporting(ctx: td.ChildContext) -> td.Output:
        # A result with braces and a decoy "usage" key, longer than the tail
        # a database reads the usage from.
        decoy = {"usage": {"requests": 99}, "text": "}" * 1_000}
        return td.Output(decoy, usage=tokens(3, 0.25))

    store: td.ResultStore
    if kind == "sqlite":
        store = td.SQLiteStore(tmp_path / "runs.db")
    else:
        server = request.getfixturevalue("pg_server")
        store = td.PostgresStore(server.dsn(), schema=request.getfixturevalue("pg_schema"))
    subagents = [td.Subagent("w", reporting)]
    async with td.open_runtime(subagents, store=store) as rt, rt.open_parent() as parent:
        result = await parent.delegate("w", "go")
    async with td.open_runtime(subagents, store=store) as rt, rt.open_parent() as parent:
        # Known from the store since the runtime attached: its usage too.
        assert parent.usage(result.run_id) == tokens(3, 0.25)
        waited = await parent.wait(result.run_id)
        assert waited == result
        assert parent.status(result.run_id).usage == tokens(3, 0.25)


async def test_a_run_stopped_by_its_own_budget_is_resolved_by_a_replacement(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def once_over(ctx: td.ChildContext) -> str:
        if ctx.task == "big":
            ctx.add_usage(tokens(50))
            await trio.sleep_forever()
        ctx.add_usage(tokens(5))
        return "small enough"

    limited = td.Subagent("w", once_over, budget=td.Budget(max_input_tokens=10))
    async with td.open_runtime([limited]) as rt, rt.open_parent() as parent:
        first = await parent.start("w", "big")
        await cancelled_cause(parent, first.run_id)
        with pytest.raises(td.UnresolvedDelegationError, match="a budget stop cancelled it"):
            parent.check_resolved()
        # Only the run's own scope was stopped: its parent admits a replacement.
        result = await parent.delegate("w", "small", replaces=first.run_id)
        assert result.final_result == "small enough"
        parent.check_resolved()
        assert parent.usage() == td.Usage(requests=2, input_tokens=55)


async def test_remaining_counts_the_budgets_of_the_runs_above_a_nested_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[td.Budget | None] = []

    async def leaf(ctx: td.ChildContext) -> str:
        seen.append(ctx.remaining())
        return "leaf"

    async def boss(ctx: td.ChildContext) -> str:
        assert ctx.parent is not None
        ctx.add_usage(td.Usage(requests=3))
        await ctx.parent.delegate("leaf", "go")
        return "boss"

    subagents = [
        td.Subagent("boss", boss, children=("leaf",), budget=td.Budget(max_requests=5)),
        td.Subagent("leaf", leaf, budget=td.Budget(max_requests=10, max_output_tokens=7)),
    ]
    async with td.open_runtime(subagents) as rt, rt.open_parent() as parent:
        await parent.delegate("boss", "go")
    assert seen == [td.Budget(max_requests=2, max_output_tokens=7)]
