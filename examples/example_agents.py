"""An example Python subagent for examples/subagents.toml.

``python = "example_agents:outline"`` names an async runner: it gets the
run's :class:`trio_delegate.ChildContext` and returns the result.
"""

from __future__ import annotations

import re

import trio

import trio_delegate as td


async def outline(ctx: td.ChildContext) -> str:
    """One bullet per sentence of the task."""
    await trio.lowlevel.checkpoint()
    sentences = [s for s in re.split(r"(?<=[.!?])\s+", ctx.task.strip()) if s]
    return "\n".join(f"- {sentence}" for sentence in sentences)
