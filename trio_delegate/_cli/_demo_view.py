"""How the ``trio-delegate demo`` scenario is shown: plain lines or a live table.

The scenario (:mod:`trio_delegate._demo`) talks to a :class:`Reporter` only:
it announces narrated steps and events (one per parent call and its answer,
plus the scripted children's cleanup notes), hands over the table of known
runs when it polls their status, and ends with a :class:`Summary`. Times are
seconds on the Trio clock since the scenario started (the demo's clock runs
faster than real time at speed factors above 1, so the story reads the same
at any speed).
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Protocol, TextIO

import attrs
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from .._results import Progress
from .._status import RunStatus
from .._usage import Usage
from ._run_view import short_id

__all__ = [
    "Event",
    "LiveReporter",
    "PlainReporter",
    "Reporter",
    "RunRow",
    "Summary",
    "format_event",
    "format_step",
    "event_lines",
    "format_summary",
    "log_lines",
    "render_table",
    "short_id",
]

#: Rich styles of the run statuses in the live table and log.
STATUS_STYLES: dict[str, str] = {
    RunStatus.PENDING.value: "dim",
    RunStatus.RUNNING.value: "yellow",
    RunStatus.INPUT_REQUIRED.value: "bold blue",
    RunStatus.COMPLETED.value: "green",
    RunStatus.FAILED.value: "red",
    RunStatus.CANCELLED.value: "magenta",
    RunStatus.TIMED_OUT.value: "dark_orange",
    "passed": "bold green",
}

# Enough log lines to follow the story while the table and log still fit a
# 24-line terminal alongside an 8-row table.
_LOG_LINES = 8
# Screen lines for the log when notes wrap (a narrow terminal): the 8-row table
# takes 13, so 10 more still fit 24 lines.
_LOG_SCREEN_LINES = 10


@attrs.frozen
class Event:
    """One thing that happened: a parent call and its answer, or a child's note.

    Attributes:
        at: scenario seconds since the start.
        action: ``delegate``, ``start``, ``wait``, ``status``, ``cancel``,
            ``answer``, ``check`` or ``cleanup``.
        answer: what came back: a status value (``"running"``), an error type
            name (``"RunTimedOutError"``), or ``"passed"``.
        subagent: the subagent the call was about, if any.
        run_id: the run the call was about, if any (full id).
        args: the call's notable arguments, already formatted
            (``"timeout=1.0s"``).
        note: what the answer means, in plain words.
    """

    at: float
    action: str
    answer: str
    subagent: str = ""
    run_id: str = ""
    args: str = ""
    note: str = ""


@attrs.define
class RunRow:
    """What the scenario knows of one run, as shown in the live table.

    Attributes:
        run_id: the full run id.
        subagent: the subagent's name.
        task: the task text.
        started_at: scenario seconds when the run was first seen.
        deadline: the child deadline in scenario seconds, once known.
        status: the latest status seen (from an answer or a status poll).
        ended_at: scenario seconds when a terminal status was first seen.
        outcome: what the parent learned of the run's end, in a few words.
        replaces: the run this one replaces (``replaces=``), if any.
        replaced_by: the run started to replace this one, if any.
        observed: whether the parent has read the completed result.
        cancel_requested: whether the parent asked the run to stop.
        progress: the latest progress the run reported, if any.
        question: the text of the run's open question, if any.
        answer: the parent's answer to the run's question, once given.
        usage: what the run reported it spent, if anything.
    """

    run_id: str
    subagent: str
    task: str
    started_at: float
    deadline: float | None = None
    status: RunStatus = RunStatus.RUNNING
    ended_at: float | None = None
    outcome: str = ""
    replaces: str = ""
    replaced_by: str = ""
    observed: bool = False
    cancel_requested: bool = False
    progress: Progress | None = None
    question: str = ""
    answer: str = ""
    usage: Usage | None = None

    def describe_usage(self) -> str:
        """The usage column: ``"3.5k · $0.012"`` (tokens, cost), or ``"—"``."""
        if self.usage is None:
            return "—"
        tokens = self.usage.total_tokens
        shown = f"{tokens / 1000:.1f}k" if tokens >= 1000 else str(tokens)
        return f"{shown} · ${self.usage.cost_usd:.3f}"

    def describe_outcome(self) -> str:
        """The outcome column: what the parent learned, else what the status implies."""
        text = self.outcome or self._implied_outcome()
        if self.replaced_by:
            # First, so that a narrow column still shows the run is taken care of.
            return f"replaced by {short_id(self.replaced_by)} · {text}"
        if self.replaces and not text:
            return f"replaces {short_id(self.replaces)}"
        return text

    def _implied_outcome(self) -> str:
        if self.status is RunStatus.COMPLETED and not self.observed:
            # Fail-closed in one cell: done is not the same as delivered.
            return "completed, result not read yet"
        if self.status.is_terminal:
            return f"{self.status.value}; the parent has not asked yet"
        if self.cancel_requested:
            return "cancel requested; cleaning up"
        if self.question:
            return f"asks: {self.question}"
        if self.answer:
            return f"answered {self.answer}; going on"
        if self.progress is not None and self.progress.message:
            return self.progress.message
        return ""


@attrs.frozen
class Summary:
    """How the scenario ended.

    Attributes:
        runs: every run it started, in the order it learned of them.
        resolved: whether the final fail-closed check passed.
        verdict: the check's outcome in words (the error message when it failed).
        at: scenario seconds at the end.
        usage: what the parent's runs spent in all (``parent.usage()``).
    """

    runs: tuple[RunRow, ...]
    resolved: bool
    verdict: str
    at: float
    usage: Usage | None = None

    def usage_line(self) -> str:
        """``51,230 tokens in 14 requests, $0.204`` (empty without usage)."""
        if self.usage is None:
            return ""
        u = self.usage
        return f"{u.total_tokens:,} tokens in {u.requests} requests, ${u.cost_usd:.3f}"

    @property
    def headline(self) -> str:
        """The verdict's first line (a failed check lists the runs on further lines)."""
        return self.verdict.splitlines()[0] if self.verdict else ""

    def counts(self) -> dict[RunStatus, int]:
        """How many runs ended in each status, in lifecycle order (zeros left out)."""
        tally = collections.Counter(row.status for row in self.runs)
        return {status: tally[status] for status in RunStatus if tally[status]}

    def counts_line(self) -> str:
        """``8 runs: 5 completed, 1 failed, ...``."""
        parts = ", ".join(f"{n} {status.value}" for status, n in self.counts().items())
        return f"{len(self.runs)} runs: {parts}"


