"""A durable store in one SQLite file (contract §12, §16).

Design:

* the standard library's ``sqlite3`` on a worker thread, one connection,
  one operation at a time (a capacity limiter of one), so the Trio loop
  never blocks on the disk;
* WAL journal with ``synchronous=FULL``: a commit that returned survives a
  process kill and a power cut; the runtime batches pending writes into one
  commit (group commit), so throughput does not fall to one fsync per run;
* plain JSON only (see ``_codec``): a tampered or foreign file can fail to
  load, never execute code or name a file to touch;
* a ``meta`` table with the schema version and forward migrations; a file
  that is not a trio_delegate store is refused, never modified;
* every change takes the next number of a counter kept in ``meta``; writers
  are serialised by SQLite, so a reader that asks for the changes after
  number *n* never misses one;
* the file is created with mode ``0600``; runtimes sharing it prove they are
  alive with kernel locks (see ``_liveness``).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sqlite3
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final, TypeVar, final

import trio

from .._checks import check_int, check_seconds
from .._errors import StoreError
from .._status import RunStatus
from ._base import RecordReader, ThreadedStore, pruned_before
from ._codec import (
    EncodedRecord,
    LiveHeads,
    change_batch,
    decode_full_row,
    encode_record,
    encode_state,
    requests_after,
    status_of,
    stored_usage,
    with_head,
)
from ._liveness import RuntimeLock, lock_dir_for, runtime_is_gone
from ._protocol import (
    DEFAULT_MAX_ROWS,
    DEFAULT_POLL_INTERVAL,
    DEFAULT_RETENTION_SECONDS,
    ChangeBatch,
    RunRecord,
    StoredRun,
    StoreSnapshot,
    check_cursor,
    check_poll_interval,
    check_runtime_id,
    check_wait_timeout,
    interrupted,
    is_run_id,
    is_runtime_id,
)

__all__ = ["SCHEMA_VERSION", "SQLiteReader", "SQLiteStore"]

_APPLICATION: Final = "trio_delegate"
SCHEMA_VERSION: Final = 5
_LIVE = ("pending", "running")
#: Store-side retention is applied after this many written records (and on attach).
_PRUNE_EVERY: Final = 512
_BUSY_TIMEOUT_MS: Final = 10_000

T = TypeVar("T")

# -- schema -------------------------------------------------------------------------


def _migrate_to_1(conn: sqlite3.Connection) -> None:
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    conn.execute(
        """
        CREATE TABLE runs (
            run_id      TEXT PRIMARY KEY,
            runtime_id  TEXT NOT NULL,
            owner       TEXT NOT NULL,
            subagent    TEXT NOT NULL,
            status      TEXT NOT NULL,
            admitted_at TEXT NOT NULL,
            ended_at    TEXT,
            record      TEXT NOT NULL
        )
        """
    )
    conn.execute("CREATE INDEX runs_by_owner ON runs (owner)")
    # Only live runs are looked up by runtime (to find those of a dead one), and
    # they are few: a partial index costs nothing for the terminal majority.
    conn.execute(
        "CREATE INDEX runs_live ON runs (runtime_id) WHERE status IN ('pending', 'running')"
    )
    conn.execute("INSERT INTO meta VALUES ('application', ?)", (_APPLICATION,))


def _migrate_to_2(conn: sqlite3.Connection) -> None:
    """Version 2: the changing part of a record in ``state``, sticky flags, change numbers.

    Rows of version 1 keep their whole record in ``record`` and no ``state``;
    they read the same (flags unset) and are numbered in admission order.
    """
    conn.execute("ALTER TABLE runs ADD COLUMN state TEXT")
    conn.execute("ALTER TABLE runs ADD COLUMN seq INTEGER NOT NULL DEFAULT 0")
    conn.execute("ALTER TABLE runs ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0")
    conn.execute("ALTER TABLE runs ADD COLUMN observed INTEGER NOT NULL DEFAULT 0")
    conn.execute("UPDATE runs SET seq = rowid")
    conn.execute("CREATE INDEX runs_by_seq ON runs (seq)")
    conn.execute(
        "INSERT INTO meta VALUES ('change_seq', (SELECT coalesce(max(rowid), 0) FROM runs))"
    )


#: How many rows are terminal, counted (the ``terminal_rows`` kept in ``meta``
#: says the same without reading them).
_COUNT_TERMINAL: Final = "SELECT count(*) FROM runs WHERE status NOT IN ('pending', 'running')"


def _migrate_to_3(conn: sqlite3.Connection) -> None:
    """Version 3: ``writer``, the runtime whose own write made a row's latest change.

    ``NULL`` where anything else made it (a flag, an interruption, or a write
    that left flags the runtime had not seen): a runtime reads back only
    changes it did not make itself (see ``changes``). Rows of version 2 read
    as changed by someone else. Also an index of terminal runs by end time
    and their number in ``meta`` (``terminal_rows``), for pruning.
    """
    conn.execute("ALTER TABLE runs ADD COLUMN writer TEXT")
    # Pruning by age reads only the terminal runs that ended before the cutoff,
    # and pruning by count reads the number kept here instead of counting.
    conn.execute(
        "CREATE INDEX runs_ended ON runs (ended_at) WHERE status NOT IN ('pending', 'running')"
    )
    conn.execute(f"INSERT INTO meta VALUES ('terminal_rows', ({_COUNT_TERMINAL}))")


def _migrate_to_4(conn: sqlite3.Connection) -> None:
    """Version 4: a continuation's head may name the run it continues (``continues``)
    instead of holding that run's conversation again.

    Nothing to rewrite: rows of version 3 hold their histories whole and read
    as before. The version only keeps an older trio_delegate, which would
    read such a continuation's history as empty, from opening the store.
    """


def _migrate_to_5(conn: sqlite3.Connection) -> None:
    """Version 5: ``answer_requests``, the answers other runtimes left for a live
    run's open questions (contract §19), for its own runtime to apply.

    Rows of version 4 hold none. A run's questions and progress live in its
    state document, which an older trio_delegate would read without them:
    the version keeps it from opening the store.
    """
    conn.execute("ALTER TABLE runs ADD COLUMN answer_requests TEXT")


#: _MIGRATIONS[n] brings a store from version n to n + 1.
_MIGRATIONS: Final[dict[int, Callable[[sqlite3.Connection], None]]] = {
    0: _migrate_to_1,
    1: _migrate_to_2,
    2: _migrate_to_3,
    3: _migrate_to_4,
    4: _migrate_to_5,
}

_COLUMNS: Final = "record, state, cancel_requested, observed, answer_requests"
#: What ``trio-delegate runs`` reads: the record and its flags (not the answers
#: left for it), and the run id column, which names a damaged row whose record
#: does not.
_READ_COLUMNS: Final = "record, state, cancel_requested, observed, run_id"
#: What a usage summary reads of a row (``SQLiteReader.usage_rows``): the
#: names as the bytes stored (a byte that is not UTF-8 is shown, not an error),
#: the usage out of the state document (of the whole record, in a row of the
#: first layout, whose state is NULL).
_USAGE_OF_RECORD: Final = "CASE WHEN json_valid(record) THEN json_extract(record, '$.usage') END"
_USAGE_NAMES: Final = (
    "rowid, run_id, CAST(owner AS BLOB), CAST(subagent AS BLOB), status, admitted_at, "
)
_USAGE_COLUMNS: Final = (
    _USAGE_NAMES
    + f"CASE WHEN state IS NULL THEN {_USAGE_OF_RECORD}"
    + " WHEN json_valid(state) THEN json_extract(state, '$.usage') END"
)
_USAGE_COLUMNS_V1: Final = _USAGE_NAMES + _USAGE_OF_RECORD

#: The changes after a number that a given runtime did not write itself.
_FOREIGN_CHANGES: Final = (
    f"SELECT seq, {_COLUMNS} FROM runs WHERE seq > ? AND writer IS NOT ? ORDER BY seq"
)

# A row's ``writer`` is the runtime whose record made its latest change, unless
# the row keeps a flag that record did not carry: then the change holds news
# for that runtime too, and the writer is unknown (NULL). (SQLite evaluates
# every expression of an update with the row's values before it.)
_UPSERT: Final = """
    INSERT INTO runs (run_id, runtime_id, owner, subagent, status, admitted_at, ended_at,
                      record, state, seq, cancel_requested, observed, writer)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (run_id) DO UPDATE SET
        runtime_id = excluded.runtime_id,
        owner = excluded.owner,
        subagent = excluded.subagent,
        status = excluded.status,
        admitted_at = excluded.admitted_at,
        ended_at = excluded.ended_at,
        record = excluded.record,
        state = excluded.state,
        seq = excluded.seq,
        cancel_requested = runs.cancel_requested OR excluded.cancel_requested,
        observed = runs.observed OR excluded.observed,
        writer = CASE WHEN runs.cancel_requested > excluded.cancel_requested
                        OR runs.observed > excluded.observed
                      THEN NULL ELSE excluded.writer END
    WHERE runs.status IN ('pending', 'running')
