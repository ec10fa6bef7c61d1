"""trio_delegate.adapters.pydantic_ai: the tools in a Pydantic AI agent, and an agent
as a subagent, driven offline by Pydantic AI's ``FunctionModel``."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest
import trio
import trio.testing
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

import trio_delegate as td
from trio_delegate.adapters import pydantic_ai as td_pydantic_ai
from trio_delegate.adapters import run_asyncio
from trio_delegate.testing import ToolCall

from . import adapters_support as support
from .adapters_support import ModelProbe, Seen

# -- the parent side --------------------------------------------------------------


async def drive(parent: td.Parent, steps: Sequence[ToolCall]) -> Sequence[Seen]:
    """A Pydantic AI agent with the parent's toolset; its model makes *steps*."""
    seen: list[Seen] = []

    async def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        for part in messages[-1].parts:
            if isinstance(part, ToolReturnPart) and part.outcome == "success":
                seen.append(Seen(part.tool_name, support.parse_payload(part.content), False))
            elif isinstance(part, ToolReturnPart):
                payload = support.failure_payload(part.content, part.outcome)
                seen.append(Seen(part.tool_name, payload, True))
        call = support.next_call(steps, seen)
        if call is None:
            return ModelResponse(parts=[TextPart("done")])
        name, arguments = call
        # As a provider's model sends them: JSON text (ASCII, escapes and all).
        return ModelResponse(parts=[ToolCallPart(name, json.dumps(arguments))])

    agent = Agent(FunctionModel(model), toolsets=[td_pydantic_ai.toolset(parent)])
    result = await run_asyncio(agent.run, "Delegate the work.")
    assert result.output == "done"
    return seen


async def test_cap_pydantic_ai_foreground(autojump_clock: trio.testing.MockClock) -> None:
    await support.check_foreground(drive)


async def test_cap_pydantic_ai_background_session(autojump_clock: trio.testing.MockClock) -> None:
    await support.check_background_session(drive)


async def test_cap_pydantic_ai_background_fail_closed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    await support.check_fail_closed(drive)


async def test_cap_pydantic_ai_status(autojump_clock: trio.testing.MockClock) -> None:
    await support.check_status(drive)


async def test_cap_pydantic_ai_timed_wait(autojump_clock: trio.testing.MockClock) -> None:
    await support.check_timed_wait(drive)


async def test_cap_pydantic_ai_cancel(autojump_clock: trio.testing.MockClock) -> None:
    await support.check_cancel(drive)


async def test_cap_pydantic_ai_continuation(autojump_clock: trio.testing.MockClock) -> None:
    await support.check_continuation(drive)


async def test_cap_pydantic_ai_structured_results(autojump_clock: trio.testing.MockClock) -> None:
    await support.check_structured(drive)


async def test_cap_pydantic_ai_cancellation_reaches_child() -> None:
    await support.check_cancellation_reaches_child(drive)


async def test_hostile_arguments_are_failed_tool_calls() -> None:
    # Pydantic AI refuses a lone surrogate in a model's JSON itself (a retry prompt).
    await support.check_hostile_arguments(drive, surrogates=False)


async def test_the_toolset_holds_the_five_tools_as_defined() -> None:
    subagents = support.Subagents().definitions()
    async with td.open_runtime(subagents) as rt, rt.open_parent("lead") as parent:
        toolset = td_pydantic_ai.toolset(parent, id="delegation")
        definitions = parent.tools().definitions()
    assert toolset.id == "delegation"
    assert list(toolset.tools) == [d.name for d in definitions]
    for definition in definitions:
        tool = toolset.tools[definition.name]
        assert tool.description == definition.description
        assert tool.function_schema.json_schema == definition.parameters


# -- the child side -----------------------------------------------------------------


def child(behaviour: support.Behaviour, probe: ModelProbe) -> support.ChildRunner:
    """A runner around a Pydantic AI agent whose FunctionModel behaves as asked."""

    async def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        texts = [
            part.content
            for message in messages
            if isinstance(message, ModelRequest)
            for part in message.parts
            if isinstance(part, UserPromptPart) and isinstance(part.content, str)
        ]
        await support.model_call(behaviour, probe)
        reply = support.model_reply(behaviour, texts)
        if isinstance(reply, dict) and info.output_tools:
            # Asked for structure: the answer goes to the output tool.
            return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, reply)])
        text = reply if isinstance(reply, str) else json.dumps(reply)
        return ModelResponse(parts=[TextPart(text)])

    return td_pydantic_ai.runner(Agent(FunctionModel(model)))


async def test_cap_pydantic_ai_child_runner_history() -> None:
    await support.check_child_history(child)


async def test_cap_pydantic_ai_child_runner_structured() -> None:
    await support.check_child_structured(child)


async def test_cap_pydantic_ai_child_runner_deadline(mock_clock: trio.testing.MockClock) -> None:
    await support.check_child_deadline(child, mock_clock)


async def test_cap_pydantic_ai_child_runner_cancel() -> None:
    await support.check_child_cancel(child)


async def test_cap_pydantic_ai_child_runner_failure() -> None:
    await support.check_child_failure(child)


