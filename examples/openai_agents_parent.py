"""An OpenAI Agents SDK agent delegating through trio_delegate, offline.

The lead agent runs on the SDK's scripted test model (``agents.testing``): it
asks a writer for release notes in the background, waits with a timeout that
runs out, waits for the draft, and continues the writer's conversation to get
a shorter one. The writer is itself an Agents SDK agent run as a subagent, so
the continuation hands it its own earlier conversation. Needs
``pip install -e '.[openai-agents]'`` (from a checkout).

    python examples/openai_agents_parent.py
"""

from __future__ import annotations

import json
from typing import Any

import trio
from agents import Agent, RunConfig, Runner
from agents.items import TResponseOutputItem
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

import trio_delegate as td
from trio_delegate.adapters import asyncio_loop, run_asyncio
from trio_delegate.adapters import openai_agents as td_openai_agents

#: Offline: no trace is exported.
OFFLINE = RunConfig(tracing_disabled=True)


def items(call: ModelCall) -> list[Any]:
    return list(call.input) if isinstance(call.input, list) else []


def writer_turn(call: ModelCall) -> list[TResponseOutputItem]:
    asked = [i["content"] for i in items(call) if isinstance(i, dict) and i.get("role") == "user"]
    if len(asked) == 1:
        return [assistant_message("2.1 adds retries, fixes login timeouts and speeds up search.")]
    return [assistant_message("2.1: retries, login fix, faster search.")]


async def slow_writer(ctx: td.ChildContext) -> Any:
    await trio.sleep(0.2)  # a long draft, shortened
    return await writer(ctx)


writer = td_openai_agents.runner(
    Agent(name="writer", model=ScriptedModel([ModelStep.respond(writer_turn)] * 4)),
    run_config=OFFLINE,
)


def lead_turn(call: ModelCall) -> list[TResponseOutputItem]:
    outputs = [
        i for i in items(call) if isinstance(i, dict) and i.get("type") == "function_call_output"
    ]
    if outputs:
        print(f"  <- {outputs[-1]['output']}")
    run_id = json.loads(outputs[0]["output"])["run_id"] if outputs else None
    # Strict tool schemas: every parameter is sent, null where it is left out.
    steps = [
        ("delegate_task", {"subagent": "writer", "task": "Draft release notes for 2.1.",
                           "final_schema": None, "background": True, "replaces": None}),
        ("wait_subagent", {"run_id": run_id, "timeout": 0.05}),
        ("wait_subagent", {"run_id": run_id, "timeout": None}),
        ("continue_subagent", {"run_id": run_id, "message": "Shorter, please.",
                               "final_schema": None, "background": False}),
    ]  # fmt: skip
    if len(outputs) == len(steps):
        return [assistant_message("Release notes: 2.1: retries, login fix, faster search.")]
    name, arguments = steps[len(outputs)]
    print(f"lead calls {name}({arguments})")
    return [function_call(name, arguments, call_id=f"c{len(outputs)}")]


async def main() -> None:
    subagents = [td.Subagent("writer", slow_writer, description="Writes release notes.")]
    async with (
        asyncio_loop(),  # one asyncio loop for every agent in this run
        td.open_runtime(subagents) as rt,
        rt.open_parent("lead") as parent,
    ):
        lead = Agent(
            name="lead",
            model=ScriptedModel([ModelStep.respond(lead_turn)] * 5),
            tools=td_openai_agents.tools(parent),
        )
        result = await run_asyncio(Runner.run, lead, "Write the 2.1 notes.", run_config=OFFLINE)
        print(f"lead answers: {result.final_output}")
    print("every delegated run was observed: the fail-closed check passed")


if __name__ == "__main__":
    trio.run(main)
