"""The fail-closed ledger of one parent (contract §7).

A run a parent started is *resolved* when it completed and was observed, or
when it ended failed, cancelled or timed out and a replacement
(``replaces=<its id>``, same parent) is itself resolved. A completed run
that retention evicted before anyone observed it can be replaced too: its
result is gone, and without a replacement it could never be resolved. The ledger holds
exactly the runs that are not resolved yet, oldest first, so resolving is a
walk up the ``replaces`` chain and the memory it needs is bounded by the
unresolved work, not by every run ever started.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, final

import attrs

from .._errors import UnresolvedDelegationError, UnresolvedRun
from .._status import RunStatus
from .._summary import summarize_task
from ._run import CancelReason

if TYPE_CHECKING:
    from collections.abc import Collection

    from ._run import Run

__all__ = ["Evicted", "Ledger"]


@final
@attrs.frozen
class Evicted:
    """What the ledger keeps of an unresolved run that retention evicted."""

    run_id: str
    subagent: str
    status: RunStatus
    replaces: str | None


@final
class Ledger:
    """The unresolved runs of one parent."""

    __slots__ = ("_unresolved",)

    def __init__(self) -> None:
        self._unresolved: dict[str, Run | Evicted] = {}

    def __bool__(self) -> bool:
        return bool(self._unresolved)

    def add(self, run: Run) -> None:
        """A run was admitted: it is unresolved until observed or replaced."""
        self._unresolved[run.run_id] = run

    def withdraw(self, run_id: str) -> None:
        """A run's admission was undone: it never existed (for this parent's check)."""
        self._unresolved.pop(run_id, None)

    def get(self, run_id: str) -> Run | Evicted | None:
        return self._unresolved.get(run_id)

    def resolve(self, run_id: str) -> bool:
        """A completed run was observed: it is resolved, and so is what it replaced.

        Returns:
            whether it was unresolved until now (this is its first observation).
        """
        unresolved = self._unresolved
        record = unresolved.pop(run_id, None)
        if record is None:
            return False  # already resolved, and its chain with it
        replaced = record.replaces
        while replaced is not None:
            earlier = unresolved.pop(replaced, None)
            if earlier is None:
                break
            replaced = earlier.replaces
        return True

    def evicted(self, run: Run) -> None:
        """Retention evicted *run*: if it is unresolved, keep only a small record."""
        if run.run_id in self._unresolved:
            self._unresolved[run.run_id] = Evicted(
                run.run_id, run.subagent.name, run.status, run.replaces
            )

    def check(self, owner: str, announcing: Collection[str] = ()) -> None:
        """Raise if anything is unresolved.

        Args:
            owner: the parent's owner, for the message.
            announcing: runs whose callers do not have their ids yet (a store
                is recording their admission): they are left out.

        Raises:
            UnresolvedDelegationError: listing every unresolved run, oldest first.
        """
        entries = [
            _entry(record)
            for record in self._unresolved.values()
            if isinstance(record, Evicted) or record.run_id not in announcing
        ]
        if not entries:
            return
        lines = "\n".join(f"  - {e.run_id} ({e.subagent}, {e.status}): {e.why}" for e in entries)
        raise UnresolvedDelegationError(
            f"parent {owner!r} has {len(entries)} unresolved delegated run(s); under the "
            f"fail-closed policy every run must complete and be observed, or be replaced by "
            f"one that does:\n{lines}",
            unresolved=entries,
        )


def _entry(record: Run | Evicted) -> UnresolvedRun:
    if isinstance(record, Evicted):
        return UnresolvedRun(
            record.run_id,
            record.subagent,
            record.status.value,
            _why_evicted(record.run_id, record.status),
        )
    outcome = record.outcome
    if (
        record.status is RunStatus.CANCELLED
        and outcome is not None
        and outcome.reason is CancelReason.PARENT_CLOSED
    ):
        # The usual first-hour mistake: leaving `async with open_parent(...)` while
        # a background run still runs. The fix is a wait, not a replacement.
        why = (
            "it had not ended when the parent closed, and closing the parent "
            f"cancelled it: await parent.wait({record.run_id!r}) before leaving the "
            "parent's async with block"
        )
    elif (
        record.status is RunStatus.CANCELLED
        and outcome is not None
        and outcome.reason is CancelReason.BUDGET
    ):
        # Its replacement would need budget the stopped scope no longer has.
        why = f"a budget stop cancelled it: {outcome.error}"
    else:
        why = _why(record.run_id, record.status)
    talk = record.talk
    if talk is not None and talk.unanswered is not None:
        question_id, text = talk.unanswered
        why = (
            f"{why} (it was waiting for an answer to question {question_id}: "
            f"{summarize_task(text)!r})"
        )
    return UnresolvedRun(record.run_id, record.subagent.name, record.status.value, why)


def _why_evicted(run_id: str, status: RunStatus) -> str:
    if status is RunStatus.COMPLETED:
        return (
            "it completed but expired from retention before it was observed, so its result "
            "is no longer held: wait for it if a store holds its result, else start a "
            f"replacement with replaces={run_id!r} and wait for that (a longer "
            "Config.retention_seconds or a larger retention_max_runs keeps results longer)"
        )
    return (
        f"it ended {status.value} and expired from retention before it was observed: start "
        f"a replacement with replaces={run_id!r} and wait for it"
    )


def _why(run_id: str, status: RunStatus) -> str:
    if status is RunStatus.COMPLETED:
        return "it completed but its result was never observed: wait for it"
    if status in (RunStatus.PENDING, RunStatus.RUNNING, RunStatus.INPUT_REQUIRED):
        return f"it is still {status.value}: wait for it, or cancel it and start a replacement"
    return (
        f"it ended {status.value} and no replacement has succeeded: start one with "
        f"replaces={run_id!r} and wait for it"
    )
