"""Questions and progress across runtimes that share a store (contract §16, §19).

A run's record carries its open questions and its latest progress (see
``_talk``). Another runtime of the same owner reads them from its view of
the store (:func:`stored_view`), and may answer: the answer is checked
against the question's stored schema at once, and left in the store
(``ResultStore.post_answer``) for the owning runtime, whose watcher applies
it within a poll interval (:func:`apply_requests`), as it applies a cancel
request. What a store holds was written by a runtime, but is read as
untrusted: an entry that is not what a runtime writes is left out.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Final, final

import attrs

from .._checks import check_text, describe, is_a
from .._config import Config
from .._errors import DelegationError, InvalidArgumentsError, StoreError, UnknownRunError
from .._results import AnswerAck, Question, RunHandle
from .._schema import compile_result_schema
from .._status import RunStatus
from .._stores._protocol import RunRecord, StoredRun, is_run_id
from ._questions import answer_run, checked_answer
from ._records import store_error

if TYPE_CHECKING:
    from .._schema import ResultSchema
    from .._stores._protocol import ResultStore
    from ._run import Run
    from ._watcher import Watcher

__all__ = ["Replies", "answer_in_store", "apply_requests", "stored_handle", "stored_view"]

_RUNNING: Final = RunStatus.RUNNING
_ASKING: Final = RunStatus.INPUT_REQUIRED
#: At most this many question ids answered from this runtime are remembered
#: (so that a view read again before the owner applied an answer does not
#: offer the question again), and this many stored schemas kept compiled.
_ANSWERED_LIMIT: Final = 10_000
_SCHEMAS_LIMIT: Final = 256
#: The limits an answer left through the store alone is checked against.
_DEFAULTS: Final = Config()


def stored_view(record: RunRecord, skip: Any = ()) -> StoredRun:
    """What a runtime keeps of *record*'s run: ``input_required`` with its questions
    while it waits for an answer (not past its deadline, nor once a cancel was
    requested), and its latest progress."""
    questions: tuple[Question, ...] = ()
    status = record.status
    if (
        record.questions
        and status is _RUNNING
        and not record.cancel_requested
        and (record.deadline_at is None or time.time() < record.deadline_at)
    ):
        questions = record.open_questions(skip)
        if questions:
            status = _ASKING
    return StoredRun(
        record.owner,
        record.subagent,
        status,
        record.usage,
        record.progress_report(),
        questions,
    )


def stored_handle(run_id: str, stored: StoredRun) -> RunHandle:
    """The handle of a run known from the store."""
    return RunHandle(
        run_id, stored.subagent, stored.status, stored.progress, stored.questions, stored.usage
    )


def apply_requests(run: Run, record: RunRecord) -> None:
    """Apply the answers other runtimes left in the store for live *run*'s questions.

    Each goes through ``answer_run`` as a local answer would: one for a
    question no longer open, or that fails its schema (a store changed by
    something else), is dropped.
    """
    limit = run.host.config.max_task_chars
    talk = run.talk
    for request in record.answer_requests:
        if not isinstance(request, dict) or type(request.get("question_id")) is not str:
            continue
        if talk is None or request["question_id"] not in talk.open:
            continue  # applied before, or closed meanwhile: nothing to read
        declined = request.get("declined") is True
        try:
            answer_run(
                run,
                request["question_id"],
                request.get("answer"),
                declined=declined,
                reason=_stored_reason(request.get("reason"), limit) if declined else "",
            )
        except DelegationError:
            continue


def _stored_reason(reason: object, limit: int) -> str:
    """The reason a decline left in the store gives, checked as ``Parent.decline``
    checks its own: one that is not valid text, or is longer than this runtime
    allows, is replaced by what is wrong with it (the decline itself stands:
    the store keeps only the first answer left for a question, so dropping it
    would leave the question unanswerable from elsewhere)."""
    if type(reason) is not str:
        return ""
    try:
        return check_text("reason", reason, max_chars=limit, allow_blank=True)
    except InvalidArgumentsError as exc:
        return f"the reason left in the store was refused: {exc}"


@final
class Replies:
    """This runtime's answers to questions of runs that live in other runtimes."""

    __slots__ = ("_answered", "_config", "_schemas", "_watcher", "store")

    def __init__(self, store: ResultStore, config: Config, watcher: Watcher) -> None:
        self.store = store
        self._config = config
        self._watcher = watcher
        self._answered: OrderedDict[str, None] = OrderedDict()
        self._schemas: OrderedDict[str, ResultSchema] = OrderedDict()

    @property
    def answered(self) -> OrderedDict[str, None]:
        """The ids of the questions answered (or declined) from this runtime."""
        return self._answered

    def reply(
        self,
        run_id: str,
        stored: StoredRun,
        question_id: str | None,
        value: object,
        declined: bool,
        reason: str,
    ) -> tuple[AnswerAck, StoredRun]:
        """Answer (or decline) a question of *stored*, a run live in another runtime.

        The answer is checked against the question's schema now, and sent to
        the store with the watcher's next poll; the owning runtime applies it
        within a poll interval, unless the question was closed meanwhile.

        Returns:
            the ack (``accepted`` False when no such question is open in this
            runtime's view, or the store cannot carry answers) and the view
            of the run without that question.

        Raises:
            InvalidArgumentsError: a malformed *question_id*, or a *value* that
                does not satisfy the schema (the question stays open).
            StoreError: the stored schema is not one a runtime writes.
        """
        if question_id is not None and type(question_id) is not str:
            raise InvalidArgumentsError(
                f"question_id must be a string or None (the oldest open question), got "
                f"{type(question_id).__name__}"
            )
        questions = stored.questions
        opened = next(
            (q for q in questions if question_id is None or q.question_id == question_id), None
        )
        if (
            opened is None
            or stored.status is not _ASKING
            or getattr(self.store, "post_answer", None) is None
        ):
            return AnswerAck(run_id, question_id, False, stored.status), stored
        qid = opened.question_id
        request: dict[str, Any] = {"question_id": qid, "declined": declined, "reason": reason}
        if not declined:
            answer, _ = checked_answer(self._schema(opened), qid, value, self._config)
            request["answer"] = answer.copy()
        self._watcher.post_answer(run_id, request)
        answered = self._answered
        answered[qid] = None
        if len(answered) > _ANSWERED_LIMIT:
            answered.popitem(last=False)
        left = tuple(q for q in questions if q.question_id != qid)
        view = attrs.evolve(stored, status=_ASKING if left else _RUNNING, questions=left)
        return AnswerAck(run_id, qid, True, view.status), view

    def _schema(self, question: Question) -> ResultSchema:
        schemas = self._schemas
        schema = schemas.get(question.question_id)
        if schema is None:
            schema = schemas[question.question_id] = _compiled(question, self._config)
            if len(schemas) > _SCHEMAS_LIMIT:
                schemas.popitem(last=False)
        return schema


