"""The usage every run of a store recorded, read a page at a time (``runs usage``, ``runs show``).

A listing (``Reader.list_runs``) reads whole records: results, transcripts,
histories. A summary of what a store's runs spent needs five columns and
the usage out of each state document, so it reads those alone, a page of
rows at a time by the table's insertion order: however many runs a store
holds, and however large their records, the memory it takes is a page's.
The connection is the reader's own (read-only); nothing is written.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final

import attrs

from .._errors import InvalidArgumentsError
from .._stores._base import guarded
from .._stores._postgres import PostgresReader
from .._stores._sqlite import SQLiteReader
from .._usage import Usage

if TYPE_CHECKING:
    from ._runs import Reader

__all__ = ["PAGE_ROWS", "ParentFacts", "UsageRow", "Parents", "usage_rows"]

#: Rows read at a time.
PAGE_ROWS: Final = 500
#: The longest usage document read: a usage this package writes is under 300
#: characters; anything longer is damaged, and not decoded.
_MAX_USAGE_CHARS: Final = 2_000
#: Parent runs remembered (their subagent and day), most recently used kept:
#: the nested runs of one parent are read together.
_PARENTS_KEPT: Final = 4_096


@attrs.frozen
class UsageRow:
    """What a summary reads of one run.

    Attributes:
        run_id: its id (as stored, possibly no run id at all).
        owner: the owner of the parent that started it.
        subagent: its subagent's name.
        status: its status as stored.
        admitted_at: when it was admitted (ISO 8601, as stored).
        usage: what it and its nested runs spent, or ``None``.
        damaged: why its usage cannot be read (its usage is then ``None``).
    """

    run_id: str
    owner: str
    subagent: str
    status: str
    admitted_at: str
    usage: Usage | None
    damaged: str | None = None


@attrs.frozen
class ParentFacts:
    """What a summary needs of the run a nested run's parent belongs to."""

    owner: str
    subagent: str
    admitted_at: str
    has_usage: bool


