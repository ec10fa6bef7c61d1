"""The rules of a child's questions (contract §19): asking, answering, declining,
listing, and the waits that end when a run needs an answer.

The state they act on is each run's :class:`Talk` (``_talk``). Everything is
on the Trio clock and synchronous but the waits: an answer is applied (or
refused) before ``answer`` returns, and the first of an answer, the ask's
own timeout, the run's deadline, its cancellation and its end wins.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any, Final

import trio

from .._checks import check_seconds, check_text, describe, is_a
from .._config import Config
from .._errors import (
    AskTimeoutError,
    InputUnavailableError,
    InvalidArgumentsError,
    QuestionDeclinedError,
)
from .._json import CanonicalJson, JsonProblem
from .._results import AnswerAck, Question
from .._schema import ResultSchema, SchemaMismatch, compile_result_schema
from ._run import State
from ._talk import OnInput, OpenQuestion, Talk, talk_of

if TYPE_CHECKING:
    from ._run import Run

__all__ = [
    "ANSWER_STEPS",
    "answer_run",
    "ask",
    "check_answer",
    "check_on_input",
    "checked_answer",
    "is_asking",
    "open_questions",
    "serve_foreground",
    "wait_or_question",
]

#: Keyword evaluations an answer's check may take: it runs on the event loop,
#: inside ``answer`` (a step costs 1-8 µs, so the loop is held a few ms at most).
ANSWER_STEPS: Final = 5_000

_INPUT_REQUIRED: Final = State.INPUT_REQUIRED
#: The limits a question is checked against in a context built without a runtime.
_DEFAULTS: Final = Config()


@functools.cache
def _string_schema() -> ResultSchema:
    """The schema of a question asked without one: a string (compiled once)."""
    return compile_result_schema({"type": "string"}, "schema")


def is_asking(run: Run) -> bool:
    """Whether *run* waits for an answer: ``input_required``, before its deadline
    and with no cancellation delivered (a wait never answers it otherwise)."""
    return (
        run.state is _INPUT_REQUIRED
        and run.cancel_requested_at is None
        and run.host.now() < run.deadline
    )


# -- the child's side --------------------------------------------------------------


async def ask(run: Run | None, subagent: str, question: Any, schema: Any, timeout: Any) -> Any:
    """``ctx.ask``: open a question on *run*, wait for its answer, withdraw it however
    the wait ends.

    Raises:
        InvalidArgumentsError: the subagent does not declare ``asks=True``, or
            a malformed question, schema or timeout.
        InputUnavailableError: nobody can answer.
        QuestionDeclinedError: the parent declined.
        AskTimeoutError: *timeout* passed first.
    """
    if run is not None and not run.subagent.asks:
        raise InvalidArgumentsError(
            f"subagent {subagent!r} may not ask its parent questions: declare it with "
            "Subagent(..., asks=True), or carry on without asking",
            run_id=run.run_id,
            subagent=subagent,
        )
    config = _DEFAULTS if run is None else run.host.config
    text = check_text("ctx.ask(question)", question, max_chars=config.max_task_chars)
    if schema is None:
        compiled = _string_schema()
    else:
        compiled = compile_result_schema(
            schema, "ctx.ask(schema=...)", max_nesting=config.max_nesting_depth
        )
    limit = check_seconds("ctx.ask(timeout=...)", timeout, allow_zero=False, allow_none=True)
    if run is None:
        raise InputUnavailableError(
            f"nobody can answer {subagent!r}'s question: this context was built outside a "
            "runtime; run the subagent through a Parent to ask"
        )
    _check_answerable(run)
    talk = talk_of(run)
    now = run.host.now()
    opened = OpenQuestion(text, compiled, math.inf if limit is None else now + limit)
    talk.opened(run, opened)
    try:
        with trio.move_on_at(opened.until):
            await opened.event.wait()
    finally:
        # Withdrawn the moment its ask ends, however it ends.
        if not opened.settled:
            talk.closed(run, opened)
    if (opened.answered or opened.declined) and not opened.event.is_set():
        # Accepted before the timeout: the answer is being recorded (contract §19).
        await opened.event.wait()
    if not opened.event.is_set():
        raise AskTimeoutError(
            f"question {opened.question_id} of run {run.run_id} was not answered within "
            f"{limit:g} s; it was withdrawn: carry on without the answer, or ask again",
            question_id=opened.question_id,
            run_id=run.run_id,
        )
    if not opened.answered and not opened.declined:
        raise InputUnavailableError(
            f"question {opened.question_id} of run {run.run_id} was withdrawn: the run ended "
            "while its runner waited for the answer",
            run_id=run.run_id,
            subagent=subagent,
        )
    if opened.declined:
        why = f": {opened.reason}" if opened.reason else ""
        raise QuestionDeclinedError(
            f"the parent declined to answer question {opened.question_id}{why}; carry on "
            "without the answer",
            question_id=opened.question_id,
            reason=opened.reason,
            run_id=run.run_id,
            subagent=subagent,
        )
    return opened.answer


def _check_answerable(run: Run) -> None:
    why = None
    if run.cancel_requested_at is not None or not run.state.live:
        why = "its cancellation was delivered (nobody answers a run that is stopping)"
    elif run.foreground and (run.talk is None or run.talk.on_input is None):
        why = (
            "its caller waits for it in the foreground without on_input; pass "
            "delegate(..., on_input=...) or start it in the background"
        )
    if why is not None:
        raise InputUnavailableError(
            f"nobody can answer a question of run {run.run_id}: {why}",
            run_id=run.run_id,
            subagent=run.subagent.name,
        )


# -- the parent's side -------------------------------------------------------------


def answer_run(
    run: Run,
    question_id: Any,
    value: Any,
    *,
    declined: bool = False,
    reason: str = "",
) -> AnswerAck:
    """Answer (or decline) *run*'s question *question_id* (``None``: its oldest open one).

    Raises:
        InvalidArgumentsError: a malformed *question_id*, or a *value* that
            does not satisfy the question's schema (the question stays open).
    """
    if question_id is not None and not is_a(question_id, str):
        raise InvalidArgumentsError(
            f"question_id must be a string or None (the oldest open question), got "
            f"{describe(question_id)}"
        )
    talk = run.talk
    opened = _open_question(run, talk, question_id)
    if opened is None or talk is None:
        status = run.state.status if talk is None else talk.status(run)
        return AnswerAck(run.run_id, question_id, False, status)
    if declined:
        opened.declined = True
        opened.reason = reason
    else:
        opened.answer = check_answer(opened, value, run.host.config)
        opened.answered = True
    talk.closed(run, opened)
    talk.accepted(run, opened)
    return AnswerAck(run.run_id, opened.question_id, True, talk.status(run))


def _open_question(run: Run, talk: Talk | None, question_id: str | None) -> OpenQuestion | None:
    """The open question an answer is for, if the answer comes first."""
    if talk is None or not talk.open or not run.state.live:
        return None
    opened = next(iter(talk.open.values())) if question_id is None else talk.open.get(question_id)
    if opened is None or opened.settled:
        return None
    now = run.host.now()
    if now >= opened.until or now >= run.deadline or run.cancel_requested_at is not None:
        # Its ask's timeout, the run's deadline or its cancellation came first.
        return None
    return opened


def check_answer(opened: OpenQuestion, value: Any, config: Config) -> Any:
    """*value* checked against *opened*'s schema, boundedly, as the child gets it
    (its JSON kept in ``opened.answer_json`` for the run's record).

    Raises:
        InvalidArgumentsError: it is not JSON the runtime keeps, too large or
            too deep, or does not satisfy the schema.
    """
    opened.answer_json, answer = checked_answer(opened.schema, opened.question_id, value, config)
    return answer


def checked_answer(
    schema: ResultSchema, qid: str, value: Any, config: Config
) -> tuple[CanonicalJson, Any]:
    """*value* as JSON and as the child gets it, checked against *schema* (question *qid*).

    Raises:
        InvalidArgumentsError: as for :func:`check_answer`.
    """
    fix = f"answer question {qid} again with a value that does, or decline it"
    value = schema.prepare(value)
    try:
        canonical = CanonicalJson.of(
            value, max_depth=config.max_nesting_depth, max_items=config.max_result_bytes // 2 + 1
        )
    except (JsonProblem, TypeError) as exc:
        raise InvalidArgumentsError(
            f"the answer to question {qid} is not JSON the runtime can keep ({exc}); {fix}"
        ) from None
    if canonical.size > config.max_result_bytes:
        raise InvalidArgumentsError(
            f"the answer to question {qid} is {canonical.size} bytes of JSON; at most "
            f"{config.max_result_bytes} are allowed (Config.max_result_bytes); {fix}"
        )
    try:
        return canonical, schema.check_now(canonical, ANSWER_STEPS)
    except SchemaMismatch as exc:
        raise InvalidArgumentsError(
            f"the answer to question {qid} does not satisfy its schema: "
            f"{'; '.join(exc.problems)}; {fix}"
        ) from None


def open_questions(runs: Any) -> tuple[Question, ...]:
    """The open questions of *runs* that wait for an answer, oldest first."""
    found: list[tuple[int, Question]] = []
    for run in runs:
        talk = run.talk
        if talk is not None and talk.open and is_asking(run):
            found.extend((opened.order, opened.public(run.run_id)) for opened in talk.open.values())
    found.sort(key=lambda pair: pair[0])
    return tuple(question for _, question in found)


# -- waits -------------------------------------------------------------------------


async def wait_or_question(run: Run, limit: float | None) -> None:
    """Wait until *run* is terminal or waits for an answer, or *limit* seconds passed.

    A question opened and answered before this task runs again does not end
    the wait. Past its deadline the run is waited for until it settles (it is
    about to, and is never answered as ``input_required``).
    """
    if is_asking(run):
        await trio.lowlevel.checkpoint()
        return
    talk = talk_of(run)
    with trio.move_on_at(math.inf if limit is None else run.host.now() + limit):
        while run.ended_at is None and not is_asking(run):
            await _woken(talk)
    if run.ended_at is None and not is_asking(run) and run.host.now() >= run.deadline:
        await run.ending().wait()


async def _woken(talk: Talk) -> None:
    """Wait until *talk*'s run opens a question or ends."""
    wake = trio.Event()
    talk.waiters.add(wake)
    try:
        await wake.wait()
    finally:
        talk.waiters.discard(wake)


def check_on_input(on_input: Any) -> OnInput | None:
    """``on_input``, checked: ``None`` or a callable.

    Raises:
        InvalidArgumentsError: it is neither.
    """
    if on_input is None or callable(on_input):
        return on_input  # type: ignore[no-any-return]
    raise InvalidArgumentsError(
        "on_input must be an async callable (td.Question) -> answer, or None, got "
        f"{describe(on_input)}"
    )


async def serve_foreground(run: Run, talk: Talk, on_input: OnInput) -> None:
    """Pass each question of foreground *run* to *on_input* in the caller's task
    until the run ends; its return value is the answer.

    Raises:
        InvalidArgumentsError: a value *on_input* returned fails the question's schema.
        Exception: whatever *on_input* raised (but ``QuestionDeclinedError``,
            which declines).
    """
    handled: set[str] = set()  # each question is passed once, however it ends
    while run.ended_at is None:
        opened = (
            next((q for q in talk.open.values() if q.question_id not in handled), None)
            if is_asking(run)
            else None
        )
        if opened is None:
            await _woken(talk)
            continue
        handled.add(opened.question_id)
        try:
            value = await on_input(opened.public(run.run_id))
        except QuestionDeclinedError as exc:
            answer_run(run, opened.question_id, None, declined=True, reason=exc.reason)
            continue
        # A value for a question withdrawn meanwhile is dropped.
        answer_run(run, opened.question_id, value)
