"""Records as JSON text, for the stores that keep them in a database.

A record is kept as two JSON documents:

* the *head* — what is fixed at admission (ids, owner, subagent, task,
  summary, history, ``replaces``, admission time);
* the *state* — what changes as the run goes on (status, result or error,
  transcript, start, deadline, end).

A run's head is encoded once, when it is admitted; later writes of a live
run rewrite only its state (see :class:`LiveHeads`), so a long history is
not encoded and written again at every step. The sticky flags
(``cancel_requested``, ``observed``) live in their own columns, which a
write can set but never clear.

Encoding is strict: a record that JSON cannot carry exactly (NaN, a lone
surrogate, a cycle, nesting deeper than the encoder's recursion limit) is a
``StoreError`` naming the run, before anything reaches the database.
Decoding is defensive: whatever a tampered database holds comes back as a
valid record or a ``StoreError``, never as anything else.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any, Final, final

import attrs

from .._converter import converter
from .._errors import StoreError
from .._json import CanonicalJson
from .._status import RunStatus
from .._usage import Usage
from ._protocol import (
    INVALID_RESULT,
    RUN_FAILED,
    ChangeBatch,
    RunRecord,
    fold,
    is_run_id,
    is_runtime_id,
)

#: ``error_type`` of a schema mismatch, in rows written before ``failure`` existed.
_SCHEMA_MISMATCH: Final = "SchemaMismatch"

__all__ = [
    "EncodedRecord",
    "LiveHeads",
    "change_batch",
    "decode_full_row",
    "decode_record",
    "decode_row",
    "encode_requests",
    "requests_after",
    "encode_record",
    "encode_state",
    "fold",
    "status_of",
    "stored_usage",
    "with_head",
]


def _not_json(value: object) -> object:
    raise TypeError(f"{type(value).__name__} is not a JSON type")


_ENCODER: Final = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), allow_nan=False, check_circular=False
)
# JSONEncoder.encode builds a C encoder on every call; building it once
# halves the cost of encoding a small document. Same output, same errors.
_C_ENCODER: Final = (
    None
    if c_make_encoder is None
    else c_make_encoder(None, _not_json, encode_basestring, None, ":", ",", False, False, False)
)


def _encode(value: object) -> str:
    if _C_ENCODER is None:  # pragma: no cover - CPython always has the C encoder
        return _ENCODER.encode(value)
    return "".join(_C_ENCODER(value, 0))


#: The head key of a live run whose head this store handle wrote (see LiveHeads).
_HeadKey = tuple[str, str, str, str, str, str | None, str, tuple[Any, ...], str | None, str | None]


@final
class EncodedRecord:
    """A record ready for the database: its JSON texts and the values of its columns."""

    __slots__ = ("head", "record", "state")

    def __init__(self, record: RunRecord, head: str | None, state: str) -> None:
        self.record = record
        self.head = head  # None: the stored head is already this one
        self.state = state


def _checked(text: str) -> str:
    # The encoder leaves a lone surrogate in place (ensure_ascii=False); UTF-8
    # cannot carry it, so the database would refuse it later, or worse.
    if not text.isascii():
        text.encode("utf-8")
    return text


def _head(record: RunRecord) -> str:
    head = {
        "run_id": record.run_id,
        "runtime_id": record.runtime_id,
        "owner": record.owner,
        "subagent": record.subagent,
        "task": record.task,
        "task_summary": record.task_summary,
        "history": record.history,
        "replaces": record.replaces,
        "admitted_at": record.admitted_at,
        "result_type": record.result_type,
    }
    if record.continues is not None:
        # A continuation by reference (schema versions: SQLite 4, PostgreSQL 3).
        head["continues"] = record.continues
    return _checked(_encode(head))


def encode_state(record: RunRecord) -> str:
    """The state document of *record* (its status and everything that changes with it).

    A result or transcript the runtime hands over as its canonical JSON text
    (a ``CanonicalJson``, checked when it was made) is spliced in as it is,
    not decoded and encoded again.
    """
    result = record.final_result
    transcript: Any = record.transcript
    if type(result) is not CanonicalJson and type(transcript) is not CanonicalJson:
        return _checked(
            _encode(
                {
                    "status": record.status.value,
                    "final_result": result,
                    "error_type": record.error_type,
                    "error_message": record.error_message,
                    "failure": record.failure,
                    "transcript": transcript,
                    "started_at": record.started_at,
                    "deadline_at": record.deadline_at,
                    "ended_at": record.ended_at,
                    **_talk_of(record),
                    **_usage_of(record),
                }
            )
        )
    rest = _checked(
        _encode(
            {
                "status": record.status.value,
                "error_type": record.error_type,
                "error_message": record.error_message,
                "failure": record.failure,
                "started_at": record.started_at,
                "deadline_at": record.deadline_at,
                "ended_at": record.ended_at,
                **_talk_of(record),
                **_usage_of(record),
            }
        )
    )
    return f'{{"final_result":{_text_of(result)},"transcript":{_text_of(transcript)},{rest[1:]}'


def _usage_of(record: RunRecord) -> dict[str, Any]:
    """The ``usage`` key of a state document, only when the run reported any (contract
    §20): a record without it reads as it did before usage was kept."""
    usage = record.usage
    if usage is None:
        return {}
    return {"usage": attrs.asdict(usage)}


def _talk_of(record: RunRecord) -> dict[str, Any]:
    """The ``questions``, ``answers`` and ``progress`` keys of a state document
    (contract §19), each only when there is any: a run that never asked or
    reported writes what it wrote before they were kept."""
    talk: dict[str, Any] = {}
    if record.questions:
        talk["questions"] = record.questions
    if record.answers:
        talk["answers"] = record.answers
    if record.progress is not None:
        talk["progress"] = record.progress
    return talk


def encode_requests(requests: Sequence[Any]) -> str | None:
    """The ``answer_requests`` column of a row: JSON text, or ``None`` for none.

    Raises:
        ValueError, TypeError: they are not plain JSON (a lone surrogate, say).
    """
    if not requests:
        return None
    return _checked(_encode(list(requests)))


def _open_question_ids(state: object) -> set[str]:
    """The ids of the open questions a state document holds."""
    data = json.loads(_text(state))
    questions = data.get("questions", ()) if isinstance(data, dict) else ()
    return {
        entry["question_id"]
        for entry in questions
        if isinstance(entry, dict) and isinstance(entry.get("question_id"), str)
    }


def requests_after(
    status: RunStatus, state: object, stored: object, request: Mapping[str, Any]
) -> str | None:
    """A row's ``answer_requests`` column once *request* is left on it.

    Only a live run's open question takes one, and only its first (the
    first answer left wins, as the owner applies the first it reads); the
    requests for questions no longer open are dropped, so a row holds at
    most one per open question, however many are left.

    Raises:
        ValueError, TypeError, KeyError: the row holds no JSON this package wrote.
    """
    existing: list[Any] = json.loads(_text(stored)) if stored is not None else []
    if status.is_terminal:
        return encode_requests(())
    open_ids = _open_question_ids(state)
    kept = [
        entry
        for entry in existing
        if isinstance(entry, dict) and entry.get("question_id") in open_ids
    ]
    question_id = request["question_id"]
    if question_id in open_ids and all(entry["question_id"] != question_id for entry in kept):
        kept.append(dict(request))
    return encode_requests(kept)


def stored_usage(text: object) -> Usage | None:
    """The usage a state document held, from its JSON *text* (a database read it
    out); ``None`` when there is none, or it is not usage this package wrote."""
    if not isinstance(text, str):
        return None
    try:
        usage: Usage = converter.structure(json.loads(text), Usage)
    except Exception:
        return None  # a damaged row reads as one without usage; reading it says more
    return usage


def _text_of(value: Any) -> str:
    if type(value) is CanonicalJson:
        return value.text
    return _checked(_encode(value))


def _reason(exc: BaseException) -> str:
    if isinstance(exc, UnicodeEncodeError):
        return (
            f"it holds text that is not valid Unicode (a lone surrogate, "
            f"{exc.object[exc.start : exc.end]!r})"
        )
    if isinstance(exc, RecursionError):
        return "it is nested too deeply to be written as JSON"
    if isinstance(exc, ValueError) and "JSON compliant" in str(exc):
        return "it holds a number JSON cannot carry (NaN or infinity)"
    return f"it is not plain JSON data ({type(exc).__name__}: {exc})"


def encode_record(record: RunRecord, where: str, heads: LiveHeads) -> EncodedRecord:
    """Encode *record* for a write; its head only if the database may not hold it yet.

    Raises:
        StoreError: the record has a malformed id, or cannot be written as
            JSON; it names the run.
    """
    run_id = record.run_id
    if not (is_run_id(run_id) and is_runtime_id(record.runtime_id)) or not (
        record.replaces is None or is_run_id(record.replaces)
    ):
        raise StoreError(
            f"the record of run {run_id!r} cannot be written to the store {where}: its "
            f"run_id, runtime_id or replaces ({record.runtime_id!r}, {record.replaces!r}) is "
            "not an id a runtime made (run_/rt_ and 32 lowercase hex digits); nothing of "
            "this batch was written",
            path=where,
            run_id=run_id if isinstance(run_id, str) else None,
        )
    try:
        state = encode_state(record)
        head = None if heads.holds(record) else _head(record)
    except Exception as exc:
        raise StoreError(
            f"the record of run {run_id} cannot be written to the store {where}: "
            f"{_reason(exc)}; nothing of this batch was written",
            path=where,
            run_id=run_id,
        ) from exc
    return EncodedRecord(record, head, state)


def with_head(encoded: EncodedRecord, where: str) -> EncodedRecord:
    """*encoded* with its head, for a run whose row was not where the store expected it."""
    if encoded.head is not None:
        return encoded
    return encode_record(encoded.record, where, _NO_HEADS)


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"a record column holds {type(value).__name__}, not text")
    return value


def decode_record(
    head: object,
    state: object,
    cancel_requested: object,
    observed: object,
    where: str,
    requests: object = None,
) -> RunRecord:
    """The record kept as *head* and *state* texts, the two flag columns and the
    answers other runtimes left (*requests*: JSON text or ``None``).

    A row written by an earlier schema keeps the whole record in *head* and
    no *state*.

    Raises:
        StoreError: the row is not a record this package wrote.
    """
    try:
        data = json.loads(_text(head))
        if state is not None:
            data.update(json.loads(_text(state)))
        data["cancel_requested"] = bool(cancel_requested)
        data["observed"] = bool(observed)
        if requests is not None:
            data["answer_requests"] = json.loads(_text(requests))
        if "failure" not in data and data.get("status") == RunStatus.FAILED.value:
            # A row written before records said their failure's kind: a result
            # that broke its schema was named by its exception's type.
            mismatch = data.get("error_type") == _SCHEMA_MISMATCH
            data["failure"] = INVALID_RESULT if mismatch else RUN_FAILED
        record = converter.structure(data, RunRecord)
    except Exception as exc:
        raise StoreError(
            f"the store {where} holds a record that is not valid trio_delegate JSON "
            f"({type(exc).__name__}: {exc}); it was changed by something else",
            path=where,
        ) from exc
    if not (
        is_run_id(record.run_id)
        and is_runtime_id(record.runtime_id)
        and (record.continues is None or is_run_id(record.continues))
    ):
        raise StoreError(
            f"the store {where} holds a record whose ids ({record.run_id!r}, "
            f"{record.runtime_id!r}) are not ids a runtime made; it was changed by "
            "something else",
            path=where,
        )
    return record


def decode_row(row: Sequence[Any], where: str) -> RunRecord:
    """The record kept in a row of ``(head, state, cancel_requested, observed)``."""
    return decode_record(row[0], row[1], row[2], row[3], where)


def decode_full_row(row: Sequence[Any], where: str) -> RunRecord:
    """The record kept in a row of ``(head, state, cancel_requested, observed,
    answer_requests)``, as a store reads its own rows."""
    return decode_record(row[0], row[1], row[2], row[3], where, row[4])


def change_batch(cursor: int, rows: Sequence[Sequence[Any]], where: str) -> ChangeBatch:
    """The records changed after *cursor*, from rows of ``(seq, head, state, flags...,
    answer_requests)``."""
    if not rows:
        return ChangeBatch(cursor)
    records = tuple(decode_full_row(row[1:], where) for row in rows)
    return ChangeBatch(max(cursor, int(rows[-1][0])), records)


def status_of(value: object, where: str, row: object) -> RunStatus:
    """A status column's value, checked.

    Raises:
        StoreError: it is not a status.
    """
    if isinstance(value, str) and value in _STATUSES:
        return RunStatus(value)
    raise StoreError(
        f"the store {where} holds a row ({row!r}) whose status {value!r} is not a run "
        "status; it was changed by something else",
        path=where,
    )


_STATUSES: Final = frozenset(status.value for status in RunStatus)


@final
class LiveHeads:
    """The heads of the live runs this store handle wrote, by run id.

    A later write of such a run whose head is unchanged rewrites only its
    state. Should the row have vanished meanwhile, the store notices (no row
    updated) and writes the whole record after all.
    """

    __slots__ = ("_heads",)

    #: Forget everything past this many live runs (a safety bound: a runtime
    #: holds at most Config.max_live_runs of them).
    _LIMIT: Final = 100_000

    def __init__(self) -> None:
        self._heads: dict[str, _HeadKey] = {}

    @staticmethod
    def _key(record: RunRecord) -> _HeadKey:
        return (
            record.runtime_id,
            record.owner,
            record.subagent,
            record.task,
            record.task_summary,
            record.replaces,
            record.admitted_at,
            record.history,
            record.continues,
            record.result_type,
        )

    def holds(self, record: RunRecord) -> bool:
        """Whether the stored head of *record*'s run is already *record*'s head."""
        key = self._heads.get(record.run_id)
        return key is not None and key == self._key(record)

    def committed(self, records: list[EncodedRecord]) -> None:
        """*records* are committed: remember the live ones' heads, forget the ended ones."""
        heads = self._heads
        for encoded in records:
            record = encoded.record
            if record.status.is_terminal:
                heads.pop(record.run_id, None)
            else:
                heads[record.run_id] = self._key(record)
        if len(heads) > self._LIMIT:
            heads.clear()

    def forget(self, run_ids: list[str]) -> None:
        """Forget *run_ids* (their rows were not where the store expected them)."""
        for run_id in run_ids:
            self._heads.pop(run_id, None)


#: Holds nothing: encode_record with it always encodes the head.
_NO_HEADS: Final = LiveHeads()
