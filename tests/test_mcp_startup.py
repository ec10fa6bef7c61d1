"""``trio-delegate serve`` answers its first request before it imports the MCP SDK.

The SDK's import takes most of the time to a first answer, so the server
answers ``initialize`` and ``server/discover`` from ``_first_answer`` while
it imports the SDK. The end-to-end tests hold every heavy import of the
server process (the SDK and what it pulls in, and the libraries only some
requests need) until the first answer has come: were any of them on the way
to it, the answer would never come. The answers are checked against the
SDK's own, in process, request by request.
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
from trio_delegate import _first_answer
from trio_delegate._first_answer import first_answer
from trio_delegate.mcp import build_server

from .helpers import mcp_initialize

PY = sys.executable
#: The outer guard of one wait on the server process (a hang fails the test).
GUARD_SECONDS = 30.0

#: What must not be imported before the first answer: the SDK and its
#: dependencies, and the libraries only some configurations or requests use.
HELD = (
    "anyio",
    "pydantic",
    "pydantic_core",
    "mcp_types",
    "httpx",
    "httpx2",
    "starlette",
    "sse_starlette",
    "uvicorn",
    "jsonschema",
    "rich",
    "psycopg",
    "temporalio",
    "opentelemetry",
)

#: Runs ``trio-delegate`` with every import of HELD (and every ``mcp.``
#: submodule) held until the gate descriptor is closed; the first one held is
#: named on the report descriptor. ``find_spec("mcp")`` alone (the server's
#: check that the SDK is there) imports nothing, and goes through.
GATED = """
import importlib.abc, os, sys
gate, report = int(sys.argv[1]), int(sys.argv[2])
held = set(sys.argv[3].split(","))
class Hold(importlib.abc.MetaPathFinder):
    waiting = True
    def find_spec(self, name, path=None, target=None):
        if self.waiting and (name.split(".")[0] in held or name.startswith("mcp.")):
            self.waiting = False
            os.write(report, name.encode() + b"\\n")
            os.close(report)
            os.read(gate, 1)
        return None
sys.meta_path.insert(0, Hold())
sys.argv = ["trio-delegate", *sys.argv[4:]]
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


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_the_first_answer_comes_while_every_heavy_import_is_held(config: Path, era: str) -> None:
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
            "serve",
            "--config",
            str(config),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        pass_fds=(gate_read, report_write),
    )
    os.close(gate_read)
    os.close(report_write)
    assert process.stdin is not None
    assert process.stdout is not None
    assert process.stderr is not None
    try:
        first = initialize(7) if era == "legacy" else discover(7)
        process.stdin.write(json.dumps(first).encode() + b"\n")
        process.stdin.flush()
        with os.fdopen(report_read, "rb") as report:
            held = read_line(report, "held import").decode().strip()
        answer = json.loads(read_line(process.stdout, "first answer"))
        # Still held: the answer needed none of HELD.
        assert process.poll() is None
        assert answer["id"] == 7
        expected = first_answer(first, version=td.__version__)
        assert expected is not None
        assert answer["result"] == expected["result"]
        os.close(gate_write)
        gate_write = -1
        # The SDK, imported now, serves the connection the first request opened.
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
        errors = process.stderr.read().decode()
    finally:
        if gate_write != -1:
            os.close(gate_write)
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdin.close()
        process.stdout.close()
        process.stderr.close()
    assert held.split(".")[0] in HELD or held.startswith("mcp."), held
    # The SDK answered the first request too, and alike (its answer was dropped).
    assert "differed" not in errors, errors


def test_a_first_answer_unlike_the_sdks_is_logged(config: Path) -> None:
    # A server whose early answer names another version than the SDK's.
    patched = (
        "import trio_delegate._cli._serve as serve; serve.__version__ = '0.0.0-other'; "
        "from trio_delegate._cli._main import main; "
        "raise SystemExit(main(['serve', '--config', " + repr(str(config)) + "]))"
    )
    first = json.dumps(initialize(3)).encode() + b"\n"
    done = subprocess.run(
        [PY, "-c", patched], input=first, capture_output=True, timeout=GUARD_SECONDS, check=False
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.splitlines()[0])
    assert answer["result"]["serverInfo"]["version"] == "0.0.0-other"
    assert "the first answer differed from the MCP SDK's" in done.stderr.decode()
    assert td.__version__ in done.stderr.decode()


