"""``trio-delegate runs list|show|watch|usage|answer``: the runs recorded in a store.

Every action but ``answer`` reads and never writes (``answer``, in its own
module, leaves an answer in the store). The store is an SQLite file
(``--db PATH``), opened read-only: no migration, no lock, no journal switch,
so it works on a file and a folder this user cannot write and while
another process holds the write lock. Or it is a PostgreSQL database
(``--db postgresql://…``) read in a read-only session; the password comes
from the environment (``PGPASSWORD``, a password file or a service file)
and is never printed.

Every stored string comes from models and runners and is shown literally:
rich markup is never interpreted, and control characters, escape sequences,
direction overrides and lone surrogates are shown as escapes.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol, TextIO

import attrs

from .._checks import describe, terminal_safe, terminal_safe_strings
from .._errors import DelegationError, StoreError
from .._server_config import ConfigError, store_in_config
from .._status import RunStatus
from .._stores._base import DamagedRow
from .._stores._postgres import PostgresReader, is_postgres_dsn, mask_dsn
from .._stores._protocol import ChangeBatch, RunRecord
from .._stores._sqlite import SQLiteReader
from ._live import live_json, live_of, live_rows
from ._run_view import duration, lifecycle_rows, seconds_text, short_id
from ._spend import Spend, nested_owner, spend_cell, spend_rows

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.table import Table
    from rich.text import Text

# rich is imported where a table is drawn, not with the module: every command
# line (``serve`` too) builds this module's parser, and rich is a twentieth of
# a server's start-up.

__all__ = [
    "DEFAULT_DB",
    "RUN_COLUMNS",
    "STATUS_STYLE",
    "Column",
    "Reader",
    "add_runs_parser",
    "common_arguments",
    "fail",
    "json_text",
    "literal",
    "open_reader",
    "plain",
    "runs_table",
]

#: The longest pause between two looks at a store in ``runs watch``.
_MAX_INTERVAL: Final = 60.0

#: Where ``trio-delegate demo`` records its runs, and where ``runs`` looks by default.
DEFAULT_DB = Path(".trio-delegate") / "runs.db"
#: Most runs one listing shows: more would not fit a terminal, nor a store's
#: integer types.
MAX_LIMIT = 1_000_000

STATUS_STYLE = {
    RunStatus.PENDING: "yellow",
    RunStatus.RUNNING: "cyan",
    RunStatus.INPUT_REQUIRED: "bold blue",
    RunStatus.COMPLETED: "green",
    RunStatus.FAILED: "red",
    RunStatus.CANCELLED: "magenta",
    RunStatus.TIMED_OUT: "red",
}

#: Ids ``runs show`` names when the start of an id given is the start of several.
SHOWN_CANDIDATES: Final = 5


#: Characters of one stored string a table cell (and a field of ``runs list
#: --json`` or ``runs watch --json``) shows: whatever a store holds (a
#: tampered row's 20 MB task), a view's output and work stay small.
CELL_CHARS: Final = 1_000
#: Characters of one field ``runs show`` shows (``--json`` too); ``--field``
#: prints one field whole.
FIELD_CHARS: Final = 4_000


#: Lines of one stored string a view shows (``"x\n" * 300000`` is short
#: in characters and long on a screen).
MAX_LINES: Final = 100


def cut(text: str, limit: int, hint: str = "") -> str:
    """*text*, or its first *limit* characters (and :data:`MAX_LINES` lines)
    and how many more characters there are."""
    head = text[:limit]
    if head.count("\n") > MAX_LINES:
        end = -1
        for _ in range(MAX_LINES):
            end = head.index("\n", end + 1)
        head = head[:end]
    if len(head) == len(text):
        return text
    return f"{head}… ({len(text) - len(head):,} more characters{hint})"


def literal(text: str, limit: int = CELL_CHARS, hint: str = "") -> Text:
    """*text* as it is: never read as markup, with what a terminal would act on escaped.

    Cut to *limit* characters first (saying how many more there are, and
    *hint*), so that the escaping and the drawing never go through more.
    """
    from rich.text import Text

    return Text(terminal_safe(cut(text, limit, hint)))


#: A column of a table of runs: its heading, and its cell for a record.
Column = tuple[str, Callable[[RunRecord], "RenderableType"]]

#: The columns every table of runs starts with.
RUN_COLUMNS: Final[tuple[Column, ...]] = (
    ("run", lambda record: literal(record.run_id)),
    ("owner", lambda record: literal(record.owner)),
    ("subagent", lambda record: literal(record.subagent)),
)


def runs_table(
    title: str, records: Iterable[RunRecord], columns: Sequence[Column], caption: str | None = None
) -> Table:
    """A table of *records*, one row each, with *columns*; the title shown literally."""
    from rich.table import Table

    table = Table(title=literal(title), caption=caption, show_lines=False)
    for heading, _ in columns:
        # A run id whole on one line (a person copies it into ``runs show``):
        # the other columns fold first.
        table.add_column(heading, overflow="fold", no_wrap=heading == "run")
    for record in records:
        table.add_row(*(cell(record) for _, cell in columns))
    return table


def bounded(fields: dict[str, Any], limit: int, command: str = "") -> dict[str, Any]:
    """*fields* (of :func:`plain`) with each long value cut, as the tables cut it.

    A string longer than *limit* characters (or :data:`MAX_LINES` lines) is
    cut, saying how many more characters there are and that *command*
    ``--field NAME`` prints all of it; a list or object whose compact JSON
    is longer becomes the start of that JSON, as a string. The names of the
    cut fields are listed under ``"truncated"``.
    """
    cut_fields = []
    for key, value in fields.items():
        if isinstance(value, str):
            text = value
        elif isinstance(value, list | dict) and value:
            # The C encoder: linear and fast, whatever the value holds.
            text = json.dumps(value, ensure_ascii=False)
        else:
            continue
        shown = cut(text, limit, f"; {command}--field {key} prints all of it")
        if shown is not text:
            fields[key] = shown
            cut_fields.append(key)
    if cut_fields:
        fields["truncated"] = cut_fields
    return fields


def json_text(value: Any, *, indent: int | None = 2) -> str:
    """JSON for people and programs: non-ASCII kept, what a terminal would act on escaped."""
    return terminal_safe_strings(json.dumps(value, indent=indent, ensure_ascii=False))


def add_runs_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``runs list``, ``show``, ``watch``, ``usage`` and ``answer``."""
    runs = commands.add_parser(
        "runs",
        help="list, show, watch or answer the runs recorded in a store",
        description=(
            "Read the runs recorded in a store (read only; 'answer' alone writes, an answer to "
            "a run's open question): an SQLite file, or a PostgreSQL "
            "database given as a postgresql:// URI (password from PGPASSWORD, a password file "
            "or a service file)."
        ),
    )
    actions = runs.add_subparsers(title="actions", dest="action", metavar="ACTION")
    actions.required = True

    listing = actions.add_parser(
        "list",
        help="a table of runs, newest first",
        description=(
            "List the newest runs: id, owner, subagent, status, task, how long it ran (so far, "
            "while it runs), the run it replaces (a replacement of a failed or cancelled run), "
            "when it was admitted, and the tokens and cost it recorded (with its nested runs') "
            "when it ended. A row that holds no valid record is listed as damaged "
            "(and said on stderr), the other runs as usual. "
            f"Each field is cut to {CELL_CHARS:,} characters (with --json too: the cut fields "
            "are named under \"truncated\"); 'runs show RUN_ID --field NAME' prints one "
            "field whole."
        ),
    )
    common_arguments(listing)
    _filters(listing, default_limit=50)
    listing.set_defaults(handler=_list)

    show = actions.add_parser(
        "show",
        help="everything recorded about one run",
        description=(
            "Show one run, given by its id or the start of it: how it ended and why, whether "
            "its result was handed out, its times in the order they happened (admitted, "
            "started, deadline, ended) with how long it queued and ran, what it replaces or "
            "continues, its result, and what it spent: tokens by kind and cost, with its "
            "nested runs' and on its own; while it runs, whether it waits for an answer and "
            "its latest progress, where the store keeps them. --json prints the record as "
            "the store holds it, with own_usage and those. "
            f"Each field is cut to {FIELD_CHARS:,} characters (with --json too: the cut "
            'fields are named under "truncated"); --field NAME prints that field whole.'
        ),
    )
    show.add_argument("run_id", metavar="RUN_ID", help="a run id, or the start of one")
    common_arguments(show)
    show.add_argument(
        "--field",
        choices=[field.name for field in attrs.fields(RunRecord)],
        metavar="NAME",
        help="print only this field of the run, whole (as JSON with --json): "
        "task, final_result, history, transcript, error_message, ...",
    )
    show.set_defaults(handler=_show)

    watch = actions.add_parser(
        "watch",
        help="a live table of the newest runs, updated as they change (read only)",
        description=(
            "Show the newest runs and follow the store's changes until interrupted (Ctrl-C). "
            "On a terminal the table is redrawn in place; otherwise it is printed once, "
            "followed by one line per change (with --json, one JSON object per line). "
            f"Each field is cut to {CELL_CHARS:,} characters (with --json too: the cut fields "
            'are named under "truncated"), and a row that holds no valid record is said '
            "once, as damaged; 'runs show RUN_ID --field NAME' prints one field whole."
        ),
    )
    common_arguments(watch)
    _filters(watch, default_limit=30)
    watch.add_argument(
        "--interval",
        type=_interval,
        default=0.5,
        metavar="SECONDS",
        help="how often to look for changes (default 0.5; at most 60)",
    )
    watch.add_argument(
        "--duration",
        type=_interval_or_longer,
        metavar="SECONDS",
        help="stop after SECONDS (default: until interrupted)",
    )
    watch.set_defaults(handler=_watch)
    from ._answer import add_answer_parser  # the one action that writes: its own module
    from ._usage_cmd import add_usage_parser

    add_usage_parser(actions)
    add_answer_parser(actions)


