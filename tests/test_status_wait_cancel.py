"""Contract §5: ``status``, ``wait`` and ``cancel``."""

from __future__ import annotations

import pytest
import trio
import trio.testing

import trio_delegate as td
from tests.helpers import (
    Runner,
    advance,
    forever,
    open_parent,
    open_parent_lenient,
    raising,
    sleeping,
    slow_cleanup,
    sub,
)

S = td.RunStatus


async def test_status_is_a_snapshot_that_never_observes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with pytest.raises(td.UnresolvedDelegationError) as info:  # noqa: PT012 - the block exit is under test
        async with open_parent(sub("ok", sleeping(1, "v"))) as parent:
            handle = await parent.start("ok", "t")
            await trio.sleep(2)
            snapshot = parent.status(handle.run_id)
            assert snapshot == td.RunHandle(handle.run_id, "ok", S.COMPLETED)
            assert parent.status(handle.run_id) == snapshot
    [entry] = info.value.unresolved
    assert entry.run_id == handle.run_id
    assert entry.status == "completed"


async def test_status_never_blocks_and_never_changes_the_run(
    mock_clock: trio.testing.MockClock,
) -> None:
    async with open_parent(sub("slow", sleeping(5, "v"))) as parent:
        handle = await parent.start("slow", "t")
        await advance(mock_clock, 1)
        with trio.testing.assert_no_checkpoints():
            for _ in range(3):
                assert parent.status(handle.run_id).status is S.RUNNING
        await advance(mock_clock, 4)
        assert parent.status(handle.run_id).status is S.COMPLETED
        result = await parent.wait(handle.run_id)
        assert isinstance(result, td.RunResult)
        assert result.final_result == "v"


async def test_wait_returns_the_result_and_observes_the_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_parent(sub("ok", sleeping(3, [1, 2]))) as parent:
        handle = await parent.start("ok", "t")
        result = await parent.wait(handle.run_id)
        assert result == td.RunResult(handle.run_id, "ok", "t", [1, 2])
        parent.check_resolved()


