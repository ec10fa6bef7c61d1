"""One run's record and every lifecycle transition it can make (contract §3).

This module is the only place a run's status changes:

* :meth:`Run.start` — ``pending → running`` (the child deadline starts);
* :meth:`Run.request_cancel` — ``pending → cancelled`` at once, or a cancel
  request delivered to a running run's cancel scope;
* :meth:`Run.settle_completed`, :meth:`Run.settle_failed`,
  :meth:`Run.settle_interrupted` — ``running → terminal``.

A run settles exactly once: the first settlement wins and later ones are
ignored (they return ``False``).
"""

from __future__ import annotations

import enum
import math
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ._converter import to_json_ready
from ._errors import (
    DelegationError,
    InvalidResultError,
    RunCancelledError,
    RunFailedError,
    RunTimedOutError,
)
from ._results import RunHandle, RunResult
from ._status import RunStatus
from ._summary import summarize_task

if TYPE_CHECKING:
    from ._parent import Parent
    from ._schema import ResultSchema
    from ._subagent import Subagent

__all__ = ["CancelReason", "Run", "conversation_of"]


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
    done: trio.Event = attrs.Factory(trio.Event)
    cancel_requested_at: float | None = None
    cancel_reason: CancelReason | None = None
    ended_at: float | None = None
    result: RunResult | None = None
    transcript: tuple[Any, ...] | None = None
    error: BaseException | None = None
    failure_type: type[RunFailedError] = RunFailedError

    # -- reading ---------------------------------------------------------

    @property
    def is_terminal(self) -> bool:
        return self.ended_at is not None

    def handle(self) -> RunHandle:
        return RunHandle(self.run_id, self.subagent.name, self.status)

    def outcome_error(self) -> DelegationError:
        """A fresh exception describing this terminal, non-completed run."""
        name = self.subagent.name
        ident = f"run {self.run_id} (subagent {name!r})"
        retry = f"start a replacement with replaces={self.run_id!r} if the work is still needed"
        if self.status is RunStatus.FAILED:
            error = self.error
            kind = type(error).__name__ if error is not None else "Error"
            detail = str(error) if error is not None else ""
            # A schema mismatch explains itself; other errors are named by type.
            what = detail if self.failure_type is InvalidResultError else f"{kind}: {detail}"
            exc: DelegationError = self.failure_type(
                f"{ident} failed: {what}; {retry}",
                run_id=self.run_id,
                subagent=name,
                error_type=kind,
                error_message=detail,
            )
            exc.__cause__ = error
            return exc
        if self.status is RunStatus.CANCELLED:
            reason = (self.cancel_reason or CancelReason.REQUEST).value
            return RunCancelledError(
                f"{ident} was cancelled {reason} before it completed; {retry}",
                run_id=self.run_id,
                subagent=name,
                status=self.status.value,
            )
        if self.status is RunStatus.TIMED_OUT:
            return RunTimedOutError(
                f"{ident} timed out: it was still running when its deadline of "
                f"{self.timeout:g} s passed; {retry}, perhaps with a smaller task",
                run_id=self.run_id,
                subagent=name,
                status=self.status.value,
            )
        raise AssertionError(f"outcome_error() on a {self.status} run")  # pragma: no cover

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
        request's time and reason are kept (repeats are idempotent).
        """
        if self.is_terminal:
            return False
        if self.cancel_requested_at is None:
            self.cancel_requested_at = now
            self.cancel_reason = reason
        if self.status is RunStatus.PENDING:
            self._settle(RunStatus.CANCELLED, now)
        else:
            assert self.scope is not None
            self.scope.cancel()
        return True

    def settle_completed(self, final_result: Any, transcript: tuple[Any, ...] | None) -> bool:
        if self.is_terminal:
            return False
        self.result = RunResult(
            self.run_id, self.subagent.name, summarize_task(self.task), final_result
        )
        self.transcript = transcript
        return self._settle(RunStatus.COMPLETED, trio.current_time())

    def settle_failed(
        self, error: BaseException, failure_type: type[RunFailedError] = RunFailedError
    ) -> bool:
        if self.is_terminal:
            return False
        self.error = error
        self.failure_type = failure_type
        return self._settle(RunStatus.FAILED, trio.current_time())

    def settle_interrupted(self) -> bool:
        """Settle a run whose runner ended by cancellation.

        contract §3: ``cancelled`` when a cancel request came strictly before the
        deadline, else ``timed_out``. A cancellation that came from outside the
        run's own scope without a recorded request was made by the runtime
        closing (at its closing time) or by the run's parent ending (now).
        """
        if self.is_terminal:
            return False
        now = trio.current_time()
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
        was_running = self.status is RunStatus.RUNNING
        self.status = status
        self.ended_at = now
        self.scope = None
        self.done.set()
        self.parent._run_settled(self, was_running)
        return True


def conversation_of(run: Run) -> tuple[Any, ...]:
    """The whole conversation of a terminal run, as history for a continuation.

    Its transcript when the runner gave one; otherwise its own history, then
    its task as a user entry and, when it completed, its result as an
    assistant entry.
    """
    if run.transcript is not None:
        return run.transcript
    entries: list[Any] = [*run.history, {"role": "user", "content": run.task}]
    if run.result is not None:
        entries.append({"role": "assistant", "content": to_json_ready(run.result.final_result)})
    return tuple(entries)
