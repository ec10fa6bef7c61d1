"""``trio-delegate serve`` answers its first request through the MCP SDK, having loaded no more.

Clients time their first request from the spawn (Codex waits 1 s for a
server that is not ``required``), and importing the SDK takes most of that
time: whatever else the server imported first would add to it. The
end-to-end tests hold every import the first answer must not need (the
libraries only some configurations or requests use, and any module of the
SDK that a bare SDK server does not load) until that answer has come: were
any of them on the way to it, the answer would never come. The answer is
checked against the one the server gives in process.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import weakref
from pathlib import Path
from typing import Any

import pytest
import trio

pytest.importorskip("mcp")

import anyio
import mcp_types
from mcp.shared.message import SessionMessage
from mcp_types import version as sdk_versions

import trio_delegate as td
from trio_delegate.mcp import build_server

from .helpers import mcp_initialize

PY = sys.executable
#: The outer guard of one wait on the server process (a hang fails the test).
GUARD_SECONDS = 30.0

#: What must not be imported before the first answer (a package, or a module
#: and its submodules): the libraries only some configurations or requests use
#: (a store, a schema, a display, Temporal), and the telemetry nobody set a
#: provider for (the SDK loads OpenTelemetry's tracing API).
HELD = (
    "jsonschema",
    "jsonschema_specifications",
    "rich",
    "psycopg",
    "psycopg_pool",
    "temporalio",
    "re2",
    "opentelemetry.metrics",
    "trio_delegate._otel",
)

#: The SDK's packages: of these, only what a bare SDK server loads before its
#: first answer may be imported before serve's.
SDK = ("mcp", "mcp_types")

#: A bare low-level SDK server (as ``benchmarks/_bare_mcp.py``) answering
#: what stdin holds; once stdin ends, it names every module it loaded on stderr.
BARE = """
import sys
import trio
from mcp.server import Server
from mcp.server.stdio import stdio_server

async def main():
    server = Server("bare")
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())

trio.run(main)
print("\\n".join(sorted(sys.modules)), file=sys.stderr)
"""

#: Runs ``trio-delegate`` with every import of a HELD package, and of an SDK
#: module not in the allowed list, held until the gate descriptor is closed;
#: the first one held is named on the report descriptor. ``find_spec("mcp")``
#: alone (the server's check that the SDK is there) imports nothing.
GATED = """
import importlib.abc, os, sys
gate, report = int(sys.argv[1]), int(sys.argv[2])
held = set(sys.argv[3].split(","))
sdk = set(sys.argv[4].split(","))
allowed = set(open(sys.argv[5]).read().split())
class Hold(importlib.abc.MetaPathFinder):
    waiting = True
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        heavy = any(name == h or name.startswith(h + ".") for h in held)
        if self.waiting and (heavy or (top in sdk and name not in allowed)):
            self.waiting = False
            os.write(report, name.encode() + b"\\n")
            os.close(report)
            os.read(gate, 1)
        return None
