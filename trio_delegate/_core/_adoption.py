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

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Final, cast, final

from .._errors import InvalidResultError, RunFailedError, StoreError
from .._json import CanonicalJson
from .._status import RunStatus
from .._stores._protocol import INVALID_RESULT, RUN_FAILED, ResultStore, RunRecord

if TYPE_CHECKING:
    from ._run import Outcome

__all__ = [
    "Conflict",
    "adopted",
    "as_recorded",
    "failure_type_of",
    "ignored_endings",
    "kept_endings",
]

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


def ignored_endings(answer: object, batch: Sequence[RunRecord]) -> list[str] | None:
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


async def kept_endings(
    store: ResultStore,
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
            stored = await store.get(run_id)
        except Exception as exc:
            # The store kept another ending, which cannot be read now: the
            # run's own ending is not its record and is not handed out.
            from ._records import store_error  # see adopted()

            conflicts[run_id] = store_error(exc, f"read run {run_id}", run_id)
            continue
        if stored is not None and stored.status.is_terminal:
            conflicts[run_id] = Conflict(stored)
    for record in unknown:
        if not record.status.is_terminal or record.run_id in failures:
            continue
        try:
            stored = await store.get(record.run_id)
        except Exception:
            continue  # unreadable now: the run ends as it decided
        if (
            stored is not None
            and stored.status.is_terminal
            and (stored.status, stored.error_type) != (record.status, record.error_type)
        ):
            conflicts[record.run_id] = Conflict(stored)
    return conflicts
