"""Contract §18: runners that do not stop are decided a grace after their cancellation."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio
import trio.testing

import trio_delegate as td

from .helpers import ignores_cancellation

S = td.RunStatus
GRACE = 7.0


def _config(**kwargs: Any) -> td.Config:
    return td.Config(cancel_grace_seconds=GRACE, fail_closed=False, **kwargs)


@pytest.mark.parametrize("value", [0, -1, float("nan"), float("inf"), "3", None, 10**400])
def test_config_cancel_grace_seconds_is_validated(value: object) -> None:
    with pytest.raises(td.InvalidArgumentsError, match=r"Config\.cancel_grace_seconds"):
        td.Config(cancel_grace_seconds=value)


def test_config_cancel_grace_seconds_defaults_to_30() -> None:
    assert td.Config().cancel_grace_seconds == 30.0


async def test_overdue_wait_is_answered_within_the_grace_of_a_runner_that_does_not_stop(
    autojump_clock: trio.testing.MockClock,
) -> None:
    stubborn = td.Subagent("stubborn", ignores_cancellation, timeout_seconds=5)
    async with td.open_runtime([stubborn], config=_config()) as rt, rt.open_parent() as parent:
        handle = await parent.start("stubborn", "t")
        await trio.sleep(6)  # past its deadline: the runner ignores it
        assert parent.status(handle.run_id).status is S.RUNNING
        with pytest.raises(td.RunTimedOutError, match="did not stop") as caught:
            await parent.wait(handle.run_id, timeout=2)
        # Decided at its deadline plus the grace, never later.
        assert trio.current_time() == pytest.approx(5 + GRACE)
        assert "Config.cancel_grace_seconds" in str(caught.value)
        assert parent.status(handle.run_id).status is S.TIMED_OUT
        assert rt.live_runs == 0
        # The runner's task still holds the runtime open: the close waits for it.


async def test_cancel_request_is_decided_within_the_grace_of_a_runner_that_does_not_stop(
    autojump_clock: trio.testing.MockClock,
) -> None:
    stubborn = td.Subagent("stubborn", ignores_cancellation, timeout_seconds=None)
    async with td.open_runtime([stubborn], config=_config()) as rt, rt.open_parent() as parent:
        handle = await parent.start("stubborn", "t")
        await trio.sleep(1)
        assert parent.cancel(handle.run_id).cancel_requested
        with pytest.raises(td.RunCancelledError, match=r"by request .*did not stop"):
            await parent.wait(handle.run_id)
        assert trio.current_time() == pytest.approx(1 + GRACE)


async def test_parent_close_returns_within_the_grace_of_a_runner_that_does_not_stop(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    stubborn = td.Subagent("stubborn", ignores_cancellation, timeout_seconds=None)
    caplog.set_level(logging.WARNING, "trio_delegate")
    async with td.open_runtime([stubborn], config=_config()) as rt:
        with trio.move_on_after(1):
            async with rt.open_parent() as parent:
                settled = parent.settled()
                handle = await parent.start("stubborn", "t")
                await trio.sleep_forever()
        # The move_on_after fired at 1; the close took the grace, not for ever.
        assert trio.current_time() == pytest.approx(1 + GRACE)
        async with rt.open_parent() as again:  # the owner is free again
            with pytest.raises(td.RunCancelledError, match=r"parent closed .*did not stop"):
                await again.wait(handle.run_id)
        assert [h.status async for h in settled] == [S.CANCELLED]
    # The runtime's close waited for the runner, which returned at last.
    assert trio.current_time() == pytest.approx(1_000, abs=2)
    messages = [record.getMessage() for record in caplog.records]
    assert any("did not stop within 7 s" in m for m in messages)
    assert any("returned" in m and "dropped" in m for m in messages)


async def test_runtime_close_reports_runs_that_refuse_to_stop_periodically(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    stubborn = td.Subagent("stubborn", ignores_cancellation, timeout_seconds=None)
    caplog.set_level(logging.WARNING, "trio_delegate")
    async with td.open_runtime([stubborn], config=_config()) as rt:
        async with rt.open_parent() as parent:
            handle = await parent.start("stubborn", "t")
            await trio.sleep(1)
        closing = trio.current_time()
    # The close reported the run at once, then every grace period until the
    # runner returned (at 1,000 s).
    reports = [
        record.getMessage() for record in caplog.records if "refuse to stop" in record.getMessage()
    ]
    assert len(reports) >= (1_000 - closing) // GRACE - 1
    assert all(handle.run_id in report for report in reports)