sys.meta_path.insert(0, Hold())
sys.argv = ["trio-delegate", *sys.argv[6:]]
from trio_delegate._cli._main import main
raise SystemExit(main())
"""

META = "io.modelcontextprotocol/"
PING = b'{"jsonrpc": "2.0", "id": 2, "method": "ping"}\n'


def envelope(capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        f"{META}protocolVersion": "2026-07-28",
        f"{META}clientInfo": {"name": "startup-test", "version": "0"},
        f"{META}clientCapabilities": capabilities if capabilities is not None else {},
    }


def initialize(request_id: Any = 1, **params: Any) -> dict[str, Any]:
    return mcp_initialize(
        request_id, **{"clientInfo": {"name": "startup-test", "version": "0"}, **params}
    )


def discover(request_id: Any = 1, **meta: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "server/discover",
        "params": {"_meta": {**envelope(), **meta}},
    }


#: What a pipe gave past the line read from it, by pipe.
_READ_AHEAD: weakref.WeakKeyDictionary[Any, bytes] = weakref.WeakKeyDictionary()


def read_line(stream: Any, what: str) -> bytes:
    """One line of *stream* (a pipe of the server), within the guard.

    Read from the pipe itself: a buffered ``readline`` takes any lines that
    arrived together into its buffer, where a wait on the pipe does not see
    them (two answers written at once, on a busy machine).
    """
    data = _READ_AHEAD.pop(stream, b"")
    fd = stream.fileno()
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while b"\n" not in data:
            if not selector.select(GUARD_SECONDS):
                raise AssertionError(f"no {what} within {GUARD_SECONDS:g} s")
            chunk = os.read(fd, 1 << 16)
            assert chunk, f"the server ended before its {what}"
            data += chunk
    line, _, rest = data.partition(b"\n")
    _READ_AHEAD[stream] = rest
    return line + b"\n"


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "subagents.toml"
    path.write_text(
        "[[subagents]]\n"
        'name = "echo"\n'
        'description = "Echoes its task."\n'
        f'command = [{json.dumps(PY)}, "-c", "import sys; print(sys.stdin.read())"]\n'
    )
    return path


def bare_sdk_modules(first: dict[str, Any]) -> list[str]:
    """The SDK's modules a bare SDK server has loaded once it answered *first*.

    Its input stays open until the answer came: a server whose input ends
    may drop a request still in hand (it did for ``server/discover``).
    """
    process = subprocess.Popen(
        [PY, "-c", BARE],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdin is not None
    assert process.stdout is not None
    assert process.stderr is not None
    try:
        process.stdin.write(json.dumps(first).encode() + b"\n")
        process.stdin.flush()
        answer = read_line(process.stdout, "bare answer")
        assert b'"result"' in answer, answer
        # Ends its input, then reads what is left within the guard.
        _, errors = process.communicate(timeout=GUARD_SECONDS)
        assert process.returncode == 0, errors
    finally:
        end(process)
    loaded = errors.decode().split()
    return [name for name in loaded if name.split(".")[0] in SDK]


def start_gated(config: Path, allowed: Path) -> tuple[subprocess.Popen[bytes], int, int]:
    """``serve`` on *config* under GATED, allowed the SDK modules named in *allowed*.

    Returns:
        the process, the gate's write end (close it to let the held import
        go on) and the report's read end.
    """
    gate_read, gate_write = os.pipe()
    report_read, report_write = os.pipe()
    process = subprocess.Popen(
        [
            PY,
            "-c",
            GATED,
            str(gate_read),
            str(report_write),
            ",".join(HELD),
            ",".join(SDK),
            str(allowed),
            "serve",
            "--config",
            str(config),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        pass_fds=(gate_read, report_write),
    )
    os.close(gate_read)
    os.close(report_write)
    return process, gate_write, report_read


def end(process: subprocess.Popen[bytes], *fds: int) -> None:
    for fd in fds:
        if fd != -1:
            os.close(fd)
    if process.poll() is None:
        process.kill()
        process.wait()
    for stream in (process.stdin, process.stdout):
        if stream is not None:
            stream.close()


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_the_first_answer_comes_while_every_import_it_does_not_need_is_held(
    config: Path, tmp_path: Path, era: str
) -> None:
    first = initialize(7) if era == "legacy" else discover(7)
    allowed = tmp_path / "allowed.txt"
    allowed.write_text("\n".join(bare_sdk_modules(first)))
    # What the server answers in process: the SDK's answer, as served.
    [expected] = trio.run(sdk_answers, [first])
    process, gate_write, report_read = start_gated(config, allowed)
    assert process.stdin is not None
    assert process.stdout is not None
    try:
        process.stdin.write(json.dumps(first).encode() + b"\n")
        process.stdin.flush()
        try:
            answer = json.loads(read_line(process.stdout, "first answer"))
        except AssertionError:
            with os.fdopen(report_read, "rb") as report:
                report_read = -1
                raise AssertionError(f"held on the way: {report.read().decode()!r}") from None
        assert process.poll() is None
        assert answer == expected
        os.close(gate_write)
        gate_write = -1
        # The connection the first request opened goes on.
        if era == "legacy":
            process.stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
            listing: dict[str, Any] = {"jsonrpc": "2.0", "id": 8, "method": "tools/list"}
        else:
            listing = {"jsonrpc": "2.0", "id": 8, "method": "tools/list"}
            listing["params"] = {"_meta": envelope()}
        process.stdin.write(json.dumps(listing).encode() + b"\n")
        process.stdin.flush()
        tools = json.loads(read_line(process.stdout, "tools/list answer"))
        assert tools["id"] == 8
        assert "delegate_task" in [tool["name"] for tool in tools["result"]["tools"]]
        process.stdin.close()
        assert process.wait(GUARD_SECONDS) == 0
    finally:
        end(process, gate_write, report_read)


def test_the_gate_holds_what_it_names(config: Path, tmp_path: Path) -> None:
    # The rule can fail: with no SDK module allowed, the first answer waits
    # for the gate, and the held module is named.
    allowed = tmp_path / "allowed.txt"
    allowed.write_text("")
    process, gate_write, report_read = start_gated(config, allowed)
    assert process.stdin is not None
    assert process.stdout is not None
    try:
        process.stdin.write(json.dumps(initialize(1)).encode() + b"\n")
        process.stdin.flush()
        with os.fdopen(report_read, "rb") as report:
            report_read = -1
            held = read_line(report, "held import").decode().strip()
        assert held.split(".")[0] in SDK
        # Held, so nothing was answered: the server is still importing.
        assert process.poll() is None
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            assert selector.select(0) == []
        os.close(gate_write)
        gate_write = -1
        assert json.loads(read_line(process.stdout, "first answer"))["id"] == 1
        process.stdin.close()
        assert process.wait(GUARD_SECONDS) == 0
    finally:
        end(process, gate_write, report_read)


def test_a_first_request_the_sdk_negotiates_down_opens_the_connection(config: Path) -> None:
    # A version the SDK negotiates down: it answers with its own, and the connection goes on.
    sent = (
        json.dumps(initialize(1, protocolVersion="1999-01-01")).encode()
        + b"\n"
        + b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n'
        + PING
    )
    answers = serve_once(config, sent, until=2)
    assert [answer["id"] for answer in answers] == [1, 2]
    assert answers[0]["result"]["protocolVersion"] == sdk_versions.LATEST_HANDSHAKE_VERSION
    assert answers[1]["result"] == {}


CLAUDE_CODE = {
    "name": "claude-code",
    "title": "Claude Code",
    "version": "2.1.332",
    "description": "Anthropic's agentic coding tool",
    "websiteUrl": "https://claude.com/claude-code",
}

#: The first requests of the clients the server is used with.
CLIENT_FIRSTS = {
    # Claude Code's first request (its discovery probe), and its initialize.
    "claude-code-discover": discover(
        "server-discover-probe-1",
        **{
            f"{META}clientInfo": CLAUDE_CODE,
            f"{META}clientCapabilities": {
                "roots": {"listChanged": True},
                "elicitation": {"form": {}, "url": {}},
                "extensions": {f"{META}tasks": {}},
            },
        },
    ),
    "claude-code-initialize": initialize(
        0,
        protocolVersion="2025-11-25",
        capabilities={"roots": {"listChanged": True}, "elicitation": {"form": {}, "url": {}}},
        clientInfo=CLAUDE_CODE,
    ),
    # Codex's.
    "codex-initialize": initialize(
        0,
        capabilities={"elicitation": {}},
        clientInfo={"name": "codex-mcp-client", "title": "Codex", "version": "0.50.0"},
    ),
}


async def echo(ctx: td.ChildContext) -> str:
    await trio.lowlevel.checkpoint()
    return ctx.task


async def sdk_answers(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The answers ``build_server`` gives each request, the first on a connection of its own."""
    answers = []
    async with td.open_runtime([td.Subagent("echo", echo, description="Echoes.")]) as runtime:
        for request in requests:
            server = build_server(runtime)
            to_server, server_reads = anyio.create_memory_object_stream[Any](1)
            server_writes, from_server = anyio.create_memory_object_stream[Any](1)
            async with (
                to_server,
                server_reads,
                server_writes,
                from_server,
                trio.open_nursery() as nursery,
            ):
                nursery.start_soon(
                    server.run,
                    server_reads,
                    server_writes,
                    server.create_initialization_options(),
                )
                message = mcp_types.jsonrpc_message_adapter.validate_python(request, by_name=False)
                with trio.fail_after(GUARD_SECONDS):
                    await to_server.send(SessionMessage(message))
                    answer: SessionMessage = await from_server.receive()
                answers.append(
                    json.loads(answer.message.model_dump_json(by_alias=True, exclude_unset=True))
                )
                await to_server.aclose()
    return answers


