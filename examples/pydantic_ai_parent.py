"""A Pydantic AI agent delegating through trio_delegate, offline.

The lead agent's model is scripted (Pydantic AI's ``FunctionModel``): it starts
a research run in the background, checks on it, waits with a timeout that runs
out, waits for the result, and asks a counter for a structured result in the
foreground. The researcher is itself a Pydantic AI agent (``TestModel``) run as
a subagent. Needs ``pip install -e '.[pydantic-ai]'`` (from a checkout).

    python examples/pydantic_ai_parent.py
"""

from __future__ import annotations

from typing import Any

import trio
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

import trio_delegate as td
from trio_delegate.adapters import asyncio_loop, run_asyncio
from trio_delegate.adapters import pydantic_ai as td_pydantic_ai


async def count_words(ctx: td.ChildContext) -> dict[str, int]:
    await trio.sleep(0.05)
    return {"words": len(ctx.task.split())}


async def slow_research(ctx: td.ChildContext) -> Any:
    await trio.sleep(0.2)  # a long investigation, shortened
    return await research(ctx)


# The researcher: a Pydantic AI agent whose test model always answers this.
research = td_pydantic_ai.runner(
    Agent(TestModel(custom_output_text="Sessions expire before the login form is sent."))
)

SUBAGENTS = [
    td.Subagent("researcher", slow_research, description="Researches a question."),
    td.Subagent("counter", count_words, description="Counts the words of a text."),
]

WORDS = {"type": "object", "properties": {"words": {"type": "integer"}}, "required": ["words"]}


def plan(results: list[dict[str, Any]]) -> tuple[str, dict[str, Any]] | None:
    """The lead model's next tool call, given what its calls returned so far."""
    run_id = results[0]["run_id"] if results else None
    steps: list[tuple[str, dict[str, Any]]] = [
        (
            "delegate_task",
            {"subagent": "researcher", "task": "Why does login fail?", "background": True},
        ),
        ("subagent_status", {"run_id": run_id}),
        ("wait_subagent", {"run_id": run_id, "timeout": 0.05}),
        ("wait_subagent", {"run_id": run_id}),
        (
            "delegate_task",
            {"subagent": "counter", "task": "three short words", "final_schema": WORDS},
        ),
    ]
    return steps[len(results)] if len(results) < len(steps) else None


async def lead_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
    if returns:
        print(f"  <- {returns[-1].content}")
    step = plan([r.content for r in returns])
    if step is None:
        return ModelResponse(parts=[TextPart("Login fails because sessions expire early.")])
    print(f"lead calls {step[0]}({step[1]})")
    return ModelResponse(parts=[ToolCallPart(*step)])


async def main() -> None:
    async with (
        asyncio_loop(),  # one asyncio loop for every agent in this run
        td.open_runtime(SUBAGENTS) as rt,
        rt.open_parent("lead") as parent,
    ):
        lead = Agent(FunctionModel(lead_model), toolsets=[td_pydantic_ai.toolset(parent)])
        result = await run_asyncio(lead.run, "Find out why login fails.")
        print(f"lead answers: {result.output}")
    print("every delegated run was observed: the fail-closed check passed")


if __name__ == "__main__":
    trio.run(main)
