"""A runtime's side of durability (contract §12): when records are written, and
what a runtime remembers of runs that are only in its store.

Durability points:

* admission — ``start``/``delegate`` return only once the run's admission
  record is committed;
* settlement — a run's ``done`` event (what every waiter waits for) is set
  only once its terminal record is committed, so a result handed to a caller
  is always durable.

Every write goes through one writer task that commits whatever is pending in
one batch (group commit): under load, many runs share one commit.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, final

import attrs
import trio

from .._converter import to_json_ready
from .._errors import StoreError
from .._status import RunStatus
from .._stores._protocol import ResultStore, RunRecord, StoredRun, wall_clock_now
from ._run import conversation

if TYPE_CHECKING:
    from ._run import Run

__all__ = ["Persister", "WriteStats"]

#: At most this many runs found only in the store are remembered for lookups.
_INDEX_LIMIT = 100_000

_Done = Callable[[StoreError | None], None]


@final
@attrs.define
class WriteStats:
    """How the writer batched its commits (for benchmarks and diagnostics)."""

    commits: int = 0
    records: int = 0
    largest_batch: int = 0

    @property
    def mean_batch(self) -> float:
        return self.records / self.commits if self.commits else 0.0


@attrs.frozen
class _Pending:
    record: RunRecord
    done: _Done


@final
class Persister:
    """Writes one runtime's records to its store and answers for stored runs."""

    __slots__ = ("_index", "_receive", "_send", "runtime_id", "stats", "store")

    def __init__(self, store: ResultStore, runtime_id: str) -> None:
        self.store = store
        self.runtime_id = runtime_id
        self.stats = WriteStats()
        self._send, self._receive = trio.open_memory_channel[_Pending](math.inf)
        # Terminal runs that are in the store but not in memory, by id.
        self._index: OrderedDict[str, StoredRun] = OrderedDict()

    async def attach(self) -> tuple[str, ...]:
        """Attach to the store; returns the ids it marked interrupted."""
        snapshot = await self.store.attach(self.runtime_id)
        for run_id, stored in snapshot.terminal:
            self._remember(run_id, stored)
        return snapshot.interrupted

    async def detach(self) -> None:
        await self.store.detach(self.runtime_id)

    # -- the writer ----------------------------------------------------------

    async def run_writer(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Commit pending records in batches until :meth:`close` and the queue is empty."""
        task_status.started()
        receive = self._receive
        async for first in receive:
            batch = [first]
            while True:
                try:
                    batch.append(receive.receive_nowait())
                except (trio.WouldBlock, trio.EndOfChannel):
                    break
            error: StoreError | None = None
            try:
                await self.store.write([item.record for item in batch])
            except StoreError as exc:
                error = exc
            else:
                stats = self.stats
                stats.commits += 1
                stats.records += len(batch)
                stats.largest_batch = max(stats.largest_batch, len(batch))
            for item in batch:
                item.done(error)

    def close(self) -> None:
        """No more writes: the writer finishes what is queued, then returns."""
        self._send.close()

    # -- the durability points ------------------------------------------------------

    async def admit(self, run: Run) -> None:
        """Commit *run*'s admission record. Shielded: it is all or nothing.

        Raises:
            StoreError: the record could not be committed.
        """
        committed = trio.Event()
        failure: list[StoreError] = []

        def done(error: StoreError | None) -> None:
            if error is not None:
                failure.append(error)
            committed.set()

        run.admitted_at = wall_clock_now()
        self._send.send_nowait(_Pending(self.record_of(run, RunStatus.PENDING), done))
        with trio.CancelScope(shield=True):
            await committed.wait()
        if failure:
            raise failure[0]

    def settle(self, run: Run, status: RunStatus, done: _Done) -> None:
        """Queue *run*'s terminal record; *done* is called once it is committed (or failed)."""
        self._send.send_nowait(_Pending(self.record_of(run, status), done))

    def record_of(self, run: Run, status: RunStatus) -> RunRecord:
        result = run.result
        error_type, error_message = run.error_details(status)
        return RunRecord(
            run_id=run.run_id,
            runtime_id=self.runtime_id,
            owner=run.parent.owner,
            subagent=run.subagent.name,
            task=run.task,
            task_summary=run.summary(),
            status=status,
            history=run.history,
            replaces=run.replaces,
            final_result=to_json_ready(result.final_result) if result is not None else None,
            error_type=error_type,
            error_message=error_message,
            transcript=run.transcript,
            admitted_at=run.admitted_at,
            ended_at=wall_clock_now() if status.is_terminal else None,
        )

    # -- runs that are only in the store -------------------------------------------

    def remember(self, run: Run) -> None:
        """*run* left memory (retention): keep what lookups need to find it in the store."""
        self._remember(run.run_id, StoredRun(run.parent.owner, run.subagent.name, run.status))

    def find(self, run_id: str, owner: str) -> StoredRun | None:
        """The stored terminal run *run_id* if it belongs to *owner*."""
        stored = self._index.get(run_id)
        if stored is None or stored.owner != owner:
            return None
        return stored

    async def load(self, run_id: str) -> RunRecord | None:
        return await self.store.get(run_id)

    def _remember(self, run_id: str, stored: StoredRun) -> None:
        index = self._index
        index[run_id] = stored
        index.move_to_end(run_id)
        if len(index) > _INDEX_LIMIT:
            index.popitem(last=False)


def history_of(record: RunRecord) -> tuple[Any, ...]:
    """The whole conversation of a stored terminal run."""
    return conversation(
        record.transcript,
        record.history,
        record.task,
        record.status is RunStatus.COMPLETED,
        record.final_result,
    )
