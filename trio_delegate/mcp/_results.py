"""A tool's answer as an MCP ``CallToolResult``, as ``tools/call`` and ``tasks/get`` give it.

A success carries the payload as ``structuredContent`` and as JSON text; a
:class:`DelegationError` becomes an ``isError`` result carrying the error's
message and ``to_payload()``, never a success-shaped one.
"""

from __future__ import annotations

import json
from typing import Any

import mcp.types as mcp_types

from .. import DelegationError

__all__ = ["error_result", "success_result"]


def success_result(payload: dict[str, Any]) -> mcp_types.CallToolResult:
    """A tool's JSON-ready answer as an MCP result: structured, and as JSON text.

    Args:
        payload: the tool's answer (a result envelope, a handle, an ack).
    """
    return mcp_types.CallToolResult(
        content=[mcp_types.TextContent(text=_json(payload))],
        structured_content=payload,
    )


def error_result(exc: DelegationError) -> mcp_types.CallToolResult:
    """A tool's error as an MCP error result: its message, then its payload.

    Args:
        exc: the error the tool raised.
    """
    payload = exc.to_payload()
    return mcp_types.CallToolResult(
        content=[mcp_types.TextContent(text=f"{exc.message}\n\n{_json(payload)}")],
        structured_content=payload,
        is_error=True,
    )


def _json(payload: dict[str, Any]) -> str:
    return json.dumps(payload, ensure_ascii=False)
