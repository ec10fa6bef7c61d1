"""One run and every decision about its status (contract §3): the run state machine.

A run is *live* (``admitting``, ``pending``, ``running`` or ``input_required``), then *decided*
(its outcome is chosen, once: the first decision wins), then *committed*
(terminal: its status changes, its waiters wake, and it never changes again). Between deciding and
committing, a runtime with a store makes the outcome durable; a result that
could not be recorded is never handed out — the run commits ``failed`` with
the ``StoreError`` instead (:meth:`Outcome.unrecorded`).

Everything that maps an ending to a status lives here: a return
(:func:`completed`), an error (:func:`failed`), a cancellation or deadline
(:meth:`Run.interrupted`). A run tells its parent what happened through the
small :class:`RunHost` interface, never through the parent's fields.

A run's state is one value, :attr:`Run.state` (a :class:`State`), moved only
as :data:`MOVES` allows, which :meth:`Run._move` checks; ``docs/contract.md`` (its
appendix, "A run's state" and "Where a run lives") holds the same table and
says which other forms of a run (``RunRecord``, ``StoredRun``, ``Evicted``,
the encoded row) live where, and why.
"""

from __future__ import annotations

import enum
import math
from typing import TYPE_CHECKING, Any, Final, Protocol, final

import trio

from .._checks import builtin
from .._errors import (
    DelegationError,
    InvalidResultError,
    RunCancelledError,
    RunFailedError,
    RunTimedOutError,
    StoreError,
)
from .._json import CanonicalJson, escape_text
from .._results import RunHandle, RunResult
from .._status import RunStatus
from .._stores._protocol import INTERRUPTED_ERROR_TYPE
from .._summary import summarize_task
from ._adoption import as_recorded
from ._conversation import conversation_json

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._config import Config
    from .._schema import ResultSchema
    from .._subagent import Subagent
    from .._usage import Budget, Usage
    from ._meter import Tally
    from ._talk import Talk
    from ._writer import Writer

__all__ = [
    "CancelReason",
    "MOVES",
    "IllegalMove",
    "Outcome",
    "Run",
    "RunHost",
    "State",
    "StoredEnding",
    "completed",
    "error_type",
    "failed",
    "safe_message",
    "terminal_error",
]


class CancelReason(enum.Enum):
    """Why a run was cancelled; the value completes "the run was cancelled …"."""

    REQUEST = "by request"
    CALLER_CANCELLED = "because the caller waiting for it in the foreground was cancelled"
    PARENT_CLOSED = "because its parent closed"
    RUNTIME_CLOSED = "because the runtime closed"
    LEASE_LOST = (
        "because its runtime could not renew its lease on the shared store, and the other "
        "runtimes have written it off"
    )
    TAKEN_OVER = "because another runtime sharing the store recorded it as ended"
    LEASE_EXPIRED = (
        "because its runtime's lease on the shared store ran out (its process was stopped "
        "or cut off for longer than the lease)"
    )
    BUDGET = "by a budget stop"


class IllegalMove(AssertionError):
    """A run was asked to make a transition its state table does not allow.

    Internal: it means a bug in the runtime, never bad input, so it is an
    ``AssertionError`` and no ``DelegationError``.
    """


class State(enum.Enum):
    """Where a run is in its lifecycle: the one value that says so.

    Each state knows the status callers read for it (``status``), whether the
    run is *live* (nothing decided: it may still start, be cancelled, end),
    whether it is *terminal* (committed: it never changes again) and whether
    it holds one of its parent's slots. The moves allowed between them are
    :data:`MOVES`, checked in :meth:`Run._move`.
    """

    # pending; its admission record is being written (with a store only):
    # it may not start until that record is durable
    ADMITTING = "admitting"
    PENDING = "pending"  # waiting for a slot
    RUNNING = "running"  # its runner has a slot
    # running, and its runner waits for an answer to a question (contract §19)
    INPUT_REQUIRED = "input_required"
    # decided, its outcome being recorded before it commits (with a store)
    DECIDED_PENDING = "decided_pending"  # decided before it started
    DECIDED_RUNNING = "decided_running"
    # committed: terminal, one state per final status
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"
    # its admission could not be recorded: it never existed
    WITHDRAWN = "withdrawn"

    # Identity hashing: Enum's own __hash__ is Python code, and a move is
    # checked (a set lookup) on every transition of every run.
    __hash__ = object.__hash__

    # Set on each member below (plain instance attributes: read in one step).
    status: RunStatus
    live: bool
    holds_slot: bool
    terminal: bool
    moves: frozenset[State]
    #: (live states only) the state it waits for its record in once decided
    decided: State


