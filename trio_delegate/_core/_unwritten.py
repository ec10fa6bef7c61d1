"""Endings that stand but whose record could not be written (contract §3, §12, §16).

A run's ending is decided once and never changes; when its terminal record
cannot be written (the store is full, unreachable, read-only for a while), the
run still ends as it was answered (a result that was not recorded fails with
the ``StoreError``: ``Outcome.unrecorded``). Its record is then kept here and
the writer (``_writer``) writes it again, on a backoff on the Trio clock and
once more as the runtime closes, so the store ends with the ending the runtime
answered: one ending per run, in every answer and in the store.

What is kept is bounded (:data:`MAX_UNWRITTEN`); a record the store never
takes before the runtime closes is lost, and the store keeps the run's last
live record, which the next runtime to attach writes off as interrupted
(``docs/persistence.md``, "When the store fails").
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Final, final

import attrs

from .._status import RunStatus
from ._adoption import Conflict

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .._errors import StoreError
    from .._stores._protocol import RunRecord
    from ._run import Run

__all__ = ["MAX_UNWRITTEN", "Unwritten"]

#: The most terminal records kept to be written again; beyond, an ending's
#: record is not kept (its run still answers its ending).
MAX_UNWRITTEN: Final = 10_000
#: Seconds (Trio clock) before the first attempt to write them again, doubled
#: after each attempt that fails, up to the last.
FIRST_RETRY: Final = 0.5
LAST_RETRY: Final = 30.0


def standing_record(record: RunRecord, run: Run) -> RunRecord:
    """The terminal record of the ending *run* committed with, after *record* (the
    record of the ending it decided) could not be written.

    The same record, unless the run decided a result, which it could not hand
    out: it failed with the ``StoreError``, and that is what is recorded.
    """
    outcome = run.outcome
    assert outcome is not None
    if outcome.status is record.status:
        return record
    error_type, error_message = outcome.error_details(run.timeout)
    return attrs.evolve(
        record,
        status=outcome.status,
        final_result=None,
        transcript=None,
        error_type=error_type,
        error_message=error_message,
        failure=outcome.failure_type.kind() if outcome.status is RunStatus.FAILED else None,
    )


@final
class Unwritten:
    """The terminal records to write again, by run id, and when to try next."""

    __slots__ = ("_backoff", "_records", "retry_at", "taken")

    def __init__(self) -> None:
        self._records: dict[str, RunRecord] = {}
        # When the writer tries next (Trio clock), and how long it waits after
        # an attempt that fails.
        self.retry_at = math.inf
        self._backoff = FIRST_RETRY
        # The run ids of the records in the batch being written.
        self.taken: list[str] = []

    def __bool__(self) -> bool:
        return bool(self._records)

    def keep(self, record: RunRecord, run: Run, error: StoreError, now: float) -> None:
        """*run*'s terminal *record* met *error*: keep the record of the ending that
        stands, unless the store kept another ending (then nothing is to be written)."""
        if type(error) is Conflict or not run.is_terminal:
            return
        if len(self._records) >= MAX_UNWRITTEN and record.run_id not in self._records:
            return
        self._records[record.run_id] = standing_record(record, run)
        self.retry_at = min(self.retry_at, now + self._backoff)

    def take(self, now: float) -> list[RunRecord]:
        """The records to write in the next batch: all of them once a retry is due."""
        if now < self.retry_at:
            return []
        self.taken = list(self._records)
        self.retry_at = math.inf
        return [self._records[run_id] for run_id in self.taken]

    def take_all(self) -> list[RunRecord]:
        """All the records, for a last attempt as the runtime closes."""
        self.taken = list(self._records)
        return list(self._records.values())

    def answered(self, failures: Mapping[str, StoreError], now: float) -> None:
        """The batch with the taken records was committed, but for *failures*.

        A record written, or one the store answered by keeping another ending,
        is done; the others wait for the next attempt, a backoff later.
        """
        records = self._records
        failed = False
        for run_id in self.taken:
            error = failures.get(run_id)
            if error is None or type(error) is Conflict:
                records.pop(run_id, None)
            else:
                failed = True
        self.taken = []
        if failed:
            self._backoff = min(2 * self._backoff, LAST_RETRY)
        elif records:
            self._backoff = FIRST_RETRY
        if records:
            self.retry_at = min(self.retry_at, now + self._backoff)
