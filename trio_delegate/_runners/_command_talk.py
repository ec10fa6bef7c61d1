"""The line protocol a command subagent talks to its parent with, while it runs.

A command's stdout is its result, so progress, usage and questions go on a
channel of their own: a Unix stream socket (one end of a socket pair) that
the process inherits as the file descriptor named by ``TRIO_DELEGATE_FD``.
Sockets work the same on Linux and macOS, carry both directions on one
descriptor, and shell scripts can use them (``>&"$TRIO_DELEGATE_FD"``,
``read -r line <&"$TRIO_DELEGATE_FD"``).

The process writes one JSON object per line (UTF-8, ``\\n``-terminated, at
most :data:`MAX_LINE_BYTES`), each with exactly one of these keys:

* ``{"progress": {"message": ..., "progress": ..., "total": ...}}``:
  ``ctx.progress`` (every field optional); no reply.
* ``{"usage": {"input_tokens": ..., ...}}``: ``ctx.add_usage`` with the
  fields of :class:`~trio_delegate.Usage`; no reply.
* ``{"ask": {"question": ..., "schema": ..., "timeout": ...}, "id": ...}``:
  ``ctx.ask`` (``schema`` a JSON Schema or null, ``timeout`` seconds or
  null); one reply line comes back on the same descriptor, carrying the
  ask's ``id`` (a string or integer, optional):
  ``{"id": ..., "answer": <value>}``, or ``{"id": ..., "error": {"type":
  "QuestionDeclinedError" | "AskTimeoutError" | "InputUnavailableError",
  "message": ..., "reason": ...}}``. Several questions may be open at once
  (at most :data:`MAX_OPEN_ASKS`); replies come as answers are applied, so
  an ``id`` tells them apart. A question counts as open until its reply
  has gone out: a process that does not read its replies is refused at the
  bound as one that asks too much.

A line that breaks the protocol fails the run at once with
:class:`CommandFailedError` naming the problem, and the process group is
stopped: a line that is not UTF-8, not JSON, nests too deeply, is longer
than :data:`MAX_LINE_BYTES`, is not an object with one of the keys above,
or whose fields ``ctx.progress``, ``td.Usage`` or ``ctx.ask`` refuse (a
progress that goes down, a question from a subagent without ``asks=True``).
Lines are read in small chunks, every chunk a checkpoint, and a long line is
parsed on a worker thread, so a flood of lines never holds the event loop;
only the latest progress is kept, so a million of them take no memory.
"""

from __future__ import annotations

import json
import socket
from typing import Any, Final, final

import trio

from .._checks import describe
from .._core import ChildContext
from .._errors import (
    AskTimeoutError,
    DelegationError,
    InputUnavailableError,
    QuestionDeclinedError,
)
from .._json import parse
from .._threads import run_sync
from .._usage import COUNTS, Usage

__all__ = ["FD_VARIABLE", "MAX_LINE_BYTES", "MAX_OPEN_ASKS", "Talk"]

#: The environment variable that names the descriptor.
FD_VARIABLE: Final = "TRIO_DELEGATE_FD"
#: The longest line accepted, newline excluded: a question with its schema fits.
MAX_LINE_BYTES: Final = 1024 * 1024
#: Questions one process may have open at once: each holds a task.
MAX_OPEN_ASKS: Final = 16
#: How much is read at a time: small, so one chunk's lines are quick to handle.
_CHUNK_BYTES: Final = 16 * 1024
#: Lines up to which parsing happens on the event loop (well under a millisecond).
_INLINE_LINE_BYTES: Final = 64 * 1024
#: The fields a usage line may give.
_USAGE_FIELDS: Final = (*COUNTS, "cost_usd")
#: What an ask's id may be when it is a string.
_MAX_ID_CHARS: Final = 200
#: The errors of an ask that are replies, not failures: the process decides.
_REPLIED: Final = (QuestionDeclinedError, AskTimeoutError, InputUnavailableError)


class _Broken(Exception):
    """A line broke the protocol; the message says how."""