"""
# An upsert keeps the row's rowid, so rowid order stays admission order.

_UPDATE_STATE: Final = """
    UPDATE runs SET status = ?1, ended_at = ?2, state = ?3, seq = ?4,
        cancel_requested = cancel_requested OR ?5, observed = observed OR ?6,
        writer = CASE WHEN cancel_requested > ?5 OR observed > ?6 THEN NULL ELSE ?8 END
    WHERE run_id = ?7 AND status IN ('pending', 'running')
"""


@contextlib.contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """``BEGIN IMMEDIATE`` … ``COMMIT``, rolled back on any error.

    SQLite may already have rolled back by itself (a full disk does that), so
    the rollback is only issued while a transaction is still open: otherwise
    its own error would hide the real one.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


#: Ids per ``IN (…)`` list: well under SQLite's limit of 32,766 parameters.
_IN_CHUNK: Final = 500

#: An encoded record and its change number.
_Numbered = tuple[EncodedRecord, int]


def _count_terminal(conn: sqlite3.Connection, more: int) -> None:
    """Add *more* (may be negative) to the number of terminal rows kept in meta."""
    conn.execute(
        "UPDATE meta SET value = CAST(value AS INTEGER) + ? WHERE key = 'terminal_rows'", (more,)
    )


def _reserve(conn: sqlite3.Connection, count: int) -> int:
    """Take *count* change numbers (inside a write transaction); the first one."""
    (last,) = conn.execute(
        "UPDATE meta SET value = CAST(value AS INTEGER) + ? WHERE key = 'change_seq' "
        "RETURNING CAST(value AS INTEGER)",
        (count,),
    ).fetchone()
    return int(last) - count + 1


