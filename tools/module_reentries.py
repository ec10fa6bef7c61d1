"""Count how often a background run with SQLite re-enters a module of the package.

    .venv/bin/python tools/module_reentries.py [--show]

One background run is traced with :func:`sys.setprofile`: its ``start``,
then its ``wait``, each on the caller's task (the writer's, the watcher's
and the run's own tasks run in between; they are left out). Each Python
frame event (a call, a return, a coroutine's suspension or resumption)
gives the module execution is in now: the callee's on a call, the caller's
on a return. Along that sequence of modules, ``trio_delegate`` modules only
and a stretch in one module counted once (whatever it calls outside the
package), a *re-entry* is each time execution comes back to a module it had
already been in before and left: a call to another module and the return
from it is one re-entry of the caller, a resumption one of each module on
the way back in. Fewer re-entries: the caller's path crosses fewer module
boundaries back and forth.

Printed: the re-entries of ``start`` and of ``wait`` and their sum, and the
same counted on calls (and resumptions) only, where a return is no entry.
``--show`` prints each sequence. A warm-up run comes first, so that nothing
is imported or cached during the traced one.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

import trio

import trio_delegate as td

_PACKAGE = "trio_delegate"
_T = TypeVar("_T")


async def _child(ctx: td.ChildContext) -> str:
    await trio.lowlevel.checkpoint()
    return "done"


def _module_of(frame: FrameType | None) -> str | None:
    if frame is None:
        return None
    name = frame.f_globals.get("__name__")
    if isinstance(name, str) and (name == _PACKAGE or name.startswith(_PACKAGE + ".")):
        return name
    return None


class _Trace:
    """The package modules the traced task passes through, with each entry's kind."""

    def __init__(self, task: trio.lowlevel.Task) -> None:
        self.task = task
        self.events: list[tuple[str, str]] = []

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            module = _module_of(frame)
        elif event == "return":
            module = _module_of(frame.f_back)
        else:  # c_call, c_return, c_exception: no Python frame changes
            return
        if module is None or trio.lowlevel.current_task() is not self.task:
            return
        self.events.append((event, module))


def sequence(events: list[tuple[str, str]], *, returns: bool = True) -> list[str]:
    """The modules of *events* (calls only unless *returns*), each stretch once."""
    modules: list[str] = []
    for event, module in events:
        if (returns or event == "call") and (not modules or modules[-1] != module):
            modules.append(module)
    return modules


def reentries(modules: list[str]) -> int:
    """How many times *modules* comes back to a module it had left before."""
    seen: set[str] = set()
    count = 0
    for module in modules:
        if module in seen:
            count += 1
        seen.add(module)
    return count


async def _traced(call: Callable[[], Awaitable[_T]]) -> tuple[_T, list[tuple[str, str]]]:
    trace = _Trace(trio.lowlevel.current_task())
    sys.setprofile(trace)
    try:
        value = await call()
    finally:
        sys.setprofile(None)
    return value, trace.events


async def _traced_run(path: Path) -> dict[str, list[tuple[str, str]]]:
    subagents = [td.Subagent("child", _child, description="a trivial child")]
    async with (
        td.open_runtime(subagents, store=td.SQLiteStore(path)) as runtime,
        runtime.open_parent("root") as parent,
    ):
        # Warm up: the first run imports and caches what later runs reuse.
        await parent.wait((await parent.start("child", "warm up")).run_id)
        handle, started = await _traced(lambda: parent.start("child", "one background run"))
        result, waited = await _traced(lambda: parent.wait(handle.run_id))
        assert isinstance(result, td.RunResult), result
    return {"start": started, "wait": waited}


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        traces = trio.run(_traced_run, Path(tmp) / "runs.db")
    totals = [0, 0]
    for name, events in traces.items():
        modules = sequence(events)
        counts = (reentries(modules), reentries(sequence(events, returns=False)))
        totals = [totals[0] + counts[0], totals[1] + counts[1]]
        print(f"{name}: {counts[0]} re-entries ({counts[1]} on calls only)")
        if "--show" in argv:
            print("    " + " > ".join(m.removeprefix(_PACKAGE + ".") for m in modules))
    print(f"a background run: {totals[0]} re-entries ({totals[1]} on calls only)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
