"""Count how often one background run with SQLite re-enters a module of the package.

    .venv/bin/python tools/module_reentries.py [--show]

A run is traced with :func:`sys.setprofile` from ``parent.start`` until
``parent.wait`` has returned its result (the writer's and the runner's tasks
included: they run on the same thread). Along the sequence of the modules of
the Python frames that execute (``trio_delegate`` modules only; a stretch in
one module counts once, whatever it calls outside the package), a
*re-entry* is each time execution comes back to a module it had already
been in before and left. Fewer re-entries: a run's path crosses fewer module
boundaries back and forth. ``--show`` prints the sequence.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

import trio

import trio_delegate as td

_PACKAGE = "trio_delegate"


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
    """The sequence of package modules execution passes through."""

    def __init__(self) -> None:
        self.sequence: list[str] = []

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            module = _module_of(frame)
        elif event == "return":
            module = _module_of(frame.f_back)
        else:  # c_call, c_return, c_exception: no Python frame changes
            return
        if module is not None and (not self.sequence or self.sequence[-1] != module):
            self.sequence.append(module)


def reentries(sequence: list[str]) -> int:
    """How many times *sequence* comes back to a module it had left before."""
    seen: set[str] = set()
    count = 0
    for module in sequence:
        if module in seen:
            count += 1
        seen.add(module)
    return count


async def _traced_run(path: Path) -> list[str]:
    trace = _Trace()
    subagents = [td.Subagent("child", _child, description="a trivial child")]
    async with (
        td.open_runtime(subagents, store=td.SQLiteStore(path)) as runtime,
        runtime.open_parent("root") as parent,
    ):
        # Warm up: the first run imports and caches what later runs reuse.
        await parent.wait((await parent.start("child", "warm up")).run_id)
        sys.setprofile(trace)
        try:
            handle = await parent.start("child", "one background run")
            result = await parent.wait(handle.run_id)
        finally:
            sys.setprofile(None)
        assert isinstance(result, td.RunResult), result
    return trace.sequence


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        sequence = trio.run(_traced_run, Path(tmp) / "runs.db")
    if "--show" in argv:
        for module in sequence:
            print(module.removeprefix(_PACKAGE + "."))
    print(f"modules visited: {len(set(sequence))}; module re-entries: {reentries(sequence)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
