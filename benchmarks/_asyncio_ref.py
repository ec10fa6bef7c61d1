"""The reference a user would otherwise write: a small asyncio delegator.

Runs are tasks of an ``asyncio.TaskGroup``; each runs under its own
``asyncio.timeout`` (the child deadline) and settles a future with its
result or error. A wait is shielded (``asyncio.shield``) so that a wait's own
timeout or cancellation never reaches the child; a foreground delegation
whose caller is cancelled cancels the child and joins it first. There is no
admission limit, retention, fail-closed ledger or result checking: this is
the least code with the same shape, kept as the yardstick of what
trio_delegate costs compared with writing it by hand on asyncio.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ._timing import clock
from ._trio_baselines import CHILD_TIMEOUT

__all__ = ["Delegator", "RunFailed", "RunTimedOut", "background", "foreground"]

Runner = Callable[[str], Awaitable[object]]


class RunFailed(Exception):
    """The runner raised; the runner's exception is the cause."""


class RunTimedOut(Exception):
    """The run's deadline passed before it returned."""


@dataclass(slots=True)
class _Run:
    task: asyncio.Task[None]
    result: asyncio.Future[object]


class Delegator:
    """Foreground and background runs in one task group."""

    def __init__(self, group: asyncio.TaskGroup, timeout: float | None) -> None:
        self._group = group
        self._timeout = timeout
        self._runs: dict[str, _Run] = {}

    def start(self, runner: Runner, task: str) -> str:
        """Start a run in the background; returns its id."""
        run_id = "run_" + secrets.token_hex(16)
        result: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        child = self._group.create_task(self._execute(runner, task, result))
        self._runs[run_id] = _Run(child, result)
        return run_id

    async def _execute(self, runner: Runner, task: str, result: asyncio.Future[object]) -> None:
        try:
            async with asyncio.timeout(self._timeout):
                value = await runner(task)
        except TimeoutError as exc:
            timed_out = RunTimedOut(f"the run timed out after {self._timeout} s")
            timed_out.__cause__ = exc
            result.set_exception(timed_out)
        except asyncio.CancelledError:
            result.cancel()
            raise
        except Exception as exc:
            error = RunFailed(f"the run failed: {type(exc).__name__}: {exc}")
            error.__cause__ = exc
            result.set_exception(error)
        else:
            result.set_result(value)

    def status(self, run_id: str) -> str:
        result = self._runs[run_id].result
        if not result.done():
            return "running"
        if result.cancelled():
            return "cancelled"
        return "completed" if result.exception() is None else "failed"

    async def wait(self, run_id: str, timeout: float | None = None) -> object:
        """The run's result, or ``"running"`` when *timeout* ran out first."""
        result = self._runs[run_id].result
        try:
            async with asyncio.timeout(timeout):
                return await asyncio.shield(result)
        except TimeoutError:
            if result.done():
                return result.result()
            return "running"

    def cancel(self, run_id: str) -> bool:
        run = self._runs[run_id]
        return run.task.cancel()

    async def delegate(self, runner: Runner, task: str) -> object:
        """Start a run and wait for it; a cancelled caller cancels and joins it."""
        run_id = self.start(runner, task)
        run = self._runs.pop(run_id)
        try:
            return await asyncio.shield(run.result)
        except asyncio.CancelledError:
            run.task.cancel()
            await asyncio.wait([run.task])
            raise


async def _trivial(task: str) -> object:
    return None


async def _foreground(children: int) -> float:
    async with asyncio.TaskGroup() as group:
        delegator = Delegator(group, CHILD_TIMEOUT)
        started = clock()
        for _ in range(children):
            await delegator.delegate(_trivial, "Summarise the attached notes.")
        return clock() - started


async def _background(children: int) -> float:
    async with asyncio.TaskGroup() as group:
        delegator = Delegator(group, CHILD_TIMEOUT)
        started = clock()
        ids = [delegator.start(_trivial, "Summarise the attached notes.") for _ in range(children)]
        for run_id in ids:
            await delegator.wait(run_id)
        return clock() - started


def foreground(children: int) -> float:
    """*children* sequential foreground delegations; seconds taken."""
    return asyncio.run(_foreground(children))


def background(children: int) -> float:
    """Start *children* runs, then wait for each; seconds taken."""
    return asyncio.run(_background(children))
