"""``trio_delegate.lowlevel``: what a surface needs beyond the contract's API."""

from __future__ import annotations

import itertools

import pytest
import trio
import trio.testing

import trio_delegate as td
from trio_delegate.lowlevel import UnstoppedRun, abandon, talk_changed, unstopped_runs

from .helpers import Stubborn, ignores_cancellation

S = td.RunStatus
GRACE = 7.0


def test_the_module_shows_its_names_under_its_own_path() -> None:
    assert td.lowlevel.__all__ == [
        "UnstoppedRun",
        "abandon",
        "answer_in_store",
        "talk_changed",
        "unstopped_runs",
        "worker_context",
    ]
    for name in td.lowlevel.__all__:
        assert getattr(td.lowlevel, name).__module__ == "trio_delegate.lowlevel"
    assert "lowlevel" not in td.__all__  # a module beside the API, as trio.lowlevel is


async def _hang(ctx: td.ChildContext) -> None:
    await trio.sleep_forever()


async def _served_foreground(parent: td.Parent, name: str, started: trio.Event) -> str:
    """A surface's foreground call, as a start and a bounded wait, whose caller is cancelled."""
    handle = await parent.start(name, "go")
    await started.wait()
    with trio.CancelScope() as scope:
        scope.cancel()
        try:
            await parent.wait(handle.run_id, timeout=60)
        finally:
            with trio.CancelScope(shield=True):
                await abandon(parent, handle.run_id)
    return handle.run_id


async def test_abandon_gives_a_run_that_completed_anyway_the_delegate_verdict() -> None:
    runner = Stubborn()
    async with (
        td.open_runtime([td.Subagent("stubborn", runner)]) as runtime,
        runtime.open_parent() as parent,
    ):
        run_id = await _served_foreground(parent, "stubborn", runner.started)
        assert runner.cancelled
        assert parent.status(run_id).status is S.COMPLETED
        # Completed, and nobody was told: unobserved (§17) and unresolved (§7).
        assert [handle.run_id for handle in parent.unobserved()] == [run_id]
        with pytest.raises(td.UnresolvedDelegationError) as raised:
            parent.check_resolved()
        assert [run.run_id for run in raised.value.unresolved] == [run_id]
        result = await parent.wait(run_id)  # a wait still reads it, and observes it
        assert isinstance(result, td.RunResult)
        assert result.final_result == "done anyway"
        parent.check_resolved()


async def test_abandon_cancels_and_joins_a_run_that_stops() -> None:
    started = trio.Event()

    async def stops(ctx: td.ChildContext) -> None:
        started.set()
        await trio.sleep_forever()

    config = td.Config(fail_closed=False)  # a cancelled run stays unresolved (§7)
    async with (
        td.open_runtime([td.Subagent("stops", stops)], config=config) as runtime,
        runtime.open_parent() as parent,
    ):
        run_id = await _served_foreground(parent, "stops", started)
        # Joined before abandon returned; the caller's cancellation answered for it.
        assert parent.status(run_id).status is S.CANCELLED
        assert parent.unobserved() == ()
        assert runtime.live_runs == 0
        with pytest.raises(td.RunCancelledError, match="caller waiting for it"):
            await parent.wait(run_id)


async def test_abandon_leaves_alone_a_run_that_is_not_the_parents() -> None:
    subagents = [td.Subagent("hang", _hang)]
    async with (
        td.open_runtime(subagents, config=td.Config(fail_closed=False)) as runtime,
        runtime.open_parent("one") as one,
        runtime.open_parent("two") as two,
    ):
        handle = await one.start("hang", "go")
        await abandon(two, handle.run_id)
        await abandon(two, "no such run")
        await abandon(two, 42)  # type: ignore[arg-type]
        assert one.status(handle.run_id).status is S.RUNNING


async def test_abandon_refuses_what_is_not_a_parent() -> None:
    with pytest.raises(td.InvalidArgumentsError, match=r"parent must be a trio_delegate\.Parent"):
        await abandon(object(), "run")  # type: ignore[arg-type]


