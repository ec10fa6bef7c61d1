"""A foreground caller cancelled while its run completes anyway: one verdict on every surface.

The run completed, and nobody was told its result: it is unobserved
(contract §17) and unresolved (§7), whether the caller was a
``Parent.delegate`` or an MCP client's foreground ``delegate_task``.
"""

from __future__ import annotations

import pytest
import trio
import trio.lowlevel
import trio.testing

import trio_delegate as td

from .helpers import Stubborn


def _check_the_verdict(parent: td.Parent, runner: Stubborn) -> None:
    assert runner.cancelled
    [unobserved] = parent.unobserved()
    assert unobserved.status is td.RunStatus.COMPLETED
    with pytest.raises(td.UnresolvedDelegationError) as raised:
        parent.check_resolved()
    assert [run.run_id for run in raised.value.unresolved] == [unobserved.run_id]


async def test_a_cancelled_delegate_leaves_its_completed_run_unobserved() -> None:
    runner = Stubborn()
    async with (
        td.open_runtime([td.Subagent("stubborn", runner)]) as runtime,
        runtime.open_parent() as parent,
    ):
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(parent.delegate, "stubborn", "go")
                await runner.started.wait()
                scope.cancel()
        _check_the_verdict(parent, runner)
        result = await parent.wait(unobserved_id(parent))
        assert isinstance(result, td.RunResult)
        assert result.final_result == "done anyway"  # a wait still reads it, and observes it
        assert parent.unobserved() == ()
        parent.check_resolved()


def unobserved_id(parent: td.Parent) -> str:
    [handle] = parent.unobserved()
    return handle.run_id


async def test_a_cancelled_mcp_foreground_call_gives_the_same_verdict() -> None:
    pytest.importorskip("mcp")
    from mcp import Client

    from trio_delegate.mcp import build_parent_server

    runner = Stubborn()
    with trio.fail_after(30):  # a hang guard only
        async with (
            td.open_runtime([td.Subagent("stubborn", runner)]) as runtime,
            runtime.open_parent("host") as parent,
        ):
            server = build_parent_server(parent)
            async with Client(server) as client:
                with trio.CancelScope() as scope:
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(
                            client.call_tool,
                            "delegate_task",
                            {"subagent": "stubborn", "task": "go"},
                        )
                        await runner.started.wait()
                        scope.cancel()
                while runtime.live_runs:
                    await trio.testing.wait_all_tasks_blocked()
                    await trio.lowlevel.checkpoint()
                _check_the_verdict(parent, runner)
            await parent.wait(unobserved_id(parent))
