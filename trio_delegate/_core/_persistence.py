"""A runtime's side of durability (contract §12, §15): the persistence boundary.

Durability points:

* admission — ``start``/``delegate`` return only once the run's admission
  record is committed, and a run starts only then (see ``_scheduler``);
* settlement — a decided run commits (its waiters wake) only once its
  terminal record is committed, so a result handed to a caller is durable. A
  pending run's cancellation commits at once; its record follows.

Every write goes through one writer task that commits whatever is pending in
one batch (group commit): under load, many runs share one commit.

The boundary never dies and never leaves anyone waiting: whatever a store
raises becomes a :class:`StoreError` for the records concerned only (a batch
that fails is split until the records that fail alone are found), the writer
survives, and if it is stopped anyway (a ``KeyboardInterrupt`` in the store,
say) every waiter — queued or in flight — is answered with a
``StoreError`` first, as is every write asked for afterwards.
"""

from __future__ import annotations

import contextlib
import datetime
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol, cast, final

import attrs
import trio

from .._errors import InvalidArgumentsError, StoreError
from .._json import CanonicalJson
from .._status import RunStatus
from .._stores._protocol import ChangeBatch, ResultStore, RunRecord, StoredRun, fold
from ._adoption import Conflict
from ._run import Outcome, conversation_json, safe_message

if TYPE_CHECKING:
    from .._schema import ResultSchema
    from ._events import RunEvents
    from ._run import Run

__all__ = [
    "RUNNING_RECORD_DELAY",
    "Persister",
    "WatchHost",
    "WriteStats",
    "stored_conversation",
]

#: A write that fails after this many seconds failed for the store's sake
#: (timeouts), not for one of its records: its batch is not split further.
_SLOW_FAILURE_SECONDS: Final = 0.5

#: At most this many runs found only in the store are remembered for lookups.
_INDEX_LIMIT: Final = 100_000

#: A run's ``running`` record waits at most this long (seconds) for a batch to
#: go with: other runtimes' views may trail by at most 1 s (contract §16),
#: which leaves the poll interval (at most 0.5 s by default) and then some.
RUNNING_RECORD_DELAY: Final = 0.25

_Done = Callable[[StoreError | None], None]


class WatchHost(Protocol):
    """What the store watcher tells the runtime."""

    def own_record(self, record: RunRecord) -> None:
        """The store's record of one of this runtime's runs changed (another runtime
        may have flagged it, or recorded it as ended)."""

    def lease_lost(self, expired: bool = False) -> None:
        """The store stayed unreachable for most of this runtime's lease
        (*expired*: for all of it)."""


@final
@attrs.define
class WriteStats:
    """How the writer batched its commits (for benchmarks and diagnostics)."""

    commits: int = 0
    records: int = 0
    largest_batch: int = 0
    failed_records: int = 0

    @property
    def mean_batch(self) -> float:
        return self.records / self.commits if self.commits else 0.0


#: A record waiting for the writer, and who to tell when it is committed.
_Pending = tuple[RunRecord, _Done]

#: The status of every admission record (an enum member read through its class
#: costs about 50 ns on CPython 3.11, a module global about 10 ns).
_PENDING: Final = RunStatus.PENDING
_FAILED: Final = RunStatus.FAILED


