"""A runtime's writes to its store (contract §12, §15): the durability points.

* admission — ``start``/``delegate`` return only once the run's admission
  record is committed, and a run starts only then (see ``_scheduler``);
* settlement — a decided run commits (its waiters wake) only once its
  terminal record is committed, so a result handed to a caller is durable. A
  pending run's cancellation commits at once; its record follows.

A settlement goes from the run to the :class:`Writer` (``RunHost.record``
is its :meth:`Writer.settle`) and back to the run (the callback it gave).
Every write goes through one writer task that commits whatever is pending in
one batch (group commit): under load, many runs share one commit.

The writer never dies and never leaves anyone waiting: whatever a store
raises becomes a :class:`StoreError` for the records concerned only (a batch
that fails is split until the records that fail alone are found), the writer
survives (the record of an ending that stands all the same is written again
later, ``_unwritten``), and if it is stopped anyway (a ``KeyboardInterrupt`` in the store,
say) every waiter — queued or in flight — is answered with a
``StoreError`` first, as is every write asked for afterwards.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, final

import trio

from .._errors import StoreError
from .._status import RunStatus
from .._stores._protocol import ResultStore, RunRecord, fold
from ._adoption import kept_endings
from ._commit import WriteStats, commit
from ._due import DueRecords
from ._records import Records, store_error
from ._unwritten import Unwritten

if TYPE_CHECKING:
    from ._events import RunEvents
    from ._lease import Lease
    from ._run import Outcome, Run

__all__ = ["RUNNING_RECORD_DELAY", "WriteStats", "Writer"]

#: A run's ``running`` record waits at most this long (seconds) for a batch to
#: go with: other runtimes' views may trail by at most 1 s (contract §16),
#: which leaves the poll interval (at most 0.5 s by default) and then some.
RUNNING_RECORD_DELAY: Final = 0.25

_Done = Callable[[StoreError | None], None]


#: A record waiting for the writer, who to tell when it is committed, and
#: (for a terminal record) its run, whose ending is kept if it is not written.
_Pending = tuple[RunRecord, _Done, "Run | None"]

#: The status of every admission record.
_PENDING: Final = RunStatus.PENDING


def _ignore(error: StoreError | None) -> None:
    pass


@final
class Writer:
    """Writes one runtime's records to its store, in batches, and answers who waits."""

    __slots__ = (
        "_dead",
        "_due",
        "_flush_at",
        "_held",
        "_idle",
        "_ignores_writes",
        "_observed",
        "_receive",
        "_records",
        "_send",
        "_unwritten",
        "_writing",
        "events",
        "lease",
        "shared",
        "stats",
        "store",
    )

    def __init__(self, store: ResultStore, records: Records, lease: Lease) -> None:
        self.store = store
        self._records = records
        self.lease = lease
        # Whether other processes share the store: they read an ending that
        # its record did not reach as the store says (interrupted, when this
        # process died first; another runtime's, when its lease ran out), so a
        # started run's ending waits for its record (see Lease.holds_up).
        self.shared = store.in_process is not True
        # What the store declares it can do (ResultStore); anything but True
        # is read as False. A store that can leave out what this runtime wrote
        # itself spares the watcher reading every record it wrote back (and
        # waking for them): the writer's flags say who set them.
        self._ignores_writes = store.ignores_writes is True
        self.stats = WriteStats()
        self.events: RunEvents | None = None
        self._send, self._receive = trio.open_memory_channel[_Pending](math.inf)
        # The batch being written, answered if the writer is stopped mid-way.
        self._writing: list[_Pending] = []
        # Runs whose running record is held for the next batch (see started),
        # when it is due at the latest, and the writer's wait for records.
        self._held: dict[str, Run] = {}
        self._due = DueRecords()  # live records due by a time, not before (touch)
        self._flush_at = math.inf
        self._idle: trio.CancelScope | None = None
        # This runtime's runs whose results it handed out, to be flagged
        # observed in the store after the next batch (see observed).
        self._observed: list[str] = []
        # Set once the writer can write no more: every later write is
        # answered with it at once.
        self._dead: StoreError | None = None
        # Endings that stand but whose record was not written: written again.
        self._unwritten = Unwritten()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Commit pending records in batches until :meth:`close` and the queue is empty.

        Shielded: the runs it records end when their runtime's scope is
        cancelled, and their records must still be written for their waiters
        to wake (and for the runtime to close).
        """
        task_status.started()
        receive = self._receive
        try:
            with trio.CancelScope(shield=True):
                while True:
                    batch = self._writing = []
                    with trio.CancelScope(deadline=self._flush_at) as idle:
                        # started() brings the deadline forward when it holds a record.
                        self._idle = idle
                        try:
                            batch.append(await receive.receive())
                        except trio.EndOfChannel:
                            break  # closed: the last attempt at the unwritten endings follows
                    self._idle = None
                    while True:
                        try:
                            batch.append(receive.receive_nowait())
                        except (trio.WouldBlock, trio.EndOfChannel):
                            break
                    # Held running records go with this batch (before it: a
                    # run's later record, queued since, wins).
                    batch[:0] = self._take_held()
                    observed, self._observed = self._observed, []
                    if not batch:
                        # The held runs had all ended; flags may be due.
                        await self._flag_observed(observed)
                        continue
                    # One row per run, as the protocol folds them: a run's
                    # records queue in lifecycle order, so its latest one holds
                    # everything the earlier ones said (a run that started and
                    # ended before the commit needs one row, not three).
                    await self._write(batch)
                    await self._flag_observed(observed)
                # Closed: the endings still unwritten, once more, and what was
                # observed since the last batch.
                if self._unwritten:
                    batch = self._writing = [(r, _ignore, None) for r in self._unwritten.take_all()]
                    await self._write(batch)
                observed, self._observed = self._observed, []
                await self._flag_observed(observed)
        except BaseException as exc:
            self._stop(exc)
            raise

    async def _write(self, batch: list[_Pending]) -> None:
        """Commit *batch* and answer each of its records' waiters."""
        written = fold([record for record, _, _ in batch])
        ignored: list[str] = []
        unknown: list[RunRecord] = []
        failures = await commit(self.store, written, ignored, unknown, self.stats, self.events)
        if ignored or (unknown and self.lease.may_be_written_off()):
            # The endings the store did not keep: another one stood.
            failures.update(await kept_endings(self.store, ignored, unknown, failures))
        self._writing = []
        unwritten = self._unwritten
        if failures:
            now = trio.current_time()
            for record, done, run in batch:
                error = failures.get(record.run_id)
                done(error)
                if error is not None and run is not None:
                    unwritten.keep(record, run, error, now)
        else:
            for _, done, _ in batch:
                done(None)
        if unwritten:
            if unwritten.taken:
                unwritten.answered(failures, trio.current_time())
            self._hold_until(unwritten.retry_at)

    async def _flag_observed(self, run_ids: list[str]) -> None:
        """Flag *run_ids* observed in the store, one call each (the protocol has no
        batch of flags), in the writer: nobody waits for them.

        A flag that fails is kept, with those after it, for the next batch:
        an unreachable store's timeouts hold the writer up once per batch,
        not once per flag.
        """
        store = self.store
        for index, run_id in enumerate(run_ids):
            try:
                if self._ignores_writes:
                    # Its own flag is no news to this runtime's watcher.
                    await store.mark_observed(run_id, observed_by=self._records.runtime_id)
                else:
                    await store.mark_observed(run_id)
            except Exception:
                self._observed[:0] = run_ids[index:]
                return

    def _stop(self, exc: BaseException) -> None:
        """The writer is stopped by *exc*: answer every waiter, now and later."""
        dead = StoreError(
            f"the store's writer was stopped ({type(exc).__name__}); nothing more can be "
            "recorded in this runtime: close it and open a new one"
        )
        self._dead = dead
        self._send.close()
        pending = self._writing
        self._writing = []
        while True:
            try:
                pending.append(self._receive.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                break
        for _, done, _ in pending:
            done(dead)

    def close(self) -> None:
        """No more writes: the writer finishes what is queued, then returns."""
        self._send.close()

    def _submit(self, record: RunRecord, done: _Done, run: Run | None = None) -> None:
        dead = self._dead
        if dead is None:
            try:
                self._send.send_nowait((record, done, run))
            except trio.ClosedResourceError:
                dead = StoreError(
                    "the runtime's store is closed: nothing more can be recorded; open a "
                    "new runtime"
                )
            else:
                return
        done(dead)

    # -- the durability points ------------------------------------------------------

    def admit(self, run: Run, done: _Done) -> None:
        """Queue *run*'s admission record; *done* is called, from the writer, once it
        is committed (``None``: the run can start then) or could not be (the error).
        Its caller waits for that (see ``_admission``): it is all or nothing."""
        record = self._records.of(run, _PENDING, None)
        run.admitted_at = record.admitted_at
        if run.history is not None:
            run.history_record = record.history
        self._submit(record, done)

    def settle(self, run: Run, outcome: Outcome, done: _Done = _ignore) -> None:
        """Queue *run*'s terminal record; *done* is called once it is committed (or failed)."""
        try:
            record = self._records.of(run, outcome.status, outcome)
        except Exception as exc:  # pragma: no cover - records are built from checked data
            done(store_error(exc, f"record run {run.run_id}", run.run_id))
            return
        run.history_record = None  # the terminal record has taken it
        self._due.drop(run.run_id)
        held = self._held
        if held.pop(run.run_id, None) is not None and not (held or self._observed or self._due):
            # The end record says when it started; nothing is held any more.
            self._flush_at = math.inf
            if self._idle is not None:
                self._idle.deadline = math.inf
        self._submit(record, done, run)

    def started(self, run: Run, now: float) -> None:
        """*run* started running: record it, with its deadline (contract §16).

        Other runtimes sharing the store then read ``running`` for it, and
        never answer "running" past its deadline. Not a durability point:
        nobody waits for this record, so it is held until the next batch is
        written, or for ``RUNNING_RECORD_DELAY`` seconds at most. A run that
        ends before then needs none: its end record says when it started.
        """
        run.started_at = self._records.stamp()
        if run.deadline != math.inf:
            run.deadline_at = time.time() + (run.deadline - now)
        if self._dead is not None:
            return  # nothing more is written
        held = self._held
        if not held:
            self._hold_until(now + RUNNING_RECORD_DELAY)
        held[run.run_id] = run

    def observed(self, run_id: str) -> None:
        """This runtime handed *run_id*'s result to its owner: flag it ``observed``
        in the store (contract §16: "a completed result returned by ``wait`` in
        any runtime marks the run observed in the store").

        Not a durability point: nobody waits for the flag. The writer sets it
        after its next batch, within ``RUNNING_RECORD_DELAY`` seconds at most
        (as it writes a held running record); the run's result record is
        committed already, as a result is handed out only once it is.
        """
        if self._dead is not None:
            return  # nothing more is written
        observed = self._observed
        if not observed:
            self._hold_until(trio.current_time() + RUNNING_RECORD_DELAY)
        observed.append(run_id)

    def _hold_until(self, at: float) -> None:
        """Have the writer write what it holds by *at* (Trio clock) at the latest."""
        if at < self._flush_at:
            self._flush_at = at
            idle = self._idle
            if idle is not None:
                idle.deadline = at

    def touch(self, run: Run, at: float) -> bool:
        """Write *run*'s live record at Trio time *at*, not before (contract §19): its
        progress (coalesced by the caller's *at*), a question opened or closed, an
        answer accepted (its ask waits for the commit). False: nothing is written."""
        if self._dead is not None:
            return False
        if self._due.add(run, at):
            self._hold_until(at)
        return True

    def _take_held(self) -> list[_Pending]:
        """The live records of the held runs that are still running, and of the
        runs whose record is due."""
        self._flush_at = math.inf
        held = self._held
        taken: list[Run] = []
        if held:
            self._held = {}
            taken.extend(held.values())
        if self._due:
            due, next_at = self._due.take(trio.current_time(), held)
            taken.extend(due)
            if next_at != math.inf:
                self._hold_until(next_at)
        records = self._records
        pending: list[_Pending] = [
            (*records.live(run), None)
            for run in taken
            if run.state.holds_slot  # running (or input_required), decided or not
        ]
        if self._unwritten:
            # Endings written again once due (before the live records: none is
            # of the same run, which has ended).
            pending[:0] = [(r, _ignore, None) for r in self._unwritten.take(trio.current_time())]
            self._hold_until(self._unwritten.retry_at)
        return pending
