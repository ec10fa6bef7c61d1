"""Contract §8: ownership, cleanup, run ids and retention."""

from __future__ import annotations

import contextlib
import re

import pytest
import trio
import trio.testing

import trio_delegate as td
from tests.helpers import (
    advance,
    forever,
    open_parent,
    open_parent_lenient,
    returning,
    sleeping,
    slow_cleanup,
    sub,
)

S = td.RunStatus


async def _finished(parent: td.Parent, name: str, task: str = "t") -> str:
    """Start a run, let it finish and observe it; return its id."""
    handle = await parent.start(name, task)
    await parent.wait(handle.run_id)
    return handle.run_id


# -- ownership ---------------------------------------------------------------


async def test_run_ids_of_another_parent_are_unknown(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with (
        td.open_runtime([sub("ok", returning(1)), sub("idle", forever)]) as rt,
        rt.open_parent("a") as a,
        rt.open_parent("b") as b,
    ):
        done = await _finished(a, "ok")
        live = await a.start("idle", "t")
        for run_id in (done, live.run_id):
            with pytest.raises(td.UnknownRunError) as info:
                b.status(run_id)
            assert not isinstance(info.value, td.ExpiredRunError)
            with pytest.raises(td.UnknownRunError):
                await b.wait(run_id)
            with pytest.raises(td.UnknownRunError):
                await b.wait(run_id, timeout=0)
            with pytest.raises(td.UnknownRunError):
                b.cancel(run_id)
        # b's cancel did nothing to a's run.
        assert a.status(live.run_id).status is S.RUNNING
        a.cancel(live.run_id)
        with pytest.raises(td.RunCancelledError):
            await a.wait(live.run_id)
        await a.delegate("ok", "t", replaces=live.run_id)


async def test_run_ids_of_another_runtime_are_unknown(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_parent(sub("ok", returning(1))) as first:
        run_id = await _finished(first, "ok")
        async with open_parent(sub("ok", returning(1))) as second:
            with pytest.raises(td.UnknownRunError) as info:
                second.status(run_id)
            assert info.value.run_id == run_id
            assert run_id in str(info.value)


async def test_unknown_run_id_is_unknown_not_expired(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_parent(sub("ok", returning(1))) as parent:
        for run_id in ("run_" + "0" * 32, "nonsense", ""):
            with pytest.raises(td.UnknownRunError) as info:
                parent.status(run_id)
            assert type(info.value) is td.UnknownRunError


async def test_run_ids_are_random_and_not_derived_from_name_or_task(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ids: list[str] = []
    for _ in range(2):
        async with open_parent(sub("alpha", returning(1))) as parent:
            for _ in range(100):
                result = await parent.delegate("alpha", "the same task")
                ids.append(result.run_id)
    assert len(set(ids)) == len(ids)
    for run_id in ids:
        assert "alpha" not in run_id
        assert "task" not in run_id
    # At least 96 random bits: every one of 24+ hex digits varies across runs
    # (a counter or a hash of name and task would keep most of them fixed).
    digits = [re.sub(r"[^0-9a-f]", "", run_id.split("_", 1)[-1]) for run_id in ids]
    width = min(len(d) for d in digits)
    assert width >= 24
    for position in range(width):
        assert len({d[position] for d in digits}) > 4, position


async def _host(
    rt: td.Runtime, names: list[str], *, task_status: trio.TaskStatus[td.Parent]
) -> None:
    """Keep a parent open, with live runs, outside the runtime's own block."""
    async with rt.open_parent() as parent:
        for name in names:
            await parent.start(name, "t")
        task_status.started(parent)
        await trio.sleep_forever()


@pytest.mark.parametrize("body_raises", [False, True])
async def test_leaving_the_runtime_cancels_and_joins_every_run(
    autojump_clock: trio.testing.MockClock, body_raises: bool
) -> None:
    log: list[str] = []

    async def mid(ctx: td.ChildContext) -> None:
        assert ctx.parent is not None
        await ctx.parent.start("slow", "nested")
        await trio.sleep_forever()

    subagents = [sub("slow", slow_cleanup(3, log)), sub("mid", mid, children=("slow",))]
    config = td.Config(fail_closed=False)
    expectation = (
        pytest.raises(LookupError, match="body") if body_raises else contextlib.nullcontext()
    )
    async with trio.open_nursery() as hosts:
        with expectation:
            async with td.open_runtime(subagents, config=config) as rt:
                parent = await hosts.start(_host, rt, ["slow", "slow", "mid"])
                await trio.sleep(1)
                assert rt.live_runs == 4
                if body_raises:
                    raise LookupError("body")
        # Every run, the nested one included, was cancelled and joined (3 s of
        # shielded cleanup each) while the host's parent block is still open.
        assert len(log) == 3
        assert trio.current_time() == 4
        assert rt.live_runs == 0
        with pytest.raises(td.RuntimeClosedError):
            parent.status("run_x")
        hosts.cancel_scope.cancel()


async def test_nested_children_end_with_their_run(autojump_clock: trio.testing.MockClock) -> None:
    log: list[str] = []
    nested_ids: list[str] = []

    async def mid(ctx: td.ChildContext) -> None:
        assert ctx.parent is not None
        nested_ids.append((await ctx.parent.start("slow", "nested")).run_id)
        await trio.sleep_forever()

    async with open_parent_lenient(
        sub("slow", slow_cleanup(2, log)), sub("mid", mid, children=("slow",))
    ) as parent:
        handle = await parent.start("mid", "t")
        await trio.sleep(1)
        parent.cancel(handle.run_id)
        with pytest.raises(td.RunCancelledError):
            await parent.wait(handle.run_id)
        assert log == [f"cleaned {nested_ids[0]}"]
        assert trio.current_time() == 3


# -- retention -----------------------------------------------------------------


async def test_terminal_runs_are_kept_for_retention_seconds_after_they_ended(
    mock_clock: trio.testing.MockClock,
) -> None:
    config = td.Config(retention_seconds=10)
    async with open_parent(sub("slow", sleeping(5, "v")), config=config) as parent:
        handle = await parent.start("slow", "t")
        await advance(mock_clock, 5)  # ended at t=5
        assert parent.status(handle.run_id).status is S.COMPLETED
        await advance(mock_clock, 10)  # exactly 10 s after it ended: still kept
        assert parent.status(handle.run_id).status is S.COMPLETED
        result = await parent.wait(handle.run_id)
        assert isinstance(result, td.RunResult)
        await advance(mock_clock, 0.001)  # more than 10 s: gone
        with pytest.raises(td.ExpiredRunError) as info:
            parent.status(handle.run_id)
        assert info.value.run_id == handle.run_id
        with pytest.raises(td.ExpiredRunError):
            await parent.wait(handle.run_id)
        with pytest.raises(td.ExpiredRunError):
            parent.cancel(handle.run_id)


async def test_live_runs_are_never_evicted(autojump_clock: trio.testing.MockClock) -> None:
    config = td.Config(retention_seconds=1, retention_max_runs=1, fail_closed=False)
    async with open_parent(sub("idle", forever), sub("ok", returning(1)), config=config) as p:
        first = await p.start("idle", "t")
        second = await p.start("idle", "t")
        await trio.sleep(100)
        for _ in range(5):
            await _finished(p, "ok")
            await trio.sleep(10)
        assert p.status(first.run_id).status is S.RUNNING
        assert p.status(second.run_id).status is S.RUNNING


async def test_retention_counts_runs_in_the_whole_runtime_oldest_ended_first(
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = td.Config(retention_max_runs=2)
    async with (
        td.open_runtime(
            [sub("slow", sleeping(10, "s")), sub("fast", sleeping(1, "f"))], config=config
        ) as rt,
        rt.open_parent("a") as a,
        rt.open_parent("b") as b,
    ):
        slow = await a.start("slow", "t")  # started first, ends last (t=10)
        fast = await a.start("fast", "t")  # ends at t=1
        await a.wait(fast.run_id)
        await a.wait(slow.run_id)
        # Retained now: fast (ended 1), slow (ended 10). A third run ends in b.
        other = await _finished(b, "fast")
        with pytest.raises(td.ExpiredRunError):
            a.status(fast.run_id)
        assert a.status(slow.run_id).status is S.COMPLETED
        assert b.status(other).status is S.COMPLETED
        await _finished(b, "fast")
        with pytest.raises(td.ExpiredRunError):
            a.status(slow.run_id)
        assert b.status(other).status is S.COMPLETED


async def test_evicted_id_of_another_parent_reads_as_unknown_not_expired(
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = td.Config(retention_max_runs=1)
    async with (
        td.open_runtime([sub("ok", returning(1))], config=config) as rt,
        rt.open_parent("a") as a,
        rt.open_parent("b") as b,
    ):
        evicted = await _finished(a, "ok")
        await _finished(a, "ok")
        with pytest.raises(td.ExpiredRunError):
            a.status(evicted)
        with pytest.raises(td.UnknownRunError) as info:
            b.status(evicted)
        assert type(info.value) is td.UnknownRunError


async def test_expired_ids_are_remembered_for_ten_times_retention_max_runs(
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = td.Config(retention_max_runs=3)
    async with open_parent(sub("ok", returning(1)), config=config) as parent:
        ids = [await _finished(parent, "ok") for _ in range(3 + 30)]
        # 30 runs were evicted: exactly 10 x retention_max_runs.
        for run_id in ids[:30]:
            with pytest.raises(td.ExpiredRunError):
                parent.status(run_id)
        for run_id in ids[30:]:
            assert parent.status(run_id).status is S.COMPLETED


async def test_memory_of_expired_ids_is_bounded(autojump_clock: trio.testing.MockClock) -> None:
    # With retention_max_runs=1, at least 10 evicted ids must read as expired;
    # after 300 evictions the oldest may not: the memory for them is bounded.
    config = td.Config(retention_max_runs=1)
    async with open_parent(sub("ok", returning(1)), config=config) as parent:
        ids = [await _finished(parent, "ok") for _ in range(301)]
        with pytest.raises(td.UnknownRunError) as info:
            parent.status(ids[0])
        assert type(info.value) is td.UnknownRunError
        for run_id in ids[-11:-1]:
            with pytest.raises(td.ExpiredRunError):
                parent.status(run_id)


async def test_closed_runtime_refuses_every_call(autojump_clock: trio.testing.MockClock) -> None:
    async with td.open_runtime([sub("ok", returning(1))]) as rt, rt.open_parent() as parent:
        run_id = await _finished(parent, "ok")
    for call in (
        lambda: parent.status(run_id),
        lambda: parent.cancel(run_id),
        parent.check_resolved,
    ):
        with pytest.raises(td.RuntimeClosedError, match="runtime"):
            call()
    with pytest.raises(td.RuntimeClosedError, match="runtime"):
        await parent.wait(run_id)
    with pytest.raises(td.RuntimeClosedError, match="runtime"):
        await parent.start("ok", "t")
    with pytest.raises(td.RuntimeClosedError, match="runtime"):
        await parent.delegate("ok", "t")
    with pytest.raises(td.RuntimeClosedError, match="runtime"):
        async with rt.open_parent("new"):
            pass  # pragma: no cover
