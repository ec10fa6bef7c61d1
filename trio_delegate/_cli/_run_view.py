"""A stored run as a person reads it: how it ended and why, its times in order, how long it took.

A :class:`RunRecord` is laid out for stores: its times in the order the
columns were added (``ended_at`` before ``started_at``), a deadline in Unix
time, ``cancel_requested`` meaning a request made *through the store* (by
another process), and ``observed`` meaning a completed run's result was
handed out. ``runs show`` and ``runs list`` read it here in a person's terms
instead; ``--json`` still prints the record as the store holds it.
"""

from __future__ import annotations

import datetime
from typing import Any

from .._status import RunStatus
from .._stores._protocol import INTERRUPTED_ERROR_TYPE, RunRecord

__all__ = ["duration", "lifecycle_rows", "seconds_text", "short_id"]

#: The live statuses of a run that has started (its time runs on while it waits
#: for an answer).
_STARTED = frozenset({RunStatus.RUNNING, RunStatus.INPUT_REQUIRED})


def short_id(run_id: str) -> str:
    """A run id cut to its prefix and four hex digits: ``run_3f9c…`` (enough for ``runs show``)."""
    if not run_id:
        return ""
    return run_id[:8] + "…"


def _moment(text: str | None) -> datetime.datetime | None:
    if not text:
        return None
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        return None  # a tampered time: shown as stored, never computed with
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=datetime.UTC)


def _between(start: str | None, end: str | None) -> float | None:
    first, last = _moment(start), _moment(end)
    if first is None or last is None or last < first:
        return None
    return (last - first).total_seconds()


def duration(record: RunRecord) -> float | None:
    """How long *record*'s run ran: start to end (to now while it runs); ``None`` if unknown."""
    if record.status.is_terminal:
        return _between(record.started_at or record.admitted_at, record.ended_at)
    if record.status in _STARTED:
        now = datetime.datetime.now(datetime.UTC).isoformat()
        return _between(record.started_at, now)
    return None


def seconds_text(seconds: float | None) -> str:
    """*seconds* as a person reads a duration: ``"850 ms"``, ``"4.2 s"``, ``"3 min 5 s"``."""
    if seconds is None:
        return ""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


def _time(text: str | None) -> str | None:
    """A stored ISO time as ``runs show`` prints it: to the millisecond, in UTC."""
    moment = _moment(text)
    if moment is None:
        return text or None
    return moment.astimezone(datetime.UTC).isoformat(sep=" ", timespec="milliseconds")


def _deadline(record: RunRecord) -> str | None:
    if not isinstance(record.deadline_at, int | float):
        return None
    try:
        moment = datetime.datetime.fromtimestamp(record.deadline_at, datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return repr(record.deadline_at)
    return moment.isoformat(sep=" ", timespec="milliseconds")


def _ending(record: RunRecord) -> str:
    """How the run ended and why, in words; what it is doing while it has not."""
    status = record.status
    if status is RunStatus.PENDING:
        return "pending: waiting for a free slot of its parent"
    if status is RunStatus.RUNNING:
        return "running"
    if status is RunStatus.INPUT_REQUIRED:
        return "input_required: running, and waiting for an answer to a question it asked"
    if status is RunStatus.COMPLETED:
        return "completed"
    why = record.error_message or "no reason recorded"
    if status is RunStatus.FAILED:
        if record.error_type == INTERRUPTED_ERROR_TYPE:
            return f"failed: interrupted, its runtime went away ({why})"
        if record.failure == "invalid_result":
            return f"failed: its result broke its final_schema ({why})"
        kind = f"{record.error_type}: " if record.error_type else ""
        return f"failed: the runner raised {kind}{why}"
    if status is RunStatus.CANCELLED:
        return f"cancelled: {why}"
    return f"timed out: {why}"


def _reported(record: RunRecord) -> str | None:
    """Whether the run's outcome was reported to its owner (``None`` while it runs).

    Stores record it for completed runs only (the fail-closed rule's
    "observed"): a run that did not complete has no result to hand out, and
    its error is what every wait reports, which no store records.
    """
    if not record.status.is_terminal:
        return None
    if record.status is not RunStatus.COMPLETED:
        return "its error on every wait (the store does not record whether one was made)"
    if record.observed:
        return "yes: a wait (or the foreground call) returned its result"
    return "not yet: no wait has returned its result"


def lifecycle_rows(record: RunRecord) -> list[tuple[str, Any]]:
    """``runs show``'s rows for *record*: who, what, how it ended, then its times in order.

    Values are stored text or JSON-ready values; empty ones are left out.
    """
    queued = _between(record.admitted_at, record.started_at)
    rows: list[tuple[str, Any]] = [
        ("owner", record.owner),
        ("subagent", record.subagent),
        ("task", record.task),
    ]
    if record.task_summary != record.task:
        rows.append(("task_summary", record.task_summary))
    rows += [
        ("ended" if record.status.is_terminal else "status", _ending(record)),
        ("outcome reported", _reported(record)),
        ("cancel requested through the store", "yes" if record.cancel_requested else None),
        ("admitted", _time(record.admitted_at)),
        ("started", _time(record.started_at)),
        ("deadline", _deadline(record)),
        ("ended at", _time(record.ended_at)),
        ("queued for", seconds_text(queued) or None),
        ("ran for", seconds_text(duration(record)) or None),
        ("replaces", record.replaces),
        ("continues", record.continues),
        ("final_result", record.final_result),
        ("result_type", record.result_type),
        ("transcript", None if record.transcript is None else list(record.transcript)),
        ("history", list(record.history) or None),
        ("runtime", record.runtime_id),
    ]
    return [(label, value) for label, value in rows if value is not None]
