"""A stdio MCP server whose subagents talk back: they ask questions and report progress.

Run as ``python -m tests.fakes.talking GATES [PROGRESS_SECONDS]`` from the
repository root: ``serve_stdio`` over the subagents below (a TOML file cannot
declare ``asks=True``). Runs that must wait for the test wait for a gate
file in the folder *GATES*, named by their task and step, and mark that they
reached it with a ``.reached`` file, so the test knows what to expect next
without the clock.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import trio

import trio_delegate as td
from trio_delegate.mcp import serve_stdio

#: A question whose schema is a form: a flat object of primitives.
FORM = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}


def _gates() -> Path:
    return Path(os.environ["TALKING_GATES"])


async def _gate(name: str) -> None:
    """Wait until the test opens the gate *name* (a file in the gates folder)."""
    gate = _gates() / name
    # A file has no event to wait on; this is the server's clock, not the test's.
    while not gate.exists():  # noqa: ASYNC110
        await trio.sleep(0.01)


async def ask_text(ctx: td.ChildContext) -> str:
    """Asks one question (a string answer); says what it was told."""
    try:
        answer = await ctx.ask(f"Which colour for {ctx.task}?")
    except td.QuestionDeclinedError as exc:
        return f"{ctx.task}: declined ({exc.reason})"
    return f"{ctx.task}: {answer}"


async def ask_form(ctx: td.ChildContext) -> Any:
    """Asks for a form (name and age); returns the answer."""
    return await ctx.ask("Who is it for?", schema=FORM)


async def ask_list(ctx: td.ChildContext) -> Any:
    """Asks for a list of strings (not a form: asked as one field)."""
    return await ctx.ask("Which tags?", schema={"type": "array", "items": {"type": "string"}})


async def ask_twice(ctx: td.ChildContext) -> list[Any]:
    """Asks two questions in turn."""
    first = await ctx.ask("First?")
    second = await ctx.ask("Second?")
    return [first, second]


async def report_then_ask(ctx: td.ChildContext) -> str:
    """Reports halfway, asks whether to go on, reports done."""
    ctx.progress("halfway", progress=1, total=2)
    answer = await ctx.ask("Go on?")
    ctx.progress("done", progress=2, total=2)
    return f"went on: {answer}"


async def stepper(ctx: td.ChildContext) -> str:
    """Reports step 1, 2, 3, each held at its gate (``<task>.<step>``)."""
    for step in (1, 2, 3):
        ctx.progress(f"step {step}", progress=step, total=3)
        await _gate(f"{ctx.task}.{step}")
    return "stepped"


SUBAGENTS = [
    td.Subagent("ask_text", ask_text, description="Asks which colour.", asks=True),
    td.Subagent("ask_form", ask_form, description="Asks who it is for.", asks=True),
    td.Subagent("ask_list", ask_list, description="Asks for tags.", asks=True),
    td.Subagent("ask_twice", ask_twice, description="Asks twice.", asks=True),
    td.Subagent("report_then_ask", report_then_ask, description="Reports, asks.", asks=True),
    td.Subagent("stepper", stepper, description="Reports three steps."),
]


def main() -> None:
    os.environ["TALKING_GATES"] = sys.argv[1]
    progress = float(sys.argv[2]) if len(sys.argv) > 2 else 0.05
    trio.run(
        lambda: serve_stdio(
            SUBAGENTS,
            config=td.Config(fail_closed=False),
            foreground_limit_seconds=None,
            progress_interval_seconds=progress,
        )
    )


if __name__ == "__main__":
    main()
