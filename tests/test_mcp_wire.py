"""``trio-delegate serve`` answers every line a client sends (contract §15).

The MCP SDK's strict JSON parser drops a line with a lone surrogate escape,
nesting past its limits or a huge number, and the client would wait for an
answer until its own timeout. These tests write such lines on the server's
stdin, as a JavaScript client encodes a model's text, and read the answers.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

pytest.importorskip("mcp")

import anyio
import mcp_types as types
import pydantic
from mcp.shared.message import SessionMessage

from trio_delegate.mcp._wire import mended, reread

from .helpers import mcp_initialize

PY = sys.executable

CONFIG = f"""
[[subagents]]
name = "echo"
description = "Echoes the task."
command = ['{PY}', "-c", "import sys; print(sys.stdin.read())"]
"""

#: Real seconds to wait for one answer: the server answers in milliseconds.
ANSWER_SECONDS = 15


def call_line(request_id: int, arguments_json: str, tool: str = "delegate_task") -> bytes:
    """A tools/call request whose arguments are *arguments_json*, as raw text."""
    head = f'{{"jsonrpc":"2.0","id":{request_id},"method":"tools/call","params":'
    return f'{head}{{"name":"{tool}","arguments":{arguments_json}}}}}'.encode()


# -- reading a rejected line again ---------------------------------------------------


def test_a_lone_surrogate_is_kept_for_the_tools_to_refuse() -> None:
    message = reread(call_line(3, '{"subagent":"echo","task":"\\ud800"}').decode())
    assert isinstance(message, types.JSONRPCRequest)
    assert message.id == 3
    assert message.params is not None
    assert message.params["arguments"]["task"] == "\ud800"


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        ('{"task":' + "[" * 50_000 + "]" * 50_000 + "}", "nests too deeply"),
        ('{"timeout":' + "9" * 5_000 + "}", "a number of thousands of digits"),
        ('{"task": nope}', "not JSON"),
    ],
    ids=["deep", "huge-number", "not-json"],
)
def test_an_unreadable_request_is_answered_for_its_id(arguments: str, fragment: str) -> None:
    answer = reread(call_line(7, arguments).decode())
    assert isinstance(answer, types.JSONRPCError)
    assert answer.id == 7
    assert answer.error.code == types.PARSE_ERROR
    assert fragment in answer.error.message
    assert len(answer.error.message) < 400


def test_a_string_id_is_answered_too() -> None:
    line = '{"jsonrpc":"2.0","id":"req-\\u00e9","method":"tools/call","params":' + "[" * 50_000
    answer = reread(line)
    assert isinstance(answer, types.JSONRPCError)
    assert answer.id == "req-é"


def test_a_request_whose_id_cannot_be_written_back_is_answered_with_a_null_id() -> None:
    # The SDK's writer cannot encode a lone surrogate: echoing the id would
    # end the connection.
    answer = reread('{"jsonrpc":"2.0","id":"\\ud800","method":"tools/list"}')
    assert isinstance(answer, types.JSONRPCError)
    assert answer.id is None
    assert answer.error.code == types.INVALID_REQUEST
    assert "id is not valid Unicode" in answer.error.message
    unreadable = reread('{"jsonrpc":"2.0","id":"\\udfff","method":' + "[" * 50_000)
    assert isinstance(unreadable, types.JSONRPCError)
    assert unreadable.id is None
    assert unreadable.error.code == types.PARSE_ERROR


def test_a_progress_token_that_cannot_be_written_back_is_refused_for_the_id() -> None:
    line = call_line(8, '{"subagent":"echo","task":"x"}').decode()
    line = line.replace('"params":{', '"params":{"_meta":{"progressToken":"\\ud800"},', 1)
    answer = reread(line)
    assert isinstance(answer, types.JSONRPCError)
    assert answer.id == 8
    assert answer.error.code == types.INVALID_REQUEST
    assert "progress token is not valid Unicode" in answer.error.message


def test_readable_json_that_is_not_a_message_is_an_invalid_request() -> None:
    answer = reread('{"jsonrpc":"1.0","id":4,"method":"tools/call","extra":"\\ud800"}')
    assert isinstance(answer, types.JSONRPCError)
    assert answer.id == 4
    assert answer.error.code == types.INVALID_REQUEST


def test_without_an_id_nothing_is_answered() -> None:
    # A notification, or an id nested where it cannot be told from a value.
    assert reread('{"jsonrpc":"2.0","method":"x","params":' + "[" * 50_000) is None
    assert reread('{"params":{"a":1},"id":5,"jsonrpc":"2.0","method":' + "[" * 50_000) is None


def rejected(line: str) -> pydantic.ValidationError:
    """What the SDK's transport hands on for a line its parser rejects."""
    try:
        types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except pydantic.ValidationError as exc:
        return exc
    raise AssertionError(f"the SDK's parser read {line!r}")


