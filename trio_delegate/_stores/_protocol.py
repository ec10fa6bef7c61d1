"""Durable stores of run records (contract §12): the protocol every store implements.

A store keeps *records*, not live runs: what was admitted, how it ended, and
the conversation needed to continue it. Live runs never migrate; a run that
was live in a runtime that is gone is marked ``failed`` (interrupted) by the
next runtime that opens the store.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence
from typing import Any, Protocol, final, runtime_checkable

import attrs

from .._status import RunStatus

__all__ = [
    "INTERRUPTED_ERROR_TYPE",
    "ResultStore",
    "RunRecord",
    "StoreSnapshot",
    "StoredRun",
    "interrupted",
    "terminal_index",
    "wall_clock_now",
]

#: ``error_type`` of a run that was live when its runtime's process ended.
INTERRUPTED_ERROR_TYPE = "Interrupted"


def wall_clock_now() -> str:
    """A wall-clock timestamp for people to read (no behaviour depends on it)."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")


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
        history: the conversation it was given.
        replaces: the run it replaces, if any.
        final_result: the JSON-ready result of a completed run.
        error_type: the error's type name for a failed run.
        error_message: the error's message for a non-completed terminal run.
        transcript: the runner's transcript, if it gave one.
        admitted_at: wall-clock admission time (ISO 8601, UTC).
        ended_at: wall-clock end time, for a terminal run.
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
    transcript: tuple[Any, ...] | None = None
    admitted_at: str = ""
    ended_at: str | None = None


@final
@attrs.frozen
class StoredRun:
    """What a runtime keeps in memory about a terminal run found in its store."""

    owner: str
    subagent: str
    status: RunStatus


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


def interrupted(record: RunRecord) -> RunRecord:
    """*record* marked failed because its runtime's process ended while it was live."""
    return attrs.evolve(
        record,
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

    ``write`` may be called by many tasks at once; a store batches what is
    pending into as few commits as it can (group commit). Every method is
    a Trio checkpoint and raises ``StoreError`` on failure.
    """

    async def attach(self, runtime_id: str) -> StoreSnapshot:
        """Register a runtime; mark the live runs of runtimes that are gone as interrupted."""

    async def detach(self, runtime_id: str) -> None:
        """Unregister a runtime that has settled all its runs."""

    async def write(self, records: Sequence[RunRecord]) -> None:
        """Insert or replace *records*; durable when this returns."""

    async def get(self, run_id: str) -> RunRecord | None:
        """The record of *run_id*, or ``None``."""

    async def list_runs(
        self, *, status: RunStatus | None = None, owner: str | None = None, limit: int = 100
    ) -> list[RunRecord]:
        """Records, newest admission first, filtered by status and owner."""


def terminal_index(records: Iterable[RunRecord]) -> tuple[tuple[str, StoredRun], ...]:
    return tuple(
        (record.run_id, StoredRun(record.owner, record.subagent, record.status))
        for record in records
        if record.status.is_terminal
    )
