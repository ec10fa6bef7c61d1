"""Lines the MCP SDK's transport drops or misreads: screened, read again, or answered.

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

A line that is JSON but not a JSON-RPC 2.0 message (a ``"jsonrpc"`` member
that is missing or not ``"2.0"``, ``params`` that are not an object) is
answered at once with an invalid-request error naming the problem: for its id
when the line holds one that can be written back, else for a null id, as
JSON-RPC 2.0 asks. The SDK would pass it on as an exception the server
ignores. A response from the client (an object with ``result`` or ``error``
and no ``method``) is never answered, whatever is wrong with it.

Two kinds of line never reach the SDK's parser as they are, because it
misreads them: they are screened on the transport's reading thread
(:class:`Screened`), answered there, and the SDK gets a private notification
in their place, on which the answers are written:

* a request (an object with a ``method``) whose ``id`` member is neither a
  string nor an integer (``1.5``, ``1.0``, ``1e3``, ``true``, ``null``, an
  object, an array): the SDK drops the id and reads a notification, which
  gets no answer. MCP ids are strings or integers, so it is answered with an
  invalid-request error for a null id (JSON-RPC 2.0: the id could not be
  determined);
* a batch (a JSON array): MCP has had no batches since 2025-06-18, and the
  SDK spends seconds on a large one (pydantic's union errors over every
  element) before answering nothing. Each request element with an id that
  can be written back gets an invalid-request error for its id;
  notifications and responses in it get none; everything else (an empty
  array, elements that are not objects, ids that cannot be written back)
  gets one invalid-request error for a null id, for the whole line. Only the
  first :data:`MAX_BATCH_ELEMENTS` elements are read, one at a time, so the
  reading thread never holds the interpreter long; the null-id error then
  says that the rest was not read.

The server writes a request's id (and its progress token) back to the client,
and the SDK's writer cannot encode a lone surrogate: such a request is
answered at once with an error instead (for a null id, when the id itself is
not valid Unicode), or it would end the connection.
"""

from __future__ import annotations

import itertools
import json
import logging
import re
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import IO, Any, Final, TypeAlias

import anyio
import mcp_types as types
import pydantic
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from .._checks import describe
from .._json import text_problem

__all__ = ["MAX_BATCH_ELEMENTS", "Screened", "mended"]

logger = logging.getLogger("trio_delegate.mcp")

Incoming = SessionMessage | Exception

#: Errors written to the client at once, in place of passing a line on.
Answers: TypeAlias = list[types.JSONRPCError]

#: The most elements of one batch line read and answered. Each costs one
#: small decode on the transport's thread and at most one answer; past this
#: many, the rest of the line is not read (its null-id error says so).
MAX_BATCH_ELEMENTS: Final = 1000

#: A JSON-RPC id that stands at the top level of a line, before any nested
#: value (where a client's serializer puts it): a number, a short string, or
#: a literal.
_TOP_LEVEL_ID: Final = re.compile(
    r'\A\s*\{[^{}\[\]]*?"id"\s*:\s*'
    r'(-?\d{1,18}|"(?:[^"\\]|\\.){0,256}"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null)'
    r"\s*[,}]"
)

#: An ``"id"`` member (its name maybe written with escapes) whose value is
#: neither a string nor an integer, anywhere in a line: only a line holding
#: one is decoded on the transport's thread to be looked at.
_ODD_ID: Final = re.compile(r'"(?:i|\\u0069)(?:d|\\u0064)"\s*:\s*(?:[tfn\[{]|-?\d+[.eE])')

#: JSON whitespace, skipped between a batch's elements.
_SPACE: Final = re.compile(r"[ \t\n\r]*")

_AS_LINES: Final = (
    'send one JSON-RPC 2.0 request per line, as an object with "jsonrpc": "2.0", '
    "a string or integer id, a method and params as an object"
)