async def test_unstopped_runs_names_the_runs_decided_without_their_runners_then_the_live(
    autojump_clock: trio.testing.MockClock,
) -> None:
    subagents = [td.Subagent("stubborn", ignores_cancellation), td.Subagent("hang", _hang)]
    config = td.Config(cancel_grace_seconds=GRACE, fail_closed=False)
    async with td.open_runtime(subagents, config=config) as runtime:
        assert unstopped_runs(runtime) == ()
        async with runtime.open_parent() as parent:
            stubborn = await parent.start("stubborn", "go")
            await trio.sleep(1)
            assert unstopped_runs(runtime) == (
                UnstoppedRun(stubborn.run_id, "stubborn", S.RUNNING, None),
            )
            parent.cancel(stubborn.run_id)
            await trio.sleep(GRACE + 3)  # decided a grace after the request, 3 s ago
            hang = await parent.start("hang", "go")
            decided, live = unstopped_runs(runtime)
            assert (decided.run_id, decided.subagent, decided.status) == (
                stubborn.run_id,
                "stubborn",
                S.CANCELLED,
            )
            assert decided.decided_seconds_ago == pytest.approx(3)
            assert live == UnstoppedRun(hang.run_id, "hang", S.RUNNING, None)
            parent.cancel(hang.run_id)
            await trio.sleep(1)
            assert [run.run_id for run in unstopped_runs(runtime)] == [stubborn.run_id]
    assert unstopped_runs(runtime) == ()


def test_unstopped_runs_refuses_what_is_not_a_runtime() -> None:
    with pytest.raises(td.InvalidArgumentsError, match=r"runtime must be a trio_delegate\.Runtime"):
        unstopped_runs(object())  # type: ignore[arg-type]


async def test_a_worker_context_sums_its_runners_usage_and_belongs_to_no_run() -> None:
    ctx, reported = td.lowlevel.worker_context("run_w", "spender", "spend")
    assert reported() is None
    ctx.add_usage(td.Usage(requests=1, input_tokens=3, cost_usd=0.1))
    ctx.add_usage(td.Usage(output_tokens=2, cost_usd=0.2))
    assert reported() == td.Usage(requests=1, input_tokens=3, output_tokens=2, cost_usd=0.3)
    with pytest.raises(td.InvalidArgumentsError, match="usage"):
        ctx.add_usage({"input_tokens": 1})  # type: ignore[arg-type]
    ctx.progress("half", progress=1, total=2)  # checked, kept nowhere
    with pytest.raises(td.InputUnavailableError):
        await ctx.ask("which?")
    assert ctx.remaining() is None
    assert (ctx.run_id, ctx.subagent, ctx.task, ctx.asks) == ("run_w", "spender", "spend", False)
    # A context built directly still drops its reports.
    plain = td.ChildContext("run_p", "spender", "spend")
    plain.add_usage(td.Usage(requests=1))
    assert reported() == td.Usage(requests=1, input_tokens=3, output_tokens=2, cost_usd=0.3)


async def _asks_twice(ctx: td.ChildContext) -> str:
    first = await ctx.ask("first?")
    ctx.progress("between")  # a report alone wakes nobody
    second = await ctx.ask("second?")
    return f"{first} {second}"


async def test_talk_changed_wakes_on_each_question_opened_or_closed_and_on_the_end(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with (
        td.open_runtime([td.Subagent("asker", _asks_twice, asks=True)]) as rt,
        rt.open_parent() as parent,
    ):
        run_id = (await parent.start("asker", "go")).run_id
        seen: list[tuple[S, tuple[str, ...]]] = []

        async def follow() -> None:
            while True:
                handle = parent.status(run_id)
                seen.append((handle.status, tuple(q.text for q in handle.questions)))
                if handle.status.is_terminal:
                    return
                await talk_changed(parent, run_id)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(follow)
            await trio.testing.wait_all_tasks_blocked()
            parent.answer(run_id, "a")
            await trio.testing.wait_all_tasks_blocked()
            parent.answer(run_id, "b")
        assert (await parent.wait(run_id)).final_result == "a b"  # type: ignore[union-attr]
    # Every change was heard, and nothing else woke the follower.
    assert [status for status, _ in seen][-1] is S.COMPLETED
    assert (S.INPUT_REQUIRED, ("first?",)) in seen
    assert (S.INPUT_REQUIRED, ("second?",)) in seen
    # Each wake was a change (the report between the questions woke nobody):
    # at most start, first?, running, second?, running, completed.
    assert all(before != after for before, after in itertools.pairwise(seen)), seen
    assert len(seen) <= 6, seen


async def test_talk_changed_returns_at_once_for_an_ended_run_and_refuses_strangers(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with td.open_runtime([td.Subagent("quick", _quick)]) as rt, rt.open_parent() as parent:
        result = await parent.delegate("quick", "go")
        before = trio.current_time()
        await talk_changed(parent, result.run_id)
        assert trio.current_time() == before  # an ended run never holds the caller
        with pytest.raises(td.UnknownRunError):
            await talk_changed(parent, "run_made_up")
        with pytest.raises(td.InvalidArgumentsError, match=r"trio_delegate\.Parent"):
            await talk_changed(object(), result.run_id)  # type: ignore[arg-type]


async def _quick(ctx: td.ChildContext) -> str:
    return "done"
