"""Contract §13: every limit in ``Config`` and what happens when it is exceeded."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
import trio.testing

import trio_delegate as td
from tests.helpers import forever, open_parent, open_parent_lenient, returning, sleeping, sub

S = td.RunStatus


def test_config_defaults_match_the_contract() -> None:
    config = td.Config()
    assert config.subagent_timeout_seconds == 900
    assert config.max_concurrent_runs == 16
    assert config.max_live_runs == 256
    assert config.max_depth == 3
    assert config.retention_seconds == 3600
    assert config.retention_max_runs == 1000
    assert config.fail_closed is True
    assert config.max_task_chars == 100_000
    assert config.max_result_bytes == 1_000_000


async def test_max_concurrent_runs_is_per_parent(autojump_clock: trio.testing.MockClock) -> None:
    config = td.Config(max_concurrent_runs=2, fail_closed=False)
    async with (
        td.open_runtime([sub("idle", forever)], config=config) as rt,
        rt.open_parent("a") as a,
        rt.open_parent("b") as b,
    ):
        a_handles = [await a.start("idle", "t") for _ in range(3)]
        b_handles = [await b.start("idle", "t") for _ in range(3)]
        expected = [S.RUNNING, S.RUNNING, S.PENDING]
        assert [h.status for h in a_handles] == expected
        assert [h.status for h in b_handles] == expected
        assert rt.live_runs == 6


async def test_default_max_concurrent_runs_is_16(autojump_clock: trio.testing.MockClock) -> None:
    async with open_parent_lenient(sub("idle", forever)) as parent:
        handles = [await parent.start("idle", "t") for _ in range(17)]
        assert [h.status for h in handles] == [S.RUNNING] * 16 + [S.PENDING]


async def test_nested_parents_have_their_own_slots(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # With one slot per parent, a run delegating to its own child must not wait
    # for a slot its own parent holds: nesting never deadlocks on slots.
    async def mid(ctx: td.ChildContext) -> Any:
        assert ctx.parent is not None
        first = await ctx.parent.delegate("leaf", "a")
        second = await ctx.parent.delegate("leaf", "b")
        return [first.final_result, second.final_result]

    config = td.Config(max_concurrent_runs=1)
    async with open_parent(
        sub("leaf", sleeping(1, "leaf")), sub("mid", mid, children=("leaf",)), config=config
    ) as parent:
        result = await parent.delegate("mid", "t")
        assert result.final_result == ["leaf", "leaf"]
        assert trio.current_time() == 2


async def test_max_live_runs_counts_pending_and_running_in_the_whole_runtime(
    autojump_clock: trio.testing.MockClock,
) -> None:
    calls: list[str] = []

    async def idle(ctx: td.ChildContext) -> None:
        calls.append(ctx.run_id)
        await trio.sleep_forever()

    go = trio.Event()
    nested_refusals: list[td.LimitExceededError] = []

    async def mid(ctx: td.ChildContext) -> None:
        assert ctx.parent is not None
        await go.wait()
        try:
            await ctx.parent.start("idle", "nested")
        except td.LimitExceededError as exc:
            nested_refusals.append(exc)
        await trio.sleep_forever()

    config = td.Config(max_live_runs=4, max_concurrent_runs=1, fail_closed=False)
    async with (
        td.open_runtime(
            [sub("idle", idle), sub("mid", mid, children=("idle",))], config=config
        ) as rt,
        rt.open_parent("a") as a,
        rt.open_parent("b") as b,
    ):
        running = await a.start("mid", "t")  # running, and tries a nested run at the limit
        pending = await a.start("idle", "t")  # pending
        assert pending.status is S.PENDING
        await b.start("idle", "t")
        await b.start("idle", "t")
        assert rt.live_runs == 4
        for parent in (a, b):
            with pytest.raises(td.LimitExceededError, match="max_live_runs"):
                await parent.start("idle", "t")
            with pytest.raises(td.LimitExceededError, match="max_live_runs"):
                await parent.delegate("idle", "t")
        go.set()  # the running nested-capable run tries to delegate at the limit
        await trio.testing.wait_all_tasks_blocked()
        assert len(nested_refusals) == 1
        assert rt.live_runs == 4
        assert len(calls) == 1  # only b's first run; nothing refused ever ran
        # A pending run freed by cancellation makes room again.
        a.cancel(pending.run_id)
        assert rt.live_runs == 3
        again = await b.start("idle", "t")
        assert again.status is S.PENDING
        a.cancel(running.run_id)


async def test_max_depth_refuses_deeper_runs_at_admission(
    autojump_clock: trio.testing.MockClock,
) -> None:
    depths: list[str] = []
    refusals: list[td.LimitExceededError] = []

    async def level(ctx: td.ChildContext) -> Any:
        depths.append(ctx.subagent)
        if ctx.parent is None:
            return ctx.subagent
        name = ctx.parent.subagents[0]
        try:
            result = await ctx.parent.delegate(name, "deeper")
        except td.LimitExceededError as exc:
            refusals.append(exc)
            return f"{ctx.subagent} stopped"
        return f"{ctx.subagent} > {result.final_result}"

    subagents = [
        sub("one", level, children=("two",)),
        sub("two", level, children=("three",)),
        sub("three", level, children=("four",)),
        sub("four", level),
    ]
    async with open_parent(*subagents, config=td.Config(max_depth=2)) as parent:
        result = await parent.delegate("one", "t")
    assert result.final_result == "one > two stopped"
    assert depths == ["one", "two"]  # "three" (depth 3) never ran
    [refusal] = refusals
    assert refusal.subagent == "three"
    assert "max_depth" in str(refusal)


async def test_default_max_depth_is_three(autojump_clock: trio.testing.MockClock) -> None:
    async def level(ctx: td.ChildContext) -> Any:
        if ctx.parent is None:
            return ctx.subagent
        name = ctx.parent.subagents[0]
        try:
            result = await ctx.parent.delegate(name, "deeper")
        except td.LimitExceededError:
            return f"{ctx.subagent} stopped"
        return f"{ctx.subagent} > {result.final_result}"

    subagents = [
        sub("one", level, children=("two",)),
        sub("two", level, children=("three",)),
        sub("three", level, children=("four",)),
        sub("four", level),
    ]
    async with open_parent(*subagents) as parent:
        result = await parent.delegate("one", "t")
    assert result.final_result == "one > two > three stopped"


@pytest.mark.parametrize("method", ["start", "delegate"])
async def test_max_task_chars_is_inclusive(
    autojump_clock: trio.testing.MockClock, method: str
) -> None:
    config = td.Config(max_task_chars=50)
    async with (
        td.open_runtime([sub("ok", returning(1))], config=config) as rt,
        rt.open_parent() as parent,
    ):
        out = await getattr(parent, method)("ok", "x" * 50)
        await parent.wait(out.run_id)
        with pytest.raises(td.InvalidArgumentsError, match="task") as info:
            await getattr(parent, method)("ok", "x" * 51)
        assert "50" in str(info.value)
        assert rt.live_runs == 0


async def test_default_max_task_chars_is_100_000(autojump_clock: trio.testing.MockClock) -> None:
    async with open_parent(sub("ok", returning(1))) as parent:
        await parent.delegate("ok", "x" * 100_000)
        with pytest.raises(td.InvalidArgumentsError, match="task"):
            await parent.delegate("ok", "x" * 100_001)


async def test_max_result_bytes_is_inclusive(autojump_clock: trio.testing.MockClock) -> None:
    limit = 64
    fits = "a" * (limit - 2)  # a JSON string: two quotes around the text
    assert len(json.dumps(fits).encode()) == limit
    config = td.Config(max_result_bytes=limit, fail_closed=False)
    async with open_parent(
        sub("fits", returning(fits)), sub("over", returning(fits + "a")), config=config
    ) as parent:
        result = await parent.delegate("fits", "t")
        assert result.final_result == fits
        with pytest.raises(td.RunFailedError) as info:
            await parent.delegate("over", "t")
        cause = info.value.__cause__
        assert isinstance(cause, td.LimitExceededError)
        assert str(limit) in str(cause)
        assert info.value.error_type == "LimitExceededError"


async def test_max_result_bytes_counts_bytes_not_characters(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # 30 two-byte characters: 30 characters, 62 bytes of UTF-8 JSON.
    text = "é" * 30
    config = td.Config(max_result_bytes=40, fail_closed=False)
    async with open_parent(sub("wide", returning(text)), config=config) as parent:
        with pytest.raises(td.RunFailedError) as info:
            await parent.delegate("wide", "t")
        assert isinstance(info.value.__cause__, td.LimitExceededError)


async def test_default_max_result_bytes_is_one_million(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fits = "a" * (1_000_000 - 2)
    async with open_parent_lenient(
        sub("fits", returning(fits)), sub("over", returning(fits + "a"))
    ) as parent:
        await parent.delegate("fits", "t")
        with pytest.raises(td.RunFailedError):
            await parent.delegate("over", "t")


async def test_default_retention_keeps_runs_for_an_hour(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_parent(sub("ok", returning(1))) as parent:
        handle = await parent.start("ok", "t")
        await parent.wait(handle.run_id)
        await trio.sleep(3600)
        assert parent.status(handle.run_id).status is S.COMPLETED
        await trio.sleep(0.001)
        with pytest.raises(td.ExpiredRunError):
            parent.status(handle.run_id)


async def test_default_retention_keeps_a_thousand_runs(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_parent(sub("ok", returning(1))) as parent:
        ids = [(await parent.delegate("ok", "t")).run_id for _ in range(1001)]
        with pytest.raises(td.ExpiredRunError):
            parent.status(ids[0])
        assert parent.status(ids[1]).status is S.COMPLETED


async def test_max_result_bytes_counts_compact_json(
    autojump_clock: trio.testing.MockClock,
) -> None:
    value = {"a": [1, 2]}
    compact = '{"a":[1,2]}'
    assert len(json.dumps(value)) > len(compact)
    config = td.Config(max_result_bytes=len(compact), fail_closed=False)
    async with open_parent(sub("fits", returning(value)), config=config) as parent:
        result = await parent.delegate("fits", "t")
    assert result.final_result == value


async def test_result_that_cannot_be_utf8_fails_the_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # A lone surrogate is a valid Python string but not valid UTF-8 JSON.
    async with open_parent_lenient(sub("odd", returning("\ud800"))) as parent:
        with pytest.raises(td.RunFailedError) as info:
            await parent.delegate("odd", "t")
    assert isinstance(info.value.__cause__, ValueError)
    assert "lone surrogate" in str(info.value)


async def test_result_size_counts_escapes(autojump_clock: trio.testing.MockClock) -> None:
    value = 'a"b\n'
    size = len(json.dumps(value, separators=(",", ":")))
    assert size == 8
    config = td.Config(max_result_bytes=size, fail_closed=False)
    async with open_parent(
        sub("fits", returning(value)), sub("over", returning(value + "c")), config=config
    ) as parent:
        assert (await parent.delegate("fits", "t")).final_result == value
        with pytest.raises(td.RunFailedError):
            await parent.delegate("over", "t")


async def test_max_result_bytes_counts_a_none_result_as_null(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # None is the JSON null: four bytes, checked against the limit like any result.
    async with open_parent_lenient(
        sub("acts", returning(None)), config=td.Config(max_result_bytes=3, fail_closed=False)
    ) as parent:
        with pytest.raises(td.RunFailedError) as info:
            await parent.delegate("acts", "t")
        assert isinstance(info.value.__cause__, td.LimitExceededError)
    async with open_parent(
        sub("acts", returning(None)), config=td.Config(max_result_bytes=4, fail_closed=False)
    ) as parent:
        assert (await parent.delegate("acts", "t")).final_result is None