@pytest.mark.parametrize("client", list(CLIENT_FIRSTS))
def test_a_clients_first_request_is_answered_as_in_process(client: str, config: Path) -> None:
    first = CLIENT_FIRSTS[client]
    [expected] = trio.run(sdk_answers, [first])
    [answer] = serve_once(config, json.dumps(first).encode() + b"\n", until=first["id"])
    assert answer == expected
    assert answer["result"]["instructions"] == td.mcp.DEFAULT_INSTRUCTIONS


#: A request that follows each first input: answered once everything before it was read.
LAST = b'{"jsonrpc": "2.0", "id": "last", "method": "ping"}\n'


@pytest.mark.parametrize(
    ("sent", "ids"),
    [
        (json.dumps(initialize(1)).encode() + b"\n" + PING, [1, 2]),
        (json.dumps(discover("d")).encode() + b"\n" + PING, ["d", 2]),
        (json.dumps(initialize(1, protocolVersion="1999-01-01")).encode() + b"\n" + PING, [1, 2]),
        (b"\xff\xfe not text\n" + PING, [2]),
        (b"", []),
        (json.dumps(initialize(1)).encode() + b"\r\n" + PING, [1, 2]),
        (json.dumps(initialize(1)).replace(", ", ",\r").encode() + b"\n" + PING, [2]),
        (json.dumps(initialize(1)).encode() + b"\r" + PING, [1, 2]),
    ],
    ids=[
        "initialize",
        "discover",
        "unknown version",
        "not utf-8",
        "nothing",
        "crlf",
        "cr inside",
        "cr ends it",
    ],
)
def test_every_request_after_an_odd_first_line_is_answered(
    sent: bytes, ids: list[Any], config: Path
) -> None:
    answers = serve_once(config, sent + LAST, until="last")
    assert [answer["id"] for answer in answers] == [*ids, "last"]


