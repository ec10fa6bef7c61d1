"""A run as its store holds it: the records a runtime writes (contract §12, §16).

One place builds a :class:`RunRecord` from a :class:`Run` (its admission,
its start and its end), one reads a stored run's conversation back
(:func:`stored_conversation`), and one turns whatever a store raises into
the ``StoreError`` callers get.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, cast, final

from .._errors import StoreError
from .._json import CanonicalJson
from .._status import RunStatus
from .._stores._protocol import RunRecord
from ._conversation import conversation_json
from ._run import safe_message
from ._talk import talk_fields

if TYPE_CHECKING:
    from ._run import Outcome, Run

__all__ = ["Records", "store_error", "stored_conversation"]

_FAILED: Final = RunStatus.FAILED


def _ignore(error: StoreError | None) -> None:
    pass


@final
class _WallStamp:
    """``wall_clock_now()`` for records, formatted at most once per millisecond.

    A record's times are for people to read and carry milliseconds, so the
    text is formatted once per millisecond rather than for each of a run's
    records. It is made from the same millisecond it is kept for, so it is
    exactly what ``wall_clock_now`` gives during that millisecond.
    """

    __slots__ = ("_ms", "_text")

    def __init__(self) -> None:
        self._ms = -1
        self._text = ""

    def __call__(self) -> str:
        ms = time.time_ns() // 1_000_000
        if ms != self._ms:
            self._ms = ms
            # ms / 1000 is exact to well under a microsecond, which
            # fromtimestamp rounds to: the millisecond comes back unchanged.
            self._text = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).isoformat(
                timespec="milliseconds"
            )
        return self._text


def store_error(exc: BaseException, what: str, run_id: str | None = None) -> StoreError:
    """*exc*, raised by a store, as the ``StoreError`` callers get."""
    if isinstance(exc, StoreError):
        return exc
    error = StoreError(
        f"the store failed to {what}: {type(exc).__name__}: {safe_message(exc)}; the store "
        "may be broken or full: check it, then try again",
        run_id=run_id,
    )
    error.__cause__ = exc
    return error


@final
class Records:
    """How one runtime's runs are written: the records of their admission, start and end."""

    __slots__ = ("runtime_id", "splices", "stamp")

    def __init__(self, runtime_id: str, splices: bool) -> None:
        self.runtime_id = runtime_id
        # A splicing store takes a result or transcript as the canonical JSON
        # text the runtime holds (see _codec.encode_state); any other store
        # gets plain JSON data, as the protocol says.
        self.splices = splices
        self.stamp = _WallStamp()

    def of(self, run: Run, status: RunStatus, outcome: Outcome | None) -> RunRecord:
        """The record of *run* with *status* (and, for an end, its *outcome*).

        A terminal record takes the history and admission time of the run's
        admission record: a continuation's history is not decoded again.
        (Only those are kept between the two records: a whole record per live
        run costs more in garbage collection, with thousands of runs live,
        than building the rest again.)
        """
        final_result = transcript = None
        error_type = error_message = failure = None
        ended_at = None
        if outcome is not None:
            error_type, error_message = outcome.error_details(run.timeout)
            if status is _FAILED:
                failure = outcome.failure_type.kind()
            result = outcome.result
            if self.splices:
                # The store splices the canonical text in: nothing decoded here
                # to be encoded again there.
                final_result = result
                transcript = cast(Any, outcome.transcript)
            else:
                if result is not None:
                    final_result = result.copy()
                if outcome.transcript is not None:
                    transcript = tuple(outcome.transcript.copy())
            ended_at = self.stamp()
        continues = run.continues
        if continues is not None:
            # A continuation's history is the conversation of the run it
            # continues, which the store holds already: recorded by reference,
            # so a chain is stored in space linear in its length (contract §12).
            history: tuple[Any, ...] = ()
        elif run.history_record is not None:
            history = run.history_record
        else:
            history = tuple(run.history.copy()) if run.history is not None else ()
        return RunRecord(
            run_id=run.run_id,
            runtime_id=self.runtime_id,
            owner=run.owner,
            subagent=run.subagent.name,
            task=run.task,
            task_summary=run.task_summary,
            status=status,
            history=history,
            replaces=run.replaces,
            final_result=final_result,
            error_type=error_type,
            error_message=error_message,
            failure=failure,
            transcript=transcript,
            admitted_at=run.admitted_at or self.stamp(),
            ended_at=ended_at,
            started_at=run.started_at,
            deadline_at=run.deadline_at,
            continues=continues,
            result_type=run.schema.type_tag if run.schema is not None else None,
            usage=run.usage(),
            **({} if run.talk is None else talk_fields(run.talk, outcome is None)),
        )

    def live(self, run: Run) -> tuple[RunRecord, Callable[[StoreError | None], None]]:
        """*run*'s live record, and what to do once it is committed: the answers it
        holds are durable, and reach the asks that wait for them (contract §19)."""
        record = self.of(run, RunStatus.RUNNING, None)
        talk = run.talk
        if talk is None or not talk.unrecorded:
            return record, _ignore
        return record, talk.recorded_with(list(talk.unrecorded))

    # -- other runtimes sharing the store (contract §16) ------------------------------


def stored_conversation(chain: Sequence[RunRecord], max_depth: int) -> CanonicalJson:
    """The whole conversation of a stored terminal run, as a continuation carries it.

    *chain* is the run and the runs it continues by reference, oldest first
    (:meth:`StoredRuns.conversation` reads them): the first holds its history
    itself, or a transcript. The conversation is that transcript, or the first
    run's history; then each later run (each run, without a transcript) adds
    its task and, if it completed, its result: :func:`conversation_json`, the
    same builder as for a run in memory.

    Raises:
        JsonProblem, TypeError: a record holds data deeper than *max_depth*
            (plus the two levels of a conversation's entries), or no JSON.
    """
    first = chain[0]
    links: Sequence[RunRecord]
    if first.transcript is not None:
        history = CanonicalJson.of(list(first.transcript), max_depth=max_depth + 2)
        links = chain[1:]
    else:
        history = CanonicalJson.of(list(first.history), max_depth=max_depth + 2)
        links = chain
    return conversation_json(
        history,
        [
            (
                link.task,
                CanonicalJson.of(link.final_result, max_depth=max_depth)
                if link.status is RunStatus.COMPLETED
                else None,
            )
            for link in links
        ],
    )
