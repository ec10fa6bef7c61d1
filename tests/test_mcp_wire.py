"""``trio-delegate serve`` answers every line a client sends (contract §15).

The MCP SDK's strict JSON parser drops a line with a lone surrogate escape,
nesting past its limits or a huge number, and the client would wait for an
answer until its own timeout. These tests write such lines on the server's
stdin, as a JavaScript client encodes a model's text, and read the answers.
"""

from __future__ import annotations

import io
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
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

from trio_delegate.mcp._wire import (
    MAX_BATCH_ELEMENTS,
    Screened,
    mended,
    not_a_message,
    reread,
    screen,
)

from .helpers import mcp_initialize, timed_steps

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


def answered(outcome: object) -> list[types.JSONRPCError]:
    """*outcome* of :func:`reread`, which must be errors to write to the client."""
    assert isinstance(outcome, list), f"{outcome!r} is passed on, not answered"
    assert all(isinstance(answer, types.JSONRPCError) for answer in outcome)
    return outcome


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
    [answer] = answered(reread(call_line(7, arguments).decode()))
    assert answer.id == 7
    assert answer.error.code == types.PARSE_ERROR
    assert fragment in answer.error.message
    assert len(answer.error.message) < 400


def test_a_string_id_is_answered_too() -> None:
    line = '{"jsonrpc":"2.0","id":"req-\\u00e9","method":"tools/call","params":' + "[" * 50_000
    [answer] = answered(reread(line))
    assert answer.id == "req-é"


def test_a_request_whose_id_cannot_be_written_back_is_answered_with_a_null_id() -> None:
    # The SDK's writer cannot encode a lone surrogate: echoing the id would
    # end the connection.
    [answer] = answered(reread('{"jsonrpc":"2.0","id":"\\ud800","method":"tools/list"}'))
    assert answer.id is None
    assert answer.error.code == types.INVALID_REQUEST
    assert "id is not valid Unicode" in answer.error.message
    [unreadable] = answered(reread('{"jsonrpc":"2.0","id":"\\udfff","method":' + "[" * 50_000))
    assert unreadable.id is None
    assert unreadable.error.code == types.PARSE_ERROR


def test_a_progress_token_that_cannot_be_written_back_is_refused_for_the_id() -> None:
    line = call_line(8, '{"subagent":"echo","task":"x"}').decode()
    line = line.replace('"params":{', '"params":{"_meta":{"progressToken":"\\ud800"},', 1)
    [answer] = answered(reread(line))
    assert answer.id == 8
    assert answer.error.code == types.INVALID_REQUEST
    assert "progress token is not valid Unicode" in answer.error.message


def test_readable_json_that_is_not_a_message_is_an_invalid_request() -> None:
    [answer] = answered(reread('{"jsonrpc":"1.0","id":4,"method":"tools/call","extra":"\\ud800"}'))
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