def test_a_first_line_without_its_end_is_answered_when_the_input_ends(config: Path) -> None:
    answers = serve_once(config, b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "par')
    [answer] = answers
    assert answer["id"] == 1
    assert answer["error"]["code"] == mcp_types.PARSE_ERROR


def serve_once(config: Path, sent: bytes, until: Any = None) -> list[dict[str, Any]]:
    """What ``serve`` answers to *sent*: read until the answer to *until*, then
    to the end once stdin is closed (or, with no *until*, after closing it)."""
    process = subprocess.Popen(
        [PY, "-m", "trio_delegate", "serve", "--config", str(config)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert process.stdin is not None
    assert process.stdout is not None
    answers: list[dict[str, Any]] = []
    try:
        process.stdin.write(sent)
        process.stdin.flush()
        while until is not None and until not in [answer.get("id") for answer in answers]:
            answers.append(json.loads(read_line(process.stdout, f"answer to {until!r}")))
        process.stdin.close()
        rest = process.stdout.read()
        assert process.wait(GUARD_SECONDS) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdin.close()
        process.stdout.close()
    answers += [json.loads(line) for line in rest.splitlines()]
    return answers


def test_a_store_that_cannot_be_opened_ends_the_server_with_the_reason(
    tmp_path: Path,
) -> None:
    # A store inside a file: no folder can be made for it.
    (tmp_path / "a-file").write_text("")
    config = tmp_path / "subagents.toml"
    config.write_text(
        "[runtime]\n"
        f"store = {json.dumps(str(tmp_path / 'a-file' / 'runs.db'))}\n"
        "[[subagents]]\n"
        'name = "echo"\n'
        'description = "Echoes its task."\n'
        f'command = [{json.dumps(PY)}, "-c", "print(1)"]\n'
    )
    done = subprocess.run(
        [PY, "-m", "trio_delegate", "serve", "--config", str(config)],
        input=json.dumps(initialize(1)).encode() + b"\n",
        capture_output=True,
        timeout=GUARD_SECONDS,
        check=False,
    )
    assert done.returncode == 1
    # The store is opened before the connection is served: no answer claims a
    # server that is about to exit.
    assert done.stdout == b""
    assert "cannot use the store" in done.stderr.decode()
