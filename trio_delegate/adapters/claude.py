"""The delegation tools for the Claude Agent SDK, as an in-process MCP server.

The SDK serves an ``mcp.server.Server`` instance to Claude Code over an
in-memory transport, and it is anyio-based, so it runs under Trio: a parent
opened by the host delegates for the agent, and the host's ``async with``
block stays where the fail-closed completion check happens::

    import trio_delegate as td
    from claude_agent_sdk import ClaudeAgentOptions, query
    from trio_delegate.adapters import claude

    async with td.open_runtime(subagents) as rt, rt.open_parent("agent") as parent:
        options = ClaudeAgentOptions(
            mcp_servers={"delegate": claude.mcp_server(parent)},
            allowed_tools=claude.allowed_tools(parent),
        )
        async for message in query(prompt="...", options=options):
            ...

Claude Code names the tools ``mcp__<server>__<tool>``; the server's key in
``mcp_servers`` must be the *name* given here.

Needs the ``claude`` extra (``pip install 'trio-delegate[claude]'``).
"""

from __future__ import annotations

from typing import Final

try:
    from claude_agent_sdk import McpSdkServerConfig
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "trio_delegate.adapters.claude needs the Claude Agent SDK: "
        "pip install 'trio-delegate[claude]'"
    ) from exc

from .. import Parent
from ..mcp import DEFAULT_INSTRUCTIONS, build_parent_server

__all__ = ["DEFAULT_SERVER_NAME", "allowed_tools", "mcp_server"]

#: The server name (and ``mcp_servers`` key) used when none is given.
DEFAULT_SERVER_NAME: Final = "delegate"


def mcp_server(
    parent: Parent,
    *,
    name: str = DEFAULT_SERVER_NAME,
    instructions: str | None = DEFAULT_INSTRUCTIONS,
) -> McpSdkServerConfig:
    """An in-process MCP server config for ``ClaudeAgentOptions(mcp_servers=...)``.

    Every tool call goes to *parent*'s delegation tools (see
    :func:`trio_delegate.mcp.build_parent_server`); errors come back as
    ``is_error`` results the model can act on.

    Args:
        parent: an open parent; the host owns it and its runs.
        name: the server's name; use it as its key in ``mcp_servers``.
        instructions: what the server tells the model; ``None`` for nothing.

    Raises:
        RuntimeClosedError: *parent* is closed.
    """
    server = build_parent_server(parent, name=name, instructions=instructions)
    return McpSdkServerConfig(type="sdk", name=name, instance=server)


def allowed_tools(parent: Parent, *, name: str = DEFAULT_SERVER_NAME) -> list[str]:
    """The tools' names as Claude Code sees them, for ``allowed_tools=``.

    Args:
        parent: the parent given to :func:`mcp_server`.
        name: the server's name given to :func:`mcp_server`.

    Raises:
        RuntimeClosedError: *parent* is closed.
    """
    return [f"mcp__{name}__{tool}" for tool in parent.tools().names]
