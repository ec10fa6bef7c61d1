"""The child talks back over MCP (contract §19), line by line against a real server process.

Raw JSON-RPC lines to ``tests/fakes/talking.py`` (``serve_stdio`` over
subagents that ask and report): on 2026-07-28 requests that declare the
Tasks extension (and form elicitation, or not), an asking run is an
``input_required`` task answered with ``tasks/update``; on a handshake-era
connection, a foreground call with a ``progressToken`` hears the child's
reports as ``notifications/progress``.

Every wait is for a line of the server's, or for a gate file a run marks as
reached; the clock is never slept on.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from . import mcp_lines as lines
from .mcp_lines import Wire, envelope, stop

PY = sys.executable
ROOT = Path(__file__).resolve().parent.parent


def start(folder: Path, *arguments: str, command: list[str] | None = None) -> Wire:
    """A server process whose requests declare form elicitation: the talking fake, or
    *command*."""
    gates = folder / "gates"
    return lines.start(
        command or [PY, "-m", "tests.fakes.talking", str(gates), *arguments],
        gates,
        cwd=ROOT,
        elicit=True,
    )


@pytest.fixture(scope="module")
def modern_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Wire]:
    wire = start(tmp_path_factory.mktemp("talk-modern"))
    try:
        yield wire
    finally:
        stop(wire)


@pytest.fixture
async def wire(modern_process: Wire) -> AsyncIterator[Wire]:
    async with modern_process.attached() as attached:
        yield attached


def without_meta(value: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in value.items() if k not in ("_meta", "resultType")}


async def asking_task(wire: Wire, subagent: str, task: str = "t", **options: Any) -> str:
    created = await wire.call(
        "delegate_task", {"subagent": subagent, "task": task, "background": True}, **options
    )
    assert created["resultType"] == "task", created
    task_id: str = created["taskId"]
    return task_id


# -- the Tasks path: input_required, inputRequests, tasks/update -------------------------


async def test_an_asking_run_is_input_required_with_stable_keys_and_answered_by_update(
    wire: Wire,
) -> None:
    task_id = await asking_task(wire, "ask_text", "the shed")
    first = await wire.until(task_id, "input_required")
    requests = first["inputRequests"]
    [(key, request)] = requests.items()
    assert key.startswith("q_")
    assert request == {
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": "Which colour for the shed?",
            "requestedSchema": {
                "type": "object",
                "properties": {"answer": {"type": "string"}},
                "required": ["answer"],
            },
        },
    }
    # The same key on every poll while the question is open.
    again = await wire.get(task_id)
    assert again["inputRequests"] == requests
    assert again["status"] == "input_required"
    ack = await wire.update(task_id, {key: {"action": "accept", "content": {"answer": "red"}}})
    assert without_meta(ack["result"]) == {}
    done = await wire.until(task_id, "completed")
    assert "inputRequests" not in done
    assert done["result"]["structuredContent"]["final_result"] == "the shed: red"


async def test_a_form_question_is_asked_as_it_is_and_answered_with_its_fields(wire: Wire) -> None:
    task_id = await asking_task(wire, "ask_form")
    task = await wire.until(task_id, "input_required")
    [(key, request)] = task["inputRequests"].items()
    assert request["params"]["requestedSchema"] == {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
    }
    content = {"name": "Ada", "age": 36}
    await wire.update(task_id, {key: {"action": "accept", "content": content}})
    done = await wire.until(task_id, "completed")
    assert done["result"]["structuredContent"]["final_result"] == content


@pytest.mark.parametrize(("action", "reason"), [("decline", "declined"), ("cancel", "cancelled")])
async def test_decline_and_cancel_decline_the_question(
    wire: Wire, action: str, reason: str
) -> None:
    task_id = await asking_task(wire, "ask_text", "the gate")
    key = next(iter((await wire.until(task_id, "input_required"))["inputRequests"]))
    await wire.update(task_id, {key: {"action": action}})
    done = await wire.until(task_id, "completed")
    assert done["result"]["structuredContent"]["final_result"] == (
        f"the gate: declined (the client {reason})"
    )


async def test_stale_unknown_and_other_tasks_keys_are_ignored(wire: Wire) -> None:
    task_id = await asking_task(wire, "ask_twice")
    first = next(iter((await wire.until(task_id, "input_required"))["inputRequests"]))
    other_id = await asking_task(wire, "ask_text", "other")
    other_key = next(iter((await wire.until(other_id, "input_required"))["inputRequests"]))
    # Another task's key, a made-up key: ignored, with the empty ack.
    ack = await wire.update(
        task_id,
        {other_key: {"action": "accept", "content": {"answer": "no"}}, "q_made_up": {}},
    )
    assert without_meta(ack["result"]) == {}
    assert (await wire.get(other_id))["status"] == "input_required"
    await wire.update(task_id, {first: {"action": "accept", "content": {"answer": "one"}}})

    def second_asked(task: dict[str, Any]) -> bool:
        return task["status"] == "input_required" and first not in task["inputRequests"]

    task = await wire.get(task_id)
    while not second_asked(task):
        task = await wire.until(task_id, "input_required")
    [second] = task["inputRequests"]
    assert second != first  # a key is never reused
    # The answered key again (stale): ignored; the open one stays open.
    await wire.update(task_id, {first: {"action": "accept", "content": {"answer": "again"}}})
    assert list((await wire.get(task_id))["inputRequests"]) == [second]
    await wire.update(task_id, {second: {"action": "accept", "content": {"answer": "two"}}})
    done = await wire.until(task_id, "completed")
    assert done["result"]["structuredContent"]["final_result"] == ["one", "two"]
    # An ended task that is still known: the empty ack.
    late = await wire.update(task_id, {second: {"action": "decline"}})
    assert without_meta(late["result"]) == {}
    await wire.update(other_id, {other_key: {"action": "decline"}})
    await wire.until(other_id, "completed")


@pytest.mark.parametrize(
    ("responses", "expected"),
    [
        ("just text", "inputResponses must be an object"),
        (["a"], "inputResponses must be an object"),
        ("KEY:1", "must be an object with action"),
        ("KEY:{'action': 'maybe'}", "must be an object with action"),
        ("KEY:{'action': 'accept'}", "content must be an object with the field 'answer'"),
        ("KEY:{'action': 'accept', 'content': {'answer': 5}}", "does not satisfy its schema"),
        ("KEY:deep", "KEY"),
        ("KEY:surrogate", "lone surrogate"),
    ],
)
async def test_a_bad_update_is_invalid_params_naming_the_key_and_the_question_stays_open(
    wire: Wire, responses: Any, expected: str
) -> None:
    task_id = await asking_task(wire, "ask_text", "hostile")
    key = next(iter((await wire.until(task_id, "input_required"))["inputRequests"]))
    if isinstance(responses, str) and responses.startswith("KEY:"):
        spec = responses[4:]
        response: Any
        if spec == "deep":
            deep: Any = "x"
            for _ in range(500):
                deep = [deep]
            response = {"action": "accept", "content": {"answer": deep}}
        elif spec == "surrogate":
            response = {"action": "accept", "content": {"answer": "\ud800"}}
        else:
            response = eval(spec)
        responses = {key: response}
    answer = await wire.update(task_id, responses)
    error = answer["error"]
    assert error["code"] == -32602, error
    assert expected.replace("KEY", key) in error["message"]
    task = await wire.get(task_id)
    assert task["status"] == "input_required"
    assert list(task["inputRequests"]) == [key]
    await wire.update(task_id, {key: {"action": "accept", "content": {"answer": "fine"}}})
    done = await wire.until(task_id, "completed")
    assert done["result"]["structuredContent"]["final_result"] == "hostile: fine"


async def test_a_task_of_another_owner_is_unknown_to_update(wire: Wire, tmp_path: Path) -> None:
    other = start(tmp_path)
    try:
        async with other.attached():
            task_id = await asking_task(other, "ask_text")
            key = next(iter((await other.until(task_id, "input_required"))["inputRequests"]))
            answer = await wire.update(task_id, {key: {"action": "decline"}})
            assert answer["error"]["code"] == -32602
            assert task_id in answer["error"]["message"]
            assert (await other.get(task_id))["status"] == "input_required"
            await other.update(task_id, {key: {"action": "decline"}})
            await other.until(task_id, "completed")
    finally:
        stop(other)


async def test_without_form_elicitation_the_task_is_working_with_the_question_in_its_message(
    wire: Wire,
) -> None:
    plain = envelope()
    task_id = await asking_task(wire, "ask_text", "the door", meta=plain)
    # The elicit-declaring read waits for the question; the plain one tells it in words.
    key = next(iter((await wire.until(task_id, "input_required"))["inputRequests"]))
    task = await wire.get(task_id, meta=plain)
    assert task["status"] == "working"
    assert "inputRequests" not in task
    assert "Which colour for the door?" in task["statusMessage"]
    assert key in task["statusMessage"]
    assert "answer_subagent" in task["statusMessage"]
    # The tool answers it.
    ack = await wire.call(
        "answer_subagent",
        {"run_id": task_id, "answer": "green"},
        meta=envelope(tasks=False, elicit=True),
    )
    assert ack["structuredContent"]["accepted"] is True
    done = await wire.until(task_id, "completed", meta=plain)
    assert done["result"]["structuredContent"]["final_result"] == "the door: green"


async def test_progress_rides_the_status_message(wire: Wire) -> None:
    task_id = await asking_task(wire, "report_then_ask")
    task = await wire.until(task_id, "input_required")
    assert task["statusMessage"].endswith("progress: halfway (1/2)")
    plain = await wire.get(task_id, meta=envelope())
    assert "progress: halfway (1/2)" in plain["statusMessage"]
    key = next(iter(task["inputRequests"]))
    await wire.update(task_id, {key: {"action": "accept", "content": {"answer": "yes"}}})
    done = await wire.until(task_id, "completed")
    assert done["result"]["structuredContent"]["final_result"] == "went on: yes"


async def test_a_foreground_call_whose_child_asks_is_a_task_at_once(wire: Wire) -> None:
    created = await wire.call("delegate_task", {"subagent": "ask_text", "task": "fg"})
    assert created["resultType"] == "task"
    assert created["status"] == "input_required"
    [key] = created["inputRequests"]
    await wire.update(created["taskId"], {key: {"action": "accept", "content": {"answer": "x"}}})
    done = await wire.until(created["taskId"], "completed")
    assert done["result"]["structuredContent"]["final_result"] == "fg: x"


async def test_a_listener_hears_every_change_of_status_or_question(wire: Wire) -> None:
    task_id = await asking_task(wire, "ask_twice")
    await wire.until(task_id, "input_required")
    subscription = await wire.listen([task_id])

    async def heard() -> dict[str, Any]:
        return await wire.on_stream("notifications/tasks", subscription)

    # At once: the task is already asking.
    now = await heard()
    assert now["status"] == "input_required"
    [first] = now["inputRequests"]
    ack = await wire.update(task_id, {first: {"action": "accept", "content": {"answer": "1"}}})
    assert "result" in ack, ack
    # Back to working (or straight to the second question), then the second question.
    statuses = []
    while True:
        change = await heard()
        statuses.append(change["status"])
        if change["status"] == "input_required" and first not in change["inputRequests"]:
            break
    assert statuses[-1] == "input_required"
    [second] = change["inputRequests"]
    await wire.update(task_id, {second: {"action": "accept", "content": {"answer": "2"}}})
    while change["status"] != "completed":
        change = await heard()
    assert change["result"]["structuredContent"]["final_result"] == ["1", "2"]
    await wire.unlisten(subscription)


async def test_a_task_declaring_foreground_call_never_hears_progress_notices(wire: Wire) -> None:
    request_id = wire.fresh_id()
    meta = {**envelope(elicit=True), "progressToken": "tok-tasks"}
    await wire.send(
        {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "tools/call",
            "params": {
                "name": "delegate_task",
                "arguments": {"subagent": "stepper", "task": "quiet"},
                "_meta": meta,
            },
        }
    )
    runs: list[dict[str, Any]] = []
    while not runs:  # until the call's run is admitted: each try is a round trip
        listing = await wire.call("list_subagent_runs", {})
        runs = [r for r in listing["structuredContent"]["runs"] if r["task_summary"] == "quiet"]
    [run] = runs
    # The server waits 0.3 s of its own clock (six progress intervals), reporting on.
    waited = await wire.call("wait_subagent", {"run_id": run["run_id"], "timeout": 0.3})
    assert waited["structuredContent"]["progress"]["message"] == "step 1"
    for step in (1, 2, 3):
        wire.release(f"quiet.{step}")
    answer = await wire.answer(request_id)
    assert answer["result"]["structuredContent"]["final_result"] == "stepped"
    later = await wire.request("server/discover")
    assert "result" in later
    assert not [m for m in wire.lines if m.get("method") == "notifications/progress"]


# -- the legacy path: notifications/progress ---------------------------------------------


async def test_a_legacy_foreground_call_hears_the_childs_reports_as_progress(
    tmp_path: Path,
) -> None:
    # Progress every 50 ms of the server's clock; each step waits for its gate.
    wire = start(tmp_path, "0.05")
    try:
        async with wire.attached():
            hello = await wire.initialize()
            assert "result" in hello
            request_id = wire.fresh_id()
            await wire.send(
                {
                    "jsonrpc": "2.0",
                    "id": request_id,
                    "method": "tools/call",
                    "params": {
                        "name": "delegate_task",
                        "arguments": {"subagent": "stepper", "task": "walk"},
                        "_meta": {"progressToken": "tok"},
                    },
                }
            )

            async def notice_with(text: str) -> dict[str, Any]:
                message = await wire.first(
                    lambda m: (
                        m.get("method") == "notifications/progress"
                        and text in (m["params"].get("message") or "")
                    )
                )
                params: dict[str, Any] = message["params"]
                return params

            for step in (1, 2, 3):
                notice = await notice_with(f"step {step} ({step}/3)")
                assert notice["progressToken"] == "tok"
                assert notice["message"].startswith("run run_")
                wire.release(f"walk.{step}")
            answer = await wire.answer(request_id)
            assert answer["result"]["structuredContent"]["final_result"] == "stepped"
            ping = await wire.request("ping", tasks=None)
            assert "result" in ping
            ping_at = wire.lines.index(ping)
            answer_at = wire.lines.index(answer)
            progress = [
                (i, m["params"])
                for i, m in enumerate(wire.lines)
                if m.get("method") == "notifications/progress"
            ]
            values = [params["progress"] for _, params in progress]
            assert values == sorted(set(values)), values  # strictly increasing
            assert all(i < answer_at for i, _ in progress)  # none after the answer
            assert ping_at > answer_at
            # The report's seq, never below it.
            assert all(
                params["progress"] >= int(params["message"].split("step ")[1][0])
                for _, params in progress
                if "step " in params["message"]
            )
    finally:
        stop(wire)


# -- a budget stop, end to end -------------------------------------------------------------

SPENDER = """
import trio
import trio_delegate as td