def _compiled(question: Question, config: Config) -> ResultSchema:
    """The stored schema of *question*, compiled.

    Raises:
        StoreError: it is not a schema a runtime writes.
    """
    try:
        return compile_result_schema(
            dict(question.schema),
            "the question's stored schema",
            max_nesting=config.max_nesting_depth,
        )
    except Exception as exc:
        raise StoreError(
            f"question {question.question_id} of run {question.run_id} has a stored schema "
            f"no runtime writes ({exc}); the store was changed by something else",
            run_id=question.run_id,
        ) from None


async def answer_in_store(
    store: Any,
    run_id: str,
    value: object,
    *,
    owner: str | None = None,
    question_id: str | None = None,
    declined: bool = False,
    reason: str = "",
    config: Config | None = None,
) -> AnswerAck:
    """Answer (or decline) an open question of *run_id* through *store* alone, as
    another runtime would (``trio-delegate runs answer``); durable when it returns.

    The run's own runtime applies the answer within a poll interval, unless
    the question was closed meanwhile.

    Args:
        store: a store with ``post_answer`` (the stores of this package).
        owner: the run's owner, when the caller must be it.
        question_id: the question (``None``: the run's oldest open one).

    Returns:
        the ack: ``accepted`` False when the run has no such open question
        (answered, declined, withdrawn, ended), or another answer was left
        for it first.

    Raises:
        UnknownRunError: the store holds no run *run_id* (of *owner*).
        InvalidArgumentsError: *value* does not satisfy the question's schema,
            or is too large or deep.
        StoreError: the store could not be read or written.
    """
    config = _DEFAULTS if config is None else config
    if not is_run_id(run_id):
        raise InvalidArgumentsError(
            f"run_id must be a run id (run_ and 32 lowercase hex digits), got {describe(run_id)}"
        )
    if question_id is not None and not is_a(question_id, str):
        raise InvalidArgumentsError(
            f"question_id must be a string or None (the oldest open question), got "
            f"{describe(question_id)}"
        )
    reason = check_text("reason", reason, max_chars=config.max_task_chars, allow_blank=True)
    if getattr(store, "post_answer", None) is None:
        raise InvalidArgumentsError(
            f"store must be a store that takes answers (post_answer), such as SQLiteStore or "
            f"PostgresStore, got {describe(store)}"
        )
    try:
        record = await store.get(run_id)
    except Exception as exc:
        raise store_error(exc, f"read run {run_id}", run_id) from None
    if record is None or (owner is not None and record.owner != owner):
        whose = "" if owner is None else f" of owner {owner!r}"
        raise UnknownRunError(
            f"the store holds no run {run_id}{whose}: check the id (trio-delegate runs list "
            "shows them) and the store",
            run_id=run_id,
        )
    view = stored_view(record)
    opened = next(
        (q for q in view.questions if question_id is None or q.question_id == question_id), None
    )
    if opened is None:
        return AnswerAck(run_id, question_id, False, view.status)
    qid = opened.question_id
    request: dict[str, Any] = {"question_id": qid, "declined": declined, "reason": reason}
    if not declined:
        answer, _ = checked_answer(_compiled(opened, config), qid, value, config)
        request["answer"] = answer.copy()
    try:
        stored = await store.post_answer(run_id, request)
    except Exception as exc:
        raise store_error(exc, f"leave an answer for run {run_id}", run_id) from None
    # The first answer left for a question is the one its runtime applies.
    accepted = stored is not None and any(entry == request for entry in stored.answer_requests)
    left = len(view.questions) > 1
    return AnswerAck(run_id, qid, accepted, _ASKING if left or not accepted else _RUNNING)
