"""Contract §6: the child deadline and the wait timeout are different things."""

from __future__ import annotations

import math

import pytest
import trio
import trio.testing

import trio_delegate as td
from tests.helpers import (
    advance,
    forever,
    open_parent,
    open_parent_lenient,
    sleeping,
    slow_cleanup,
    sub,
)

S = td.RunStatus


async def test_child_deadline_applies_whether_or_not_anyone_waits(
    mock_clock: trio.testing.MockClock,
) -> None:
    async with open_parent_lenient(sub("idle", forever, timeout_seconds=5)) as parent:
        handle = await parent.start("idle", "t")
        await advance(mock_clock, 4.999)
        assert parent.status(handle.run_id).status is S.RUNNING
        await advance(mock_clock, 0.001)
        assert parent.status(handle.run_id).status is S.TIMED_OUT


async def test_child_deadline_counts_from_start_not_admission(
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = td.Config(max_concurrent_runs=1, fail_closed=False)
    deadlines: list[float] = []

    async def idle(ctx: td.ChildContext) -> None:
        deadlines.append(ctx.deadline)
        await trio.sleep_forever()

    async with open_parent(
        sub("busy", sleeping(7, "v")), sub("idle", idle, timeout_seconds=5), config=config
    ) as parent:
        first = await parent.start("busy", "t")
        second = await parent.start("idle", "t")
        assert second.status is S.PENDING
        with pytest.raises(td.RunTimedOutError):
            await parent.wait(second.run_id)
        # Pending from 0 to 7, running from 7: its deadline is 7 + 5.
        assert trio.current_time() == 12
        assert deadlines == [12]
        await parent.wait(first.run_id)


async def test_wait_on_timed_out_run_raises_run_timed_out_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_parent_lenient(sub("idle", forever, timeout_seconds=5)) as parent:
        handle = await parent.start("idle", "t")
        with pytest.raises(td.RunTimedOutError) as info:
            await parent.wait(handle.run_id, timeout=100)
        assert trio.current_time() == 5
        assert info.value.run_id == handle.run_id
        assert info.value.status == "timed_out"


async def test_wait_timeout_tied_with_deadline_raises_timed_out(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_parent_lenient(sub("idle", forever, timeout_seconds=5)) as parent:
        handle = await parent.start("idle", "t")
        with pytest.raises(td.RunTimedOutError):
            await parent.wait(handle.run_id, timeout=5)
        assert trio.current_time() == 5


async def test_wait_tied_with_deadline_under_manual_clock(
    mock_clock: trio.testing.MockClock,
) -> None:
    async with open_parent_lenient(sub("idle", forever, timeout_seconds=5)) as parent:
        handle = await parent.start("idle", "t")
        outcome: list[object] = []

        async def waiter() -> None:
            try:
                outcome.append(await parent.wait(handle.run_id, timeout=5))
            except td.RunTimedOutError as exc:
                outcome.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            await advance(mock_clock, 5)
        [answer] = outcome
        assert isinstance(answer, td.RunTimedOutError)


async def test_wait_never_answers_running_after_the_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The runner needs 10 s of shielded cleanup after its 5 s deadline: a timed
    # wait past the deadline waits for the run to settle instead of saying "running".
    async with open_parent_lenient(sub("slow", slow_cleanup(10), timeout_seconds=5)) as parent:
        handle = await parent.start("slow", "t")
        await trio.sleep(6)
        assert parent.status(handle.run_id).status is S.RUNNING
        with pytest.raises(td.RunTimedOutError):
            await parent.wait(handle.run_id, timeout=1)
        assert trio.current_time() == 15
        with pytest.raises(td.RunTimedOutError):
            await parent.wait(handle.run_id, timeout=0)


async def test_repeated_short_waits_do_not_move_the_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_parent_lenient(sub("idle", forever, timeout_seconds=10)) as parent:
        handle = await parent.start("idle", "t")
        for _ in range(3):  # at 3, 6 and 9 s
            out = await parent.wait(handle.run_id, timeout=3)
            assert out == td.RunHandle(handle.run_id, "idle", S.RUNNING)
        with pytest.raises(td.RunTimedOutError):
            await parent.wait(handle.run_id, timeout=3)
        assert trio.current_time() == 10


async def test_long_wait_timeout_does_not_extend_the_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_parent_lenient(sub("idle", forever, timeout_seconds=4)) as parent:
        handle = await parent.start("idle", "t")
        with pytest.raises(td.RunTimedOutError):
            await parent.wait(handle.run_id, timeout=1000)
        assert trio.current_time() == 4


async def test_subagent_timeout_overrides_config_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = td.Config(subagent_timeout_seconds=5, fail_closed=False)
    async with open_parent(
        sub("inherits", forever), sub("own", forever, timeout_seconds=20), config=config
    ) as parent:
        inherits = await parent.start("inherits", "t")
        own = await parent.start("own", "t")
        with pytest.raises(td.RunTimedOutError):
            await parent.wait(inherits.run_id)
        assert trio.current_time() == 5
        with pytest.raises(td.RunTimedOutError):
            await parent.wait(own.run_id)
        assert trio.current_time() == 20


async def test_default_child_deadline_is_900_seconds(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_parent_lenient(sub("idle", forever)) as parent:
        handle = await parent.start("idle", "t")
        with pytest.raises(td.RunTimedOutError):
            await parent.wait(handle.run_id)
        assert trio.current_time() == 900


@pytest.mark.parametrize(
    ("config_timeout", "subagent_timeout"),
    [(None, td.INHERIT), (5.0, None)],
    ids=["config-none", "subagent-none"],
)
async def test_none_timeout_means_no_child_deadline(
    autojump_clock: trio.testing.MockClock,
    config_timeout: float | None,
    subagent_timeout: float | None,
) -> None:
    deadlines: list[float] = []

    async def long(ctx: td.ChildContext) -> str:
        deadlines.append(ctx.deadline)
        await trio.sleep(80_000)
        return "finally"

    config = td.Config(subagent_timeout_seconds=config_timeout)
    async with open_parent(sub("long", long, timeout_seconds=subagent_timeout), config=config) as p:
        result = await p.delegate("long", "t")
        assert result.final_result == "finally"
    assert deadlines == [math.inf]


async def test_poll_exactly_at_the_deadline_raises_timed_out(
    mock_clock: trio.testing.MockClock,
) -> None:
    async with open_parent_lenient(sub("idle", forever, timeout_seconds=5)) as parent:
        handle = await parent.start("idle", "t")
        await advance(mock_clock, 1)
        mock_clock.jump(4)  # at the deadline, before the run could react
        with pytest.raises(td.RunTimedOutError):
            await parent.wait(handle.run_id, timeout=0)
        assert trio.current_time() == 5