async def spend(ctx):
    ctx.add_usage(td.Usage(requests=1, input_tokens=600, output_tokens=500))
    await trio.sleep_forever()  # until the budget stops it
"""


async def test_a_configured_budget_stops_a_run_and_the_client_reads_the_budget(
    tmp_path: Path,
) -> None:
    module = f"spender_{os.getpid()}_{tmp_path.name}".replace("-", "_")
    (tmp_path / f"{module}.py").write_text(SPENDER)
    config = tmp_path / "subagents.toml"
    config.write_text(
        f"""
[runtime]
fail_closed = false

[[subagents]]
name = "spender"
description = "Spends 1,100 tokens, then waits."
python = "{module}:spend"
budget = {{ max_total_tokens = 1000 }}
"""
    )
    wire = start(tmp_path, command=[PY, "-m", "trio_delegate", "serve", "--config", str(config)])
    try:
        async with wire.attached():
            plain = envelope(tasks=False, elicit=True)
            # Through the tools: the wait is the run's end, cancelled, the budget named.
            handle = await wire.call(
                "delegate_task",
                {"subagent": "spender", "task": "spend", "background": True},
                meta=plain,
            )
            run_id = handle["structuredContent"]["run_id"]
            waited = await wire.call("wait_subagent", {"run_id": run_id}, meta=plain)
            assert waited["isError"] is True
            error = waited["structuredContent"]["error"]
            assert error["type"] == "run_cancelled"
            text = waited["content"][0]["text"]
            assert "max_total_tokens" in text, text
            assert "1000" in text or "1,000" in text, text
            status = await wire.call("subagent_status", {"run_id": run_id}, meta=plain)
            usage = status["structuredContent"]["usage"]
            assert (usage["input_tokens"], usage["output_tokens"]) == (600, 500)
            # Through tasks: the task ends cancelled, the budget in its message.
            task_id = await asking_task(wire, "spender", "spend again")
            task = await wire.until(task_id, "cancelled")
            assert "result" not in task
            assert "max_total_tokens" in task["statusMessage"], task["statusMessage"]
    finally:
        stop(wire)


# -- a TOML subagent that asks, end to end ------------------------------------------------

ASKING_COMMAND = """
import json, os, socket, sys

