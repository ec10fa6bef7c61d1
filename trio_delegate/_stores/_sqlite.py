"""A durable store in one SQLite file (contract §12).

Design:

* the standard library's ``sqlite3`` on a worker thread, one connection,
  one operation at a time (a capacity limiter of one), so the Trio loop
  never blocks on the disk;
* WAL journal with ``synchronous=FULL``: a commit that returned survives a
  process kill and a power cut; the runtime batches pending writes into one
  commit (group commit), so throughput does not fall to one fsync per run;
* plain JSON only: each row holds the record as JSON text produced by the
  package's converter — a tampered or foreign file can fail to load, never
  execute code;
* a ``meta`` table with the schema version and forward migrations; a file
  that is not a trio_delegate store is refused, never modified;
* the file is created with mode ``0600``; runtimes sharing it prove they are
  alive with kernel locks (see ``_liveness``).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar, final

import trio

from .._checks import check_int, check_seconds
from .._converter import converter
from .._errors import StoreError
from .._status import RunStatus
from ._liveness import RuntimeLock, lock_dir_for, runtime_is_gone
from ._protocol import RunRecord, StoredRun, StoreSnapshot, interrupted

__all__ = ["SCHEMA_VERSION", "SQLiteStore"]

_APPLICATION: Final = "trio_delegate"
SCHEMA_VERSION: Final = 1
_LIVE = ("pending", "running")
#: Store-side retention is applied after this many written records (and on attach).
_PRUNE_EVERY: Final = 512
_BUSY_TIMEOUT_MS: Final = 10_000
# Built once: json.dumps with options builds a new encoder on every call.
_RECORD_ENCODER: Final = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))

T = TypeVar("T")


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


#: _MIGRATIONS[n] brings a store from version n to n + 1.
_MIGRATIONS: Final[dict[int, Callable[[sqlite3.Connection], None]]] = {0: _migrate_to_1}


@final
class SQLiteStore:
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

    Raises:
        InvalidArgumentsError: a malformed argument.
    """

    __slots__ = (
        "_conn",
        "_limiter",
        "_locks",
        "_written",
        "max_bytes",
        "max_rows",
        "path",
        "retention_seconds",
    )

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        retention_seconds: float | None = 30 * 24 * 3600.0,
        max_rows: int | None = 100_000,
        max_bytes: int | None = None,
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
        self._conn: sqlite3.Connection | None = None
        self._limiter = trio.CapacityLimiter(1)
        self._locks: dict[str, RuntimeLock] = {}
        self._written = 0

    def __repr__(self) -> str:
        return f"<trio_delegate.SQLiteStore {str(self.path)!r}>"

    # -- the ResultStore protocol ---------------------------------------------------

    async def attach(self, runtime_id: str) -> StoreSnapshot:
        return await self._run(self._attach_sync, runtime_id)

    async def detach(self, runtime_id: str) -> None:
        await self._run(self._detach_sync, runtime_id)

    async def write(self, records: Sequence[RunRecord]) -> None:
        await self._run(self._write_sync, list(records))

    async def get(self, run_id: str) -> RunRecord | None:
        return await self._run(self._get_sync, run_id)

    async def list_runs(
        self, *, status: RunStatus | None = None, owner: str | None = None, limit: int = 100
    ) -> list[RunRecord]:
        return await self._run(self._list_sync, status, owner, limit)

    # -- plumbing ------------------------------------------------------------------------

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await trio.to_thread.run_sync(self._guarded, fn, *args, limiter=self._limiter)

    def _guarded(self, fn: Callable[..., T], *args: Any) -> T:
        """Run *fn* on the worker thread; turn every database failure into StoreError."""
        try:
            return fn(*args)
        except StoreError:
            raise
        except sqlite3.DatabaseError as exc:
            raise self._error(exc) from exc
        except OSError as exc:
            raise StoreError(
                f"cannot use the store {self.path}: {exc.strerror or exc}; check that the "
                "folder exists and is writable",
                path=str(self.path),
            ) from exc

    def _error(self, exc: sqlite3.Error) -> StoreError:
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
        return StoreError(f"the store {self.path} {what} ({text}): {advice}", path=str(self.path))

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
            version = self._version(conn)
            while version < SCHEMA_VERSION:
                _MIGRATIONS[version](conn)
                version += 1
                conn.execute(
                    "INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(version),)
                )

    def _version(self, conn: sqlite3.Connection) -> int:
        tables = {
            row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        if not tables:
            return 0
        meta: dict[str, str] = {}
        if "meta" in tables:
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        if meta.get("application") != _APPLICATION:
            raise StoreError(
                f"the store {self.path} is an SQLite database of something else (tables: "
                f"{', '.join(sorted(tables))}), not a trio_delegate store; it was left "
                "untouched: point the store at another file",
                path=str(self.path),
            )
        try:
            version = int(meta["schema_version"])
        except (KeyError, ValueError):
            raise StoreError(
                f"the store {self.path} has no readable schema version; it was left "
                "untouched: restore it from a backup or use another file",
                path=str(self.path),
            ) from None
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"the store {self.path} has schema version {version}, written by a newer "
                f"trio_delegate (this one reads up to {SCHEMA_VERSION}): upgrade "
                "trio_delegate, or use another file",
                path=str(self.path),
            )
        return version

    # -- work on the thread --------------------------------------------------------------

    def _attach_sync(self, runtime_id: str) -> StoreSnapshot:
        conn = self._connection()
        lock_dir = lock_dir_for(self.path)
        self._locks[runtime_id] = RuntimeLock(lock_dir, runtime_id)
        try:
            with _transaction(conn):
                marked = self._mark_interrupted(conn, lock_dir)
                self._prune(conn)
        except BaseException:
            self._release(runtime_id)
            raise
        terminal = tuple(
            (run_id, StoredRun(owner, subagent, RunStatus(status)))
            for run_id, owner, subagent, status in conn.execute(
                "SELECT run_id, owner, subagent, status FROM runs "
                "WHERE status NOT IN (?, ?) ORDER BY rowid",
                _LIVE,
            )
        )
        return StoreSnapshot(terminal, tuple(marked))

    def _mark_interrupted(self, conn: sqlite3.Connection, lock_dir: Path) -> list[str]:
        """Mark failed every live run whose runtime is gone; return their ids."""
        owners = [
            row[0]
            for row in conn.execute(
                "SELECT DISTINCT runtime_id FROM runs WHERE status IN (?, ?)", _LIVE
            )
        ]
        marked: list[str] = []
        for rid in owners:
            if not runtime_is_gone(lock_dir, rid):
                continue
            rows = conn.execute(
                "SELECT record FROM runs WHERE runtime_id = ? AND status IN (?, ?)",
                (rid, *_LIVE),
            ).fetchall()
            for (text,) in rows:
                record = interrupted(self._decode(text))
                self._upsert(conn, record)
                marked.append(record.run_id)
        return marked

    def _detach_sync(self, runtime_id: str) -> None:
        self._release(runtime_id)
        if not self._locks and self._conn is not None:
            self._conn.close()
            self._conn = None

    def _release(self, runtime_id: str) -> None:
        lock = self._locks.pop(runtime_id, None)
        if lock is not None:
            lock.release()

    def _write_sync(self, records: list[RunRecord]) -> None:
        conn = self._connection()
        with _transaction(conn):
            self._upsert(conn, *records)
            self._written += len(records)
            if self._written >= _PRUNE_EVERY:
                self._written = 0
                self._prune(conn)

    def _get_sync(self, run_id: str) -> RunRecord | None:
        row = (
            self._connection()
            .execute("SELECT record FROM runs WHERE run_id = ?", (run_id,))
            .fetchone()
        )
        return None if row is None else self._decode(row[0])

    def _list_sync(
        self, status: RunStatus | None, owner: str | None, limit: int
    ) -> list[RunRecord]:
        query = "SELECT record FROM runs"
        clauses, params = [], []
        if status is not None:
            clauses.append("status = ?")
            params.append(status.value)
        if owner is not None:
            clauses.append("owner = ?")
            params.append(owner)
        if clauses:
            query += " WHERE " + " AND ".join(clauses)
        query += " ORDER BY rowid DESC LIMIT ?"
        rows = self._connection().execute(query, (*params, limit)).fetchall()
        return [self._decode(text) for (text,) in rows]

    def _upsert(self, conn: sqlite3.Connection, *records: RunRecord) -> None:
        # An upsert keeps the row's rowid, so rowid order stays admission order.
        conn.executemany(
            """
            INSERT INTO runs (run_id, runtime_id, owner, subagent, status, admitted_at,
                              ended_at, record)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT (run_id) DO UPDATE SET
                status = excluded.status,
                ended_at = excluded.ended_at,
                record = excluded.record
            """,
            [
                (
                    record.run_id,
                    record.runtime_id,
                    record.owner,
                    record.subagent,
                    record.status.value,
                    record.admitted_at,
                    record.ended_at,
                    _RECORD_ENCODER.encode(converter.unstructure(record)),
                )
                for record in records
            ],
        )

    def _decode(self, text: str) -> RunRecord:
        try:
            return converter.structure(json.loads(text), RunRecord)
        except Exception as exc:
            raise StoreError(
                f"the store {self.path} holds a record that is not valid trio_delegate "
                f"JSON ({type(exc).__name__}: {exc}); the file was changed by something else",
                path=str(self.path),
            ) from exc

    def _prune(self, conn: sqlite3.Connection) -> None:
        """Apply store-side retention to terminal runs (live runs are never pruned)."""
        if self.retention_seconds is not None:
            cutoff = datetime.datetime.now(datetime.UTC) - datetime.timedelta(
                seconds=self.retention_seconds
            )
            conn.execute(
                "DELETE FROM runs WHERE status NOT IN (?, ?) AND ended_at < ?",
                (*_LIVE, cutoff.isoformat(timespec="milliseconds")),
            )
        if self.max_rows is not None:
            conn.execute(
                """
                DELETE FROM runs WHERE rowid IN (
                    SELECT rowid FROM runs WHERE status NOT IN (?, ?)
                    ORDER BY rowid DESC LIMIT -1 OFFSET ?
                )
                """,
                (*_LIVE, self.max_rows),
            )