def test_a_first_request_that_is_not_answered_early_is_the_sdks(config: Path) -> None:
    # A version the SDK negotiates down: the SDK answers it, and the connection goes on.
    process = subprocess.Popen(
        [PY, "-m", "trio_delegate", "serve", "--config", str(config)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert process.stdin is not None
    assert process.stdout is not None
    try:
        process.stdin.write(
            json.dumps(initialize(1, protocolVersion="1999-01-01")).encode() + b"\n"
        )
        process.stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n' + PING)
        process.stdin.flush()
        answers = [json.loads(read_line(process.stdout, "answer")) for _ in range(2)]
        process.stdin.close()
        assert process.wait(GUARD_SECONDS) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdin.close()
        process.stdout.close()
    assert [answer["id"] for answer in answers] == [1, 2]
    assert answers[0]["result"]["protocolVersion"] == sdk_versions.LATEST_HANDSHAKE_VERSION
    assert answers[1]["result"] == {}


def test_the_versions_answered_early_are_the_sdks() -> None:
    assert _first_answer.HANDSHAKE_VERSIONS == sdk_versions.HANDSHAKE_PROTOCOL_VERSIONS
    assert _first_answer.MODERN_VERSIONS == sdk_versions.MODERN_PROTOCOL_VERSIONS


CLAUDE_CODE = {
    "name": "claude-code",
    "title": "Claude Code",
    "version": "2.1.332",
    "description": "Anthropic's agentic coding tool",
    "websiteUrl": "https://claude.com/claude-code",
}

#: First requests answered early: each answer must be the SDK's.
ANSWERED = [
    *(
        initialize(1, protocolVersion=version)
        for version in sdk_versions.HANDSHAKE_PROTOCOL_VERSIONS
    ),
    initialize("a-string-id"),
    initialize(-(2**53) + 1),
    initialize(0, capabilities={"roots": {"listChanged": True}, "elicitation": {}}),
    initialize(
        2,
        capabilities={
            "roots": {"listChanged": False},
            "sampling": {"context": {}, "tools": {}},
            "elicitation": {"form": {}, "url": {}},
        },
    ),
    initialize(3, clientInfo={"name": "claude-code", "title": "Claude Code", "version": "2.1.0"}),
    initialize(4, clientInfo={"name": "Клиент ✓", "version": "1"}),
    discover(5),
    # Claude Code's first request (its discovery probe), and its initialize.
    discover(
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
    initialize(
        0,
        protocolVersion="2025-11-25",
        capabilities={"roots": {"listChanged": True}, "elicitation": {"form": {}, "url": {}}},
        clientInfo=CLAUDE_CODE,
    ),
    # Codex's.
    initialize(
        0,
        capabilities={"elicitation": {}},
        clientInfo={"name": "codex-mcp-client", "title": "Codex", "version": "0.50.0"},
    ),
    discover(6, **{f"{META}clientCapabilities": {"extensions": {f"{META}tasks": {}}}}),
    discover(
        7,
        **{
            f"{META}clientCapabilities": {
                "extensions": {f"{META}tasks": {}, "com.example/other": {}},
                "roots": {"listChanged": True},
            }
        },
    ),
]

#: First requests left to the SDK: anything the SDK might read otherwise.
DECLINED = [
    initialize(1, protocolVersion="2026-07-28"),
    initialize(1, protocolVersion="1999-01-01"),
    initialize(1, capabilities={"roots": {"listChanged": "yes"}}),
    initialize(1, capabilities={"sampling": {"context": True}}),
    initialize(1, capabilities={"experimental": {}}),
    initialize(1, capabilities={"tasks": {}}),
    initialize(1, capabilities=[]),
    initialize(1, clientInfo={"name": "x"}),
    initialize(1, clientInfo={"name": "x", "version": 1}),
    initialize(1, clientInfo={"name": "x\ud800", "version": "1"}),
    initialize(1, clientInfo={"name": "x\n", "version": "1"}),
    initialize(1, clientInfo={"name": "x", "version": "1", "icons": []}),
    initialize(1, _meta={}),
    initialize(True),
    initialize(None),
    initialize(2**53),
    initialize(1.5),
    {**initialize(1), "jsonrpc": "1.0"},
    {key: value for key, value in initialize(1).items() if key != "params"},
    discover(1, **{f"{META}protocolVersion": "2025-06-18"}),
    discover(1, **{f"{META}clientCapabilities": {"extensions": {f"{META}tasks": {"x": 1}}}}),
    discover(1, **{f"{META}clientInfo": "x"}),
    {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}},
    {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {}},
    {"jsonrpc": "2.0", "method": "initialize", "params": initialize()["params"]},
    [initialize(1)],
    "initialize",
]


@pytest.mark.parametrize("request_", DECLINED, ids=range(len(DECLINED)))
def test_an_unusual_first_request_is_left_to_the_sdk(request_: Any) -> None:
    assert first_answer(request_, version=td.__version__) is None


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


async def test_every_first_answer_is_the_sdks() -> None:
    expected = await sdk_answers(ANSWERED)
    given = [first_answer(request, version=td.__version__) for request in ANSWERED]
    assert given == expected


@pytest.mark.parametrize(
    ("sent", "answered"),
    [
        (json.dumps(initialize(1)).encode() + b"\n" + PING, True),
        (json.dumps(discover("d")).encode() + b"\n" + PING, True),
        (json.dumps(initialize(1, protocolVersion="1999-01-01")).encode() + b"\n" + PING, False),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "par', False),
        (b"\xff\xfe not text\n" + PING, False),
        (b"", False),
        (json.dumps(initialize(1)).encode() + b"\r\n" + PING, True),
        (json.dumps(initialize(1)).replace(", ", ",\r").encode() + b"\n" + PING, False),
        (json.dumps(initialize(1)).encode() + b"\r" + PING, False),
    ],
    ids=[
        "initialize",
        "discover",
        "unknown version",
        "no newline",
        "not utf-8",
        "nothing",
        "crlf",
        "cr inside",
        "cr ends it",
    ],
)
def test_the_sdk_reads_the_whole_input_after_the_first_line(sent: bytes, answered: bool) -> None:
    input_read, input_write = os.pipe()
    output_read, output_write = os.pipe()
    try:
        first = _first_answer.FirstAnswer(
            td.__version__, input_fd=input_read, output_fd=output_write
        )
        os.write(input_write, sent)
        os.close(input_write)
        input_write = -1
        stdin = first.stdin()
        handed_on = stdin.read()
        os.close(output_write)
        output_write = -1
        with os.fdopen(output_read, "rb") as output:
            output_read = -1
            written = output.read()
        # The input descriptor itself reads nothing until restored.
        assert os.read(input_read, 10) == b""
        first.restore()
    finally:
        for fd in (input_read, input_write, output_read, output_write):
            if fd != -1:
                os.close(fd)
    if answered:
        line, rest = sent.split(b"\n", 1)
        request = json.loads(line)
        assert json.loads(written) == first_answer(request, version=td.__version__)
        assert first.answer == json.loads(written)
        replay, handed_rest = handed_on.split(b"\n", 1)
        assert json.loads(replay) == {**request, "id": first.private_id}
        assert handed_rest == rest
    else:
        assert written == b""
        assert first.answer is None
        assert handed_on == sent


def test_a_store_that_cannot_be_opened_ends_the_server_after_the_first_answer(
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
    assert [json.loads(line)["id"] for line in done.stdout.splitlines()] == [1]
    assert "cannot use the store" in done.stderr.decode()
