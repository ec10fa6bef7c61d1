"""What a live run is doing, as the ``runs`` views show it: its progress and open questions.

A run that asked its parent a question reads ``input_required`` until it is
answered (contract §19). Its latest progress report and its open questions
are shown here, whichever view asks (``runs show``, ``runs watch``, their
JSON): :func:`live_of` reads them off a record, so a store that keeps more
of them is shown by changing it alone.
"""

from __future__ import annotations

import math
from typing import Any, Final

import attrs

from .._results import Progress, Question
from .._status import RunStatus
from .._stores._protocol import RunRecord

__all__ = ["WAITING", "Live", "live_cells", "live_json", "live_of", "live_rows", "progress_text"]

#: How a person reads ``input_required``.
WAITING: Final = "waiting for an answer"

#: Open questions ``runs show`` lists one by one; the rest are counted.
_SHOWN_QUESTIONS: Final = 5


@attrs.frozen
class Live:
    """A live run's latest progress and its open questions, as a record carries them.

    Attributes:
        status: the run's status.
        progress: its latest progress report, if the record carries one.
        questions: its open questions, oldest first, if the record carries them.
    """

    status: RunStatus
    progress: Progress | None = None
    questions: tuple[Question, ...] = ()

    @property
    def waiting(self) -> bool:
        """Whether the run waits for an answer to a question."""
        return self.status is RunStatus.INPUT_REQUIRED or bool(self.questions)


def live_of(record: RunRecord) -> Live:
    """What *record* says its run is doing: its status, its latest progress and, while
    it lives, its open questions (an entry that is not what a runtime writes is left
    out, never shown wrong)."""
    if record.status.is_terminal:
        return Live(record.status, record.progress_report())
    return Live(record.status, record.progress_report(), record.open_questions())


def _number(value: float) -> str:
    value = float(value)  # a report may hold an int
    return f"{value:,.0f}" if value.is_integer() and abs(value) < 1e15 else f"{value:.4g}"


def progress_text(progress: Progress) -> str:
    """A progress report in a line: ``"3/10 (30%): reading files"``."""
    parts = []
    done, total = progress.progress, progress.total
    if done is not None and math.isfinite(done):
        if total is not None and math.isfinite(total):
            share = f" ({min(done / total, 1.0):.0%})" if total > 0 else ""
            parts.append(f"{_number(done)}/{_number(total)}{share}")
        else:
            parts.append(_number(done))
    if progress.message:
        parts.append(progress.message)
    return ": ".join(parts) or f"report {progress.seq}"


def live_rows(live: Live) -> list[tuple[str, str]]:
    """``runs show``'s rows for what a live run is doing (none for a run without any)."""
    rows = []
    if live.waiting:
        count = len(live.questions)
        asked = f": {count} open question{'' if count == 1 else 's'}" if count else ""
        rows.append(("input", f"{WAITING}{asked}"))
    for question in live.questions[:_SHOWN_QUESTIONS]:
        rows.append((f"question {question.question_id}", question.text))
    if len(live.questions) > _SHOWN_QUESTIONS:
        rows.append(("questions", f"and {len(live.questions) - _SHOWN_QUESTIONS:,} more"))
    if live.progress is not None:
        rows.append(("progress", f"{progress_text(live.progress)} (report {live.progress.seq:,})"))
    return rows


def live_cells(live: Live) -> list[str]:
    """What a table of runs shows of a live run under its task: whether it waits
    for an answer (and the oldest question), and its latest progress."""
    lines = []
    if live.waiting:
        oldest = f": {live.questions[0].text}" if live.questions else ""
        lines.append(f"{WAITING}{oldest}")
    if live.progress is not None:
        lines.append(progress_text(live.progress))
    return lines


def live_json(live: Live) -> dict[str, Any]:
    """The ``--json`` keys for what a live run is doing: ``waiting_for_answer``, and
    ``progress`` and ``questions`` as the model-facing tools give them (§19)."""
    fields: dict[str, Any] = {}
    if not live.status.is_terminal:
        fields["waiting_for_answer"] = live.waiting
    if live.progress is not None:
        fields["progress"] = attrs.asdict(live.progress)
    if live.questions:
        fields["questions"] = [
            {"question_id": q.question_id, "question": q.text, "schema": dict(q.schema)}
            for q in live.questions
        ]
    return fields
