"""A runtime lives in one Trio run: outside one, or left open when it ends, the error says so.

The reflex of most Python model code is ``asyncio.run(main())``; a runtime
entered by hand (``__aenter__``) can outlive the run that entered it. Both
get a `NotInTrioError` naming the misuse and the fix, not Trio's internals.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import trio

import trio_delegate as td


async def finder(ctx: td.ChildContext) -> str:
    return ctx.task


SUBAGENTS = [td.Subagent("finder", finder, description="Finds.")]


def run_script(script: str) -> str:
    """What a script printed, run by this interpreter in a process of its own."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.stdout + done.stderr


def test_asyncio_run_is_told_to_use_trio() -> None:
    # In a process of its own: this suite loads trio-asyncio, which patches
    # asyncio's loop lookup.
    shown = run_script(
        """
        import asyncio
        import trio_delegate as td

        async def finder(ctx):
            return ctx.task

        async def main():
            async with td.open_runtime([td.Subagent("finder", finder, description="Finds.")]):
                pass

        try:
            asyncio.run(main())
        except td.NotInTrioError as exc:
            assert isinstance(exc, td.DelegationError) and isinstance(exc, RuntimeError)
            print("REFUSED:", exc)
        """
    )
    assert "REFUSED: open_runtime was called from asyncio, not from a Trio run" in shown, shown
    assert "trio.run(main)" in shown
    assert "asyncio_loop" in shown  # the bridge the adapters use


def test_no_event_loop_at_all_is_told_to_use_trio() -> None:
    entering = td.open_runtime(SUBAGENTS).__aenter__()
    with pytest.raises(td.NotInTrioError, match="outside any async event loop"):
        entering.send(None)


def guards(task: trio.lowlevel.Task) -> list[trio.lowlevel.Task]:
    found = [task] if task.name == "trio_delegate run guard" else []
    for nursery in task.child_nurseries:
        for child in nursery.child_tasks:
            found.extend(guards(child))
    return found


async def test_a_runtime_left_in_its_run_leaves_no_guard_behind() -> None:
    root = trio.lowlevel.current_root_task()
    assert root is not None
    for _ in range(3):
        async with td.open_runtime(SUBAGENTS) as rt, rt.open_parent() as parent:
            # A left runtime's guard ends at its next scheduling turn.
            assert guards(root)
            assert await parent.delegate("finder", "x")
    await trio.testing.wait_all_tasks_blocked()
    assert guards(root) == []


def test_a_runtime_left_open_when_its_run_ends_names_the_misuse() -> None:
    # In a process of its own: Trio's run ends in disorder (its own
    # TrioInternalError), which leaves generators to be collected noisily.
    shown = run_script(
        """
        import trio
        import trio_delegate as td

        async def finder(ctx):
            return ctx.task

        block = td.open_runtime([td.Subagent("finder", finder, description="Finds.")])

        async def enter():
            return await block.__aenter__()

        try:
            trio.run(enter)
        except trio.TrioInternalError as exc:
            errors = [exc.__cause__]
            while errors:
                error = errors.pop()
                if isinstance(error, td.NotInTrioError):
                    print("NAMED:", error)
                errors.extend(getattr(error, "exceptions", ()))
        """
    )
    assert "NAMED: the Trio run ended while a trio_delegate runtime opened in it" in shown, shown
    assert "inside the function that trio.run runs" in shown
