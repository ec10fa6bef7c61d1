"""Runners the Temporal tests' worker processes serve, and a parent process to SIGKILL.

Every runner leaves marker files in ``$TD_TEMPORAL_MARKERS`` (one per attempt
started, one per cleanup finished) so that a test can tell, from outside,
where and how often a run executed.

Run as a script (``python temporal_runners.py ADDRESS TASK_QUEUE LEASE N``),
it is a parent that starts N background runs of ``slow`` on Temporal,
prints their run ids and waits to be killed.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import trio

import trio_delegate as td


def _markers() -> Path:
    return Path(os.environ["TD_TEMPORAL_MARKERS"])


def _mark(kind: str, ctx: td.ChildContext) -> None:
    path = _markers() / f"{kind}-{ctx.run_id}-{os.getpid()}"
    # Written aside and renamed: a reader never sees a marker half written (and
    # marks() never matches the hidden temporary name).
    tmp = path.with_name(f".{path.name}")
    tmp.write_text(str(os.getpid()))
    os.replace(tmp, path)


def marks(kind: str, run_id: str) -> list[Path]:
    """The markers of *kind* a run left (one per attempt, for ``started``)."""
    return sorted(_markers().glob(f"{kind}-{run_id}-*"))


async def echo(ctx: td.ChildContext) -> Any:
    """What the runner was given, and which worker ran it."""
    _mark("started", ctx)
    return {
        "run_id": ctx.run_id,
        "subagent": ctx.subagent,
        "task": ctx.task,
        "history": list(ctx.history),
        "final_schema": ctx.final_schema,
        "has_deadline": ctx.deadline != float("inf"),
        "pid": os.getpid(),
    }


async def typed(ctx: td.ChildContext) -> Any:
    """Exactly the fields of the tests' structured result type."""
    _mark("started", ctx)
    return {"task": ctx.task, "subagent": ctx.subagent}


async def chat(ctx: td.ChildContext) -> td.Output:
    """A result with a transcript: the history, the task and a reply."""
    _mark("started", ctx)
    reply = f"reply to {ctx.task}"
    transcript = [
        *ctx.history,
        {"role": "user", "content": ctx.task},
        {"role": "assistant", "content": reply},
    ]
    return td.Output({"reply": reply, "turns": len(transcript)}, transcript=transcript)


async def spender(ctx: td.ChildContext) -> td.Output:
    """Reports usage twice while it runs and once with its result."""
    _mark("started", ctx)
    ctx.add_usage(td.Usage(requests=1, input_tokens=100, output_tokens=20, cost_usd=0.25))
    ctx.add_usage(td.Usage(requests=1, input_tokens=50, output_tokens=5, cost_usd=0.5))
    return td.Output("spent", usage=td.Usage(output_tokens=1, cost_usd=0.125))


async def boom(ctx: td.ChildContext) -> Any:
    """Fails at once with the task in its message."""
    _mark("started", ctx)
    raise ValueError(f"boom: {ctx.task}")


async def bad_error(ctx: td.ChildContext) -> Any:
    """Fails with a message that is not valid Unicode, and markup."""
    _mark("started", ctx)
    raise ValueError("lone \udfff and <markup>")


async def surrogate(ctx: td.ChildContext) -> Any:
    """A result that is not valid Unicode text."""
    _mark("started", ctx)
    return {"text": "bad \udc80 text"}


async def slow(ctx: td.ChildContext) -> Any:
    """Runs until cancelled; its cleanup takes a while and leaves a marker."""
    _mark("started", ctx)
    try:
        await trio.sleep_forever()
    finally:
        with trio.CancelScope(shield=True):
            # Long enough that a parent that did not wait for it would settle first.
            await trio.sleep(0.5)
            _mark("cleaned", ctx)


async def once_lost(ctx: td.ChildContext) -> Any:
    """Runs until cancelled on its first attempt; returns at once on a later one."""
    earlier = marks("started", ctx.run_id)
    _mark("started", ctx)
    if earlier:
        return {"pid": os.getpid(), "attempts": len(earlier) + 1}
    await trio.sleep_forever()
    return None


async def _parent(address: str, task_queue: str, lease: float, count: int) -> None:
    from trio_delegate.adapters.temporal import temporal_runner

    runner = temporal_runner(
        address, task_queue=task_queue, heartbeat_timeout_seconds=1.0, lease_seconds=lease
    )
    subagent = td.Subagent("slow", runner, timeout_seconds=600)
    config = td.Config(fail_closed=False)
    async with td.open_runtime([subagent], config=config) as rt, rt.open_parent() as parent:
        for _ in range(count):
            handle = await parent.start("slow", "orphan")
            print(handle.run_id, flush=True)
        print("started", flush=True)
        await trio.sleep_forever()


if __name__ == "__main__":
    trio.run(_parent, sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]))
