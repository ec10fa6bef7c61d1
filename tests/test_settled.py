"""Waking the parent (contract §17): ``parent.settled()`` and ``parent.unobserved()``."""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import trio_delegate as td

from .helpers import forever, raising, sleeping, sub

S = td.RunStatus
SUBAGENTS = [
    sub("quick", sleeping(1, "quick")),
    sub("slow", sleeping(5, "slow")),
    sub("broken", raising(RuntimeError("no"), after=2)),
    sub("idle", forever, timeout_seconds=None),
]


async def collect(stream: Any, into: list[td.RunHandle]) -> None:
    async for handle in stream:
        into.append(handle)


@pytest.fixture(params=["none", "memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> td.ResultStore | None:
    if request.param == "memory":
        return td.MemoryStore()
    if request.param == "sqlite":
        # The disk's worker thread must not let the mock clock run ahead.
        return td.SQLiteStore(tmp_path / "runs.db")
    return None


async def test_settled_runs_come_in_settlement_order_and_are_not_observation(
    autojump_clock: trio.testing.MockClock, store: td.ResultStore | None
) -> None:
    seen: list[td.RunHandle] = []
    handles: list[td.RunHandle] = []

    async def session(rt: td.Runtime, nursery: trio.Nursery) -> None:
        async with rt.open_parent() as parent:
            nursery.start_soon(collect, parent.settled(), seen)
            handles.extend(
                [
                    await parent.start("slow", "a"),
                    await parent.start("quick", "b"),
                    await parent.start("broken", "c"),
                ]
            )
            await trio.sleep(10)
            slow, quick, broken = handles
            assert [(h.run_id, h.status) for h in seen] == [
                (quick.run_id, S.COMPLETED),
                (broken.run_id, S.FAILED),
                (slow.run_id, S.COMPLETED),
            ]
            # Seen settle is not observed: all three are still unresolved.
            with pytest.raises(td.UnresolvedDelegationError):
                parent.check_resolved()

    async with td.open_runtime(SUBAGENTS, store=store) as rt, trio.open_nursery() as nursery:
        with pytest.raises(td.UnresolvedDelegationError) as info:
            await session(rt, nursery)
    assert {entry.run_id for entry in info.value.unresolved} == {h.run_id for h in handles}


async def test_every_stream_gets_every_settlement_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    first: list[td.RunHandle] = []
    second: list[td.RunHandle] = []
    late: list[td.RunHandle] = []
    config = td.Config(fail_closed=False)
    async with (
        td.open_runtime(SUBAGENTS, config=config) as rt,
        trio.open_nursery() as nursery,
        rt.open_parent() as parent,
    ):
        nursery.start_soon(collect, parent.settled(), first)
        nursery.start_soon(collect, parent.settled(), second)
        early = await parent.delegate("quick", "before the late stream")
        nursery.start_soon(collect, parent.settled(), late)
        await trio.testing.wait_all_tasks_blocked()
        later = await parent.start("quick", "after")
        await parent.wait(later.run_id)
    ids = [early.run_id, later.run_id]
    assert [handle.run_id for handle in first] == ids
    assert [handle.run_id for handle in second] == ids
    assert [handle.run_id for handle in late] == [later.run_id]  # from its creation on


async def test_runs_ended_by_the_close_come_before_the_stream_ends(
    autojump_clock: trio.testing.MockClock, store: td.ResultStore | None
) -> None:
    seen: list[td.RunHandle] = []
    config = td.Config(fail_closed=False, max_concurrent_runs=1)
    async with td.open_runtime(SUBAGENTS, store=store, config=config) as rt:
        async with trio.open_nursery() as nursery, rt.open_parent() as parent:
            nursery.start_soon(collect, parent.settled(), seen)
            running = await parent.start("idle", "running")
            pending = await parent.start("idle", "pending")
            await trio.sleep(1)
            # The collector returned: its stream ended when the parent closed.
        with pytest.raises(td.RuntimeClosedError):
            parent.settled()
    assert [(h.run_id, h.status) for h in seen] == [
        (pending.run_id, S.CANCELLED),  # pending runs end first, at once
        (running.run_id, S.CANCELLED),
    ]


async def test_a_stream_can_be_left_early(autojump_clock: trio.testing.MockClock) -> None:
    async with td.open_runtime(SUBAGENTS) as rt, rt.open_parent() as parent:
        async with parent.settled() as stream:
            await parent.delegate("quick", "t")
            assert (await stream.__anext__()).status is S.COMPLETED
        with pytest.raises(StopAsyncIteration):
            await stream.__anext__()
        await parent.delegate("quick", "u")  # nothing is kept for it any more


async def test_nested_parents_have_their_own_stream(
    autojump_clock: trio.testing.MockClock,
) -> None:
    inner: list[td.RunHandle] = []

    async def boss(ctx: td.ChildContext) -> str:
        assert ctx.parent is not None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(collect, ctx.parent.settled(), inner)
            handle = await ctx.parent.start("quick", "inner work")
            await ctx.parent.wait(handle.run_id)
            nursery.cancel_scope.cancel()
        return "done"

    outer: list[td.RunHandle] = []
    async with (
        td.open_runtime([*SUBAGENTS, sub("boss", boss, children=("quick",))]) as rt,
        trio.open_nursery() as nursery,
        rt.open_parent() as parent,
    ):
        nursery.start_soon(collect, parent.settled(), outer)
        result = await parent.delegate("boss", "t")
        await trio.testing.wait_all_tasks_blocked()
    assert [h.subagent for h in inner] == ["quick"]
    assert [h.run_id for h in outer] == [result.run_id]


async def test_unobserved_lists_runs_nobody_was_told_about(
    autojump_clock: trio.testing.MockClock, store: td.ResultStore | None
) -> None:
    config = td.Config(fail_closed=False)
    async with (
        td.open_runtime(SUBAGENTS, store=store, config=config) as rt,
        rt.open_parent() as parent,
    ):
        slow = await parent.start("slow", "a")
        quick = await parent.start("quick", "b")
        broken = await parent.start("broken", "c")
        await parent.delegate("quick", "foreground: told by delegate itself")
        assert parent.unobserved() == (td.RunHandle(quick.run_id, "quick", S.COMPLETED),)
        # A timed wait that answers "running" tells nothing.
        assert isinstance(await parent.wait(slow.run_id, timeout=0.5), td.RunHandle)
        await trio.sleep(10)
        assert [h.run_id for h in parent.unobserved()] == [
            quick.run_id,
            broken.run_id,
            slow.run_id,
        ]
        await parent.wait(quick.run_id)
        with pytest.raises(td.RunFailedError):
            await parent.wait(broken.run_id)  # told: an error is an outcome too
        assert parent.unobserved() == (td.RunHandle(slow.run_id, "slow", S.COMPLETED),)
        # Status snapshots and cancels tell nothing either.
        parent.status(slow.run_id)
        parent.cancel(slow.run_id)
        assert len(parent.unobserved()) == 1
    with pytest.raises(td.RuntimeClosedError):
        parent.unobserved()


async def test_a_run_seen_only_through_unobserved_is_still_unresolved(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def session(rt: td.Runtime) -> None:
        async with rt.open_parent() as parent:
            await parent.start("quick", "t")
            await trio.sleep(2)
            assert len(parent.unobserved()) == 1

    async with td.open_runtime(SUBAGENTS) as rt:
        with pytest.raises(td.UnresolvedDelegationError):
            await session(rt)


def test_the_wakeup_host_example_observes_every_run(capsys: pytest.CaptureFixture[str]) -> None:
    example = Path(__file__).resolve().parent.parent / "examples" / "wakeup_host.py"
    runpy.run_path(str(example), run_name="__main__")
    out = capsys.readouterr().out
    # The model kept talking, was told at its next turn, and read both runs.
    assert "Still drafting the introduction meanwhile." in out
    assert out.count("call wait_subagent to read it") == 2
    assert out.count("wait_subagent ->") == 2
    assert "every run observed: the parent may claim completion" in out
    assert out.index("(not done yet: 1 unresolved run(s))") < out.index("every run observed")