class Screened(anyio.AsyncFile[str]):
    """A client's lines, as the SDK's transport is to read them (``stdio_server(stdin=)``).

    Each line is screened on the transport's reading thread: a request whose
    id MCP does not take, and a batch, are answered here (see the module),
    and the transport reads a private notification in their place, which
    :func:`mended` recognizes and answers with the errors kept for it.
    """

    def __init__(self, lines: IO[str]) -> None:
        """Args:
        lines: the client's text stream (UTF-8, as the SDK's transport reads stdin).
        """
        super().__init__(lines)
        self._lines = lines
        self._method = f"trio-delegate/answered-{secrets.token_hex(8)}"
        self._numbers = itertools.count()
        self._kept: dict[int, Answers] = {}

    async def readline(self) -> str:
        """The next line, or the private notification standing for its answers.

        A read is abandoned when the reader is cancelled: a connection that
        ends first (the client closed its end of stdout) must not wait for
        the client to close stdin too. Nothing reads the lines after that.
        """
        return await anyio.to_thread.run_sync(
            self._next_line, abandon_on_cancel=True, limiter=self.limiter
        )

    def answers(self, message: types.JSONRPCMessage) -> Answers | None:
        """The answers *message* stands for, when it is this stream's notification."""
        if not (isinstance(message, types.JSONRPCNotification) and message.method == self._method):
            return None
        number = message.params.get("line") if message.params else None
        return self._kept.pop(number, []) if type(number) is int else []

    def _next_line(self) -> str:
        line = self._lines.readline()
        try:
            found = screen(line)
        except Exception:
            # Screening is a courtesy: the SDK still reads what it could not look at.
            logger.exception("a line could not be screened; it is passed on as it is")
            return line
        if found is None:
            return line
        number = next(self._numbers)
        self._kept[number] = found
        mark = {"jsonrpc": "2.0", "method": self._method, "params": {"line": number}}
        return json.dumps(mark) + "\n"


def screen(line: str) -> Answers | None:
    """The answers to *line* when the SDK's transport would misread it, else ``None``.

    Args:
        line: one line from the client, as the transport reads it.

    Returns:
        the errors answering a batch or a request with an id MCP does not
        take (see the module); ``None`` for any other line, which goes on
        to the SDK as it is.
    """
    start = _skip_space(line, 0)
    if line.startswith("[", start):
        return _batch_answers(*_elements(line, start + 1))
    if not (line.startswith("{", start) and _ODD_ID.search(line)):
        return None
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        # The SDK's parser refuses it too: :func:`reread` answers it.
        return None
    answer = _odd_id(value)
    return None if answer is None else [answer]


def _elements(line: str, index: int) -> tuple[list[Any], bool, str | None]:
    """A batch's first elements, read one at a time from *index* (past its ``[``).

    Returns:
        the elements read (at most :data:`MAX_BATCH_ELEMENTS`); whether more
        follow; and why the line could not be read further, if it could not.
    """
    decoder = json.JSONDecoder()
    elements: list[Any] = []
    index = _skip_space(line, index)
    if line.startswith("]", index):
        return elements, False, _trailing(line, index + 1)
    while len(elements) < MAX_BATCH_ELEMENTS:
        try:
            element, index = decoder.raw_decode(line, index)
        except RecursionError:
            return elements, False, f"element {len(elements) + 1} nests too deeply to read"
        except ValueError as exc:
            return elements, False, f"element {len(elements) + 1} is not JSON: {_brief(exc)}"
        elements.append(element)
        index = _skip_space(line, index)
        if line.startswith("]", index):
            return elements, False, _trailing(line, index + 1)
        if not line.startswith(",", index):
            return elements, False, f"a comma or the closing ] is missing at character {index}"
        index = _skip_space(line, index + 1)
    return elements, True, None


def _skip_space(line: str, index: int) -> int:
    """The index of the first character at or after *index* that is not JSON whitespace."""
    found = _SPACE.match(line, index)
    return index if found is None else found.end()