def common_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments every ``runs`` action takes: where the store is, and ``--json``."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--db",
        default=None,
        metavar="PATH|URI",
        help=f"the SQLite file, or a postgresql:// URI (default: {DEFAULT_DB})",
    )
    where.add_argument(
        "--config",
        metavar="FILE",
        help="the store named by a serve configuration's [runtime] store (a file there is "
        "relative to the configuration, as serve reads it)",
    )
    parser.add_argument(
        "--schema",
        default="trio_delegate",
        help="with a postgresql:// URI: the store's schema (default: trio_delegate)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print JSON instead of a table (long fields cut)"
    )


def _filters(parser: argparse.ArgumentParser, *, default_limit: int) -> None:
    parser.add_argument(
        "--status", choices=[status.value for status in RunStatus], help="only runs in STATUS"
    )
    parser.add_argument("--owner", help="only runs of this parent owner")
    parser.add_argument(
        "--limit",
        type=_positive,
        default=default_limit,
        help=f"at most this many runs (default {default_limit})",
    )


def _seconds(text: str, *, most: float | None) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not (math.isfinite(value) and value > 0 and (most is None or value <= most)):
        allowed = "> 0" + (f" and at most {most:g}" if most is not None else "")
        raise argparse.ArgumentTypeError(f"must be a number of seconds {allowed}, got {text!r}")
    return value


