"""An MCP server (low-level ``mcp.server`` API) exposing the delegation tools.

The tools are a parent's :class:`DelegationTools` (contract §10), listed as
they are defined and called through :meth:`DelegationTools.call`, so an MCP
client sees exactly what the other provider formats see. A successful call
returns the payload as ``structured_content`` and as JSON text; a
:class:`DelegationError` returns an ``is_error`` result carrying the error's
message and ``to_payload()``, never a success-shaped one.

The server's lifespan is entered once per connection (``Server.run``), so a
connection is the unit of ownership: :func:`build_server` opens one parent per
connection and closes it, cancelling and joining its live runs, when the
connection ends; :func:`build_parent_server` serves one parent the host owns.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Final

import mcp.types as mcp_types
from mcp.server import Server, ServerRequestContext

from .. import (
    DelegationError,
    DelegationTools,
    Parent,
    Runtime,
    UnresolvedDelegationError,
    __version__,
)

__all__ = [
    "DEFAULT_INSTRUCTIONS",
    "DEFAULT_NAME",
    "build_parent_server",
    "build_server",
    "error_result",
    "success_result",
]

logger = logging.getLogger("trio_delegate.mcp")

#: The server's name in the MCP handshake.
DEFAULT_NAME: Final = "trio-delegate"

#: What the server tells a client's model about itself (clients show it ahead
#: of the tool list).
DEFAULT_INSTRUCTIONS: Final = (
    "Delegate self-contained tasks to subagents with delegate_task. A foreground call "
    "waits for the result. With background=true you get a run_id at once: keep it, do "
    "other work, and call wait_subagent on every background run before you finish (a "
    "timed wait that answers with a status means the run is still going: wait again "
    "later). Failed, cancelled and timed-out runs are errors, never results; recover "
    "with delegate_task(replaces=<run_id>). Runs belong to this connection and are "
    "cancelled when it ends."
)

#: Hints for clients' approval policies. Delegating runs whatever the
#: subagent does, so it claims nothing; status and waits change nothing
#: outside the server; a cancel only stops a run of this connection.
_ANNOTATIONS: Final = {
    "delegate_task": mcp_types.ToolAnnotations(title="Delegate a task to a subagent"),
    "subagent_status": mcp_types.ToolAnnotations(
        title="Status of a subagent run", read_only_hint=True, open_world_hint=False
    ),
    "wait_subagent": mcp_types.ToolAnnotations(
        title="Wait for a subagent run", read_only_hint=True, open_world_hint=False
    ),
    "cancel_subagent": mcp_types.ToolAnnotations(
        title="Cancel a subagent run",
        read_only_hint=False,
        destructive_hint=False,
        idempotent_hint=True,
        open_world_hint=False,
    ),
    "continue_subagent": mcp_types.ToolAnnotations(title="Continue a subagent's conversation"),
}

#: Opens what one connection works with: its tools, bound to a parent.
_Session = Callable[[], AbstractAsyncContextManager[DelegationTools]]


def build_server(
    runtime: Runtime,
    *,
    name: str = DEFAULT_NAME,
    instructions: str | None = DEFAULT_INSTRUCTIONS,
) -> Server[DelegationTools]:
    """An MCP server giving each connection a parent of its own on *runtime*.

    Each connection (one ``Server.run``: a stdio process, an in-memory
    client, a Claude Agent SDK query) opens a parent with a fresh owner id
    (``mcp-<random>``) over every registered subagent. When the connection
    ends, the parent closes: its live runs are cancelled and joined (a
    command subagent's processes are killed), and unresolved work is logged
    as a warning on the ``trio_delegate.mcp`` logger rather than raised, since
    nobody is left to hear it.

    Transports that enter a server's lifespan once for many sessions (the
    streamable HTTP session manager) would share one parent between them: use
    this server with connection-per-run transports (stdio, in-memory).

    Args:
        runtime: the open runtime the runs live in; it must outlive the server.
        name: the server's name in the MCP handshake.
        instructions: what the server tells the client's model; ``None`` for nothing.
    """

    @asynccontextmanager
    async def session() -> AsyncIterator[DelegationTools]:
        owner = f"mcp-{secrets.token_hex(8)}"
        try:
            async with runtime.open_parent(owner) as parent:
                logger.info("connection %s opened", owner)
                yield parent.tools()
        except UnresolvedDelegationError as exc:
            logger.warning("connection %s ended; its live runs were cancelled. %s", owner, exc)
        else:
            logger.info("connection %s ended", owner)

    return _make_server(name, instructions, session)


def build_parent_server(
    parent: Parent,
    *,
    name: str = DEFAULT_NAME,
    instructions: str | None = DEFAULT_INSTRUCTIONS,
) -> Server[DelegationTools]:
    """An MCP server whose every connection works with *parent*'s tools.

    The host owns *parent*: its runs outlive any one connection, and leaving
    its ``async with`` block is where fail-closed completion is checked.

    Args:
        parent: an open parent.
        name: the server's name in the MCP handshake.
        instructions: what the server tells the client's model; ``None`` for nothing.

    Raises:
        RuntimeClosedError: *parent* is closed.
    """
    tools = parent.tools()

    @asynccontextmanager
    async def session() -> AsyncIterator[DelegationTools]:
        yield tools

    return _make_server(name, instructions, session)


def _make_server(name: str, instructions: str | None, session: _Session) -> Server[DelegationTools]:
    @asynccontextmanager
    async def lifespan(server: Server[DelegationTools]) -> AsyncIterator[DelegationTools]:
        async with session() as tools:
            yield tools

    async def list_tools(
        ctx: ServerRequestContext[DelegationTools],
        params: mcp_types.PaginatedRequestParams | None,
    ) -> mcp_types.ListToolsResult:
        return mcp_types.ListToolsResult(tools=_tool_list(ctx.lifespan_context))

    async def call_tool(
        ctx: ServerRequestContext[DelegationTools],
        params: mcp_types.CallToolRequestParams,
    ) -> mcp_types.CallToolResult:
        try:
            payload = await ctx.lifespan_context.call(params.name, params.arguments)
        except DelegationError as exc:
            return error_result(exc)
        return success_result(payload)

    return Server(
        name,
        version=__version__,
        instructions=instructions,
        lifespan=lifespan,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def _tool_list(tools: DelegationTools) -> list[mcp_types.Tool]:
    return [
        mcp_types.Tool(
            name=definition.name,
            description=definition.description,
            input_schema=definition.parameters,
            annotations=_ANNOTATIONS.get(definition.name),
        )
        for definition in tools.definitions()
    ]


def success_result(payload: dict[str, Any]) -> mcp_types.CallToolResult:
    """A tool's JSON-ready answer as an MCP result: structured, and as JSON text."""
    return mcp_types.CallToolResult(
        content=[mcp_types.TextContent(text=_json(payload))],
        structured_content=payload,
    )


def error_result(exc: DelegationError) -> mcp_types.CallToolResult:
    """A tool's error as an MCP error result: its message, then its payload."""
    payload = exc.to_payload()
    return mcp_types.CallToolResult(
        content=[mcp_types.TextContent(text=f"{exc.message}\n\n{_json(payload)}")],
        structured_content=payload,
        is_error=True,
    )


def _json(payload: dict[str, Any]) -> str:
    return json.dumps(payload, ensure_ascii=False)
