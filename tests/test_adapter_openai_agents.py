"""trio_delegate.adapters.openai_agents: the tools in an OpenAI Agents agent, and an
agent as a subagent, driven offline by the SDK's ``agents.testing.ScriptedModel``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
import trio
import trio.testing
from agents import Agent, FunctionTool, MaxTurnsExceeded, RunConfig, Runner, function_tool
from agents.items import TResponseOutputItem
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call
from agents.usage import Usage
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails

import trio_delegate as td
from trio_delegate.adapters import openai_agents as td_openai_agents
from trio_delegate.adapters import run_asyncio
from trio_delegate.testing import ToolCall

from . import adapters_support as support
from .adapters_support import ModelProbe, Seen

#: No trace leaves the machine (the default exporter would try to send one).
OFFLINE = RunConfig(tracing_disabled=True)


def _field(item: Any, key: str) -> Any:
    """A field of an input item, which the SDK hands over as a dict or a model."""
    return item.get(key) if isinstance(item, dict) else getattr(item, key, None)


def _items(call: ModelCall) -> list[Any]:
    return list(call.input) if isinstance(call.input, list) else []


# -- the parent side --------------------------------------------------------------


async def drive(parent: td.Parent, steps: Sequence[ToolCall]) -> Sequence[Seen]:
    """An agent with the parent's tools; its scripted model makes *steps*."""
    seen: list[Seen] = []

    def respond(call: ModelCall) -> list[TResponseOutputItem]:
        items = _items(call)
        names = {
            _field(item, "call_id"): _field(item, "name")
            for item in items
            if _field(item, "type") == "function_call"
        }
        outputs = [item for item in items if _field(item, "type") == "function_call_output"]
        for item in outputs[len(seen) :]:
            payload = support.parse_payload(_field(item, "output"))
            # The SDK has no error flag: a failure is the failure function's text.
            seen.append(Seen(names[_field(item, "call_id")], payload, "error" in payload))
        step = support.next_call(steps, seen)
        if step is None:
            return [assistant_message("done")]
        name, arguments = step
        # A strict-mode model sends every parameter, null for those it leaves out.
        (tool,) = [t for t in call.tools if isinstance(t, FunctionTool) and t.name == name]
        full = {key: arguments.get(key) for key in tool.params_json_schema["properties"]}
        # As JSON text, the way it comes over the wire (ASCII, escapes and all).
        return [function_call(name, json.dumps(full), call_id=f"call{len(seen)}")]

    model = ScriptedModel([ModelStep.respond(respond)] * (len(steps) + 1))
    agent = Agent(name="lead", model=model, tools=td_openai_agents.tools(parent))
    result = await run_asyncio(
        Runner.run, agent, "Delegate the work.", run_config=OFFLINE, max_turns=len(steps) + 1
    )
    assert result.final_output == "done"
    return seen


async def test_cap_openai_agents_foreground(autojump_clock: trio.testing.MockClock) -> None:
    await support.check_foreground(drive)


async def test_cap_openai_agents_background_session(
    autojump_clock: trio.testing.MockClock,
) -> None:
    await support.check_background_session(drive)


async def test_cap_openai_agents_background_fail_closed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    await support.check_fail_closed(drive)


async def test_cap_openai_agents_status(autojump_clock: trio.testing.MockClock) -> None:
    await support.check_status(drive)


async def test_cap_openai_agents_timed_wait(autojump_clock: trio.testing.MockClock) -> None:
    await support.check_timed_wait(drive)


async def test_cap_openai_agents_cancel(autojump_clock: trio.testing.MockClock) -> None:
    await support.check_cancel(drive)


async def test_cap_openai_agents_continuation(autojump_clock: trio.testing.MockClock) -> None:
    await support.check_continuation(drive)


async def test_cap_openai_agents_structured_results(
    autojump_clock: trio.testing.MockClock,
) -> None:
    await support.check_structured(drive)


async def test_cap_openai_agents_cancellation_reaches_child() -> None:
    await support.check_cancellation_reaches_child(drive)


async def test_hostile_arguments_are_failed_tool_calls() -> None:
    # The SDK itself fails the agent run on a lone surrogate escape in a call's
    # arguments (UnicodeEncodeError while fingerprinting the call): it never
    # reaches a tool.
    await support.check_hostile_arguments(drive, surrogates=False)


async def test_the_tools_are_strict_function_tools() -> None:
    subagents = support.Subagents().definitions()
    async with td.open_runtime(subagents) as rt, rt.open_parent("lead") as parent:
        tools = [t for t in td_openai_agents.tools(parent) if isinstance(t, FunctionTool)]
        expected = parent.tools().openai_responses_tools(strict=True)
    assert [t.name for t in tools] == [spec["name"] for spec in expected]
    assert [t.params_json_schema for t in tools] == [spec["parameters"] for spec in expected]
    assert all(t.strict_json_schema for t in tools)


