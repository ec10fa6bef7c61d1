"""``trio-delegate serve``'s first answer, given before the MCP SDK is imported.

Importing the ``mcp`` SDK takes most of a second (its package imports the
client, the HTTP transports and a pydantic model for every protocol type),
and clients time their first request from the spawn: Codex waits 1 s for a
server that is not ``required``, and Claude Code's ``server/discover`` probe
falls back to ``initialize`` after a timeout of its own. Both first answers
depend only on the protocol version asked for, so they are written here,
from the standard library, while the SDK is still being imported.

:class:`FirstAnswer` reads the client's first line on a thread of its own. A
plain ``initialize`` (a handshake version the SDK negotiates to itself) or
``server/discover`` (2026-07-28), whose parameters hold only what the SDK is
known to accept, is answered at once. The line is then handed on to the SDK
with a private id in place of the client's, so that the SDK's connection is
in the state the request puts it in (the protocol era, the client's
parameters); the SDK's own answer to that id is dropped, after it is checked
to be the one already given. Any other first line is handed on untouched.

Nothing here imports the SDK: the module is imported, and the answer
written, before it.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import secrets
import threading
from collections.abc import Callable, Mapping
from typing import Any, Final, final

__all__ = [
    "DEFAULT_INSTRUCTIONS",
    "DEFAULT_NAME",
    "TASKS_EXTENSION",
    "FirstAnswer",
    "first_answer",
]

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
    "with delegate_task(replaces=<run_id>). A foreground call that runs too long comes "
    "back as {run_id, subagent, status} instead of a result: it is then background work, "
    "so call wait_subagent on it. Runs belong to this connection and are cancelled when "
    "it ends."
)

#: The handshake versions the SDK answers with themselves (``mcp_types.version``;
#: a test holds the two equal). Any other one is left to the SDK.
HANDSHAKE_VERSIONS: Final = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
#: The per-request-envelope versions (``mcp_types.version``).
MODERN_VERSIONS: Final = ("2026-07-28",)

_META: Final = "io.modelcontextprotocol/"
#: The Tasks extension's identifier, in ``server/discover`` and in a request's capabilities.
TASKS_EXTENSION: Final = "io.modelcontextprotocol/tasks"

#: The longest first line read here: a longer one is the SDK's to read.
_MAX_LINE: Final = 1 << 20
_CHUNK: Final = 1 << 16


def first_answer(request: Any, *, version: str) -> dict[str, Any] | None:
    """The SDK's answer to *request*, a client's first message, or ``None``.

    Only requests whose every member is one the SDK is known to accept as
    it is are answered: anything unusual is left to the SDK, which then
    answers it (or refuses it) itself.

    Args:
        request: the decoded JSON of the line.
        version: the server's version (``serverInfo``).

    Returns:
        the JSON-RPC response, with the request's id; ``None`` when the SDK
        must answer.
    """
    if not _is_request(request):
        return None
    server_info = {"name": DEFAULT_NAME, "version": version}
    params = request["params"]
    result: dict[str, Any]
    if request["method"] == "initialize":
        if not (
            params.keys() == {"protocolVersion", "capabilities", "clientInfo"}
            and params["protocolVersion"] in HANDSHAKE_VERSIONS
            and _plain_capabilities(params["capabilities"], modern=False)
            and _plain_client_info(params["clientInfo"])
        ):
            return None
        result = {
            "capabilities": {"logging": {}, "tools": {"listChanged": False}},
            "instructions": DEFAULT_INSTRUCTIONS,
            "protocolVersion": params["protocolVersion"],
            "serverInfo": server_info,
        }
    elif request["method"] == "server/discover":
        meta = params.get("_meta")
        if not (
            params.keys() == {"_meta"}
            and type(meta) is dict
            and meta.keys()
            == {f"{_META}protocolVersion", f"{_META}clientInfo", f"{_META}clientCapabilities"}
            and meta[f"{_META}protocolVersion"] in MODERN_VERSIONS
            and _plain_capabilities(meta[f"{_META}clientCapabilities"], modern=True)
            and _plain_client_info(meta[f"{_META}clientInfo"])
        ):
            return None
        result = {
            "cacheScope": "private",
            "capabilities": {
                "extensions": {TASKS_EXTENSION: {}},
                "tools": {"listChanged": False},
            },
            "instructions": DEFAULT_INSTRUCTIONS,
            "resultType": "complete",
            "supportedVersions": list(MODERN_VERSIONS),
            "ttlMs": 0,
            "_meta": {f"{_META}serverInfo": server_info},
        }
    else:
        return None
    return {"jsonrpc": "2.0", "id": request["id"], "result": result}


def _is_request(value: Any) -> bool:
    if not (
        type(value) is dict
        and value.keys() == {"jsonrpc", "id", "method", "params"}
        and value["jsonrpc"] == "2.0"
        and type(value["params"]) is dict
    ):
        return False
    request_id = value["id"]
    if type(request_id) is int:
        # An id the SDK writes back as it is (its JSON reader takes 64-bit integers).
        return abs(request_id) < 2**53
    return type(request_id) is str and len(request_id) <= 256 and _text(request_id)


def _text(value: Any) -> bool:
    """A string the SDK reads as it is: short, valid Unicode, no control characters."""
    return type(value) is str and len(value) <= 1024 and value.isprintable()


#: The client's ``Implementation`` members that are plain strings (``icons`` is not).
_CLIENT_INFO: Final = frozenset({"name", "version", "title", "description", "websiteUrl"})


def _plain_client_info(info: Any) -> bool:
    return (
        type(info) is dict
        and {"name", "version"} <= info.keys() <= _CLIENT_INFO
        and all(_text(value) for value in info.values())
    )


#: The client capabilities taken as they are, and the members each may hold:
#: ``True`` for a boolean, ``False`` for an empty object.
_CAPABILITIES: Final[Mapping[str, Mapping[str, bool]]] = {
    "roots": {"listChanged": True},
    "sampling": {"context": False, "tools": False},
    "elicitation": {"form": False, "url": False},
}


def _plain_capabilities(capabilities: Any, *, modern: bool) -> bool:
    """Whether *capabilities* holds only members the SDK takes as they are.

    ``roots.listChanged`` is a boolean, the other known members are empty
    objects; a 2026-07-28 client may declare extensions (with empty settings).
    """
    if type(capabilities) is not dict:
        return False
    for name, value in capabilities.items():
        if type(value) is not dict:
            return False
        if name == "extensions" and modern:
            if not all(_text(key) and other == {} for key, other in value.items()):
                return False
            continue
        members = _CAPABILITIES.get(name)
        if members is None:
            return False
        for key, member in value.items():
            if key not in members:
                return False
            boolean = members[key]
            if not (type(member) is bool if boolean else member == {}):
                return False
    return True


@final
class FirstAnswer:
    """The client's first line, read (and maybe answered) on a thread of its own.

    Built before the MCP SDK is imported: it takes over file descriptor 0
    (pointing it at the null device, as the SDK's transport would) and a
    duplicate of descriptor 1 for the answer. :meth:`stdin` is then the
    binary stream the SDK's transport reads: the first line (with a private
    id when it was answered here) followed by the rest of the input.

    Attributes:
        private_id: the id the first line carries to the SDK when it was
            answered here.
        answer: the response written, once the line was answered; else ``None``.
    """

    def __init__(self, version: str, *, input_fd: int = 0, output_fd: int = 1) -> None:
        """Take over the input and start reading its first line.

        Args:
            version: the server's version, for ``serverInfo``.
            input_fd: the client's requests (stdin); it is pointed at the
                null device until :meth:`restore`.
            output_fd: the way to the client (stdout).

        Raises:
            OSError: the descriptors cannot be duplicated.
        """
        self.private_id = f"trio-delegate-first-{secrets.token_hex(8)}"
        self.answer: dict[str, Any] | None = None
        self._version = version
        self._fd = input_fd
        # Above the standard range, and not inherited by subagents' processes.
        self._input = _duplicate(input_fd)
        self._output = _duplicate(output_fd)
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            os.dup2(null, input_fd)
        finally:
            os.close(null)
        self._prefix = b""
        self._done = threading.Event()
        self._thread = threading.Thread(
            target=self._read, name="trio-delegate first line", daemon=True
        )
        self._thread.start()

    def stdin(self, on_end: Callable[[], None] | None = None) -> io.BufferedReader:
        """The input as the SDK's transport is to read it (see the class).

        Args:
            on_end: called on the reading thread as soon as a read finds the
                end of the input (or fails): the server learns of it there
                even while its event loop is held up.
        """
        return io.BufferedReader(_Prefixed(self._done, lambda: self._prefix, self._input, on_end))

    def restore(self) -> None:
        """Point the input's descriptor back at the input (the server is done with it)."""
        os.dup2(self._input, self._fd)

    def _read(self) -> None:
        read = b""
        try:
            try:
                # The SDK's reader ends lines at "\r" too: a line with one is its to read.
                while b"\n" not in read and b"\r" not in read and len(read) < _MAX_LINE:
                    chunk = os.read(self._input, _CHUNK)
                    if not chunk:
                        break
                    read += chunk
            except OSError:
                # The SDK's reader meets the same error on the descriptor, and reports it.
                pass
            line, newline, rest = read.partition(b"\n")
            if newline and b"\r" not in line.removesuffix(b"\r"):
                replay = self._answer(line)
                if replay is not None:
                    read = replay + b"\n" + rest
        finally:
            with contextlib.suppress(OSError):
                os.close(self._output)
            self._prefix = read
            self._done.set()

    def _answer(self, line: bytes) -> bytes | None:
        """Answer *line* when it can be; return the line to hand on instead."""
        try:
            # The SDK's reader refuses NaN and Infinity: leave such a line to it.
            request = json.loads(line.decode("utf-8"), parse_constant=_refuse)
        except (ValueError, RecursionError):
            return None
        response = first_answer(request, version=self._version)
        if response is None:
            return None
        data = json.dumps(response, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._output, view) :]
        except OSError:
            # The client is gone (or never reads): the SDK meets it as well.
            return None
        self.answer = response
        replay = dict(request, id=self.private_id)
        return json.dumps(replay, ensure_ascii=False, separators=(",", ":")).encode()


