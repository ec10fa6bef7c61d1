"""The Claude Agent SDK adapter: an in-process MCP server bound to a parent.

The SDK would serve the config's ``instance`` to Claude Code over an
in-memory transport; here the ``mcp`` SDK's in-memory client drives the
same instance offline, under Trio.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

import trio_delegate as td

claude_agent_sdk = pytest.importorskip("claude_agent_sdk")

from mcp import Client  # noqa: E402
from mcp.server import Server  # noqa: E402

from trio_delegate.adapters import claude  # noqa: E402


async def answer(ctx: td.ChildContext) -> dict[str, Any]:
    await trio.sleep(0.01)
    return {"answer": len(ctx.task)}


async def test_config_for_claude_agent_options_drives_the_hosts_parent() -> None:
    sub = td.Subagent(
        "counter",
        answer,
        description="Counts characters.",
        final_schema={"type": "object", "required": ["answer"]},
    )
    async with td.open_runtime([sub]) as rt, rt.open_parent("claude-agent") as parent:
        config = claude.mcp_server(parent)
        assert config["type"] == "sdk"
        assert config["name"] == "delegate"
        server = config["instance"]
        assert isinstance(server, Server)
        names = claude.allowed_tools(parent)
        assert names == [
            "mcp__delegate__delegate_task",
            "mcp__delegate__subagent_status",
            "mcp__delegate__wait_subagent",
            "mcp__delegate__cancel_subagent",
            "mcp__delegate__continue_subagent",
            "mcp__delegate__list_subagent_runs",
        ]
        # the options object accepts it as it is
        options = claude_agent_sdk.ClaudeAgentOptions(
            mcp_servers={"delegate": config}, allowed_tools=names
        )
        assert options.mcp_servers == {"delegate": config}

        with trio.fail_after(10):
            async with Client(server, mode="legacy") as client:
                tools = [tool.name for tool in (await client.list_tools()).tools]
                assert [f"mcp__delegate__{name}" for name in tools] == names
                foreground = await client.call_tool(
                    "delegate_task", {"subagent": "counter", "task": "four"}
                )
                assert foreground.structured_content is not None
                assert foreground.structured_content["final_result"] == {"answer": 4}
                background = await client.call_tool(
                    "delegate_task", {"subagent": "counter", "task": "xx", "background": True}
                )
                assert background.structured_content is not None
                run_id = background.structured_content["run_id"]
                waited = await client.call_tool("wait_subagent", {"run_id": run_id})
                assert waited.structured_content is not None
                assert waited.structured_content["final_result"] == {"answer": 2}
                bad = await client.call_tool("wait_subagent", {"run_id": "nope"})
                assert bad.is_error
                assert bad.structured_content is not None
                assert bad.structured_content["error"]["type"] == "unknown_run"
        # Both runs were started and observed through the host's parent, so
        # leaving its block (the fail-closed check) passes.


async def test_a_custom_server_name_names_the_tools() -> None:
    async with td.open_runtime([td.Subagent("counter", answer)]) as rt, rt.open_parent() as parent:
        config = claude.mcp_server(parent, name="team")
        assert config["name"] == "team"
        assert claude.allowed_tools(parent, name="team")[0] == "mcp__team__delegate_task"