def _ignored_endings(conn: sqlite3.Connection, ended: list[_Numbered]) -> list[str]:
    """The runs of *ended* (terminal records just upserted) whose record the upsert ignored.

    Read inside the write's transaction, and only when the upsert changed
    fewer rows than it was given. A row written now carries its record's
    change number; any other row held a terminal record already. One equal
    to the record written (the same ending written again) is no conflict.
    """
    ignored: list[str] = []
    for start in range(0, len(ended), _IN_CHUNK):
        chunk = ended[start : start + _IN_CHUNK]
        marks = ", ".join("?" * len(chunk))
        stored = {
            run_id: (seq, state)
            for run_id, seq, state in conn.execute(
                f"SELECT run_id, seq, state FROM runs WHERE run_id IN ({marks})",
                [item.record.run_id for item, _ in chunk],
            )
        }
        for item, number in chunk:
            row = stored.get(item.record.run_id)
            if row is not None and row[0] != number and row[1] != item.state:
                ignored.append(item.record.run_id)
    return ignored


def _error_for(path: Path, exc: BaseException) -> StoreError:
    """A StoreError for any failure of the store at *path*, naming the cause."""
    if isinstance(exc, StoreError):
        return exc
    where = str(path)
    if isinstance(exc, sqlite3.DatabaseError):
        text = str(exc)
        code = getattr(exc, "sqlite_errorname", "")
        if code == "SQLITE_FULL" or "full" in text:
            advice = "free disk space, raise max_bytes, or lower retention"
            what = "is full"
        elif code == "SQLITE_NOTADB" or "not a database" in text:
            advice = "point the store at another file; this one was left untouched"
            what = "is not an SQLite database (or is corrupt)"
        elif code == "SQLITE_CORRUPT" or "malformed" in text:
            advice = "restore it from a backup or start a new store file"
            what = "is corrupt"
        elif code in ("SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_PERM") or "readonly" in text:
            advice = "check that the file and its folder are writable"
            what = "cannot be written"
        elif code == "SQLITE_BUSY" or "locked" in text:
            advice = "another process held the database too long; try again"
            what = "is busy"
        else:
            advice = "see the cause below"
            what = "failed"
        return StoreError(f"the store {where} {what} ({text}): {advice}", path=where)
    if isinstance(exc, OSError):
        return StoreError(
            f"cannot use the store {where}: {exc.strerror or exc}; check that the folder "
            "exists and is writable",
            path=where,
        )
    return StoreError(
        f"the store {where} failed unexpectedly ({type(exc).__name__}: {exc}); its "
        "contents may have been changed by something else",
        path=where,
    )


def _check_version(conn: sqlite3.Connection, path: Path) -> int:
    """The schema version of the store open on *conn*; 0 for an empty file.

    Raises:
        StoreError: the file belongs to something else, or to a newer version.
    """
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not tables:
        return 0
    meta: dict[str, str] = {}
    if "meta" in tables:
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    if meta.get("application") != _APPLICATION:
        raise StoreError(
            f"the store {path} is an SQLite database of something else (tables: "
            f"{', '.join(sorted(map(str, tables)))}), not a trio_delegate store; it was left "
            "untouched: point the store at another file",
            path=str(path),
        )
    try:
        version = int(meta["schema_version"])
    except (KeyError, ValueError, TypeError):
        raise StoreError(
            f"the store {path} has no readable schema version; it was left untouched: "
            "restore it from a backup or use another file",
            path=str(path),
        ) from None
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"the store {path} has schema version {version}, written by a newer "
            f"trio_delegate (this one reads up to {SCHEMA_VERSION}): upgrade trio_delegate, "
            "or use another file",
            path=str(path),
        )
    return version


