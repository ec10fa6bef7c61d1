"""Contract §7: the fail-closed policy, replacements and nested parents."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

import trio_delegate as td
from tests.helpers import (
    forever,
    open_parent,
    open_parent_lenient,
    raising,
    returning,
    sleeping,
    slow_cleanup,
    sub,
)

S = td.RunStatus


def _unresolved_ids(error: td.UnresolvedDelegationError) -> list[str]:
    return [entry.run_id for entry in error.unresolved]


async def test_unobserved_background_completion_is_unresolved_at_exit(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with pytest.raises(td.UnresolvedDelegationError) as info:  # noqa: PT012 - the block exit is under test
        async with open_parent(sub("ok", returning("v")), owner="alice") as parent:
            handle = await parent.start("ok", "t")
            await trio.sleep(1)
    [entry] = info.value.unresolved
    assert entry == td.UnresolvedRun(handle.run_id, "ok", "completed", entry.why)
    assert "wait" in entry.why
    assert handle.run_id in str(info.value)
    assert "alice" in str(info.value)


async def test_successful_wait_resolves_a_background_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_parent(sub("ok", sleeping(2, "v"))) as parent:
        handle = await parent.start("ok", "t")
        with pytest.raises(td.UnresolvedDelegationError):
            parent.check_resolved()
        # A timed-out wait is no observation.
        await parent.wait(handle.run_id, timeout=1)
        with pytest.raises(td.UnresolvedDelegationError):
            parent.check_resolved()
        await parent.wait(handle.run_id)
        parent.check_resolved()


async def test_failed_foreground_run_is_unresolved_until_replaced(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_parent(sub("bad", raising(ValueError("x"))), sub("ok", returning(1))) as p:
        with pytest.raises(td.RunFailedError) as info:
            await p.delegate("bad", "t")
        failed_id = info.value.run_id
        assert failed_id is not None
        with pytest.raises(td.UnresolvedDelegationError) as unresolved:
            p.check_resolved()
        [entry] = unresolved.value.unresolved
        assert (entry.run_id, entry.status) == (failed_id, "failed")
        assert f"replaces={failed_id!r}" in entry.why
        # A replacement may use any direct child.
        await p.delegate("ok", "t", replaces=failed_id)
        p.check_resolved()


@pytest.mark.parametrize("ending", ["failed", "cancelled", "timed_out"])
async def test_every_unsuccessful_ending_needs_a_replacement(
    autojump_clock: trio.testing.MockClock, ending: str
) -> None:
    runners: dict[str, Any] = {
        "failed": raising(ValueError("x"), after=1),
        "cancelled": forever,
        "timed_out": forever,
    }
    async with open_parent(
        sub("child", runners[ending], timeout_seconds=3), sub("ok", returning(1))
    ) as parent:
        handle = await parent.start("child", "t")
        if ending == "cancelled":
            parent.cancel(handle.run_id)
        with pytest.raises(td.DelegationError):
            await parent.wait(handle.run_id)
        with pytest.raises(td.UnresolvedDelegationError) as info:
            parent.check_resolved()
        assert [e.status for e in info.value.unresolved] == [ending]
        await parent.delegate("ok", "t", replaces=handle.run_id)


async def test_replacement_resolves_only_once_itself_resolved(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_parent(sub("bad", raising(ValueError("x"))), sub("ok", sleeping(1))) as p:
        with pytest.raises(td.RunFailedError) as info:
            await p.delegate("bad", "t")
        failed_id = info.value.run_id
        assert failed_id is not None
        replacement = await p.start("ok", "t", replaces=failed_id)
        await trio.sleep(5)  # completed, not observed
        with pytest.raises(td.UnresolvedDelegationError) as unresolved:
            p.check_resolved()
        assert _unresolved_ids(unresolved.value) == [failed_id, replacement.run_id]
        await p.wait(replacement.run_id)
        p.check_resolved()


async def test_chain_of_replacements_resolves_every_link(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_parent(sub("bad", raising(ValueError("x"))), sub("ok", returning(1))) as p:
        with pytest.raises(td.RunFailedError) as first:
            await p.delegate("bad", "t")
        with pytest.raises(td.RunFailedError) as second:
            await p.delegate("bad", "t", replaces=first.value.run_id)
        with pytest.raises(td.UnresolvedDelegationError) as info:
            p.check_resolved()
        assert _unresolved_ids(info.value) == [first.value.run_id, second.value.run_id]
        await p.delegate("ok", "t", replaces=second.value.run_id)
        p.check_resolved()


async def test_one_resolved_replacement_of_several_resolves_the_original(
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = td.Config()
    async with (
        td.open_runtime(
            [sub("bad", raising(ValueError("x"))), sub("ok", returning(1))], config=config
        ) as rt,
        rt.open_parent() as p,
    ):
        with pytest.raises(td.RunFailedError) as original:
            await p.delegate("bad", "t")
        original_id = original.value.run_id
        assert original_id is not None
        with pytest.raises(td.RunFailedError) as attempt:
            await p.delegate("bad", "again", replaces=original_id)
        await p.delegate("ok", "t", replaces=original_id)
        with pytest.raises(td.UnresolvedDelegationError) as info:
            p.check_resolved()
        # The original is resolved; the failed attempt is a run of its own
        # that ended failed and has no resolved replacement.
        assert _unresolved_ids(info.value) == [attempt.value.run_id]
        await p.delegate("ok", "t", replaces=attempt.value.run_id)
        p.check_resolved()


async def test_replaces_must_name_a_terminal_non_completed_run_of_the_same_parent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    calls: list[str] = []

    async def ok(ctx: td.ChildContext) -> str:
        calls.append(ctx.task)
        await trio.sleep(1)
        return "v"

    config = td.Config(max_concurrent_runs=1, fail_closed=False)
    async with (
        td.open_runtime(
            [sub("ok", ok), sub("bad", raising(ValueError("x"))), sub("idle", forever)],
            config=config,
        ) as rt,
        rt.open_parent("a") as a,
        rt.open_parent("b") as b,
    ):
        done = await a.delegate("ok", "done")
        running = await a.start("idle", "running")
        pending = await a.start("idle", "pending")
        with pytest.raises(td.RunFailedError) as other:
            await b.delegate("bad", "t")
        foreign_failed = other.value.run_id
        assert foreign_failed is not None
        cases = {
            done.run_id: "completed",
            running.run_id: "running",
            pending.run_id: "pending",
            foreign_failed: "not a run this parent started",
            "run_" + "0" * 32: "not a run this parent started",
        }
        for run_id, phrase in cases.items():
            for method in (a.start, a.delegate):
                with pytest.raises(td.InvalidArgumentsError) as info:
                    await method("ok", "replacement", replaces=run_id)
                assert "replaces" in str(info.value)
                assert phrase in str(info.value)
        assert calls == ["done"]
        assert rt.live_runs == 2
        a.cancel(running.run_id)
        a.cancel(pending.run_id)


async def test_leaving_parent_normally_cancels_joins_then_raises_unresolved(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[str] = []
    with pytest.raises(td.UnresolvedDelegationError) as info:  # noqa: PT012 - the block exit is under test
        async with open_parent(sub("slow", slow_cleanup(5, log))) as parent:
            handle = await parent.start("slow", "t")
            await trio.sleep(1)
    # Joined: the shielded cleanup finished before the error came out.
    assert log == [f"cleaned {handle.run_id}"]
    assert trio.current_time() == 6
    [entry] = info.value.unresolved
    assert (entry.run_id, entry.status) == (handle.run_id, "cancelled")


async def test_leaving_parent_with_exception_cancels_joins_and_propagates_it_unmasked(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[str] = []
    error = ValueError("host failure")
    with pytest.raises(ValueError, match="host failure") as info:  # noqa: PT012 - the block exit is under test
        async with open_parent(sub("slow", slow_cleanup(5, log)), sub("ok", returning(1))) as p:
            handle = await p.start("slow", "t")
            await p.start("ok", "unobserved")
            await trio.sleep(1)
            raise error
    assert info.value is error
    assert log == [f"cleaned {handle.run_id}"]
    assert trio.current_time() == 6


async def test_fail_closed_false_turns_only_the_check_off(
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = td.Config(fail_closed=False)
    async with open_parent(
        sub("ok", returning(1)), sub("bad", raising(ValueError("x"))), config=config
    ) as parent:
        done = await parent.start("ok", "t")
        failed = await parent.start("bad", "t")
        await parent.start("ok", "left running", replaces=None)
        await trio.sleep(1)
        parent.check_resolved()
        # Nothing else changes: errors are still errors, replaces is still checked.
        with pytest.raises(td.RunFailedError):
            await parent.wait(failed.run_id)
        with pytest.raises(td.InvalidArgumentsError):
            await parent.start("ok", "t", replaces=done.run_id)


async def test_check_resolved_lists_every_unresolved_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_parent(
        sub("ok", returning(1)),
        sub("bad", raising(ValueError("x"))),
        sub("idle", forever),
        sub("short", forever, timeout_seconds=1),
    ) as parent:
        observed = await parent.start("ok", "observed")
        completed = await parent.start("ok", "unobserved")
        failed = await parent.start("bad", "t")
        timed_out = await parent.start("short", "t")
        cancelled = await parent.start("idle", "t")
        running = await parent.start("idle", "t")
        parent.cancel(cancelled.run_id)
        await trio.sleep(2)
        await parent.wait(observed.run_id)
        with pytest.raises(td.UnresolvedDelegationError) as info:
            parent.check_resolved()
        entries = info.value.unresolved
        assert [(e.run_id, e.subagent, e.status) for e in entries] == [
            (completed.run_id, "ok", "completed"),
            (failed.run_id, "bad", "failed"),
            (timed_out.run_id, "short", "timed_out"),
            (cancelled.run_id, "idle", "cancelled"),
            (running.run_id, "idle", "running"),
        ]
        assert all(entry.why for entry in entries)
        for entry in entries:
            assert entry.run_id in str(info.value)
        parent.cancel(running.run_id)
        await trio.testing.wait_all_tasks_blocked()
        for entry in entries[1:]:
            await parent.delegate("ok", "retry", replaces=entry.run_id)
        await parent.wait(completed.run_id)
        parent.check_resolved()


async def test_runs_of_other_parents_never_make_this_parent_unresolved(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with td.open_runtime([sub("ok", returning(1)), sub("bad", raising(ValueError()))]) as rt:
        # careful (the inner block) closes without error; careless does not.
        with pytest.raises(td.UnresolvedDelegationError) as info:  # noqa: PT012
            async with (
                rt.open_parent("careless") as careless,
                rt.open_parent("careful") as careful,
            ):
                await careless.start("ok", "t")
                await careless.start("bad", "t")
                await careful.delegate("ok", "t")
                await trio.sleep(1)
                careful.check_resolved()
        assert "careless" in str(info.value)
        assert len(info.value.unresolved) == 2


async def test_evicted_unresolved_run_stays_unresolved_and_says_it_expired(
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = td.Config(retention_max_runs=1)
    with pytest.raises(td.UnresolvedDelegationError) as at_exit:  # noqa: PT012 - the block exit is under test
        async with open_parent(
            sub("ok", returning(1)), sub("bad", raising(ValueError("x"))), config=config
        ) as parent:
            unobserved = await parent.start("ok", "t")
            await trio.sleep(1)
            failed = await parent.start("bad", "t")
            await trio.sleep(1)
            # Both ended; the failed one evicted the unobserved one.
            with pytest.raises(td.ExpiredRunError):
                parent.status(unobserved.run_id)
            with pytest.raises(td.UnresolvedDelegationError) as info:
                parent.check_resolved()
            first, second = info.value.unresolved
            assert (first.run_id, first.subagent, first.status) == (
                unobserved.run_id,
                "ok",
                "completed",
            )
            assert "expired" in first.why
            assert second.run_id == failed.run_id
            # A further run evicts the failed one too; it can still be replaced.
            await parent.delegate("ok", "t", replaces=failed.run_id)
            with pytest.raises(td.ExpiredRunError):
                parent.status(failed.run_id)
            # The completed-but-unobserved run can never be observed any more.
            with pytest.raises(td.ExpiredRunError):
                await parent.wait(unobserved.run_id)
    assert _unresolved_ids(at_exit.value) == [unobserved.run_id]
    assert "expired" in at_exit.value.unresolved[0].why


# -- nested parents (ctx.parent) ----------------------------------------------


async def test_nested_parent_owner_and_children(autojump_clock: trio.testing.MockClock) -> None:
    seen: list[tuple[str, str | None, tuple[str, ...] | None]] = []

    async def record(ctx: td.ChildContext) -> str:
        nested = ctx.parent
        seen.append(
            (
                ctx.run_id,
                None if nested is None else nested.owner,
                None if nested is None else nested.subagents,
            )
        )
        return "v"

    async with open_parent(
        sub("leaf", record), sub("mid", record, children=("leaf",)), owner="host"
    ) as parent:
        await parent.delegate("leaf", "t")
        await parent.delegate("mid", "t")
    (leaf_id, leaf_owner, _), (mid_id, mid_owner, mid_children) = seen
    assert leaf_owner is None  # no children declared: no nested parent
    assert mid_owner == f"host/{mid_id}"
    assert mid_children == ("leaf",)
    assert leaf_id != mid_id


async def test_nested_parent_delegates_only_to_declared_children(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def mid(ctx: td.ChildContext) -> str:
        assert ctx.parent is not None
        with pytest.raises(td.UnknownSubagentError) as info:
            await ctx.parent.delegate("other", "t")
        assert info.value.allowed == ("leaf",)
        return (await ctx.parent.delegate("leaf", "t")).final_result  # type: ignore[no-any-return]

    async with open_parent(
        sub("leaf", returning("leaf result")),
        sub("other", returning("x")),
        sub("mid", mid, children=("leaf",)),
    ) as parent:
        result = await parent.delegate("mid", "t")
        assert result.final_result == "leaf result"


async def test_nested_runner_returning_with_unresolved_work_fails_the_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[str] = []
    nested_ids: list[str] = []

    async def mid(ctx: td.ChildContext) -> str:
        assert ctx.parent is not None
        handle = await ctx.parent.start("leaf", "t")
        nested_ids.append(handle.run_id)
        await trio.sleep(1)
        return "claims to be done"

    async with open_parent(
        sub("leaf", slow_cleanup(2, log)),
        sub("mid", mid, children=("leaf",)),
        sub("ok", returning(1)),
    ) as parent:
        with pytest.raises(td.RunFailedError) as info:
            await parent.delegate("mid", "t")
        assert info.value.run_id is not None
        await parent.delegate("ok", "t", replaces=info.value.run_id)
        cause = info.value.__cause__
        assert isinstance(cause, td.UnresolvedDelegationError)
        assert _unresolved_ids(cause) == nested_ids
        assert info.value.error_type == "UnresolvedDelegationError"
        # The live child was cancelled and joined before the run settled.
        assert log == [f"cleaned {nested_ids[0]}"]
        assert trio.current_time() == 3


async def test_nested_runner_with_resolved_work_completes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def mid(ctx: td.ChildContext) -> Any:
        assert ctx.parent is not None
        with pytest.raises(td.RunFailedError) as failed:
            await ctx.parent.delegate("bad", "t")
        handle = await ctx.parent.start("leaf", "t", replaces=failed.value.run_id)
        result = await ctx.parent.wait(handle.run_id)
        assert isinstance(result, td.RunResult)
        ctx.parent.check_resolved()
        return result.final_result

    async with open_parent(
        sub("leaf", sleeping(1, "leaf")),
        sub("bad", raising(ValueError("x"))),
        sub("mid", mid, children=("leaf", "bad")),
    ) as parent:
        result = await parent.delegate("mid", "t")
        assert result.final_result == "leaf"


async def test_nested_fail_closed_false_lets_runner_return_with_unresolved_work(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def mid(ctx: td.ChildContext) -> str:
        assert ctx.parent is not None
        await ctx.parent.start("leaf", "t")
        return "done"

    async with open_parent_lenient(
        sub("leaf", forever), sub("mid", mid, children=("leaf",))
    ) as parent:
        result = await parent.delegate("mid", "t")
        assert result.final_result == "done"


@pytest.mark.parametrize("outcome", ["returns", "raises", "cancelled", "timed_out"])
async def test_nested_live_children_are_cancelled_and_joined_when_runner_ends(
    autojump_clock: trio.testing.MockClock, outcome: str
) -> None:
    log: list[str] = []
    nested_ids: list[str] = []

    async def mid(ctx: td.ChildContext) -> str:
        assert ctx.parent is not None
        nested_ids.append((await ctx.parent.start("leaf", "a")).run_id)
        nested_ids.append((await ctx.parent.start("leaf", "b")).run_id)
        await trio.sleep(1)
        if outcome == "raises":
            raise ValueError("mid failed")
        if outcome in ("cancelled", "timed_out"):
            await trio.sleep_forever()
        return "done"

    config = td.Config(fail_closed=False)
    async with open_parent(
        sub("leaf", slow_cleanup(4, log)),
        sub("mid", mid, children=("leaf",), timeout_seconds=2),
        config=config,
    ) as parent:
        handle = await parent.start("mid", "t")
        if outcome == "cancelled":
            await trio.sleep(1.5)
            parent.cancel(handle.run_id)
        expected: dict[str, type[Exception] | None] = {
            "returns": None,
            "raises": td.RunFailedError,
            "cancelled": td.RunCancelledError,
            "timed_out": td.RunTimedOutError,
        }
        error = expected[outcome]
        if error is None:
            await parent.wait(handle.run_id)
        else:
            with pytest.raises(error):
                await parent.wait(handle.run_id)
        # Both children finished their 4 s cleanup before the run settled.
        assert sorted(log) == sorted(f"cleaned {run_id}" for run_id in nested_ids)
        ends = {"returns": 1, "raises": 1, "cancelled": 1.5, "timed_out": 2}
        assert trio.current_time() == ends[outcome] + 4