class Reporter(Protocol):
    """Where the scenario sends what happens."""

    @property
    def poll_interval(self) -> float | None:
        """Seconds between :meth:`refresh` calls from a task polling run
        statuses (on the Trio clock), or ``None`` for no polling.
        """
        ...

    def begin(self) -> None:
        """The scenario starts."""

    def step(self, at: float, title: str) -> None:
        """A narrated step of the story starts."""

    def event(self, event: Event) -> None:
        """Something happened."""

    def refresh(self, at: float, rows: Sequence[RunRow]) -> None:
        """The statuses of the known runs were polled (see :attr:`poll_interval`)."""

    def end(self, summary: Summary | None) -> None:
        """The scenario ended; ``None`` when it stopped early (an error, Ctrl-C)."""


# -- plain lines ----------------------------------------------------------------


def format_step(at: float, title: str) -> str:
    """A step heading as one plain line."""
    return f"[{at:4.1f}s] == {title}"


def format_event(event: Event) -> str:
    """An event as one plain line, e.g.
    ``[ 2.0s] start    investigator run_3f9c… -> running (admission ack, not a result)``.
    """
    head = f"[{event.at:4.1f}s] {event.action:<8} {event.subagent:<12} {short_id(event.run_id):<9}"
    call = f" {event.args}" if event.args else ""
    note = f" ({event.note})" if event.note else ""
    return f"{head}{call} -> {event.answer}{note}"


def format_summary(summary: Summary) -> list[str]:
    """The closing lines: counts by status and the fail-closed verdict."""
    word = "passed" if summary.resolved else "FAILED"
    lines = [f"[{summary.at:4.1f}s] summary  {summary.counts_line()}"]
    if summary.usage is not None:
        lines.append(f"[{summary.at:4.1f}s] usage    {summary.usage_line()}")
    lines.append(f"[{summary.at:4.1f}s] verdict  fail-closed check {word}: {summary.headline}")
    return lines