async def test_a_custom_failure_function_words_the_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def words(ctx: Any, error: Exception) -> str:
        assert isinstance(error, td.DelegationError)
        return json.dumps({"error": {"type": "custom", "message": error.kind()}})

    subagents = support.Subagents().definitions()
    async with td.open_runtime(subagents) as rt, rt.open_parent("lead") as parent:
        (status,) = [
            tool
            for tool in td_openai_agents.tools(parent, failure_error_function=words)
            if isinstance(tool, FunctionTool) and tool.name == "subagent_status"
        ]
        context: Any = None  # the invoker does not look at it
        text = await run_asyncio(status.on_invoke_tool, context, json.dumps({"run_id": "made_up"}))
    assert json.loads(text) == {"error": {"type": "custom", "message": "unknown_run"}}


def test_the_default_failure_text_is_the_payload() -> None:
    context: Any = None
    error = td.UnknownRunError("no run 'x' here", run_id="x")
    assert json.loads(td_openai_agents.delegation_error_text(context, error)) == error.to_payload()
    # Given another exception (a custom tool reusing it), it still says what went wrong.
    other = json.loads(td_openai_agents.delegation_error_text(context, ValueError("bad")))
    assert other == {"error": {"type": "ValueError", "message": "bad"}}


# -- the child side -----------------------------------------------------------------


def child(behaviour: support.Behaviour, probe: ModelProbe) -> support.ChildRunner:
    """A runner around an agent whose scripted model behaves as asked."""

    async def respond(call: ModelCall) -> list[TResponseOutputItem]:
        texts = [
            _field(item, "content")
            for item in _items(call)
            if _field(item, "role") == "user" and isinstance(_field(item, "content"), str)
        ]
        await support.model_call(behaviour, probe)
        reply = support.model_reply(behaviour, texts)
        if isinstance(reply, dict):
            # A run with a final_schema gives the model an output schema; it answers
            # in JSON text, which the SDK parses.
            assert call.output_schema is not None
            return [assistant_message(json.dumps(reply))]
        return [assistant_message(reply)]

    model = ScriptedModel([ModelStep.respond(respond)] * 8)
    agent: Agent[Any] = Agent(name="helper", model=model)
    return td_openai_agents.runner(agent, run_config=OFFLINE)


async def test_cap_openai_agents_child_runner_history() -> None:
    await support.check_child_history(child)


async def test_cap_openai_agents_child_runner_structured() -> None:
    await support.check_child_structured(child)


async def test_cap_openai_agents_child_runner_deadline(
    mock_clock: trio.testing.MockClock,
) -> None:
    await support.check_child_deadline(child, mock_clock)


async def test_cap_openai_agents_child_runner_cancel() -> None:
    await support.check_child_cancel(child)


async def test_cap_openai_agents_child_runner_failure() -> None:
    await support.check_child_failure(child)


def test_history_takes_plain_entries_and_input_items() -> None:
    items = td_openai_agents.history_items(
        [
            {"role": "user", "content": "count"},
            {"role": "assistant", "content": {"length": 5}},
            {"type": "function_call_output", "call_id": "c1", "output": "{}"},
        ]
    )
    assert items[1] == {"role": "assistant", "content": '{"length":5}'}
    assert items[2]["type"] == "function_call_output"
    with pytest.raises(td.InvalidArgumentsError, match=r"ctx.history\[0\]"):
        td_openai_agents.history_items(["just text"])


# -- what the agent spent -------------------------------------------------------------

#: What each scripted response says it spent (the SDK counts cached input in
#: input_tokens and reasoning in output_tokens, as td.Usage does).
SPENT = Usage(
    requests=1,
    input_tokens=100,
    input_tokens_details=InputTokensDetails(cached_tokens=30, cache_write_tokens=7),
    output_tokens=20,
    output_tokens_details=OutputTokensDetails(reasoning_tokens=4),
    total_tokens=120,
)


def spender(*, max_turns: int) -> support.ChildRunner:
    """A runner whose agent calls a tool twice, then answers."""

    @function_tool
    def look() -> str:
        """Look around."""
        return "nothing yet"

    steps = [
        ModelStep(output=[function_call("look", {}, call_id=f"call-{n}")], usage=SPENT)
        for n in range(2)
    ]
    model = ScriptedModel([*steps, ModelStep(output=[assistant_message("found")], usage=SPENT)])
    agent: Agent[Any] = Agent(name="looker", model=model, tools=[look])
    return td_openai_agents.runner(agent, max_turns=max_turns, run_config=OFFLINE)


async def test_the_agents_usage_counts_for_the_run() -> None:
    async with (
        td.open_runtime([td.Subagent("agent", spender(max_turns=10))]) as rt,
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


async def test_what_an_agent_stopped_by_its_turn_limit_spent_counts() -> None:
    sub = td.Subagent("agent", spender(max_turns=2))
    async with (
        td.open_runtime([sub], config=td.Config(fail_closed=False)) as rt,
        rt.open_parent() as parent,
    ):
        handle = await parent.start("agent", "look")
        with pytest.raises(td.RunFailedError) as info:
            await parent.wait(handle.run_id)
        assert isinstance(info.value.__cause__, MaxTurnsExceeded)
        assert parent.usage(handle.run_id) == td.Usage(
            requests=2,
            input_tokens=200,
            output_tokens=40,
            cache_read_input_tokens=60,
            cache_creation_input_tokens=14,
            reasoning_output_tokens=8,
        )