@final
class Talk:
    """The parent's end of one process's channel: reads its lines, answers its asks.

    Made before the process starts (:attr:`child_fd` goes to it with
    ``pass_fds``); :meth:`started` closes the child's end here once the
    process has it.

    Attributes:
        child_fd: the descriptor the process inherits.
        failure: why the process broke the protocol, or ``None``.
        done: set once the channel has ended (every holder closed it).
    """

    def __init__(self, ctx: ChildContext) -> None:
        self.ctx = ctx
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        theirs.set_inheritable(True)
        self._theirs: socket.socket | None = theirs
        self.child_fd = theirs.fileno()
        self._stream = trio.SocketStream(trio.socket.from_stdlib_socket(ours))
        self._send_lock = trio.Lock()
        self._open_asks = 0
        self.failure: str | None = None
        self.done = trio.Event()
        self._scope = trio.CancelScope()

    def started(self) -> None:
        """Close the child's end here: the process holds its own copy now."""
        if self._theirs is not None:
            self._theirs.close()
            self._theirs = None

    async def aclose(self) -> None:
        """Close both ends that this process holds."""
        self.started()
        await self._stream.aclose()

    async def run(self, scope: trio.CancelScope) -> None:
        """Read and act on lines until the channel ends; a broken one cancels *scope*."""
        self._scope = scope
        try:
            async with trio.open_nursery() as asks:
                try:
                    await self._read(asks)
                except _Broken as exc:
                    self._fail(str(exc))
                # The process closed its end: nobody reads an answer any more,
                # so its open questions are withdrawn.
                asks.cancel_scope.cancel()
        finally:
            self.done.set()

    def _fail(self, why: str) -> None:
        if self.failure is None:
            self.failure = why
        self._scope.cancel()

    async def _read(self, asks: trio.Nursery) -> None:
        buffer = bytearray()
        while True:
            try:
                chunk = await self._stream.receive_some(_CHUNK_BYTES)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                chunk = b""
            if not chunk:
                if buffer:  # a last line without its newline still counts
                    await self._line(bytes(buffer), asks)
                return
            searched = len(buffer)
            buffer += chunk
            start = 0
            while (end := buffer.find(b"\n", searched)) >= 0:
                await self._line(bytes(buffer[start:end]), asks)
                start = searched = end + 1
            # Taken off once per chunk, not once per line: a chunk of many
            # short lines costs no more than one long one.
            del buffer[:start]
            if len(buffer) > MAX_LINE_BYTES:
                raise _Broken(
                    f"wrote a line longer than {MAX_LINE_BYTES} bytes to {FD_VARIABLE}; "
                    "write one JSON object per line, each shorter"
                )

    async def _line(self, raw: bytes, asks: trio.Nursery) -> None:
        if len(raw) > MAX_LINE_BYTES:
            raise _Broken(
                f"wrote a line longer than {MAX_LINE_BYTES} bytes to {FD_VARIABLE}; "
                "write one JSON object per line, each shorter"
            )
        if not raw.strip():
            return
        if len(raw) <= _INLINE_LINE_BYTES:
            message = _decode(raw)
        else:
            # A long line is parsed on a worker thread: the event loop, which
            # every other run shares, is never held by it.
            message = await run_sync(_decode, raw)
        keys = sorted(set(message) - {"id"})
        if len(keys) != 1 or keys[0] not in ("progress", "usage", "ask"):
            raise _Broken(
                f"wrote a line with the keys {_cut(', '.join(map(repr, message)))} to "
                f"{FD_VARIABLE}; each line must be an object with exactly one of the keys "
                '"progress", "usage" or "ask" (and an "id" for an ask)'
            )
        kind = keys[0]
        if "id" in message and kind != "ask":
            raise _Broken(
                f'wrote a "{kind}" line with an "id" to {FD_VARIABLE}; only an "ask" has one'
            )
        body = message[kind]
        if not isinstance(body, dict):
            raise _Broken(
                f'wrote a "{kind}" line whose value is {describe(body)} to {FD_VARIABLE}; '
                "it must be an object of fields"
            )
        if kind == "progress":
            self._progress(body)
        elif kind == "usage":
            self._usage(body)
        else:
            self._ask(message.get("id"), body, asks)

    def _progress(self, body: dict[str, Any]) -> None:
        _only(body, "progress", ("message", "progress", "total"))
        try:
            self.ctx.progress(
                body.get("message"), progress=body.get("progress"), total=body.get("total")
            )
        except DelegationError as exc:
            raise _Broken(f'wrote a "progress" line that was refused: {exc}') from None

    def _usage(self, body: dict[str, Any]) -> None:
        _only(body, "usage", _USAGE_FIELDS)
        try:
            usage = Usage(**body)
        except DelegationError as exc:
            raise _Broken(f'wrote a "usage" line that was refused: {exc}') from None
        self.ctx.add_usage(usage)

    def _ask(self, ask_id: Any, body: dict[str, Any], asks: trio.Nursery) -> None:
        _only(body, "ask", ("question", "schema", "timeout"))
        if not _is_id(ask_id):
            raise _Broken(
                f'wrote an "ask" line with the id {describe(ask_id)} to {FD_VARIABLE}; an id '
                f"is a string of at most {_MAX_ID_CHARS} characters or an integer"
            )
        if self._open_asks >= MAX_OPEN_ASKS:
            raise _Broken(
                f"asked more than {MAX_OPEN_ASKS} questions at once on {FD_VARIABLE} (a "
                "question whose reply was not read yet counts); read a reply before asking more"
            )
        self._open_asks += 1
        asks.start_soon(self._answer, ask_id, body)

    async def _answer(self, ask_id: Any, body: dict[str, Any]) -> None:
        reply: dict[str, Any] = {"id": ask_id}
        try:
            # ctx.ask checks what it is given: a question that is not text is refused.
            question: Any = body.get("question")
            value = await self.ctx.ask(
                question, schema=body.get("schema"), timeout=body.get("timeout")
            )
        except _REPLIED as exc:
            error = {"type": type(exc).__name__, "message": str(exc)}
            if isinstance(exc, QuestionDeclinedError):
                error["reason"] = exc.reason
            reply["error"] = error
        except DelegationError as exc:
            self._open_asks -= 1
            self._fail(f'wrote an "ask" line that was refused: {exc}')
            return
        else:
            reply["answer"] = value
        # ASCII only: whatever the answer holds, it is one line of valid UTF-8.
        line = json.dumps(reply, ensure_ascii=True, separators=(",", ":")).encode() + b"\n"
        async with self._send_lock:
            # The ask counts as open until its reply goes out: a process that
            # does not read its replies fills the channel, and the replies
            # waiting here for it must stay within MAX_OPEN_ASKS. It stops
            # counting before the reply is sent, not after: the process may
            # read it and ask again before this task runs on.
            self._open_asks -= 1
            try:
                await self._stream.send_all(line)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return  # the process closed its end: it no longer waits for answers


