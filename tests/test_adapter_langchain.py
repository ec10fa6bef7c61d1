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