def _interval(text: str) -> float:
    return _seconds(text, most=_MAX_INTERVAL)


def _interval_or_longer(text: str) -> float:
    return _seconds(text, most=None)


def _watch(args: argparse.Namespace) -> int:
    # Imported here: only watch needs rich's live display.
    from ._watch import run_watch

    return run_watch(args)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {describe(text)}") from None
    if not 1 <= value <= MAX_LIMIT:
        raise argparse.ArgumentTypeError(
            f"must be from 1 to {MAX_LIMIT:,}, got {describe(value)}; narrow the listing "
            "with --status or --owner instead"
        )
    return value


class Reader(Protocol):
    """A read-only reader of a store (``SQLiteReader``, ``PostgresReader``)."""

    tolerant: bool
    damaged: list[DamagedRow]

    def get(self, run_id: str) -> RunRecord | None: ...

    def list_runs(
        self, *, status: RunStatus | None = None, owner: str | None = None, limit: int = 100
    ) -> list[RunRecord]: ...

    def run_ids_starting(self, start: str, limit: int) -> list[str]: ...

    def changes(self, cursor: int | None) -> ChangeBatch: ...

    def usage_rows(self, after: int, owner: str | None, limit: int) -> list[tuple[Any, ...]]: ...

    def usage_row(self, run_id: str) -> tuple[Any, ...] | None: ...

    def close(self) -> None: ...


