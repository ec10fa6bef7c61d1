"""A Claude model delegating to subagents: the Anthropic SDK and the delegation tools.

    pip install -e . anthropic      # from a checkout of trio-delegate
    ANTHROPIC_API_KEY=... python examples/anthropic_quickstart.py "Why might a login fail?"

The key comes from ``ANTHROPIC_API_KEY``; ``ANTHROPIC_BASE_URL`` points the
client at another endpoint (a proxy, a gateway, a local fake), and
``ANTHROPIC_MODEL`` picks the model. The model sees the delegation tools
(``parent.tools().anthropic_tools()``); each tool call it makes goes to
``tools.call``, and its answer, or the error's payload, goes back as the
``tool_result``. The loop ends when the model answers in text; leaving the
parent then checks that every delegated run was resolved. What the lead
model spent (each response's ``usage``) and what the subagents reported
(``parent.usage()``) are printed to stderr at the end.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import anthropic
import trio

import trio_delegate as td

SYSTEM = (
    "You lead a small team. Delegate research to the researcher subagent with "
    "delegate_task; wait for every background run before you answer."
)
#: A turn limit, so a model that never stops calling tools cannot loop forever.
MAX_TURNS = 10


async def researcher(ctx: td.ChildContext) -> dict[str, str]:
    """A stand-in subagent: replace it with your own (a model, tools, a command...)."""
    await trio.sleep(0.1)
    return {"finding": f"looked into {ctx.task!r}: the session cookie had expired"}


def client_from_environment() -> anthropic.AsyncAnthropic:
    """The client, with the key and (optionally) the base URL from the environment."""
    key = os.environ.get("ANTHROPIC_API_KEY")
    if not key:
        sys.exit("set ANTHROPIC_API_KEY to your Anthropic API key")
    return anthropic.AsyncAnthropic(api_key=key, base_url=os.environ.get("ANTHROPIC_BASE_URL"))


async def answer_tool_call(tools: td.DelegationTools, name: str, arguments: Any) -> dict[str, Any]:
    """One tool call, as the tool_result block the model reads."""
    try:
        result = await tools.call(name, arguments)
    except td.DelegationError as exc:
        # Failures reach the model as error results it can act on (replaces=...).
        return {"content": json.dumps(exc.to_payload()), "is_error": True}
    return {"content": json.dumps(result), "is_error": False}


def response_usage(usage: anthropic.types.Usage) -> td.Usage:
    """One response's ``usage`` as a ``td.Usage`` (which counts the cache in the input)."""
    cache_read = usage.cache_read_input_tokens or 0
    cache_creation = usage.cache_creation_input_tokens or 0
    return td.Usage(
        requests=1,
        input_tokens=usage.input_tokens + cache_read + cache_creation,
        output_tokens=usage.output_tokens,
        cache_read_input_tokens=cache_read,
        cache_creation_input_tokens=cache_creation,
    )


async def run_lead(client: anthropic.AsyncAnthropic, prompt: str) -> str:
    """The lead model's loop over one parent; its final text."""
    model = os.environ.get("ANTHROPIC_MODEL", "claude-sonnet-4-5")
    subagents = [td.Subagent("researcher", researcher, description="Researches a question.")]
    async with td.open_runtime(subagents) as rt, rt.open_parent("lead") as parent:
        try:
            return await lead_turns(client, model, parent, prompt)
        finally:
            print(f"subagents spent: {parent.usage()}", file=sys.stderr)


async def lead_turns(
    client: anthropic.AsyncAnthropic, model: str, parent: td.Parent, prompt: str
) -> str:
    """The model's turns until it answers in text; what they spent goes to stderr."""
    # The lead is the host, not a run: nothing counts its usage but this.
    spent = td.Usage()
    try:
        tools = parent.tools()
        messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
        for _ in range(MAX_TURNS):
            # The async client runs natively under Trio (no worker thread): the
            # subagents keep running while the model thinks, and cancelling the
            # lead cancels the request in flight.
            async with client.messages.stream(
                model=model,
                max_tokens=1024,
                system=SYSTEM,
                tools=tools.anthropic_tools(),
                messages=messages,
            ) as stream:
                message = await stream.get_final_message()
            spent += response_usage(message.usage)
            messages.append(
                {"role": "assistant", "content": [block.model_dump() for block in message.content]}
            )
            calls = [block for block in message.content if block.type == "tool_use"]
            if not calls:
                return "".join(block.text for block in message.content if block.type == "text")
            results = []
            for block in calls:
                answer = await answer_tool_call(tools, block.name, block.input)
                results.append({"type": "tool_result", "tool_use_id": block.id, **answer})
            messages.append({"role": "user", "content": results})
        raise RuntimeError(f"the model was still calling tools after {MAX_TURNS} turns")
    finally:
        print(f"lead model spent: {spent}", file=sys.stderr)


def main() -> None:
    """Run the lead on the prompt given on the command line."""
    prompt = " ".join(sys.argv[1:]) or "Why might a login fail after a password reset?"
    print(trio.run(run_lead, client_from_environment(), prompt))


if __name__ == "__main__":
    main()