async def test_the_stream_passes_on_what_it_mends_and_ends_with_its_source() -> None:
    source_in, source = anyio.create_memory_object_stream[Any](10)
    to_client, client = anyio.create_memory_object_stream[Any](10)
    with source, to_client, client:
        await source_in.send(rejected(call_line(2, '{"task":"\\ud800"}').decode()))
        await source_in.send(rejected(call_line(3, "[" * 50_000).decode()))
        other = ValueError("not about a line")
        await source_in.send(other)
        await source_in.aclose()
        async with mended(source, to_client) as readable:
            items = [item async for item in readable]
        answer = client.receive_nowait().message
    first, second = items
    assert isinstance(first, SessionMessage)
    assert isinstance(first.message, types.JSONRPCRequest)
    assert second is other
    assert isinstance(answer, types.JSONRPCError)
    assert answer.id == 3


async def test_an_answer_for_a_closed_connection_is_dropped_quietly() -> None:
    source_in, source = anyio.create_memory_object_stream[Any](10)
    to_client, client = anyio.create_memory_object_stream[Any](10)
    with source, to_client:
        await client.aclose()  # the client is gone
        await source_in.send(rejected(call_line(3, "[" * 50_000).decode()))
        await source_in.aclose()
        async with mended(source, to_client) as readable:
            assert [item async for item in readable] == []


# -- through a real server process ---------------------------------------------------


class Wire:
    """Raw lines to a server process, and its answers by id."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.buffer = b""

    async def send(self, line: bytes) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send_all(line + b"\n")

    async def answer(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        with trio.fail_after(ANSWER_SECONDS):
            while b"\n" not in self.buffer:
                chunk = await self.process.stdout.receive_some()
                assert chunk, f"the server closed its stdout; it had sent {self.buffer!r}"
                self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        answer: dict[str, Any] = json.loads(line)
        return answer


async def test_the_server_answers_every_hostile_line(tmp_path: Path) -> None:
    config = tmp_path / "server.toml"
    config.write_text(CONFIG)
    process = await trio.lowlevel.open_process(
        [PY, "-m", "trio_delegate", "serve", "--config", str(config)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    wire = Wire(process)
    try:
        await wire.send(json.dumps(mcp_initialize()).encode())
        assert (await wire.answer())["id"] == 1
        await wire.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')

        # A lone surrogate reaches the tools, which name the field.
        await wire.send(call_line(2, '{"subagent":"echo","task":"\\ud800"}'))
        answer = await wire.answer()
        assert answer["id"] == 2
        assert answer["result"]["isError"] is True
        assert "task must be valid Unicode text" in answer["result"]["content"][0]["text"]

        # What no parser reads is answered with an error for its id.
        await wire.send(call_line(3, '{"task":' + "[" * 50_000 + "]" * 50_000 + "}"))
        await wire.send(call_line(4, '{"run_id":"run_x","timeout":' + "9" * 5_000 + "}"))
        answers = [await wire.answer(), await wire.answer()]
        assert [a["id"] for a in answers] == [3, 4]
        assert all(a["error"]["code"] == types.PARSE_ERROR for a in answers)

        # An id the server could not write back is answered with a null id.
        await wire.send(b'{"jsonrpc":"2.0","id":"\\ud800","method":"tools/list"}')
        answer = await wire.answer()
        assert answer["id"] is None
        assert answer["error"]["code"] == types.INVALID_REQUEST

        # And the connection still works.
        await wire.send(call_line(5, '{"subagent":"echo","task":"still here"}'))
        answer = await wire.answer()
        assert answer["id"] == 5
        assert answer["result"]["isError"] is False
        assert "still here" in answer["result"]["content"][0]["text"]
    finally:
        assert process.stdin is not None
        await process.stdin.aclose()
        with trio.fail_after(ANSWER_SECONDS):
            await process.wait()
    assert process.returncode == 0
