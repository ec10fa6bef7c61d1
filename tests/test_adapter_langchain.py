"""trio_delegate.adapters.langchain: the tools in a LangChain agent, and an agent as
a subagent, driven offline by LangChain's ``GenericFakeChatModel``."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest
import trio
import trio.testing
from langchain.agents import create_agent
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun
from langchain_core.language_models import LanguageModelInput
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool

import trio_delegate as td
from trio_delegate.adapters import langchain as td_langchain
from trio_delegate.adapters import run_asyncio
from trio_delegate.testing import ToolCall

from . import adapters_support as support
from .adapters_support import ModelProbe, Seen

Script = Callable[[list[BaseMessage]], Awaitable[AIMessage]]


class ScriptedChatModel(GenericFakeChatModel):
    """``GenericFakeChatModel`` that answers from a script and accepts tools."""

    script: Any = None  # a Script; pydantic cannot check a callable's signature

    def bind_tools(
        self, tools: Sequence[Any], **kwargs: Any
    ) -> Runnable[LanguageModelInput, AIMessage]:
        return self

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        message = await self.script(messages)
        return ChatResult(generations=[ChatGeneration(message=message)])


def chat_model(script: Script) -> ScriptedChatModel:
    return ScriptedChatModel(messages=iter(()), script=script)


# -- the parent side --------------------------------------------------------------


async def drive(parent: td.Parent, steps: Sequence[ToolCall]) -> Sequence[Seen]:
    """A ``create_agent`` agent with the parent's tools; its model makes *steps*."""
    seen: list[Seen] = []

    async def script(messages: list[BaseMessage]) -> AIMessage:
        answers = [m for m in messages if isinstance(m, ToolMessage)]
        for message in answers[len(seen) :]:
            if message.status == "error":
                payload = support.failure_payload(message.content, "error")
                seen.append(Seen(message.name or "", payload, True))
            else:
                payload = support.parse_payload(message.content)
                seen.append(Seen(message.name or "", payload, False))
                assert message.artifact == payload  # the result itself rides along
        call = support.next_call(steps, seen)
        if call is None:
            return AIMessage("done")
        name, arguments = call
        return AIMessage(
            "", tool_calls=[{"name": name, "args": arguments, "id": f"call{len(seen)}"}]
        )

    agent = create_agent(chat_model(script), td_langchain.tools(parent))

    async def invoke() -> Any:
        return await agent.ainvoke({"messages": [HumanMessage("Delegate the work.")]})

    state = await run_asyncio(invoke)
    assert state["messages"][-1].text == "done"
    return seen


async def test_cap_langchain_foreground(autojump_clock: trio.testing.MockClock) -> None:
    await support.check_foreground(drive)


async def test_cap_langchain_background_session(autojump_clock: trio.testing.MockClock) -> None:
    await support.check_background_session(drive)


async def test_cap_langchain_background_fail_closed(autojump_clock: trio.testing.MockClock) -> None:
    await support.check_fail_closed(drive)


async def test_cap_langchain_status(autojump_clock: trio.testing.MockClock) -> None:
    await support.check_status(drive)


async def test_cap_langchain_timed_wait(autojump_clock: trio.testing.MockClock) -> None:
    await support.check_timed_wait(drive)


async def test_cap_langchain_cancel(autojump_clock: trio.testing.MockClock) -> None:
    await support.check_cancel(drive)


async def test_cap_langchain_continuation(autojump_clock: trio.testing.MockClock) -> None:
    await support.check_continuation(drive)


async def test_cap_langchain_structured_results(autojump_clock: trio.testing.MockClock) -> None:
    await support.check_structured(drive)


async def test_cap_langchain_cancellation_reaches_child() -> None:
    await support.check_cancellation_reaches_child(drive)


async def test_hostile_arguments_are_failed_tool_calls() -> None:
    await support.check_hostile_arguments(drive)


async def test_the_tools_carry_the_definitions_and_are_async_only() -> None:
    subagents = support.Subagents().definitions()
    async with td.open_runtime(subagents) as rt, rt.open_parent("lead") as parent:
        tools = td_langchain.tools(parent)
        definitions = parent.tools().definitions()
        assert all(isinstance(tool, BaseTool) for tool in tools)
        assert [(t.name, t.description) for t in tools] == [
            (d.name, d.description) for d in definitions
        ]
        assert [t.args_schema for t in tools] == [d.parameters for d in definitions]
        with pytest.raises(NotImplementedError):
            tools[1].invoke({"run_id": "x"})  # no sync path: it would block the Trio loop


# -- the child side -----------------------------------------------------------------


def child(behaviour: support.Behaviour, probe: ModelProbe) -> support.ChildRunner:
    """A runner around a ``create_agent`` agent whose model behaves as asked."""
    return td_langchain.runner(create_agent(chat_model(_child_script(behaviour, probe)), []))


