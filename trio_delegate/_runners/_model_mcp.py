"""MCP servers' tools for a model subagent, through the ``mcp`` SDK's client.

Each run connects to every server its definition names (``mcp.Client``:
a ``StdioServerParameters`` starts the server's process, a URL speaks
Streamable HTTP, an ``MCPServer`` object is reached in-process), lists its
tools and offers them to the model beside the Python functions. The
connections live inside the run's scope and close when it ends, however it
ends. A tool's failure (``isError``, an error the client raises) reaches the
model as a tool error, as a Python tool's would.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any, Final, final

import attrs

from .._checks import describe, is_a
from .._errors import InvalidArgumentsError
from .._json import JsonProblem, encode, escape_text
from .._tools import ToolDefinition
from ._model_tools import ToolOutcome, tool_error

__all__ = ["McpTool", "check_mcp_servers", "open_mcp_tools"]

#: The most pages of a server's tool list read (a server that never ends its list).
_MAX_PAGES: Final = 32

#: The most MCP servers one model subagent may name.
MAX_MCP_SERVERS: Final = 16


def check_mcp_servers(servers: Any) -> tuple[Any, ...]:
    """*servers* as a tuple, each something ``mcp.Client`` connects to.

    Raises:
        InvalidArgumentsError: not a sequence, too many, an item of another kind,
            or the ``mcp`` SDK is not installed.
    """
    if not servers:
        return ()
    if is_a(servers, str) or not isinstance(servers, Sequence):
        raise InvalidArgumentsError(
            "model_runner(mcp_servers=...) must be a sequence of MCP servers "
            "(StdioServerParameters, Streamable HTTP URLs, MCPServer objects), got "
            f"{describe(servers)}"
        )
    if len(servers) > MAX_MCP_SERVERS:
        raise InvalidArgumentsError(
            f"model_runner(mcp_servers=...) names {len(servers)} servers; at most "
            f"{MAX_MCP_SERVERS} are allowed"
        )
    try:
        import mcp
        from mcp.server.lowlevel import Server
        from mcp.server.mcpserver import MCPServer
    except ImportError:
        raise InvalidArgumentsError(
            "model_runner(mcp_servers=...) needs the mcp SDK: install the [mcp] extra"
        ) from None
    kinds = (mcp.StdioServerParameters, str, MCPServer, Server)
    for index, server in enumerate(servers):
        if not isinstance(server, kinds):
            raise InvalidArgumentsError(
                f"model_runner(mcp_servers=...)[{index}] must be an mcp.StdioServerParameters, "
                f"a Streamable HTTP URL or an MCPServer, got {describe(server)}"
            )
        if is_a(server, str) and not server.startswith(("http://", "https://")):
            raise InvalidArgumentsError(
                f"model_runner(mcp_servers=...)[{index}] is the text {describe(server)}; a "
                "server given as text is a Streamable HTTP URL (http:// or https://)"
            )
    return tuple(servers)


@final
@attrs.frozen(eq=False)
class McpTool:
    """One tool of a connected MCP server, as the model is offered it."""

    name: str
    definition: ToolDefinition
    _client: Any = attrs.field(repr=False)

    async def call(self, arguments: dict[str, Any]) -> ToolOutcome:
        """Call the tool on its server; every failure is an error outcome."""
        try:
            result = await self._client.call_tool(self.name, arguments)
        except Exception as exc:
            return tool_error(
                "tool_error", f"tool {self.name!r} failed: {type(exc).__name__}: {exc}"
            )
        text = _result_text(result)
        if result.is_error:
            return tool_error("tool_error", f"tool {self.name!r} failed: {text}")
        return ToolOutcome(text)


def _result_text(result: Any) -> str:
    """A tool result as text: its text parts, else its structured content, else its parts."""
    texts = [
        escape_text(part.text) for part in result.content if getattr(part, "type", None) == "text"
    ]
    if texts:
        return "\n".join(texts)
    if result.structured_content is not None:
        with contextlib.suppress(TypeError, JsonProblem):
            return encode(result.structured_content, max_depth=64)[0]
    return "\n".join(part.model_dump_json(exclude_none=True) for part in result.content)


@contextlib.asynccontextmanager
async def open_mcp_tools(servers: Sequence[Any]) -> AsyncIterator[tuple[McpTool, ...]]:
    """Connect to *servers* and yield their tools; every connection closes on exit.

    Raises:
        Exception: what the ``mcp`` client raises when a server cannot be
            reached or answers its handshake or tool list with an error.
    """
    if not servers:
        yield ()
        return
    import mcp

    async with contextlib.AsyncExitStack() as stack:
        tools: list[McpTool] = []
        for server in servers:
            client = await stack.enter_async_context(mcp.Client(server))
            cursor = None
            for _ in range(_MAX_PAGES):
                listed = await client.list_tools(cursor=cursor)
                for tool in listed.tools:
                    schema = tool.input_schema or {"type": "object", "properties": {}}
                    definition = ToolDefinition(tool.name, tool.description or "", dict(schema))
                    tools.append(McpTool(tool.name, definition, client))
                cursor = listed.next_cursor
                if cursor is None:
                    break
        yield tuple(tools)