@attrs.define
class PlainReporter:
    """Prints one readable line per step and event to *stream*."""

    stream: TextIO
    poll_interval: float | None = None

    def begin(self) -> None:
        """Nothing to set up."""

    def step(self, at: float, title: str) -> None:
        """Print the step heading."""
        self._print(format_step(at, title))

    def event(self, event: Event) -> None:
        """Print the event line."""
        self._print(format_event(event))

    def refresh(self, at: float, rows: Sequence[RunRow]) -> None:
        """Never called: plain output does not poll."""

    def end(self, summary: Summary | None) -> None:
        """Print the summary lines."""
        if summary is not None:
            for line in format_summary(summary):
                self._print(line)

    def _print(self, line: str) -> None:
        # Flushed per line so that a pipe (| tee, | less) follows the story live.
        print(line, file=self.stream, flush=True)


# -- live table -------------------------------------------------------------------


def _status_text(status: str) -> Text:
    return Text(status, style=STATUS_STYLES.get(status, "bold red"))


def _time_cell(row: RunRow, now: float) -> str:
    elapsed = (row.ended_at if row.ended_at is not None else now) - row.started_at
    deadline = f"{row.deadline:.1f}s" if row.deadline is not None else "—"
    return f"{max(elapsed, 0.0):4.1f}s / {deadline}"


# Widths of the columns that never shrink: run id, subagent, status, time, usage.
_FIXED_WIDTHS = (9, 12, 14, 13, 14)
# Per column: one border plus one space of padding each side.
_COLUMN_OVERHEAD = 3
# Below this many spare cells the task column is left out: the outcome says more.
_MIN_SPLIT = 40
_MAX_TASK_WIDTH = 34


