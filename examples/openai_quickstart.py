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
What the lead model spent (each response's ``usage``) and what the
subagents reported (``parent.usage()``) are printed to stderr at the end.
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


def response_usage(usage: Any) -> td.Usage:
    """One response's ``usage`` as a ``td.Usage`` (counted as OpenAI counts it:
    the cache in the input, reasoning in the output)."""
    if usage is None:
        return td.Usage(requests=1)
    cached = usage.input_tokens_details.cached_tokens if usage.input_tokens_details else 0
    reasoning = usage.output_tokens_details.reasoning_tokens if usage.output_tokens_details else 0
    return td.Usage(
        requests=1,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_input_tokens=cached or 0,
        reasoning_output_tokens=reasoning or 0,
    )


async def run_lead(client: openai.AsyncOpenAI, prompt: str) -> str:
    """The lead model's loop over one parent; its final text."""
    model = os.environ.get("OPENAI_MODEL", "gpt-5")
    subagents = [td.Subagent("researcher", researcher, description="Researches a question.")]
    async with td.open_runtime(subagents) as rt, rt.open_parent("lead") as parent:
        try:
            return await lead_turns(client, model, parent, prompt)
        finally:
            print(f"subagents spent: {parent.usage()}", file=sys.stderr)


async def lead_turns(client: openai.AsyncOpenAI, model: str, parent: td.Parent, prompt: str) -> str:
    """The model's turns until it answers in text; what they spent goes to stderr."""
    # The lead is the host, not a run: nothing counts its usage but this.
    spent = td.Usage()
    try:
        tools = parent.tools()
        conversation: list[Any] = [{"role": "user", "content": prompt}]
        for _ in range(MAX_TURNS):
            # The async client runs natively under Trio (no worker thread): the
            # subagents keep running while the model thinks, and cancelling the
            # lead cancels the request in flight. Streamed: each finished output
            # item (a message, a function call) as it ends; the usage comes
            # with the completed response.
            stream = await client.responses.create(
                model=model,
                instructions=INSTRUCTIONS,
                tools=tools.openai_responses_tools(),
                input=conversation,
                stream=True,
            )
            items = []
            async with stream:
                async for event in stream:
                    if event.type == "response.output_item.done":
                        items.append(event.item)
                    elif event.type == "response.completed":
                        spent += response_usage(event.response.usage)
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
    finally:
        print(f"lead model spent: {spent}", file=sys.stderr)


def main() -> None:
    """Run the lead on the prompt given on the command line."""
    prompt = " ".join(sys.argv[1:]) or "Why might a login fail after a password reset?"
    print(trio.run(run_lead, client_from_environment(), prompt))


if __name__ == "__main__":
    main()
