"""What the stores on disk share: their methods on worker threads, and reading without writing."""

from __future__ import annotations

import abc
import datetime
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, TypeVar, final

import attrs
import trio

from .._errors import StoreError
from .._status import RunStatus
from .._threads import run_sync
from ._codec import decode_row
from ._protocol import ChangeBatch, RunRecord, StoreSnapshot, is_run_id, is_run_id_start

__all__ = ["DamagedRow", "RecordReader", "ThreadedStore", "guarded", "listing", "pruned_before"]

T = TypeVar("T")


def guarded(error: Callable[[Exception], StoreError], fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``; any failure but a StoreError comes out as ``error(exc)``, naming it."""
    try:
        return fn(*args)
    except StoreError:
        raise
    except Exception as exc:
        raise error(exc) from exc


def _is_unicode(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def listing(
    list_fn: Callable[[RunStatus | None, str | None, int], list[RunRecord]],
    status: RunStatus | None,
    owner: str | None,
    limit: int,
) -> list[RunRecord]:
    """``list_fn(status, owner, limit)``; none for an owner no store can hold.

    An owner that is not valid Unicode (a lone surrogate: what a command
    line's undecodable bytes become) owns no record, since no record holding
    one is written; the database would refuse it as a parameter.
    """
    if owner is not None and not _is_unicode(owner):
        return []
    return list_fn(status, owner, limit)


@final
@attrs.frozen
class DamagedRow:
    """A row of a store that holds no valid record (something else changed it).

    Attributes:
        run_id: the run id the row's record names, when that much can be read.
        error: why the row is not a record.
    """

    run_id: str | None
    error: StoreError


def _run_id_of(row: Sequence[Any]) -> str | None:
    """The run id of a damaged row: its run id column (read after the record's
    columns), else what its head names, if its JSON reads that far."""
    if len(row) > 4 and is_run_id(row[4]):
        run_id: object = row[4]
    else:
        try:
            head = json.loads(row[0]) if isinstance(row[0], str) else None
        except ValueError:
            return None
        run_id = head.get("run_id") if isinstance(head, dict) else None
    return run_id if isinstance(run_id, str) and is_run_id(run_id) else None


class RecordReader(abc.ABC):
    """Reads the records of a store without ever writing to it (``trio-delegate runs``).

    A subclass opens its connection on first use (``_conn``) and says how to
    read one record, a listing, and how to name a failure. Its listings and
    change batches decode rows with :meth:`_decode`: with ``tolerant`` set, a
    row that holds no valid record is left out of them and kept in
    ``damaged`` (a ``StoreError`` for that record only, contract §15),
    instead of failing the whole read.

    Attributes:
        tolerant: keep reading past damaged rows.
        damaged: the damaged rows met since it was last emptied (when tolerant).
    """

    __slots__ = ("_conn", "damaged", "tolerant")

    def __init__(self) -> None:
        self._conn: Any = None
        self.tolerant = False
        self.damaged: list[DamagedRow] = []

    def _decode(self, row: Sequence[Any], where: str) -> RunRecord | None:
        """The record of *row*; ``None`` for a damaged row, when tolerant.

        Raises:
            StoreError: the row holds no valid record (when not tolerant).
        """
        if not self.tolerant:
            return decode_row(row, where)
        try:
            return decode_row(row, where)
        except StoreError as exc:
            self.damaged.append(DamagedRow(_run_id_of(row), exc))
            return None

    def _records(self, rows: Sequence[Sequence[Any]], where: str) -> list[RunRecord]:
        """The records of *rows*, damaged ones left out when tolerant."""
        records = []
        for row in rows:
            record = self._decode(row, where)
            if record is not None:
                records.append(record)
        return records

    def _batch(self, cursor: int, rows: Sequence[Sequence[Any]], where: str) -> ChangeBatch:
        """The change batch of rows of ``(seq, head, state, flags...)`` after *cursor*."""
        if not rows:
            return ChangeBatch(cursor)
        records = self._records([row[1:] for row in rows], where)
        return ChangeBatch(max(cursor, int(rows[-1][0])), tuple(records))

    def get(self, run_id: str) -> RunRecord | None:
        """The record of *run_id*, or ``None``.

        When tolerant, a damaged row is ``None`` too, and kept in ``damaged``.

        Raises:
            StoreError: the store cannot be read, or the row was tampered with
                (when not tolerant).
        """
        if not is_run_id(run_id):
            return None  # no record has it (and a lone surrogate fails as a parameter)
        return guarded(self._error, self._get, run_id)

    def list_runs(
        self, *, status: RunStatus | None = None, owner: str | None = None, limit: int = 100
    ) -> list[RunRecord]:
        """Records, newest admission first, filtered by status and owner.

        Raises:
            StoreError: the store cannot be read, or a row was tampered with.
        """
        return guarded(self._error, listing, self._list, status, owner, limit)

    def run_ids_starting(self, start: str, limit: int) -> list[str]:
        """The ids of at most *limit* runs whose id starts with *start*, in id order.

        Only ids are read, never a record: however large the records, a
        lookup by the start of an id costs what the ids cost.

        Raises:
            StoreError: the store cannot be read.
        """
        if not is_run_id_start(start):
            return []  # no run id starts so (and nothing else reaches a query)
        ids = guarded(self._error, self._ids_starting, start, limit)
        # A row whose id no runtime made holds no run (a listing shows it damaged).
        return [run_id for run_id in ids if is_run_id(run_id)]

    def usage_rows(self, after: int, owner: str | None, limit: int) -> list[tuple[Any, ...]]:
        """What each run stored after position *after* spent, oldest first, at most *limit*.

        Five columns and the usage, never a whole record: a summary of a
        large store reads a page of these at a time (``trio-delegate runs
        usage``). Each row is ``(position, run_id, owner, subagent, status,
        admitted_at, usage)``: the names as stored (bytes where SQLite holds
        bytes), *usage* the JSON text of the record's usage or ``None``;
        read as untrusted, as every stored value is.

        Args:
            after: a position an earlier row gave (0 for the first page).
            owner: only the runs of this owner and of its nested parents
                (``owner/run_…``), or every run.
            limit: the most rows to read.

        Raises:
            StoreError: the store cannot be read.
        """
        return guarded(self._error, self._usage_rows, after, owner, limit)

    def usage_row(self, run_id: str) -> tuple[Any, ...] | None:
        """The row :meth:`usage_rows` gives for *run_id*, or ``None``.

        Raises:
            StoreError: the store cannot be read.
        """
        if not is_run_id(run_id):
            return None
        return guarded(self._error, self._usage_row, run_id)

    def changes(self, cursor: int | None) -> ChangeBatch:
        """Every record written or flagged after *cursor*, oldest change first.

        As :meth:`ResultStore.changes`, read-only: ``trio-delegate runs watch``
        follows a store with it.

        Args:
            cursor: a cursor an earlier call returned; ``None`` for the
                current position (and no records).

        Raises:
            StoreError: the store cannot be read, keeps no change log (written
                by an older version), or *cursor* is malformed.
        """
        return guarded(self._error, self._changes, cursor)

    def close(self) -> None:
        """Close the connection (idempotent)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    @abc.abstractmethod
    def _get(self, run_id: str) -> RunRecord | None: ...

    @abc.abstractmethod
    def _list(self, status: RunStatus | None, owner: str | None, limit: int) -> list[RunRecord]: ...

    @abc.abstractmethod
    def _ids_starting(self, start: str, limit: int) -> list[str]: ...

    @abc.abstractmethod
    def _changes(self, cursor: int | None) -> ChangeBatch: ...

    @abc.abstractmethod
    def _usage_rows(self, after: int, owner: str | None, limit: int) -> list[tuple[Any, ...]]: ...

    @abc.abstractmethod
    def _usage_row(self, run_id: str) -> tuple[Any, ...] | None: ...

    @abc.abstractmethod
    def _error(self, exc: Exception) -> StoreError: ...


class ThreadedStore(abc.ABC):
    """The ``ResultStore`` methods of a store whose work runs on Trio worker threads.

    Each method runs its ``_…_sync`` counterpart on a thread (as many at once
    as ``_limiter`` allows), so the Trio loop never waits on a disk or a
    network; every failure comes out as a ``StoreError`` naming its cause.
    """

    __slots__ = ()

    _limiter: trio.CapacityLimiter

    async def attach(self, runtime_id: str) -> StoreSnapshot:
        """Register *runtime_id*; mark the live runs of gone runtimes as interrupted.

        Returns:
            every terminal run, and the ids this attachment marked interrupted.

        Raises:
            StoreError: the store cannot be used, or *runtime_id* is malformed
                or attached already.
        """
        return await self._run(self._attach_sync, runtime_id)

    async def detach(self, runtime_id: str) -> None:
        """Unregister *runtime_id* (its runs are settled) and release its liveness.

        Raises:
            StoreError: the store failed while unregistering.
        """
        await self._run(self._detach_sync, runtime_id)

    async def write(self, records: Sequence[RunRecord]) -> list[str]:
        """Insert or replace *records* in one transaction; durable when this returns.

        A record already terminal in the store is left as it is; sticky flags
        are never cleared.

        Returns:
            the ids of the runs whose terminal record was ignored: another
            terminal record of the run stood in the store (decided in the
            write's own transaction).

        Raises:
            StoreError: nothing was written (it names the run whose record
                cannot be encoded, where one cannot).
        """
        return await self._run(self._write_sync, list(records))

    async def get(self, run_id: str) -> RunRecord | None:
        """The record of *run_id*, or ``None``.

        Raises:
            StoreError: the store cannot be read, or the row was tampered with.
        """
        return await self._run(self._get_sync, run_id)

    async def list_runs(
        self, *, status: RunStatus | None = None, owner: str | None = None, limit: int = 100
    ) -> list[RunRecord]:
        """Records, newest admission first, filtered by status and owner.

        Raises:
            StoreError: the store cannot be read, or a row was tampered with.
        """
        return await self._run(listing, self._list_sync, status, owner, limit)

    async def sweep(self, runtime_id: str) -> tuple[str, ...]:
        """Renew *runtime_id*'s liveness; mark failed the live runs of gone runtimes.

        Returns:
            the ids marked failed (interrupted).

        Raises:
            StoreError: the store cannot be reached (liveness was not renewed),
                or it holds a tampered runtime id.
        """
        return await self._run(self._sweep_sync, runtime_id)

    #: ``changes`` and ``wait_changes`` take ``ignore_writes_of``.
    ignores_writes: Final = True
    #: ``write`` takes results and transcripts as canonical JSON text, which
    #: the codec splices into a row as it is.
    splices_json: Final = True
    #: Other processes and hosts share it: runtimes poll and sweep.
    in_process: Final = False

    async def changes(
        self, cursor: int | None, *, ignore_writes_of: str | None = None
    ) -> ChangeBatch:
        """Every record written or flagged after *cursor*, oldest change first.

        Args:
            cursor: a cursor an earlier call returned; ``None`` for the
                current position (and no records).
            ignore_writes_of: a runtime id: leave out the changes that
                runtime's own writes made (see ``ResultStore``); the cursor
                still moves past them.

        Raises:
            StoreError: the store cannot be read, or *cursor* is malformed.
        """
        return await self._run(self._changes_sync, cursor, ignore_writes_of)

    async def request_cancel(self, run_id: str) -> RunRecord | None:
        """Set ``cancel_requested`` on *run_id* if it is live.

        Returns:
            the record as stored, or ``None`` for an unknown run.

        Raises:
            StoreError: the store failed.
        """
        return await self._run(self._flag_sync, run_id, "cancel_requested")

    async def mark_observed(self, run_id: str, *, observed_by: str | None = None) -> None:
        """Set ``observed`` on *run_id* (an unknown run is left alone).

        A run's own runtime flagging it (*observed_by*) makes a change it
        ignores like its writes; anyone else's flag is news to it.

        Raises:
            StoreError: the store failed.
        """
        await self._run(self._flag_sync, run_id, "observed", observed_by)

    async def post_answer(self, run_id: str, request: Mapping[str, Any]) -> RunRecord | None:
        """Leave *request* (an answer to one of the run's open questions) for the
        run's own runtime to apply (contract §19); durable when this returns.

        Only a live run's open question takes one, and only its first.

        Returns:
            the record as stored, or ``None`` for an unknown run.

        Raises:
            StoreError: the store failed, or holds no JSON this package wrote.
        """
        return await self._run(self._post_sync, run_id, dict(request))

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await run_sync(self._guarded, fn, *args, limiter=self._limiter)

    def _guarded(self, fn: Callable[..., T], *args: Any) -> T:
        return guarded(self._error, fn, *args)

    @abc.abstractmethod
    def _error(self, exc: Exception) -> StoreError: ...

    @abc.abstractmethod
    def _attach_sync(self, runtime_id: str) -> StoreSnapshot: ...

    @abc.abstractmethod
    def _detach_sync(self, runtime_id: str) -> None: ...

    @abc.abstractmethod
    def _write_sync(self, records: list[RunRecord]) -> list[str]: ...

    @abc.abstractmethod
    def _get_sync(self, run_id: str) -> RunRecord | None: ...

    @abc.abstractmethod
    def _list_sync(
        self, status: RunStatus | None, owner: str | None, limit: int
    ) -> list[RunRecord]: ...

    @abc.abstractmethod
    def _sweep_sync(self, runtime_id: str) -> tuple[str, ...]: ...

    @abc.abstractmethod
    def _changes_sync(self, cursor: int | None, ignore: str | None) -> ChangeBatch: ...

    @abc.abstractmethod
    def _flag_sync(self, run_id: str, flag: str, by: str | None = None) -> RunRecord | None: ...

    @abc.abstractmethod
    def _post_sync(self, run_id: str, request: dict[str, Any]) -> RunRecord | None: ...


def pruned_before(retention_seconds: float) -> str | None:
    """The ``ended_at`` before which a terminal run is older than *retention_seconds*
    (ISO 8601, as stored); ``None`` when the retention reaches back past the
    calendar's start, so that no run is that old."""
    try:
        cutoff = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=retention_seconds)
    except OverflowError:
        return None
    return cutoff.isoformat(timespec="milliseconds")
