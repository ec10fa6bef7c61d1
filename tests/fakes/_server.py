"""The part the fake model servers share: an HTTP server on 127.0.0.1 in a thread.

A fake answers each model request with the next step of its script. A step
is a reply (text, tool calls) or a function of the :class:`Turn` that
returns one, so a step can read the tool results the client sent back (a
``run_id``) before it decides what to call next. Every request is logged.
Steps run in the server's thread.
"""

from __future__ import annotations

import http.server
import json
import select
import socket
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final, Self, final

import attrs

#: How long stop() waits for the server thread.
_JOIN_SECONDS: Final = 5.0

#: How often a held request looks whether its client closed the connection.
_WATCH_SECONDS: Final = 0.01

#: Stands in a JSON body for a call's raw arguments until the body is written.
_RAW = "\u0000raw-arguments-{}\u0000"


def raw_placeholder(call: Call, index: int) -> Any:
    """What a message body holds for *call*'s arguments: them, or a raw-text placeholder."""
    return dict(call.arguments) if call.raw is None else _RAW.format(index)


def _with_raw(body: dict[str, Any]) -> bytes:
    """*body* as JSON, each raw-argument placeholder replaced by its verbatim text."""
    raws: list[str] = body.pop("__raw__", [])
    text = json.dumps(body)
    for index, raw in enumerate(raws):
        text = text.replace(json.dumps(_RAW.format(index)), raw)
    return text.encode()


def _closed(connection: socket.socket) -> bool:
    """Whether the peer closed *connection* (it reads as ready with nothing to read)."""
    ready, _, _ = select.select([connection], [], [], 0)
    if not ready:
        return False
    try:
        return connection.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


@final
@attrs.frozen
class Call:
    """One tool call the fake model makes: the tool's name as the client offers it."""

    name: str
    arguments: Mapping[str, Any]
    #: Sent in place of *arguments*, verbatim, when given: JSON text that is
    #: hostile (too deep, not JSON at all) reaches the client as it is.
    raw: str | None = None


@final
@attrs.frozen
class Reply:
    """What the fake model answers: some text, then the tool calls, if any."""

    text: str = ""
    calls: tuple[Call, ...] = ()
    #: The usage numbers the reply reports (see :class:`Usage`). A streamed
    #: reply without them reports 10 input and 5 output tokens.
    usage: Usage | None = None


@final
@attrs.frozen
class Usage:
    """The token counts a non-streamed reply reports, in each API's own fields."""

    input_tokens: int = 10
    output_tokens: int = 5
    cache_read_input_tokens: int = 3
    cache_creation_input_tokens: int = 2
    reasoning_output_tokens: int = 1
    #: A cost the server reports in the usage (``cost``, as OpenRouter does):
    #: sent by the OpenAI fakes when given.
    cost: float | None = None


@final
@attrs.frozen
class Failure:
    """An HTTP error the fake model API answers with, as the real API would."""

    status: int
    error_type: str
    message: str
    #: The ``retry-after`` header sent with it, if any.
    retry_after: str | None = None


@final
@attrs.frozen
class Malformed:
    """A step that answers 200 with a body that is not what the API sends."""

    body: bytes = b"{ this is not json"


@final
@attrs.frozen
class ToolResult:
    """A tool's result as the client fed it back to the model."""

    call_id: str
    text: str
    is_error: bool

    def json(self) -> Any:
        """The result's text parsed as JSON (the delegation tools answer in JSON)."""
        return json.loads(self.text)