# Each state's status, whether it is live, and whether it holds a slot.
for _state, _status, _live, _slot in (
    (State.ADMITTING, RunStatus.PENDING, True, False),
    (State.PENDING, RunStatus.PENDING, True, False),
    (State.RUNNING, RunStatus.RUNNING, True, True),
    (State.INPUT_REQUIRED, RunStatus.INPUT_REQUIRED, True, True),
    (State.DECIDED_PENDING, RunStatus.PENDING, False, False),
    (State.DECIDED_RUNNING, RunStatus.RUNNING, False, True),
    (State.COMPLETED, RunStatus.COMPLETED, False, False),
    (State.FAILED, RunStatus.FAILED, False, False),
    (State.CANCELLED, RunStatus.CANCELLED, False, False),
    (State.TIMED_OUT, RunStatus.TIMED_OUT, False, False),
    (State.WITHDRAWN, RunStatus.PENDING, False, False),
):
    _state.status = _status
    _state.live = _live
    _state.holds_slot = _slot
    _state.terminal = _status.is_terminal
del _state, _status, _live, _slot


#: The run state machine (docs/contract.md, "A run's state", is this table):
#: each state and the states a run in it may move to. A live run's decision
#: commits at once when nothing waits for its record (no store, or an ending
#: other than a result), so it moves straight to a terminal state; a result
#: recorded by a store passes through a decided state first.
MOVES: Final[dict[State, frozenset[State]]] = {
    State.ADMITTING: frozenset(
        {
            State.PENDING,  # its admission record is durable
            State.WITHDRAWN,  # that record could not be written
            State.DECIDED_PENDING,  # its lease ran out (an ending that waits for its record)
            State.COMPLETED,  # as another runtime recorded it (adopted)
            State.FAILED,
            State.CANCELLED,  # a cancel request: a pending run ends at once
            State.TIMED_OUT,
        }
    ),
    State.PENDING: frozenset(
        {
            State.RUNNING,  # the scheduler gave it a slot
            State.WITHDRAWN,  # its parent or runtime closed before its caller had its id
            State.DECIDED_PENDING,
            State.COMPLETED,
            State.FAILED,
            State.CANCELLED,
            State.TIMED_OUT,
        }
    ),
    State.RUNNING: frozenset(
        {
            State.INPUT_REQUIRED,  # its runner asked a question (``_talk``)
            State.DECIDED_RUNNING,  # a result, being recorded
            State.COMPLETED,  # no store, or an ending recorded after it commits
            State.FAILED,
            State.CANCELLED,
            State.TIMED_OUT,
        }
    ),
    # Its last open question was answered, declined or withdrawn, or it ended
    # (a runner that does not wait for its answer may still return or fail).
    State.INPUT_REQUIRED: frozenset(
        {
            State.RUNNING,
            State.DECIDED_RUNNING,
            State.COMPLETED,
            State.FAILED,
            State.CANCELLED,
            State.TIMED_OUT,
        }
    ),
    # The record's answer decides what it commits with (see _adoption).
    State.DECIDED_PENDING: frozenset(
        {State.COMPLETED, State.FAILED, State.CANCELLED, State.TIMED_OUT}
    ),
    State.DECIDED_RUNNING: frozenset(
        {State.COMPLETED, State.FAILED, State.CANCELLED, State.TIMED_OUT}
    ),
    State.COMPLETED: frozenset(),
    State.FAILED: frozenset(),
    State.CANCELLED: frozenset(),
    State.TIMED_OUT: frozenset(),
    State.WITHDRAWN: frozenset(),
}
for _state, _moves in MOVES.items():
    _state.moves = _moves
del _state, _moves

