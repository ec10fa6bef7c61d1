"""A trace of what runners did, rendered without the random run ids.

Run ids are random (contract §8), so a trace that must come out the same on
every run cannot print them. Each event keeps its run id; rendering replaces
it with a stable label: a name given with :meth:`Trace.name`, else the run's
task text (which tests choose, and usually make unique).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from typing import final

import attrs
import trio

__all__ = ["Trace", "TraceEvent"]

_LABEL_CHARS = 60


@final
@attrs.frozen
class TraceEvent:
    """One thing that happened, at one time on the Trio clock.

    Attributes:
        time: the Trio clock time of the event.
        run_id: the run it is about, or ``None`` for an event about no run.
        kind: a short word: ``start``, ``step``, ``cancelled``, ``cleanup``,
            ``finally``, or any word a host records.
        detail: free text; must not contain run ids if the trace is to be
            compared across runs.
        task: the run's task text, when the recorder knew it.
    """

    time: float
    run_id: str | None
    kind: str
    detail: str = ""
    task: str | None = None


@final
@attrs.define(eq=False)
class Trace:
    """An append-only list of :class:`TraceEvent`, shared by runners and hosts.

    Scripted runners record into it from Trio tasks; a host may add its own
    events (answers it got, requests it made). Nothing in it is global: give
    each test its own trace.
    """

    _events: list[TraceEvent] = attrs.field(factory=list, init=False)
    _names: dict[str, str] = attrs.field(factory=dict, init=False)

    def record(
        self,
        run_id: str | None,
        kind: str,
        detail: str = "",
        *,
        task: str | None = None,
        time: float | None = None,
    ) -> None:
        """Append an event.

        Args:
            run_id: the run the event is about, or ``None``.
            kind: a short word naming the event.
            detail: free text (no run ids, for a comparable trace).
            task: the run's task text, used to label the run.
            time: the event's time; the current Trio clock time when omitted
                (so it must then be called from inside Trio).
        """
        when = trio.current_time() if time is None else time
        self._events.append(TraceEvent(when, run_id, kind, detail, task))

    def name(self, run_id: str, label: str) -> None:
        """Label *run_id* as *label* when rendering (instead of its task text)."""
        self._names[run_id] = label

    @property
    def events(self) -> tuple[TraceEvent, ...]:
        """Every event in the order it was recorded."""
        return tuple(self._events)

    def __len__(self) -> int:
        return len(self._events)

    def __iter__(self) -> Iterator[TraceEvent]:
        return iter(tuple(self._events))

    def labels(self) -> dict[str, str]:
        """The label of every run id in the trace.

        A run is labelled by its :meth:`name`, else by its task text (cut to
        60 characters) when no other run has the same task, else by the task
        text followed by ``#n`` in the order the runs were first mentioned.
        A run with neither is ``#n`` in that order.
        """
        # First mention order; a task learned from a later event fills a gap.
        tasks: dict[str, str | None] = {}
        for event in self._events:
            if event.run_id is not None and tasks.get(event.run_id) is None:
                tasks[event.run_id] = event.task
        by_text: dict[str | None, list[str]] = {}
        for run_id, task in tasks.items():
            text = None if task is None else _one_line(task)
            by_text.setdefault(text, []).append(run_id)
        labels: dict[str, str] = {}
        for text, run_ids in by_text.items():
            for index, run_id in enumerate(run_ids):
                if run_id in self._names:
                    labels[run_id] = self._names[run_id]
                elif text is None:
                    labels[run_id] = f"#{index}"
                elif len(run_ids) == 1:
                    labels[run_id] = text
                else:
                    labels[run_id] = f"{text}#{index}"
        for run_id, label in self._names.items():
            labels.setdefault(run_id, label)
        return labels

    def lines(self, *, canonical: bool = True) -> list[str]:
        """Render the trace as text lines: ``"<time> <label> <kind> <detail>"``.

        Args:
            canonical: order events by time, then label, keeping the recorded
                order within one run at one time. Tasks that wake at the same
                instant run in an order Trio leaves open; this order does not
                depend on it. ``False`` keeps the recorded order.
        """
        labels = self.labels()
        rows = [
            (event, labels.get(event.run_id, "-") if event.run_id else "-")
            for event in self._events
        ]
        if canonical:
            rows.sort(key=lambda row: (row[0].time, row[1]))
        return [_render(event, label) for event, label in rows]

    def for_label(self, label: str) -> list[TraceEvent]:
        """The events of the run labelled *label*, in recorded order."""
        labels = self.labels()
        return [
            event for event in self._events if event.run_id and labels.get(event.run_id) == label
        ]

    def digest(self) -> str:
        """A SHA-256 hex digest of the canonical rendering."""
        return digest_lines(self.lines())


def digest_lines(lines: Iterable[str]) -> str:
    """The SHA-256 hex digest of *lines* joined with newlines."""
    sha = hashlib.sha256()
    for line in lines:
        sha.update(line.encode())
        sha.update(b"\n")
    return sha.hexdigest()


def _one_line(text: str) -> str:
    flat = " ".join(text.split())
    if len(flat) > _LABEL_CHARS:
        flat = flat[: _LABEL_CHARS - 1] + "…"
    return flat


def _render(event: TraceEvent, label: str) -> str:
    line = f"{event.time:.3f} {label} {event.kind}"
    if event.detail:
        line += " " + event.detail
    return line
