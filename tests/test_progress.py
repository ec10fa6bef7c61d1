"""Contract §19: a running child reports how far it is; the run keeps the latest report."""

from __future__ import annotations

import gc
import math
import tracemalloc
from typing import Any

import pytest
import trio
import trio.testing

import trio_delegate as td
from tests.helpers import open_parent, sub

S = td.RunStatus


def reporting(*reports: tuple[Any, dict[str, Any]], then: float = 10) -> Any:
    """A runner that makes *reports*, then sleeps *then* seconds and returns."""

    async def runner(ctx: td.ChildContext) -> Any:
        for message, kwargs in reports:
            ctx.progress(message, **kwargs)
        await trio.sleep(then)
        return "done"

    return runner


async def test_status_and_a_timed_out_wait_carry_the_latest_report(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runner = reporting(("start", {}), ("  half \n way ", {"progress": 5, "total": 10}))
    async with open_parent(sub("work", runner)) as parent:
        handle = await parent.start("work", "go")
        assert handle.progress is None
        await trio.testing.wait_all_tasks_blocked()
        expected = td.Progress("half way", 5.0, 10.0, 2)
        assert parent.status(handle.run_id).progress == expected
        waited = await parent.wait(handle.run_id, timeout=1)
        assert isinstance(waited, td.RunHandle)
        assert waited.status is S.RUNNING
        assert waited.progress == expected
        await parent.wait(handle.run_id)
        # A terminal handle keeps the last report.
        assert parent.status(handle.run_id).progress == expected


async def test_a_run_that_never_reports_has_no_progress_and_no_talk(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_parent(sub("work", reporting())) as parent:
        handle = await parent.start("work", "go")
        await trio.testing.wait_all_tasks_blocked()
        assert parent.status(handle.run_id) == td.RunHandle(handle.run_id, "work", S.RUNNING)
        run = parent._registry.lookup(handle.run_id, parent.owner)
        assert run.talk is None  # type: ignore[union-attr]
        await parent.wait(handle.run_id)


async def test_progress_never_goes_down_and_none_leaves_the_number_out(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[Any] = []

    async def runner(ctx: td.ChildContext) -> Any:
        ctx.progress(progress=3)
        ctx.progress("no number")
        try:
            ctx.progress(progress=2)
        except td.InvalidArgumentsError as exc:
            log.append(exc)
        ctx.progress(progress=3, total=1)  # the same number again; total may change
        await trio.sleep(5)

    async with open_parent(sub("work", runner)) as parent:
        handle = await parent.start("work", "go")
        await trio.testing.wait_all_tasks_blocked()
        assert parent.status(handle.run_id).progress == td.Progress(None, 3.0, 1.0, 3)
        await parent.wait(handle.run_id)
    (error,) = log
    assert "never goes down" in str(error)
    assert "3" in str(error)


@pytest.mark.parametrize(
    ("message", "kwargs", "match"),
    [
        (3, {}, "message"),
        (None, {"progress": -1}, "progress"),
        (None, {"progress": math.nan}, "progress"),
        (None, {"progress": math.inf}, "progress"),
        (None, {"progress": True}, "progress"),
        (None, {"progress": 10**400}, "progress"),
        (None, {"total": "5"}, "total"),
    ],
)
def test_a_malformed_report_is_refused(message: Any, kwargs: dict[str, Any], match: str) -> None:
    ctx = td.ChildContext("run_1", "solo", "task")
    with pytest.raises(td.InvalidArgumentsError, match=match):
        ctx.progress(message, **kwargs)


async def test_the_message_is_cut_to_a_thousand_characters_and_made_valid_text(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runner = reporting(("x" * 5_000 + "\ud800", {}))
    async with open_parent(sub("work", runner)) as parent:
        handle = await parent.start("work", "go")
        await trio.testing.wait_all_tasks_blocked()
        progress = parent.status(handle.run_id).progress
        assert progress is not None
        assert progress.message is not None
        assert len(progress.message) == 1_000
        assert progress.message.endswith("…")
        await parent.wait(handle.run_id)


async def test_a_report_after_the_run_settled_does_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    kept: list[td.ChildContext] = []

    async def runner(ctx: td.ChildContext) -> Any:
        kept.append(ctx)
        ctx.progress("working", progress=1)
        return "done"

    async with open_parent(sub("work", runner)) as parent:
        handle = await parent.start("work", "go")
        await parent.wait(handle.run_id)
        kept[0].progress("late", progress=-5)  # nothing is checked either
        assert parent.status(handle.run_id).progress == td.Progress("working", 1.0, None, 1)


async def test_a_million_reports_stay_bounded_in_memory(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def hot(ctx: td.ChildContext) -> Any:
        for step in range(1_000):
            ctx.progress("step", progress=step)
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for step in range(1_000, 1_001_000):
                ctx.progress("step", progress=step)
            grown = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        return grown

    async with open_parent(sub("hot", hot)) as parent:
        result = await parent.delegate("hot", "go")
        run = parent._registry.lookup(result.run_id, parent.owner)
        assert run.talk.seq == 1_001_000  # type: ignore[union-attr]
    assert result.final_result < 10_000


async def test_progress_of_a_live_run_shows_with_a_memory_store(
    autojump_clock: trio.testing.MockClock,
) -> None:
    subagents = [sub("work", reporting(("saving", {"progress": 1})))]
    async with td.open_runtime(subagents, store=td.MemoryStore()) as rt, rt.open_parent() as p:
        handle = await p.start("work", "go")
        await trio.testing.wait_all_tasks_blocked()
        assert p.status(handle.run_id).progress == td.Progress("saving", 1.0, None, 1)
        assert (await p.wait(handle.run_id)).final_result == "done"  # type: ignore[union-attr]


async def test_settled_unobserved_and_runs_handles_carry_the_latest_progress(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_parent(sub("work", reporting(("last", {"progress": 9}), then=1))) as parent:
        stream = parent.settled()
        handle = await parent.start("work", "go")
        async with stream:
            settled = await stream.__anext__()
        expected = td.Progress("last", 9.0, None, 1)
        assert settled.progress == expected
        assert parent.unobserved()[0].progress == expected
        await parent.wait(handle.run_id)
