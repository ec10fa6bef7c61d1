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

A line that is JSON but not a JSON-RPC 2.0 message (a batch array, a
``"jsonrpc"`` member that is missing or not ``"2.0"``, ``params`` that are
not an object, an id that is neither a string nor an integer) is answered
at once with an invalid-request error naming the problem: for its id when the
line holds one that can be written back, else for a null id, as JSON-RPC 2.0
asks. The SDK would pass it on as an exception the server ignores.

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

from .._checks import describe
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
                    outcome = reread(line) if line is not None else not_a_message(item)
                    if outcome is not None:
                        if isinstance(outcome, types.JSONRPCError):
                            logger.warning(
                                "answered a line it could not read: %s", outcome.error.message
                            )
                            await write_stream.send(SessionMessage(outcome))
                            continue
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
        return invalid_message(value, exc)
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


def not_a_message(exc: pydantic.ValidationError) -> types.JSONRPCError:
    """The answer to a line the SDK read as JSON but refused as a JSON-RPC message.

    The SDK hands on only the validation error, so the line's value is read
    back from the error's inputs.
    """
    for error in exc.errors(include_url=False):
        location = error["loc"]
        # The union's member names head every location: a field missing from
        # one member carries the whole message object as its input, and a
        # value that is no object at all fails each member at its top level.
        if error["type"] == "missing" and len(location) == 2:
            return invalid_message(error["input"], exc)
    for error in exc.errors(include_url=False):
        if len(error["loc"]) == 1:
            return invalid_message(error["input"], exc)
    return _error(None, types.INVALID_REQUEST, f"not a JSON-RPC 2.0 message: {_brief(exc)}")


def invalid_message(value: Any, exc: pydantic.ValidationError) -> types.JSONRPCError:
    """The invalid-request error answering *value*, JSON that is not a JSON-RPC message.

    It answers the id *value* holds when that is a string or an integer, else
    a null id (JSON-RPC 2.0: the id could not be read).
    """
    request_id: str | int | None = None
    if type(value) is dict:
        found = value.get("id")
        if type(found) is str or (type(found) is int and abs(found) < 2**63):
            request_id = found
    return _error(
        request_id,
        types.INVALID_REQUEST,
        f"not a JSON-RPC 2.0 message: {_problem(value, exc)}; send one JSON-RPC 2.0 "
        'request per line, as an object with "jsonrpc": "2.0", an id, a method and '
        "params as an object",
    )


def _problem(value: Any, exc: pydantic.ValidationError) -> str:
    """What makes *value* no JSON-RPC 2.0 message, in a few words."""
    if type(value) is list:
        return f"it is a batch (a JSON array of {len(value)} items), which MCP does not take"
    if type(value) is not dict:
        return f"it is {describe(value)}, not an object"
    if "jsonrpc" not in value:
        return 'it has no "jsonrpc" member'
    if value["jsonrpc"] != "2.0":
        return f'its "jsonrpc" member is {describe(value["jsonrpc"])}, not "2.0"'
    if "params" in value and type(value["params"]) is not dict:
        return f'its "params" are {describe(value["params"])}, not an object'
    if "method" in value and type(value["method"]) is not str:
        return f'its "method" is {describe(value["method"])}, not a string'
    if "id" in value and not (type(value["id"]) is str or type(value["id"]) is int):
        return f'its "id" is {describe(value["id"])}, neither a string nor an integer'
    return _brief(exc)


def _error(request_id: str | int | None, code: int, message: str) -> types.JSONRPCError:
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