def _trailing(line: str, index: int) -> str | None:
    if _skip_space(line, index) == len(line):
        return None
    return f"text follows the closing ] at character {index}"


def _batch_answers(elements: list[Any], more: bool, broken: str | None) -> Answers:
    """The answers to a batch whose first *elements* were read (see the module)."""
    answers: Answers = []
    unanswerable = 0
    for element in elements:
        if type(element) is dict:
            if "method" in element and "id" not in element:
                continue  # a notification
            if "method" not in element and ("result" in element or "error" in element):
                continue  # a response
            request_id = element.get("id")
            if _writable(request_id):
                answers.append(
                    _error(
                        request_id,
                        types.INVALID_REQUEST,
                        "not a JSON-RPC 2.0 message: it came in a batch (a JSON array), "
                        f"which MCP does not take; {_AS_LINES}",
                    )
                )
                continue
        unanswerable += 1
    if not elements and not broken and not more:
        problems = ["it is an empty batch (a JSON array)"]
    else:
        problems = ["it is a batch (a JSON array), which MCP does not take"]
    if unanswerable:
        problems.append(
            f"{unanswerable} of its elements are no request with an id that can be answered"
        )
    if broken:
        problems.append(broken)
    if more:
        problems.append(
            f"only its first {MAX_BATCH_ELEMENTS:,} elements were read and answered; "
            "the rest were not"
        )
    if len(problems) > 1 or not elements:
        code = types.INVALID_REQUEST if broken is None else types.PARSE_ERROR
        message = f"not a JSON-RPC 2.0 message: {'; '.join(problems)}; {_AS_LINES}"
        answers.append(_error(None, code, message))
    elif not answers:
        # Only notifications and responses, none of which is ever answered.
        logger.warning("dropped a batch of %d notifications and responses", len(elements))
    return answers


def _writable(request_id: Any) -> bool:
    """Whether *request_id* is one MCP takes (a string or an integer) and can be echoed."""
    return type(request_id) is str or (type(request_id) is int and abs(request_id) < 2**63)


def _odd_id(value: Any) -> types.JSONRPCError | None:
    """The answer to a request whose id MCP does not take; ``None`` for any other *value*."""
    if not (type(value) is dict and "method" in value and "id" in value):
        return None
    request_id = value["id"]
    if type(request_id) is str or type(request_id) is int:
        return None
    return _error(
        None,
        types.INVALID_REQUEST,
        f'not a JSON-RPC 2.0 message: its "id" is {_id_text(request_id)}, neither a string '
        f"nor an integer, so it is answered for a null id; {_AS_LINES}",
    )


def _id_text(value: Any) -> str:
    """An id MCP does not take, named in the client's (JSON) terms, briefly."""
    if value is None or type(value) is bool:
        return json.dumps(value)
    if type(value) is float:
        return f"{value!r} (a number with a fraction or an exponent)"
    if type(value) is dict:
        return f"an object ({describe(value)})"
    if type(value) is list:
        return f"an array ({describe(value)})"
    return describe(value)


@asynccontextmanager
async def mended(
    read_stream: Any, write_stream: Any, screened: Screened | None = None
) -> AsyncIterator[MemoryObjectReceiveStream[Incoming]]:
    """What *read_stream* carries, with every line the SDK could not parse read again.

    Args:
        read_stream: the transport's stream of messages and parse failures.
        write_stream: the transport's stream to the client, where a line that
            cannot be read at all is answered.
        screened: the lines the transport reads, when they were screened:
            the answers kept for them are written here.

    Yields:
        the stream to serve (``Server.run``'s read stream); it ends when
        *read_stream* does.
    """
    send, receive = anyio.create_memory_object_stream[Incoming](0)
    with receive:
        async with anyio.create_task_group() as group:
            group.start_soon(_pump, read_stream, write_stream, send, screened)
            try:
                yield receive
            finally:
                group.cancel_scope.cancel()


