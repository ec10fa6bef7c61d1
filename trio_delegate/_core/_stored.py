"""Runs known only from the store (contract §12, §16): looked up, read, waited for, answered.

A run leaves memory when retention evicts it, and runs of other runtimes
sharing the store were never in it. :class:`StoredRuns` keeps the index a
lookup needs of them (``StoredRun``: owner, subagent, status), fed by
retention (:meth:`StoredRuns.remember`), by the store watcher
(:meth:`StoredRuns.seen`) and by the calls that read the store themselves;
and it answers for them from their stored records: a ``wait`` that reads
the store until the run has ended, the result or error of its record, and
the conversation a continuation carries on.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final, final

import trio

from .._errors import InvalidArgumentsError, StoreError, UnknownRunError
from .._json import CanonicalJson, JsonProblem
from .._results import RunHandle, RunResult
from .._schema import SchemaMismatch, schema_for_tag
from .._status import RunStatus
from .._stores._protocol import RunRecord, StoredRun, is_run_id
from ._adoption import failure_type_of
from ._records import store_error, stored_conversation
from ._remote import Replies, stored_handle, stored_view
from ._retention import TOMBSTONES_PER_RETAINED_RUN, expired_error
from ._run import terminal_error

if TYPE_CHECKING:
    from .._config import Config
    from .._schema import ResultSchema
    from .._stores._protocol import ResultStore
    from ._run import Run
    from ._watcher import Watcher
    from ._writer import Writer

__all__ = ["StoredRuns"]

#: How many of the store's terminal runs attaching indexes between two checkpoints.
_ATTACH_CHUNK: Final = 1_000

#: What a call checks after each ``await``: raises if its parent or runtime closed.
_Check = Callable[[], None]


@final
class StoredRuns:
    """One runtime's view of the runs it knows only from its store, and its answers for them."""

    __slots__ = (
        "_changed",
        "_config",
        "_index",
        "_limit",
        "_schemas",
        "_watcher",
        "_writer",
        "replies",
        "runtime_id",
        "store",
    )

    def __init__(
        self,
        store: ResultStore,
        runtime_id: str,
        config: Config,
        writer: Writer,
        watcher: Watcher,
    ) -> None:
        self.store = store
        self.runtime_id = runtime_id
        self._config = config
        # Where an answer's observation goes: this runtime's own flags with the
        # writer's next batch, other runtimes' runs with the watcher's next poll.
        self._writer = writer
        self._watcher = watcher
        # Terminal runs that are in the store but not in memory, by id: as
        # many as retention remembers evicted ids (contract §8), oldest
        # forgotten first. Bounded, so that a long-lived runtime's memory
        # stays flat however many runs its store holds.
        self._index: OrderedDict[str, StoredRun] = OrderedDict()
        self._limit = TOMBSTONES_PER_RETAINED_RUN * config.retention_max_runs
        # The schemas of evicted completed runs whose results are structured
        # into a host's type: answered from the store, they come back as it.
        self._schemas: dict[str, ResultSchema] = {}
        # Events that wake waits on runs the watcher sees change.
        self._changed: dict[str, trio.Event] = {}
        # Answers to questions of other runtimes' runs (contract §19).
        self.replies = Replies(store, config, watcher)

    # -- the index ---------------------------------------------------------------

    async def attached(self, terminal: Sequence[tuple[str, StoredRun]]) -> None:
        """The store's *terminal* runs (oldest first) as this runtime attached to it:
        lookups know the newest of them, as many as the index holds.

        A checkpoint every :data:`_ATTACH_CHUNK` runs: a store of any size is
        indexed without one long step of the event loop (contract §15).
        """
        newest = terminal[-self._limit :]
        for start in range(0, len(newest), _ATTACH_CHUNK):
            for run_id, stored in newest[start : start + _ATTACH_CHUNK]:
                self._remember(run_id, stored)
            await trio.lowlevel.checkpoint()

    def remember(self, run: Run) -> None:
        """*run* left memory (retention): keep what lookups need to find it in the store."""
        talk = run.talk
        progress = None if talk is None else talk.latest()
        self._remember(
            run.run_id,
            StoredRun(run.owner, run.subagent.name, run.status, run.usage(), progress),
        )
        schema = run.schema
        if schema is not None and schema.target is not None and run.status is RunStatus.COMPLETED:
            self._schemas[run.run_id] = schema

    def found(self, record: RunRecord) -> None:
        """A call read *record* from the store: from now on lookups know its run.

        A ``wait`` reads the store itself, ahead of the watcher: without this,
        ``status`` and ``cancel`` would answer from a view that may not hold
        the run yet, and call unknown a run the ``wait`` just found (contract
        §16). This runtime's own live runs are in memory; its ended ones are
        remembered when retention evicts them, and again once read (the
        index may have forgotten them since).
        """
        if record.runtime_id != self.runtime_id or record.status.is_terminal:
            self._remember(record.run_id, stored_view(record, self.replies.answered))

    def find(self, run_id: str, owner: str) -> StoredRun | None:
        """The stored terminal run *run_id* if it belongs to *owner*."""
        stored = self._index.get(run_id)
        if stored is None or stored.owner != owner:
            return None
        return stored

    def seen(self, record: RunRecord) -> None:
        """The store watcher read *record*, as the store holds it now: lookups know it,
        and waits on its run wake."""
        self.found(record)
        event = self._changed.pop(record.run_id, None)
        if event is not None:
            event.set()

    # -- reading the store ---------------------------------------------------------

    async def load(self, run_id: str) -> RunRecord | None:
        """The stored record of *run_id*.

        Raises:
            StoreError: the store could not be read.
        """
        try:
            return await self.store.get(run_id)
        except Exception as exc:
            raise store_error(exc, f"read run {run_id}", run_id) from None

    async def read(self, run_id: str) -> RunRecord:
        """The stored record of a run a lookup found in the store.

        Raises:
            ExpiredRunError: the store's own retention pruned it meanwhile.
            StoreError: the store could not be read.
        """
        record = await self.load(run_id)
        if record is None:
            raise expired_error(run_id, self._config)
        return record

    async def admitted_elsewhere(
        self, run_id: str, owner: str, unknown: UnknownRunError, check: _Check
    ) -> StoredRun:
        """The run *run_id* of *owner* that another runtime sharing the store admitted.

        This runtime's view of the store trails a commit elsewhere (contract
        §16), and a run admitted elsewhere while still live is not in it at
        all: an id this runtime has never seen is read from the store itself
        before it is called unknown. *check* runs once the store answered.

        Raises:
            UnknownRunError: *unknown*, when the store does not hold it for *owner*
                either.
            StoreError: the store could not be read.
            RuntimeClosedError: from *check*.
        """
        # An expired id too: retention evicted it, and the index that lookups
        # use may have forgotten it since, but the store may hold it still.
        if not is_run_id(run_id):
            raise unknown
        record = await self.load(run_id)
        check()
        if record is None or record.owner != owner:
            raise unknown
        self.found(record)  # status and cancel know it from now on
        return stored_view(record, self.replies.answered)

    async def carried(self, run_id: str, check: _Check) -> tuple[str, CanonicalJson]:
        """The subagent and whole conversation of stored run *run_id*, for a continuation.

        *check* runs each time the store answered.

        Raises:
            InvalidArgumentsError: the run has not ended, or its chain of
                continuations cannot be followed (see :meth:`conversation`).
            ExpiredRunError, StoreError: as for :meth:`read`.
            RuntimeClosedError: from *check*.
        """
        record = await self.read(run_id)
        check()  # it may have closed while the store answered
        if not record.status.is_terminal:
            raise InvalidArgumentsError(
                f"run {run_id} is still {record.status.value} (in another runtime); only "
                "a finished run can be continued: wait for it first"
            )
        try:
            # Rebuilt along its chain of continuations (contract §12).
            carried = await self.conversation(record, self._config.max_nesting_depth)
        except (JsonProblem, TypeError) as exc:  # pragma: no cover - checked when recorded
            raise InvalidArgumentsError(
                f"the conversation of run {run_id} cannot be carried on: {exc}"
            ) from None
        check()  # it may have closed while the store answered
        return record.subagent, carried

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

    # -- waiting and answering -----------------------------------------------------

    async def wait(self, run_id: str, limit: float | None, check: _Check) -> RunRecord | RunHandle:
        """``wait`` for a run known from the store: ended, or live in another runtime.

        Each look reads the store itself (so ``timeout=0`` is the fresh
        answer); between looks the wait sleeps until the store watcher sees
        the run change, or a poll interval passes. A run past its recorded
        deadline is waited for until its end is recorded (contract §16).
        *check* runs each time the store answered.

        Returns:
            the run's terminal record (a completed one is flagged observed in
            the store), or its handle if *limit* seconds passed first, or at
            once while it waits for an answer (contract §19).

        Raises:
            ExpiredRunError, StoreError: as for :meth:`read`.
            RuntimeClosedError: from *check*.
        """
        ends = None if limit is None else trio.current_time() + limit
        while True:
            record = await self.read(run_id)
            check()
            self.found(record)  # the freshest answer status and cancel can give
            if record.status.is_terminal:
                if record.status is RunStatus.COMPLETED:
                    if record.runtime_id != self.runtime_id:
                        self._watcher.mark_observed(run_id)  # its owner's parent counts it
                    elif not record.observed:
                        self._writer.observed(run_id)  # this runtime's, evicted from memory
                return record
            now = trio.current_time()
            overdue = record.deadline_at is not None and time.time() >= record.deadline_at
            view = stored_view(record, self.replies.answered)
            if view.questions or (ends is not None and now >= ends and not overdue):
                # Waiting for an answer: parent and child must not wait on each
                # other (contract §19), whatever the timeout.
                return stored_handle(run_id, view)
            pause = self.store.poll_interval
            if ends is not None and not overdue:
                pause = min(pause, ends - now)
            await self._changed_within(run_id, pause)

    def answer(self, record: RunRecord) -> RunResult:
        """The result of the stored terminal run *record*, or its error.

        Raises:
            RunFailedError, RunCancelledError, RunTimedOutError: the run did
                not complete.
            StoreError: its result no longer fits the type it was structured
                into (a store changed by something else).
        """
        if record.status is RunStatus.COMPLETED:
            value = record.final_result
            schema = self._schemas.get(record.run_id)
            if schema is None and record.result_type is not None:
                # After a restart: the type the result was structured into,
                # when this process knows it (contract §5).
                schema = schema_for_tag(record.result_type)
                if schema is not None:
                    try:
                        value = schema.structure(value)
                    except SchemaMismatch as exc:
                        raise StoreError(
                            f"the stored result of run {record.run_id} does not fit its type "
                            f"{schema.target!r} any more ({exc}); the store was changed by "
                            "something else",
                            run_id=record.run_id,
                        ) from None
                    schema = None
            if schema is not None:
                value = schema.structure(value)
            return RunResult(record.run_id, record.subagent, record.task_summary, value)
        raise terminal_error(
            record.run_id,
            record.subagent,
            record.status,
            record.error_type,
            record.error_message,
            failure_type_of(record),
        )

    async def _changed_within(self, run_id: str, timeout: float) -> None:
        """Until the watcher sees *run_id* change, or *timeout* seconds pass."""
        changed = self._changed
        event = changed.get(run_id)
        if event is None:
            event = changed[run_id] = trio.Event()
        try:
            with trio.move_on_after(timeout):
                await event.wait()
        finally:
            # The last wait on a run that did not change: a run that never
            # changes again keeps no wake-up once nobody waits on it.
            if changed.get(run_id) is event and not event.statistics().tasks_waiting:
                del changed[run_id]

    def replied(self, run_id: str, stored: StoredRun) -> None:
        """This runtime answered a question of *run_id*: its view is *stored* now."""
        self._remember(run_id, stored)

    def _remember(self, run_id: str, stored: StoredRun) -> None:
        index = self._index
        known = index.get(run_id)
        if known is not None and known.status.is_terminal and not stored.status.is_terminal:
            # A terminal record never changes: a live one read before it
            # (a watcher's batch that raced a wait's read) is stale.
            return
        index[run_id] = stored
        index.move_to_end(run_id)
        if len(index) > self._limit:
            forgotten, _ = index.popitem(last=False)
            self._schemas.pop(forgotten, None)