# The members a run's methods read on every run, by short module-level names.
_ADMITTING: Final = State.ADMITTING
_PENDING: Final = State.PENDING
_RUNNING: Final = State.RUNNING
_INPUT_REQUIRED: Final = State.INPUT_REQUIRED
_WITHDRAWN: Final = State.WITHDRAWN
_STARTED: Final = RunStatus.RUNNING
_NOT_STARTED: Final = RunStatus.PENDING
#: The state a live run waits for its record in once decided.
State.ADMITTING.decided = State.PENDING.decided = State.DECIDED_PENDING
State.RUNNING.decided = State.INPUT_REQUIRED.decided = State.DECIDED_RUNNING
#: The terminal state of each final status (a StrEnum: it hashes in C).
_COMMITTED: Final = {
    RunStatus.COMPLETED: State.COMPLETED,
    RunStatus.FAILED: State.FAILED,
    RunStatus.CANCELLED: State.CANCELLED,
    RunStatus.TIMED_OUT: State.TIMED_OUT,
}


def safe_message(error: BaseException) -> str:
    """``str(error)``, whatever the error does, as text that can be recorded.

    A runner's exception can have a ``__str__`` that raises, or that returns
    a ``str`` subclass whose own methods raise, or a message that is not
    valid Unicode (contract §15): the bad code points are escaped.
    """
    try:
        text = builtin(str(error))
    except Exception:
        text = f"<{error_type(error)} whose message could not be read>"
    return escape_text(text)


def error_type(error: BaseException) -> str:
    """The name of *error*'s type, as a plain ``str`` (a class may rename itself)."""
    name: str = builtin(type(error).__name__)
    return name


@final
class StoredEnding(Exception):
    """A run's ending as another runtime recorded it (see ``_adoption``)."""

    def __init__(self, type_name: str | None, message: str | None) -> None:
        super().__init__(message or "")
        self.type_name = type_name
        self.message = message


@final
class Outcome:
    """How a run ended, decided once; never changed after it is made.

    Attributes:
        status: the terminal status.
        result: a completed run's result, in canonical JSON.
        transcript: a completed run's transcript, if its runner gave one.
        error: a failed run's cause.
        failure_type: the error a failed run answers with.
        reason: why a cancelled run was cancelled.
    """

    __slots__ = ("error", "failure_type", "reason", "result", "status", "transcript")

    def __init__(
        self,
        status: RunStatus,
        result: CanonicalJson | None = None,
        transcript: CanonicalJson | None = None,
        error: BaseException | None = None,
        failure_type: type[RunFailedError] = RunFailedError,
        reason: CancelReason | None = None,
    ) -> None:
        self.status = status
        self.result = result
        self.transcript = transcript
        self.error = error
        self.failure_type = failure_type
        self.reason = reason

    def __repr__(self) -> str:
        return (
            f"Outcome({self.status.value}, result={self.result!r}, error={self.error!r}, "
            f"reason={self.reason})"
        )

    @property
    def waits_for_record(self) -> bool:
        """Whether the run commits only once this outcome is durable in its store.

        Only a result does (contract §12: a result handed to a caller is
        durable). Another ending commits at once and its record follows: a
        pending run's cancellation reads ``cancelled`` immediately, and a run
        stopped because its store is unreachable is not held up by it. (On a
        store other processes share, more endings wait: see ``Lease.holds_up``.)
        """
        # A run stopped once its lease had run out may have been written off
        # elsewhere meanwhile: it ends as the store says (see _adoption).
        return self.status is RunStatus.COMPLETED or self.reason is CancelReason.LEASE_EXPIRED

    def unrecorded(self, error: StoreError) -> Outcome:
        """This outcome, when its record could not be written.

        A result nobody can be sure was recorded is never handed out: a
        completed run fails with the ``StoreError``. Other endings stand (the
        run did end that way); only their record is missing, and the writer
        writes the record of the ending that stands again (``_unwritten``).
        """
        if self.status is RunStatus.COMPLETED:
            return failed(error)
        return self

    def error_details(self, timeout: float | None) -> tuple[str | None, str | None]:
        """``(error_type, error_message)`` as recorded and reported."""
        status = self.status
        error = self.error
        if type(error) is StoredEnding:
            # Adopted from the store: answered as it was recorded there.
            if status is RunStatus.FAILED:
                return error.type_name or "Error", error.message or ""
            return None, error.message
        if status is RunStatus.FAILED:
            assert error is not None
            return error_type(error), safe_message(error)
        if status is RunStatus.CANCELLED:
            message = (self.reason or CancelReason.REQUEST).value
        elif status is RunStatus.TIMED_OUT:
            message = f"its deadline of {timeout:g} s passed"
        else:
            return None, None
        if self.error is not None:
            # Decided without its runner, which did not stop (contract §18),
            # or stopped by a budget (§20): the error says which.
            message = f"{message} ({safe_message(self.error)})"
        return None, message


