"""What runs spent, as the ``runs`` views show it: tokens by kind and cost (contract §20).

A terminal record keeps its run's usage: what the run and everything it
delegated spent (its subtree). What the run spent itself is that less what
its nested runs spent: their records name the nested parent as their owner
(``<owner>/<run id>``). :class:`Spend` adds and takes usage away exactly
(whole numbers, decimal costs) whatever a store holds, and every view of a
usage (a table cell, ``runs show``'s rows, JSON) is made here.
"""

from __future__ import annotations

import decimal
import sys
from typing import Any, Final

import attrs

from .._stores._protocol import is_run_id
from .._usage import COUNTS, EXACT, Usage, cost_decimal

__all__ = [
    "TOKEN_KINDS",
    "Spend",
    "cost_text",
    "nested_owner",
    "parent_of",
    "spend_cell",
    "spend_rows",
    "tokens_text",
    "top_owner",
]

#: The token counts ``runs show`` lists, with how a person names them.
TOKEN_KINDS: Final = (
    ("input_tokens", "input"),
    ("output_tokens", "output"),
    ("cache_read_input_tokens", "cache read (in input)"),
    ("cache_creation_input_tokens", "cache write (in input)"),
    ("reasoning_output_tokens", "reasoning (in output)"),
)

_ZERO: Final = decimal.Decimal(0)


@attrs.define(eq=False)
class Spend:
    """A running sum of usages: counts as whole numbers, the cost as an exact decimal.

    Unlike :class:`Usage` it never saturates and may be taken from (a run's
    own spend is its subtree's less its nested runs'); a view shows a
    negative value, which only damaged records can give, as 0.

    Attributes:
        counts: the sum of each of :data:`_usage.COUNTS`, in that order.
        cost: the sum of the costs in US dollars.
        runs: how many usages were added (a usage taken away leaves it).
    """

    counts: list[int] = attrs.field(factory=lambda: [0] * len(COUNTS))
    cost: decimal.Decimal = _ZERO
    runs: int = 0

    def add(self, usage: Usage, sign: int = 1) -> None:
        """Add *usage* (or, with *sign* -1, take it away)."""
        counts = self.counts
        for index, name in enumerate(COUNTS):
            counts[index] += sign * getattr(usage, name)
        self.cost = EXACT.add(self.cost, sign * cost_decimal(usage.cost_usd))
        if sign > 0:
            self.runs += 1

    def merge(self, other: Spend) -> None:
        """Add everything *other* holds."""
        for index, value in enumerate(other.counts):
            self.counts[index] += value
        self.cost = EXACT.add(self.cost, other.cost)
        self.runs += other.runs

    def count(self, name: str) -> int:
        """The sum of the count *name* (``"input_tokens"`` ...), at least 0."""
        return max(0, self.counts[COUNTS.index(name)])

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens, at least 0."""
        return self.count("input_tokens") + self.count("output_tokens")

    @property
    def cost_usd(self) -> float:
        """The cost as a float (at least 0; the largest float for a larger sum)."""
        if self.cost <= 0:
            return 0.0
        value = float(self.cost)
        return min(value, sys.float_info.max)

    def fields(self) -> dict[str, Any]:
        """The sums as the ``--json`` views give a usage: the fields of :class:`Usage`,
        and ``total_tokens``."""
        fields: dict[str, Any] = {name: self.count(name) for name in COUNTS}
        fields["total_tokens"] = self.total_tokens
        fields["cost_usd"] = self.cost_usd
        return fields

    @classmethod
    def of(cls, usage: Usage | None) -> Spend:
        """A sum holding *usage* alone (nothing for ``None``)."""
        spend = cls()
        if usage is not None:
            spend.add(usage)
        return spend


def tokens_text(tokens: int) -> str:
    """A token count as a person reads it: ``"12,345"``."""
    return f"{tokens:,}"


def cost_text(cost: float) -> str:
    """A cost in US dollars: cents, a fraction of a cent shown to four places,
    and a sum no bill holds in exponent form."""
    if cost == 0:
        return "$0.00"
    if cost < 0.01:
        return f"${cost:.4f}" if cost >= 0.0001 else f"${cost:.2g}"
    if cost >= 1e15:
        return f"${cost:.3g}"
    return f"${cost:,.2f}"


def spend_cell(usage: Usage | None) -> str:
    """A table cell for a run's usage: its total tokens and cost; empty when none."""
    if usage is None:
        return ""
    return f"{tokens_text(usage.total_tokens)} tok\n{cost_text(usage.cost_usd)}"


def _summary(spend: Spend) -> str:
    requests = spend.count("requests")
    calls = f", {requests:,} request{'' if requests == 1 else 's'}" if requests else ""
    return f"{tokens_text(spend.total_tokens)} tokens, {cost_text(spend.cost_usd)}{calls}"


def _kinds(spend: Spend) -> str:
    return ", ".join(
        f"{label} {tokens_text(spend.count(name))}"
        for name, label in TOKEN_KINDS
        if spend.count(name) or name in ("input_tokens", "output_tokens")
    )


def spend_rows(subtree: Usage | None, own: Spend | None, nested: int) -> list[tuple[str, str]]:
    """``runs show``'s rows for a run's usage: its subtree's, then its own.

    Args:
        subtree: the usage its record keeps (``None``: none recorded).
        own: what it spent itself (``None``: not worked out).
        nested: how many nested runs with usage the store holds for it.
    """
    if subtree is None:
        return []
    total = Spend.of(subtree)
    rows = [
        ("usage", _summary(total)),
        ("tokens", _kinds(total)),
    ]
    if own is not None and nested:
        runs = f"{nested:,} nested run{'' if nested == 1 else 's'}"
        rows[0] = ("usage", f"{_summary(total)} (with its {runs})")
        rows += [("own usage", _summary(own)), ("own tokens", _kinds(own))]
    return rows


def nested_owner(owner: str, run_id: str) -> str:
    """The owner of the runs that run *run_id* of *owner* delegated (its nested parent)."""
    return f"{owner}/{run_id}"


#: The length of a run id (``run_`` and 32 hex digits).
_RUN_ID_CHARS: Final = 36


def parent_of(owner: str) -> str | None:
    """The run whose nested parent *owner* is (``<owner>/<run id>``), or ``None``."""
    start = len(owner) - _RUN_ID_CHARS
    if start >= 2 and owner[start - 1] == "/":
        tail = owner[start:]
        if is_run_id(tail):
            return tail
    return None


def top_owner(owner: str) -> str:
    """The owner of the top-level run of a nested run of *owner* (*owner* itself when
    it is no nested parent's).

    Linear in the owner's length, however many levels it names.
    """
    end = len(owner)
    while end - _RUN_ID_CHARS >= 2 and owner[end - _RUN_ID_CHARS - 1] == "/":
        if not is_run_id(owner[end - _RUN_ID_CHARS : end]):
            break
        end -= _RUN_ID_CHARS + 1
    return owner[:end]
