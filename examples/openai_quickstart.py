"""An OpenAI model delegating to subagents: the OpenAI SDK's Responses API and the tools.

    pip install -e . openai      # from a checkout of trio-delegate
    OPENAI_API_KEY=... python examples/openai_quickstart.py "Why might a login fail?"

The key comes from ``OPENAI_API_KEY``; ``OPENAI_BASE_URL`` points the client
at another endpoint (a proxy, Azure, a local server), and ``OPENAI_MODEL``
picks the model. The model sees the delegation tools in strict mode
(``parent.tools().openai_responses_tools()``); each ``function_call`` goes to
``tools.call``, and its answer, or the error's payload, goes back as the
``function_call_output``. The loop ends when the model answers in text;
leaving the parent then checks that every delegated run was resolved.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import openai
import trio

import trio_delegate as td

INSTRUCTIONS = (
    "You lead a small team. Delegate research to the researcher subagent with "
    "delegate_task; wait for every background run before you answer."
)
#: A turn limit, so a model that never stops calling tools cannot loop forever.
MAX_TURNS = 10


async def researcher(ctx: td.ChildContext) -> dict[str, str]:
    """A stand-in subagent: replace it with your own (a model, tools, a command...)."""
    await trio.sleep(0.1)
    return {"finding": f"looked into {ctx.task!r}: the session cookie had expired"}


def client_from_environment() -> openai.AsyncOpenAI:
    """The client, with the key and (optionally) the base URL from the environment."""
    key = os.environ.get("OPENAI_API_KEY")
    if not key:
        sys.exit("set OPENAI_API_KEY to your OpenAI API key")
    return openai.AsyncOpenAI(api_key=key, base_url=os.environ.get("OPENAI_BASE_URL"))


async def answer_tool_call(tools: td.DelegationTools, name: str, arguments: str) -> str:
    """One function call's output, as the model reads it."""
    try:
        return json.dumps(await tools.call(name, arguments))
    except td.DelegationError as exc:
        # Failures reach the model as error payloads it can act on (replaces=...).
        return json.dumps(exc.to_payload())


async def run_lead(client: openai.AsyncOpenAI, prompt: str) -> str:
    """The lead model's loop over one parent; its final text."""
    model = os.environ.get("OPENAI_MODEL", "gpt-5")
    subagents = [td.Subagent("researcher", researcher, description="Researches a question.")]
    async with td.open_runtime(subagents) as rt, rt.open_parent("lead") as parent:
        tools = parent.tools()
        conversation: list[Any] = [{"role": "user", "content": prompt}]
        for _ in range(MAX_TURNS):
            # The async client runs natively under Trio (no worker thread): the
            # subagents keep running while the model thinks, and cancelling the
            # lead cancels the request in flight. Streamed: each finished output
            # item (a message, a function call) as it ends.
            stream = await client.responses.create(
                model=model,
                instructions=INSTRUCTIONS,
                tools=tools.openai_responses_tools(),
                input=conversation,
                stream=True,
            )
            async with stream:
                items = [
                    event.item
                    async for event in stream
                    if event.type == "response.output_item.done"
                ]
            conversation.extend(item.model_dump(exclude_none=True) for item in items)
            calls = [item for item in items if item.type == "function_call"]
            if not calls:
                return "".join(
                    part.text
                    for item in items
                    if item.type == "message"
                    for part in item.content
                    if part.type == "output_text"
                )
            for item in calls:
                output = await answer_tool_call(tools, item.name, item.arguments)
                conversation.append(
                    {"type": "function_call_output", "call_id": item.call_id, "output": output}
                )
        raise RuntimeError(f"the model was still calling tools after {MAX_TURNS} turns")


def main() -> None:
    """Run the lead on the prompt given on the command line."""
    prompt = " ".join(sys.argv[1:]) or "Why might a login fail after a password reset?"
    print(trio.run(run_lead, client_from_environment(), prompt))


if __name__ == "__main__":
    main()
