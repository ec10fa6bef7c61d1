"""One run's record and every lifecycle transition it can make (contract §3).

This module is the only place a run's status changes:

* :meth:`Run.start` — ``pending → running`` (the child deadline starts);
* :meth:`Run.request_cancel` — ``pending → cancelled`` at once, or a cancel
  request delivered to a running run's cancel scope;
* :meth:`Run.settle_completed`, :meth:`Run.settle_failed`,
  :meth:`Run.settle_interrupted` — ``running → terminal``.

A run settles exactly once: the first settlement wins and later ones are
ignored (they return ``False``). With a durable store, a settled run stays
``running`` (or ``pending``) until its terminal record is committed, and only
then becomes terminal and wakes its waiters.
"""

from __future__ import annotations

import enum
import math
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .._converter import to_json_ready
from .._errors import (
    DelegationError,
    InvalidResultError,
    RunCancelledError,
    RunFailedError,
    RunTimedOutError,
    StoreError,
)
from .._results import RunHandle, RunResult
from .._status import RunStatus
from .._summary import summarize_task

if TYPE_CHECKING:
    from .._schema import ResultSchema
    from .._subagent import Subagent
    from ._parent import Parent

__all__ = ["CancelReason", "Run", "conversation", "conversation_of", "terminal_error"]


class CancelReason(enum.Enum):
    """Why a run was cancelled; the value completes "the run was cancelled …"."""

    REQUEST = "by request"
    CALLER_CANCELLED = "because the caller waiting for it in the foreground was cancelled"
    PARENT_CLOSED = "because its parent closed"
    RUNTIME_CLOSED = "because the runtime closed"