def completed(result: CanonicalJson, transcript: CanonicalJson | None) -> Outcome:
    return Outcome(RunStatus.COMPLETED, result=result, transcript=transcript)


def failed(error: BaseException, failure_type: type[RunFailedError] = RunFailedError) -> Outcome:
    return Outcome(RunStatus.FAILED, error=error, failure_type=failure_type)


_TIMED_OUT: Final = Outcome(RunStatus.TIMED_OUT)

#: A run stopped because its runtime could not renew its lease ends failed
#: (interrupted), as the other runtimes record it once the lease runs out:
#: whichever record the store keeps, every answer agrees (contract §16).
_LEASE_LOST: Final = Outcome(
    RunStatus.FAILED,
    error=StoredEnding(
        INTERRUPTED_ERROR_TYPE,
        "interrupted: its runtime could not renew its lease on the shared store; its work is lost",
    ),
    reason=CancelReason.LEASE_LOST,
)


def cancelled(reason: CancelReason | None, cause: BaseException | None) -> Outcome:
    """The ending of a run cancelled (for *reason*) before its deadline."""
    if reason is CancelReason.LEASE_LOST:
        return _LEASE_LOST
    return Outcome(RunStatus.CANCELLED, error=cause, reason=reason)


def _ignore(error: StoreError | None) -> None:
    """Nobody waits for the record of an ending that is terminal already."""


def _held_for_record(run: Run, outcome: Outcome) -> bool:
    """Whether *run*'s ending *outcome* (no result) waits for its record all the
    same: on a store other processes share, once the store could come to hold
    another ending than the one answered (see ``Lease.holds_up``)."""
    writer = run.host.writer
    return (
        writer is not None
        and writer.shared
        and writer.lease.holds_up(run.state.holds_slot, outcome.reason is CancelReason.LEASE_LOST)
    )


class RunHost(Protocol):
    """What a run needs from the parent that admitted it."""

    #: The runtime's config.
    config: Config

    #: Whether decided outcomes are recorded (by a store); when not, a run
    #: commits its decision itself, at once.
    records: bool
    #: The store's writer, which a run's progress and questions go to (§19).
    writer: Writer | None

    #: What the parent's runs spent (contract §20), once one reported; its
    #: budget; and the run that holds it, for a nested parent.
    spent: Tally | None
    budget: Budget | None
    enclosing: Run | None

    def now(self) -> float:
        """The Trio clock."""

    def closing_time(self) -> tuple[float, CancelReason] | None:
        """When and why the run's surroundings (runtime, parent) began to close, if they did."""

    def record(
        self, run: Run, outcome: Outcome, recorded: Callable[[StoreError | None], None]
    ) -> None:
        """Write *run*'s terminal record of *outcome*; call *recorded* once it is
        committed (``None``) or could not be (the error). Only a host that
        ``records`` is asked."""

    def run_committed(self, run: Run, was_running: bool) -> None:
        """*run* is terminal now."""

    def run_evicted(self, run: Run) -> None:
        """Retention let *run* go from memory."""

    def run_cancel_requested(self, run: Run, reason: CancelReason) -> None:
        """A first cancel request reached live *run*."""

    def run_observed_elsewhere(self, run: Run) -> None:
        """Another runtime sharing the store handed *run*'s result to its owner."""


