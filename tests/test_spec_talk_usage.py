"""§19 (progress and questions) and §20 (usage and budgets), checked rule by rule.

Each test is named after one rule of SPEC.md §19 or §20 and quotes it; every
test goes through the public API only (``import trio_delegate as td``), on the
Trio clock (``autojump_clock``), so the file is a check of the contract
independent of how the runtime is built.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import pytest
import trio
import trio.lowlevel
import trio.testing

import trio_delegate as td

Runner = Callable[[td.ChildContext], Awaitable[object]]
LOOSE = td.Config(fail_closed=False)
MAX = 2**63 - 1


def sub(name: str, runner: Runner, **kwargs: Any) -> td.Subagent:
    return td.Subagent(name, runner, **kwargs)


async def forever(ctx: td.ChildContext) -> object:
    await trio.sleep_forever()
    raise AssertionError("unreachable")


async def ask_one(ctx: td.ChildContext) -> object:
    return await ctx.ask("q?")


async def ask_colour(ctx: td.ChildContext) -> object:
    return await ctx.ask("the colour?")


async def settle() -> None:
    await trio.testing.wait_all_tasks_blocked()


# ---------------------------------------------------------------- §19 progress


async def test_progress_keeps_only_the_latest_report_and_seq_counts_the_calls(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§19: "The run keeps only the latest report (`seq` counts the calls)"."""
    go = trio.Event()

    async def runner(ctx: td.ChildContext) -> object:
        for i in range(1000):
            ctx.progress(f"step {i}", progress=i, total=1000)
        await go.wait()
        return "ok"

    async with td.open_runtime([sub("w", runner)], config=LOOSE) as rt, rt.open_parent() as p:
        h = await p.start("w", "t")
        await settle()
        snap = p.status(h.run_id)
        assert snap.progress == td.Progress("step 999", 999, 1000, 1000)
        go.set()
        await p.wait(h.run_id)


