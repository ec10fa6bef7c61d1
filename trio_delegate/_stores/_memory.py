"""A store that keeps run records in this process only."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, Final, final

import trio

from .._errors import StoreError
from .._status import RunStatus
from ._codec import LiveHeads, decode_record, encode_record, encode_state, requests_after
from ._protocol import (
    DEFAULT_POLL_INTERVAL,
    ChangeBatch,
    RunRecord,
    StoredRun,
    StoreSnapshot,
    check_cursor,
    check_poll_interval,
    check_runtime_id,
    check_wait_timeout,
    interrupted,
)

__all__ = ["MemoryStore"]

_WHERE = "in memory"


@final
class _Row:
    """One run as the store keeps it: JSON texts, like a row of a database."""

    __slots__ = (
        "cancel_requested",
        "head",
        "observed",
        "owner",
        "requests",
        "runtime_id",
        "state",
        "status",
    )

    def __init__(self, record: RunRecord, head: str, state: str) -> None:
        self.head = head
        self.state = state
        # Answers other runtimes left (JSON text), kept apart from the record.
        self.requests: str | None = None
        self.status = record.status
        self.owner = record.owner
        self.runtime_id = record.runtime_id
        self.cancel_requested = record.cancel_requested
        self.observed = record.observed

    def decode(self) -> RunRecord:
        # A fresh copy on every read: no caller can change what another one sees.
        return decode_record(
            self.head, self.state, self.cancel_requested, self.observed, _WHERE, self.requests
        )


@final
class MemoryStore:
    """A store that keeps records in this process only.

    It outlives the runtimes that use it, so a new runtime opened on the same
    object finds the results (and the interrupted runs) of earlier ones, the
    way a file store would after a restart. Runtimes "gone" are those that
    attached and never detached (see :meth:`abandon`).

    It keeps the contract of the stores on disk: records are kept as JSON
    (what a read returns equals what was written, and is the caller's own
    copy), a record JSON cannot carry is refused with ``StoreError``, a
    terminal record never changes, and the sticky flags are never cleared.
    Runtimes sharing it in one Trio run see each other's changes at once.

    Args:
        poll_interval: how often (seconds, at most 1) a runtime looks for
            what other runtimes changed.

    Raises:
        InvalidArgumentsError: a malformed argument.
    """

    __slots__ = (
        "_attached",
        "_changed",
        "_heads",
        "_latest",
        "_rows",
        "_seq",
        "_seqs",
        "_writers",
        "lease_seconds",
        "poll_interval",
    )

    def __init__(self, *, poll_interval: float = DEFAULT_POLL_INTERVAL) -> None:
        self.poll_interval = check_poll_interval("MemoryStore.poll_interval", poll_interval)
        #: Liveness is exact (attach/detach in this process): no lease.
        self.lease_seconds: float | None = None
        self._rows: dict[str, _Row] = {}
        self._attached: set[str] = set()
        self._heads = LiveHeads()
        # The latest change number of each run, in the order of their latest change.
        self._seqs: OrderedDict[str, int] = OrderedDict()
        self._seq = 0
        # Who made each run's latest change: the runtime whose own write it was,
        # or None (a flag, an interruption, or a write that left a flag the
        # runtime had not seen); and the number of the latest change each made.
        self._writers: dict[str, str | None] = {}
        self._latest: dict[str | None, int] = {}
        # Set (and dropped) on every change; made only while someone waits.
        self._changed: trio.Event | None = None

    def __repr__(self) -> str:
        return f"<trio_delegate.MemoryStore {len(self._rows)} runs>"

    async def attach(self, runtime_id: str) -> StoreSnapshot:
        """Register *runtime_id*; mark the live runs of runtimes not attached as interrupted.

        Returns:
            every terminal run, and the ids this attachment marked interrupted.

        Raises:
            StoreError: *runtime_id* is malformed or already attached.
        """
        await trio.lowlevel.checkpoint()
        check_runtime_id(runtime_id, _WHERE, None)
        if runtime_id in self._attached:
            raise StoreError(f"runtime {runtime_id} is already attached to this MemoryStore")
        self._attached.add(runtime_id)
        marked = self._mark_gone()
        terminal = []
        for run_id, row in self._rows.items():
            if row.status.is_terminal:
                record = row.decode()
                stored = StoredRun(record.owner, record.subagent, row.status, record.usage)
                terminal.append((run_id, stored))
        return StoreSnapshot(tuple(terminal), marked)

    async def detach(self, runtime_id: str) -> None:
        """Unregister *runtime_id*."""
        await trio.lowlevel.checkpoint()
        self._attached.discard(runtime_id)

    async def write(self, records: Sequence[RunRecord]) -> list[str]:
        """Insert or replace *records*, all or none.

        A record already terminal here is left as it is; sticky flags are
        never cleared.

        Returns:
            the ids of the runs whose terminal record was ignored: another
            terminal record of the run stood here.

        Raises:
            StoreError: a record cannot be written as JSON, or has a malformed
                id (it names the run); nothing was written.
        """
        await trio.lowlevel.checkpoint()
        encoded = [encode_record(record, _WHERE, self._heads) for record in records]
        rows = self._rows
        ignored: list[str] = []
        for item in encoded:
            record = item.record
            old = rows.get(record.run_id)
            if old is not None and old.status.is_terminal:
                if record.status.is_terminal and item.state != old.state:
                    ignored.append(record.run_id)
                continue
            head = item.head
            if head is None:
                if old is None:  # cannot happen: the head was written with the run
                    raise StoreError(f"run {record.run_id} vanished from this MemoryStore")
                head = old.head
            row = _Row(record, head, item.state)
            writer: str | None = record.runtime_id
            if old is not None:
                row.cancel_requested |= old.cancel_requested
                row.observed |= old.observed
                row.requests = old.requests
                if (row.cancel_requested, row.observed) != (
                    record.cancel_requested,
                    record.observed,
                ) or (row.requests is not None and record.questions):
                    # The row holds news for its runtime too: a flag, or
                    # answers left for questions it still has open.
                    writer = None
            self._put(record.run_id, row, writer)
        self._heads.committed(encoded)
        return ignored

    async def get(self, run_id: str) -> RunRecord | None:
        """The record of *run_id*, or ``None``."""
        await trio.lowlevel.checkpoint()
        row = self._rows.get(run_id)
        return None if row is None else row.decode()

    async def list_runs(
        self, *, status: RunStatus | None = None, owner: str | None = None, limit: int = 100
    ) -> list[RunRecord]:
        """Records, newest admission first, filtered by status and owner."""
        await trio.lowlevel.checkpoint()
        chosen: list[RunRecord] = []
        for row in reversed(self._rows.values()):
            if len(chosen) >= limit:
                break
            if (status is None or row.status is status) and (owner is None or row.owner == owner):
                chosen.append(row.decode())
        return chosen

    async def sweep(self, runtime_id: str) -> tuple[str, ...]:
        """Mark failed the live runs of runtimes that are not attached.

        Returns:
            the ids marked failed (interrupted).

        Raises:
            StoreError: *runtime_id* is malformed.
        """
        await trio.lowlevel.checkpoint()
        check_runtime_id(runtime_id, _WHERE, None)
        return self._mark_gone()

    #: ``changes`` and ``wait_changes`` take ``ignore_writes_of``.
    ignores_writes: Final = True
    #: ``write`` takes results and transcripts as canonical JSON text, which
    #: the codec splices into a row as it is.
    splices_json: Final = True
    #: Every runtime that shares it lives in this process, and a write wakes
    #: ``wait_changes`` at once: no polling, no sweeps.
    in_process: Final = True

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
            StoreError: *cursor* is malformed.
        """
        await trio.lowlevel.checkpoint()
        if cursor is None:
            return ChangeBatch(self._seq)
        check_cursor(cursor, None)
        newer = []
        writers = self._writers
        for run_id, seq in reversed(self._seqs.items()):
            if seq <= cursor:
                break
            if ignore_writes_of is None or writers[run_id] != ignore_writes_of:
                newer.append(self._rows[run_id].decode())
        newer.reverse()
        return ChangeBatch(max(cursor, self._seq), tuple(newer))

    async def wait_changes(
        self, cursor: int, timeout: float, *, ignore_writes_of: str | None = None
    ) -> None:
        """Return at once on a change after *cursor*, or after *timeout* seconds.

        Args:
            cursor: a cursor ``changes`` returned.
            timeout: seconds to wait at most.
            ignore_writes_of: a runtime id: its own writes are no change for
                this wait (see ``ResultStore``).

        Raises:
            StoreError: an argument is malformed.
        """
        check_cursor(cursor, None)
        timeout = check_wait_timeout(timeout, None)
        await trio.lowlevel.checkpoint()
        with trio.move_on_after(timeout):
            while not self._changed_after(cursor, ignore_writes_of):
                if self._changed is None:
                    self._changed = trio.Event()
                await self._changed.wait()

    async def request_cancel(self, run_id: str) -> RunRecord | None:
        """Set ``cancel_requested`` on *run_id* if it is live.

        Returns:
            the record as stored, or ``None`` for an unknown run.
        """
        await trio.lowlevel.checkpoint()
        row = self._rows.get(run_id)
        if row is None:
            return None
        if not row.status.is_terminal and not row.cancel_requested:
            row.cancel_requested = True
            self._put(run_id, row)
        return row.decode()

    async def post_answer(self, run_id: str, request: Mapping[str, Any]) -> RunRecord | None:
        """Leave *request* (an answer to an open question) for the run's own runtime.

        Returns:
            the record as stored, or ``None`` for an unknown run.

        Raises:
            StoreError: the request is not plain JSON.
        """
        await trio.lowlevel.checkpoint()
        row = self._rows.get(run_id)
        if row is None:
            return None
        try:
            requests = requests_after(row.status, row.state, row.requests, request)
        except Exception as exc:
            raise StoreError(
                f"an answer for run {run_id} cannot be left in this MemoryStore: "
                f"{type(exc).__name__}: {exc}"
            ) from None
        if requests != row.requests:
            row.requests = requests
            self._put(run_id, row)
        return row.decode()

    async def mark_observed(self, run_id: str, *, observed_by: str | None = None) -> None:
        """Set ``observed`` on *run_id* (an unknown run is left alone).

        A run's own runtime flagging it (*observed_by*) makes a change it
        ignores like its writes; anyone else's flag is news to it.
        """
        await trio.lowlevel.checkpoint()
        row = self._rows.get(run_id)
        if row is not None and not row.observed:
            row.observed = True
            self._put(run_id, row, observed_by if observed_by == row.runtime_id else None)

    async def aclose(self) -> None:
        """Nothing to release; for symmetry with the stores on disk."""
        await trio.lowlevel.checkpoint()

    def abandon(self, runtime_id: str) -> None:
        """Forget that *runtime_id* is attached, as if its process had died.

        For tests of what a restart finds; a live runtime must not be abandoned.
        """
        self._attached.discard(runtime_id)

    def _changed_after(self, cursor: int, ignore: str | None) -> bool:
        if ignore is None:
            return self._seq > cursor
        return any(seq > cursor for writer, seq in self._latest.items() if writer != ignore)

    def _put(self, run_id: str, row: _Row, writer: str | None = None) -> None:
        self._rows[run_id] = row
        self._seq += 1
        seqs = self._seqs
        seqs[run_id] = self._seq
        seqs.move_to_end(run_id)
        self._writers[run_id] = writer
        self._latest[writer] = self._seq
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()

    def _mark_gone(self) -> tuple[str, ...]:
        marked = []
        for run_id, row in list(self._rows.items()):
            if not row.status.is_terminal and row.runtime_id not in self._attached:
                ended = interrupted(row.decode())
                new = _Row(ended, row.head, encode_state(ended))
                self._put(run_id, new)
                marked.append(run_id)
        return tuple(marked)