async def _pump(
    read_stream: Any,
    write_stream: Any,
    send: MemoryObjectSendStream[Incoming],
    screened: Screened | None,
) -> None:
    async with send:
        try:
            async for item in read_stream:
                answers: Answers | None = None
                if isinstance(item, SessionMessage):
                    answers = screened.answers(item.message) if screened is not None else None
                elif isinstance(item, pydantic.ValidationError):
                    line = _rejected_line(item)
                    read = reread(line) if line is not None else not_a_message(item)
                    if isinstance(read, list):
                        answers = read
                    elif read is not None:
                        item = SessionMessage(read)
                if answers is None:
                    await send.send(item)
                    continue
                if answers:
                    logger.warning(
                        "answered a line it could not read%s: %s",
                        f" with {len(answers)} errors" if len(answers) > 1 else "",
                        answers[-1].error.message,
                    )
                for answer in answers:
                    await write_stream.send(SessionMessage(answer))
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


def reread(line: str) -> types.JSONRPCMessage | Answers | None:
    """Read *line* with Python's JSON parser.

    Returns:
        the message it holds; or the errors answering it, when it cannot be
        read but names its id, or is no message MCP takes; or ``None`` when
        it names none (a notification, a response, or nothing readable): the
        transport's own failure is passed on then.
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
    if type(value) is list:
        return _batch_answers(value[:MAX_BATCH_ELEMENTS], len(value) > MAX_BATCH_ELEMENTS, None)
    odd = _odd_id(value)
    if odd is not None:
        return [odd]
    try:
        message = types.jsonrpc_message_adapter.validate_python(value, by_name=False)
    except pydantic.ValidationError as exc:
        return invalid_message(value, exc)
    if isinstance(message, types.JSONRPCRequest):
        meta = message.params.get("_meta") if message.params else None
        token = meta.get("progressToken") if isinstance(meta, dict) else None
        for field, text in (("id", message.id), ("progress token", token)):
            if isinstance(text, str) and text_problem(text) is not None:
                return [
                    _error(
                        message.id,
                        types.INVALID_REQUEST,
                        f"the request's {field} is not valid Unicode text (a lone surrogate)",
                    )
                ]
    return message


def _answer(line: str, code: int, message: str) -> Answers | None:
    found = _TOP_LEVEL_ID.match(line[:1024])
    if found is None:
        return None
    request_id = json.loads(found.group(1))
    return [
        _error(
            request_id if _writable(request_id) else None,
            code,
            f"{message}; send the request again as plain JSON",
        )
    ]


def not_a_message(exc: pydantic.ValidationError) -> Answers | None:
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
            value = error["input"]
            if type(value) is list:
                return _batch_answers(
                    value[:MAX_BATCH_ELEMENTS], len(value) > MAX_BATCH_ELEMENTS, None
                )
            return invalid_message(value, exc)
    return [_error(None, types.INVALID_REQUEST, f"not a JSON-RPC 2.0 message: {_brief(exc)}")]


def invalid_message(value: Any, exc: pydantic.ValidationError) -> Answers | None:
    """The invalid-request error answering *value*, JSON that is not a JSON-RPC message.

    It answers the id *value* holds when that is a string or an integer, else
    a null id (JSON-RPC 2.0: the id could not be read). A response (an object
    with ``result`` or ``error`` and no ``method``) is not answered: ``None``.
    """
    if type(value) is dict and "method" not in value and ("result" in value or "error" in value):
        logger.warning("dropped a response it could not read: %s", _problem(value, exc))
        return None
    request_id = value.get("id") if type(value) is dict else None
    return [
        _error(
            request_id if _writable(request_id) else None,
            types.INVALID_REQUEST,
            f"not a JSON-RPC 2.0 message: {_problem(value, exc)}; {_AS_LINES}",
        )
    ]


def _problem(value: Any, exc: pydantic.ValidationError) -> str:
    """What makes *value* no JSON-RPC 2.0 message, in a few words."""
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
        return f'its "id" is {_id_text(value["id"])}, neither a string nor an integer'
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