@final
class _Answer:
    """The writer's answer about one admission record, waited for uninterruptibly.

    The caller parks until the writer calls it. A cancellation cannot end the
    wait (the caller meets it at its next checkpoint, with its handle), as if
    the wait were in a shielded cancel scope; a ``KeyboardInterrupt`` for a
    waiting main task ends it at once, as it would there. Parking directly
    saves the event and the shielded scope (entering and leaving one cost
    about 7 µs per admission).
    """

    __slots__ = ("_answered", "_error", "_on_durable", "_task")

    def __init__(self, on_durable: Callable[[], None]) -> None:
        self._on_durable = on_durable
        self._answered = False
        self._error: StoreError | None = None
        self._task: trio.lowlevel.Task | None = None

    def __call__(self, error: StoreError | None) -> None:
        """The writer's answer: committed (``None``) or the error."""
        if error is None:
            self._on_durable()
        else:
            self._error = error
        self._answered = True
        task = self._task
        if task is not None:
            self._task = None
            trio.lowlevel.reschedule(task)

    async def wait(self) -> None:
        """Until the answer; a cancellation does not end it.

        Raises:
            StoreError: the record could not be committed.
        """
        if self._answered:  # answered at once (a stopped writer)
            await trio.lowlevel.cancel_shielded_checkpoint()
        else:
            self._task = trio.lowlevel.current_task()
            await trio.lowlevel.wait_task_rescheduled(self._abort)
        if self._error is not None:
            raise self._error

    def _abort(self, raise_cancel: trio.lowlevel.RaiseCancelT) -> trio.lowlevel.Abort:
        # Trio asks once per wait, for a cancellation or a KeyboardInterrupt;
        # raise_cancel raises the one it is for (it has no other effect).
        try:
            raise_cancel()
        except trio.Cancelled:
            return trio.lowlevel.Abort.FAILED  # keep waiting, as if shielded
        except BaseException:
            pass
        # A KeyboardInterrupt: stop waiting (Trio raises it in the caller).
        self._task = None
        return trio.lowlevel.Abort.SUCCEEDED


@final
class _WallStamp:
    """``wall_clock_now()`` for records, formatted at most once per millisecond.

    A record's times are for people to read and carry milliseconds; formatting
    a ``datetime`` costs about 1.7 µs, twice per run. The text is made from the
    same millisecond it is kept for, so it is exactly what ``wall_clock_now``
    gives during that millisecond.
    """

    __slots__ = ("_ms", "_text")

    def __init__(self) -> None:
        self._ms = -1
        self._text = ""

    def __call__(self) -> str:
        ms = time.time_ns() // 1_000_000
        if ms != self._ms:
            self._ms = ms
            # ms / 1000 is exact to well under a microsecond, which
            # fromtimestamp rounds to: the millisecond comes back unchanged.
            self._text = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).isoformat(
                timespec="milliseconds"
            )
        return self._text


def _ignore(error: StoreError | None) -> None:
    pass


def store_error(exc: BaseException, what: str, run_id: str | None = None) -> StoreError:
    """*exc*, raised by a store, as the ``StoreError`` callers get."""
    if isinstance(exc, StoreError):
        return exc
    error = StoreError(
        f"the store failed to {what}: {type(exc).__name__}: {safe_message(exc)}; the store "
        "may be broken or full: check it, then try again",
        run_id=run_id,
    )
    error.__cause__ = exc
    return error