def _decode(raw: bytes) -> dict[str, Any]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Broken(
            f"wrote a line that is not UTF-8 (at byte {exc.start}) to {FD_VARIABLE}; "
            "write UTF-8 JSON"
        ) from None
    try:
        value = parse(text, parse_constant=_no_constant)
    except ValueError as exc:
        raise _Broken(
            f"wrote a line that is not JSON ({exc}) to {FD_VARIABLE}: {_cut(text)!r}; "
            "write one JSON object per line"
        ) from None
    if not isinstance(value, dict):
        raise _Broken(
            f"wrote the line {_cut(text)!r} to {FD_VARIABLE}; each line must be a JSON object"
        )
    return value


def _no_constant(name: str) -> Any:
    # NaN and Infinity are not JSON; Python's parser takes them unless told.
    raise ValueError(f"{name} is not a JSON value")


def _only(body: dict[str, Any], kind: str, fields: tuple[str, ...]) -> None:
    unknown = sorted(set(body) - set(fields))
    if unknown:
        raise _Broken(
            f'wrote a "{kind}" line with the field {unknown[0]!r} to {FD_VARIABLE}; '
            f"its fields are {', '.join(fields)}"
        )


def _is_id(value: Any) -> bool:
    if value is None or (type(value) is int and abs(value) < 2**63):
        return True
    return type(value) is str and len(value) <= _MAX_ID_CHARS


def _cut(text: str) -> str:
    return text if len(text) <= 200 else text[:199] + "…"