def store_location(args: argparse.Namespace, err: TextIO) -> str | None:
    """The store the command reads: ``--db``, a configuration's store, or the default."""
    if getattr(args, "config", None):
        try:
            store = store_in_config(args.config)
        except ConfigError as exc:
            print(f"trio-delegate: {_shown(str(exc))}", file=err)
            return None
        if store is None:
            print(
                f"trio-delegate: {_shown(args.config)} has no [runtime] store: its runs are "
                "kept in memory only, and nothing can be read after the server ends",
                file=err,
            )
            return None
        return str(store)
    return args.db if args.db is not None else str(DEFAULT_DB)


def reader_for(args: argparse.Namespace, err: TextIO) -> tuple[Reader, str] | None:
    """The reader of the store the command's arguments name, or ``None`` (said on *err*)."""
    db = store_location(args, err)
    return None if db is None else open_reader(db, args.schema, err)


def open_reader(db: str, schema: str, err: TextIO) -> tuple[Reader, str] | None:
    """The reader for *db* and how to name it, or ``None`` (reported on *err*)."""
    if is_postgres_dsn(db):
        try:
            return PostgresReader(db, schema=schema), mask_dsn(db)
        except DelegationError as exc:
            fail(exc, err)
            return None
    path = Path(db)
    # Reading must not create an empty store where the user mistyped a path.
    if not path.is_file():
        print(
            f"trio-delegate: no store at {_shown(db)}; run 'trio-delegate demo' or a runtime "
            "with SQLiteStore first, or pass --db PATH",
            file=err,
        )
        return None
    return SQLiteReader(path), db


def _shown(text: str) -> str:
    return terminal_safe(text)


def fail(exc: DelegationError, err: TextIO) -> None:
    """Report *exc* on *err*, every character shown literally."""
    print(f"trio-delegate: {_shown(str(exc))}", file=err)


