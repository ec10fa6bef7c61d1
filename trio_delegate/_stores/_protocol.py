"""Durable stores of run records (contract §12, §16): the protocol every store implements.

A store keeps *records*, not live runs: what was admitted, when it started,
how it ended, and the conversation needed to continue it. Live runs never
migrate; a run that was live in a runtime that is gone is marked ``failed``
(interrupted) by the next runtime that notices.

A store may be shared by several runtimes (processes on one host, or hosts
of a fleet). Besides writing and reading records, the protocol lets a
runtime see what the others did (:meth:`ResultStore.changes`), notice the
ones that are gone (:meth:`ResultStore.sweep`) and leave requests on runs it
does not own (:meth:`ResultStore.request_cancel`,
:meth:`ResultStore.mark_observed`).
"""

from __future__ import annotations

import contextlib
import datetime
import math
import re
from collections.abc import Iterable, Sequence
from typing import Any, Final, Protocol, final, runtime_checkable

import attrs

from .._checks import describe
from .._errors import InvalidArgumentsError, StoreError
from .._results import Progress, Question
from .._status import RunStatus
from .._usage import Usage

__all__ = [
    "DEFAULT_MAX_ROWS",
    "DEFAULT_RETENTION_SECONDS",
    "DEFAULT_POLL_INTERVAL",
    "INTERRUPTED_ERROR_TYPE",
    "INVALID_RESULT",
    "RUN_FAILED",
    "MAX_POLL_INTERVAL",
    "ChangeBatch",
    "ResultStore",
    "RunRecord",
    "StoreSnapshot",
    "StoredRun",
    "check_cursor",
    "check_poll_interval",
    "check_runtime_id",
    "check_wait_timeout",
    "fold",
    "interrupted",
    "is_run_id",
    "is_run_id_start",
    "is_runtime_id",
    "terminal_index",
    "wall_clock_now",
]

#: How many ended runs a store keeps by default (``max_rows``), and for how
#: long (``retention_seconds``: 30 days).
DEFAULT_MAX_ROWS: Final = 100_000
DEFAULT_RETENTION_SECONDS: Final = 30 * 24 * 3600.0

#: ``error_type`` of a run that was live when its runtime's process ended.
INTERRUPTED_ERROR_TYPE = "Interrupted"

#: ``RunRecord.failure`` of a failed run: the kind of the error it answers with.
RUN_FAILED: Final = "run_failed"
INVALID_RESULT: Final = "invalid_result"

#: How often a runtime polls ``changes`` and ``sweep`` unless its store says otherwise.
DEFAULT_POLL_INTERVAL: Final = 0.5
#: Contract §16: another runtime's view trails a commit by at most one second.
MAX_POLL_INTERVAL: Final = 1.0
#: Change numbers are 64-bit integers in every database (SQLite INTEGER,
#: PostgreSQL bigint): no cursor a store returns is larger.
_MAX_CURSOR: Final = 2**63 - 1

# Ids are made by the runtime (``_core._ids``): a prefix and 128 random bits
# in lowercase hex. Anything else read from a store was not written by a
# runtime, and must never reach a file name or a query unchecked.
_RUN_ID: Final = re.compile(r"run_[0-9a-f]{32}")
_RUNTIME_ID: Final = re.compile(r"rt_[0-9a-f]{32}")
_QUESTION_ID: Final = re.compile(r"q_[0-9a-f]{32}")
#: The start of a run id: "r", "ru", "run", "run_", then up to 32 hex digits.
_RUN_ID_START: Final = re.compile(r"r(?:u(?:n(?:_[0-9a-f]{0,32})?)?)?")


def is_run_id(value: object) -> bool:
    """Whether *value* has the shape of a run id (``run_`` and 32 lowercase hex digits)."""
    return type(value) is str and _RUN_ID.fullmatch(value) is not None