def _child_script(behaviour: support.Behaviour, probe: ModelProbe) -> Script:
    async def script(messages: list[BaseMessage]) -> AIMessage:
        await support.model_call(behaviour, probe)
        reply = support.model_reply(
            behaviour, [m.text for m in messages if isinstance(m, HumanMessage)]
        )
        # No structured-output mode in this agent: a structured answer is JSON text.
        return AIMessage(reply if isinstance(reply, str) else json.dumps(reply))

    return script


async def test_cap_langchain_child_runner_history() -> None:
    await support.check_child_history(child)


async def test_cap_langchain_child_runner_structured() -> None:
    await support.check_child_structured(child)


async def test_cap_langchain_child_runner_deadline(mock_clock: trio.testing.MockClock) -> None:
    await support.check_child_deadline(child, mock_clock)


async def test_cap_langchain_child_runner_cancel() -> None:
    await support.check_child_cancel(child)


async def test_cap_langchain_child_runner_failure() -> None:
    await support.check_child_failure(child)


async def test_a_chat_model_alone_runs_as_a_subagent() -> None:
    """``messages_key=None``: a Runnable over a message list, answering with a message."""
    model = chat_model(_child_script("answer", ModelProbe()))
    sub = td.Subagent("chat", td_langchain.runner(model, messages_key=None))
    async with td.open_runtime([sub]) as rt, rt.open_parent("lead") as parent:
        first = await parent.delegate("chat", "one")
        assert first.final_result == "one"
        second = await parent.continue_run(first.run_id, "two")
        assert isinstance(second, td.RunResult)
        assert second.final_result == "one|two"


def test_history_takes_plain_entries_and_openai_style_messages() -> None:
    messages = td_langchain.history_messages(
        [
            {"role": "user", "content": "count"},
            {"role": "assistant", "content": {"length": 5}},
            {"role": "assistant", "content": "", "tool_calls": []},
        ]
    )
    assert [type(m) for m in messages] == [HumanMessage, AIMessage, AIMessage]
    assert messages[1].text == '{"length":5}'
    with pytest.raises(td.InvalidArgumentsError, match=r"ctx.history\[0\]"):
        td_langchain.history_messages([{"role": "nobody", "content": "x"}])


# -- what the agent spent -------------------------------------------------------------


def spending_reply(content: str, **extra: Any) -> AIMessage:
    """A reply that says what it spent (LangChain counts the cache in input_tokens
    and reasoning in output_tokens, as td.Usage does)."""
    return AIMessage(
        content,
        usage_metadata={
            "input_tokens": 100,
            "output_tokens": 20,
            "total_tokens": 120,
            "input_token_details": {"cache_read": 30, "cache_creation": 7},
            "output_token_details": {"reasoning": 4},
        },
        **extra,
    )


@pytest.mark.parametrize("messages_key", ["messages", None])
async def test_every_model_calls_usage_counts_for_the_run(messages_key: str | None) -> None:
    calls = 0

    async def script(messages: list[BaseMessage]) -> AIMessage:
        nonlocal calls
        calls += 1
        return spending_reply(f"answer {calls}")

    model = chat_model(script)
    agent = model if messages_key is None else create_agent(model, [])
    sub = td.Subagent("agent", td_langchain.runner(agent, messages_key=messages_key))
    async with td.open_runtime([sub]) as rt, rt.open_parent() as parent:
        first = await parent.delegate("agent", "one")
        second = await parent.continue_run(first.run_id, "two")
        assert isinstance(second, td.RunResult)
        assert second.final_result == "answer 2"
        # Each run counts its own call; the history it was given is not counted again.
        expected = td.Usage(
            requests=1,
            input_tokens=100,
            output_tokens=20,
            cache_read_input_tokens=30,
            cache_creation_input_tokens=7,
            reasoning_output_tokens=4,
        )
        assert parent.usage(first.run_id) == expected
        assert parent.usage(second.run_id) == expected


async def test_what_the_calls_before_a_failure_spent_counts() -> None:
    calls = 0

    async def script(messages: list[BaseMessage]) -> AIMessage:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise ValueError("model broke")
        tool_call = {"name": "look", "args": {}, "id": f"call-{calls}", "type": "tool_call"}
        return spending_reply("", tool_calls=[tool_call])

    def look() -> str:
        """Look around."""
        return "nothing yet"

    agent = create_agent(chat_model(script), [look])
    sub = td.Subagent("agent", td_langchain.runner(agent))
    async with (
        td.open_runtime([sub], config=td.Config(fail_closed=False)) as rt,
        rt.open_parent() as parent,
    ):
        handle = await parent.start("agent", "look")
        with pytest.raises(td.RunFailedError):
            await parent.wait(handle.run_id)
        # Two replies, and the call that failed (it reported nothing).
        assert parent.usage(handle.run_id) == td.Usage(
            requests=2,
            input_tokens=200,
            output_tokens=40,
            cache_read_input_tokens=60,
            cache_creation_input_tokens=14,
            reasoning_output_tokens=8,
        )