@final
@attrs.frozen
class Request:
    """One request the fake received."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: Any


@final
@attrs.frozen
class Turn:
    """A model request, as a step sees it: the body and the tool results in it."""

    request: Request
    tool_results: tuple[ToolResult, ...]

    @property
    def last(self) -> ToolResult:
        """The last tool result sent back (the answer to the previous step's call)."""
        assert self.tool_results, "the client sent no tool result"
        return self.tool_results[-1]


@final
@attrs.frozen
class Hold:
    """A step that answers only once the fake is released (or closed): a model still thinking.

    Released, it answers with the text ``(released)``, which ends the turn.
    """


Answer = Reply | Failure | Hold | Malformed
Step = Answer | Callable[[Turn], Answer]


def text(value: str) -> Reply:
    """A step that answers with text and ends the model's turn."""
    return Reply(text=value)


def call(name: str, **arguments: Any) -> Reply:
    """A step that calls one tool."""
    return Reply(calls=(Call(name, arguments),))


class FakeModelServer:
    """A scripted model API on 127.0.0.1, on a free port, served from a thread.

    Use it as a context manager (``with``): it listens from entry to exit.
    Subclasses say which paths are model requests, how tool results are read
    from a request, and how a reply is streamed.

    Attributes:
        requests: every request received, in order.
        turns: the model requests, as the steps saw them.
        problems: what went wrong while serving (a step that failed, a
            request after the script ended); a test asserts it is empty.
    """

    #: The path a model request is posted to.
    model_path: str = ""

    def __init__(self, script: Sequence[Step]) -> None:
        self._script = list(script)
        self._lock = threading.Lock()
        self.requests: list[Request] = []
        self.turns: list[Turn] = []
        self.problems: list[str] = []
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None
        self._counter = 0
        self._released = threading.Event()
        #: Set when a held request has arrived.
        self.holding = threading.Event()
        #: Set when the client closed the connection of a held request.
        self.disconnected = threading.Event()

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def remaining(self) -> int:
        """How many steps are left unused."""
        with self._lock:
            return len(self._script)

    def __enter__(self) -> Self:
        self._thread = threading.Thread(
            target=self._server.serve_forever, name=type(self).__name__, daemon=True
        )
        self._thread.start()
        return self

    def release(self) -> None:
        """Let held requests be answered (see :class:`Hold`)."""
        self._released.set()

    def __exit__(self, *exc_info: object) -> None:
        self._released.set()
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(_JOIN_SECONDS)

    def next_id(self, prefix: str) -> str:
        """A fresh id for an object the fake makes (a message, a tool call)."""
        with self._lock:
            self._counter += 1
            return f"{prefix}_{self._counter:04d}"

    # -- what subclasses provide ------------------------------------------------------

    def tool_results(self, body: Any) -> tuple[ToolResult, ...]:
        """The tool results in a model request's body, oldest first."""
        raise NotImplementedError

    def events(self, body: Any, reply: Reply) -> Iterator[tuple[str, dict[str, Any]]]:
        """The server-sent events that stream *reply*."""
        raise NotImplementedError

    def message(self, body: Any, reply: Reply) -> dict[str, Any]:
        """The JSON body of *reply* when the request did not ask for a stream."""
        raise NotImplementedError

    def other(self, request: Request) -> tuple[int, Any]:
        """The answer to a request that is not a model request: status and JSON."""
        return 404, {"error": {"type": "not_found", "message": f"no {request.path} here"}}

    # -- serving ------------------------------------------------------------------------

    def _answer(
        self, request: Request, closed: Callable[[], bool] = lambda: False
    ) -> tuple[int, str, bytes, dict[str, str]]:
        with self._lock:
            self.requests.append(request)
        if request.method != "POST" or request.path.partition("?")[0] != self.model_path:
            status, payload = self.other(request)
            return status, "application/json", json.dumps(payload).encode(), {}
        turn = Turn(request, self.tool_results(request.body))
        with self._lock:
            self.turns.append(turn)
            step = self._script.pop(0) if self._script else None
        if step is None:
            return self._fail(f"request {len(self.turns)} came after the script ended")
        try:
            reply = step if isinstance(step, Reply | Failure | Hold | Malformed) else step(turn)
        except Exception as exc:
            return self._fail(f"step {len(self.turns)} failed: {type(exc).__name__}: {exc}")
        if isinstance(reply, Hold):
            self.holding.set()
            # Watch the connection while held: a client that gives up closes it.
            while not self._released.wait(_WATCH_SECONDS):
                if closed():
                    self.disconnected.set()
                    return 499, "application/json", b"{}", {}
            reply = Reply(text="(released)")
        if isinstance(reply, Malformed):
            return 200, "application/json", reply.body, {}
        if isinstance(reply, Failure):
            error = {"type": "error", "error": {"type": reply.error_type, "message": reply.message}}
            headers = {} if reply.retry_after is None else {"retry-after": reply.retry_after}
            return reply.status, "application/json", json.dumps(error).encode(), headers
        if isinstance(request.body, dict) and not request.body.get("stream"):
            return 200, "application/json", _with_raw(self.message(request.body, reply)), {}
        stream = "".join(
            f"event: {name}\ndata: {json.dumps(data)}\n\n"
            for name, data in self.events(request.body, reply)
        )
        return 200, "text/event-stream", stream.encode(), {}

    def _fail(self, problem: str) -> tuple[int, str, bytes, dict[str, str]]:
        with self._lock:
            self.problems.append(problem)
        body = {"error": {"type": "invalid_request_error", "message": problem}}
        return 400, "application/json", json.dumps(body).encode(), {}

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass  # the request log is fake.requests

            def do_GET(self) -> None:
                self._serve()

            def do_POST(self) -> None:
                self._serve()

            def _serve(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body: Any = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode("utf-8", errors="replace")
                request = Request(
                    self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body
                )
                status, content_type, data, headers = fake._answer(
                    request, lambda: _closed(self.connection)
                )
                self.close_connection = True
                try:
                    self.send_response(status)
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.send_header("content-type", content_type)
                    self.send_header("content-length", str(len(data)))
                    # One request per connection: nothing lingers after a client dies.
                    self.send_header("connection", "close")
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the client is gone (killed while the model "thought")

        return Handler