@attrs.define(eq=False)
class Run:
    """The runtime's record of one run. Internal: parents hand out values only."""

    run_id: str
    parent: Parent
    subagent: Subagent
    task: str
    schema: ResultSchema | None
    history: tuple[Any, ...]
    replaces: str | None
    depth: int
    timeout: float | None
    status: RunStatus = RunStatus.PENDING
    deadline: float = math.inf
    scope: trio.CancelScope | None = None
    # Made on first use (see `done`): a run nobody waits for while it is live,
    # such as one started in the background and read once it ended, needs none.
    _done: trio.Event | None = None
    cancel_requested_at: float | None = None
    cancel_reason: CancelReason | None = None
    ended_at: float | None = None
    result: RunResult | None = None
    transcript: tuple[Any, ...] | None = None
    error: BaseException | None = None
    failure_type: type[RunFailedError] = RunFailedError

    admitted_at: str = ""
    # Set when the run's outcome is decided; the run is terminal once that
    # outcome is committed (at once, or when its store has made it durable).
    settling: bool = False

    # -- reading ---------------------------------------------------------

    @property
    def done(self) -> trio.Event:
        """The event every waiter waits for: set once the run is terminal."""
        done = self._done
        if done is None:
            done = self._done = trio.Event()
            if self.ended_at is not None:
                done.set()
        return done

    @property
    def is_terminal(self) -> bool:
        return self.ended_at is not None

    def handle(self) -> RunHandle:
        return RunHandle(self.run_id, self.subagent.name, self.status)

    def summary(self) -> str:
        return summarize_task(self.task)

    def error_details(self, status: RunStatus) -> tuple[str | None, str | None]:
        """``(error_type, error_message)`` describing how a run ended *status*."""
        if status is RunStatus.FAILED:
            error = self.error
            if error is None:  # pragma: no cover - a failed run always has a cause
                return "Error", ""
            return type(error).__name__, str(error)
        if status is RunStatus.CANCELLED:
            return None, (self.cancel_reason or CancelReason.REQUEST).value
        if status is RunStatus.TIMED_OUT:
            return None, f"its deadline of {self.timeout:g} s passed"
        return None, None

    def outcome_error(self) -> DelegationError:
        """A fresh exception describing this terminal, non-completed run."""
        error_type, error_message = self.error_details(self.status)
        exc = terminal_error(
            self.run_id,
            self.subagent.name,
            self.status,
            error_type,
            error_message,
            self.failure_type,
        )
        exc.__cause__ = self.error
        return exc

    # -- transitions ---------------------------------------------------------

    def start(self, now: float) -> trio.CancelScope:
        """``pending → running``: the child deadline starts now."""
        assert self.status is RunStatus.PENDING, self.status
        self.status = RunStatus.RUNNING
        if self.timeout is not None:
            self.deadline = now + self.timeout
        self.scope = trio.CancelScope(deadline=self.deadline)
        return self.scope

    def request_cancel(self, now: float, reason: CancelReason) -> bool:
        """Ask the run to stop. Returns whether it was live.

        A pending run is cancelled at once; a running one has its cancel scope
        cancelled and stays ``running`` until its task settles it. The first
        request's time and reason are kept (repeats are idempotent). A run
        whose outcome is already decided is not changed.
        """
        if self.is_terminal:
            return False
        if self.cancel_requested_at is None:
            self.cancel_requested_at = now
            self.cancel_reason = reason
        if self.settling:
            return True
        if self.status is RunStatus.PENDING:
            self._settle(RunStatus.CANCELLED, now)
        else:
            assert self.scope is not None
            self.scope.cancel()
        return True

    def settle_completed(self, final_result: Any, transcript: tuple[Any, ...] | None) -> bool:
        if self.settling:
            return False
        self.result = RunResult(
            self.run_id, self.subagent.name, summarize_task(self.task), final_result
        )
        self.transcript = transcript
        return self._settle(RunStatus.COMPLETED, self.parent._runtime._now())

    def settle_failed(
        self, error: BaseException, failure_type: type[RunFailedError] = RunFailedError
    ) -> bool:
        if self.settling:
            return False
        self.error = error
        self.failure_type = failure_type
        return self._settle(RunStatus.FAILED, self.parent._runtime._now())

    def settle_interrupted(self) -> bool:
        """Settle a run whose runner ended by cancellation.

        contract §3: ``cancelled`` when a cancel request came strictly before the
        deadline, else ``timed_out``. A cancellation that came from outside the
        run's own scope without a recorded request was made by the runtime
        closing (at its closing time) or by the run's parent ending (now).
        """
        if self.settling:
            return False
        now = self.parent._runtime._now()
        requested = self.cancel_requested_at
        if requested is None:
            closed_at = self.parent._runtime._closed_at
            if closed_at is not None:
                requested, self.cancel_reason = closed_at, CancelReason.RUNTIME_CLOSED
            else:
                requested, self.cancel_reason = now, CancelReason.PARENT_CLOSED
        status = RunStatus.CANCELLED if requested < self.deadline else RunStatus.TIMED_OUT
        return self._settle(status, now)

    def _settle(self, status: RunStatus, now: float) -> bool:
        """Decide the outcome; commit it now, or once the store made it durable."""
        self.settling = True
        persister = self.parent._runtime._persister
        if persister is None:
            self._commit(status, now)
        else:
            persister.settle(self, status, lambda error: self._durable(status, now, error))
        return True

    def _durable(self, status: RunStatus, now: float, error: StoreError | None) -> None:
        if error is not None:
            # A result that could not be recorded is never handed out.
            status, self.result, self.error = RunStatus.FAILED, None, error
            self.failure_type = RunFailedError
        self._commit(status, now)

    def _commit(self, status: RunStatus, now: float) -> None:
        was_running = self.status is RunStatus.RUNNING
        self.status = status
        self.ended_at = now
        self.scope = None
        if self._done is not None:
            self._done.set()
        self.parent._run_settled(self, was_running)


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


def conversation(
    transcript: tuple[Any, ...] | None,
    history: tuple[Any, ...],
    task: str,
    completed: bool,
    final_result: Any,
) -> tuple[Any, ...]:
    """The whole conversation of a terminal run, as history for a continuation.

    Its transcript when the runner gave one; otherwise its own history, then
    its task as a user entry and, when it completed, its result (JSON-ready)
    as an assistant entry.
    """
    if transcript is not None:
        return tuple(transcript)
    entries: list[Any] = [*history, {"role": "user", "content": task}]
    if completed:
        entries.append({"role": "assistant", "content": to_json_ready(final_result)})
    return tuple(entries)


def conversation_of(run: Run) -> tuple[Any, ...]:
    """The whole conversation of a terminal run in memory."""
    result = run.result
    return conversation(
        run.transcript,
        run.history,
        run.task,
        result is not None,
        result.final_result if result is not None else None,
    )