async def test_repeated_waits_return_equal_results(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_parent(sub("ok", sleeping(3, {"k": "v"}))) as parent:
        handle = await parent.start("ok", "t")
        first = await parent.wait(handle.run_id)
        second = await parent.wait(handle.run_id)
        third = await parent.wait(handle.run_id, timeout=0)
        assert first == second == third
        assert isinstance(first, td.RunResult)


@pytest.mark.parametrize(
    ("runner", "timeout", "cancel", "error", "status"),
    [
        (raising(ValueError("x"), after=1), td.INHERIT, False, td.RunFailedError, S.FAILED),
        (forever, td.INHERIT, True, td.RunCancelledError, S.CANCELLED),
        (forever, 2.0, False, td.RunTimedOutError, S.TIMED_OUT),
    ],
    ids=["failed", "cancelled", "timed_out"],
)
async def test_wait_on_an_unsuccessful_run_raises_every_time(
    autojump_clock: trio.testing.MockClock,
    runner: Runner,
    timeout: float | None,
    cancel: bool,
    error: type[td.DelegationError],
    status: td.RunStatus,
) -> None:
    async with open_parent_lenient(sub("child", runner, timeout_seconds=timeout)) as parent:
        handle = await parent.start("child", "t")
        if cancel:
            await trio.sleep(1)
            parent.cancel(handle.run_id)
        for wait_timeout in (None, None, 0, 10):
            with pytest.raises(error) as info:
                await parent.wait(handle.run_id, timeout=wait_timeout)
            assert info.value.run_id == handle.run_id
        assert parent.status(handle.run_id).status is status


async def test_wait_timeout_returns_the_live_handle(
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = td.Config(max_concurrent_runs=1)
    async with open_parent(sub("slow", sleeping(10, "v")), config=config) as parent:
        running = await parent.start("slow", "a")
        pending = await parent.start("slow", "b")
        assert await parent.wait(running.run_id, timeout=3) == td.RunHandle(
            running.run_id, "slow", S.RUNNING
        )
        assert trio.current_time() == 3
        assert await parent.wait(pending.run_id, timeout=3) == td.RunHandle(
            pending.run_id, "slow", S.PENDING
        )
        assert trio.current_time() == 6
        await parent.wait(running.run_id)
        await parent.wait(pending.run_id)


async def test_wait_timeout_does_not_cancel_child(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_parent(sub("slow", sleeping(10, "v"))) as parent:
        handle = await parent.start("slow", "t")
        out = await parent.wait(handle.run_id, timeout=4)
        assert isinstance(out, td.RunHandle)
        assert out.status is S.RUNNING
        await trio.sleep(1)
        assert parent.status(handle.run_id).status is S.RUNNING
        result = await parent.wait(handle.run_id)
        assert isinstance(result, td.RunResult)
        assert result.final_result == "v"
        assert trio.current_time() == 10


async def test_wait_timeout_zero_is_a_non_blocking_poll(
    mock_clock: trio.testing.MockClock,
) -> None:
    async with open_parent(sub("slow", sleeping(10, "v"))) as parent:
        handle = await parent.start("slow", "t")
        await advance(mock_clock, 1)
        # With a manual clock, anything that blocked would hang here.
        out = await parent.wait(handle.run_id, timeout=0)
        assert out == td.RunHandle(handle.run_id, "slow", S.RUNNING)
        assert trio.current_time() == 1
        await advance(mock_clock, 9)
        result = await parent.wait(handle.run_id, timeout=0)
        assert isinstance(result, td.RunResult)


async def test_cancelled_waiter_leaves_child_running(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_parent(sub("slow", sleeping(10, "v"))) as parent:
        handle = await parent.start("slow", "t")
        with trio.move_on_after(3) as scope:
            await parent.wait(handle.run_id)
        assert scope.cancelled_caught
        assert parent.status(handle.run_id).status is S.RUNNING
        result = await parent.wait(handle.run_id)
        assert isinstance(result, td.RunResult)
        assert result.final_result == "v"
        assert trio.current_time() == 10


async def test_cancel_live_run_is_acknowledged_and_idempotent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_parent_lenient(sub("idle", forever)) as parent:
        handle = await parent.start("idle", "t")
        await trio.sleep(1)
        first = parent.cancel(handle.run_id)
        second = parent.cancel(handle.run_id)
        assert first == td.CancelAck(handle.run_id, True, S.RUNNING)
        assert second.cancel_requested is True
        with pytest.raises(td.RunCancelledError):
            await parent.wait(handle.run_id)


async def test_cancel_on_terminal_run_is_not_requested(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_parent(sub("ok", sleeping(1, "v"))) as parent:
        handle = await parent.start("ok", "t")
        await trio.sleep(2)
        ack = parent.cancel(handle.run_id)
        assert ack == td.CancelAck(handle.run_id, False, S.COMPLETED)
        result = await parent.wait(handle.run_id)
        assert isinstance(result, td.RunResult)
        assert result.final_result == "v"


async def test_cancelled_run_reads_running_until_cleanup_finishes(
    mock_clock: trio.testing.MockClock,
) -> None:
    log: list[str] = []
    async with open_parent_lenient(sub("slow", slow_cleanup(3, log))) as parent:
        handle = await parent.start("slow", "t")
        await advance(mock_clock, 1)
        ack = parent.cancel(handle.run_id)
        assert ack.status is S.RUNNING
        await advance(mock_clock, 2.5)
        assert parent.status(handle.run_id).status is S.RUNNING
        assert log == []
        await advance(mock_clock, 0.5)
        assert log == [f"cleaned {handle.run_id}"]
        assert parent.status(handle.run_id).status is S.CANCELLED


async def test_cancel_pending_run_is_cancelled_at_once_and_never_starts(
    autojump_clock: trio.testing.MockClock,
) -> None:
    started: list[str] = []

    async def runner(ctx: td.ChildContext) -> str:
        started.append(ctx.task)
        await trio.sleep(5)
        return ctx.task

    config = td.Config(max_concurrent_runs=1, fail_closed=False)
    async with open_parent(sub("child", runner), config=config) as parent:
        first = await parent.start("child", "first")
        second = await parent.start("child", "second")
        assert second.status is S.PENDING
        ack = parent.cancel(second.run_id)
        assert ack == td.CancelAck(second.run_id, True, S.CANCELLED)
        assert parent.status(second.run_id).status is S.CANCELLED
        with pytest.raises(td.RunCancelledError):
            await parent.wait(second.run_id, timeout=0)
        await parent.wait(first.run_id)
        await trio.sleep(100)
        assert started == ["first"]


async def test_pending_runs_start_in_admission_order_skipping_cancelled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    started: list[tuple[str, float]] = []

    async def runner(ctx: td.ChildContext) -> str:
        started.append((ctx.task, trio.current_time()))
        await trio.sleep(5)
        return ctx.task

    config = td.Config(max_concurrent_runs=1)
    async with open_parent(sub("child", runner), config=config) as parent:
        handles = [await parent.start("child", name) for name in ("a", "b", "c", "d")]
        parent.cancel(handles[1].run_id)
        for handle in (handles[0], handles[2], handles[3]):
            await parent.wait(handle.run_id)
        with pytest.raises(td.RunCancelledError):
            await parent.wait(handles[1].run_id)
        # The cancelled run is resolved by a replacement so the block can close cleanly.
        await parent.delegate("child", "e", replaces=handles[1].run_id)
    assert started == [("a", 0), ("c", 5), ("d", 10), ("e", 15)]
