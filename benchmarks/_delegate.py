"""The same scenarios as the raw Trio baselines, through trio_delegate's public API."""

from __future__ import annotations

from collections.abc import Callable

import trio
import trio.testing

import trio_delegate as td

from ._timing import clock
from ._trio_baselines import CHILD_TIMEOUT

__all__ = [
    "SUBAGENT",
    "TASK",
    "background",
    "foreground",
    "hold_and_close",
    "roomy_config",
    "subagents",
]

SUBAGENT = "worker"
TASK = "Summarise the attached notes."


async def _trivial(ctx: td.ChildContext) -> object:
    return None


async def _forever(ctx: td.ChildContext) -> object:
    await trio.sleep_forever()


def subagents() -> list[td.Subagent]:
    """One subagent for trivial children and one for children that never end."""
    return [
        td.Subagent(SUBAGENT, _trivial, description="returns at once"),
        td.Subagent("sleeper", _forever, description="never returns on its own"),
    ]


def roomy_config(runs: int) -> td.Config:
    """Defaults, except room for *runs* runs live at once and retained at once.

    ``retention_max_runs`` must hold every run of a start-them-all-then-wait
    scenario: with the default of 1,000 the earliest would expire before
    they are waited for.
    """
    size = max(runs, 1)
    return td.Config(
        subagent_timeout_seconds=CHILD_TIMEOUT,
        max_concurrent_runs=size,
        max_live_runs=size,
        retention_max_runs=max(size, td.Config().retention_max_runs),
    )


async def foreground(children: int) -> float:
    """*children* sequential foreground delegations, default config; seconds taken."""
    config = td.Config(subagent_timeout_seconds=CHILD_TIMEOUT)
    async with (
        td.open_runtime(subagents(), config=config) as runtime,
        runtime.open_parent() as parent,
    ):
        started = clock()
        for _ in range(children):
            await parent.delegate(SUBAGENT, TASK)
        return clock() - started


async def background(children: int) -> float:
    """Start *children* runs in the background, then wait for each; seconds taken."""
    async with (
        td.open_runtime(subagents(), config=roomy_config(children)) as runtime,
        runtime.open_parent() as parent,
    ):
        started = clock()
        handles = [await parent.start(SUBAGENT, TASK) for _ in range(children)]
        for handle in handles:
            await parent.wait(handle.run_id)
        return clock() - started


async def hold_and_close(runs: int, measure: Callable[[str], None]) -> float:
    """Hold *runs* live runs in one parent, then close everything by cancellation.

    As for the raw baselines, *measure* is called with ``"empty"`` and
    ``"live"``; the close is triggered the same way (cancelling the scope that
    encloses the runtime) and timed to the runtime's exit.
    """
    started = 0.0
    with trio.CancelScope() as scope:
        async with (
            td.open_runtime(subagents(), config=roomy_config(runs)) as runtime,
            runtime.open_parent() as parent,
        ):
            measure("empty")
            for _ in range(runs):
                await parent.start("sleeper", TASK)
            await trio.testing.wait_all_tasks_blocked()
            measure("live")
            started = clock()
            scope.cancel()
            await trio.sleep_forever()
    return clock() - started