def _refuse(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _duplicate(fd: int) -> int:
    import fcntl  # POSIX only: serve reads its first line here only there

    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)


@final
class _Prefixed(io.RawIOBase):
    """A descriptor's bytes after *prefix*, once the first line's thread is done;
    *on_end* is called when a read finds the end (or fails)."""

    def __init__(
        self, done: threading.Event, prefix: Any, fd: int, on_end: Callable[[], None] | None
    ) -> None:
        self._done = done
        self._get_prefix = prefix
        self._prefix: bytes | None = None
        self._fd = fd
        self._on_end = on_end

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._prefix is None:
            # Called from the transport's worker thread: blocking is its job.
            self._done.wait()
            self._prefix = self._get_prefix()
        if self._prefix:
            count = min(len(buffer), len(self._prefix))
            buffer[:count] = self._prefix[:count]
            self._prefix = self._prefix[count:]
            return count
        try:
            data = os.read(self._fd, len(buffer))
        except OSError:
            self._ended()
            raise
        if not data:
            self._ended()
        buffer[: len(data)] = data
        return len(data)

    def _ended(self) -> None:
        if self._on_end is not None:
            self._on_end()

    def close(self) -> None:
        # The descriptor is not closed: a worker thread can still block on it
        # after the transport exits (as the SDK's own transport says).
        super().close()