def _tampered(where: str, run_id: object) -> StoreError:
    return StoreError(
        f"the store {where} holds a row (run id {run_id!r}) that was not written by a "
        "runtime: its ids, owner or subagent are malformed; it was changed by something else",
        path=where,
    )


def _check_not_empty(version: int, path: Path) -> None:
    if version == 0:
        raise StoreError(f"the file {path} holds no trio_delegate store", path=str(path))


def _list_query(
    columns: str, status: RunStatus | None, owner: str | None, limit: int
) -> tuple[str, list[Any]]:
    query = f"SELECT {columns} FROM runs"
    clauses: list[str] = []
    params: list[Any] = []
    if status is not None:
        clauses.append("status = ?")
        params.append(status.value)
    if owner is not None:
        clauses.append("owner = ?")
        params.append(owner)
    if clauses:
        query += " WHERE " + " AND ".join(clauses)
    query += " ORDER BY rowid DESC LIMIT ?"
    params.append(limit)
    return query, params


def _position(conn: sqlite3.Connection) -> int:
    """The number of the latest change committed to the store."""
    row = conn.execute(
        "SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'change_seq'"
    ).fetchone()
    return int(row[0]) if row is not None else 0


def _changes(
    conn: sqlite3.Connection, cursor: int | None, where: str, ignore: str | None = None
) -> ChangeBatch:
    """``ResultStore.changes`` on *conn*, leaving out what runtime *ignore* wrote itself."""
    if cursor is None:
        return ChangeBatch(_position(conn))
    check_cursor(cursor, where)
    if ignore is None:
        query = f"SELECT seq, {_COLUMNS} FROM runs WHERE seq > ? ORDER BY seq"
        return change_batch(cursor, conn.execute(query, (cursor,)).fetchall(), where)
    # One read transaction: the position covers exactly the rows read, the
    # ones left out included.
    conn.execute("BEGIN")
    try:
        rows = conn.execute(_FOREIGN_CHANGES, (cursor, ignore)).fetchall()
        position = _position(conn)
    finally:
        conn.execute("COMMIT")
    batch = change_batch(cursor, rows, where)
    return ChangeBatch(max(batch.cursor, position), batch.records)


