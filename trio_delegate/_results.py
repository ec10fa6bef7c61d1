"""Value types a parent gets back: results, handles, cancel acks, outputs."""

from __future__ import annotations

from typing import Any, final

import attrs

from ._status import RunStatus
from ._usage import Usage, check_usage

__all__ = ["CancelAck", "Output", "RunHandle", "RunResult"]


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
class RunHandle:
    """A live or terminal run's status: an admission ack, a snapshot, or the
    "still running" answer of a timed wait. Never a result.

    Attributes:
        usage: what the run and its nested runs spent so far (contract §20),
            or ``None`` when nothing was reported.
    """

    run_id: str
    subagent: str
    status: RunStatus
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