async def start_server(tmp_path: Path) -> Wire:
    """A ``serve`` process of the echo subagent, with raw lines to it."""
    config = tmp_path / "server.toml"
    config.write_text(CONFIG)
    process = await trio.lowlevel.open_process(
        [PY, "-m", "trio_delegate", "serve", "--config", str(config)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    return Wire(process)


async def test_the_server_answers_every_hostile_line(tmp_path: Path) -> None:
    wire = await start_server(tmp_path)
    process = wire.process
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


# -- requests whose id MCP does not take, and batches --------------------------------

#: Ids that are neither a string nor an integer, as a client writes them.
ODD_IDS = ["1.0", "1.5", "1e3", "true", "null", '{"n":1}', "[1]"]

#: A request of each kind the server answers, with the id left open.
REQUESTS = {
    "initialize": json.dumps(mcp_initialize(request_id=0)).replace('"id": 0', '"id": {id}'),
    "tools/call": call_line(0, '{"subagent":"echo","task":"x"}')
    .decode()
    .replace('"id":0', '"id":{id}'),
    "ping": '{{"jsonrpc":"2.0","id":{id},"method":"ping"}}',
}


def request(method: str, request_id: str) -> bytes:
    """A *method* request whose id is *request_id*, written as it is."""
    template = REQUESTS[method]
    if method != "ping":
        template = template.replace("{", "{{").replace("}", "}}").replace("{{id}}", "{id}")
    return template.format(id=request_id).encode()


def is_invalid_request(answer: dict[str, Any], request_id: Any) -> bool:
    error = answer.get("error")
    return (
        answer.get("id", "missing") == request_id
        and isinstance(error, dict)
        and error.get("code") == types.INVALID_REQUEST
    )


@pytest.mark.parametrize("request_id", ODD_IDS)
def test_a_request_with_an_odd_id_is_screened_out(request_id: str) -> None:
    for method in REQUESTS:
        [answer] = answered(screen(request(method, request_id).decode() + "\n"))
        assert answer.id is None
        assert answer.error.code == types.INVALID_REQUEST
        assert 'its "id" is' in answer.error.message
        assert "neither a string nor an integer" in answer.error.message


@pytest.mark.parametrize(
    "line",
    [
        '{"jsonrpc":"2.0","method":"ping"}',  # a notification
        '{"jsonrpc":"2.0","id":1.5,"result":{}}',  # a response
        '{"jsonrpc":"2.0","id":null,"error":{"code":1,"message":"m"}}',
        '{"jsonrpc":"2.0","id":"a","method":"ping"}',
        '{"jsonrpc":"2.0","id":-12,"method":"ping","params":{"id":1.5,"x":{"id":null}}}',
        "not json, with an id: 1.5",
        '{"jsonrpc":"2.0","id":1.5,"method":' + "[" * 50_000,  # for reread to answer
    ],
)
def test_other_lines_pass_the_screen(line: str) -> None:
    assert screen(line + "\n") is None


def test_an_id_named_with_escapes_is_screened_too() -> None:
    for name in ("\\u0069d", "i\\u0064", "\\u0069\\u0064"):
        line = f'{{"jsonrpc":"2.0", "{name}" : 2.5, "method":"ping"}}'
        [answer] = answered(screen(line))
        assert answer.id is None
        assert "2.5" in answer.error.message


def test_an_odd_id_the_sdk_cannot_parse_is_answered_on_reading_again() -> None:
    # NaN is no JSON for the SDK's parser; Python's reads it as a float id.
    [answer] = answered(reread('{"jsonrpc":"2.0","id":NaN,"method":"ping"}'))
    assert answer.id is None
    assert answer.error.code == types.INVALID_REQUEST
    [deep] = answered(reread('{"jsonrpc":"2.0","id":1.5,"method":"ping","params":' + "[" * 50_000))
    assert deep.id is None
    assert deep.error.code == types.PARSE_ERROR


def test_a_response_is_never_answered() -> None:
    # The SDK refuses these as messages; answering them would confuse the client.
    assert not_a_message(rejected('{"jsonrpc":"2.0","id":1.5,"result":{}}')) is None
    assert not_a_message(rejected('{"jsonrpc":"2.0","id":[],"error":{"code":1}}')) is None
    # One the SDK's parser rejects (a lone surrogate) goes on to the server, as it is.
    response = reread('{"jsonrpc":"2.0","id":3,"error":{"code":1,"message":"\\ud800"}}')
    assert isinstance(response, types.JSONRPCError)
    assert response.error.message == "\ud800"


def batch(*elements: str) -> str:
    return "[" + ",".join(elements) + "]\n"


def test_a_batch_of_notifications_and_responses_is_not_answered() -> None:
    line = batch('{"jsonrpc":"2.0","method":"ping"}', '{"jsonrpc":"2.0","id":1,"result":{}}')
    assert screen(line) == []


def test_each_request_in_a_batch_is_answered_for_its_id() -> None:
    answers = answered(
        screen(
            batch(
                request("tools/call", "7").decode(),
                request("ping", '"eight"').decode(),
                '{"jsonrpc":"2.0","method":"notifications/initialized"}',
                '{"jsonrpc":"2.0","id":5,"result":{}}',
                '{"jsonrpc":"2.0","id":9,"method":"ping"}',
            )
        )
    )
    assert [(a.id, a.error.code) for a in answers] == [
        (7, types.INVALID_REQUEST),
        ("eight", types.INVALID_REQUEST),
        (9, types.INVALID_REQUEST),
    ]
    assert "batch" in answers[0].error.message


@pytest.mark.parametrize(
    ("line", "ids", "fragment"),
    [
        ("[]", [None], "an empty batch"),
        (" [ ] ", [None], "an empty batch"),
        ("[1, 2, 3]", [None], "3 of its elements"),
        (batch('{"id":1.5,"method":"ping"}', '"x"', '{"id":4,"method":"ping"}'), [4, None], "2 of"),
        (batch('{"id":4,"method":"ping"}', "nope"), [4, None], "element 2 is not JSON"),
        (batch('{"id":4,"method":"ping"}') + "x", [4, None], "text follows the closing ]"),
        ('[{"id":4} {"id":5}]', [4, None], "a comma or the closing ] is missing"),
        ("[" * 100_000 + "]" * 100_000, [None], "element 1 nests too deeply"),
        (batch('{"id":6,"params":' + "[" * 100_000 + "]" * 100_000 + "}"), [None], "nests"),
    ],
    ids=[
        "empty",
        "empty-spaced",
        "numbers",
        "odd-ids",
        "broken",
        "trailing",
        "no-comma",
        "deep",
        "deep-element",
    ],
)
def test_what_a_batch_holds_without_an_id_to_answer_gets_one_null_id_error(
    line: str, ids: list[Any], fragment: str
) -> None:
    answers = answered(screen(line))
    assert [a.id for a in answers] == ids
    assert fragment in answers[-1].error.message
    broken = any(word in fragment for word in ("JSON", "follows", "comma", "nests"))
    assert answers[-1].error.code == (types.PARSE_ERROR if broken else types.INVALID_REQUEST)


def test_only_the_first_elements_of_a_long_batch_are_read() -> None:
    count = MAX_BATCH_ELEMENTS + 5
    answers = answered(screen(batch(*(request("ping", str(n)).decode() for n in range(count)))))
    assert [a.id for a in answers] == [*range(MAX_BATCH_ELEMENTS), None]
    assert f"only its first {MAX_BATCH_ELEMENTS:,} elements were read" in answers[-1].error.message


def test_a_batch_the_sdk_refuses_unscreened_is_answered_per_request() -> None:
    # Without the screen (a stdin that is no descriptor of the process), the SDK
    # hands on its union errors.
    line = batch(request("ping", "1").decode(), request("ping", "2").decode(), "3")
    answers = answered(not_a_message(rejected(line)))
    assert [a.id for a in answers] == [1, 2, None]


async def test_a_huge_batch_never_holds_the_event_loop() -> None:
    # The SDK's parser spends seconds on the union errors of 100,000 elements,
    # on the event loop; screened, the line never reaches it.
    huge = batch(*(request("tools/call", str(n)).decode() for n in range(100_000)))
    written = io.StringIO()
    lines = Screened(io.StringIO(huge + request("ping", "-1").decode() + "\n"))
    stdout = anyio.wrap_file(written)
    with trio.fail_after(ANSWER_SECONDS * 4):
        async with (
            stdio_server(stdin=lines, stdout=stdout) as (read, write),
            read,
            write,
            timed_steps() as timer,
            mended(read, write, lines) as readable,
        ):
            items = [item async for item in readable]
    timer.check()
    [ping] = items
    assert isinstance(ping, SessionMessage)
    assert isinstance(ping.message, types.JSONRPCRequest)
    answers = [json.loads(line) for line in written.getvalue().splitlines()]
    assert [a["id"] for a in answers] == [*range(MAX_BATCH_ELEMENTS), None]


# -- the same through a real server process ---------------------------------------


async def answers_to_the_end(wire: Wire) -> list[dict[str, Any]]:
    """Every answer up to that of a ping sent last, then every one until the server exits.

    The answers to the lines before the ping are written before it is read,
    so anything after it, up to the end of the output, would be a second answer.
    """
    await wire.send(request("ping", '"last"'))
    answers = [await wire.answer()]
    while answers[-1].get("id") != "last":
        answers.append(await wire.answer())
    process = wire.process
    assert process.stdin is not None
    assert process.stdout is not None
    await process.stdin.aclose()
    with trio.fail_after(ANSWER_SECONDS):
        while chunk := await process.stdout.receive_some():
            wire.buffer += chunk
        await process.wait()
    assert wire.buffer == b"", f"answered more than once: {wire.buffer[:500]!r}"
    assert process.returncode == 0
    return answers[:-1]


@pytest.mark.parametrize(
    ("request_id", "method"),
    [(odd, list(REQUESTS)[n % len(REQUESTS)]) for n, odd in enumerate(ODD_IDS)],
)
async def test_a_first_line_with_an_odd_id_gets_exactly_one_answer(
    tmp_path: Path, request_id: str, method: str
) -> None:
    wire = await start_server(tmp_path)
    await wire.send(request(method, request_id))
    answer = await wire.answer()
    assert is_invalid_request(answer, None), answer
    assert "neither a string nor an integer" in answer["error"]["message"]
    # The connection goes on: a proper handshake is answered.
    await wire.send(json.dumps(mcp_initialize(request_id=2)).encode())
    assert (await wire.answer())["id"] == 2
    assert await answers_to_the_end(wire) == []


async def test_later_lines_with_odd_ids_get_exactly_one_answer_each(tmp_path: Path) -> None:
    wire = await start_server(tmp_path)
    await wire.send(json.dumps(mcp_initialize()).encode())
    assert (await wire.answer())["id"] == 1
    await wire.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
    for method in REQUESTS:
        for request_id in ODD_IDS:
            await wire.send(request(method, request_id))
    # Neither a notification nor a response is answered, whatever its id.
    await wire.send(b'{"jsonrpc":"2.0","method":"ping"}')
    await wire.send(b'{"jsonrpc":"2.0","method":"tools/call","params":{"name":"list"}}')
    for request_id in ODD_IDS:
        await wire.send(f'{{"jsonrpc":"2.0","id":{request_id},"result":{{}}}}'.encode())
        error = f'{{"jsonrpc":"2.0","id":{request_id},"error":{{"code":-1,"message":"m"}}}}'
        await wire.send(error.encode())
    answers = await answers_to_the_end(wire)
    assert len(answers) == len(REQUESTS) * len(ODD_IDS), answers
    assert all(is_invalid_request(answer, None) for answer in answers), answers


async def test_a_batch_gets_an_answer_for_each_request(tmp_path: Path) -> None:
    wire = await start_server(tmp_path)
    # As the first line, a batch is no handshake: it is answered, and the connection goes on.
    await wire.send(batch(request("initialize", "1").decode()).strip().encode())
    assert is_invalid_request(await wire.answer(), 1)
    await wire.send(json.dumps(mcp_initialize(request_id=2)).encode())
    assert (await wire.answer())["id"] == 2
    await wire.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')

    # Two tools/call requests on one line: each gets an error for its id.
    await wire.send(
        batch(request("tools/call", "7").decode(), request("tools/call", '"8"').decode())
        .strip()
        .encode()
    )
    first, second = await wire.answer(), await wire.answer()
    assert is_invalid_request(first, 7), first
    assert is_invalid_request(second, "8"), second
    assert "batch" in first["error"]["message"]
    # An empty batch, or one of no requests, gets one error for a null id.
    await wire.send(b"[]")
    await wire.send(
        b'[1, "two", {"jsonrpc":"2.0","method":"ping"}, {"jsonrpc":"2.0","id":4,"result":{}}]'
    )
    empty, nothing = await wire.answer(), await wire.answer()
    assert is_invalid_request(empty, None)
    assert is_invalid_request(nothing, None)
    assert "empty batch" in empty["error"]["message"]
    assert "2 of its elements" in nothing["error"]["message"]
    assert await answers_to_the_end(wire) == []


async def test_a_huge_batch_is_answered_in_bounded_time(tmp_path: Path) -> None:
    wire = await start_server(tmp_path)
    await wire.send(json.dumps(mcp_initialize()).encode())
    assert (await wire.answer())["id"] == 1
    elements = [request("tools/call", str(n)).decode() for n in range(100_000)]
    await wire.send(batch(*elements).strip().encode())
    deep = '{"jsonrpc":"2.0","id":5,"method":"ping","params":' + "[" * 100_000 + "]" * 100_000 + "}"
    await wire.send(batch(deep).strip().encode())
    answers = await answers_to_the_end(wire)
    assert [a["id"] for a in answers] == [*range(MAX_BATCH_ELEMENTS), None, None]
    assert f"only its first {MAX_BATCH_ELEMENTS:,} elements" in answers[-2]["error"]["message"]
    assert answers[-1]["error"]["code"] == types.PARSE_ERROR
    assert "element 1 nests too deeply" in answers[-1]["error"]["message"]
