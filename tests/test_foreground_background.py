"""Contract §4: foreground ``delegate`` and background ``start``."""

from __future__ import annotations

import math
from typing import Any

import pytest
import trio
import trio.testing

import trio_delegate as td
from tests.helpers import (
    forever,
    open_parent,
    open_parent_lenient,
    raising,
    returning,
    sleeping,
    slow_cleanup,
    sub,
)

S = td.RunStatus


async def test_delegate_returns_the_completed_envelope(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[td.ChildContext] = []

    async def runner(ctx: td.ChildContext) -> Any:
        seen.append(ctx)
        await trio.sleep(3)
        return {"answer": 42}

    async with open_parent(sub("calc", runner)) as parent:
        result = await parent.delegate("calc", "  compute   the\nanswer ")
        assert isinstance(result, td.RunResult)
        assert result.final_result == {"answer": 42}
        assert result.subagent == "calc"
        assert result.task_summary == "compute the answer"
        [ctx] = seen
        assert result.run_id == ctx.run_id
        assert ctx.task == "  compute   the\nanswer "
        assert ctx.subagent == "calc"
        assert trio.current_time() == 3


async def test_delegate_counts_as_observed(autojump_clock: trio.testing.MockClock) -> None:
    async with open_parent(sub("ok", sleeping(1))) as parent:
        await parent.delegate("ok", "t")
        parent.check_resolved()
    # Leaving the block (a claim of completion) raised nothing.


@pytest.mark.parametrize(
    ("runner", "timeout", "error"),
    [
        (raising(ValueError("bad"), after=1), td.INHERIT, td.RunFailedError),
        (forever, 5.0, td.RunTimedOutError),
    ],
    ids=["failed", "timed_out"],
)
async def test_delegate_raises_the_runs_error(
    autojump_clock: trio.testing.MockClock,
    runner: Any,
    timeout: Any,
    error: type[td.DelegationError],
) -> None:
    async with open_parent_lenient(sub("child", runner, timeout_seconds=timeout)) as parent:
        with pytest.raises(error) as info:
            await parent.delegate("child", "t")
        assert info.value.subagent == "child"
        assert info.value.run_id is not None
        assert parent.status(info.value.run_id).status.value == info.value.status


async def test_delegate_raises_run_cancelled_error_when_cancelled_by_request(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ids: list[str] = []

    async def idle(ctx: td.ChildContext) -> None:
        ids.append(ctx.run_id)
        await trio.sleep_forever()

    async def cancel_it(parent: td.Parent) -> None:
        await trio.sleep(1)
        parent.cancel(ids[0])

    async with (
        open_parent_lenient(sub("idle", idle)) as parent,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(cancel_it, parent)
        with pytest.raises(td.RunCancelledError) as info:
            await parent.delegate("idle", "t")
        assert info.value.run_id == ids[0]
        assert info.value.status == "cancelled"
        assert trio.current_time() == 1


async def test_cancelled_foreground_caller_cancels_and_joins_child(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[str] = []
    ids: list[str] = []
    cleanup = slow_cleanup(5, log)

    async def runner(ctx: td.ChildContext) -> Any:
        ids.append(ctx.run_id)
        return await cleanup(ctx)

    async with open_parent_lenient(sub("slow", runner)) as parent:
        with trio.move_on_after(2) as scope:
            await parent.delegate("slow", "t")
        assert scope.cancelled_caught
        # The child was cancelled at t=2 and joined (5 s of cleanup) before
        # the cancellation reached the caller.
        assert trio.current_time() == 7
        assert log == [f"cleaned {ids[0]}"]
        assert parent.status(ids[0]).status is S.CANCELLED
        with pytest.raises(td.RunCancelledError):
            await parent.wait(ids[0])


async def test_start_returns_running_handle_when_a_slot_is_free(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_parent_lenient(sub("idle", forever)) as parent:
        handle = await parent.start("idle", "t")
        assert isinstance(handle, td.RunHandle)
        assert handle.status is S.RUNNING
        assert handle.subagent == "idle"
        assert parent.status(handle.run_id) == handle


async def test_start_returns_pending_handle_when_no_slot_is_free(
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = td.Config(max_concurrent_runs=2, fail_closed=False)
    started: list[str] = []

    async def idle(ctx: td.ChildContext) -> None:
        started.append(ctx.run_id)
        await trio.sleep_forever()

    async with open_parent(sub("idle", idle), config=config) as parent:
        handles = [await parent.start("idle", f"t{i}") for i in range(3)]
        assert [h.status for h in handles] == [S.RUNNING, S.RUNNING, S.PENDING]
        await trio.testing.wait_all_tasks_blocked()
        assert started == [handles[0].run_id, handles[1].run_id]


async def test_start_is_an_acknowledgment_and_the_child_may_fail_later(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_parent_lenient(sub("bad", raising(RuntimeError("later"), after=5))) as parent:
        handle = await parent.start("bad", "t")
        assert handle.status is S.RUNNING
        assert trio.current_time() == 0
        with pytest.raises(td.RunFailedError):
            await parent.wait(handle.run_id)
        assert trio.current_time() == 5


@pytest.mark.parametrize("method", ["start", "delegate"])
async def test_caller_cancelled_during_admission_gets_no_run(
    autojump_clock: trio.testing.MockClock, method: str
) -> None:
    calls: list[str] = []

    async def runner(ctx: td.ChildContext) -> str:
        calls.append(ctx.run_id)
        return "x"

    async with td.open_runtime([sub("child", runner)]) as rt, rt.open_parent() as parent:
        with trio.CancelScope() as scope:
            scope.cancel()
            await getattr(parent, method)("child", "t")
        assert scope.cancelled_caught
        await trio.sleep(1)
        assert rt.live_runs == 0
        assert calls == []
        parent.check_resolved()  # nothing half-admitted is waiting to be resolved


async def test_start_refused_at_admission_leaves_no_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    calls: list[str] = []

    async def runner(ctx: td.ChildContext) -> str:
        calls.append(ctx.run_id)
        await trio.sleep(5)
        return "ok"

    config = td.Config(max_live_runs=1)
    async with td.open_runtime([sub("child", runner)], config=config) as rt:
        async with rt.open_parent() as parent:
            first = await parent.start("child", "t")
            with pytest.raises(td.LimitExceededError):
                await parent.start("child", "t")
            with pytest.raises(td.LimitExceededError):
                await parent.delegate("child", "t")
            await trio.testing.wait_all_tasks_blocked()
            assert calls == [first.run_id]
            assert rt.live_runs == 1
            await parent.wait(first.run_id)
            # Nothing refused is on the fail-closed ledger: the block exits cleanly.
            parent.check_resolved()
        assert calls == [first.run_id]


@pytest.mark.parametrize("method", ["start", "delegate"])
async def test_every_ordinary_delegation_starts_a_fresh_conversation(
    autojump_clock: trio.testing.MockClock, method: str
) -> None:
    contexts: list[td.ChildContext] = []

    async def runner(ctx: td.ChildContext) -> Any:
        contexts.append(ctx)
        return td.Output("r", transcript=[{"role": "assistant", "content": "r"}])

    async with open_parent(sub("chat", runner)) as parent:
        for _ in range(2):
            out = await getattr(parent, method)("chat", "same task")
            await parent.wait(out.run_id)
    assert [ctx.history for ctx in contexts] == [(), ()]
    assert contexts[0].run_id != contexts[1].run_id


async def test_child_context_carries_deadline_and_schema(
    autojump_clock: trio.testing.MockClock,
) -> None:
    contexts: list[td.ChildContext] = []

    async def runner(ctx: td.ChildContext) -> Any:
        contexts.append(ctx)
        return "text"

    schema = {"type": "string"}
    async with open_parent(
        sub("timed", runner, timeout_seconds=30), sub("free", runner, timeout_seconds=None)
    ) as parent:
        await trio.sleep(10)
        await parent.delegate("timed", "t", final_schema=schema)
        await parent.delegate("free", "t")
    timed, free = contexts
    assert timed.deadline == 40
    assert timed.final_schema == schema
    assert timed.parent is None
    assert free.deadline == math.inf
    assert free.final_schema is None


async def test_start_does_not_wait_for_the_child(autojump_clock: trio.testing.MockClock) -> None:
    async with open_parent(sub("slow", sleeping(100, "late"))) as parent:
        handle = await parent.start("slow", "t")
        assert trio.current_time() == 0
        result = await parent.wait(handle.run_id)
        assert isinstance(result, td.RunResult)
        assert result.final_result == "late"
        assert trio.current_time() == 100


async def test_delegate_waits_for_a_pending_run_to_start_and_finish(
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = td.Config(max_concurrent_runs=1)
    async with open_parent(
        sub("slow", sleeping(10, "first")), sub("fast", returning("second")), config=config
    ) as parent:
        handle = await parent.start("slow", "t")
        result = await parent.delegate("fast", "t")
        assert result.final_result == "second"
        assert trio.current_time() == 10
        await parent.wait(handle.run_id)


async def test_cancelled_foreground_caller_of_a_pending_run_leaves_nothing_behind(
    autojump_clock: trio.testing.MockClock,
) -> None:
    started: list[str] = []

    async def runner(ctx: td.ChildContext) -> str:
        started.append(ctx.task)
        await trio.sleep(10)
        return ctx.task

    config = td.Config(max_concurrent_runs=1, fail_closed=False)
    async with (
        td.open_runtime([sub("child", runner)], config=config) as rt,
        rt.open_parent() as parent,
    ):
        first = await parent.start("child", "first")
        with trio.move_on_after(2):
            await parent.delegate("child", "second")  # pending behind "first"
        assert trio.current_time() == 2
        assert rt.live_runs == 1
        await parent.wait(first.run_id)
        await trio.sleep(100)
    assert started == ["first"]