def test_history_takes_plain_entries_and_its_own_messages() -> None:
    messages = td_pydantic_ai.history_messages(
        [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "count"},
            {"role": "assistant", "content": {"length": 5}},
        ]
    )
    assert [type(m) for m in messages] == [ModelRequest, ModelRequest, ModelResponse]
    reply = messages[2].parts[0]
    assert isinstance(reply, TextPart)
    assert reply.content == '{"length":5}'
    with pytest.raises(td.InvalidArgumentsError, match=r"ctx.history\[1\]"):
        td_pydantic_ai.history_messages([{"role": "user", "content": "x"}, {"kind": "nonsense"}])


async def test_settled_notices_tell_the_agent_at_its_next_request(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def quick(ctx: td.ChildContext) -> str:
        await trio.sleep(1)
        return "found it"

    async def slow(ctx: td.ChildContext) -> str:
        await trio.sleep(2)
        return "drafted"

    seen_notices: list[list[str]] = []
    run_id = ""

    def call(name: str, **arguments: object) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart(name, json.dumps(arguments))])

    async def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        nonlocal run_id
        notices = [
            part.content
            for message in messages
            if isinstance(message, ModelRequest)
            for part in message.parts
            if isinstance(part, UserPromptPart)
            and isinstance(part.content, str)
            and part.content.startswith("Background run")
        ]
        seen_notices.append(notices)
        for part in messages[-1].parts:
            if isinstance(part, ToolReturnPart) and part.tool_name == "delegate_task":
                payload = support.parse_payload(part.content)
                run_id = run_id or payload["run_id"]
            if isinstance(part, ToolReturnPart) and part.tool_name == "wait_subagent":
                return ModelResponse(parts=[TextPart("done")])
        if len(seen_notices) == 1:
            return call("delegate_task", subagent="quick", task="look", background=True)
        if not notices:  # keeps working in the foreground meanwhile, without polling
            return call("delegate_task", subagent="slow", task="draft")
        return call("wait_subagent", run_id=run_id)

    async with (
        td.open_runtime([td.Subagent("quick", quick), td.Subagent("slow", slow)]) as rt,
        rt.open_parent() as parent,
    ):
        agent = Agent(
            FunctionModel(model),
            toolsets=[td_pydantic_ai.toolset(parent)],
            capabilities=[td_pydantic_ai.settled_notices(parent)],
        )
        result = await run_asyncio(agent.run, "Work.")
        assert result.output == "done"
        assert parent.unobserved() == ()  # the agent read it
    notice = (
        f"Background run {run_id} (quick) ended completed: call wait_subagent with that "
        "run_id to read its outcome."
    )
    # Not before it ended; then in the history once, not again at each request.
    assert seen_notices == [[], [], [notice], [notice]]


# -- what the agent spent -------------------------------------------------------------

#: What each response of :func:`spender` says it spent (Pydantic AI counts
#: the cache in input_tokens and reasoning in output_tokens, as td.Usage does).
SPENT = RequestUsage(
    input_tokens=100,
    output_tokens=20,
    cache_read_tokens=30,
    cache_write_tokens=7,
    details={"reasoning_tokens": 4},
)


def spender(calls: list[int], *, tool_calls: int = 2) -> support.ChildRunner:
    """A runner whose agent calls a tool *tool_calls* times, then answers."""

    async def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls.append(len(calls))
        if len(calls) <= tool_calls:
            return ModelResponse(parts=[ToolCallPart("look", "{}")], usage=SPENT)
        return ModelResponse(parts=[TextPart("found")], usage=SPENT)

    agent = Agent(FunctionModel(model))

    @agent.tool_plain
    def look() -> str:
        return "nothing yet"

    return td_pydantic_ai.runner(agent)


async def test_the_agents_usage_counts_for_the_run() -> None:
    calls: list[int] = []
    async with (
        td.open_runtime([td.Subagent("agent", spender(calls))]) as rt,
        rt.open_parent() as parent,
    ):
        done = await parent.delegate("agent", "look")
        assert done.final_result == "found"
        assert parent.usage(done.run_id) == td.Usage(
            requests=3,
            input_tokens=300,
            output_tokens=60,
            cache_read_input_tokens=90,
            cache_creation_input_tokens=21,
            reasoning_output_tokens=12,
        )
    assert len(calls) == 3


@pytest.mark.parametrize(
    ("budget", "requests"),
    [
        # Pydantic AI stops before the request that would pass the limit...
        (td.Budget(max_requests=2), 2),
        # ...and at the response that passed a token limit.
        (td.Budget(max_output_tokens=30), 2),
        (td.Budget(max_total_tokens=119), 1),
        (td.Budget(max_input_tokens=250), 3),
    ],
)
async def test_what_the_budget_leaves_is_the_agents_usage_limits(
    budget: td.Budget, requests: int
) -> None:
    calls: list[int] = []
    sub = td.Subagent("agent", spender(calls, tool_calls=5), budget=budget)
    async with (
        td.open_runtime([sub], config=td.Config(fail_closed=False)) as rt,
        rt.open_parent() as parent,
    ):
        handle = await parent.start("agent", "look")
        with pytest.raises((td.RunFailedError, td.RunCancelledError)):
            await parent.wait(handle.run_id)
        spent = parent.usage(handle.run_id)
    # What the stopped agent spent counts all the same.
    assert len(calls) == requests
    assert spent.requests == requests
    assert spent.input_tokens == 100 * requests
    assert spent.output_tokens == 20 * requests
