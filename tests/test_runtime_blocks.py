"""Contract §2: exceptions out of ``open_runtime`` / ``open_parent`` blocks.

A body's exception comes out as itself (never in an ``ExceptionGroup``), so do
the package's own errors from the blocks' exits, and a fatal ``BaseException``
of a child wins with the body's exception as its context.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

import trio_delegate as td
from tests.helpers import forever, open_parent, raising, returning, slow_cleanup, sub


def _raise_on_cancel(exc: BaseException) -> Any:
    async def runner(ctx: td.ChildContext) -> None:
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            raise exc from None

    return runner


async def test_runtime_body_exception_comes_out_as_itself(
    autojump_clock: trio.testing.MockClock,
) -> None:
    error = ValueError("runtime body")
    with pytest.raises(ValueError, match="runtime body") as info:  # noqa: PT012 - the block exit is under test
        async with td.open_runtime([sub("idle", forever)]) as rt, rt.open_parent() as parent:
            await parent.start("idle", "t")
            await parent.start("idle", "t")
            await trio.sleep(1)
            raise error
    assert info.value is error
    assert info.type is ValueError


async def test_runtime_body_exception_outside_any_parent_comes_out_as_itself(
    autojump_clock: trio.testing.MockClock,
) -> None:
    error = KeyError("bare")
    with pytest.raises(KeyError) as info:  # noqa: PT012 - the block exit is under test
        async with td.open_runtime([sub("idle", forever)]):
            await trio.sleep(1)
            raise error
    assert info.value is error


async def test_body_exception_group_comes_out_as_the_same_group(
    autojump_clock: trio.testing.MockClock,
) -> None:
    group = ExceptionGroup("host's own group", [ValueError("a"), KeyError("b")])
    with pytest.raises(ExceptionGroup) as info:  # noqa: PT012 - the block exit is under test
        async with open_parent(sub("idle", forever)) as parent:
            await parent.start("idle", "t")
            raise group
    assert info.value is group


async def test_unresolved_error_from_parent_exit_is_not_wrapped(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with pytest.raises(td.UnresolvedDelegationError) as info:
        async with open_parent(sub("idle", forever)) as parent:
            await parent.start("idle", "t")
    assert info.type is td.UnresolvedDelegationError


async def test_child_exception_during_cancellation_does_not_leak(
    autojump_clock: trio.testing.MockClock,
) -> None:
    error = LookupError("body")
    with pytest.raises(LookupError) as info:  # noqa: PT012 - the block exit is under test
        async with open_parent(sub("noisy", _raise_on_cancel(RuntimeError("child")))) as p:
            await p.start("noisy", "t")
            await p.start("noisy", "t")
            await trio.sleep(1)
            raise error
    assert info.value is error
    assert info.type is LookupError


@pytest.mark.parametrize("fatal", [KeyboardInterrupt, SystemExit])
async def test_fatal_child_exception_wins_with_body_exception_as_context(
    autojump_clock: trio.testing.MockClock, fatal: type[BaseException]
) -> None:
    raised = fatal()
    error = ValueError("body")
    with pytest.raises(fatal) as info:  # noqa: PT012 - the block exit is under test
        async with open_parent(sub("fatal", _raise_on_cancel(raised))) as parent:
            await parent.start("fatal", "t")
            await trio.sleep(1)
            raise error
    assert info.value is raised
    assert info.value.__context__ is error


async def test_fatal_child_exception_wins_over_runtime_body_exception(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The parent is open in a task outside the runtime's block, so the
    # runtime's own nursery is the one that cancels the fatal child.
    raised = KeyboardInterrupt()
    error = ValueError("runtime body")

    async def host(rt: td.Runtime, *, task_status: trio.TaskStatus[None]) -> None:
        async with rt.open_parent() as parent:
            await parent.start("fatal", "t")
            task_status.started()
            await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        with pytest.raises(KeyboardInterrupt) as info:  # noqa: PT012 - the block exit is under test
            async with td.open_runtime(
                [sub("fatal", _raise_on_cancel(raised))], config=td.Config(fail_closed=False)
            ) as rt:
                await nursery.start(host, rt)
                await trio.sleep(1)
                raise error
        nursery.cancel_scope.cancel()
    assert info.value is raised
    assert info.value.__context__ is error


async def test_fatal_child_exception_while_body_waits_comes_out_bare(
    autojump_clock: trio.testing.MockClock,
) -> None:
    raised = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt) as info:  # noqa: PT012 - the block exit is under test
        async with open_parent(sub("fatal", raising(raised, after=2)), sub("idle", forever)) as p:
            await p.start("idle", "t")
            await p.start("fatal", "t")
            await trio.sleep_forever()
    assert info.value is raised
    assert trio.current_time() == 2


async def test_fatal_exception_in_a_nested_child_comes_out_bare(
    autojump_clock: trio.testing.MockClock,
) -> None:
    raised = SystemExit(3)

    async def mid(ctx: td.ChildContext) -> None:
        assert ctx.parent is not None
        await ctx.parent.delegate("fatal", "t")

    with pytest.raises(SystemExit) as info:
        async with open_parent(
            sub("fatal", raising(raised, after=1)), sub("mid", mid, children=("fatal",))
        ) as parent:
            await parent.delegate("mid", "t")
    assert info.value is raised


async def test_outer_cancellation_passes_through_both_blocks(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[str] = []
    with trio.move_on_after(5) as scope:
        async with open_parent(sub("slow", slow_cleanup(2, log))) as parent:
            await parent.start("slow", "t")
            await trio.sleep_forever()
    assert scope.cancelled_caught
    assert len(log) == 1
    assert trio.current_time() == 7


async def test_errors_in_the_block_exit_are_not_wrapped_even_with_failed_runs(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with pytest.raises(td.UnresolvedDelegationError) as info:  # noqa: PT012 - the block exit is under test
        async with open_parent(
            sub("bad", raising(ValueError("x"))), sub("ok", returning(1))
        ) as parent:
            await parent.start("bad", "t")
            await parent.start("ok", "t")
            await trio.sleep(1)
    assert info.type is td.UnresolvedDelegationError
    assert len(info.value.unresolved) == 2
