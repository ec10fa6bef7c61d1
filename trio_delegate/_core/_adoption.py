"""One ending per run in a shared store (contract §16): adopting the stored record.

A terminal record never changes, and the first one stored wins everywhere.
A runtime whose own ending of a run lost to a terminal record written
elsewhere (its lease ran out while its process was stopped, or it was cut
off, and another runtime recorded the run as interrupted) adopts the stored
record: the run commits with the stored outcome, so ``status``, ``wait`` and
``delegate`` answer what the store holds, and a result is never handed out
unless it is the run's stored terminal record.

Two ways lead here: the store watcher reads a terminal record of a run that
is still live in this runtime (:func:`adopted` at once), or the writer learns,
from the write of an ending, that the store kept another one
(:class:`Conflict`): the store's ``write`` names the endings it ignored, on
every write. A store that cannot say (its ``write`` returns ``None``) has
each ending read back instead, once this runtime's lease may have lapsed (a
runtime that kept its lease cannot have been written off).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Final, final

from .._errors import InvalidResultError, RunFailedError, StoreError
from .._json import CanonicalJson
from .._status import RunStatus
from .._stores._protocol import INVALID_RESULT, RUN_FAILED, RunRecord

if TYPE_CHECKING:
    from ._run import Outcome

__all__ = ["Conflict", "adopted", "as_recorded", "failure_type_of"]

#: The error a failed run answers with, by the kind its record keeps.
_FAILURES: Final[Mapping[str, type[RunFailedError]]] = {
    RUN_FAILED: RunFailedError,
    INVALID_RESULT: InvalidResultError,
}


def failure_type_of(record: RunRecord) -> type[RunFailedError]:
    """The error the stored failed run *record* answers with (``RunRecord.failure``)."""
    return _FAILURES.get(record.failure or RUN_FAILED, RunFailedError)


@final
class Conflict(StoreError):
    """The store kept another terminal record of a run than the one this runtime wrote."""

    def __init__(self, record: RunRecord) -> None:
        super().__init__(
            f"run {record.run_id} was recorded as {record.status.value} by another runtime "
            "first; that record stands",
            run_id=record.run_id,
        )
        self.record = record


def adopted(record: RunRecord, max_depth: int) -> Outcome:
    """The outcome a run commits with when its terminal *record* was stored elsewhere.

    Raises:
        JsonProblem, TypeError: a completed record whose result is not JSON the
            runtime can keep (a tampered store); the caller fails the run.
    """
    # Imported here: ``_run`` commits through :func:`as_recorded`, so this
    # module is imported while ``_run`` is (adoption itself is rare).
    from ._run import Outcome, StoredEnding

    status = record.status
    if status is RunStatus.COMPLETED:
        transcript = record.transcript
        return Outcome(
            status,
            result=CanonicalJson.of(record.final_result, max_depth=max_depth),
            transcript=(
                None
                if transcript is None
                else CanonicalJson.of(list(transcript), max_depth=max_depth)
            ),
        )
    ending = StoredEnding(record.error_type, record.error_message)
    return Outcome(status, error=ending, failure_type=failure_type_of(record))


def as_recorded(outcome: Outcome, error: StoreError, max_depth: int) -> Outcome:
    """What a run that decided *outcome* commits with when its record met *error*."""
    if type(error) is Conflict:
        from ._run import failed  # see adopted()

        try:
            return adopted(error.record, max_depth)
        except Exception as exc:  # a tampered store: no result is handed out
            return failed(exc)
    return outcome.unrecorded(error)
