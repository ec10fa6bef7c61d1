"""Contract §3: the lifecycle of a run and how each ending maps to a state."""

from __future__ import annotations

import math
from typing import Any

import pytest
import trio
import trio.testing

import trio_delegate as td
from tests.helpers import (
    advance,
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


def test_run_status_is_a_str_enum_with_contract_values() -> None:
    assert [s.value for s in td.RunStatus] == [
        "pending",
        "running",
        "input_required",
        "completed",
        "failed",
        "cancelled",
        "timed_out",
    ]
    assert all(isinstance(s, str) for s in td.RunStatus)
    assert str(td.RunStatus.TIMED_OUT) == "timed_out"
    assert td.RunStatus("timed_out") is td.RunStatus.TIMED_OUT


async def test_run_goes_pending_then_running_then_completed(
    mock_clock: trio.testing.MockClock,
) -> None:
    config = td.Config(max_concurrent_runs=1)
    async with open_parent(sub("work", sleeping(5, "ok")), config=config) as parent:
        first = await parent.start("work", "first")
        second = await parent.start("work", "second")
        assert first.status is S.RUNNING
        assert second.status is S.PENDING
        await advance(mock_clock, 4.999)
        assert parent.status(second.run_id).status is S.PENDING
        await advance(mock_clock, 0.001)
        assert parent.status(first.run_id).status is S.COMPLETED
        assert parent.status(second.run_id).status is S.RUNNING
        await advance(mock_clock, 5)
        assert parent.status(second.run_id).status is S.COMPLETED
        for handle in (first, second):
            await parent.wait(handle.run_id)


async def test_terminal_state_never_changes(autojump_clock: trio.testing.MockClock) -> None:
    async with open_parent_lenient(
        sub("ok", returning("value")), sub("bad", raising(ValueError("boom")))
    ) as parent:
        done = await parent.start("ok", "t")
        failed = await parent.start("bad", "t")
        await trio.sleep(1)
        for handle, status in ((done, S.COMPLETED), (failed, S.FAILED)):
            assert parent.status(handle.run_id).status is status
            ack = parent.cancel(handle.run_id)
            assert ack.cancel_requested is False
            assert ack.status is status
            await trio.sleep(100)
            assert parent.status(handle.run_id).status is status
        result = await parent.wait(done.run_id)
        assert isinstance(result, td.RunResult)
        assert result.final_result == "value"
        with pytest.raises(td.RunFailedError):
            await parent.wait(failed.run_id)


async def test_runner_exception_fails_the_run(autojump_clock: trio.testing.MockClock) -> None:
    error = ValueError("no good")
    async with open_parent_lenient(sub("bad", raising(error, after=1))) as parent:
        handle = await parent.start("bad", "t")
        assert handle.status is S.RUNNING
        with pytest.raises(td.RunFailedError) as info:
            await parent.wait(handle.run_id)
        assert info.value.__cause__ is error
        assert parent.status(handle.run_id).status is S.FAILED


async def test_return_after_unobserved_cancel_request_is_completed(
    mock_clock: trio.testing.MockClock,
) -> None:
    async def stubborn(ctx: td.ChildContext) -> str:
        # Shielded: the cancel request is never observed before returning.
        with trio.CancelScope(shield=True):
            await trio.sleep(5)
        return "finished anyway"

    async with open_parent(sub("stubborn", stubborn)) as parent:
        handle = await parent.start("stubborn", "t")
        await advance(mock_clock, 1)
        ack = parent.cancel(handle.run_id)
        assert ack.cancel_requested is True
        assert ack.status is S.RUNNING
        await advance(mock_clock, 4)
        assert parent.status(handle.run_id).status is S.COMPLETED
        result = await parent.wait(handle.run_id)
        assert isinstance(result, td.RunResult)
        assert result.final_result == "finished anyway"


async def test_runner_that_swallows_cancelled_and_returns_is_completed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def catcher(ctx: td.ChildContext) -> str:
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            return "swallowed"
        return "unreachable"  # pragma: no cover

    async with open_parent(sub("catcher", catcher)) as parent:
        handle = await parent.start("catcher", "t")
        await trio.sleep(1)
        parent.cancel(handle.run_id)
        result = await parent.wait(handle.run_id)
        assert isinstance(result, td.RunResult)
        assert result.final_result == "swallowed"
        assert parent.status(handle.run_id).status is S.COMPLETED


async def test_run_settles_exactly_once_and_frees_one_slot(
    mock_clock: trio.testing.MockClock,
) -> None:
    # A cancel request on a running run must not settle it a second time when
    # the runner later ends: one slot frees, one pending run starts.
    async def stubborn(ctx: td.ChildContext) -> str:
        with trio.CancelScope(shield=True):
            await trio.sleep(5)
        return "done"

    config = td.Config(max_concurrent_runs=1, fail_closed=False)
    async with (
        td.open_runtime([sub("stubborn", stubborn), sub("idle", forever)], config=config) as rt,
        rt.open_parent() as parent,
    ):
        first = await parent.start("stubborn", "t")
        second = await parent.start("idle", "t")
        third = await parent.start("idle", "t")
        await advance(mock_clock, 1)
        parent.cancel(first.run_id)
        parent.cancel(first.run_id)
        await advance(mock_clock, 0)
        assert rt.live_runs == 3
        await advance(mock_clock, 4)
        assert parent.status(first.run_id).status is S.COMPLETED
        assert parent.status(second.run_id).status is S.RUNNING
        assert parent.status(third.run_id).status is S.PENDING
        assert rt.live_runs == 2


async def test_cancel_request_strictly_before_deadline_is_cancelled(
    mock_clock: trio.testing.MockClock,
) -> None:
    # The runner's shielded cleanup runs past its deadline: what counts is
    # when the request came, not when the run settled.
    async with open_parent_lenient(sub("slow", slow_cleanup(10), timeout_seconds=5)) as parent:
        handle = await parent.start("slow", "t")
        await advance(mock_clock, 4.5)
        parent.cancel(handle.run_id)
        await advance(mock_clock, 5)  # t=9.5: past the deadline, cleanup still going
        assert parent.status(handle.run_id).status is S.RUNNING
        await advance(mock_clock, 5)  # t=14.5: cleanup done
        assert parent.status(handle.run_id).status is S.CANCELLED
        with pytest.raises(td.RunCancelledError):
            await parent.wait(handle.run_id)


async def test_cancel_request_exactly_at_deadline_is_timed_out(
    mock_clock: trio.testing.MockClock,
) -> None:
    async with open_parent_lenient(sub("idle", forever, timeout_seconds=5)) as parent:
        handle = await parent.start("idle", "t")
        await advance(mock_clock, 1)
        # Reach the deadline and request cancellation before the run can react.
        mock_clock.jump(4)
        ack = parent.cancel(handle.run_id)
        assert ack.cancel_requested is True
        await trio.testing.wait_all_tasks_blocked()
        assert parent.status(handle.run_id).status is S.TIMED_OUT
        with pytest.raises(td.RunTimedOutError):
            await parent.wait(handle.run_id)


async def test_cancel_request_after_deadline_is_timed_out(
    mock_clock: trio.testing.MockClock,
) -> None:
    async with open_parent_lenient(sub("slow", slow_cleanup(10), timeout_seconds=5)) as parent:
        handle = await parent.start("slow", "t")
        await advance(mock_clock, 6)  # deadline passed, shielded cleanup running
        ack = parent.cancel(handle.run_id)
        assert ack.cancel_requested is True
        assert ack.status is S.RUNNING
        await advance(mock_clock, 10)
        assert parent.status(handle.run_id).status is S.TIMED_OUT


@pytest.mark.parametrize(
    "value",
    [object(), {1, 2}, b"bytes", {("tuple", "key"): 1}],
    ids=["object", "set", "bytes", "tuple-key"],
)
async def test_non_json_result_fails_run_caused_by_type_error(
    autojump_clock: trio.testing.MockClock, value: Any
) -> None:
    async with open_parent_lenient(sub("odd", returning(value))) as parent:
        with pytest.raises(td.RunFailedError) as info:
            await parent.delegate("odd", "t")
        assert isinstance(info.value.__cause__, TypeError)
        assert info.value.error_type == "TypeError"
        assert parent.status(info.value.run_id or "").status is S.FAILED


@pytest.mark.parametrize("value", [math.nan, math.inf, [-math.inf]], ids=["nan", "inf", "-inf"])
async def test_non_finite_float_result_fails_run(
    autojump_clock: trio.testing.MockClock, value: Any
) -> None:
    async with open_parent_lenient(sub("odd", returning(value))) as parent:
        with pytest.raises(td.RunFailedError):
            await parent.delegate("odd", "t")


async def test_non_json_transcript_fails_run(autojump_clock: trio.testing.MockClock) -> None:
    async with open_parent_lenient(
        sub("odd", returning(td.Output("fine", transcript=[{"role": "x", "content": object()}])))
    ) as parent:
        with pytest.raises(td.RunFailedError) as info:
            await parent.delegate("odd", "t")
        assert isinstance(info.value.__cause__, TypeError)


async def test_output_wrapper_result_is_unwrapped(autojump_clock: trio.testing.MockClock) -> None:
    transcript = [{"role": "user", "content": "t"}, {"role": "assistant", "content": "r"}]
    async with open_parent(sub("chat", returning(td.Output("r", transcript=transcript)))) as parent:
        result = await parent.delegate("chat", "t")
        assert result.final_result == "r"


async def test_oversize_result_fails_run_caused_by_limit_exceeded(
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = td.Config(max_result_bytes=100, fail_closed=False)
    async with open_parent(sub("big", returning("x" * 200)), config=config) as parent:
        with pytest.raises(td.RunFailedError) as info:
            await parent.delegate("big", "t")
        assert isinstance(info.value.__cause__, td.LimitExceededError)
        assert info.value.status == "failed"


@pytest.mark.parametrize("fatal", [KeyboardInterrupt, SystemExit])
async def test_fatal_base_exception_fails_run_then_propagates(
    autojump_clock: trio.testing.MockClock, fatal: type[BaseException]
) -> None:
    raised = fatal()
    seen: list[BaseException] = []

    async def waiter(parent: td.Parent, run_id: str) -> None:
        try:
            await parent.wait(run_id)
        except td.RunFailedError as exc:
            seen.append(exc)
            raise

    with pytest.raises(fatal) as info:  # noqa: PT012 - the block exit is under test
        async with open_parent(sub("fatal", raising(raised, after=1))) as parent:
            handle = await parent.start("fatal", "t")
            await waiter(parent, handle.run_id)
    assert info.value is raised
    # The run was marked failed before the exception went on.
    [failure] = seen
    assert isinstance(failure, td.RunFailedError)
    assert failure.status == "failed"
    assert failure.error_type == fatal.__name__
    assert failure.__cause__ is raised


async def test_trio_cancellation_of_runner_is_not_a_failure(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_parent_lenient(sub("idle", forever)) as parent:
        handle = await parent.start("idle", "t")
        await trio.sleep(1)
        parent.cancel(handle.run_id)
        with pytest.raises(td.RunCancelledError):
            await parent.wait(handle.run_id)
        assert parent.status(handle.run_id).status is S.CANCELLED


async def test_runner_exception_group_fails_run(autojump_clock: trio.testing.MockClock) -> None:
    async def grouped(ctx: td.ChildContext) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(raising(ValueError("inner")), ctx)

    async with open_parent_lenient(sub("grouped", grouped)) as parent:
        with pytest.raises(td.RunFailedError) as info:
            await parent.delegate("grouped", "t")
        assert "inner" in str(info.value)


async def test_runtime_closing_cancels_live_runs(autojump_clock: trio.testing.MockClock) -> None:
    # The parent is open in a host task outside the runtime's block; a waiter
    # there is told the runtime closed (contract §8), and why its run ended.
    outcomes: list[BaseException] = []

    async def host(rt: td.Runtime, *, task_status: trio.TaskStatus[None]) -> None:
        async with rt.open_parent() as parent:
            handle = await parent.start("idle", "t")
            task_status.started()
            try:
                await parent.wait(handle.run_id)
            except td.RuntimeClosedError as exc:
                outcomes.append(exc)

    config = td.Config(fail_closed=False)
    async with (
        trio.open_nursery() as nursery,
        td.open_runtime([sub("idle", forever)], config=config) as rt,
    ):
        await nursery.start(host, rt)
        await trio.sleep(1)
    [error] = outcomes
    assert isinstance(error, td.RuntimeClosedError)
    assert error.status == "cancelled"
    assert isinstance(error.__cause__, td.RunCancelledError)
    assert "runtime closed" in str(error.__cause__)
