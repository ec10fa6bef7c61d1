"""Lines the MCP SDK's strict JSON parser drops: read again leniently, or answered.

The SDK's stdio transport parses each line with pydantic's JSON parser, which
rejects what a model's text really holds once a client has encoded it: a
lone surrogate escape (``"\\ud800"``, valid JSON that JavaScript clients
write for any unpaired surrogate), and, like every parser, nesting or numbers
beyond its limits. It then hands the server an exception instead of the
request, and the client waits for an answer that never comes, until its own
timeout (contract §15: every entry point answers in bounded time).

So between the transport and the server, a rejected line is read again with
Python's JSON parser (which keeps lone surrogates as they are). A request it
can read goes on to the server, whose tools then refuse the bad text with an
error result naming the field; one it cannot read (nested too deeply, a
number of thousands of digits, not JSON at all) is answered at once with a
JSON-RPC error for its id, when the line shows one before anything nested.

The server writes a request's id (and its progress token) back to the client,
and the SDK's writer cannot encode a lone surrogate: such a request is
answered at once with an error instead (for a null id, when the id itself is
not valid Unicode), or it would end the connection.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final

import anyio
import mcp_types as types
import pydantic
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from .._json import text_problem

__all__ = ["mended"]

logger = logging.getLogger("trio_delegate.mcp")

Incoming = SessionMessage | Exception

#: A JSON-RPC id that stands at the top level of a line, before any nested
#: value (where a client's serializer puts it): a number or a short string.
_TOP_LEVEL_ID: Final = re.compile(
    r'\A\s*\{[^{}\[\]]*?"id"\s*:\s*(-?\d{1,18}|"(?:[^"\\]|\\.){0,256}")\s*[,}]'
)


@asynccontextmanager
async def mended(
    read_stream: Any, write_stream: Any
) -> AsyncIterator[MemoryObjectReceiveStream[Incoming]]:
    """What *read_stream* carries, with every line the SDK could not parse read again.

    Args:
        read_stream: the transport's stream of messages and parse failures.
        write_stream: the transport's stream to the client, where a line that
            cannot be read at all is answered.

    Yields:
        the stream to serve (``Server.run``'s read stream); it ends when
        *read_stream* does.
    """
    send, receive = anyio.create_memory_object_stream[Incoming](0)
    with receive:
        async with anyio.create_task_group() as group:
            group.start_soon(_pump, read_stream, write_stream, send)
            try:
                yield receive
            finally:
                group.cancel_scope.cancel()


async def _pump(
    read_stream: Any, write_stream: Any, send: MemoryObjectSendStream[Incoming]
) -> None:
    async with send:
        try:
            async for item in read_stream:
                if isinstance(item, pydantic.ValidationError):
                    line = _rejected_line(item)
                    if line is not None:
                        outcome = reread(line)
                        if isinstance(outcome, types.JSONRPCError):
                            logger.warning(
                                "answered a line it could not read: %s", outcome.error.message
                            )
                            await write_stream.send(SessionMessage(outcome))
                            continue
                        if outcome is not None:
                            await send.send(SessionMessage(outcome))
                            continue
                await send.send(item)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            # The connection is ending (the server stopped reading, or the
            # way to the client closed): nothing is left to answer.
            logger.debug("the connection ended while a line was passed on")


def _rejected_line(exc: pydantic.ValidationError) -> str | None:
    """The whole line, when the SDK's parser rejected it as JSON (not as a message)."""
    for error in exc.errors(include_url=False):
        if error["type"] == "json_invalid" and isinstance(error.get("input"), str):
            return str(error["input"])
    return None


def reread(line: str) -> types.JSONRPCMessage | types.JSONRPCError | None:
    """Read *line* with Python's JSON parser.

    Returns:
        the message it holds; or the error answering it, when it cannot be
        read but names its id; or ``None`` when it names none (a notification,
        or nothing readable): the transport's own failure is passed on then.
    """
    try:
        value = json.loads(line)
    except RecursionError:
        return _answer(line, types.PARSE_ERROR, "the message nests too deeply to read")
    except ValueError as exc:
        if "integer string conversion" in str(exc):
            # An integer of more digits than Python converts (4,300 by default).
            problem = "it holds a number of thousands of digits"
        else:
            problem = _brief(exc)
        return _answer(
            line, types.PARSE_ERROR, f"the message is not JSON this server reads: {problem}"
        )
    try:
        message = types.jsonrpc_message_adapter.validate_python(value, by_name=False)
    except pydantic.ValidationError as exc:
        return _answer(line, types.INVALID_REQUEST, f"not a JSON-RPC message: {_brief(exc)}")
    if isinstance(message, types.JSONRPCRequest):
        meta = message.params.get("_meta") if message.params else None
        token = meta.get("progressToken") if isinstance(meta, dict) else None
        for field, text in (("id", message.id), ("progress token", token)):
            if isinstance(text, str) and text_problem(text) is not None:
                return _error(
                    message.id,
                    types.INVALID_REQUEST,
                    f"the request's {field} is not valid Unicode text (a lone surrogate)",
                )
    return message


def _answer(line: str, code: int, message: str) -> types.JSONRPCError | None:
    found = _TOP_LEVEL_ID.match(line[:1024])
    if found is None:
        return None
    request_id: str | int = json.loads(found.group(1))
    return _error(request_id, code, f"{message}; send the request again as plain JSON")


def _error(request_id: str | int, code: int, message: str) -> types.JSONRPCError:
    """An error answering *request_id*; a null id when that id cannot be written back."""
    if isinstance(request_id, str) and text_problem(request_id) is not None:
        return types.JSONRPCError(
            jsonrpc="2.0", id=None, error=types.ErrorData(code=code, message=message)
        )
    return types.JSONRPCError(
        jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=message)
    )


def _brief(exc: BaseException, limit: int = 200) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"