@final
class SQLiteStore(ThreadedStore):
    """Run records in one SQLite file, shared safely by several processes.

    Args:
        path: the database file; it and its folder are created if missing
            (file mode ``0600``, folder ``0700``).
        retention_seconds: terminal runs that ended longer ago (wall clock)
            are pruned; ``None`` keeps them by age.
        max_rows: at most this many terminal runs are kept (oldest pruned
            first); ``None`` for no bound. Live runs are never pruned.
        max_bytes: an upper bound on the file's size; a write that would
            exceed it fails with ``StoreError`` (as on a full disk).
        poll_interval: how often (seconds, at most 1) a runtime looks for
            what other processes changed in the file.

    Raises:
        InvalidArgumentsError: a malformed argument.
    """

    __slots__ = (
        "_conn",
        "_heads",
        "_limiter",
        "_locks",
        "_written",
        "lease_seconds",
        "max_bytes",
        "max_rows",
        "path",
        "poll_interval",
        "retention_seconds",
    )

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        retention_seconds: float | None = DEFAULT_RETENTION_SECONDS,
        max_rows: int | None = DEFAULT_MAX_ROWS,
        max_bytes: int | None = None,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
    ) -> None:
        self.path = Path(path).expanduser().absolute()
        self.retention_seconds = check_seconds(
            "SQLiteStore.retention_seconds", retention_seconds, allow_zero=True, allow_none=True
        )
        self.max_rows = (
            None if max_rows is None else check_int("SQLiteStore.max_rows", max_rows, minimum=1)
        )
        self.max_bytes = (
            None
            if max_bytes is None
            else check_int("SQLiteStore.max_bytes", max_bytes, minimum=4096)
        )
        self.poll_interval = check_poll_interval("SQLiteStore.poll_interval", poll_interval)
        #: Liveness is exact (kernel locks): no lease.
        self.lease_seconds: float | None = None
        self._conn: sqlite3.Connection | None = None
        self._limiter = trio.CapacityLimiter(1)
        self._locks: dict[str, RuntimeLock] = {}
        self._heads = LiveHeads()
        self._written = 0

    def __repr__(self) -> str:
        return f"<trio_delegate.SQLiteStore {str(self.path)!r}>"

    # -- the ResultStore protocol ---------------------------------------------------

    async def wait_changes(
        self, cursor: int, timeout: float, *, ignore_writes_of: str | None = None
    ) -> None:
        """Return once changes after *cursor* exist, or after *timeout* seconds (Trio clock).

        The file is polled every ``poll_interval`` seconds.

        Args:
            cursor: a cursor ``changes`` returned.
            timeout: seconds to wait at most.
            ignore_writes_of: a runtime id: its own writes are no change for
                this wait (see ``ResultStore``).

        Raises:
            StoreError: the file cannot be read, or an argument is malformed.
        """
        where = str(self.path)
        check_cursor(cursor, where)
        timeout = check_wait_timeout(timeout, where)
        await trio.lowlevel.checkpoint()
        with trio.move_on_after(timeout):
            # Other processes change the file: nothing here could set an Event.
            while not await self._run(self._changed_sync, cursor, ignore_writes_of):  # noqa: ASYNC110
                await trio.sleep(self.poll_interval)

    async def aclose(self) -> None:
        """Release every lock this handle holds and close the file (idempotent).

        Raises:
            StoreError: a lock could not be released.
        """
        await self._run(self._close_sync)

    # -- plumbing ------------------------------------------------------------------------

    def _error(self, exc: Exception) -> StoreError:
        return _error_for(self.path, exc)

    def _connection(self) -> sqlite3.Connection:
        if self._conn is not None:
            return self._conn
        path = self.path
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            # Create it ourselves so it is private from the first byte.
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600))
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        try:
            conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
            self._check_and_migrate(conn)
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
            if self.max_bytes is not None:
                page_size = conn.execute("PRAGMA page_size").fetchone()[0]
                conn.execute(f"PRAGMA max_page_count = {max(1, self.max_bytes // page_size)}")
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return conn

    def _check_and_migrate(self, conn: sqlite3.Connection) -> None:
        with _transaction(conn):
            version = _check_version(conn, self.path)
            while version < SCHEMA_VERSION:
                _MIGRATIONS[version](conn)
                version += 1
                conn.execute(
                    "INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(version),)
                )

    def _decode_rows(self, rows: list[Any]) -> list[RunRecord]:
        where = str(self.path)
        return [decode_full_row(row, where) for row in rows]

    # -- work on the thread --------------------------------------------------------------

    def _attach_sync(self, runtime_id: str) -> StoreSnapshot:
        check_runtime_id(runtime_id, str(self.path), str(self.path))
        if runtime_id in self._locks:
            raise StoreError(
                f"runtime {runtime_id} is already attached to the store {self.path}",
                path=str(self.path),
            )
        conn = self._connection()
        self._locks[runtime_id] = RuntimeLock(lock_dir_for(self.path), runtime_id)
        try:
            marked = self._mark_gone(conn)
            with _transaction(conn):
                # Counted afresh now and then: the count follows every change
                # this package makes, not a row deleted by hand.
                conn.execute(
                    f"UPDATE meta SET value = ({_COUNT_TERMINAL}) WHERE key = 'terminal_rows'"
                )
                self._prune(conn)
            terminal = self._terminal(conn)
        except BaseException:
            self._release(runtime_id)
            raise
        return StoreSnapshot(terminal, tuple(marked))

    def _terminal(self, conn: sqlite3.Connection) -> tuple[tuple[str, StoredRun], ...]:
        """Every terminal run in the file, oldest admission first."""
        where = str(self.path)
        terminal = []
        for run_id, owner, subagent, status, usage in conn.execute(
            # The usage a terminal record keeps (contract §20), read out of its
            # state document by the database: the rest of it is not decoded here.
            "SELECT run_id, owner, subagent, status, "
            "CASE WHEN json_valid(state) THEN json_extract(state, '$.usage') END FROM runs "
            "WHERE status NOT IN (?, ?) ORDER BY rowid",
            _LIVE,
        ):
            if not (is_run_id(run_id) and isinstance(owner, str) and isinstance(subagent, str)):
                raise _tampered(where, run_id)
            stored = StoredRun(
                owner, subagent, status_of(status, where, run_id), stored_usage(usage)
            )
            terminal.append((run_id, stored))
        return tuple(terminal)

    def _mark_gone(self, conn: sqlite3.Connection) -> list[str]:
        """Mark failed every live run whose runtime is gone; return their ids."""
        where = str(self.path)
        lock_dir = lock_dir_for(self.path)
        gone = []
        for (runtime_id,) in conn.execute(
            "SELECT DISTINCT runtime_id FROM runs WHERE status IN (?, ?)", _LIVE
        ).fetchall():
            if not is_runtime_id(runtime_id):
                # Checked before any path is built from it: a tampered row must
                # not name a lock file to take or remove.
                raise StoreError(
                    f"the store {where} holds a live run whose runtime id {runtime_id!r} was "
                    "not written by a runtime; it was changed by something else (no lock "
                    "file was touched)",
                    path=where,
                )
            if runtime_id not in self._locks and runtime_is_gone(lock_dir, runtime_id):
                gone.append(runtime_id)
        if not gone:
            return []
        marks = ",".join("?" * len(gone))
        with _transaction(conn):
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM runs WHERE status IN (?, ?) "
                f"AND runtime_id IN ({marks}) ORDER BY rowid",
                (*_LIVE, *gone),
            ).fetchall()
            ended = [interrupted(record) for record in self._decode_rows(rows)]
            if ended:
                # Read in this transaction: their heads are the stored ones.
                self._store(
                    conn,
                    [EncodedRecord(record, None, encode_state(record)) for record in ended],
                    own=False,
                )
        return [record.run_id for record in ended]

    def _detach_sync(self, runtime_id: str) -> None:
        self._release(runtime_id)
        if not self._locks and self._conn is not None:
            self._conn.close()
            self._conn = None

    def _close_sync(self) -> None:
        for runtime_id in list(self._locks):
            self._release(runtime_id)
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _release(self, runtime_id: str) -> None:
        lock = self._locks.pop(runtime_id, None)
        if lock is not None:
            lock.release()

    def _write_sync(self, records: list[RunRecord]) -> list[str]:
        where = str(self.path)
        heads = self._heads
        encoded = [encode_record(record, where, heads) for record in records]
        conn = self._connection()
        with _transaction(conn):
            ignored = self._store(conn, encoded, own=True)
            self._written += len(encoded)
            if self._written >= _PRUNE_EVERY:
                self._written = 0
                self._prune(conn)
        heads.committed(encoded)
        return ignored

    def _store(
        self, conn: sqlite3.Connection, encoded: list[EncodedRecord], *, own: bool
    ) -> list[str]:
        """Write *encoded* (inside a transaction), each with the next change number.

        *own*: the records are written by the runtimes they name (``writer``);
        else by someone else (an interruption).

        Returns:
            the runs whose terminal record was ignored: another one stood.
        """
        seq = _reserve(conn, len(encoded))
        # Records whose head the row holds already, live and ended; and whole
        # ones, in their order (a new row's rowid is its place in admission order).
        groups: tuple[list[_Numbered], list[_Numbered]] = ([], [])
        whole: list[_Numbered] = []
        for item in encoded:
            if item.head is None:
                groups[item.record.status.is_terminal].append((item, seq))
            else:
                whole.append((item, seq))
            seq += 1
        # Rows that became terminal, for the count kept in meta: every
        # statement changes only a live row (or adds a new one).
        became_terminal = 0
        ignored: list[str] = []
        for ended, known in enumerate(groups):
            if not known:
                continue
            changed = self._update_states(conn, known, own)
            became_terminal += changed if ended else 0
            if changed != len(known):
                # Some rows were not live where this handle left them (ended by
                # another runtime, or removed): write those records whole. The
                # upsert leaves a terminal row alone and repeats the others.
                where = str(self.path)
                whole.extend((with_head(item, where), number) for item, number in known)
        # One statement per stretch of live or of ended records, so that the
        # rows that became terminal can be counted.
        for ended, grouped in itertools.groupby(
            whole, lambda pair: pair[0].record.status.is_terminal
        ):
            stretch = list(grouped)
            changed = self._upsert(conn, stretch, own)
            became_terminal += changed if ended else 0
            if ended and changed != len(stretch):
                ignored += _ignored_endings(conn, stretch)
        if became_terminal:
            _count_terminal(conn, became_terminal)
        asking = [(item.record.run_id,) for item in encoded if item.record.questions]
        if asking:
            # Answers left for a run that still has questions open are news for
            # its own runtime, whoever wrote last (see post_answer).
            conn.executemany(
                "UPDATE runs SET writer = NULL WHERE run_id = ? AND answer_requests IS NOT NULL",
                asking,
            )
        return ignored

    @staticmethod
    def _update_states(conn: sqlite3.Connection, known: list[_Numbered], own: bool) -> int:
        """Rewrite the state of *known* rows that are live; how many were."""
        return conn.executemany(
            _UPDATE_STATE,
            [
                (
                    item.record.status.value,
                    item.record.ended_at,
                    item.state,
                    number,
                    item.record.cancel_requested,
                    item.record.observed,
                    item.record.run_id,
                    item.record.runtime_id if own else None,
                )
                for item, number in known
            ],
        ).rowcount

    @staticmethod
    def _upsert(conn: sqlite3.Connection, whole: list[_Numbered], own: bool) -> int:
        """Insert or rewrite the rows of *whole* (never a terminal one); how many changed."""
        return conn.executemany(
            _UPSERT,
            [
                (
                    item.record.run_id,
                    item.record.runtime_id,
                    item.record.owner,
                    item.record.subagent,
                    item.record.status.value,
                    item.record.admitted_at,
                    item.record.ended_at,
                    item.head,
                    item.state,
                    number,
                    item.record.cancel_requested,
                    item.record.observed,
                    item.record.runtime_id if own else None,
                )
                for item, number in whole
            ],
        ).rowcount

    def _get_sync(self, run_id: str) -> RunRecord | None:
        if not is_run_id(run_id):
            return None
        rows = (
            self._connection()
            .execute(f"SELECT {_COLUMNS} FROM runs WHERE run_id = ?", (run_id,))
            .fetchall()
        )
        return self._decode_rows(rows)[0] if rows else None

    def _list_sync(
        self, status: RunStatus | None, owner: str | None, limit: int
    ) -> list[RunRecord]:
        query, params = _list_query(_COLUMNS, status, owner, limit)
        return self._decode_rows(self._connection().execute(query, params).fetchall())

    def _sweep_sync(self, runtime_id: str) -> tuple[str, ...]:
        check_runtime_id(runtime_id, str(self.path), str(self.path))
        conn = self._connection()
        lock = self._locks.get(runtime_id)
        if lock is not None:
            lock.renew()
        return tuple(self._mark_gone(conn))

    def _changed_sync(self, cursor: int, ignore: str | None) -> bool:
        conn = self._connection()
        if ignore is None:
            return _position(conn) > cursor
        row = conn.execute(
            "SELECT 1 FROM runs WHERE seq > ? AND writer IS NOT ? LIMIT 1", (cursor, ignore)
        ).fetchone()
        return row is not None

    def _changes_sync(self, cursor: int | None, ignore: str | None) -> ChangeBatch:
        return _changes(self._connection(), cursor, str(self.path), ignore)

    def _flag_sync(self, run_id: str, flag: str, by: str | None = None) -> RunRecord | None:
        if not is_run_id(run_id):
            return None
        conn = self._connection()
        with _transaction(conn):
            row = conn.execute(
                f"SELECT status, {flag} FROM runs WHERE run_id = ?", (run_id,)
            ).fetchone()
            if row is None:
                return None
            status, already = row
            live = status in _LIVE
            if not already and (live or flag == "observed"):
                # The run's own runtime (*by*) made this change; anyone else's
                # is news to it (see the writer column).
                conn.execute(
                    f"UPDATE runs SET {flag} = 1, seq = ?, "
                    "writer = CASE WHEN runtime_id = ? THEN ? END WHERE run_id = ?",
                    (_reserve(conn, 1), by, by, run_id),
                )
            rows = conn.execute(f"SELECT {_COLUMNS} FROM runs WHERE run_id = ?", (run_id,))
            return self._decode_rows(rows.fetchall())[0]

    def _post_sync(self, run_id: str, request: dict[str, Any]) -> RunRecord | None:
        if not is_run_id(run_id):
            return None
        conn = self._connection()
        where = str(self.path)
        with _transaction(conn):
            row = conn.execute(
                "SELECT status, state, answer_requests FROM runs WHERE run_id = ?", (run_id,)
            ).fetchone()
            if row is None:
                return None
            status, state, stored = row
            requests = requests_after(status_of(status, where, run_id), state, stored, request)
            if requests != stored:
                # Left by another runtime: news for the run's own (writer NULL).
                conn.execute(
                    "UPDATE runs SET answer_requests = ?, seq = ?, writer = NULL WHERE run_id = ?",
                    (requests, _reserve(conn, 1), run_id),
                )
            rows = conn.execute(f"SELECT {_COLUMNS} FROM runs WHERE run_id = ?", (run_id,))
            return self._decode_rows(rows.fetchall())[0]

    def _prune(self, conn: sqlite3.Connection) -> None:
        """Apply store-side retention to terminal runs (live runs are never pruned).

        By age through the index of terminal runs by end time; by number from
        the count kept in meta, deleting only the excess, oldest admitted first.
        (The status tests are literals: SQLite uses a partial index only for
        a query it can prove is within it.)
        """
        removed = 0
        cutoff = None if self.retention_seconds is None else pruned_before(self.retention_seconds)
        if cutoff is not None:
            removed += conn.execute(
                "DELETE FROM runs WHERE status NOT IN ('pending', 'running') AND ended_at < ?",
                (cutoff,),
            ).rowcount
        if self.max_rows is not None:
            row = conn.execute(
                "SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'terminal_rows'"
            ).fetchone()
            excess = (int(row[0]) if row is not None else 0) - removed - self.max_rows
            if excess > 0:
                # In rowid (admission) order from the oldest: it stops after the
                # excess, past the few live runs among them.
                removed += conn.execute(
                    """
                    DELETE FROM runs WHERE rowid IN (
                        SELECT rowid FROM runs NOT INDEXED
                        WHERE status NOT IN ('pending', 'running') ORDER BY rowid LIMIT ?
                    )
                    """,
                    (excess,),
                ).rowcount
        if removed:
            _count_terminal(conn, -removed)


