"""Contract §2: task summaries, value types, closed parents and runtimes,
and every async call being a Trio checkpoint."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

import trio_delegate as td
from tests.helpers import forever, open_parent, open_parent_lenient, returning, sleeping, sub
from trio_delegate._summary import summarize_task

S = td.RunStatus


async def _summary(task: str) -> str:
    async with open_parent(sub("ok", returning(1))) as parent:
        return (await parent.delegate("ok", task)).task_summary


@pytest.mark.parametrize(
    ("task", "summary"),
    [
        ("plain", "plain"),
        ("  padded  ", "padded"),
        ("many \t\n  kinds\r\nof   space", "many kinds of space"),
        ("x" * 200, "x" * 200),
    ],
    ids=["plain", "trimmed", "collapsed", "exactly-200"],
)
async def test_task_summary_is_trimmed_and_collapsed(
    autojump_clock: trio.testing.MockClock, task: str, summary: str
) -> None:
    assert await _summary(task) == summary


async def test_task_summary_is_cut_to_200_characters_with_a_mark(
    autojump_clock: trio.testing.MockClock,
) -> None:
    summary = await _summary("y" * 201)
    assert len(summary) <= 200
    assert summary.endswith("…")
    assert summary[:-1] == "y" * (len(summary) - 1)
    assert len(summary) >= 190


async def test_task_summary_counts_collapsed_text(autojump_clock: trio.testing.MockClock) -> None:
    # 247 characters raw, 149 once whitespace is collapsed: no cut.
    task = "   ".join(["ab"] * 50)
    summary = await _summary(task)
    assert summary == " ".join(["ab"] * 50)


@pytest.mark.parametrize(
    "value",
    [
        td.RunResult("run_x", "a", "t", 1),
        td.RunHandle("run_x", "a", S.RUNNING),
        td.CancelAck("run_x", True, S.RUNNING),
    ],
    ids=["RunResult", "RunHandle", "CancelAck"],
)
def test_value_types_are_frozen(value: Any) -> None:
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        value.run_id = "run_y"


def test_value_types_have_the_contract_fields() -> None:
    assert [f.name for f in attrs.fields(td.RunResult)] == [
        "run_id",
        "subagent",
        "task_summary",
        "final_result",
    ]
    assert [f.name for f in attrs.fields(td.RunHandle)] == [
        "run_id",
        "subagent",
        "status",
        "progress",
        "questions",
        "usage",
    ]
    assert [f.name for f in attrs.fields(td.Progress)] == ["message", "progress", "total", "seq"]
    assert [f.name for f in attrs.fields(td.Question)] == [
        "question_id",
        "run_id",
        "text",
        "schema",
    ]
    assert [f.name for f in attrs.fields(td.AnswerAck)] == [
        "run_id",
        "question_id",
        "accepted",
        "status",
    ]
    assert [f.name for f in attrs.fields(td.CancelAck)] == [
        "run_id",
        "cancel_requested",
        "status",
    ]


# -- closed parents and runtimes ---------------------------------------------------


async def test_every_call_on_a_closed_parent_raises_runtime_closed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with td.open_runtime([sub("ok", returning(1))]) as rt:
        async with rt.open_parent("alice") as parent:
            result = await parent.delegate("ok", "t")
        calls: list[Callable[[], Any]] = [
            lambda: parent.status(result.run_id),
            lambda: parent.cancel(result.run_id),
            parent.check_resolved,
        ]
        for call in calls:
            with pytest.raises(td.RuntimeClosedError, match="parent 'alice' is closed"):
                call()
        awaitables: list[Callable[[], Awaitable[Any]]] = [
            lambda: parent.wait(result.run_id),
            lambda: parent.wait(result.run_id, timeout=0),
            lambda: parent.start("ok", "t"),
            lambda: parent.delegate("ok", "t"),
        ]
        for make in awaitables:
            with pytest.raises(td.RuntimeClosedError, match="parent 'alice' is closed"):
                await make()
        assert rt.live_runs == 0


async def test_nested_parent_is_closed_once_its_runner_ended(
    autojump_clock: trio.testing.MockClock,
) -> None:
    kept: list[td.Parent] = []

    async def mid(ctx: td.ChildContext) -> str:
        assert ctx.parent is not None
        kept.append(ctx.parent)
        return "done"

    async with open_parent(sub("leaf", returning(1)), sub("mid", mid, children=("leaf",))) as p:
        await p.delegate("mid", "t")
        [nested] = kept
        with pytest.raises(td.RuntimeClosedError, match=f"parent '{nested.owner}' is closed"):
            await nested.start("leaf", "t")
        with pytest.raises(td.RuntimeClosedError):
            nested.status("run_x")


async def test_calls_after_the_runtime_closed_say_the_runtime_closed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with td.open_runtime([sub("ok", returning(1))]) as rt, rt.open_parent() as parent:
        result = await parent.delegate("ok", "t")
    with pytest.raises(td.RuntimeClosedError, match="runtime") as info:
        parent.status(result.run_id)
    assert "closed" in str(info.value)
    with pytest.raises(td.RuntimeClosedError, match="runtime"):
        await parent.wait(result.run_id)
    with pytest.raises(td.RuntimeClosedError, match="runtime"):
        async with rt.open_parent("again"):
            pass  # pragma: no cover


# -- checkpoints ----------------------------------------------------------------


async def test_start_and_delegate_are_checkpoints(autojump_clock: trio.testing.MockClock) -> None:
    async with open_parent_lenient(sub("ok", returning(1)), sub("idle", forever)) as parent:
        with trio.testing.assert_checkpoints():
            await parent.start("idle", "t")
        with trio.testing.assert_checkpoints():
            await parent.delegate("ok", "t")


async def test_wait_is_a_checkpoint_in_every_case(autojump_clock: trio.testing.MockClock) -> None:
    async with open_parent_lenient(sub("ok", returning(1)), sub("idle", forever)) as parent:
        done = await parent.start("ok", "t")
        live = await parent.start("idle", "t")
        await trio.sleep(1)
        with trio.testing.assert_checkpoints():
            await parent.wait(done.run_id)  # already terminal
        with trio.testing.assert_checkpoints():
            await parent.wait(done.run_id, timeout=0)
        with trio.testing.assert_checkpoints():
            await parent.wait(live.run_id, timeout=0)  # live, non-blocking poll
        with trio.testing.assert_checkpoints():
            await parent.wait(live.run_id, timeout=1)


async def test_wait_on_a_terminal_run_honours_cancellation(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_parent(sub("ok", returning(1))) as parent:
        handle = await parent.start("ok", "t")
        await trio.sleep(1)
        with trio.CancelScope() as scope:
            scope.cancel()
            await parent.wait(handle.run_id)
        assert scope.cancelled_caught
        # The cancelled wait observed nothing.
        with pytest.raises(td.UnresolvedDelegationError):
            parent.check_resolved()
        await parent.wait(handle.run_id)


async def test_opening_a_parent_is_a_checkpoint(autojump_clock: trio.testing.MockClock) -> None:
    async with td.open_runtime([sub("ok", sleeping(1))]) as rt:
        with trio.testing.assert_checkpoints():
            async with rt.open_parent():
                pass


def test_child_context_is_read_only_and_readable() -> None:
    ctx = td.ChildContext("run_x", "worker", "the task")
    assert (ctx.run_id, ctx.subagent, ctx.task) == ("run_x", "worker", "the task")
    assert ctx.final_schema is None
    assert ctx.history == ()
    assert ctx.deadline == float("inf")
    assert ctx.parent is None
    for name in ("run_id", "subagent", "task", "final_schema", "history", "deadline", "parent"):
        with pytest.raises(AttributeError):
            setattr(ctx, name, "changed")
    assert "run_id='run_x'" in repr(ctx)


@given(st.text(max_size=260))
def test_task_summary_matches_its_definition(task: str) -> None:
    collapsed = " ".join(task.split())
    expected = collapsed if len(collapsed) <= 200 else collapsed[:199].rstrip() + "…"
    assert summarize_task(task) == expected
