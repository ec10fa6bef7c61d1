"""Contract §17: a ``settled()`` iterator left early keeps nothing for its reader.

Counted, not timed: how many streams the parent still feeds, and how many
handles wait in them.
"""

from __future__ import annotations

import gc

import trio
import trio.testing

import trio_delegate as td


async def _done(ctx: td.ChildContext) -> str:
    return "ok"


def _buffered(parent: td.Parent) -> tuple[int, int]:
    """(streams the parent still feeds, handles buffered in them)."""
    streams = parent._settlements._streams
    buffered = sum(stream._receive.statistics().current_buffer_used for stream in streams)
    return len(streams), buffered


async def test_a_settled_iterator_left_by_break_is_unsubscribed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with td.open_runtime([td.Subagent("done", _done)]) as rt, rt.open_parent() as parent:
        for _ in range(30):
            first = await parent.start("done", "t")
            async for handle in parent.settled():
                assert handle.run_id == first.run_id
                break
            await parent.wait(first.run_id)
        gc.collect()  # (the iterators are freed by reference counting already)
        for _ in range(50):
            handle = await parent.start("done", "t")
            await parent.wait(handle.run_id)
        assert _buffered(parent) == (0, 0)


async def test_a_settled_iterator_never_read_and_dropped_is_unsubscribed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with td.open_runtime([td.Subagent("done", _done)]) as rt, rt.open_parent() as parent:
        kept = parent.settled()
        for _ in range(20):
            parent.settled()
        handle = await parent.start("done", "t")
        await parent.wait(handle.run_id)
        # Only the iterator still held is fed.
        assert _buffered(parent) == (1, 1)
        await kept.aclose()
        assert _buffered(parent) == (0, 0)


async def test_a_settled_iterator_made_after_every_earlier_one_left_is_fed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with td.open_runtime([td.Subagent("done", _done)]) as rt, rt.open_parent() as parent:
        parent.settled()  # dropped at once
        handle = await parent.start("done", "t")
        await parent.wait(handle.run_id)  # settles with no stream left
        async with parent.settled() as stream:
            later = await parent.start("done", "t")
            with trio.fail_after(60):
                told = await stream.__anext__()
            assert told.run_id == later.run_id
            await parent.wait(later.run_id)