async def test_progress_message_is_trimmed_collapsed_and_cut_to_1000_characters(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§19: "The message is trimmed, whitespace runs collapsed and cut to 1,000 characters"."""
    seen: list[td.Progress | None] = []

    async def runner(ctx: td.ChildContext) -> object:
        ctx.progress("  a \n\t  b  ")
        seen.append(p.status(ctx.run_id).progress)
        ctx.progress("x" * 5000)
        seen.append(p.status(ctx.run_id).progress)
        ctx.progress("y" * 1000)
        seen.append(p.status(ctx.run_id).progress)
        return None

    async with td.open_runtime([sub("w", runner)], config=LOOSE) as rt, rt.open_parent() as p:
        await p.delegate("w", "t")
    first, cut, exact = seen
    assert first is not None
    assert first.message == "a b"
    assert cut is not None
    assert cut.message is not None
    assert len(cut.message) == 1000
    assert cut.message.endswith("…")
    assert cut.message[:999] == "x" * 999
    assert exact is not None
    assert exact.message == "y" * 1000


@pytest.mark.parametrize(
    ("kwargs"),
    [
        {"progress": -1},
        {"progress": math.nan},
        {"progress": math.inf},
        {"total": -0.5},
        {"total": math.inf},
        {"progress": "3"},
        {"total": True},
    ],
)
async def test_progress_numbers_are_finite_and_not_negative(
    autojump_clock: trio.testing.MockClock, kwargs: dict[str, Any]
) -> None:
    """§19: "`progress` and `total` are finite numbers ≥ 0" (else `InvalidArgumentsError` in the
    runner)."""
    caught: list[BaseException] = []

    async def runner(ctx: td.ChildContext) -> object:
        try:
            ctx.progress("m", **kwargs)
        except td.InvalidArgumentsError as exc:
            caught.append(exc)
        return None

    async with td.open_runtime([sub("w", runner)], config=LOOSE) as rt, rt.open_parent() as p:
        await p.delegate("w", "t")
    assert len(caught) == 1


async def test_progress_never_goes_down_against_the_highest_number_so_far(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§19: "`progress` never goes down (a lower value is `InvalidArgumentsError` in the runner)"
    and "`progress=None` in a report leaves the snapshot without a number, and the never-go-down
    rule compares with the highest number given so far; `total` is any finite number ≥ 0 and may
    change"."""
    snaps: list[td.Progress | None] = []
    caught: list[BaseException] = []

    async def runner(ctx: td.ChildContext) -> object:
        ctx.progress("a", progress=5, total=10)
        ctx.progress("b")  # no number
        snaps.append(p.status(ctx.run_id).progress)
        try:
            ctx.progress("c", progress=4)
        except td.InvalidArgumentsError as exc:
            caught.append(exc)
        snaps.append(p.status(ctx.run_id).progress)
        ctx.progress("d", progress=5, total=3)  # equal is not lower; total may change
        snaps.append(p.status(ctx.run_id).progress)
        return None

    async with td.open_runtime([sub("w", runner)], config=LOOSE) as rt, rt.open_parent() as p:
        await p.delegate("w", "t")
    assert len(caught) == 1
    assert snaps[0] == td.Progress("b", None, None, 2)
    assert snaps[1] == td.Progress("b", None, None, 2)  # the rejected report is not counted
    assert snaps[2] == td.Progress("d", 5, 3, 3)


async def test_progress_after_the_run_settled_does_nothing_and_checks_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§19: "A call after the run settled does nothing and checks nothing"."""
    kept: list[td.ChildContext] = []

    async def runner(ctx: td.ChildContext) -> object:
        ctx.progress("last", progress=7)
        kept.append(ctx)
        return None

    async with td.open_runtime([sub("w", runner)], config=LOOSE) as rt, rt.open_parent() as p:
        r = await p.delegate("w", "t")
        kept[0].progress("late", progress=1)  # lower, but settled: not checked
        kept[0].progress("late", progress=-1)
        assert p.status(r.run_id).progress == td.Progress("last", 7, None, 1)


async def test_status_and_a_timed_out_wait_carry_the_latest_progress_terminal_keeps_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§19: "`status` and a timed-out `wait` carry the latest `Progress` (the caller's own copy); a
    terminal handle keeps the last one" and "Handles from `unobserved()`, `settled()` and `runs()`
    carry the latest progress and usage, as `status` does"."""
    go = trio.Event()

    async def runner(ctx: td.ChildContext) -> object:
        ctx.progress("half", progress=1, total=2)
        ctx.add_usage(td.Usage(requests=1))
        await go.wait()
        raise ValueError("boom")

    want = td.Progress("half", 1, 2, 1)
    async with td.open_runtime([sub("w", runner)], config=LOOSE) as rt, rt.open_parent() as p:
        settled = p.settled()
        h = await p.start("w", "t")
        out = await p.wait(h.run_id, timeout=1)
        assert isinstance(out, td.RunHandle)
        assert out.progress == want
        assert p.status(h.run_id).progress == want
        (listed,) = p.runs()
        assert listed.progress == want
        assert listed.usage == td.Usage(requests=1)
        go.set()
        got = await settled.__anext__()
        assert got.status is td.RunStatus.FAILED
        assert got.progress == want
        assert got.usage == td.Usage(requests=1)
        (unseen,) = p.unobserved()
        assert unseen.progress == want
        assert unseen.usage == td.Usage(requests=1)
        assert p.status(h.run_id).progress == want
        assert p.runs()[0].progress == want


async def test_progress_is_not_observation_and_does_not_change_the_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§19: "Neither is observation (§7), neither changes a deadline"."""

    async def runner(ctx: td.ChildContext) -> object:
        while True:
            ctx.progress("tick")
            await trio.sleep(1)

    async with (
        td.open_runtime([sub("w", runner, timeout_seconds=10)], config=LOOSE) as rt,
        rt.open_parent() as p,
    ):
        start = trio.current_time()
        h = await p.start("w", "t")
        with pytest.raises(td.RunTimedOutError):
            await p.wait(h.run_id)
        assert trio.current_time() - start == pytest.approx(10)

    async def quick(ctx: td.ChildContext) -> object:
        ctx.progress("done")
        return 1

    async def reported_but_never_waited() -> None:
        async with td.open_runtime([sub("w", quick)]) as rt, rt.open_parent() as p:
            h = await p.start("w", "t")
            await settle()
            assert p.status(h.run_id).progress is not None

    with pytest.raises(td.UnresolvedDelegationError):
        await reported_but_never_waited()


# ---------------------------------------------------------------- §19 questions


async def test_only_a_subagent_declared_with_asks_may_ask(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§19: "Only a subagent declared with `asks=True` may ask (otherwise `ctx.ask` raises
    `InvalidArgumentsError` at once)"."""
    caught: list[BaseException] = []

    async def runner(ctx: td.ChildContext) -> object:
        t0 = trio.current_time()
        try:
            await ctx.ask("may I?")
        except td.InvalidArgumentsError as exc:
            caught.append(exc)
        assert trio.current_time() == t0
        return None

    async with td.open_runtime([sub("w", runner)], config=LOOSE) as rt, rt.open_parent() as p:
        h = await p.start("w", "t")
        await p.wait(h.run_id)
    assert len(caught) == 1


async def test_an_open_question_makes_the_run_input_required_and_an_answer_running_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§19: "While at least one question of a run is open its status is `input_required`; when the
    last is answered, declined or withdrawn it is `running` again" and "`ctx.ask` returns the
    validated, structured answer"."""
    go = trio.Event()

    async def runner(ctx: td.ChildContext) -> object:
        a = await ctx.ask("name?")
        await go.wait()
        return a

    async with (
        td.open_runtime([sub("w", runner, asks=True)], config=LOOSE) as rt,
        rt.open_parent() as p,
    ):
        h = await p.start("w", "t")
        await settle()
        snap = p.status(h.run_id)
        assert snap.status is td.RunStatus.INPUT_REQUIRED
        (q,) = snap.questions
        assert q.run_id == h.run_id
        assert q.text == "name?"
        assert q.schema == {"type": "string"}
        assert p.questions() == (q,)
        ack = p.answer(h.run_id, "ann")
        assert ack == td.AnswerAck(h.run_id, q.question_id, True, td.RunStatus.RUNNING)
        assert p.status(h.run_id).status is td.RunStatus.RUNNING
        assert p.questions() == ()
        go.set()
        res = await p.wait(h.run_id)
        assert isinstance(res, td.RunResult)
        assert res.final_result == "ann"


@attrs.frozen
class Choice:
    colour: str
    count: int


async def test_ask_structures_the_answer_into_an_attrs_schema(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§19: "`schema` is a JSON Schema or an attrs class / dataclass, as `final_schema` (§11)" and
    "`ctx.ask` returns the validated, structured answer"; "an invalid value is
    `InvalidArgumentsError` to the caller and the question stays open; the child never sees it"."""
    got: list[object] = []

    async def runner(ctx: td.ChildContext) -> object:
        got.append(await ctx.ask("pick", schema=Choice))
        return None

    async with (
        td.open_runtime([sub("w", runner, asks=True)], config=LOOSE) as rt,
        rt.open_parent() as p,
    ):
        h = await p.start("w", "t")
        await settle()
        (q,) = p.questions()
        assert q.schema["type"] == "object"
        with pytest.raises(td.InvalidArgumentsError):
            p.answer(h.run_id, {"colour": "red"})
        await settle()
        assert got == []
        assert p.questions() == (q,)
        assert p.status(h.run_id).status is td.RunStatus.INPUT_REQUIRED
        assert p.answer(h.run_id, {"colour": "red", "count": 2}).accepted
        await p.wait(h.run_id)
    assert got == [Choice("red", 2)]


async def test_decline_reaches_the_child_as_question_declined_with_its_reason(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§19: "raises `td.QuestionDeclinedError` when the parent declines" and "`decline(reason=...)`
    reaches the child as `QuestionDeclinedError.reason`"."""
    reasons: list[str] = []

    async def runner(ctx: td.ChildContext) -> object:
        try:
            await ctx.ask("q?")
        except td.QuestionDeclinedError as exc:
            reasons.append(exc.reason)
        return "went on"

    async with (
        td.open_runtime([sub("w", runner, asks=True)], config=LOOSE) as rt,
        rt.open_parent() as p,
    ):
        h = await p.start("w", "t")
        await settle()
        ack = p.decline(h.run_id, reason="not now")
        assert ack.accepted
        assert ack.status is td.RunStatus.RUNNING
        assert (await p.wait(h.run_id)) == td.RunResult(h.run_id, "w", "t", "went on")
    assert reasons == ["not now"]


async def test_ask_timeout_raises_ask_timeout_and_withdraws_the_question(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§19: "raises `td.AskTimeoutError` when its own `timeout` passes (the run goes on)" and "A
    question is withdrawn the moment its `ask` ends for any reason"; "Answering ... a question that
    is ... withdrawn ... returns `AnswerAck(accepted=False)`"."""
    asked = trio.Event()
    go = trio.Event()
    seen: list[float] = []

    async def runner(ctx: td.ChildContext) -> object:
        t0 = trio.current_time()
        asked.set()
        with pytest.raises(td.AskTimeoutError):
            await ctx.ask("q?", timeout=5)
        seen.append(trio.current_time() - t0)
        await go.wait()
        return "on"

    async with (
        td.open_runtime([sub("w", runner, asks=True)], config=LOOSE) as rt,
        rt.open_parent() as p,
    ):
        h = await p.start("w", "t")
        await settle()
        (q,) = p.questions()
        await trio.sleep(6)
        assert seen == [pytest.approx(5)]
        assert p.questions() == ()
        assert p.status(h.run_id).status is td.RunStatus.RUNNING
        ack = p.answer(h.run_id, "late", question_id=q.question_id)
        assert ack == td.AnswerAck(h.run_id, q.question_id, False, td.RunStatus.RUNNING)
        go.set()
        assert (await p.wait(h.run_id)).final_result == "on"  # type: ignore[union-attr]


async def test_a_foreground_delegate_without_on_input_cannot_be_asked(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§19: "raises `td.InputUnavailableError` at once when nobody can answer (a foreground
    `delegate` without `on_input`)"."""
    caught: list[BaseException] = []

    async def runner(ctx: td.ChildContext) -> object:
        t0 = trio.current_time()
        try:
            await ctx.ask("q?")
        except td.InputUnavailableError as exc:
            caught.append(exc)
        assert trio.current_time() == t0
        return "alone"

    async with (
        td.open_runtime([sub("w", runner, asks=True)], config=LOOSE) as rt,
        rt.open_parent() as p,
    ):
        assert (await p.delegate("w", "t")).final_result == "alone"
    assert len(caught) == 1


async def test_the_run_keeps_its_slot_and_its_deadline_runs_on_while_asking(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§19: "The run keeps its slot and its deadline runs on" and "It never answers `input_required`
    for a run whose deadline has passed"."""
    config = td.Config(fail_closed=False, max_concurrent_runs=1)
    async with (
        td.open_runtime(
            [sub("ask", ask_one, asks=True, timeout_seconds=10), sub("w", forever)],
            config=config,
        ) as rt,
        rt.open_parent() as p,
    ):
        t0 = trio.current_time()
        h = await p.start("ask", "t")
        other = await p.start("w", "t")
        await settle()
        assert p.status(h.run_id).status is td.RunStatus.INPUT_REQUIRED
        assert p.status(other.run_id).status is td.RunStatus.PENDING
        await trio.sleep(10)
        with pytest.raises(td.RunTimedOutError):
            await p.wait(h.run_id)
        assert trio.current_time() - t0 == pytest.approx(10)
        assert p.questions() == ()
        assert p.status(other.run_id).status is td.RunStatus.RUNNING


async def test_wait_returns_the_input_required_handle_whatever_its_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§19: "`wait(run_id, timeout=...)` returns the handle (status `input_required`, its questions)
    as soon as the run is waiting for an answer, whatever the timeout, `None` included"."""

    async def runner(ctx: td.ChildContext) -> object:
        await trio.sleep(3)
        return await ctx.ask("q?")

    async with (
        td.open_runtime([sub("w", runner, asks=True)], config=LOOSE) as rt,
        rt.open_parent() as p,
    ):
        h = await p.start("w", "t")
        t0 = trio.current_time()
        out = await p.wait(h.run_id)
        assert trio.current_time() - t0 == pytest.approx(3)
        assert isinstance(out, td.RunHandle)
        assert out.status is td.RunStatus.INPUT_REQUIRED
        assert len(out.questions) == 1
        again = await p.wait(h.run_id, timeout=100)
        assert isinstance(again, td.RunHandle)
        assert trio.current_time() - t0 == pytest.approx(3)
        p.answer(h.run_id, "a")
        assert (await p.wait(h.run_id)).final_result == "a"  # type: ignore[union-attr]


class _AnswerFirst(trio.abc.Instrument):
    """Answers a run's question before any task takes its next step."""

    def __init__(self, parent: td.Parent, run_id: str) -> None:
        self.parent, self.run_id = parent, run_id
        self.answered = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if self.parent.questions():
            assert self.parent.answer(self.run_id, "quick").accepted
            self.answered += 1


async def test_a_question_answered_before_the_waiter_runs_does_not_end_the_wait(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§19: "A wait answers `input_required` when it sees the run waiting for an answer; a question
    opened and answered before the waiting task runs again does not end the wait"."""

    async def runner(ctx: td.ChildContext) -> object:
        await trio.sleep(1)
        return await ctx.ask("q?")

    async with (
        td.open_runtime([sub("w", runner, asks=True)], config=LOOSE) as rt,
        rt.open_parent() as p,
    ):
        h = await p.start("w", "t")
        answer_first = _AnswerFirst(p, h.run_id)
        trio.lowlevel.add_instrument(answer_first)
        try:
            out = await p.wait(h.run_id)
        finally:
            trio.lowlevel.remove_instrument(answer_first)
        assert answer_first.answered == 1
        assert out == td.RunResult(h.run_id, "w", "t", "quick")


async def test_on_input_answers_the_questions_of_a_foreground_delegate(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§19: "`delegate(..., on_input=f)`: each question of the foreground run is passed to `f` in
    the caller's task and its return value is the answer"."""
    asked: list[str] = []

    async def runner(ctx: td.ChildContext) -> object:
        return [await ctx.ask("one?"), await ctx.ask("two?", schema={"type": "integer"})]

    async def on_input(q: td.Question) -> object:
        asked.append(q.text)
        return "1" if q.text == "one?" else 2

    async with (
        td.open_runtime([sub("w", runner, asks=True)], config=LOOSE) as rt,
        rt.open_parent() as p,
    ):
        r = await p.delegate("w", "t", on_input=on_input)
        assert r.final_result == ["1", 2]
    assert asked == ["one?", "two?"]


async def test_an_on_input_exception_propagates_after_the_run_is_cancelled_and_joined(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§19: "an exception from `f` propagates from `delegate`, which cancels and joins the run
    first"."""
    cleaned: list[bool] = []

    async def runner(ctx: td.ChildContext) -> object:
        try:
            return await ctx.ask("q?")
        finally:
            with trio.CancelScope(shield=True):
                await trio.sleep(1)
            cleaned.append(True)

    class Boom(Exception):
        pass

    async def on_input(q: td.Question) -> object:
        raise Boom

    async with (
        td.open_runtime([sub("w", runner, asks=True)], config=LOOSE) as rt,
        rt.open_parent() as p,
    ):
        with pytest.raises(Boom):
            await p.delegate("w", "t", on_input=on_input)
        assert cleaned == [True]
        (h,) = p.runs()
        assert h.status is td.RunStatus.CANCELLED


async def test_on_input_may_decline_and_a_bad_value_ends_delegate_with_invalid_arguments(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§19: "`on_input` may raise `QuestionDeclinedError` to decline; a value it returns that fails
    the schema ends `delegate` with `InvalidArgumentsError` after the run is cancelled and joined".
    """

    async def runner(ctx: td.ChildContext) -> object:
        try:
            await ctx.ask("q?")
        except td.QuestionDeclinedError as exc:
            return f"declined: {exc.reason}"
        return "answered"

    async def decline(q: td.Question) -> object:
        raise td.QuestionDeclinedError("no", reason="busy")

    async def wrong(q: td.Question) -> object:
        return 42  # schema is a string

    async with (
        td.open_runtime([sub("w", runner, asks=True)], config=LOOSE) as rt,
        rt.open_parent() as p,
    ):
        r = await p.delegate("w", "t", on_input=decline)
        assert r.final_result == "declined: busy"
        with pytest.raises(td.InvalidArgumentsError):
            await p.delegate("w", "t", on_input=wrong)
        assert p.runs()[-1].status is td.RunStatus.CANCELLED


async def test_continue_run_takes_on_input_for_a_foreground_continuation(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§19: "`continue_run(..., on_input=None)` takes the same argument for a foreground
    continuation"."""

    async def runner(ctx: td.ChildContext) -> object:
        if ctx.history:
            return await ctx.ask("again?")
        return "first"

    async def on_input(q: td.Question) -> object:
        return "yes"

    async with (
        td.open_runtime([sub("w", runner, asks=True)], config=LOOSE) as rt,
        rt.open_parent() as p,
    ):
        r = await p.delegate("w", "t")
        c = await p.continue_run(r.run_id, "more", on_input=on_input)
        assert isinstance(c, td.RunResult)
        assert c.final_result == "yes"


async def test_answer_rules_oldest_first_closed_questions_terminal_runs_and_unknown_runs(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§19: "`question_id=None` means the run's oldest open question. Answering or declining a
    question that is answered, declined or withdrawn, or a run that is terminal, returns
    `AnswerAck(accepted=False)`; a run the parent cannot see is `UnknownRunError`" and
    "`questions()` lists open questions oldest first"; "`AnswerAck.status` is read right after the
    answer is applied: `running` when no other question is open"."""
    answers: dict[str, object] = {}

    async def runner(ctx: td.ChildContext) -> object:
        async def one(text: str) -> None:
            answers[text] = await ctx.ask(text)

        async with trio.open_nursery() as n:
            n.start_soon(one, "first")
            await trio.sleep(1)
            n.start_soon(one, "second")
        return answers

    async with (
        td.open_runtime([sub("w", runner, asks=True)], config=LOOSE) as rt,
        rt.open_parent() as p,
        rt.open_parent("other") as other,
    ):
        h = await p.start("w", "t")
        await trio.sleep(2)
        q1, q2 = p.questions()
        assert (q1.text, q2.text) == ("first", "second")
        assert q1.question_id != q2.question_id
        with pytest.raises(td.UnknownRunError):
            other.answer(h.run_id, "x")
        with pytest.raises(td.UnknownRunError):
            other.decline(h.run_id)
        ack = p.answer(h.run_id, "A")  # oldest
        assert ack == td.AnswerAck(h.run_id, q1.question_id, True, td.RunStatus.INPUT_REQUIRED)
        assert not p.answer(h.run_id, "again", question_id=q1.question_id).accepted
        assert not p.decline(h.run_id, question_id=q1.question_id).accepted
        assert not p.answer(h.run_id, "x", question_id="nope").accepted
        ack = p.answer(h.run_id, "B", question_id=q2.question_id)
        assert ack.accepted
        assert ack.status is td.RunStatus.RUNNING
        assert p.answer(h.run_id, "none open").accepted is False
        await p.wait(h.run_id)
        assert answers == {"first": "A", "second": "B"}
        late = p.answer(h.run_id, "late")
        assert not late.accepted
        assert late.status is td.RunStatus.COMPLETED
        assert not p.decline(h.run_id).accepted
        with pytest.raises(td.UnknownRunError):
            p.answer("0" * 32, "x")


async def test_cancel_withdraws_the_questions_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§19: "`cancel` withdraws the run's questions at once" and "a run whose cancellation is
    delivered while it asks reads `running` until it settles" (§3); wait "never answers
    `input_required` for a run ... whose cancellation was delivered"."""
    release = trio.Event()

    async def runner(ctx: td.ChildContext) -> object:
        try:
            return await ctx.ask("q?")
        finally:
            with trio.CancelScope(shield=True):
                await release.wait()

    async with (
        td.open_runtime([sub("w", runner, asks=True)], config=LOOSE) as rt,
        rt.open_parent() as p,
    ):
        h = await p.start("w", "t")
        await settle()
        (q,) = p.questions()
        assert p.cancel(h.run_id).cancel_requested
        assert p.questions() == ()
        assert p.status(h.run_id).questions == ()
        assert not p.answer(h.run_id, "x", question_id=q.question_id).accepted
        await settle()
        assert p.status(h.run_id).status is td.RunStatus.RUNNING
        out = await p.wait(h.run_id, timeout=5)
        assert isinstance(out, td.RunHandle)
        assert out.status is td.RunStatus.RUNNING
        release.set()
        with pytest.raises(td.RunCancelledError):
            await p.wait(h.run_id)


async def test_an_ask_after_cancellation_was_delivered_is_input_unavailable(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§19: "An `ask` made after the run's cancellation was delivered (e.g. in shielded cleanup)
    raises `InputUnavailableError` at once"."""
    caught: list[BaseException] = []

    async def runner(ctx: td.ChildContext) -> object:
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                try:
                    await ctx.ask("still there?")
                except td.InputUnavailableError as exc:
                    caught.append(exc)
        return None

    async with (
        td.open_runtime([sub("w", runner, asks=True)], config=LOOSE) as rt,
        rt.open_parent() as p,
    ):
        h = await p.start("w", "t")
        await settle()
        t0 = trio.current_time()
        p.cancel(h.run_id)
        with pytest.raises(td.RunCancelledError):
            await p.wait(h.run_id)
        assert trio.current_time() == t0
    assert len(caught) == 1


async def test_closing_the_parent_cancels_asking_runs_and_names_the_unanswered_question(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§19: "Closing a parent or runtime cancels and joins asking runs like any live run; the
    fail-closed error names the unanswered question"."""
    asked: list[td.Question] = []

    async def leave_while_asking(rt: td.Runtime) -> None:
        async with rt.open_parent() as p:
            await p.start("w", "t")
            await settle()
            asked.extend(p.questions())

    async with td.open_runtime([sub("w", ask_colour, asks=True)]) as rt:
        with pytest.raises(td.UnresolvedDelegationError) as info:
            await leave_while_asking(rt)
        (q,) = asked
        assert q.question_id in str(info.value)
        assert "the colour?" in str(info.value)
        async with rt.open_parent() as again:
            assert again.questions() == ()


async def test_a_nested_parent_sees_and_answers_its_childrens_questions(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§19: "A nested parent (`ctx.parent`) sees its children's questions and may answer them or ask
    its own parent"."""

    async def lead(ctx: td.ChildContext) -> object:
        assert ctx.parent is not None
        h = await ctx.parent.start("leaf", "x")
        while not ctx.parent.questions():  # noqa: ASYNC110 - polls the public snapshot
            await trio.sleep(1)
        (q,) = ctx.parent.questions()
        assert q.run_id == h.run_id
        upper = await ctx.ask(f"relay: {q.text}")
        assert ctx.parent.answer(h.run_id, upper).accepted
        done = await ctx.parent.wait(h.run_id)
        assert isinstance(done, td.RunResult)
        return done.final_result

    async def leaf(ctx: td.ChildContext) -> object:
        return await ctx.ask("colour?")

    subs = [sub("lead", lead, children=["leaf"], asks=True), sub("leaf", leaf, asks=True)]
    async with td.open_runtime(subs, config=LOOSE) as rt, rt.open_parent(subagents=["lead"]) as p:
        h = await p.start("lead", "t")
        out = await p.wait(h.run_id)
        assert isinstance(out, td.RunHandle)
        (q,) = p.questions()
        assert q.text == "relay: colour?"
        assert q.run_id == h.run_id
        assert out.questions == (q,)
        p.answer(h.run_id, "blue")
        r = await p.wait(h.run_id)
        assert isinstance(r, td.RunResult)
        assert r.final_result == "blue"


@pytest.mark.parametrize(
    ("text", "kwargs"),
    [
        ("bad \ud800 text", {}),
        ("x" * 101, {}),
        (123, {}),
        ("ok", {"schema": {"type": 5}}),
        ("ok", {"timeout": -1}),
        ("ok", {"timeout": math.nan}),
        ("ok", {"timeout": 10**400}),
    ],
)
async def test_a_malformed_question_text_schema_or_timeout_is_invalid_at_once(
    autojump_clock: trio.testing.MockClock, text: Any, kwargs: dict[str, Any]
) -> None:
    """§19: "A question's text is at most `max_task_chars` and valid Unicode; a malformed text,
    schema or timeout is `InvalidArgumentsError` at once"."""
    caught: list[BaseException] = []

    async def runner(ctx: td.ChildContext) -> object:
        t0 = trio.current_time()
        try:
            await ctx.ask(text, **kwargs)
        except td.InvalidArgumentsError as exc:
            caught.append(exc)
        assert trio.current_time() == t0
        assert p.questions() == ()
        return None

    config = td.Config(fail_closed=False, max_task_chars=100)
    async with (
        td.open_runtime([sub("w", runner, asks=True)], config=config) as rt,
        rt.open_parent() as p,
    ):
        h = await p.start("w", "t")
        await p.wait(h.run_id)
    assert len(caught) == 1


async def test_an_answer_over_max_result_bytes_or_too_deep_is_invalid_and_the_question_stays(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§19: "An answer over `max_result_bytes` (JSON), deeper than `max_nesting_depth`, ... is
    `InvalidArgumentsError`"."""
    config = td.Config(fail_closed=False, max_result_bytes=100, max_nesting_depth=5)

    async def runner(ctx: td.ChildContext) -> object:
        return await ctx.ask("q?", schema={})

    async with (
        td.open_runtime([sub("w", runner, asks=True)], config=config) as rt,
        rt.open_parent() as p,
    ):
        h = await p.start("w", "t")
        await settle()
        with pytest.raises(td.InvalidArgumentsError):
            p.answer(h.run_id, "x" * 200)
        deep: object = 1
        for _ in range(10):
            deep = [deep]
        with pytest.raises(td.InvalidArgumentsError):
            p.answer(h.run_id, deep)
        assert len(p.questions()) == 1
        assert p.answer(h.run_id, [1]).accepted
        assert (await p.wait(h.run_id)).final_result == [1]  # type: ignore[union-attr]


async def test_question_ids_are_unique_random_and_long(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§19: "`td.Question(question_id, run_id, text, schema)` # question_id unique forever (random,
    >= 96 bits)"."""
    ids: list[str] = []

    async def runner(ctx: td.ChildContext) -> object:
        for _ in range(20):
            with trio.move_on_after(1):
                await ctx.ask("q?")
        return None

    async def collector() -> None:
        while len(ids) < 20:
            for q in p.questions():
                if q.question_id not in ids:
                    ids.append(q.question_id)
            await trio.sleep(0.5)

    async with (
        td.open_runtime([sub("w", runner, asks=True)], config=LOOSE) as rt,
        rt.open_parent() as p,
    ):
        h = await p.start("w", "t")
        await collector()
        await p.wait(h.run_id)
    assert len(set(ids)) == 20
    assert all(len(i) >= 16 and h.run_id not in i for i in ids)


async def test_tools_offer_answer_subagent_and_show_progress_and_questions(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§19: "`answer_subagent` ... is offered when a direct child has `asks=True`; `subagent_status`
    and `wait_subagent` add `"progress"` and `"questions"` ... A foreground `delegate_task` whose
    child asks returns the handle with its question; the run goes on as background work" and
    "`answer_subagent` returns the `AnswerAck` as `{run_id, question_id, accepted, status}`
    (`accepted: false` is a result, not an error)"."""

    async def runner(ctx: td.ChildContext) -> object:
        ctx.progress("thinking", progress=1, total=3)
        return await ctx.ask("which?")

    subs = [sub("ask", runner, asks=True), sub("plain", forever)]
    async with td.open_runtime(subs, config=LOOSE) as rt:
        async with rt.open_parent(subagents=["plain"]) as plain:
            names = {d.name for d in plain.tools().definitions()}
            assert "answer_subagent" not in names
        async with rt.open_parent() as p:
            tools = p.tools()
            assert "answer_subagent" in {d.name for d in tools.definitions()}
            out = await tools.call("delegate_task", {"subagent": "ask", "task": "t"})
            assert out["status"] == "input_required"
            (q,) = out["questions"]
            assert q["question"] == "which?"
            assert q["schema"] == {"type": "string"}
            assert out["progress"] == {"message": "thinking", "progress": 1, "total": 3, "seq": 1}
            rid = out["run_id"]
            status = await tools.call("subagent_status", {"run_id": rid})
            assert status["questions"] == out["questions"]
            assert "progress" in status
            waited = await tools.call("wait_subagent", {"run_id": rid})
            assert waited["questions"] == out["questions"]
            ack = await tools.call("answer_subagent", {"run_id": rid, "answer": "this"})
            assert ack == {
                "run_id": rid,
                "question_id": q["question_id"],
                "accepted": True,
                "status": "running",
            }
            again = await tools.call("answer_subagent", {"run_id": rid, "answer": "that"})
            assert again["accepted"] is False
            done = await tools.call("wait_subagent", {"run_id": rid})
            assert done["final_result"] == "this"


# ---------------------------------------------------------------- §20 usage values


@pytest.mark.parametrize(
    "kwargs",
    [
        {"requests": -1},
        {"input_tokens": True},
        {"output_tokens": 3.0},
        {"input_tokens": 2**63},
        {"cost_usd": -0.01},
        {"cost_usd": math.nan},
        {"cost_usd": math.inf},
        {"cost_usd": "1"},
        {"cost_usd": True},
    ],
)
def test_usage_values_are_bounded_integers_and_a_finite_cost(kwargs: dict[str, Any]) -> None:
    """§20: "Token counts are `int` (not `bool`, not `3.0`); `cost_usd` is a finite `int` or `float`
    ≥ 0; `td.Usage(...)` itself raises `InvalidArgumentsError` for anything else"."""
    with pytest.raises(td.InvalidArgumentsError):
        td.Usage(**kwargs)


def test_usage_accepts_the_edges() -> None:
    """§20: "`Usage` values are integers 0 … 2**63-1 and a finite `cost_usd` ≥ 0"."""
    u = td.Usage(requests=MAX, input_tokens=0, cost_usd=0)
    assert u.requests == MAX
    assert u.cost_usd == 0


def test_usage_adds_field_by_field_saturating_with_exact_decimal_costs() -> None:
    """§20: "Usage adds field by field", "Sums saturate at 2**63-1, never wrap; costs add as exact
    decimals of each report's shortest form (0.1 + 0.2 is 0.3). `Usage` supports `+`"."""
    a = td.Usage(1, 2, 3, 4, 5, 6, 0.1)
    b = td.Usage(10, 20, 30, 40, 50, 60, 0.2)
    assert a + b == td.Usage(11, 22, 33, 44, 55, 66, 0.3)
    big = td.Usage(requests=MAX, input_tokens=MAX - 1)
    assert big + td.Usage(requests=5, input_tokens=1) == td.Usage(requests=MAX, input_tokens=MAX)


async def test_a_report_after_the_run_settled_is_dropped(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§20: "A report after the run settled is dropped"."""
    kept: list[td.ChildContext] = []

    async def runner(ctx: td.ChildContext) -> object:
        ctx.add_usage(td.Usage(requests=1))
        kept.append(ctx)
        return None

    async with td.open_runtime([sub("w", runner)], config=LOOSE) as rt, rt.open_parent() as p:
        r = await p.delegate("w", "t")
        kept[0].add_usage(td.Usage(requests=5))
        assert p.usage(r.run_id) == td.Usage(requests=1)
        assert p.usage() == td.Usage(requests=1)
        assert rt.usage == td.Usage(requests=1)


async def test_usage_rolls_up_run_subtree_parent_and_runtime(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§20: "A run's usage is its own reports plus its nested children's. A parent's usage covers
    the runs started through it; the runtime's, every run"."""

    async def lead(ctx: td.ChildContext) -> object:
        ctx.add_usage(td.Usage(requests=1, input_tokens=10))
        assert ctx.parent is not None
        await ctx.parent.delegate("leaf", "x")
        return None

    async def leaf(ctx: td.ChildContext) -> object:
        ctx.add_usage(td.Usage(requests=2, output_tokens=5, cost_usd=0.25))
        return None

    subs = [sub("lead", lead, children=["leaf"]), sub("leaf", leaf)]
    async with (
        td.open_runtime(subs, config=LOOSE) as rt,
        rt.open_parent(subagents=["lead"]) as p,
        rt.open_parent("b") as q,
    ):
        r = await p.delegate("lead", "t")
        own = await q.delegate("leaf", "t")
        subtree = td.Usage(requests=3, input_tokens=10, output_tokens=5, cost_usd=0.25)
        assert p.usage(r.run_id) == subtree
        assert p.status(r.run_id).usage == subtree
        assert p.usage() == subtree
        assert q.usage(own.run_id) == td.Usage(requests=2, output_tokens=5, cost_usd=0.25)
        assert rt.usage == subtree + q.usage()
        with pytest.raises(td.UnknownRunError):
            q.usage(r.run_id)


async def test_usage_is_none_until_reported_and_a_zero_report_counts(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§20: "`RunHandle.usage`, `None` when nothing was reported" and "A report of all zeros still
    counts as reported". "`RunResult` does not change"."""
    go = trio.Event()

    async def runner(ctx: td.ChildContext) -> object:
        await go.wait()
        ctx.add_usage(td.Usage())
        return "r"

    async with td.open_runtime([sub("w", runner)], config=LOOSE) as rt, rt.open_parent() as p:
        h = await p.start("w", "t")
        assert p.status(h.run_id).usage is None
        out = await p.wait(h.run_id, timeout=1)
        assert isinstance(out, td.RunHandle)
        assert out.usage is None
        go.set()
        res = await p.wait(h.run_id)
        assert [f.name for f in attrs.fields(td.RunResult)] == [
            "run_id",
            "subagent",
            "task_summary",
            "final_result",
        ]
        assert res == td.RunResult(h.run_id, "w", "t", "r")
        assert p.status(h.run_id).usage == td.Usage()


async def test_status_a_timed_out_wait_settled_and_the_record_carry_usage(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§20: "`status`, a timed-out `wait`, `settled()` and the terminal record carry the run's usage
    ...; the stored usage answers after eviction and restart"."""
    store = td.MemoryStore()
    go = trio.Event()

    async def runner(ctx: td.ChildContext) -> object:
        ctx.add_usage(td.Usage(requests=1, input_tokens=3))
        await go.wait()
        return td.Output("r", usage=td.Usage(output_tokens=4))

    config = td.Config(fail_closed=False, retention_seconds=1)
    async with (
        td.open_runtime([sub("w", runner)], config=config, store=store) as rt,
        rt.open_parent() as p,
    ):
        settled = p.settled()
        h = await p.start("w", "t")
        out = await p.wait(h.run_id, timeout=1)
        assert isinstance(out, td.RunHandle)
        assert out.usage == td.Usage(requests=1, input_tokens=3)
        go.set()
        got = await settled.__anext__()
        want = td.Usage(requests=1, input_tokens=3, output_tokens=4)
        assert got.usage == want
        await p.wait(h.run_id)
        await trio.sleep(10)  # evicted from memory
        assert p.usage(h.run_id) == want
    async with (
        td.open_runtime([sub("w", runner)], config=config, store=store) as rt,
        rt.open_parent() as p,
    ):
        assert p.status(h.run_id).usage == want


async def test_total_tokens_are_input_plus_output_with_cache_and_reasoning_inside(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§20: "`input_tokens` includes the cache counts (OpenTelemetry GenAI semantics); total tokens
    are input + output" and "`reasoning_output_tokens` is included in `output_tokens`"."""
    budget = td.Budget(max_total_tokens=10)
    left: list[td.Budget | None] = []

    async def runner(ctx: td.ChildContext) -> object:
        ctx.add_usage(
            td.Usage(
                input_tokens=6,
                cache_read_input_tokens=5,
                cache_creation_input_tokens=1,
                output_tokens=4,
                reasoning_output_tokens=4,
            )
        )
        left.append(ctx.remaining())
        await trio.sleep(1)
        return "not stopped"

    async with (
        td.open_runtime([sub("w", runner, budget=budget)], config=LOOSE) as rt,
        rt.open_parent() as p,
    ):
        r = await p.delegate("w", "t")  # 10 is not past 10
        assert r.final_result == "not stopped"
        assert left == [td.Budget(max_total_tokens=0)]


# ---------------------------------------------------------------- §20 budgets


async def test_a_report_past_a_run_budget_cancels_the_run_with_budget_exceeded_as_cause(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§20: "When a report takes a scope ... past any limit of its budget, every live run in that
    scope is cancelled, with `BudgetExceededError` (naming the scope, the limit and what was spent)
    as the cause of its `RunCancelledError`"; "`BudgetExceededError` has `scope`, `limit`,
    `limit_value` and `spent`"."""
    after: list[str] = []

    async def runner(ctx: td.ChildContext) -> object:
        ctx.add_usage(td.Usage(output_tokens=60))
        ctx.add_usage(td.Usage(output_tokens=60))
        after.append("sync code goes on")
        await trio.lowlevel.checkpoint()
        after.append("checkpoint passed")
        return "done"

    budget = td.Budget(max_output_tokens=100)
    async with (
        td.open_runtime([sub("w", runner, budget=budget)], config=LOOSE) as rt,
        rt.open_parent() as p,
    ):
        with pytest.raises(td.RunCancelledError) as info:
            await p.delegate("w", "t")
        cause = info.value.__cause__
        assert isinstance(cause, td.BudgetExceededError)
        assert isinstance(cause, td.LimitExceededError)
        assert (cause.scope, cause.limit, cause.limit_value, cause.spent) == (
            "run",
            "max_output_tokens",
            100,
            120,
        )
        assert "max_output_tokens" in str(cause)
        assert "120" in str(cause)
        assert after == ["sync code goes on"]


async def test_a_limit_is_passed_only_when_strictly_greater(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§20: "A limit is passed when what was spent is strictly greater"."""

    async def runner(ctx: td.ChildContext) -> object:
        ctx.add_usage(td.Usage(requests=3, cost_usd=0.3))
        await trio.sleep(1)
        return "ok"

    budget = td.Budget(max_requests=3, max_cost_usd=0.3)
    async with (
        td.open_runtime([sub("w", runner, budget=budget)], config=LOOSE) as rt,
        rt.open_parent() as p,
    ):
        assert (await p.delegate("w", "t")).final_result == "ok"


async def test_a_limit_of_zero_is_a_real_limit(autojump_clock: trio.testing.MockClock) -> None:
    """§20: "a limit of 0 is a real limit (any positive spend passes it), never "unlimited"" and
    "Admission is refused in a scope that was stopped or has any limit with nothing left"."""

    async def runner(ctx: td.ChildContext) -> object:
        ctx.add_usage(td.Usage(cost_usd=0.0001))
        await trio.sleep(1)
        return "ok"

    async with td.open_runtime(
        [sub("w", runner, budget=td.Budget(max_cost_usd=0))], config=LOOSE
    ) as rt:
        async with rt.open_parent() as p:
            with pytest.raises(td.RunCancelledError) as info:
                await p.delegate("w", "t")
            assert isinstance(info.value.__cause__, td.BudgetExceededError)
        async with rt.open_parent("z", budget=td.Budget(max_requests=0)) as z:
            with pytest.raises(td.BudgetExceededError) as refused:
                await z.start("w", "t")
            assert refused.value.scope == "parent"
            assert z.runs() == ()


async def test_a_parent_budget_stop_cancels_live_and_pending_runs_and_refuses_admission(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§20: "every live run in that scope is cancelled ...; pending runs in it are cancelled at
    once; and admission in that scope raises `BudgetExceededError` before anything starts" and "A
    stopped scope stays stopped for its lifetime"."""
    spend = trio.Event()

    async def spender(ctx: td.ChildContext) -> object:
        await spend.wait()
        ctx.add_usage(td.Usage(requests=2))
        await trio.sleep_forever()
        raise AssertionError

    config = td.Config(fail_closed=False, max_concurrent_runs=2)
    subs = [sub("s", spender), sub("w", forever)]
    async with (
        td.open_runtime(subs, config=config) as rt,
        rt.open_parent(budget=td.Budget(max_requests=1)) as p,
        rt.open_parent("other") as other,
    ):
        bystander = await other.start("w", "t")
        a = await p.start("s", "t")
        b = await p.start("w", "t")
        c = await p.start("w", "t")
        assert c.status is td.RunStatus.PENDING
        await settle()
        spend.set()
        await settle()
        for h in (a, b, c):
            with pytest.raises(td.RunCancelledError) as info:
                await p.wait(h.run_id)
            cause = info.value.__cause__
            assert isinstance(cause, td.BudgetExceededError)
            assert cause.scope == "parent"
        with pytest.raises(td.BudgetExceededError):
            await p.start("w", "t")
        await trio.sleep(100)
        with pytest.raises(td.BudgetExceededError):
            await p.delegate("w", "t")
        assert len(p.runs()) == 3
        assert other.status(bystander.run_id).status is td.RunStatus.RUNNING
        other.cancel(bystander.run_id)


async def test_a_runtime_budget_stops_every_run_of_the_runtime(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§20: "`td.Config(..., runtime_budget=None) # all runs of the runtime`" and the stop rule for
    the runtime scope."""
    spend = trio.Event()

    async def spender(ctx: td.ChildContext) -> object:
        await spend.wait()
        ctx.add_usage(td.Usage(input_tokens=11))
        await trio.sleep_forever()
        raise AssertionError

    config = td.Config(fail_closed=False, runtime_budget=td.Budget(max_input_tokens=10))
    async with td.open_runtime([sub("s", spender), sub("w", forever)], config=config) as rt:
        async with rt.open_parent("a") as a, rt.open_parent("b") as b:
            x = await a.start("s", "t")
            y = await b.start("w", "t")
            await settle()
            spend.set()
            await settle()
            for par, h in ((a, x), (b, y)):
                with pytest.raises(td.RunCancelledError) as info:
                    await par.wait(h.run_id)
                cause = info.value.__cause__
                assert isinstance(cause, td.BudgetExceededError)
                assert cause.scope == "runtime"
            with pytest.raises(td.BudgetExceededError):
                await b.start("w", "t")
        async with rt.open_parent("c") as c:
            with pytest.raises(td.BudgetExceededError):
                await c.start("w", "t")


async def test_a_run_budget_covers_everything_the_run_delegates(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§20: "`td.Subagent(..., budget=None)` # per run: the run and everything it delegates" and
    "When one report passes limits of several scopes, each is stopped and a run's cause names the
    innermost"."""
    causes: list[BaseException | None] = []

    async def lead(ctx: td.ChildContext) -> object:
        assert ctx.parent is not None
        h = await ctx.parent.start("leaf", "x")
        try:
            await ctx.parent.wait(h.run_id)
        finally:
            # The stop reaches this run too: read its child's cause in cleanup.
            with trio.CancelScope(shield=True):
                try:
                    await ctx.parent.wait(h.run_id)
                except td.RunCancelledError as exc:
                    causes.append(exc.__cause__)
        return None

    async def leaf(ctx: td.ChildContext) -> object:
        ctx.add_usage(td.Usage(requests=5))
        await trio.sleep_forever()
        raise AssertionError

    subs = [
        sub("lead", lead, children=["leaf"], budget=td.Budget(max_requests=4)),
        sub("leaf", leaf, budget=td.Budget(max_requests=2)),
    ]
    async with (
        td.open_runtime(subs, config=LOOSE) as rt,
        rt.open_parent(subagents=["lead"], budget=td.Budget(max_requests=3)) as p,
    ):
        with pytest.raises(td.RunCancelledError) as info:
            await p.delegate("lead", "t")
        lead_cause = info.value.__cause__
        assert isinstance(lead_cause, td.BudgetExceededError)
        assert lead_cause.scope == "run"  # the lead's own run budget: its innermost
        assert lead_cause.limit_value == 4
        (leaf_cause,) = causes
        assert isinstance(leaf_cause, td.BudgetExceededError)
        assert leaf_cause.scope == "run"
        assert leaf_cause.limit_value == 2
        with pytest.raises(td.BudgetExceededError) as refused:
            await p.start("lead", "t")
        assert refused.value.scope == "parent"


async def test_the_overrun_is_at_most_the_one_report_that_crossed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§20: "The overrun is at most the one report that crossed the limit"."""
    reports = [td.Usage(requests=1)] * 10

    async def runner(ctx: td.ChildContext) -> object:
        for u in reports:
            ctx.add_usage(u)
            await trio.lowlevel.checkpoint()
        return None

    async def greedy(ctx: td.ChildContext) -> object:
        # Keeps reporting synchronously: reports after the stop are not counted.
        for u in reports:
            ctx.add_usage(u)
        await trio.lowlevel.checkpoint()
        return None

    budget = td.Budget(max_requests=3)
    subs = [sub("w", runner, budget=budget), sub("g", greedy, budget=budget)]
    async with td.open_runtime(subs, config=LOOSE) as rt, rt.open_parent() as p:
        for name in ("w", "g"):
            with pytest.raises(td.RunCancelledError):
                await p.delegate(name, "t")
            (h,) = [r for r in p.runs() if r.subagent == name]
            assert h.usage == td.Usage(requests=4)


async def test_a_budget_stop_follows_the_rules_of_a_cancel_request(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§20: "A budget stop follows the rules of a cancel request (§3: the earlier of a request, a
    deadline or a budget stop decides; §18: the grace period bounds it)"."""

    async def after_deadline(ctx: td.ChildContext) -> object:
        try:
            await trio.sleep_forever()
        finally:
            ctx.add_usage(td.Usage(requests=9))  # past the budget, after the deadline
        raise AssertionError

    async def stubborn(ctx: td.ChildContext) -> object:
        ctx.add_usage(td.Usage(requests=9))
        with trio.CancelScope(shield=True):
            await trio.sleep(10_000)
        return "late"

    async def quick_return(ctx: td.ChildContext) -> object:
        ctx.add_usage(td.Usage(requests=9))
        return "returned before observing"

    budget = td.Budget(max_requests=1)
    config = td.Config(fail_closed=False, cancel_grace_seconds=30)
    subs = [
        sub("d", after_deadline, budget=budget, timeout_seconds=5),
        sub("s", stubborn, budget=budget),
        sub("q", quick_return, budget=budget),
    ]
    async with td.open_runtime(subs, config=config) as rt, rt.open_parent() as p:
        with pytest.raises(td.RunTimedOutError):
            await p.delegate("d", "t")
        h = await p.start("s", "t")
        t0 = trio.current_time()
        with pytest.raises(td.RunCancelledError):
            await p.wait(h.run_id)
        assert trio.current_time() - t0 == pytest.approx(30)
        # §3: a runner that returns before it observed the stop has completed.
        assert (await p.delegate("q", "t")).final_result == "returned before observing"


async def test_output_usage_counts_even_when_validation_fails_and_never_stops_its_own_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§20: "`Output(usage=...)` counts when the runner returns, whether its result then passes
    validation or not; it can stop other runs in its scopes, never the run that returned it"."""

    async def returns(ctx: td.ChildContext) -> object:
        return td.Output({"n": "not an int"}, usage=td.Usage(requests=5))

    async def ok(ctx: td.ChildContext) -> object:
        return td.Output("fine", usage=td.Usage(requests=5))

    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    subs = [sub("r", returns, final_schema=schema), sub("ok", ok), sub("w", forever)]
    async with td.open_runtime(subs, config=LOOSE) as rt:
        async with rt.open_parent(budget=td.Budget(max_requests=100)) as p:
            with pytest.raises(td.InvalidResultError):
                await p.delegate("r", "t")
            assert p.usage() == td.Usage(requests=5)
        async with rt.open_parent("b", budget=td.Budget(max_requests=3)) as b:
            bystander = await b.start("w", "t")
            assert (await b.delegate("ok", "t")).final_result == "fine"
            with pytest.raises(td.RunCancelledError) as info:
                await b.wait(bystander.run_id)
            assert isinstance(info.value.__cause__, td.BudgetExceededError)


async def test_under_fail_closed_a_budget_stopped_parent_cannot_resolve_and_names_the_budget(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§20: "Under fail-closed, a parent whose budget stopped cannot resolve its budget-cancelled
    runs (no replacement can be admitted): leaving it raises `UnresolvedDelegationError`, which
    names the budget"."""

    async def spender(ctx: td.ChildContext) -> object:
        ctx.add_usage(td.Usage(requests=2))
        await trio.sleep_forever()
        raise AssertionError

    async def stopped_parent(rt: td.Runtime) -> None:
        async with rt.open_parent(budget=td.Budget(max_requests=1)) as p:
            with pytest.raises(td.RunCancelledError):
                await p.delegate("s", "t")
            h = p.runs()[0]
            with pytest.raises(td.BudgetExceededError):
                await p.start("s", "t", replaces=h.run_id)

    async with td.open_runtime([sub("s", spender)]) as rt:
        with pytest.raises(td.UnresolvedDelegationError) as info:
            await stopped_parent(rt)
        assert "budget" in str(info.value).lower()
        assert "max_requests" in str(info.value)


async def test_usage_stays_readable_after_close_and_everything_else_is_closed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§20: "`parent.usage()` and `rt.usage` stay readable after close (a host reads the bill then);
    every other call still raises `RuntimeClosedError`"."""

    async def runner(ctx: td.ChildContext) -> object:
        ctx.add_usage(td.Usage(requests=2, cost_usd=0.5))
        return None

    async with td.open_runtime([sub("w", runner)], config=LOOSE) as rt:
        async with rt.open_parent() as p:
            r = await p.delegate("w", "t")
        assert p.usage() == td.Usage(requests=2, cost_usd=0.5)
        assert p.usage(r.run_id) == td.Usage(requests=2, cost_usd=0.5)
        with pytest.raises(td.RuntimeClosedError):
            p.status(r.run_id)
    assert rt.usage == td.Usage(requests=2, cost_usd=0.5)
    assert p.usage() == td.Usage(requests=2, cost_usd=0.5)
    with pytest.raises(td.RuntimeClosedError):
        p.questions()
    with pytest.raises(td.RuntimeClosedError):
        async with rt.open_parent("again"):
            pass


async def test_remaining_is_the_tightest_limit_over_every_scope_clamped_at_zero(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§20: "A runner reads what is left with `ctx.remaining()` (a `td.Budget` of the tightest
    remaining limits over every scope that contains it, clamped at 0, or `None` when no scope has a
    budget)"."""
    seen: list[td.Budget | None] = []

    async def runner(ctx: td.ChildContext) -> object:
        seen.append(ctx.remaining())
        ctx.add_usage(td.Usage(requests=1, input_tokens=40, output_tokens=10, cost_usd=0.25))
        seen.append(ctx.remaining())
        return None

    async def spender(ctx: td.ChildContext) -> object:
        ctx.add_usage(td.Usage(input_tokens=30))
        return None

    config = td.Config(fail_closed=False, runtime_budget=td.Budget(max_total_tokens=100))
    subs = [
        sub("w", runner, budget=td.Budget(max_requests=5, max_input_tokens=45)),
        sub("s", spender),
        sub("free", runner),
    ]
    async with (
        td.open_runtime(subs, config=config) as rt,
        rt.open_parent("x", budget=td.Budget(max_cost_usd=1, max_input_tokens=200)) as p,
    ):
        await p.delegate("s", "t")  # runtime total tokens: 30
        await p.delegate("w", "t")
    assert seen[0] == td.Budget(
        max_requests=5, max_input_tokens=45, max_total_tokens=70, max_cost_usd=1
    )
    assert seen[1] == td.Budget(
        max_requests=4, max_input_tokens=5, max_total_tokens=20, max_cost_usd=0.75
    )
    seen.clear()
    async with td.open_runtime(subs, config=LOOSE) as rt, rt.open_parent() as p:
        await p.delegate("free", "t")
    assert seen == [None, None]


async def test_tools_answers_add_usage_when_there_is_any(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§20: "the model-facing `subagent_status` and `wait_subagent` answers (the completed envelope
    too, over MCP and in `tools.call`) add `"usage"` when there is any; `RunResult` itself does not
    change"."""

    async def runner(ctx: td.ChildContext) -> object:
        ctx.add_usage(td.Usage(requests=1, input_tokens=2))
        await trio.sleep(5)
        return "r"

    async def silent(ctx: td.ChildContext) -> object:
        return "s"

    async with (
        td.open_runtime([sub("w", runner), sub("q", silent)], config=LOOSE) as rt,
        rt.open_parent() as p,
    ):
        tools = p.tools()
        h = await tools.call("delegate_task", {"subagent": "w", "task": "t", "background": True})
        await settle()
        status = await tools.call("subagent_status", {"run_id": h["run_id"]})
        assert status["usage"]["requests"] == 1
        assert status["usage"]["input_tokens"] == 2
        done = await tools.call("wait_subagent", {"run_id": h["run_id"]})
        assert done["final_result"] == "r"
        assert done["usage"]["requests"] == 1
        plain = await tools.call("delegate_task", {"subagent": "q", "task": "t"})
        assert "usage" not in plain