def _list(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.text import Text

    out, err = sys.stdout, sys.stderr
    opened = reader_for(args, err)
    if opened is None:
        return 1
    reader, name = opened
    # A damaged row is reported on its own; the other runs are still listed.
    reader.tolerant = True
    status = RunStatus(args.status) if args.status else None
    try:
        records = reader.list_runs(status=status, owner=args.owner, limit=args.limit)
    except StoreError as exc:
        fail(exc, err)
        return 1
    finally:
        reader.close()
    damaged = reader.damaged
    if args.json:
        listed = [record_json(record, CELL_CHARS) for record in records]
        listed += [damaged_json(row) for row in damaged]
        out.write(json_text(listed) + "\n")
    elif records or damaged:
        table = runs_table(
            f"runs in {name}",
            records,
            (
                *RUN_COLUMNS,
                ("status", lambda r: Text(r.status.value, style=STATUS_STYLE[r.status])),
                ("task", lambda record: literal(record.task_summary)),
                ("ran for", lambda record: seconds_text(duration(record))),
                ("replaces", lambda record: literal(short_id(record.replaces or ""))),
                ("admitted (UTC)", lambda r: literal(r.admitted_at[:19].replace("T", " "))),
                ("spent", lambda record: spend_cell(record.usage)),
            ),
        )
        for row in damaged:
            cells = [""] * (len(table.columns) - 4)
            table.add_row(
                literal(row.run_id or "?"), "", "", Text("damaged", style="bold red"), *cells
            )
        Console(file=out, width=160).print(table)
    else:
        Console(file=out, width=160).print("no runs match")
    for row in damaged:
        report_damaged(row, err)
    # The listing is whole but for the damaged rows, which it shows as such.
    return 0


def record_json(record: RunRecord, limit: int) -> dict[str, Any]:
    """*record* as ``runs`` prints it in JSON: its long fields cut to *limit* characters,
    and what it is doing while it is live (:func:`._live.live_json`)."""
    fields = plain(record)
    fields.update(live_json(live_of(record)))
    return bounded(fields, limit, f"runs show {record.run_id} ")


def report_damaged(row: DamagedRow, err: TextIO) -> None:
    """Say on *err* which row is damaged and why (briefly: the error may quote the row)."""
    which = f"the run {row.run_id}" if row.run_id else "a row"
    print(
        f"trio-delegate: {which} is damaged: {_shown(cut(str(row.error), CELL_CHARS))}",
        file=err,
    )


def damaged_json(row: DamagedRow) -> dict[str, Any]:
    """A damaged row as ``runs`` prints it in JSON."""
    return {"run_id": row.run_id, "damaged": True, "error": cut(str(row.error), CELL_CHARS)}


def _show(args: argparse.Namespace) -> int:
    out, err = sys.stdout, sys.stderr
    opened = reader_for(args, err)
    if opened is None:
        return 1
    reader, name = opened
    # A damaged record is shown as damaged, not as a failure of the store.
    reader.tolerant = True
    try:
        # Ids only: a start of an id (the demo shows ids cut short) is looked
        # up without reading any record, then the one run is read.
        candidates = reader.run_ids_starting(args.run_id, SHOWN_CANDIDATES + 1)
        record = reader.get(candidates[0]) if len(candidates) == 1 else None
        own = _own_usage(reader, record) if record is not None else None
    except StoreError as exc:
        fail(exc, err)
        return 1
    finally:
        reader.close()
    if record is None:
        asked = _shown(describe(args.run_id))
        if reader.damaged:
            row = reader.damaged[0]
            if args.json:
                out.write(json_text(damaged_json(row)) + "\n")
            report_damaged(row, err)
        elif candidates:
            shown = ", ".join(candidates[:SHOWN_CANDIDATES])
            many = len(candidates) > SHOWN_CANDIDATES
            count = f"more than {SHOWN_CANDIDATES}" if many else str(len(candidates))
            print(
                f"trio-delegate: {asked} is the start of {count} run ids in "
                f"{_shown(name)} ({shown}{', and more' if many else ''}); give more of the id",
                file=err,
            )
        else:
            print(
                f"trio-delegate: no run id in {_shown(name)} is or starts with {asked}; "
                "trio-delegate runs list shows the runs",
                file=err,
            )
        return 1
    fields = plain(record)
    # One way to print a time: the deadline (Unix time in the record) in ISO
    # 8601 UTC, as the admission, start and end times are.
    if isinstance(fields.get("deadline_at"), float):
        fields["deadline_at"] = iso_time(fields["deadline_at"])
    if args.field is not None:
        _print_field(fields[args.field], as_json=args.json, out=out)
    elif args.json:
        fields.update(_shown_extra(record, own))
        out.write(json_text(bounded(fields, FIELD_CHARS)) + "\n")
    else:
        _show_table(record, own, out)
    return 0


def _own_usage(reader: Reader, record: RunRecord) -> tuple[Spend, int] | None:
    """What *record*'s run spent itself, and how many nested runs with usage it had:
    its usage less theirs (their owner is its nested parent). ``None`` when it
    recorded no usage.

    Raises:
        StoreError: the store cannot be read.
    """
    if record.usage is None:
        return None
    from ._usage_scan import UsageSource

    own = Spend.of(record.usage)
    nested = 0
    owner = nested_owner(record.owner, record.run_id)
    for row in UsageSource(reader).rows(owner=owner):
        if row.owner == owner and row.usage is not None:
            own.add(row.usage, -1)
            nested += 1
    return own, nested


def _shown_extra(record: RunRecord, own: tuple[Spend, int] | None) -> dict[str, Any]:
    """What ``runs show --json`` adds to the record: the run's own usage (when it had
    nested runs) and what it is doing while it is live."""
    extra = live_json(live_of(record))
    if own is not None:
        spend, nested = own
        extra["own_usage"] = spend.fields()
        extra["nested_runs_with_usage"] = nested
    return extra


def _print_field(value: Any, *, as_json: bool, out: TextIO) -> None:
    """One field whole: as JSON with *as_json*, else text as it is (other values as JSON)."""
    if as_json or not isinstance(value, str):
        out.write(json_text(value) + "\n")
    else:
        out.write(_shown(value) + "\n")


def _show_table(record: RunRecord, own: tuple[Spend, int] | None, out: TextIO) -> None:
    """A run as a person reads it (see :mod:`._run_view`, :mod:`._spend`,
    :mod:`._live`), each value cut."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=literal(f"run {record.run_id}"), show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    spent = spend_rows(record.usage, *(own if own is not None else (None, 0)))
    for label, value in [*lifecycle_rows(record), *spent, *live_rows(live_of(record))]:
        hint = f"; --field {label} prints all of it" if label in _RECORD_FIELDS else ""
        table.add_row(label, literal(_field_text(value), FIELD_CHARS, hint))
    Console(file=out, width=160).print(table)


#: The record's own fields, which ``--field`` prints whole.
_RECORD_FIELDS: Final = frozenset(field.name for field in attrs.fields(RunRecord))


def _field_text(value: Any) -> str:
    """*value* as ``runs show`` shows it: text as it is, JSON indented while short.

    A large value is shown as compact JSON (the C encoder: linear, fast),
    which :func:`literal` then cuts: indenting it would cost the pure-Python
    encoder and print a line per value.
    """
    if isinstance(value, str):
        return value
    compact = json.dumps(value, ensure_ascii=False)
    if len(compact) > FIELD_CHARS:
        return compact
    return json_text(value)


def iso_time(unix_time: float) -> str:
    """*unix_time* as ``wall_clock_now`` writes a time: ISO 8601, UTC, milliseconds."""
    try:
        moment = datetime.datetime.fromtimestamp(unix_time, datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return repr(unix_time)  # a stored value no calendar holds: shown as it is
    return moment.isoformat(timespec="milliseconds")


def plain(record: RunRecord) -> dict[str, Any]:
    """*record* as JSON-ready fields (its values are JSON already: not copied)."""
    data: dict[str, Any] = {}
    for field in attrs.fields(RunRecord):
        value = getattr(record, field.name)
        if isinstance(value, RunStatus):
            value = value.value
        elif attrs.has(type(value)):
            # An attrs value (a Usage, a Progress), not JSON: its fields are.
            value = attrs.asdict(value)
        elif isinstance(value, tuple):
            value = [attrs.asdict(item) if attrs.has(type(item)) else item for item in value]
        data[field.name] = value
    return data
