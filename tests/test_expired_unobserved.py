"""Contract §7: a completed run that expired before anyone observed it can be resolved.

Without a store its result is gone; a replacement is the one way left to
resolve it, and the fail-closed check says so.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

import trio_delegate as td


async def _done(ctx: td.ChildContext) -> str:
    return f"done: {ctx.task}"


async def test_an_expired_unobserved_completed_run_can_be_replaced_and_then_resolved(
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = td.Config(retention_max_runs=1)
    async with (
        td.open_runtime([td.Subagent("done", _done)], config=config) as rt,
        rt.open_parent() as parent,
    ):
        lost = await parent.start("done", "first")
        await trio.sleep(1)
        pushed_out = await parent.start("done", "second")
        await parent.wait(pushed_out.run_id)  # the only run retention keeps now
        with pytest.raises(td.ExpiredRunError):
            await parent.wait(lost.run_id)
        with pytest.raises(td.UnresolvedDelegationError) as caught:
            parent.check_resolved()
        message = str(caught.value)
        assert lost.run_id in message
        assert f"replaces={lost.run_id!r}" in message
        # The message's way out works: the replacement resolves it.
        again = await parent.delegate("done", "first", replaces=lost.run_id)
        assert again.final_result == "done: first"
        parent.check_resolved()
    # ...so the parent closed cleanly.


async def test_a_completed_run_still_held_needs_no_replacement(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with (
        td.open_runtime([td.Subagent("done", _done)]) as rt,
        rt.open_parent() as parent,
    ):
        handle = await parent.start("done", "t")
        await trio.sleep(1)
        with pytest.raises(td.InvalidArgumentsError, match="needs no replacement"):
            await parent.start("done", "t", replaces=handle.run_id)
        await parent.wait(handle.run_id)
