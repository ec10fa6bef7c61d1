"""The two raw Trio baselines every trio_delegate figure is measured against.

* **bare** — the floor: per child one task (``nursery.start_soon``) and one
  ``trio.Event`` the parent waits on.
* **scoped** — the least hand-written Trio code with the structure the
  runtime's semantics require: per child a task, a cancel scope with a
  deadline (``trio.move_on_after``) and an ``Event``. Its background start
  can also be a checkpoint, as every async call of the runtime must be
  (contract §2): the baseline of the background row.

A child calls a *work* coroutine function (a trivial one that returns at
once, or ``trio.sleep_forever`` to hold it live) and hands its result back
through a one-element list, as a hand-written equivalent would.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Literal

import trio
import trio.testing

from ._timing import clock

__all__ = [
    "CHILD_TIMEOUT",
    "Kind",
    "background",
    "foreground",
    "hold_and_close",
    "trivial_work",
]

#: The child deadline of every scoped child (trio_delegate's default, too).
CHILD_TIMEOUT = 900.0

Kind = Literal["bare", "scoped"]
Work = Callable[[], Awaitable[object]]


async def trivial_work() -> object:
    """The trivial child: returns at once."""
    return None


async def _bare_child(work: Work, done: trio.Event, box: list[object]) -> None:
    box.append(await work())
    done.set()


async def _scoped_child(work: Work, done: trio.Event, box: list[object]) -> None:
    with trio.move_on_after(CHILD_TIMEOUT):
        box.append(await work())
    done.set()


def _child_of(kind: Kind) -> Callable[[Work, trio.Event, list[object]], Awaitable[None]]:
    return _bare_child if kind == "bare" else _scoped_child


async def foreground(kind: Kind, children: int) -> float:
    """Start one trivial child and wait for it, *children* times; seconds taken."""
    child = _child_of(kind)
    async with trio.open_nursery() as nursery:
        started = clock()
        for _ in range(children):
            done = trio.Event()
            nursery.start_soon(child, trivial_work, done, [])
            await done.wait()
        return clock() - started


async def background(kind: Kind, children: int, *, checkpoint: bool = False) -> float:
    """Start *children* trivial children, then wait for each; seconds taken.

    With *checkpoint*, each start is a checkpoint (``trio.lowlevel.checkpoint``
    before ``start_soon``), as an async ``start`` that keeps contract §2 is.
    """
    child = _child_of(kind)
    async with trio.open_nursery() as nursery:
        started = clock()
        events = []
        for _ in range(children):
            if checkpoint:
                await trio.lowlevel.checkpoint()
            done = trio.Event()
            nursery.start_soon(child, trivial_work, done, [])
            events.append(done)
        for done in events:
            await done.wait()
        return clock() - started


async def hold_and_close(kind: Kind, children: int, measure: Callable[[str], None]) -> float:
    """Hold *children* live children, then cancel them all at once.

    *measure* is called with ``"empty"`` once the nursery is open and with
    ``"live"`` once every child is parked. Returns the seconds from the
    cancellation to the nursery's exit.
    """
    child = _child_of(kind)
    started = 0.0
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            measure("empty")
            events = []
            for _ in range(children):
                done = trio.Event()
                nursery.start_soon(child, trio.sleep_forever, done, [])
                events.append(done)
            await trio.testing.wait_all_tasks_blocked()
            measure("live")
            started = clock()
            scope.cancel()
            await trio.sleep_forever()
    return clock() - started