def is_run_id_start(value: object) -> bool:
    """Whether *value* is the start of a run id (``run_1f``), or a whole one."""
    return type(value) is str and _RUN_ID_START.fullmatch(value) is not None


def is_runtime_id(value: object) -> bool:
    """Whether *value* has the shape of a runtime id (``rt_`` and 32 lowercase hex digits)."""
    return type(value) is str and _RUNTIME_ID.fullmatch(value) is not None


def wall_clock_now() -> str:
    """A wall-clock timestamp for people to read (no behaviour depends on it)."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")


def check_poll_interval(field: str, value: Any) -> float:
    """Check a store's ``poll_interval``: a number of seconds in (0, 1].

    Raises:
        InvalidArgumentsError: it is not.
    """
    ok = (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and math.isfinite(value)
        and 0 < value <= MAX_POLL_INTERVAL
    )
    if not ok:
        raise InvalidArgumentsError(
            f"{field} must be a number of seconds > 0 and <= {MAX_POLL_INTERVAL:g} (another "
            f"runtime's view may trail by at most one second), got {describe(value)}"
        )
    return float(value)


def check_runtime_id(runtime_id: object, where: str, path: str | None) -> str:
    """A runtime id given to a store, checked before it is used for anything.

    Raises:
        StoreError: it is not of the shape open_runtime makes.
    """
    if not is_runtime_id(runtime_id):
        raise StoreError(
            f"the store {where} was given {runtime_id!r} as a runtime id; a runtime id is rt_ "
            "and 32 lowercase hex digits, as open_runtime makes them",
            path=path,
        )
    assert isinstance(runtime_id, str)
    return runtime_id


def check_cursor(cursor: object, where: str | None) -> int:
    """A cursor given to ``changes``/``wait_changes``, checked.

    Raises:
        StoreError: it is not a cursor a store returns (a whole number >= 0).
    """
    if type(cursor) is not int or not 0 <= cursor <= _MAX_CURSOR:
        raise StoreError(
            f"the store {where or 'in memory'} was asked for changes after {describe(cursor)}, "
            "which is not a cursor it returned (a whole number >= 0 that fits 64 bits)",
            path=where,
        )
    return cursor


def check_wait_timeout(timeout: object, where: str | None) -> float:
    """A ``wait_changes`` timeout, checked.

    Raises:
        StoreError: it is not a number of seconds >= 0.
    """
    seconds = math.nan
    if not isinstance(timeout, bool) and isinstance(timeout, int | float):
        with contextlib.suppress(OverflowError):  # an integer of 400 digits does not fit
            seconds = float(timeout)
    if not seconds >= 0:
        raise StoreError(
            f"wait_changes on the store {where or 'in memory'} needs a timeout in seconds "
            f">= 0 that fits a float, got {describe(timeout)}",
            path=where,
        )
    return seconds


@final
@attrs.frozen
class RunRecord:
    """Everything a store keeps about one run; every field is JSON-ready.

    Attributes:
        run_id: the run's id.
        runtime_id: the runtime instance that owns (or owned) the run.
        owner: the owner of the parent that started it.
        subagent: the subagent's name.
        task: the task text (the message, for a continuation).
        task_summary: the summary shown in result envelopes.
        status: the run's status when the record was written.
        history: the conversation it was given; ``()`` for a continuation
            recorded by reference (see *continues*).
        replaces: the run it replaces, if any.
        final_result: the JSON-ready result of a completed run.
        error_type: the error's type name for a failed run.
        failure: the kind of error a failed run answers with: ``"invalid_result"``
            (its result broke its ``final_schema``: ``InvalidResultError``) or
            ``"run_failed"`` (``RunFailedError``), as the runtime that ran it
            decided; ``None`` for any other status, and where no runtime said
            (a run marked interrupted), which a failed run reads as
            ``"run_failed"``.
        error_message: the error's message for a non-completed terminal run.
        transcript: the runner's transcript, if it gave one.
        admitted_at: wall-clock admission time (ISO 8601, UTC).
        ended_at: wall-clock end time, for a terminal run.
        started_at: wall-clock time it started running, once it has.
        deadline_at: Unix time (``time.time()`` scale) at which its child
            deadline passes; ``None`` without a deadline or before it started.
        cancel_requested: a cancellation was requested through the store (by
            any runtime). Sticky: a store never clears it.
        observed: its outcome was handed to its owner (a ``wait`` returned it)
            in some runtime. Sticky: a store never clears it.
        continues: for a continuation, the run whose whole conversation it
            was given; its *history* is then that run's conversation as the
            store holds it (rebuilt along the chain on read), not written
            again with each link: a chain is stored in space linear in its
            length (contract §12).
        usage: what the run and its nested runs spent (contract §20), in its
            terminal record; ``None`` when it reported nothing.
        result_type: for a run whose ``final_schema`` was an attrs class or
            dataclass, that type's tag (its name and a digest of its JSON
            Schema): data, never imported; a runtime structures the stored
            result into the type of that tag it knows, if any.
        questions: the run's open questions (contract §19), oldest first, each
            ``{"question_id", "text", "schema"}``; only in a live record.
        answers: the answers (``{"question_id", "answer"}``) and refusals
            (``{"question_id", "declined": true, "reason"}``) its runtime
            accepted since the run's previous record was committed: an
            accepted answer reaches the child once a record holding it is.
        progress: its latest progress report, ``{"message", "progress",
            "total", "seq"}``, or ``None``.
        answer_requests: answers other runtimes left for its open questions
            (:meth:`ResultStore.post_answer`), each ``{"question_id",
            "answer", "declined", "reason"}``, for its own runtime to apply.
            Kept by the store apart from the record: a write by the run's
            runtime never sets them (it carries none), and clears them once
            no question is open.
    """

    run_id: str
    runtime_id: str
    owner: str
    subagent: str
    task: str
    task_summary: str
    status: RunStatus
    history: tuple[Any, ...] = ()
    replaces: str | None = None
    final_result: Any = None
    error_type: str | None = None
    error_message: str | None = None
    failure: str | None = None
    transcript: tuple[Any, ...] | None = None
    admitted_at: str = ""
    ended_at: str | None = None
    started_at: str | None = None
    deadline_at: float | None = None
    cancel_requested: bool = False
    observed: bool = False
    continues: str | None = None
    result_type: str | None = None
    usage: Usage | None = None
    questions: tuple[Any, ...] = ()
    answers: tuple[Any, ...] = ()
    progress: Any = None
    answer_requests: tuple[Any, ...] = ()

    def progress_report(self) -> Progress | None:
        """The latest progress this record holds, if it is what a runtime writes."""
        data = self.progress
        if not isinstance(data, dict):
            return None
        message = data.get("message")
        seq = data.get("seq")
        if (message is not None and type(message) is not str) or type(seq) is not int or seq < 1:
            return None
        return Progress(message, _measure(data.get("progress")), _measure(data.get("total")), seq)

    def open_questions(self, skip: Any = ()) -> tuple[Question, ...]:
        """The open questions this record holds (but those in *skip*), as a runtime writes them."""
        found = []
        for entry in self.questions:
            if not isinstance(entry, dict):
                continue
            qid, text, schema = entry.get("question_id"), entry.get("text"), entry.get("schema")
            if (
                type(qid) is str
                and _QUESTION_ID.fullmatch(qid)
                and type(text) is str
                and isinstance(schema, dict)
                and qid not in skip
            ):
                found.append(Question(qid, self.run_id, text, schema))
        return tuple(found)


def _measure(value: object) -> float | None:
    """A stored progress figure: a finite number not below zero, else none."""
    if value is None or type(value) is bool or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer past a float's range: not a figure a runtime writes
        return None
    return number if math.isfinite(number) and number >= 0 else None


@final
@attrs.frozen
class StoredRun:
    """What a runtime keeps in memory about a terminal run found in its store.

    Attributes:
        usage: what the run spent (contract §20), when its record says.
        progress: its latest progress report, when its record says (§19).
        questions: its open questions, when it is live in another runtime
            and waits for an answer (its status is then ``input_required``).
    """

    owner: str
    subagent: str
    status: RunStatus
    usage: Usage | None = None
    progress: Progress | None = None
    questions: tuple[Question, ...] = ()


@final
@attrs.frozen
class StoreSnapshot:
    """What a store tells a runtime that attaches to it.

    Attributes:
        terminal: every terminal run in the store (interrupted ones included),
            oldest first.
        interrupted: the ids this attachment marked failed (interrupted).
    """

    terminal: tuple[tuple[str, StoredRun], ...]
    interrupted: tuple[str, ...]


@final
@attrs.frozen
class ChangeBatch:
    """The records changed after a cursor, as :meth:`ResultStore.changes` returns them.

    Attributes:
        cursor: the position to ask from next time (it covers every record
            here, and never moves backwards).
        records: each changed record once, in its current stored form, in
            the order of their latest change (oldest first).
    """

    cursor: int
    records: tuple[RunRecord, ...] = ()


def interrupted(record: RunRecord) -> RunRecord:
    """*record* marked failed because its runtime's process ended while it was live."""
    return attrs.evolve(
        record,
        questions=(),
        answers=(),
        status=RunStatus.FAILED,
        error_type=INTERRUPTED_ERROR_TYPE,
        error_message=(
            f"interrupted: the process running it ended while it was {record.status.value}; "
            "its work is lost and no result exists"
        ),
        ended_at=wall_clock_now(),
    )