@final
class Run:
    """The runtime's record of one run. Internal: parents hand out values only."""

    __slots__ = (
        "admitted_at",
        "cancel_cause",
        "cancel_reason",
        "cancel_requested_at",
        "continues",
        "deadline",
        "deadline_at",
        "depth",
        "done",
        "ended_at",
        "foreground",
        "history",
        "history_record",
        "host",
        "outcome",
        "owner",
        "replaces",
        "run_id",
        "schema",
        "scope",
        "spent",
        "started_at",
        "state",
        "subagent",
        "talk",
        "task",
        "task_summary",
        "telemetry",
        "timeout",
    )

    def __init__(
        self,
        run_id: str,
        host: RunHost,
        owner: str,
        subagent: Subagent,
        task: str,
        schema: ResultSchema | None,
        history: CanonicalJson | None,
        replaces: str | None,
        depth: int,
        timeout: float | None,
        foreground: bool = False,
    ) -> None:
        self.run_id = run_id
        self.host = host
        self.owner = owner
        self.subagent = subagent
        self.task = task
        # Made once: every record of the run and its result carry it (contract §2).
        self.task_summary = summarize_task(task)
        self.schema = schema
        # The conversation a continuation carries on; None for a fresh one.
        self.history = history
        self.replaces = replaces
        # The run whose conversation this continuation carries on, if it is one.
        self.continues: str | None = None
        self.depth = depth
        self.timeout = timeout
        # Whether a caller waits for it in the foreground (until it leaves).
        self.foreground = foreground
        # The run's state, its one value (see State and MOVES). With a store,
        # a run may start only once its admission record is durable.
        self.state = _ADMITTING if host.records else _PENDING
        self.outcome: Outcome | None = None
        self.deadline = math.inf
        # Set when it starts, and kept once it ended: whether a run has one
        # is whether it ever started (its admission acknowledgment says so).
        self.scope: trio.CancelScope | None = None
        # Set once the run is terminal. Made at once for a foreground run (its
        # caller waits for it), else on first use (see `ending`): a run nobody
        # waits for while it is live, such as one read once it ended, needs none.
        self.done: trio.Event | None = trio.Event() if foreground else None
        # Data, not state: when and why it was first asked to stop (the
        # request may come in any live or decided state, and the time decides
        # cancelled against timed_out, contract §3), and when it committed
        # (retention's clock). Neither decides a move: the state does.
        self.cancel_requested_at: float | None = None
        self.cancel_reason: CancelReason | None = None
        # A budget stop's error (contract §20): the cause its cancellation names.
        self.cancel_cause: BaseException | None = None
        # What it and its nested runs spent, made at its first report (§20).
        self.spent: Tally | None = None
        self.ended_at: float | None = None
        # Wall clock, for stores shared with other runtimes (contract §16).
        self.started_at: str | None = None
        self.deadline_at: float | None = None
        self.admitted_at = ""
        # A continuation's history as its admission record holds it (decoded
        # once), until its terminal record has taken it too; with a store only.
        self.history_record: tuple[Any, ...] | None = None
        # What an observer keeps about the run (its span, say).
        self.telemetry: Any = None
        # Its progress and questions (contract §19), made when its runner
        # first reports or asks (``_talk``): most runs never do.
        self.talk: Talk | None = None

    def __repr__(self) -> str:
        return f"<Run {self.run_id} {self.subagent.name} {self.state.value}>"

    # -- reading ---------------------------------------------------------

    def ending(self) -> trio.Event:
        """The event every waiter waits for (:attr:`done`, made if need be): set once
        the run is terminal."""
        done = self.done
        if done is None:
            done = self.done = trio.Event()
            if self.ended_at is not None:
                done.set()
        return done

    @property
    def status(self) -> RunStatus:
        """The status callers read: its state's (:attr:`State.status`)."""
        return self.state.status

    @property
    def is_terminal(self) -> bool:
        return self.state.terminal

    @property
    def is_live(self) -> bool:
        """Pending or running with nothing decided: it may still start, be cancelled, end."""
        return self.state.live

    def usage(self) -> Usage | None:
        """What it and its nested runs spent (contract §20); ``None`` if nothing was reported."""
        spent = self.spent
        return None if spent is None else spent.usage()

    def handle(self, status: RunStatus | None = None) -> RunHandle:
        """Its snapshot: its status (or *status*), latest progress, open
        questions and what it spent (contract §19-§20)."""
        talk = self.talk
        if talk is not None:
            return talk.handle(self, status)
        status = self.state.status if status is None else status
        return RunHandle(self.run_id, self.subagent.name, status, usage=self.usage())

    def admission_ack(self) -> RunHandle:
        """The admission acknowledgment: ``running`` once it has started, else ``pending``.

        Never a terminal status: a run that started and already ended by the
        time its caller woke (from its store's commit) is acknowledged as the
        admission found it (contract §4).
        """
        # A run that started has its cancel scope, kept once it ended.
        status = _STARTED if self.scope is not None else _NOT_STARTED
        if self.talk is None and self.spent is None:
            return RunHandle(self.run_id, self.subagent.name, status)  # nothing reported yet
        return self.handle(status)

    def result(self) -> RunResult:
        """The envelope of this completed run: a fresh copy of its result."""
        outcome = self.outcome
        assert outcome is not None
        canonical = outcome.result
        assert canonical is not None
        value = canonical.copy()
        schema = self.schema
        if schema is not None and schema.target is not None:
            value = schema.structure(value)
        return RunResult(self.run_id, self.subagent.name, self.task_summary, value)

    def outcome_error(self) -> DelegationError:
        """A fresh exception describing this terminal, non-completed run."""
        outcome = self.outcome
        assert outcome is not None
        error_type, error_message = outcome.error_details(self.timeout)
        exc = terminal_error(
            self.run_id,
            self.subagent.name,
            outcome.status,
            error_type,
            error_message,
            outcome.failure_type,
        )
        exc.__cause__ = outcome.error
        return exc

    def carried(self) -> CanonicalJson:
        """This terminal run's whole conversation, as the history of a continuation.

        Its transcript, or the value :func:`conversation_json` builds, made from
        the canonical JSON texts the run holds without decoding them: a
        conversation is as large as the run's history, result and transcript,
        and decoding and encoding it again would hold the event loop that long.
        """
        outcome = self.outcome
        assert outcome is not None
        if outcome.transcript is not None:
            return outcome.transcript
        return conversation_json(self.history, ((self.task, outcome.result),))

    # -- transitions ---------------------------------------------------------

    def _move(self, to: State) -> None:
        """Make *to* the run's state, if :data:`MOVES` allows it: the one judge of a move.

        Raises:
            IllegalMove: :data:`MOVES` allows no move from the run's state to
                *to* (a bug in the runtime).
        """
        if to not in self.state.moves:
            raise IllegalMove(f"{self!r} cannot move to {to.value}")
        self.state = to

    def admitted(self) -> None:
        """``admitting → pending``: its admission record is durable; it may start."""
        if self.state is _ADMITTING:  # else it ended (cancelled) meanwhile
            self._move(_PENDING)

    def start(self, now: float) -> trio.CancelScope:
        """``pending → running``: the child deadline starts now."""
        self._move(_RUNNING)
        if self.timeout is not None:
            self.deadline = now + self.timeout
        self.scope = trio.CancelScope(deadline=self.deadline)
        return self.scope

    def asking(self, waiting: bool) -> None:
        """``running ⇄ input_required``: whether its runner waits for an answer (``_talk``)."""
        state = self.state
        if waiting:
            if state is _RUNNING:
                self._move(_INPUT_REQUIRED)
        elif state is _INPUT_REQUIRED:
            self._move(_RUNNING)

    def request_cancel(
        self, now: float, reason: CancelReason, cause: BaseException | None = None
    ) -> bool:
        """Ask the run to stop. Returns whether it was live.

        A pending run is cancelled at once (and never starts); a running one
        has its cancel scope cancelled and stays ``running`` until its task
        ends. The first request's time, reason and *cause* (a budget stop's
        error) are kept (repeats are idempotent). A run whose outcome is
        decided is not changed.
        """
        state = self.state
        if state.terminal:
            return False
        if self.cancel_requested_at is None:
            self.cancel_requested_at = now
            self.cancel_reason = reason
            self.cancel_cause = cause
            if self.talk is not None:
                # Nobody may answer a run being stopped (contract §19).
                self.talk.withdraw_all(self)
            self.host.run_cancel_requested(self, reason)
            state = self.state
        if not state.live:
            return True
        if not state.holds_slot:  # pending (or admitting): it ends now
            self.decide(cancelled(reason, self.cancel_cause))
        else:
            assert self.scope is not None
            self.scope.cancel()
        return True

    def interrupted(self) -> Outcome:
        """The outcome of a run whose runner ended by cancellation.

        ``cancelled`` when a cancel request came strictly before the child
        deadline, else ``timed_out`` (contract §3). A cancellation without a
        request came from the run's surroundings closing (the runtime, or its
        parent as the run that holds it ended), at the time they did.
        """
        requested, reason = self.cancel_requested_at, self.cancel_reason
        cause = self.cancel_cause
        if requested is None:
            closing = self.host.closing_time()
            if closing is not None:
                requested, reason = closing
            else:
                # Only the enclosing run's task can be ending: its nested
                # parent is about to close, now.
                requested, reason = self.host.now(), CancelReason.PARENT_CLOSED
        if requested < self.deadline:
            return cancelled(reason, cause)
        return _TIMED_OUT

    def decide(self, outcome: Outcome) -> bool:
        """Choose the run's outcome; the first decision wins.

        A host that records outcomes records it and commits it: a result once
        its record is durable, any other ending at once (see
        :attr:`Outcome.waits_for_record`), but on a store other processes
        share, which could come to hold another (:func:`_held_for_record`).
        Without a record to write, the run commits it now.

        Returns:
            whether this decision was the first.
        """
        state = self.state
        if not state.live:
            return False
        host = self.host
        if not host.records:
            self.commit(outcome)
        elif not outcome.waits_for_record and not _held_for_record(self, outcome):
            # Terminal at once; its record follows.
            self.commit(outcome)
            host.record(self, outcome, _ignore)
        else:
            self.outcome = outcome
            self._move(state.decided)
            # A result is handed out only once it is durable (contract §12).
            # A store error (or, once this runtime's lease may have lapsed,
            # another runtime's ending that the store kept) decides what it
            # commits with: see _adoption.
            host.record(
                self,
                outcome,
                lambda error: self.commit(
                    outcome
                    if error is None
                    else as_recorded(outcome, error, host.config.max_nesting_depth)
                ),
            )
        return True

    def withdraw(self) -> None:
        """Undo an admission that could not be recorded: the run never existed."""
        self._move(_WITHDRAWN)

    def commit(self, outcome: Outcome) -> None:
        """Make *outcome* the run's terminal state and wake its waiters (once).

        Raises:
            IllegalMove: the run is terminal already, or was withdrawn.
        """
        was_running = self.state.holds_slot
        self._move(_COMMITTED[outcome.status])
        self.outcome = outcome
        self.ended_at = self.host.now()
        done = self.done
        if done is not None:
            done.set()
        if self.talk is not None:
            self.talk.ended()
        self.host.run_committed(self, was_running)


