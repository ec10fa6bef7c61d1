"""Background, wait and cancel over MCP, with the `mcp` SDK's stdio client.

    python examples/mcp_client.py            # from the repository root

One client connection is one `trio-delegate serve` process, and a run
belongs to the connection that started it: a background run started by one
connection is unknown to the next. So the whole sequence (start in the
background, a timed wait, the status, a cancel, a run to the end) happens
over one connection, as an MCP client does during a conversation. (The MCP
Inspector's command-line mode starts a new server for every call; its
interactive mode keeps one.)

The server is started on `examples/subagents.toml`, whose `slow` subagent
takes a number of seconds as its task, as text ("3").
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import trio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

CONFIG = Path(__file__).resolve().parent / "subagents.toml"


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """One tool call; its structured answer (an error's payload when it failed)."""
    result = await client.call_tool(tool, arguments)
    answer = result.structured_content
    assert isinstance(answer, dict), result.content
    print(f"{tool}({json.dumps(arguments)})\n  -> {json.dumps(answer)}")
    return answer


async def main(seconds: str = "3") -> None:
    """Start runs in the background, wait on one, cancel another."""
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "trio_delegate", "serve", "--config", str(CONFIG)]
    )
    async with Client(stdio_client(server), mode="legacy") as client:
        # Two background runs: an admission ack each, with the run id.
        first = await call(client, "delegate_task", subagent="slow", task=seconds, background=True)
        second = await call(client, "delegate_task", subagent="slow", task="60", background=True)
        # A timed wait that ends first returns the running handle: the run goes on.
        await call(client, "wait_subagent", run_id=second["run_id"], timeout=0.1)
        await call(client, "subagent_status", run_id=second["run_id"])
        # A cancel is a request; the wait that follows reports the run cancelled.
        await call(client, "cancel_subagent", run_id=second["run_id"])
        await call(client, "wait_subagent", run_id=second["run_id"])
        # A wait with no timeout returns the result.
        await call(client, "wait_subagent", run_id=first["run_id"])


if __name__ == "__main__":
    trio.run(main, sys.argv[1] if len(sys.argv) > 1 else "3")