def _text(value: object) -> str:
    """A stored name as text: the bytes SQLite holds, whatever they are (a byte that
    is not UTF-8 becomes a lone surrogate, which every view escapes)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    return value if isinstance(value, str) else ""


#: The keys of a stored usage (the fields of :class:`Usage`).
_USAGE_KEYS: Final = frozenset(field.name for field in attrs.fields(Usage))


def _usage(value: object) -> tuple[Usage | None, str | None]:
    """The usage a state document held (SQLite gives an object as its JSON text).

    Read as strictly as ``Usage(...)`` checks a report: a count that is a
    float, a string or a bool, or a key no usage has, is damage, not a number.
    """
    if value is None:
        return None, None
    if not isinstance(value, str):
        return None, f"its usage is {type(value).__name__} {value!r:.50}, not an object"
    if len(value) > _MAX_USAGE_CHARS:
        return None, f"its usage is {len(value):,} characters long, not a usage this writes"
    try:
        data = json.loads(value)
    except ValueError:
        return None, f"its usage is not JSON: {value[:100]!r}"
    if not isinstance(data, dict):
        return None, f"its usage is {type(data).__name__} {value[:50]}, not an object"
    unknown = sorted(set(data) - _USAGE_KEYS)
    if unknown:
        return None, f"its usage has keys no usage has: {', '.join(map(repr, unknown))[:200]}"
    try:
        return Usage(**data), None
    except InvalidArgumentsError as exc:
        return None, f"its usage is not valid: {exc.message[:300]}"


class _Sqlite:
    """The queries of an SQLite store (its table ``runs``; ``state`` from version 2)."""

    def __init__(self, reader: SQLiteReader) -> None:
        self.reader = reader
        conn = reader._connection()
        columns = {row[1] for row in conn.execute("PRAGMA table_info(runs)")}
        # Rows of the first layout keep their whole record in ``record``.
        usage = "CASE WHEN json_valid(record) THEN json_extract(record, '$.usage') END"
        if "state" in columns:
            usage = (
                "CASE WHEN state IS NULL THEN "
                + usage
                + " WHEN json_valid(state) THEN json_extract(state, '$.usage') END"
            )
        self.columns = (
            "rowid, run_id, CAST(owner AS BLOB), CAST(subagent AS BLOB), status, admitted_at, "
            + usage
        )

    def page(self, after: int, owner: str | None) -> list[Any]:
        query = f"SELECT {self.columns} FROM runs WHERE rowid > ?"
        params: list[Any] = [after]
        if owner is not None:
            # The owner's runs and its nested parents' (``owner/run_…``): a
            # range of the owner index ('0' follows '/').
            query += " AND (owner = ? OR (owner >= ? AND owner < ?))"
            params += [owner, owner + "/", owner + "0"]
        query += " ORDER BY rowid LIMIT ?"
        return self.reader._connection().execute(query, [*params, PAGE_ROWS]).fetchall()

    def parent(self, run_id: str) -> Any:
        return (
            self.reader._connection()
            .execute(f"SELECT {self.columns} FROM runs WHERE run_id = ?", (run_id,))
            .fetchone()
        )


class _Postgres:
    """The queries of a PostgreSQL store (its usage read off the state's tail, as
    the store reads it)."""

    def __init__(self, reader: PostgresReader) -> None:
        self.reader = reader
        schema = reader._sql.schema
        self.table = f'"{schema}".runs'
        self.columns = (
            "pos, run_id, owner, subagent, status, admitted_at, "
            "substring(right(state, 400) from '\"usage\":(\\x7b[^\\x7b\\x7d]*\\x7d)\\x7d$')"
        )

    def page(self, after: int, owner: str | None) -> list[Any]:
        query = f"SELECT {self.columns} FROM {self.table} WHERE pos > %s"
        params: list[Any] = [after]
        if owner is not None:
            query += " AND (owner = %s OR starts_with(owner, %s))"
            params += [owner, owner + "/"]
        query += " ORDER BY pos LIMIT %s"
        rows: list[Any] = (
            self.reader._connection().execute(query.encode(), [*params, PAGE_ROWS]).fetchall()
        )
        return rows

    def parent(self, run_id: str) -> Any:
        query = f"SELECT {self.columns} FROM {self.table} WHERE run_id = %s"
        return self.reader._connection().execute(query.encode(), (run_id,)).fetchone()


def _queries(reader: Reader) -> _Sqlite | _Postgres:
    if isinstance(reader, SQLiteReader):
        return _Sqlite(reader)
    if isinstance(reader, PostgresReader):
        return _Postgres(reader)
    raise TypeError(f"no usage queries for {type(reader).__name__}")  # pragma: no cover


def _row(values: Any) -> UsageRow:
    _, run_id, owner, subagent, status, admitted_at, usage = values
    spent, damaged = _usage(usage)
    return UsageRow(
        _text(run_id),
        _text(owner),
        _text(subagent),
        _text(status),
        _text(admitted_at),
        spent,
        damaged,
    )


def usage_rows(reader: Reader, *, owner: str | None = None) -> Iterator[UsageRow]:
    """Every run of *reader*'s store (its runs and, with *owner*, those of *owner*
    and its nested parents), oldest first, a page at a time.

    Raises:
        StoreError: the store cannot be read.
    """
    if owner is not None and not _encodable(owner):
        return  # no stored owner is text that is not Unicode
    queries = guarded(_error_of(reader), _queries, reader)
    after = 0
    while True:
        page = guarded(_error_of(reader), queries.page, after, owner)
        for values in page:
            yield _row(values)
        if len(page) < PAGE_ROWS:
            return
        after = int(page[-1][0])


class Parents:
    """The facts about parent runs a summary looks up, the most recent kept.

    Args:
        reader: the store's reader.
    """

    def __init__(self, reader: Reader) -> None:
        self._reader = reader
        self._queries: _Sqlite | _Postgres | None = None
        self._kept: collections.OrderedDict[str, ParentFacts | None] = collections.OrderedDict()

    def get(self, run_id: str) -> ParentFacts | None:
        """What the store says of run *run_id*, or ``None`` when it holds no such run.

        Raises:
            StoreError: the store cannot be read.
        """
        kept = self._kept
        if run_id in kept:
            kept.move_to_end(run_id)
            return kept[run_id]
        error = _error_of(self._reader)
        if self._queries is None:
            self._queries = guarded(error, _queries, self._reader)
        values = guarded(error, self._queries.parent, run_id)
        facts = None
        if values is not None:
            row = _row(values)
            facts = ParentFacts(row.owner, row.subagent, row.admitted_at, row.usage is not None)
        kept[run_id] = facts
        if len(kept) > _PARENTS_KEPT:
            kept.popitem(last=False)
        return facts


def _error_of(reader: Reader) -> Any:
    return reader._error  # type: ignore[attr-defined]


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
