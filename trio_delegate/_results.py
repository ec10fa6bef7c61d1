"""Value types a parent gets back: results, handles, cancel acks, outputs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, final

import attrs

from ._status import RunStatus
from ._usage import Usage, check_usage

__all__ = ["AnswerAck", "CancelAck", "Output", "Progress", "Question", "RunHandle", "RunResult"]


@final
@attrs.frozen
class RunResult:
    """The envelope of a completed run.

    Attributes:
        run_id: the run's id.
        subagent: the subagent that ran.
        task_summary: the task, whitespace collapsed and cut to 200 characters.
        final_result: what the runner returned (validated, JSON-ready).
    """

    run_id: str
    subagent: str
    task_summary: str
    final_result: Any


@final
@attrs.frozen
class Progress:
    """A run's latest progress report (contract §19).

    Attributes:
        message: what the runner said, trimmed, whitespace collapsed and cut
            to 1,000 characters, or ``None``.
        progress: how far it is, a finite number >= 0 that never goes down, or ``None``.
        total: how far it will go, a finite number >= 0, or ``None``.
        seq: how many reports the run made: 1, 2, 3 ...
    """

    message: str | None
    progress: float | None
    total: float | None
    seq: int


@final
@attrs.frozen
class Question:
    """An open question a running child asked its parent (contract §19).

    Attributes:
        question_id: unique forever (random, 128 bits).
        run_id: the run that asked.
        text: the question.
        schema: the JSON Schema the answer must satisfy (``{"type": "string"}``
            when the child gave none); the caller's own copy.
    """

    question_id: str
    run_id: str
    text: str
    schema: Mapping[str, Any]


@final
@attrs.frozen
class AnswerAck:
    """The answer to ``Parent.answer`` or ``Parent.decline``.

    Attributes:
        run_id: the run asked about.
        question_id: the question answered or declined, or ``None`` when the
            run had no open question.
        accepted: whether the answer (or refusal) reached an open question;
            ``False`` for one already answered, declined or withdrawn, or a
            terminal run.
        status: the run's status right after the answer was applied.
    """

    run_id: str
    question_id: str | None
    accepted: bool
    status: RunStatus


@final
# A dict class: a frozen slotted one sets every field through
# ``object.__setattr__`` when it is made, and every ``start`` makes one.
@attrs.frozen(slots=False)
class RunHandle:
    """A live or terminal run's status: an admission ack, a snapshot, or the
    "still running" answer of a timed wait. Never a result.

    Attributes:
        run_id: the run's id.
        subagent: the subagent that runs it.
        status: its status when the handle was made.
        progress: its latest progress report, if it made one (contract §19).
        questions: its open questions, oldest first (status ``input_required``).
        usage: what the run and its nested runs spent so far (contract §20),
            or ``None`` when nothing was reported.
    """

    run_id: str
    subagent: str
    status: RunStatus
    progress: Progress | None = None
    questions: tuple[Question, ...] = ()
    usage: Usage | None = None


@final
@attrs.frozen
class CancelAck:
    """The answer to a cancellation request, not proof that the child stopped.

    Attributes:
        cancel_requested: True when the run was live (also on repeats).
        status: the run's status right after the request; ``running`` while the
            child is still processing the cancellation.
    """

    run_id: str
    cancel_requested: bool
    status: RunStatus


def _freeze_transcript(value: Any) -> tuple[Any, ...] | None:
    if value is None:
        return None
    # A list or tuple (or a subclass, whose own __iter__ could never end) is
    # read through the builtin type: one snapshot of its items.
    if isinstance(value, list):
        return tuple(list.copy(value))
    if isinstance(value, tuple):
        return tuple.__getitem__(value, slice(None))
    return tuple(value)


def _check_usage(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None:
        check_usage("Output.usage", value)


@final
@attrs.frozen
class Output:
    """What a runner may return instead of a bare result.

    Attributes:
        final_result: the run's final result.
        transcript: the run's whole conversation as JSON-ready entries
            (including the history it was given), kept for continuation.
        usage: what the runner spent (contract §20), counted when it returns,
            whether its result then passes validation or not.

    Raises:
        InvalidArgumentsError: *usage* is neither a :class:`Usage` nor ``None``.
    """

    final_result: Any
    transcript: tuple[Any, ...] | None = attrs.field(
        default=None, converter=_freeze_transcript, kw_only=True
    )
    usage: Usage | None = attrs.field(default=None, kw_only=True, validator=_check_usage)
