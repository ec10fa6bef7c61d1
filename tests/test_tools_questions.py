"""Contract §10/§19: the model-facing tools show progress and questions, and answer them."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
import trio.testing

import trio_delegate as td
from tests.helpers import sub

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


async def asks_for_a_number(ctx: td.ChildContext) -> Any:
    ctx.progress("thinking", progress=1, total=3)
    answer = await ctx.ask("how many?", schema=SCHEMA)
    ctx.progress("counting", progress=2, total=3)
    return answer["n"] * 2


async def asks_for_text(ctx: td.ChildContext) -> Any:
    try:
        return await ctx.ask("which branch?")
    except td.QuestionDeclinedError as exc:
        return f"declined: {exc.reason}"


async def quiet(ctx: td.ChildContext) -> Any:
    await trio.sleep(1)
    return "quiet"


@pytest.fixture
async def tools() -> AsyncIterator[tuple[td.Parent, td.DelegationTools]]:
    subagents = [
        sub("counter", asks_for_a_number, asks=True),
        sub("brancher", asks_for_text, asks=True),
        sub("quiet", quiet),
    ]
    async with td.open_runtime(subagents) as rt, rt.open_parent() as parent:
        yield parent, parent.tools()


async def test_answer_subagent_is_offered_only_when_a_direct_child_asks() -> None:
    async with td.open_runtime([sub("quiet", quiet)]) as rt, rt.open_parent() as parent:
        assert "answer_subagent" not in parent.tools().names
    subagents = [sub("quiet", quiet), sub("brancher", asks_for_text, asks=True)]
    async with td.open_runtime(subagents) as rt, rt.open_parent() as parent:
        tools = parent.tools()
        assert tools.names[-1] == "answer_subagent"
        (definition,) = [d for d in tools.definitions() if d.name == "answer_subagent"]
        assert set(definition.parameters["properties"]) == {
            "run_id",
            "answer",
            "question_id",
            "decline",
        }
        assert definition.parameters["required"] == ["run_id"]


async def test_a_foreground_delegate_task_whose_child_asks_returns_the_handle_with_the_question(
    autojump_clock: trio.testing.MockClock, tools: tuple[td.Parent, td.DelegationTools]
) -> None:
    parent, tool = tools
    handle = await tool.call("delegate_task", {"subagent": "counter", "task": "count"})
    assert handle["status"] == "input_required"
    assert handle["progress"] == {"message": "thinking", "progress": 1.0, "total": 3.0, "seq": 1}
    (question,) = handle["questions"]
    assert question["question"] == "how many?"
    assert question["schema"] == SCHEMA
    json.dumps(handle)  # JSON-ready
    status = await tool.call("subagent_status", {"run_id": handle["run_id"]})
    assert status == handle
    with pytest.raises(td.InvalidArgumentsError, match=r"\$\.n"):
        await tool.call("answer_subagent", {"run_id": handle["run_id"], "answer": {"n": "x"}})
    ack = await tool.call(
        "answer_subagent",
        {"run_id": handle["run_id"], "answer": {"n": 21}, "question_id": question["question_id"]},
    )
    assert ack == {
        "run_id": handle["run_id"],
        "question_id": question["question_id"],
        "accepted": True,
        "status": "running",
    }
    result = await tool.call("wait_subagent", {"run_id": handle["run_id"]})
    assert result["final_result"] == 42
    again = await tool.call("answer_subagent", {"run_id": handle["run_id"], "answer": {"n": 1}})
    assert again["accepted"] is False
    assert again["status"] == "completed"
    parent.check_resolved()


async def test_a_strict_client_sends_the_answer_as_json_text(
    autojump_clock: trio.testing.MockClock, tools: tuple[td.Parent, td.DelegationTools]
) -> None:
    _, tool = tools
    handle = await tool.call("delegate_task", {"subagent": "counter", "task": "count"})
    arguments = json.dumps(
        {"run_id": handle["run_id"], "answer": '{"n": 4}', "question_id": None, "decline": None}
    )
    assert (await tool.call("answer_subagent", arguments))["accepted"] is True
    assert (await tool.call("wait_subagent", {"run_id": handle["run_id"]}))["final_result"] == 8
    # A string question takes text as it is, even text that reads as JSON.
    handle = await tool.call("delegate_task", {"subagent": "brancher", "task": "pick"})
    await tool.call("answer_subagent", {"run_id": handle["run_id"], "answer": "42"})
    assert (await tool.call("wait_subagent", {"run_id": handle["run_id"]}))["final_result"] == "42"


async def test_decline_through_the_tool(
    autojump_clock: trio.testing.MockClock, tools: tuple[td.Parent, td.DelegationTools]
) -> None:
    _, tool = tools
    handle = await tool.call("delegate_task", {"subagent": "brancher", "task": "pick"})
    ack = await tool.call("answer_subagent", {"run_id": handle["run_id"], "decline": True})
    assert ack["accepted"] is True
    result = await tool.call("wait_subagent", {"run_id": handle["run_id"]})
    assert result["final_result"] == "declined: "


async def test_a_run_that_never_reports_keeps_the_plain_payload(
    autojump_clock: trio.testing.MockClock, tools: tuple[td.Parent, td.DelegationTools]
) -> None:
    _, tool = tools
    handle = await tool.call(
        "delegate_task", {"subagent": "quiet", "task": "x", "background": True}
    )
    assert handle == {"run_id": handle["run_id"], "subagent": "quiet", "status": "running"}
    waited = await tool.call("wait_subagent", {"run_id": handle["run_id"], "timeout": 0})
    assert waited == handle
    await tool.call("wait_subagent", {"run_id": handle["run_id"]})


async def test_a_cancelled_foreground_delegate_task_whose_child_may_ask_cancels_and_joins_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    stopped: list[bool] = []

    async def slow_asker(ctx: td.ChildContext) -> Any:
        try:
            await trio.sleep(100)
        except trio.Cancelled:
            stopped.append(True)
            raise
        return await ctx.ask("?")

    config = td.Config(fail_closed=False)
    async with (
        td.open_runtime([sub("slow", slow_asker, asks=True)], config=config) as rt,
        rt.open_parent() as parent,
    ):
        tool = parent.tools()
        with trio.move_on_after(5):
            await tool.call("delegate_task", {"subagent": "slow", "task": "x"})
        assert stopped == [True]  # joined before the call returned
        assert rt.live_runs == 0