channel = socket.socket(fileno=int(os.environ["TRIO_DELEGATE_FD"]))
lines = channel.makefile("rwb")
lines.write(b'{"progress": {"message": "measuring", "progress": 1, "total": 2}}\\n')
lines.write(json.dumps({"ask": {"question": "Which colour?"}, "id": 7}).encode() + b"\\n")
lines.flush()
reply = json.loads(lines.readline())
sys.stdout.write(json.dumps({"id": reply["id"], "colour": reply["answer"]}))
"""


async def test_a_toml_subagent_that_asks_is_answered_through_tasks(tmp_path: Path) -> None:
    script = tmp_path / "asker.py"
    script.write_text(ASKING_COMMAND)
    config = tmp_path / "subagents.toml"
    config.write_text(
        f"""
[runtime]
fail_closed = false

[[subagents]]
name = "asker"
description = "Asks which colour, then answers with it."
command = [{json.dumps(PY)}, {json.dumps(str(script))}]
asks = true
"""
    )
    wire = start(tmp_path, command=[PY, "-m", "trio_delegate", "serve", "--config", str(config)])
    try:
        async with wire.attached():
            task_id = await asking_task(wire, "asker", "paint")
            asking = await wire.until(task_id, "input_required")
            [(key, request)] = asking["inputRequests"].items()
            assert request["params"]["message"] == "Which colour?"
            ack = await wire.update(
                task_id, {key: {"action": "accept", "content": {"answer": "teal"}}}
            )
            assert without_meta(ack["result"]) == {}
            done = await wire.until(task_id, "completed")
            result = done["result"]["structuredContent"]["final_result"]
            assert json.loads(result) == {"id": 7, "colour": "teal"}
    finally:
        stop(wire)


def test_a_field_whose_type_is_a_list_is_asked_wrapped_not_as_a_form() -> None:
    from trio_delegate.mcp._talk import requested_schema

    schema = {"type": "object", "properties": {"a": {"type": ["string", "null"]}}}
    form, wrapped = requested_schema(schema)
    assert wrapped is True
    assert form["properties"]["answer"] == schema