def terminal_error(
    run_id: str,
    subagent: str,
    status: RunStatus,
    error_type: str | None,
    error_message: str | None,
    failure_type: type[RunFailedError] = RunFailedError,
) -> DelegationError:
    """The exception that answers for a failed, cancelled or timed-out run."""
    ident = f"run {run_id} (subagent {subagent!r})"
    retry = f"start a replacement with replaces={run_id!r} if the work is still needed"
    if status is RunStatus.FAILED:
        kind = error_type or "Error"
        detail = error_message or ""
        # A schema mismatch explains itself; other errors are named by type.
        what = detail if failure_type is InvalidResultError else f"{kind}: {detail}"
        return failure_type(
            f"{ident} failed: {what}; {retry}",
            run_id=run_id,
            subagent=subagent,
            error_type=kind,
            error_message=detail,
        )
    if status is RunStatus.CANCELLED:
        return RunCancelledError(
            f"{ident} was cancelled {error_message} before it completed; {retry}",
            run_id=run_id,
            subagent=subagent,
            status=status.value,
        )
    if status is RunStatus.TIMED_OUT:
        return RunTimedOutError(
            f"{ident} timed out: it was still running when {error_message}; {retry}, "
            "perhaps with a smaller task",
            run_id=run_id,
            subagent=subagent,
            status=status.value,
        )
    raise AssertionError(f"terminal_error() for a {status} run")  # pragma: no cover
