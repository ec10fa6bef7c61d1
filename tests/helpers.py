"""Small runners and blocks shared by the test modules."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, Final

import attrs
import trio
import trio.testing

import trio_delegate as td

Runner = Callable[[td.ChildContext], Awaitable[Any]]


def returning(value: Any) -> Runner:
    """A runner that checkpoints once and returns *value*."""

    async def runner(ctx: td.ChildContext) -> Any:
        await trio.lowlevel.checkpoint()
        return value

    return runner


def sleeping(seconds: float, value: Any = "done") -> Runner:
    """A runner that sleeps *seconds* on the Trio clock, then returns *value*."""

    async def runner(ctx: td.ChildContext) -> Any:
        await trio.sleep(seconds)
        return value

    return runner


def raising(exc: BaseException, after: float = 0.0) -> Runner:
    """A runner that sleeps *after* seconds, then raises *exc*.

    Each raise starts a fresh traceback: raised again as it is, one instance
    would chain every earlier raise's frames, and with them every run that
    raised it, for as long as the instance lives (a module's constant does).
    """

    async def runner(ctx: td.ChildContext) -> Any:
        await trio.sleep(after)
        raise exc.with_traceback(None)

    return runner


async def forever(ctx: td.ChildContext) -> Any:
    """A runner that never returns on its own."""
    await trio.sleep_forever()


async def ignores_cancellation(ctx: td.ChildContext) -> str:
    """Catches every cancellation and carries on, for 1,000 s of Trio time."""
    end = trio.current_time() + 1_000
    while trio.current_time() < end:
        with trio.CancelScope(shield=True):
            await trio.sleep(1)
    return "late"


class Stubborn:
    """Told to stop, it finishes its work anyway and returns ``"done anyway"``."""

    def __init__(self) -> None:
        self.started = trio.Event()
        self.cancelled = False

    async def __call__(self, ctx: td.ChildContext) -> str:
        self.started.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            self.cancelled = True  # and it carries on: its last step is its own
        return "done anyway"


def slow_cleanup(seconds: float, log: list[str] | None = None) -> Runner:
    """A runner that runs until cancelled, then spends *seconds* in shielded cleanup."""

    async def runner(ctx: td.ChildContext) -> Any:
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await trio.sleep(seconds)
            if log is not None:
                log.append(f"cleaned {ctx.run_id}")

    return runner


def sub(name: str, runner: Runner, **kwargs: Any) -> td.Subagent:
    return td.Subagent(name, runner, **kwargs)


@asynccontextmanager
async def open_parent(
    *subagents: td.Subagent, config: td.Config | None = None, owner: str = "root"
) -> AsyncIterator[td.Parent]:
    """A runtime holding *subagents* and one parent over all of them."""
    async with (
        td.open_runtime(subagents, config=config) as rt,
        rt.open_parent(owner) as parent,
    ):
        yield parent


@asynccontextmanager
async def open_parent_lenient(
    *subagents: td.Subagent, config: td.Config | None = None
) -> AsyncIterator[td.Parent]:
    """Like :func:`open_parent`, with the fail-closed check off."""
    base = config if config is not None else td.Config()
    async with open_parent(*subagents, config=_evolve(base, fail_closed=False)) as parent:
        yield parent


def _evolve(config: td.Config, **changes: Any) -> td.Config:
    return attrs.evolve(config, **changes)


async def advance(clock: trio.testing.MockClock, seconds: float) -> None:
    """Let every task block, move a manual mock clock by *seconds*, and let them react."""
    await trio.testing.wait_all_tasks_blocked()
    clock.jump(seconds)
    await trio.testing.wait_all_tasks_blocked()


#: The most CPU time of the event loop's thread one scheduler step may take in
#: a stall guard. The stalls the guards were written for held the loop for
#: seconds; an ordinary step takes microseconds to milliseconds, and even on a
#: machine whose other core is busy (CPU time grows there too, through cache
#: misses and the GIL's hand-overs) stays far below a second.
STEP_CPU_LIMIT: Final = 1.0


class StepTimer(trio.abc.Instrument):
    """Measures every task step: the longest is how long the loop was held.

    It counts the CPU time of the event loop's thread during each step
    (``time.thread_time``), not the wall time: what the step itself did, not
    how long other processes on a busy machine, or another thread holding the
    GIL, kept it from running. Add it with ``trio.lowlevel.add_instrument``
    around the code under test, or use :func:`timed_steps`; judge it with
    :meth:`check`.
    """

    def __init__(self, task: trio.lowlevel.Task | None = None) -> None:
        """Args:
        task: measure only this task's steps (``None``: every task's).
        """
        self.longest = 0.0
        self._task = task
        self._started: float | None = None

    def check(self, limit: float = STEP_CPU_LIMIT) -> None:
        """Fail unless every step measured took less than *limit* seconds of CPU time.

        Raises:
            AssertionError: a step took longer.
        """
        assert self.longest < limit, (
            f"a scheduler step took {self.longest:.3f} s of the event loop thread's CPU "
            f"time (limit {limit} s)"
        )

    def exclude_current_step(self) -> None:
        """Leave the step now running out of the measure (a test's own checks)."""
        self._started = None

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if self._task is None or task is self._task:
            self._started = time.thread_time()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        started, self._started = self._started, None
        if started is not None:
            self.longest = max(self.longest, time.thread_time() - started)


@asynccontextmanager
async def timed_steps(*, this_task_only: bool = False) -> AsyncIterator[StepTimer]:
    """A :class:`StepTimer` over every task step from the next one until the block ends.

    Args:
        this_task_only: measure only the steps of the task that enters the block.
    """
    timer = StepTimer(trio.lowlevel.current_task() if this_task_only else None)
    trio.lowlevel.add_instrument(timer)
    try:
        # The step running now began before the instrument was added, and the
        # one running at the end would end after it is removed: a checkpoint
        # on each side leaves every step of the block measured.
        await trio.lowlevel.checkpoint()
        yield timer
        await trio.lowlevel.checkpoint()
    finally:
        trio.lowlevel.remove_instrument(timer)


# -- objects a host might pass whose own methods raise ---------------------------


class HostileError(Exception):
    """What the methods of the objects below raise."""


def raise_hostile(*args: Any, **kwargs: Any) -> Any:
    raise HostileError("a method of a hostile object was called")


class LoudStr(str):
    """A str whose overridable methods raise."""

    __str__ = __repr__ = __format__ = __hash__ = __eq__ = __ne__ = raise_hostile
    strip = encode = isascii = isprintable = isspace = split = raise_hostile


class LoudInt(int):
    """An int whose conversions and comparisons raise."""

    __float__ = __index__ = __repr__ = __str__ = __hash__ = raise_hostile
    __eq__ = __lt__ = __le__ = __gt__ = __ge__ = raise_hostile


class LoudDict(dict[str, Any]):
    """A dict whose reading methods raise."""

    __iter__ = keys = items = values = __getitem__ = get = __len__ = raise_hostile
    __contains__ = __eq__ = __hash__ = __repr__ = raise_hostile  # type: ignore[assignment]


class LoudList(list[Any]):
    """A list whose reading methods raise."""

    __iter__ = __len__ = __getitem__ = __repr__ = __eq__ = raise_hostile


class Unreadable:
    """An object whose every operation, attribute lookups included, raises."""

    __str__ = __repr__ = __format__ = __eq__ = __hash__ = __bool__ = raise_hostile
    __len__ = __iter__ = __getattr__ = __float__ = __int__ = __index__ = raise_hostile


def mcp_initialize(request_id: Any = 1, **params: Any) -> dict[str, Any]:
    """An MCP ``initialize`` request of the legacy handshake; *params* replace its own."""
    body: dict[str, Any] = {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    }
    body.update(params)
    return {"jsonrpc": "2.0", "id": request_id, "method": "initialize", "params": body}