@final
class SQLiteReader(RecordReader):
    """Read the records of an SQLite store without ever writing to it.

    For ``trio-delegate runs``: the file is opened read-only (``mode=ro``),
    nothing is migrated and no lock is taken, so it works on a file and a
    folder this process cannot write, and while another process holds the
    write lock.

    Args:
        path: the store's file.
    """

    __slots__ = ("_columns", "_usage_columns", "path")

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__()
        self.path = Path(path).expanduser().absolute()
        self._columns = _READ_COLUMNS
        self._usage_columns = _USAGE_COLUMNS

    def _connection(self) -> sqlite3.Connection:
        if self._conn is not None:
            conn: sqlite3.Connection = self._conn
            return conn
        try:
            conn = self._open(immutable=False)
        except sqlite3.OperationalError:
            # A WAL file whose -shm is gone (no writer is active) and whose
            # folder this process cannot write: SQLite cannot build the -shm
            # it needs, but with no writer the file cannot change under us.
            if Path(str(self.path) + "-wal").exists():
                raise
            conn = self._open(immutable=True)
        self._conn = conn
        return conn

    def _open(self, *, immutable: bool) -> sqlite3.Connection:
        uri = f"file:{urllib.parse.quote(str(self.path))}?mode=ro"
        if immutable:
            uri += "&immutable=1"
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
        try:
            conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA query_only = ON")
            version = _check_version(conn, self.path)
            _check_not_empty(version, self.path)
            if version < 2:
                # Written before the state column and the flags existed.
                self._columns = "record, NULL, 0, 0, run_id"
                self._usage_columns = _USAGE_COLUMNS_V1
        except BaseException:
            conn.close()
            raise
        return conn

    def _error(self, exc: Exception) -> StoreError:
        return _error_for(self.path, exc)

    def _usage_rows(self, after: int, owner: str | None, limit: int) -> list[tuple[Any, ...]]:
        conn = self._connection()
        query = f"SELECT {self._usage_columns} FROM runs WHERE rowid > ?"
        params: list[Any] = [after]
        if owner is not None:
            # The owner's runs and its nested parents' (``owner/run_…``): a
            # range of the owner index ('0' follows '/').
            query += " AND (owner = ? OR (owner >= ? AND owner < ?))"
            params += [owner, owner + "/", owner + "0"]
        rows: list[tuple[Any, ...]] = conn.execute(
            query + " ORDER BY rowid LIMIT ?", [*params, limit]
        ).fetchall()
        return rows

    def _usage_row(self, run_id: str) -> tuple[Any, ...] | None:
        conn = self._connection()
        row: tuple[Any, ...] | None = conn.execute(
            f"SELECT {self._usage_columns} FROM runs WHERE run_id = ?", (run_id,)
        ).fetchone()
        return row

    def _get(self, run_id: str) -> RunRecord | None:
        conn = self._connection()
        rows = conn.execute(
            f"SELECT {self._columns} FROM runs WHERE run_id = ?", (run_id,)
        ).fetchall()
        return self._decode(rows[0], str(self.path)) if rows else None

    def _list(self, status: RunStatus | None, owner: str | None, limit: int) -> list[RunRecord]:
        query, params = _list_query(self._columns, status, owner, limit)
        rows = self._connection().execute(query, params).fetchall()
        return self._records(rows, str(self.path))

    def _ids_starting(self, start: str, limit: int) -> list[str]:
        # A range of the primary key's index (its collation is BINARY: code
        # point order), up to the start with its last character one higher.
        end = start[:-1] + chr(ord(start[-1]) + 1)
        rows = self._connection().execute(
            "SELECT run_id FROM runs WHERE run_id >= ? AND run_id < ? ORDER BY run_id LIMIT ?",
            (start, end, limit),
        )
        return [str(run_id) for (run_id,) in rows]

    def _changes(self, cursor: int | None) -> ChangeBatch:
        conn = self._connection()
        if self._columns != _READ_COLUMNS:
            raise StoreError(
                f"the store {self.path} was written by an older trio_delegate and keeps no "
                "log of changes to follow; open it once with a runtime of this version to "
                "migrate it, or read it with 'runs list'",
                path=str(self.path),
            )
        where = str(self.path)
        if cursor is None:
            return ChangeBatch(_position(conn))
        check_cursor(cursor, where)
        query = f"SELECT seq, {_READ_COLUMNS} FROM runs WHERE seq > ? ORDER BY seq"
        return self._batch(cursor, conn.execute(query, (cursor,)).fetchall(), where)
