"""A LangChain agent delegating through trio_delegate, offline.

The lead agent (``create_agent``) runs on LangChain's fake chat model, scripted
to start a review in the background, cancel it, see the cancellation come back
as an error, and delegate a shorter review in its place (``replaces=``). The
reviewer is itself a ``create_agent`` agent run as a subagent. Needs
``pip install -e '.[langchain]'`` (from a checkout).

    python examples/langchain_parent.py
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import trio
from langchain.agents import create_agent
from langchain_core.language_models import LanguageModelInput
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable

import trio_delegate as td
from trio_delegate.adapters import asyncio_loop, run_asyncio
from trio_delegate.adapters import langchain as td_langchain


class PlannedChatModel(GenericFakeChatModel):
    """LangChain's fake chat model, answering from a plan rather than a fixed list."""

    plan: Any = None  # (messages) -> AIMessage

    def bind_tools(
        self, tools: Sequence[Any], **kwargs: Any
    ) -> Runnable[LanguageModelInput, AIMessage]:
        return self  # a scripted model needs no tool definitions

    async def _agenerate(
        self, messages: list[BaseMessage], *args: Any, **kwargs: Any
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self.plan(messages))])


def reviewer_turn(messages: list[BaseMessage]) -> AIMessage:
    return AIMessage(f"Reviewed: {messages[-1].text} Looks good, one nit.")


reviewer = td_langchain.runner(
    create_agent(PlannedChatModel(messages=iter(()), plan=reviewer_turn), [])
)


async def slow_review(ctx: td.ChildContext) -> Any:
    await trio.sleep(0.2)  # a long review, shortened
    return await reviewer(ctx)


def lead_turn(messages: list[BaseMessage]) -> AIMessage:
    answers = [m for m in messages if isinstance(m, ToolMessage)]
    if answers:
        print(f"  <- [{answers[-1].status}] {answers[-1].content}")
    run_id = json.loads(answers[0].content)["run_id"] if answers else None
    steps = [
        ("delegate_task", {"subagent": "reviewer", "task": "Review PR 12.", "background": True}),
        ("cancel_subagent", {"run_id": run_id}),
        ("wait_subagent", {"run_id": run_id}),
        ("delegate_task", {"subagent": "reviewer", "task": "Skim PR 12.", "replaces": run_id}),
    ]
    if len(answers) == len(steps):
        return AIMessage("PR 12 looks good, with one nit.")
    name, arguments = steps[len(answers)]
    print(f"lead calls {name}({arguments})")
    return AIMessage("", tool_calls=[{"name": name, "args": arguments, "id": f"c{len(answers)}"}])


async def main() -> None:
    subagents = [td.Subagent("reviewer", slow_review, description="Reviews a pull request.")]
    async with (
        asyncio_loop(),  # one asyncio loop for every agent in this run
        td.open_runtime(subagents) as rt,
        rt.open_parent("lead") as parent,
    ):
        model = PlannedChatModel(messages=iter(()), plan=lead_turn)
        lead = create_agent(model, td_langchain.tools(parent))
        state = await run_asyncio(lead.ainvoke, {"messages": [("user", "Review PR 12.")]})
        print(f"lead answers: {state['messages'][-1].text}")
    print("the cancelled review was replaced: the fail-closed check passed")


if __name__ == "__main__":
    trio.run(main)
