"""``trio-delegate runs list|show``: read the runs recorded in an SQLite store."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, TextIO

import trio
from rich.console import Console
from rich.table import Table

from .._converter import converter
from .._errors import StoreError
from .._status import RunStatus
from .._stores._protocol import RunRecord
from .._stores._sqlite import SQLiteStore

__all__ = ["DEFAULT_DB", "add_runs_parser"]

#: Where ``trio-delegate demo`` records its runs, and where ``runs`` looks by default.
DEFAULT_DB = Path(".trio-delegate") / "runs.db"

_STATUS_STYLE = {
    RunStatus.PENDING: "yellow",
    RunStatus.RUNNING: "cyan",
    RunStatus.COMPLETED: "green",
    RunStatus.FAILED: "red",
    RunStatus.CANCELLED: "magenta",
    RunStatus.TIMED_OUT: "red",
}


def add_runs_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``runs list`` and ``runs show``."""
    runs = commands.add_parser(
        "runs",
        help="list or show the runs recorded in a store",
        description="Read the runs recorded in an SQLite store (read only).",
    )
    actions = runs.add_subparsers(title="actions", dest="action", metavar="ACTION")
    actions.required = True

    listing = actions.add_parser("list", help="a table of runs, newest first")
    _common(listing)
    listing.add_argument(
        "--status", choices=[status.value for status in RunStatus], help="only runs in STATUS"
    )
    listing.add_argument("--owner", help="only runs of this parent owner")
    listing.add_argument(
        "--limit", type=_positive, default=50, help="at most this many runs (default 50)"
    )
    listing.set_defaults(handler=_list)

    show = actions.add_parser("show", help="everything recorded about one run")
    show.add_argument("run_id", metavar="RUN_ID")
    _common(show)
    show.set_defaults(handler=_show)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db",
        type=Path,
        default=DEFAULT_DB,
        metavar="PATH",
        help=f"the SQLite store (default: {DEFAULT_DB})",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _open(db: Path, err: TextIO) -> SQLiteStore | None:
    # Reading must not create an empty store where the user mistyped a path.
    if not db.is_file():
        print(
            f"trio-delegate: no store at {db}; run 'trio-delegate demo' or a runtime "
            "with SQLiteStore first, or pass --db PATH",
            file=err,
        )
        return None
    return SQLiteStore(db)


def _list(args: argparse.Namespace) -> int:
    out, err = sys.stdout, sys.stderr
    store = _open(args.db, err)
    if store is None:
        return 1
    status = RunStatus(args.status) if args.status else None
    try:
        records = trio.run(_read_list, store, status, args.owner, args.limit)
    except StoreError as exc:
        print(f"trio-delegate: {exc}", file=err)
        return 1
    if args.json:
        json.dump([_plain(record) for record in records], out, indent=2, ensure_ascii=False)
        out.write("\n")
        return 0
    table = Table(title=f"runs in {args.db}", show_lines=False)
    for column in ("run", "owner", "subagent", "status", "task", "admitted (UTC)"):
        table.add_column(column, overflow="fold")
    for record in records:
        table.add_row(
            record.run_id,
            record.owner,
            record.subagent,
            f"[{_STATUS_STYLE[record.status]}]{record.status.value}[/]",
            record.task_summary,
            record.admitted_at[:19].replace("T", " "),
        )
    console = Console(file=out, width=160)
    console.print(table if records else "no runs match")
    return 0


def _show(args: argparse.Namespace) -> int:
    out, err = sys.stdout, sys.stderr
    store = _open(args.db, err)
    if store is None:
        return 1
    try:
        record = trio.run(store.get, args.run_id)
    except StoreError as exc:
        print(f"trio-delegate: {exc}", file=err)
        return 1
    if record is None:
        print(f"trio-delegate: no run {args.run_id!r} in {args.db}", file=err)
        return 1
    plain = _plain(record)
    if args.json:
        json.dump(plain, out, indent=2, ensure_ascii=False)
        out.write("\n")
        return 0
    table = Table(title=f"run {record.run_id}", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    for key, value in plain.items():
        if value is None or value == [] or key == "run_id":
            continue
        text = value if isinstance(value, str) else json.dumps(value, indent=2)
        table.add_row(key, text)
    Console(file=out, width=160).print(table)
    return 0


async def _read_list(
    store: SQLiteStore, status: RunStatus | None, owner: str | None, limit: int
) -> list[RunRecord]:
    return await store.list_runs(status=status, owner=owner, limit=limit)


def _plain(record: RunRecord) -> dict[str, Any]:
    data: dict[str, Any] = converter.unstructure(record)
    return data
