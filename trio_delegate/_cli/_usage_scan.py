"""The usage every run of a store recorded, read a page at a time (``runs usage``, ``runs show``).

A listing (``Reader.list_runs``) reads whole records: results, transcripts,
histories. A summary of what a store's runs spent needs five columns and
the usage out of each state document, so it reads those alone, a page of
rows at a time by the table's insertion order: however many runs a store
holds, and however large their records, the memory it takes is a page's.
It opens a read-only connection of its own, as the store's reader opens
one (the file in ``mode=ro``, a read-only PostgreSQL session); nothing is
written.
"""

from __future__ import annotations

import collections
import json
import sqlite3
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import attrs

from .._errors import InvalidArgumentsError, StoreError
from .._stores._base import guarded
from .._stores._postgres import PostgresReader, mask_dsn
from .._stores._sqlite import SQLiteReader
from .._usage import Usage

if TYPE_CHECKING:
    from ._runs import Reader

__all__ = ["PAGE_ROWS", "ParentFacts", "UsageRow", "UsageSource"]

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


#: How long a read waits for a writer's lock (as the store's own readers do).
_BUSY_TIMEOUT_MS: Final = 5_000


class _Sqlite:
    """The queries of an SQLite store (its table ``runs``; ``state`` from version 2),
    on a connection of its own, opened read-only as ``SQLiteReader`` opens one."""

    def __init__(self, reader: SQLiteReader) -> None:
        self.path = reader.path
        try:
            conn = self._open(immutable=False)
        except sqlite3.OperationalError:
            # A WAL file whose -shm is gone in a folder this process cannot
            # write: with no writer active, the file cannot change under us.
            if Path(str(self.path) + "-wal").exists():
                raise
            conn = self._open(immutable=True)
        self.conn = conn
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

    def _open(self, *, immutable: bool) -> sqlite3.Connection:
        uri = f"file:{urllib.parse.quote(str(self.path))}?mode=ro"
        if immutable:
            uri += "&immutable=1"
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
        try:
            conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA query_only = ON")
        except BaseException:
            conn.close()
            raise
        return conn

    def error(self, exc: Exception) -> StoreError:
        return StoreError(f"cannot read the store {self.path}: {exc}", path=str(self.path))

    def page(self, after: int, owner: str | None) -> list[Any]:
        query = f"SELECT {self.columns} FROM runs WHERE rowid > ?"
        params: list[Any] = [after]
        if owner is not None:
            # The owner's runs and its nested parents' (``owner/run_…``): a
            # range of the owner index ('0' follows '/').
            query += " AND (owner = ? OR (owner >= ? AND owner < ?))"
            params += [owner, owner + "/", owner + "0"]
        query += " ORDER BY rowid LIMIT ?"
        return self.conn.execute(query, [*params, PAGE_ROWS]).fetchall()

    def parent(self, run_id: str) -> Any:
        query = f"SELECT {self.columns} FROM runs WHERE run_id = ?"
        return self.conn.execute(query, (run_id,)).fetchone()

    def close(self) -> None:
        self.conn.close()


class _Postgres:
    """The queries of a PostgreSQL store (its usage read off the state's tail, as
    the store reads it), on a read-only session of its own, as ``PostgresReader``'s."""

    def __init__(self, reader: PostgresReader, schema: str) -> None:
        import psycopg

        self.where = reader.where
        self.table = f'"{schema}".runs'  # a schema name the reader checked
        self.columns = (
            "pos, run_id, owner, subagent, status, admitted_at, "
            "substring(right(state, 400) from '\"usage\":(\\x7b[^\\x7b\\x7d]*\\x7d)\\x7d$')"
        )
        conninfo = psycopg.conninfo.make_conninfo(
            reader.dsn,
            connect_timeout=max(2, round(reader.timeout)),
            options="-c default_transaction_read_only=on",
            application_name="trio_delegate runs usage",
        )
        self.conn: Any = psycopg.connect(conninfo, autocommit=True)
        try:
            self.conn.execute(f"SET statement_timeout = {int(reader.timeout * 1000)}".encode())
        except BaseException:
            self.conn.close()
            raise

    def error(self, exc: Exception) -> StoreError:
        # The connection string is masked wherever psycopg quotes it.
        return StoreError(f"cannot read the store {self.where}: {mask_dsn(str(exc))}")

    def page(self, after: int, owner: str | None) -> list[Any]:
        query = f"SELECT {self.columns} FROM {self.table} WHERE pos > %s"
        params: list[Any] = [after]
        if owner is not None:
            query += " AND (owner = %s OR starts_with(owner, %s))"
            params += [owner, owner + "/"]
        query += " ORDER BY pos LIMIT %s"
        rows: list[Any] = self.conn.execute(query.encode(), [*params, PAGE_ROWS]).fetchall()
        return rows

    def parent(self, run_id: str) -> Any:
        query = f"SELECT {self.columns} FROM {self.table} WHERE run_id = %s"
        return self.conn.execute(query.encode(), (run_id,)).fetchone()

    def close(self) -> None:
        self.conn.close()


def _queries_for(reader: Reader, schema: str) -> _Sqlite | _Postgres:
    if isinstance(reader, SQLiteReader):
        return _Sqlite(reader)
    if isinstance(reader, PostgresReader):
        return _Postgres(reader, schema)
    raise TypeError(f"no usage queries for {type(reader).__name__}")  # pragma: no cover


class UsageSource:
    """A store's usage, read a page at a time on a read-only connection of its own.

    Args:
        reader: the reader of the store (its file or connection string).
        schema: with PostgreSQL, the store's schema.

    Raises:
        StoreError: the store cannot be opened.
    """

    def __init__(self, reader: Reader, schema: str) -> None:
        self._where = str(getattr(reader, "path", None) or getattr(reader, "where", "the store"))
        try:
            self._queries = _queries_for(reader, schema)
        except StoreError:
            raise
        except Exception as exc:
            raise StoreError(f"cannot read the store {self._where}: {mask_dsn(str(exc))}") from exc
        self._kept: collections.OrderedDict[str, ParentFacts | None] = collections.OrderedDict()

    def rows(self, *, owner: str | None = None) -> Iterator[UsageRow]:
        """Every run of the store (with *owner*: those of *owner* and its nested
        parents), oldest first, a page at a time.

        Raises:
            StoreError: the store cannot be read.
        """
        if owner is not None and not _encodable(owner):
            return  # no stored owner is text that is not Unicode
        queries = self._queries
        after = 0
        while True:
            page = guarded(queries.error, queries.page, after, owner)
            for values in page:
                yield _row(values)
            if len(page) < PAGE_ROWS:
                return
            after = int(page[-1][0])

    def parent(self, run_id: str) -> ParentFacts | None:
        """What the store says of run *run_id* (the most recent looked up are
        kept), or ``None`` when it holds no such run.

        Raises:
            StoreError: the store cannot be read.
        """
        kept = self._kept
        if run_id in kept:
            kept.move_to_end(run_id)
            return kept[run_id]
        queries = self._queries
        values = guarded(queries.error, queries.parent, run_id)
        facts = None
        if values is not None:
            row = _row(values)
            facts = ParentFacts(row.owner, row.subagent, row.admitted_at, row.usage is not None)
        kept[run_id] = facts
        if len(kept) > _PARENTS_KEPT:
            kept.popitem(last=False)
        return facts

    def close(self) -> None:
        """Close its connection."""
        self._queries.close()


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


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