@final
class Persister:
    """Writes one runtime's records to its store and answers for stored runs."""

    __slots__ = (
        "_changed",
        "_dead",
        "_flagged",
        "_flags",
        "_flush_at",
        "_held",
        "_idle",
        "_ignores_writes",
        "_in_process",
        "_index",
        "_lapsed",
        "_observed",
        "_receive",
        "_renewal",
        "_renewed_at",
        "_schemas",
        "_send",
        "_splices",
        "_stamp",
        "_writing",
        "events",
        "runtime_id",
        "stats",
        "store",
    )

    def __init__(self, store: ResultStore, runtime_id: str) -> None:
        self.store = store
        self.runtime_id = runtime_id
        # What the store declares it can do (ResultStore); anything but True
        # is read as False.
        # A store that can leave out what this runtime wrote itself spares the
        # watcher reading every record it wrote back (and waking for them).
        self._ignores_writes = store.ignores_writes is True
        # A splicing store takes a result or transcript as the canonical JSON
        # text the runtime holds (see _codec.encode_state); any other store
        # gets plain JSON data, as the protocol says.
        self._splices = store.splices_json is True
        # A store shared only within this process wakes its watcher on every
        # write: it needs no polling, no timer that would move a mock clock,
        # and no sweeps (its runtimes attach and detach in this process).
        self._in_process = store.in_process is True
        self.stats = WriteStats()
        self._stamp = _WallStamp()
        self.events: RunEvents | None = None
        self._send, self._receive = trio.open_memory_channel[_Pending](math.inf)
        # The batch being written, answered if the writer is stopped mid-way.
        self._writing: list[_Pending] = []
        # Runs whose running record is held for the next batch (see started),
        # when it is due at the latest, and the writer's wait for records.
        self._held: dict[str, Run] = {}
        self._flush_at = math.inf
        self._idle: trio.CancelScope | None = None
        # This runtime's runs whose results it handed out, to be flagged
        # observed in the store after the next batch (see observed).
        self._observed: list[str] = []
        # Set once the writer can write no more: every later write is
        # answered with it at once.
        self._dead: StoreError | None = None
        # Terminal runs that are in the store but not in memory, by id.
        self._index: OrderedDict[str, StoredRun] = OrderedDict()
        # The schemas of evicted completed runs whose results are structured
        # into a host's type: answered from the store, they come back as it.
        self._schemas: dict[str, ResultSchema] = {}
        # Flags to set on other runtimes' runs (cancel requests, observations),
        # sent by the watcher; and events that wake waits on such runs.
        self._flags: list[tuple[str, str]] = []
        self._flagged = trio.Event()
        self._changed: dict[str, trio.Event] = {}
        # When a sweep last renewed this runtime's lease (Trio clock), and
        # what the lease guard waits on once it has stopped the live runs.
        self._renewed_at = 0.0
        self._renewal = trio.Event()
        # Whether this runtime's lease may have run out at some point (a
        # stopped process, a long cut): from then on, each ending it writes
        # is checked against the store (see _adoption). Sticky.
        self._lapsed = False

    async def attach(self) -> tuple[str, ...]:
        """Attach to the store; returns the ids it marked interrupted.

        Raises:
            StoreError: the store could not be opened.
        """
        try:
            snapshot = await self.store.attach(self.runtime_id)
        except Exception as exc:
            raise store_error(exc, "open") from None
        for run_id, stored in snapshot.terminal:
            self._remember(run_id, stored)
        # Attached: the lease is as fresh as it gets (the watcher renews it).
        self._renewed_at = trio.current_time()
        return snapshot.interrupted

    async def detach(self) -> None:
        """Detach from the store (shielded by the caller); failures are not raised.

        Every run has been recorded by now; a store that cannot say goodbye
        loses nothing, and the runtime's exit must not be masked by it.
        """
        with contextlib.suppress(Exception):
            await self.store.detach(self.runtime_id)

    # -- the writer ----------------------------------------------------------

    async def run_writer(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
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
                            break
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
                    written = fold([record for record, _ in batch])
                    ignored: list[str] = []
                    unknown: list[RunRecord] = []
                    failures = await self._write(written, ignored, unknown)
                    if ignored or (unknown and self._may_be_written_off()):
                        # The endings the store did not keep: another one stood.
                        failures.update(await self._conflicts(ignored, unknown, failures))
                    self._writing = []
                    if failures:
                        for record, done in batch:
                            done(failures.get(record.run_id))
                    else:
                        for _, done in batch:
                            done(None)
                    await self._flag_observed(observed)
                # Closed: what was observed since the last batch.
                observed, self._observed = self._observed, []
                await self._flag_observed(observed)
        except BaseException as exc:
            self._stop(exc)
            raise

    async def _write(
        self, batch: Sequence[RunRecord], ignored: list[str], unknown: list[RunRecord]
    ) -> dict[str, StoreError]:
        """Write *batch*; the errors of the records that could not be written, by run id.

        The runs whose ending the store says it ignored (another one stood)
        are added to *ignored*; the records of a write the store could not
        say that of (it returned ``None``), to *unknown*.

        One bad record never fails the others. When the store names the
        record it could not write (a ``StoreError`` with its ``run_id``), that
        record fails and the rest is written again. Otherwise a batch that
        failed quickly is split in two and each half written again, until the
        records that fail on their own are found. A failure that took long
        (an unreachable server's timeouts) is the store's, not a record's: the
        whole batch fails at once rather than time out once per record.
        """
        started = time.perf_counter()
        try:
            answer = await self.store.write(batch)
        except Exception as exc:
            elapsed = time.perf_counter() - started
            named = exc.run_id if isinstance(exc, StoreError) else None
            if named is not None and any(record.run_id == named for record in batch):
                failures = self._failed([r for r in batch if r.run_id == named], exc)
                rest = [record for record in batch if record.run_id != named]
                if rest:
                    failures.update(await self._write(rest, ignored, unknown))
                return failures
            if len(batch) == 1 or elapsed >= _SLOW_FAILURE_SECONDS:
                return self._failed(batch, exc)
        else:
            stats = self.stats
            stats.commits += 1
            stats.records += len(batch)
            stats.largest_batch = max(stats.largest_batch, len(batch))
            events = self.events
            if events is not None:
                events.committed(len(batch), time.perf_counter() - started)
            if type(answer) is list and not answer:
                return {}  # the common answer: nothing ignored
            found = _ignored_endings(answer, batch)
            if found is None:
                unknown.extend(batch)
            else:
                ignored.extend(found)
            return {}
        middle = len(batch) // 2
        failures = await self._write(batch[:middle], ignored, unknown)
        failures.update(await self._write(batch[middle:], ignored, unknown))
        return failures

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
                    await store.mark_observed(run_id, observed_by=self.runtime_id)
                else:
                    await store.mark_observed(run_id)
            except Exception:
                self._observed[:0] = run_ids[index:]
                return

    def _note_gap(self, now: float) -> None:
        """A sweep renewed the lease at *now*: note if it had gone without for long."""
        lease = self.store.lease_seconds
        if lease is not None and now - self._renewed_at >= lease / 2:
            self._lapsed = True

    def _may_be_written_off(self) -> bool:
        """Whether another runtime may have recorded this runtime's runs as interrupted.

        Only once its lease may have run out: a runtime that kept renewing
        its lease cannot have been written off, and its writes are not checked.
        """
        if not self._lapsed and self.store.lease_seconds is not None:
            self._note_gap(trio.current_time())
        return self._lapsed

    async def _conflicts(
        self,
        ignored: Iterable[str],
        unknown: Iterable[RunRecord],
        failures: dict[str, StoreError],
    ) -> dict[str, StoreError]:
        """The endings just written that the store did not keep: another one stood.

        The store leaves a terminal record alone; the one it holds is read
        back and comes back as a :class:`Conflict` for the run to adopt. The
        runs of *ignored* the store named itself; the endings of *unknown*
        went to a store that could not say, and are each read back.
        """
        conflicts: dict[str, StoreError] = {}
        for run_id in ignored:
            try:
                stored = await self.store.get(run_id)
            except Exception as exc:
                # The store kept another ending, which cannot be read now: the
                # run's own ending is not its record and is not handed out.
                conflicts[run_id] = store_error(exc, f"read run {run_id}", run_id)
                continue
            if stored is not None and stored.status.is_terminal:
                conflicts[run_id] = Conflict(stored)
        for record in unknown:
            if not record.status.is_terminal or record.run_id in failures:
                continue
            try:
                stored = await self.store.get(record.run_id)
            except Exception:
                continue  # unreadable now: the run ends as it decided
            if (
                stored is not None
                and stored.status.is_terminal
                and (stored.status, stored.error_type) != (record.status, record.error_type)
            ):
                conflicts[record.run_id] = Conflict(stored)
        return conflicts

    def _failed(self, records: Sequence[RunRecord], exc: Exception) -> dict[str, StoreError]:
        self.stats.failed_records += len(records)
        return {
            record.run_id: store_error(exc, f"record run {record.run_id}", record.run_id)
            for record in records
        }

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
        for _, done in pending:
            done(dead)

    def close(self) -> None:
        """No more writes: the writer finishes what is queued, then returns."""
        self._send.close()

    def _submit(self, record: RunRecord, done: _Done) -> None:
        dead = self._dead
        if dead is None:
            try:
                self._send.send_nowait((record, done))
            except trio.ClosedResourceError:
                dead = StoreError(
                    "the runtime's store is closed: nothing more can be recorded; open a "
                    "new runtime"
                )
            else:
                return
        done(dead)

    # -- the durability points ------------------------------------------------------

    async def admit(self, run: Run, on_durable: Callable[[], None]) -> None:
        """Commit *run*'s admission record. Shielded: it is all or nothing.

        *on_durable* is called from the writer the moment the record is
        committed, before this call's caller wakes: the run can start then.

        Raises:
            StoreError: the record could not be committed.
        """
        answer = _Answer(on_durable)
        record = self.record_of(run, _PENDING, None)
        run.admitted_at = record.admitted_at
        if run.history is not None:
            run.history_record = record.history
        self._submit(record, answer)
        await answer.wait()

    def settle(self, run: Run, outcome: Outcome, done: _Done = _ignore) -> None:
        """Queue *run*'s terminal record; *done* is called once it is committed (or failed)."""
        try:
            record = self.record_of(run, outcome.status, outcome)
        except Exception as exc:  # pragma: no cover - records are built from checked data
            done(store_error(exc, f"record run {run.run_id}", run.run_id))
            return
        run.history_record = None  # the terminal record has taken it
        held = self._held
        if held and held.pop(run.run_id, None) is not None and not held and not self._observed:
            # The end record says when it started; nothing is held any more.
            self._flush_at = math.inf
            if self._idle is not None:
                self._idle.deadline = math.inf
        self._submit(record, done)

    def started(self, run: Run, now: float) -> None:
        """*run* started running: record it, with its deadline (contract §16).

        Other runtimes sharing the store then read ``running`` for it, and
        never answer "running" past its deadline. Not a durability point:
        nobody waits for this record, so it is held until the next batch is
        written, or for ``RUNNING_RECORD_DELAY`` seconds at most. A run that
        ends before then needs none: its end record says when it started.
        """
        run.started_at = self._stamp()
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

    def _take_held(self) -> list[_Pending]:
        """The running records of the held runs that are still running."""
        self._flush_at = math.inf
        held = self._held
        if not held:
            return []
        self._held = {}
        return [
            (self.record_of(run, RunStatus.RUNNING, None), _ignore)
            for run in held.values()
            if run.status is RunStatus.RUNNING
        ]

    def record_of(self, run: Run, status: RunStatus, outcome: Outcome | None) -> RunRecord:
        """The record of *run* with *status* (and, for an end, its *outcome*).

        A terminal record takes the history and admission time of the run's
        admission record: a continuation's history is not decoded again.
        (Only those are kept between the two records: a whole record per live
        run costs more in garbage collection, with thousands of runs live,
        than building the rest again.)
        """
        final_result = transcript = None
        error_type = error_message = failure = None
        ended_at = None
        if outcome is not None:
            error_type, error_message = outcome.error_details(run.timeout)
            if status is _FAILED:
                failure = outcome.failure_type.kind()
            result = outcome.result
            if self._splices:
                # The store splices the canonical text in: nothing decoded here
                # to be encoded again there.
                final_result = result
                transcript = cast(Any, outcome.transcript)
            else:
                if result is not None:
                    final_result = result.scalar if result.immutable else result.copy()
                if outcome.transcript is not None:
                    transcript = tuple(outcome.transcript.copy())
            ended_at = self._stamp()
        continues = run.continues
        if continues is not None:
            # A continuation's history is the conversation of the run it
            # continues, which the store holds already: recorded by reference,
            # so a chain is stored in space linear in its length (contract §12).
            history: tuple[Any, ...] = ()
        elif run.history_record is not None:
            history = run.history_record
        else:
            history = tuple(run.history.copy()) if run.history is not None else ()
        return RunRecord(
            run_id=run.run_id,
            runtime_id=self.runtime_id,
            owner=run.owner,
            subagent=run.subagent.name,
            task=run.task,
            task_summary=run.summary(),
            status=status,
            history=history,
            replaces=run.replaces,
            final_result=final_result,
            error_type=error_type,
            error_message=error_message,
            failure=failure,
            transcript=transcript,
            admitted_at=run.admitted_at or self._stamp(),
            ended_at=ended_at,
            started_at=run.started_at,
            deadline_at=run.deadline_at,
            continues=continues,
            result_type=run.schema.type_tag if run.schema is not None else None,
        )

    # -- other runtimes sharing the store (contract §16) ------------------------------

    def request_cancel(self, run_id: str) -> None:
        """Ask the runtime that owns *run_id* to cancel it (sent by the watcher)."""
        self._flag(run_id, "cancel")

    def mark_observed(self, run_id: str) -> None:
        """Tell the runtime that owns *run_id* its result was observed (sent by the watcher)."""
        self._flag(run_id, "observed")

    def _flag(self, run_id: str, flag: str) -> None:
        self._flags.append((run_id, flag))
        self._flagged.set()

    async def changed(self, run_id: str, timeout: float) -> None:
        """Wait until the watcher sees *run_id* change, or *timeout* seconds pass."""
        event = self._changed.get(run_id)
        if event is None:
            event = self._changed[run_id] = trio.Event()
        with trio.move_on_after(timeout):
            await event.wait()

    async def run_watcher(
        self, host: WatchHost, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Follow what other runtimes do in the store, for as long as the runtime is open.

        Every poll interval (at once on a notification, where the store has
        them): send queued flags, renew this runtime's liveness and mark the
        runs of gone runtimes interrupted (``sweep``), and read the changes
        since the last look: flags other runtimes set on this runtime's runs
        go to *host*; other runtimes' runs update the view ``status`` and
        ``cancel`` answer from, and wake waits on them. A store that cannot be
        reached is tried again at the next poll; when a leased store stays
        unreachable for most of its lease, *host* stops its live runs.
        """
        store = self.store
        in_process = self._in_process
        interval = math.inf if in_process else store.poll_interval
        lease = store.lease_seconds
        margin = max(2 * store.poll_interval, 0.2 * lease) if lease is not None else 0.0
        cursor = 0
        try:
            cursor = (await store.changes(None)).cursor
            for status in (RunStatus.PENDING, RunStatus.RUNNING):
                for record in await store.list_runs(status=status, limit=1_000_000):
                    self._see(host, record)
        except Exception:
            pass
        task_status.started()
        self._renewed_at = trio.current_time()
        async with trio.open_nursery() as nursery:
            if lease is not None:
                nursery.start_soon(self._guard_lease, host, lease - margin, lease)
            await self._watch(host, cursor, interval, in_process)

    async def _changes(self, cursor: int) -> ChangeBatch:
        """The changes after *cursor* this runtime did not write itself, where the store can
        leave those out (it knows them already); else every change."""
        if self._ignores_writes:
            return await self.store.changes(cursor, ignore_writes_of=self.runtime_id)
        return await self.store.changes(cursor)

    async def _guard_lease(self, host: WatchHost, within: float, lease: float) -> None:
        """Stop the runtime's live runs when no sweep has renewed its lease for *within* s.

        A task of its own: a sweep against an unreachable server can block
        far longer than the lease (connection attempts, timeouts).
        """
        while True:
            await trio.sleep_until(self._renewed_at + within)
            now = trio.current_time()
            if self._renewed_at + within <= now:
                self._lapsed = True
                host.lease_lost(expired=now >= self._renewed_at + lease)
                renewal = self._renewal = trio.Event()
                await renewal.wait()  # a sweep got through again: guard anew

    async def _watch(self, host: WatchHost, cursor: int, interval: float, in_process: bool) -> None:
        store = self.store
        while True:
            await self._send_flags()
            try:
                if not in_process:
                    await store.sweep(self.runtime_id)
            except Exception:
                pass
            else:
                now = trio.current_time()
                self._note_gap(now)
                self._renewed_at = now
                self._renewal.set()
            try:
                batch = await self._changes(cursor)
            except Exception:
                pass
            else:
                cursor = batch.cursor
                for record in batch.records:
                    self._see(host, record)
            await self._wait_for_news(cursor, interval)

    async def _wait_for_news(self, cursor: int, interval: float) -> None:
        """Until the store has changed after *cursor*, a flag is queued, or *interval* passed."""
        store = self.store

        async def changed(nursery: trio.Nursery) -> None:
            with contextlib.suppress(Exception):  # the poll goes on regardless
                if self._ignores_writes:
                    # This runtime's own writes are no news to it.
                    await store.wait_changes(cursor, interval, ignore_writes_of=self.runtime_id)
                else:
                    await store.wait_changes(cursor, interval)
            nursery.cancel_scope.cancel()

        async def flagged(nursery: trio.Nursery) -> None:
            await self._flagged.wait()
            nursery.cancel_scope.cancel()

        with trio.move_on_after(interval):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(changed, nursery)
                nursery.start_soon(flagged, nursery)

    async def _send_flags(self) -> None:
        flags, self._flags = self._flags, []
        self._flagged = trio.Event()
        for index, (run_id, flag) in enumerate(flags):
            try:
                if flag == "cancel":
                    await self.store.request_cancel(run_id)
                else:
                    await self.store.mark_observed(run_id)
            except Exception:
                # Kept, in order, for the next poll.
                self._flags[:0] = flags[index:]
                return

    def _see(self, host: WatchHost, record: RunRecord) -> None:
        """One record as the store holds it now."""
        run_id = record.run_id
        if record.runtime_id == self.runtime_id:
            host.own_record(record)
        else:
            self._remember(run_id, StoredRun(record.owner, record.subagent, record.status))
        event = self._changed.pop(run_id, None)
        if event is not None:
            event.set()

    # -- runs that are only in the store -------------------------------------------

    def remember(self, run: Run) -> None:
        """*run* left memory (retention): keep what lookups need to find it in the store."""
        self._remember(run.run_id, StoredRun(run.owner, run.subagent.name, run.status))
        schema = run.schema
        if schema is not None and schema.target is not None and run.status is RunStatus.COMPLETED:
            self._schemas[run.run_id] = schema

    def found(self, record: RunRecord) -> None:
        """A call read *record* from the store: from now on lookups know its run.

        A ``wait`` reads the store itself, ahead of the watcher: without this,
        ``status`` and ``cancel`` would answer from a view that may not hold
        the run yet, and call unknown a run the ``wait`` just found (contract
        §16). This runtime's own runs are known already (in memory, or
        remembered when retention evicted them).
        """
        if record.runtime_id != self.runtime_id:
            self._remember(record.run_id, StoredRun(record.owner, record.subagent, record.status))

    def schema_of(self, run_id: str) -> ResultSchema | None:
        """The schema whose type the stored result of *run_id* is structured into, if any."""
        return self._schemas.get(run_id)

    def find(self, run_id: str, owner: str) -> StoredRun | None:
        """The stored terminal run *run_id* if it belongs to *owner*."""
        stored = self._index.get(run_id)
        if stored is None or stored.owner != owner:
            return None
        return stored

    async def conversation(self, record: RunRecord, max_depth: int) -> CanonicalJson:
        """The whole conversation of the stored terminal run *record* (see
        :func:`stored_conversation`).

        A continuation recorded by reference is rebuilt along its chain: back
        to the first run that holds its history (or a transcript) itself,
        then forward, each run adding its task and, if it completed, its
        result. One read per link, and nothing copied twice.

        Raises:
            InvalidArgumentsError: a run of the chain is no longer in the store
                (pruned), has not ended there, or the chain loops (a tampered store).
            StoreError: the store could not be read, or a run of the chain
                belongs to another owner or subagent (a tampered store: its
                conversation is never carried into this one).
            JsonProblem, TypeError: a record of the chain holds data deeper
                than *max_depth* (plus two levels), or no JSON.
        """
        chain = [record]
        seen = {record.run_id}
        while (later := chain[-1]).transcript is None and later.continues is not None:
            earlier_id = later.continues
            earlier = await self.load(earlier_id)
            if earlier is not None and (
                earlier.owner != record.owner or earlier.subagent != record.subagent
            ):
                # A continuation is always of a run of its own owner and
                # subagent (continue_run makes it so): a link elsewhere was
                # written by something else, and would splice another
                # conversation into this one.
                raise StoreError(
                    f"the conversation of run {record.run_id} cannot be carried on: run "
                    f"{later.run_id} is recorded as continuing run {earlier_id}, which belongs "
                    "to another owner or subagent; the store was changed by something else: "
                    "check it, and start a new delegation instead",
                    run_id=record.run_id,
                )
            if earlier is None or not earlier.status.is_terminal or earlier_id in seen:
                state = (
                    "is no longer in the store"
                    if earlier is None
                    else "appears twice in its chain"
                    if earlier_id in seen
                    else f"is {earlier.status.value} in the store"
                )
                raise InvalidArgumentsError(
                    f"the conversation of run {record.run_id} cannot be carried on: run "
                    f"{earlier_id}, whose conversation it continues, {state}; start a new "
                    "delegation instead"
                )
            seen.add(earlier_id)
            chain.append(earlier)
        chain.reverse()
        return stored_conversation(chain, max_depth)

    async def load(self, run_id: str) -> RunRecord | None:
        """The stored record of *run_id*.

        Raises:
            StoreError: the store could not be read.
        """
        try:
            return await self.store.get(run_id)
        except Exception as exc:
            raise store_error(exc, f"read run {run_id}", run_id) from None

    def _remember(self, run_id: str, stored: StoredRun) -> None:
        index = self._index
        known = index.get(run_id)
        if known is not None and known.status.is_terminal and not stored.status.is_terminal:
            # A terminal record never changes: a live one read before it
            # (a watcher's batch that raced a wait's read) is stale.
            return
        index[run_id] = stored
        index.move_to_end(run_id)
        if len(index) > _INDEX_LIMIT:
            forgotten, _ = index.popitem(last=False)
            self._schemas.pop(forgotten, None)


def _ignored_endings(answer: object, batch: Sequence[RunRecord]) -> list[str] | None:
    """The runs of *batch* whose ending the store's ``write`` says it ignored.

    ``None`` where it did not say (a store written before ``write`` returned
    anything) or said something no store of the protocol says (not a
    built-in sequence of at most one id per record): then nothing is known.
    Only built-in containers are read, through their built-in types: a value
    of the store's own making never runs code here.
    """
    if type(answer) is not list and type(answer) is not tuple:
        return None
    ids = cast(Sequence[object], answer)
    if len(ids) > len(batch):
        return None
    endings = {record.run_id for record in batch if record.status.is_terminal}
    return [run_id for run_id in ids if type(run_id) is str and run_id in endings]


def stored_conversation(chain: Sequence[RunRecord], max_depth: int) -> CanonicalJson:
    """The whole conversation of a stored terminal run, as a continuation carries it.

    *chain* is the run and the runs it continues by reference, oldest first
    (:meth:`Persister.conversation` reads them): the first holds its history
    itself, or a transcript. The conversation is that transcript, or the first
    run's history; then each later run (each run, without a transcript) adds
    its task and, if it completed, its result: :func:`conversation_json`, the
    same builder as for a run in memory.

    Raises:
        JsonProblem, TypeError: a record holds data deeper than *max_depth*
            (plus the two levels of a conversation's entries), or no JSON.
    """
    first = chain[0]
    links: Sequence[RunRecord]
    if first.transcript is not None:
        history = CanonicalJson.of(list(first.transcript), max_depth=max_depth + 2)
        links = chain[1:]
    else:
        history = CanonicalJson.of(list(first.history), max_depth=max_depth + 2)
        links = chain
    return conversation_json(
        history,
        [
            (
                link.task,
                CanonicalJson.of(link.final_result, max_depth=max_depth)
                if link.status is RunStatus.COMPLETED
                else None,
            )
            for link in links
        ],
    )
