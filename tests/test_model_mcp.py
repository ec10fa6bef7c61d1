"""A model subagent's MCP servers: their tools are offered and called, errors reach the model."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from mcp import StdioServerParameters
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

import trio_delegate as td

from .fakes import Reply, Step, Turn, call, text
from .helpers import open_parent
from .model_support import ANTHROPIC, RESPONSES


def notes_server() -> MCPServer:
    server = MCPServer("notes")

    @server.tool()
    def lookup(word: str) -> str:
        """Look a word up in the notes."""
        return f"{word}: a word"

    @server.tool()
    def broken() -> str:
        """Always fails."""
        raise ToolError("the notes are on fire")

    return server


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def test_a_model_calls_the_tools_of_its_mcp_servers(
    mock_clock: trio.testing.MockClock,
) -> None:
    seen: list[Any] = []

    def then(reply: Reply) -> Step:
        def step(turn: Turn) -> Reply:
            seen.append(turn.last)
            return reply

        return step

    script: list[Step] = [
        call("lookup", word="trio"),
        then(call("broken")),
        then(call("add", a=1, b=2)),
        then(text("done")),
    ]
    with ANTHROPIC.fake(script) as fake:
        runner = ANTHROPIC.runner(fake, tools=[add], mcp_servers=[notes_server()])
        async with open_parent(td.Subagent("n", runner)) as parent:
            result = await parent.delegate("n", "look it up")
    assert result.final_result == "done"
    offered = [tool["name"] for tool in fake.turns[0].request.body["tools"]]
    assert offered == ["add", "lookup", "broken"]
    lookup, broken, added = seen
    assert "trio: a word" in lookup.text
    assert not lookup.is_error
    assert broken.is_error
    assert "the notes are on fire" in broken.json()["error"]["message"]
    assert added.text == "3"


async def test_an_mcp_tool_named_like_a_function_tool_fails_the_run_naming_it(
    mock_clock: trio.testing.MockClock,
) -> None:
    def lookup(word: str) -> str:
        """Clash with the server's tool."""
        return word

    with RESPONSES.fake([]) as fake:
        runner = RESPONSES.runner(fake, tools=[lookup], mcp_servers=[notes_server()])
        async with (
            td.open_runtime([td.Subagent("n", runner)], config=td.Config(fail_closed=False)) as rt,
            rt.open_parent() as parent,
        ):
            with pytest.raises(td.RunFailedError) as raised:
                await parent.delegate("n", "go")
    assert "two tools of this subagent are named 'lookup'" in str(raised.value)
    assert fake.turns == []


SERVER_SCRIPT = """
import os, sys
from pathlib import Path
from mcp.server.mcpserver import MCPServer

server = MCPServer("pid")

@server.tool()
def whoami() -> str:
    '''The server's process id.'''
    return str(os.getpid())

Path(sys.argv[1]).write_text(str(os.getpid()))
server.run()
"""


async def test_a_stdio_mcp_server_runs_for_the_run_and_ends_with_it(tmp_path: Path) -> None:
    script_path = tmp_path / "pid_server.py"
    script_path.write_text(textwrap.dedent(SERVER_SCRIPT))
    pid_file = tmp_path / "pid"
    server = StdioServerParameters(command=sys.executable, args=[str(script_path), str(pid_file)])
    model_script: list[Step] = [call("whoami"), lambda turn: text(turn.last.text)]
    with ANTHROPIC.fake(model_script) as fake:
        runner = ANTHROPIC.runner(fake, mcp_servers=[server])
        async with open_parent(td.Subagent("p", runner)) as parent:
            result = await parent.delegate("p", "who?")
    pid = int(pid_file.read_text())
    assert result.final_result == str(pid)
    # The run's end closed the connection, and the server's process was reaped.
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


@pytest.mark.parametrize(
    ("servers", "fragment"),
    [
        ("http://x", "must be a sequence of MCP servers"),
        ([42], "[0] must be an mcp.StdioServerParameters"),
        (["stdio:python"], "Streamable HTTP URL (http:// or https://)"),
        ([notes_server()] * 17, "at most 16"),
    ],
)
def test_malformed_mcp_servers_are_named(servers: Any, fragment: str) -> None:
    with pytest.raises(td.InvalidArgumentsError) as raised:
        td.model_runner("openai:gpt-test", mcp_servers=servers)
    assert fragment in str(raised.value)
