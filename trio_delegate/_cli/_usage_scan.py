"""The usage every run of a store recorded, read a page at a time (``runs usage``, ``runs show``).

A listing (``Reader.list_runs``) reads whole records: results, transcripts,
histories. A summary of what a store's runs spent needs five columns and
the usage out of each state document, so it reads those alone, a page of
rows at a time by the table's insertion order: however many runs a store
holds, and however large their records, the memory it takes is a page's.
It reads through the store's reader (``usage_rows``), which knows its
table; nothing is written.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final

import attrs

from .._errors import InvalidArgumentsError
from .._json import parse
from .._usage import Usage

if TYPE_CHECKING:
    from ._runs import Reader

__all__ = ["PAGE_ROWS", "ParentFacts", "UsageRow", "UsageSource"]

#: Rows read at a time.
PAGE_ROWS: Final = 500
#: The longest usage document read: a usage this package writes is under 300
#: characters; anything longer is damaged, and not decoded.
_MAX_USAGE_CHARS: Final = 2_000
#: Parent runs remembered (their subagent and day), most recently used kept:
#: the nested runs of one parent are read together.
_PARENTS_KEPT: Final = 4_096


@attrs.frozen
class UsageRow:
    """What a summary reads of one run.

    Attributes:
        run_id: its id (as stored, possibly no run id at all).
        owner: the owner of the parent that started it.
        subagent: its subagent's name.
        status: its status as stored.
        admitted_at: when it was admitted (ISO 8601, as stored).
        usage: what it and its nested runs spent, or ``None``.
        damaged: why its usage cannot be read (its usage is then ``None``).
    """

    run_id: str
    owner: str
    subagent: str
    status: str
    admitted_at: str
    usage: Usage | None
    damaged: str | None = None


@attrs.frozen
class ParentFacts:
    """What a summary needs of the run a nested run's parent belongs to."""

    owner: str
    subagent: str
    admitted_at: str
    has_usage: bool


def _text(value: object) -> str:
    """A stored name as text: the bytes SQLite holds, whatever they are (a byte that
    is not UTF-8 becomes a lone surrogate, which every view escapes)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    return value if isinstance(value, str) else ""


#: The keys of a stored usage (the fields of :class:`Usage`).
_USAGE_KEYS: Final = frozenset(field.name for field in attrs.fields(Usage))


def _usage(value: object) -> tuple[Usage | None, str | None]:
    """The usage a state document held (SQLite gives an object as its JSON text).

    Read as strictly as ``Usage(...)`` checks a report: a count that is a
    float, a string or a bool, or a key no usage has, is damage, not a number.
    """
    if value is None:
        return None, None
    if not isinstance(value, str):
        return None, f"its usage is {type(value).__name__} {value!r:.50}, not an object"
    if len(value) > _MAX_USAGE_CHARS:
        return None, f"its usage is {len(value):,} characters long, not a usage this writes"
    try:
        data = parse(value)
    except ValueError:  # TooDeep included
        return None, f"its usage is not JSON: {value[:100]!r}"
    if not isinstance(data, dict):
        return None, f"its usage is {type(data).__name__} {value[:50]}, not an object"
    unknown = sorted(set(data) - _USAGE_KEYS)
    if unknown:
        return None, f"its usage has keys no usage has: {', '.join(map(repr, unknown))[:200]}"
    try:
        return Usage(**data), None
    except InvalidArgumentsError as exc:
        return None, f"its usage is not valid: {exc.message[:300]}"


class UsageSource:
    """A store's usage, read a page at a time through its reader.

    Args:
        reader: the reader of the store.
    """

    def __init__(self, reader: Reader) -> None:
        self._reader = reader
        self._kept: collections.OrderedDict[str, ParentFacts | None] = collections.OrderedDict()

    def rows(self, *, owner: str | None = None) -> Iterator[UsageRow]:
        """Every run of the store (with *owner*: those of *owner* and its nested
        parents), oldest first, a page at a time.

        Raises:
            StoreError: the store cannot be read.
        """
        if owner is not None and not _encodable(owner):
            return  # no stored owner is text that is not Unicode
        after = 0
        while True:
            page = self._reader.usage_rows(after, owner, PAGE_ROWS)
            for values in page:
                yield _row(values)
            if len(page) < PAGE_ROWS:
                return
            after = int(page[-1][0])

    def parent(self, run_id: str) -> ParentFacts | None:
        """What the store says of run *run_id* (the most recent looked up are
        kept), or ``None`` when it holds no such run.

        Raises:
            StoreError: the store cannot be read.
        """
        kept = self._kept
        if run_id in kept:
            kept.move_to_end(run_id)
            return kept[run_id]
        values = self._reader.usage_row(run_id)
        facts = None
        if values is not None:
            row = _row(values)
            facts = ParentFacts(row.owner, row.subagent, row.admitted_at, row.usage is not None)
        kept[run_id] = facts
        if len(kept) > _PARENTS_KEPT:
            kept.popitem(last=False)
        return facts


def _row(values: Any) -> UsageRow:
    _, run_id, owner, subagent, status, admitted_at, usage = values
    spent, damaged = _usage(usage)
    return UsageRow(
        _text(run_id),
        _text(owner),
        _text(subagent),
        _text(status),
        _text(admitted_at),
        spent,
        damaged,
    )


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
