"""Contract §19: a running child asks its parent questions and waits for the answer."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio
import trio.testing

import trio_delegate as td
from tests.helpers import open_parent, open_parent_lenient, sub

S = td.RunStatus


def asking(
    question: str = "which branch?",
    *,
    schema: Any = None,
    timeout: float | None = None,
    log: list[Any] | None = None,
) -> Any:
    """A runner that asks once and returns the answer (or the error's type name)."""

    async def runner(ctx: td.ChildContext) -> Any:
        try:
            answer = await ctx.ask(question, schema=schema, timeout=timeout)
        except td.DelegationError as exc:
            if log is not None:
                log.append(exc)
            return type(exc).__name__
        if log is not None:
            log.append(answer)
        return answer

    return runner


def asker(runner: Any, **kwargs: Any) -> td.Subagent:
    return sub("asker", runner, asks=True, **kwargs)


async def test_a_question_makes_the_run_input_required_until_it_is_answered(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_parent(asker(asking())) as parent:
        handle = await parent.start("asker", "go")
        waiting = await parent.wait(handle.run_id, timeout=None)
        assert isinstance(waiting, td.RunHandle)
        assert waiting.status is S.INPUT_REQUIRED
        (question,) = waiting.questions
        assert question.run_id == handle.run_id
        assert question.text == "which branch?"
        assert question.schema == {"type": "string"}
        assert question.question_id.startswith("q_")
        assert len(question.question_id) >= 26
        assert parent.status(handle.run_id).status is S.INPUT_REQUIRED
        assert parent.questions() == (question,)
        ack = parent.answer(handle.run_id, "main")
        assert ack == td.AnswerAck(handle.run_id, question.question_id, True, S.RUNNING)
        assert parent.questions() == ()
        result = await parent.wait(handle.run_id)
        assert isinstance(result, td.RunResult)
        assert result.final_result == "main"


async def test_a_subagent_that_does_not_declare_asks_may_not_ask(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[Any] = []
    async with open_parent(sub("plain", asking(log=log))) as parent:
        handle = await parent.start("plain", "go")
        result = await parent.wait(handle.run_id)
    assert isinstance(result, td.RunResult)
    assert result.final_result == "InvalidArgumentsError"
    assert "asks=True" in str(log[0])


async def test_the_context_says_whether_its_subagent_may_ask(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def says(ctx: td.ChildContext) -> bool:
        return ctx.asks

    async with open_parent(sub("asker", says, asks=True), sub("plain", says)) as parent:
        assert (await parent.delegate("asker", "go")).final_result is True
        assert (await parent.delegate("plain", "go")).final_result is False
    assert td.ChildContext("run_x", "asker", "go").asks is False


async def test_a_wait_already_blocked_returns_the_handle_when_the_child_asks(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def later(ctx: td.ChildContext) -> Any:
        await trio.sleep(10)
        return await ctx.ask("now?")

    async with open_parent(asker(later)) as parent:
        handle = await parent.start("asker", "go")
        got: list[Any] = []

        async def waiter() -> None:
            got.append(await parent.wait(handle.run_id, timeout=None))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            await trio.testing.wait_all_tasks_blocked()
            assert got == []
        assert trio.current_time() == pytest.approx(10)
        assert got[0].status is S.INPUT_REQUIRED
        parent.answer(handle.run_id, "yes")
        assert (await parent.wait(handle.run_id)).final_result == "yes"  # type: ignore[union-attr]


async def test_a_timed_wait_returns_the_handle_at_once_when_the_child_asks(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_parent(asker(asking())) as parent:
        handle = await parent.start("asker", "go")
        await trio.testing.wait_all_tasks_blocked()
        start = trio.current_time()
        waiting = await parent.wait(handle.run_id, timeout=1_000)
        assert trio.current_time() == start
        assert waiting.status is S.INPUT_REQUIRED  # type: ignore[union-attr]
        polled = await parent.wait(handle.run_id, timeout=0)
        assert polled.status is S.INPUT_REQUIRED  # type: ignore[union-attr]
        parent.decline(handle.run_id)
        assert (await parent.wait(handle.run_id)).final_result == "QuestionDeclinedError"  # type: ignore[union-attr]


async def test_a_question_opened_and_answered_before_the_wait_runs_does_not_end_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    holder: dict[str, Any] = {}

    async def twice(ctx: td.ChildContext) -> Any:
        first = await ctx.ask("first?")
        await trio.sleep(5)
        return first

    async with open_parent(asker(twice)) as parent:
        handle = await parent.start("asker", "go")
        holder["id"] = handle.run_id
        await trio.testing.wait_all_tasks_blocked()
        # Answered by a task that runs before the waiter wakes.
        got: list[Any] = []

        async def waiter() -> None:
            got.append(await parent.wait(handle.run_id))

        async with trio.open_nursery() as nursery:
            parent.answer(handle.run_id, "a")
            nursery.start_soon(waiter)
        assert isinstance(got[0], td.RunResult)
        assert got[0].final_result == "a"


async def test_answer_validates_against_the_schema_and_the_question_stays_open(
    autojump_clock: trio.testing.MockClock,
) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    async with open_parent(asker(asking(schema=schema))) as parent:
        handle = await parent.start("asker", "go")
        (question,) = (await parent.wait(handle.run_id)).questions  # type: ignore[union-attr]
        assert question.schema == schema
        with pytest.raises(td.InvalidArgumentsError, match=r"\$\.n") as raised:
            parent.answer(handle.run_id, {"n": "x"})
        assert question.question_id in str(raised.value)
        assert parent.status(handle.run_id).status is S.INPUT_REQUIRED
        assert parent.answer(handle.run_id, {"n": 3}).accepted
        assert (await parent.wait(handle.run_id)).final_result == {"n": 3}  # type: ignore[union-attr]


@attrs.frozen
class Choice:
    branch: str
    force: bool = False


async def test_a_typed_schema_structures_the_answer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def runner(ctx: td.ChildContext) -> Any:
        choice = await ctx.ask("where?", schema=Choice)
        assert isinstance(choice, Choice)
        return attrs.asdict(choice)

    async with open_parent(asker(runner)) as parent:
        handle = await parent.start("asker", "go")
        await parent.wait(handle.run_id)
        assert parent.answer(handle.run_id, Choice("dev")).accepted
        result = await parent.wait(handle.run_id)
    assert result.final_result == {"branch": "dev", "force": False}  # type: ignore[union-attr]


async def test_answering_twice_is_not_accepted_the_second_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_parent(asker(asking())) as parent:
        handle = await parent.start("asker", "go")
        (question,) = (await parent.wait(handle.run_id)).questions  # type: ignore[union-attr]
        assert parent.answer(handle.run_id, "one", question_id=question.question_id).accepted
        again = parent.answer(handle.run_id, "two", question_id=question.question_id)
        assert again == td.AnswerAck(handle.run_id, question.question_id, False, S.RUNNING)
        assert not parent.decline(handle.run_id, question_id=question.question_id).accepted
        assert (await parent.wait(handle.run_id)).final_result == "one"  # type: ignore[union-attr]
        terminal = parent.answer(handle.run_id, "late")
        assert terminal == td.AnswerAck(handle.run_id, None, False, S.COMPLETED)
        with pytest.raises(td.UnknownRunError):
            parent.answer("run_nope", "x")
        with pytest.raises(td.InvalidArgumentsError, match="question_id"):
            parent.answer(handle.run_id, "x", question_id=7)  # type: ignore[arg-type]


async def test_decline_reaches_the_child_with_its_reason(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[Any] = []
    async with open_parent(asker(asking(log=log))) as parent:
        handle = await parent.start("asker", "go")
        (question,) = (await parent.wait(handle.run_id)).questions  # type: ignore[union-attr]
        ack = parent.decline(handle.run_id, reason="decide yourself")
        assert ack == td.AnswerAck(handle.run_id, question.question_id, True, S.RUNNING)
        await parent.wait(handle.run_id)
    (error,) = log
    assert isinstance(error, td.QuestionDeclinedError)
    assert error.reason == "decide yourself"
    assert error.question_id == question.question_id


async def test_the_asks_own_timeout_withdraws_the_question_and_the_run_goes_on(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[Any] = []
    async with open_parent(asker(asking(timeout=30, log=log))) as parent:
        handle = await parent.start("asker", "go")
        (question,) = (await parent.wait(handle.run_id)).questions  # type: ignore[union-attr]
        await trio.sleep(30)
        # The ask's timeout came first, even before the child's task ran again.
        assert not parent.answer(handle.run_id, "late").accepted
        result = await parent.wait(handle.run_id)
        assert result.final_result == "AskTimeoutError"  # type: ignore[union-attr]
    assert log[0].question_id == question.question_id


async def test_a_cancel_withdraws_the_questions_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_parent_lenient(asker(asking())) as parent:
        handle = await parent.start("asker", "go")
        await parent.wait(handle.run_id)
        ack = parent.cancel(handle.run_id)
        assert ack.status is S.RUNNING
        assert parent.questions() == ()
        assert parent.status(handle.run_id).questions == ()
        assert not parent.answer(handle.run_id, "late").accepted
        with pytest.raises(td.RunCancelledError):
            await parent.wait(handle.run_id)


async def test_the_deadline_comes_before_an_answer_given_at_the_same_instant(
    mock_clock: trio.testing.MockClock,
) -> None:
    async with open_parent_lenient(asker(asking(), timeout_seconds=50)) as parent:
        handle = await parent.start("asker", "go")
        await parent.wait(handle.run_id)
        mock_clock.jump(50)
        # The deadline passed (the child's task has not run since): never
        # answered input_required, never accepted.
        assert parent.status(handle.run_id).status is S.RUNNING
        assert parent.questions() == ()
        assert not parent.answer(handle.run_id, "late").accepted
        with pytest.raises(td.RunTimedOutError):
            await parent.wait(handle.run_id, timeout=0)


async def test_an_answer_before_the_deadline_reaches_the_child(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def then_work(ctx: td.ChildContext) -> Any:
        answer = await ctx.ask("go?")
        with trio.CancelScope(shield=True):
            await trio.lowlevel.checkpoint()
        return answer

    async with open_parent(asker(then_work, timeout_seconds=50)) as parent:
        handle = await parent.start("asker", "go")
        await parent.wait(handle.run_id)
        await trio.sleep(49)
        assert parent.answer(handle.run_id, "yes").accepted
        result = await parent.wait(handle.run_id)
        assert result.final_result == "yes"  # type: ignore[union-attr]


async def test_closing_the_parent_cancels_and_joins_an_asking_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[Any] = []
    async with td.open_runtime([asker(asking(log=log))]) as rt:

        async def leave_it_asking() -> None:
            async with rt.open_parent() as parent:
                handle = await parent.start("asker", "go")
                await parent.wait(handle.run_id)

        with pytest.raises(td.UnresolvedDelegationError, match=r"question q_\w+: 'which branch"):
            await leave_it_asking()
        assert log == []  # cancelled, never answered


async def test_a_foreground_delegate_without_on_input_cannot_be_asked(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_parent(asker(asking())) as parent:
        result = await parent.delegate("asker", "go")
    assert result.final_result == "InputUnavailableError"


async def test_on_input_answers_a_foreground_run_in_the_callers_task(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[td.Question] = []

    async def twice(ctx: td.ChildContext) -> Any:
        first = await ctx.ask("first?")
        try:
            second = await ctx.ask("second?", schema={"type": "integer"})
        except td.QuestionDeclinedError as exc:
            second = exc.reason
        return [first, second]

    async def on_input(question: td.Question) -> Any:
        seen.append(question)
        await trio.sleep(1)
        if question.text == "second?":
            raise td.QuestionDeclinedError("no", reason="ask someone else")
        return "one"

    async with open_parent(asker(twice)) as parent:
        result = await parent.delegate("asker", "go", on_input=on_input)
    assert result.final_result == ["one", "ask someone else"]
    assert [q.text for q in seen] == ["first?", "second?"]


async def test_an_on_input_error_cancels_and_joins_the_run_then_propagates(
    autojump_clock: trio.testing.MockClock,
) -> None:
    stopped: list[bool] = []

    async def runner(ctx: td.ChildContext) -> Any:
        try:
            return await ctx.ask("?")
        except trio.Cancelled:
            stopped.append(True)
            raise

    async def broken(question: td.Question) -> Any:
        raise KeyError("boom")

    async def bad_value(question: td.Question) -> Any:
        return 5  # not a string

    async with open_parent_lenient(asker(runner)) as parent:
        with pytest.raises(KeyError):
            await parent.delegate("asker", "go", on_input=broken)
        assert stopped == [True]
        with pytest.raises(td.InvalidArgumentsError, match="schema"):
            await parent.delegate("asker", "go", on_input=bad_value)
        assert stopped == [True, True]
        with pytest.raises(td.InvalidArgumentsError, match="on_input"):
            await parent.delegate("asker", "go", on_input=3)  # type: ignore[arg-type]


async def test_an_ask_after_the_cancellation_was_delivered_is_unavailable(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[Any] = []

    async def cleanup(ctx: td.ChildContext) -> Any:
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                try:
                    await ctx.ask("may I?")
                except td.InputUnavailableError as exc:
                    log.append(exc)

    async with open_parent_lenient(asker(cleanup)) as parent:
        handle = await parent.start("asker", "go")
        await trio.testing.wait_all_tasks_blocked()
        parent.cancel(handle.run_id)
        with pytest.raises(td.RunCancelledError):
            await parent.wait(handle.run_id)
    assert len(log) == 1
    assert "cancellation" in str(log[0])


async def test_a_nested_parent_answers_its_childs_question_or_asks_upward(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def middle(ctx: td.ChildContext) -> Any:
        nested = ctx.parent
        assert nested is not None
        handle = await nested.start("asker", "inner")
        waiting = await nested.wait(handle.run_id)
        assert isinstance(waiting, td.RunHandle)
        (question,) = nested.questions()
        # Ask its own parent, and pass the answer down.
        upward = await ctx.ask(f"my child asks: {question.text}")
        nested.answer(handle.run_id, upward, question_id=question.question_id)
        result = await nested.wait(handle.run_id)
        assert isinstance(result, td.RunResult)
        return result.final_result

    async with open_parent(
        sub("middle", middle, asks=True, children=["asker"]), asker(asking())
    ) as parent:
        handle = await parent.start("middle", "outer")
        waiting = await parent.wait(handle.run_id)
        assert waiting.questions[0].text == "my child asks: which branch?"  # type: ignore[union-attr]
        # The grandchild's question is not this parent's to answer.
        assert [q.run_id for q in parent.questions()] == [handle.run_id]
        parent.answer(handle.run_id, "release")
        assert (await parent.wait(handle.run_id)).final_result == "release"  # type: ignore[union-attr]


async def test_questions_lists_open_questions_oldest_first_and_answers_go_to_the_oldest(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def two_at_once(ctx: td.ChildContext) -> Any:
        answers: dict[str, Any] = {}

        async def one(text: str) -> None:
            answers[text] = await ctx.ask(text)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(one, "a")
            await trio.sleep(1)
            nursery.start_soon(one, "b")
        return answers

    async with open_parent(asker(two_at_once)) as parent:
        handle = await parent.start("asker", "go")
        await trio.sleep(2)
        first, second = parent.questions()
        assert (first.text, second.text) == ("a", "b")
        ack = parent.answer(handle.run_id, "A")
        assert (ack.question_id, ack.status) == (first.question_id, S.INPUT_REQUIRED)
        ack = parent.answer(handle.run_id, "B")
        assert (ack.question_id, ack.status) == (second.question_id, S.RUNNING)
        assert not parent.answer(handle.run_id, "C").accepted
        assert (await parent.wait(handle.run_id)).final_result == {"a": "A", "b": "B"}  # type: ignore[union-attr]


async def test_settled_and_unobserved_are_unchanged_by_questions(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_parent(asker(asking())) as parent:
        stream = parent.settled()
        handle = await parent.start("asker", "go")
        await parent.wait(handle.run_id)
        assert parent.unobserved() == ()
        parent.answer(handle.run_id, "x")
        async with stream:
            settled = await stream.__anext__()
        assert settled.run_id == handle.run_id
        assert settled.status is S.COMPLETED
        assert [h.run_id for h in parent.unobserved()] == [handle.run_id]
        await parent.wait(handle.run_id)
        assert parent.unobserved() == ()


def _nested_schema(levels: int) -> Any:
    schema: Any = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "array", "items": schema}
    return schema


@pytest.mark.parametrize(
    ("question", "kwargs", "match"),
    [
        ("", {}, "empty"),
        ("\ud800", {}, "Unicode"),
        (3, {}, "string"),
        ("x" * 100_001, {}, "100000"),
        ("ok", {"schema": 3}, "schema"),
        ("ok", {"schema": {"type": "nope"}}, "schema"),
        ("ok", {"schema": {"type": "string", "pattern": "(?<=a)b"}}, "pattern"),
        ("ok", {"schema": {"items": _nested_schema(1_000)}}, "levels"),
        ("ok", {"timeout": -1}, "timeout"),
        ("ok", {"timeout": float("nan")}, "timeout"),
    ],
)
async def test_a_malformed_question_is_refused_at_once(
    autojump_clock: trio.testing.MockClock, question: Any, kwargs: dict[str, Any], match: str
) -> None:
    log: list[Any] = []

    async def runner(ctx: td.ChildContext) -> Any:
        try:
            await ctx.ask(question, **kwargs)
        except td.InvalidArgumentsError as exc:
            log.append(exc)
        return trio.current_time()

    async with open_parent(asker(runner)) as parent:
        result = await parent.delegate("asker", "go")
    assert result.final_result == 0
    assert len(log) == 1
    assert match in str(log[0])


async def test_a_context_built_alone_has_nobody_to_ask() -> None:
    ctx = td.ChildContext("run_1", "solo", "task")
    with pytest.raises(td.InputUnavailableError):
        await ctx.ask("anyone?")
    ctx.progress("fine", progress=1)  # checked, kept nowhere
    with pytest.raises(td.InvalidArgumentsError):
        ctx.progress(3)  # type: ignore[arg-type]


@pytest.mark.parametrize("how", ["timeout", "own_scope", "declined"])
async def test_the_question_is_withdrawn_when_its_ask_ends_however_it_ends(
    autojump_clock: trio.testing.MockClock, how: str
) -> None:
    async def runner(ctx: td.ChildContext) -> Any:
        if how == "timeout":
            with pytest.raises(td.AskTimeoutError):
                await ctx.ask("quick?", timeout=5)
        elif how == "own_scope":
            with trio.move_on_after(5):
                await ctx.ask("quick?")
        else:
            with pytest.raises(td.QuestionDeclinedError):
                await ctx.ask("quick?")
        await trio.sleep(100)
        return "went on"

    async with open_parent(asker(runner)) as parent:
        handle = await parent.start("asker", "go")
        (question,) = (await parent.wait(handle.run_id)).questions  # type: ignore[union-attr]
        if how == "declined":
            parent.decline(handle.run_id)
        await trio.sleep(10)
        assert parent.questions() == ()
        assert parent.status(handle.run_id) == td.RunHandle(handle.run_id, "asker", S.RUNNING)
        assert not parent.answer(handle.run_id, "late", question_id=question.question_id).accepted
        waited = await parent.wait(handle.run_id, timeout=1)
        assert waited.status is S.RUNNING  # type: ignore[union-attr]
        assert (await parent.wait(handle.run_id)).final_result == "went on"  # type: ignore[union-attr]


def _nested(levels: int) -> Any:
    value: Any = "x"
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("schema", "answer", "match"),
    [
        (None, "\ud800", "Unicode|surrogate|JSON"),
        ({}, _nested(1_000), "deep|nest|levels"),
        ({"type": "integer", "maximum": 5}, 10**400, "does not satisfy"),
        ({"type": "string", "pattern": "^(a+)+$"}, "a" * 50_000 + "!", "does not match"),
        (
            {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "integer"}]}},
            [{"a": 1}] * 20_000,
            "steps|not valid",
        ),
        ({}, "x" * 1_000_001, "bytes"),
        ({}, {1, 2}, "JSON"),
        ({}, float("nan"), "JSON|finite|NaN"),
    ],
)
async def test_a_hostile_answer_is_a_delegation_error_in_bounded_time(
    autojump_clock: trio.testing.MockClock, schema: Any, answer: Any, match: str
) -> None:
    from tests.helpers import timed_steps

    async with open_parent_lenient(asker(asking(schema=schema))) as parent:
        handle = await parent.start("asker", "go")
        await parent.wait(handle.run_id)
        async with timed_steps(this_task_only=True) as timer:
            with pytest.raises(td.InvalidArgumentsError, match=match):
                parent.answer(handle.run_id, answer)
        # §15: no step of the event loop's thread is held for 100 ms.
        assert timer.longest < 0.1
        assert parent.status(handle.run_id).status is S.INPUT_REQUIRED
        parent.cancel(handle.run_id)
        with pytest.raises(td.RunCancelledError):
            await parent.wait(handle.run_id)


async def test_hostile_arguments_to_every_entry_point_are_delegation_errors(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from tests.helpers import LoudDict, LoudInt, LoudStr, Unreadable

    errors: list[Any] = []

    async def runner(ctx: td.ChildContext) -> Any:
        reports: list[tuple[Any, Any]] = [
            (LoudStr("half"), LoudInt(1)),
            (Unreadable(), None),
            (None, Unreadable()),
        ]
        for message, progress in reports:
            try:
                ctx.progress(message, progress=progress)
            except td.DelegationError as exc:
                errors.append(type(exc).__name__)
        for question, schema in (
            (LoudStr("which?"), None),
            (Unreadable(), None),
            ("which?", LoudDict(type="string")),
            ("which?", Unreadable()),
        ):
            try:
                with trio.move_on_after(1):
                    await ctx.ask(question, schema=schema)  # type: ignore[arg-type]
            except td.DelegationError as exc:
                errors.append(type(exc).__name__)
        return "survived"

    async with open_parent_lenient(asker(runner)) as parent:
        handle = await parent.start("asker", "go")
        while True:
            waiting = await parent.wait(handle.run_id)
            if isinstance(waiting, td.RunResult):
                break
            for value in (Unreadable(), LoudStr("x"), LoudDict(a=1)):
                try:
                    parent.answer(handle.run_id, value)
                except td.DelegationError as exc:
                    errors.append(type(exc).__name__)
            for kwargs in ({"question_id": LoudStr("q")}, {"question_id": Unreadable()}):
                try:
                    parent.answer(handle.run_id, "x", **kwargs)
                except td.DelegationError as exc:
                    errors.append(type(exc).__name__)
            for reason in (LoudStr("no"), Unreadable(), "\ud800"):
                try:
                    parent.decline(handle.run_id, reason=reason)  # type: ignore[arg-type]
                except td.DelegationError as exc:
                    errors.append(type(exc).__name__)
            await trio.sleep(2)
        assert waiting.final_result == "survived"
    assert set(errors) <= {"InvalidArgumentsError"}
    assert errors


async def test_continue_run_takes_on_input_for_a_foreground_continuation(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def on_input(question: td.Question) -> str:
        return "again"

    async with open_parent(asker(asking())) as parent:
        first = await parent.delegate("asker", "go", on_input=on_input)
        second = await parent.continue_run(first.run_id, "more", on_input=on_input)
        assert isinstance(second, td.RunResult)
        assert second.final_result == "again"
        with pytest.raises(td.InvalidArgumentsError, match="on_input"):
            await parent.continue_run(first.run_id, "more", on_input="no")  # type: ignore[arg-type]


async def test_an_ask_that_outlives_its_run_raises_once_the_run_is_decided(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[Any] = []

    async def shielded(ctx: td.ChildContext) -> Any:
        with trio.CancelScope(shield=True):
            try:
                await ctx.ask("answer me whatever happens")
            except td.InputUnavailableError as exc:
                log.append(exc)
        return "late"

    config = td.Config(cancel_grace_seconds=30, fail_closed=False)
    async with open_parent(asker(shielded), config=config) as parent:
        handle = await parent.start("asker", "go")
        await parent.wait(handle.run_id)
        parent.cancel(handle.run_id)
        assert parent.status(handle.run_id).status is S.RUNNING  # withdrawn at once
        with pytest.raises(td.RunCancelledError, match="did not stop"):
            await parent.wait(handle.run_id)
        assert trio.current_time() == pytest.approx(30)
    # The runner's task returned: the runtime could close.
    assert len(log) == 1
    assert "withdrawn" in str(log[0])