def _flexible_widths(width: int) -> tuple[int, int]:
    """The task and outcome column widths that fit a *width*-cell terminal.

    A task width of 0 means: leave the task column out.
    """
    spare = width - sum(_FIXED_WIDTHS) - _COLUMN_OVERHEAD * 7 - 1
    if spare < _MIN_SPLIT:
        return 0, max(spare + _COLUMN_OVERHEAD, 8)
    task = min(_MAX_TASK_WIDTH, spare * 2 // 5)
    return task, spare - task


def render_table(rows: Sequence[RunRow], now: float, width: int = 120) -> Table:
    """The table of runs: id, subagent, status, task, time/deadline, usage, outcome.

    Sized for a *width*-cell terminal: the id, subagent, status and time
    columns never shrink; the task and outcome are cut with an ellipsis
    (one screen line per run, never wrapped).
    """
    task_width, outcome_width = _flexible_widths(width)
    table = Table(title=f"trio-delegate demo · {now:4.1f}s", title_justify="left")
    run_w, subagent_w, status_w, time_w, usage_w = _FIXED_WIDTHS
    table.add_column("run", style="cyan", no_wrap=True, width=run_w)
    table.add_column("subagent", no_wrap=True, width=subagent_w)
    table.add_column("status", no_wrap=True, width=status_w)
    if task_width:
        table.add_column("task", no_wrap=True, overflow="ellipsis", width=task_width)
    table.add_column("time/deadline", justify="right", no_wrap=True, width=time_w)
    table.add_column("tokens · cost", justify="right", no_wrap=True, width=usage_w)
    table.add_column("outcome", no_wrap=True, overflow="ellipsis", width=outcome_width)
    for row in rows:
        cells: list[RenderableType] = [
            short_id(row.run_id),
            row.subagent,
            _status_text(row.status.value),
        ]
        if task_width:
            cells.append(row.task)
        cells += [_time_cell(row, now), row.describe_usage(), row.describe_outcome()]
        table.add_row(*cells)
    return table


def _event_text(event: Event) -> Text:
    # One screen line per event: a long note is cut, not wrapped.
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(f"[{event.at:4.1f}s] ", style="dim")
    text.append(f"{event.action:<8} ", style="bold cyan")
    text.append(f"{event.subagent:<12} {short_id(event.run_id):<9}")
    if event.args:
        text.append(f" {event.args}", style="italic")
    text.append(" -> ")
    text.append(event.answer, style=STATUS_STYLES.get(event.answer, "bold red"))
    if event.note:
        text.append(f" ({event.note})", style="dim")
    return text


#: Where a note moved to its own line starts: under the subagent column.
_NOTE_INDENT = " " * 8


def event_lines(event: Event, width: int) -> list[Text]:
    """*event* as screen lines of at most *width* cells, its note never cut.

    The note says what the answer means, which is the point of the demo: when
    the whole line does not fit (an 80-column terminal), the note goes on
    lines of its own under the call, wrapped.
    """
    line = _event_text(event)
    if line.cell_len <= width or not event.note:
        return [line]
    note = Text(f"{_NOTE_INDENT}({event.note})", style="dim")
    return [_event_text(attrs.evolve(event, note="")), note]


def log_lines(entries: Sequence[Text | Event], console: Console) -> list[Text]:
    """The newest *entries* that fit in :data:`_LOG_SCREEN_LINES` screen lines, oldest first."""
    width = console.width
    shown: list[Text] = []
    budget = _LOG_SCREEN_LINES
    for entry in reversed(entries):
        lines = event_lines(entry, width) if isinstance(entry, Event) else [entry]
        # A wrapped note or heading takes as many lines as wrapping it gives.
        height = sum(len(line.wrap(console, width)) for line in lines)
        if height > budget:
            break
        budget -= height
        shown[:0] = lines
    return shown


class LiveReporter:
    """A ``rich.live.Live`` table of runs with the narrated log underneath.

    Args:
        console: the terminal to draw on.
        poll_interval: Trio seconds between redraws.
    """

    def __init__(self, console: Console, poll_interval: float = 0.1) -> None:
        self._console = console
        self.poll_interval: float | None = poll_interval
        # No auto-refresh thread: the scenario's polling task refreshes the view.
        self._live = Live(console=console, auto_refresh=False, vertical_overflow="visible")
        # Steps as their heading, events as they are: an event is laid out for
        # the terminal's width when drawn.
        self._log: collections.deque[Text | Event] = collections.deque(maxlen=_LOG_LINES)
        self._rows: tuple[RunRow, ...] = ()
        self._at = 0.0

    def begin(self) -> None:
        """Start the live display."""
        self._live.start()
        self._render()

    # step() and event() only log: drawing takes milliseconds, so it happens on
    # the polling task's ticks, never in the middle of the scripted story.

    def step(self, at: float, title: str) -> None:
        """Log the step heading (drawn on the next refresh)."""
        # Wrapped, not cut: the heading names what the step shows.
        heading = Text()
        heading.append(f"[{at:4.1f}s] ", style="dim")
        heading.append(title, style="bold")
        self._log.append(heading)

    def event(self, event: Event) -> None:
        """Log the event (drawn on the next refresh)."""
        self._log.append(event)

    def refresh(self, at: float, rows: Sequence[RunRow]) -> None:
        """Redraw the table from the polled statuses."""
        self._at = at
        self._rows = tuple(rows)
        self._render()

    def end(self, summary: Summary | None) -> None:
        """Stop the live display, leaving its last frame, then print the summary."""
        if summary is not None:
            self._rows = summary.runs
            self._at = summary.at
            self._render()
        self._live.stop()
        if summary is not None:
            self._print_summary(summary)

    def _render(self) -> None:
        width = self._console.width
        table = render_table(self._rows, self._at, width)
        view: RenderableType = Group(table, *log_lines(self._log, self._console))
        self._live.update(view, refresh=True)

    def _print_summary(self, summary: Summary) -> None:
        counts = Text("runs by status: ", style="bold")
        for index, (status, n) in enumerate(summary.counts().items()):
            if index:
                counts.append(", ")
            counts.append(f"{n} {status.value}", style=STATUS_STYLES[status.value])
        self._console.print(counts)
        if summary.usage is not None:
            self._console.print(Text(f"usage: {summary.usage_line()}", style="bold"))
        if summary.resolved:
            self._console.print(Text(f"fail-closed check passed: {summary.headline}", "bold green"))
        else:
            self._console.print(Text(f"fail-closed check FAILED: {summary.headline}", "bold red"))