@runtime_checkable
class ResultStore(Protocol):
    """What a runtime needs from a durable store.

    Every method is a Trio checkpoint and raises only ``StoreError``.

    Records:

    * ``write`` may be called by many tasks at once; a store commits each
      call in one transaction (the runtime batches what is pending: group
      commit). It never changes a record that is already terminal in the
      store (a later write of that run is ignored), and never clears the
      sticky ``cancel_requested`` and ``observed`` flags.
    * ``write`` returns the ids of the runs whose terminal record it ignored
      because the store held another terminal record of the run (decided in
      the same transaction as the write): the runtime adopts the stored
      record for those. A first terminal record, a live record, and a
      terminal record equal to the one stored are not ignored. ``None``
      means "not known" (a store written before ``write`` returned
      anything): the runtime then reads its endings back when another
      runtime may have recorded them.
    * What a store returns is equal to what was written (plain JSON data).

    Sharing (contract §16):

    * ``poll_interval``: how often (seconds, at most 1) a runtime calls
      ``changes`` and ``sweep``.
    * ``lease_seconds``: ``None`` where a runtime's liveness is exact
      without a lease; else how long a runtime stays alive in the others'
      eyes after its last successful ``sweep``. A runtime that cannot renew
      its lease must stop its live runs before it runs out.

    Capabilities, declared by each store (a store that cannot tell says
    ``False`` to each, and is used as plain JSON data it is read whole):

    * ``splices_json``: ``write`` takes a result and a transcript as the
      runtime's canonical JSON text (``_json.CanonicalJson``), as this
      package's stores encode them, rather than as plain JSON data.
    * ``in_process``: every runtime sharing it lives in this process, and
      ``wait_changes`` returns on every write at once: a runtime needs no
      polling and no ``sweep``.
    * ``ignores_writes``: ``changes`` and ``wait_changes`` honour the keyword
      ``ignore_writes_of`` (a runtime id), leaving out the changes that
      runtime's own ``write`` calls made — a record written by the runtime it
      names, over a row holding no flag the record did not carry — while the
      cursor still moves past them. A runtime's watcher uses it so as not to
      read back (or wake for) what it wrote itself; flags, interruptions and
      every other runtime's writes still show. Such a store's
      ``mark_observed`` also honours the keyword ``observed_by`` (a runtime
      id): a runtime flagging its own run observed, which is no news to it
      either. A store without it is never passed either keyword (it may
      ignore them), and every change is read.
    """

    poll_interval: float
    lease_seconds: float | None

    @property
    def splices_json(self) -> bool:
        """Whether ``write`` takes results and transcripts as canonical JSON text."""

    @property
    def in_process(self) -> bool:
        """Whether every runtime sharing the store lives in this process (no polling)."""

    @property
    def ignores_writes(self) -> bool:
        """Whether ``changes`` and ``wait_changes`` honour ``ignore_writes_of``."""

    async def attach(self, runtime_id: str) -> StoreSnapshot:
        """Register a runtime; mark the live runs of runtimes that are gone as interrupted."""

    async def detach(self, runtime_id: str) -> None:
        """Unregister a runtime that has settled all its runs."""

    async def write(self, records: Sequence[RunRecord]) -> Sequence[str] | None:
        """Insert or replace *records* in one transaction; durable when this returns.

        Returns:
            the run ids among *records* whose terminal record was not kept,
            another terminal record of the run standing in the store; or
            ``None`` where the store cannot tell.
        """

    async def get(self, run_id: str) -> RunRecord | None:
        """The record of *run_id*, or ``None``."""

    async def list_runs(
        self, *, status: RunStatus | None = None, owner: str | None = None, limit: int = 100
    ) -> list[RunRecord]:
        """Records, newest admission first, filtered by status and owner."""

    async def sweep(self, runtime_id: str) -> tuple[str, ...]:
        """Renew *runtime_id*'s liveness; mark the live runs of gone runtimes interrupted.

        Returns:
            the ids it marked failed (interrupted).
        """

    async def changes(
        self, cursor: int | None, *, ignore_writes_of: str | None = None
    ) -> ChangeBatch:
        """Every record written or flagged after *cursor* (``None``: the current position)."""

    async def wait_changes(
        self, cursor: int, timeout: float, *, ignore_writes_of: str | None = None
    ) -> None:
        """Return once changes after *cursor* may exist, or after *timeout* seconds."""

    async def request_cancel(self, run_id: str) -> RunRecord | None:
        """Set ``cancel_requested`` on a live run; the record as stored (``None``: unknown)."""

    async def mark_observed(self, run_id: str, *, observed_by: str | None = None) -> None:
        """Set ``observed`` on *run_id* (nothing happens for an unknown run).

        *observed_by* (passed only to a store that ``ignores_writes``): the
        runtime that flags it, when the run is its own. The change is then
        left out of that runtime's changes, as its own writes are.
        """


def fold(records: Sequence[RunRecord]) -> list[RunRecord]:
    """*records* with each run once, as writing them one after another would leave it.

    The one rule for several records of a run in one batch (a store's
    ``write`` keeps it; the runtime's writer folds its batches by it). A
    run's first terminal record wins over everything after it (a terminal
    record never changes); otherwise its last record does. Flags set by any
    of its records stay set.
    """
    chosen: dict[str, RunRecord] = {}
    for record in records:
        earlier = chosen.get(record.run_id)
        if earlier is None:
            chosen[record.run_id] = record
            continue
        winner = earlier if earlier.status.is_terminal else record
        cancel = earlier.cancel_requested or record.cancel_requested
        observed = earlier.observed or record.observed
        if (winner.cancel_requested, winner.observed) != (cancel, observed):
            winner = attrs.evolve(winner, cancel_requested=cancel, observed=observed)
        chosen[record.run_id] = winner
    if len(chosen) == len(records):
        return list(records)
    return list(chosen.values())


def terminal_index(records: Iterable[RunRecord]) -> tuple[tuple[str, StoredRun], ...]:
    return tuple(
        (record.run_id, StoredRun(record.owner, record.subagent, record.status, record.usage))
        for record in records
        if record.status.is_terminal
    )
