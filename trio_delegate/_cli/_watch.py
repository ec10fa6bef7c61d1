"""``trio-delegate runs watch``: a live table of a store's runs, never writing to it.

The store is opened as ``runs list`` opens it (read-only). The watch lists
the newest runs once, then follows the store's change feed (``changes``:
only what changed since the last look, so a poll is one small query) every
``--interval`` seconds. On a terminal the table redraws in place; otherwise
it is printed once, followed by one line per change (or, with ``--json``,
one JSON object per line), so the output can be piped or logged.

Every stored string is shown literally (see ``_runs.literal``).
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Final

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from .._errors import StoreError
from .._status import RunStatus
from ._live import live_cells, live_of
from ._runs import (
    CELL_CHARS,
    RUN_COLUMNS,
    STATUS_STYLE,
    damaged_json,
    fail,
    json_text,
    literal,
    reader_for,
    record_json,
    runs_table,
)
from ._spend import spend_cell

if TYPE_CHECKING:
    from .._stores._base import DamagedRow
    from .._stores._protocol import RunRecord
    from ._runs import Reader

__all__ = ["RunsView", "run_watch", "watch"]

#: The width of the output when it is not a terminal.
_PIPED_WIDTH: Final = 160

#: The longest error text shown under a run's task.
_MAX_ERROR_CHARS: Final = 200

#: Damaged rows a watch reports (each once): a store of nothing but damaged
#: rows is not reported row by row for ever.
_MAX_DAMAGED: Final = 1_000


def _seconds(start: str | None, end: str | None) -> float | None:
    """Seconds between two stored wall-clock times (``None`` if either is missing or bad)."""
    if not start:
        return None
    try:
        begun = datetime.datetime.fromisoformat(start)
        ended = datetime.datetime.fromisoformat(end) if end else datetime.datetime.now(datetime.UTC)
        return max(0.0, (ended - begun).total_seconds())
    except (ValueError, TypeError, OverflowError):
        return None  # tampered text: shown as unknown, never a crash


def _took(record: RunRecord) -> str:
    seconds = _seconds(record.started_at or record.admitted_at, record.ended_at)
    if seconds is None:
        return ""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest:02d} s"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def _detail(record: RunRecord) -> Text:
    text = literal(record.task_summary)
    for line in live_cells(live_of(record)):
        shown = literal(line, _MAX_ERROR_CHARS)
        shown.stylize("blue")
        text.append("\n")
        text.append_text(shown)
    if record.status.is_terminal and record.status is not RunStatus.COMPLETED:
        error = ": ".join(part for part in (record.error_type, record.error_message) if part)
        if len(error) > _MAX_ERROR_CHARS:
            error = error[: _MAX_ERROR_CHARS - 1] + "…"
        if error:
            shown = literal(error)
            shown.stylize("red")
            text.append("\n")
            text.append_text(shown)
    return text


def _status(record: RunRecord) -> Text:
    text = Text(record.status.value, style=STATUS_STYLE[record.status])
    if record.cancel_requested and not record.status.is_terminal:
        text.append(" (cancel requested)", style="dim")
    elif record.observed:
        text.append(" ✓", style="dim")
    return text


class RunsView:
    """The runs a watch shows: the newest that match, kept current from the change feed.

    Args:
        limit: at most this many runs are shown.
        status: only runs in this status (``None``: any).
        owner: only runs of this owner (``None``: any).
    """

    __slots__ = ("_runs", "limit", "owner", "status")

    def __init__(
        self, *, limit: int, status: RunStatus | None = None, owner: str | None = None
    ) -> None:
        self.limit = limit
        self.status = status
        self.owner = owner
        self._runs: dict[str, RunRecord] = {}

    def matches(self, record: RunRecord) -> bool:
        """Whether *record* passes the filters."""
        return (self.status is None or record.status is self.status) and (
            self.owner is None or record.owner == self.owner
        )

    def load(self, records: Iterable[RunRecord]) -> None:
        """Show *records* (a listing, newest first) instead of what was shown."""
        self._runs = {}
        self.apply(records)

    def apply(self, records: Iterable[RunRecord]) -> tuple[list[RunRecord], bool]:
        """Take the changed *records* in.

        Returns:
            the changed records that match the filters (in the feed's order),
            and whether a shown run stopped matching (the view has room for
            an older one: list again).
        """
        changed: list[RunRecord] = []
        dropped = False
        for record in records:
            if self._runs.get(record.run_id) == record:
                continue  # seen already (the listing and the feed overlap)
            if self.matches(record):
                self._runs[record.run_id] = record
                changed.append(record)
            elif self._runs.pop(record.run_id, None) is not None:
                changed.append(record)
                dropped = True
        if len(self._runs) > self.limit:
            newest = self.rows()
            self._runs = {record.run_id: record for record in newest}
        return changed, dropped

    def rows(self) -> list[RunRecord]:
        """The runs shown, newest admission first, at most ``limit``."""
        ordered = sorted(self._runs.values(), key=lambda r: (r.admitted_at, r.run_id), reverse=True)
        return ordered[: self.limit]

    def table(self, title: str) -> Table:
        """The runs as a table (every stored string literal)."""
        rows = self.rows()
        counts = dict.fromkeys(RunStatus, 0)
        for record in rows:
            counts[record.status] += 1
        summary = ", ".join(f"{n} {status.value}" for status, n in counts.items() if n)
        return runs_table(
            title,
            rows,
            (
                *RUN_COLUMNS,
                ("status", _status),
                ("took", _took),
                ("spent", lambda record: spend_cell(record.usage)),
                ("task", _detail),
            ),
            caption=f"{len(rows)} shown: {summary}" if rows else "no runs match yet",
        )


def _line(record: RunRecord) -> Text:
    """One change, on one line: when, which run, its status and task."""
    clock = datetime.datetime.now(datetime.UTC).strftime("%H:%M:%S")
    text = Text(f"{clock} ")
    text.append_text(literal(record.run_id))
    for part in (record.owner, record.subagent):
        text.append(" ")
        text.append_text(literal(part))
    text.append(" ")
    text.append_text(_status(record))
    text.append(" ")
    text.append_text(literal(record.task_summary.replace("\n", " ")))
    if record.error_type:
        text.append(" ")
        text.append_text(literal(f"[{record.error_type}]"))
    for line in live_cells(live_of(record)):
        text.append(" | ")
        text.append_text(literal(line.replace("\n", " "), _MAX_ERROR_CHARS))
    if record.usage is not None:
        text.append(" ")
        text.append(spend_cell(record.usage).replace("\n", " "), style="dim")
    return text


def watch(
    reader: Reader,
    name: str,
    console: Console,
    view: RunsView,
    *,
    interval: float,
    duration: float | None = None,
    as_json: bool = False,
) -> None:
    """Show the runs of *reader*'s store and follow its changes.

    Args:
        reader: an open read-only reader (not closed here).
        name: how to name the store in the title.
        console: where to draw; a terminal gets a live table, anything else
            the table once and then one line per change.
        view: the runs shown and the filters.
        interval: seconds between two looks at the store.
        duration: stop after this many seconds (``None``: until interrupted).
        as_json: print JSON lines (the listing, then each change) instead.

    Raises:
        StoreError: the store cannot be read (or was tampered with).
    """
    title = f"runs in {name}"
    stop = None if duration is None else time.monotonic() + duration
    # A damaged row is reported once, on its own; the other runs go on.
    reader.tolerant = True
    reported: set[tuple[str | None, str]] = set()

    def damaged() -> list[DamagedRow]:
        rows, reader.damaged[:] = list(reader.damaged), []
        fresh = []
        for row in rows:
            key = (row.run_id, str(row.error))
            if key not in reported and len(reported) < _MAX_DAMAGED:
                reported.add(key)
                fresh.append(row)
        return fresh

    # The position first: a change committed while the listing is read is
    # then seen twice, never missed.
    cursor = reader.changes(None).cursor
    view.load(reader.list_runs(status=view.status, owner=view.owner, limit=view.limit))

    def wait() -> bool:
        remaining = interval if stop is None else min(interval, stop - time.monotonic())
        if remaining <= 0:
            return False
        time.sleep(remaining)
        return True

    def follow() -> list[RunRecord]:
        nonlocal cursor
        batch = reader.changes(cursor)
        cursor = batch.cursor
        changed, dropped = view.apply(batch.records)
        if dropped:
            listed = reader.list_runs(status=view.status, owner=view.owner, limit=view.limit)
            view.apply(listed)
        return changed

    if console.is_terminal and not as_json:
        shown: list[DamagedRow] = damaged()

        def drawn() -> Group | Table:
            if not shown:
                return view.table(title)
            return Group(view.table(title), *(_damaged_line(row) for row in shown[-5:]))

        with Live(drawn(), console=console, auto_refresh=False) as live:
            while wait():
                follow()
                shown.extend(damaged())
                # Redrawn on every look: the running runs' times move on.
                live.update(drawn(), refresh=True)
        return
    out = console.file

    def emit(records: Iterable[RunRecord]) -> None:
        for record in records:
            if as_json:
                out.write(json_text(record_json(record, CELL_CHARS), indent=None) + "\n")
            else:
                console.print(_line(record), soft_wrap=True)
        for row in damaged():
            if as_json:
                out.write(json_text(damaged_json(row), indent=None) + "\n")
            else:
                console.print(_damaged_line(row), soft_wrap=True)
        out.flush()  # a pipe's reader sees each change as it happens

    if as_json:
        emit(reversed(view.rows()))  # oldest first, as changes come
    else:
        console.print(Group(view.table(title), Text("watching for changes (Ctrl-C to stop)")))
        emit(())
    while wait():
        emit(follow())


def _damaged_line(row: DamagedRow) -> Text:
    """A damaged row, on one line: which run (if that much is readable) and why."""
    text = Text("damaged row ", style="bold red")
    text.append_text(literal(row.run_id or "(no readable run id)"))
    text.append(": ")
    text.append_text(literal(str(row.error).replace("\n", " ")))
    return text


def run_watch(args: argparse.Namespace) -> int:
    """``trio-delegate runs watch``: the handler of the parsed arguments; the exit code."""
    opened = reader_for(args, sys.stderr)
    if opened is None:
        return 1
    reader, name = opened
    view = RunsView(
        limit=args.limit,
        status=RunStatus(args.status) if args.status else None,
        owner=args.owner,
    )
    console = Console(file=sys.stdout)
    if not console.is_terminal:
        # Piped or logged: as wide as runs list, so lines do not wrap.
        console = Console(file=sys.stdout, width=_PIPED_WIDTH)
    try:
        watch(
            reader,
            name,
            console,
            view,
            interval=args.interval,
            duration=args.duration,
            as_json=args.json,
        )
    except StoreError as exc:
        fail(exc, sys.stderr)
        return 1
    finally:
        reader.close()
    return 0
