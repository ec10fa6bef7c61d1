"""What runs spend and what they may spend (contract §20): :class:`Usage` and :class:`Budget`.

Both are frozen values, checked when they are made: token counts are plain
``int`` from 0 to 2**63-1 (not ``bool``, not ``3.0``), a cost is a finite
``int`` or ``float`` >= 0. Sums saturate at 2**63-1 rather than wrap, and
costs add as exact decimals of each value's shortest form, so ten reports
of 0.1 dollars are 1.0 dollars, not 0.9999999999999999.

:func:`reported_usage` reads what a framework or CLI says it spent, whatever
it says, as a :class:`Usage` (a number that is not a count counts as 0).
"""

from __future__ import annotations

import decimal
import math
import sys
from typing import Any, Final, final

import attrs

from ._checks import builtin, describe
from ._errors import InvalidArgumentsError

__all__ = [
    "COUNTS",
    "EXACT",
    "LIMITS",
    "MAX_COUNT",
    "Budget",
    "Usage",
    "add_costs",
    "check_budget",
    "check_usage",
    "cost_decimal",
    "cost_float",
    "reported_count",
    "reported_usage",
]

#: The largest token or request count (a signed 64-bit integer): sums stop here.
MAX_COUNT: Final = 2**63 - 1

#: The integer fields of a :class:`Usage`, in order.
COUNTS: Final = (
    "requests",
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
    "reasoning_output_tokens",
)

#: The fields of a :class:`Budget`, in order.
LIMITS: Final = (
    "max_requests",
    "max_input_tokens",
    "max_output_tokens",
    "max_total_tokens",
    "max_cost_usd",
)

# Exact enough for any sum of float costs: a float's shortest form has at most
# 17 significant digits and exponents from -324 to 308.
EXACT: Final = decimal.Context(
    prec=1000, Emax=10_000, Emin=-10_000, traps=[decimal.InvalidOperation]
)
_ZERO: Final = decimal.Decimal(0)
_LARGEST: Final = sys.float_info.max


def cost_decimal(value: float) -> decimal.Decimal:
    """*value* as the exact decimal of its shortest form (``0.1`` is ``Decimal('0.1')``)."""
    if not value:
        return _ZERO
    return decimal.Decimal(repr(value))


def cost_float(value: decimal.Decimal) -> float:
    """A decimal sum of costs as a float, saturating at the largest finite float."""
    result = float(value)
    return result if result <= _LARGEST else _LARGEST


def add_costs(first: float, second: float) -> float:
    """``first + second`` as exact decimals of their shortest forms, as a float."""
    if not second:
        return first
    if not first:
        return second
    return cost_float(EXACT.add(cost_decimal(first), cost_decimal(second)))


def _count(field: str, allow_none: bool) -> Any:
    """A validator of one integer field (its value made a plain int by ``builtin``)."""
    allowed = "an int from 0 to 2**63-1" + (", or None for no limit" if allow_none else "")

    def check(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is None and allow_none:
            return
        if type(value) is not int or not 0 <= value <= MAX_COUNT:
            raise InvalidArgumentsError(
                f"{field} must be {allowed}, got {describe(value)}; "
                "pass a whole, non-negative count (not a bool, not a float such as 3.0)"
            )

    return check


def _to_cost(value: Any) -> Any:
    """A cost as a plain float where it is a number that is one (``builtin`` first)."""
    value = builtin(value)
    if type(value) is int:
        try:
            return float(value)
        except OverflowError:
            return value  # too large for any cost: the validator says so
    if type(value) is float:
        return value + 0.0  # -0.0 reads as 0.0
    return value


def _cost(field: str, allow_none: bool) -> Any:
    """A validator of a cost in US dollars (made a float by :func:`_to_cost`)."""
    allowed = "a finite int or float >= 0" + (", or None for no limit" if allow_none else "")

    def check(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is None and allow_none:
            return
        if type(value) is not float or not math.isfinite(value) or value < 0:
            raise InvalidArgumentsError(
                f"{field} must be {allowed} (US dollars), got {describe(value)}; "
                "pass the cost as a number, not a string"
            )

    return check


def _saturated(value: int) -> int:
    return value if value <= MAX_COUNT else MAX_COUNT


@final
@attrs.frozen
class Usage:
    """What one or more model calls spent, as a runner reports it.

    ``input_tokens`` includes the two cache counts and ``output_tokens`` the
    reasoning count (OpenTelemetry GenAI semantics); total tokens are input
    plus output. Usages add field by field with ``+``: counts saturate at
    2**63-1, costs add as exact decimals.

    Args:
        requests: model requests made.
        input_tokens: input (prompt) tokens, cache reads and writes included.
        output_tokens: output tokens, reasoning included.
        cache_read_input_tokens: input tokens read from a prompt cache.
        cache_creation_input_tokens: input tokens written to a prompt cache.
        reasoning_output_tokens: output tokens spent on reasoning.
        cost_usd: what the calls cost, in US dollars.

    Raises:
        InvalidArgumentsError: a count that is not an int from 0 to 2**63-1,
            or a cost that is not a finite number >= 0 (the error names the
            field and the value).
    """

    requests: int = attrs.field(
        default=0, converter=builtin, validator=_count("Usage.requests", False)
    )
    input_tokens: int = attrs.field(
        default=0, converter=builtin, validator=_count("Usage.input_tokens", False)
    )
    output_tokens: int = attrs.field(
        default=0, converter=builtin, validator=_count("Usage.output_tokens", False)
    )
    cache_read_input_tokens: int = attrs.field(
        default=0, converter=builtin, validator=_count("Usage.cache_read_input_tokens", False)
    )
    cache_creation_input_tokens: int = attrs.field(
        default=0, converter=builtin, validator=_count("Usage.cache_creation_input_tokens", False)
    )
    reasoning_output_tokens: int = attrs.field(
        default=0, converter=builtin, validator=_count("Usage.reasoning_output_tokens", False)
    )
    cost_usd: float = attrs.field(
        default=0.0, converter=_to_cost, validator=_cost("Usage.cost_usd", False)
    )

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens (saturating at 2**63-1)."""
        return _saturated(self.input_tokens + self.output_tokens)

    def __add__(self, other: object) -> Usage:
        if type(other) is not Usage:
            return NotImplemented
        return Usage(
            _saturated(self.requests + other.requests),
            _saturated(self.input_tokens + other.input_tokens),
            _saturated(self.output_tokens + other.output_tokens),
            _saturated(self.cache_read_input_tokens + other.cache_read_input_tokens),
            _saturated(self.cache_creation_input_tokens + other.cache_creation_input_tokens),
            _saturated(self.reasoning_output_tokens + other.reasoning_output_tokens),
            add_costs(self.cost_usd, other.cost_usd),
        )


@final
@attrs.frozen
class Budget:
    """The most a scope (a run, a parent, the runtime) may spend; ``None`` is no limit.

    A limit is passed when what was spent is strictly greater; a limit of 0
    is a real limit (any positive spend passes it), never "unlimited".

    Args:
        max_requests: model requests.
        max_input_tokens: input tokens (cache counts included).
        max_output_tokens: output tokens (reasoning included).
        max_total_tokens: input plus output tokens.
        max_cost_usd: cost in US dollars.

    Raises:
        InvalidArgumentsError: a limit that is neither ``None`` nor a
            non-negative int (a finite number >= 0 for the cost).
    """

    max_requests: int | None = attrs.field(
        default=None, converter=builtin, validator=_count("Budget.max_requests", True)
    )
    max_input_tokens: int | None = attrs.field(
        default=None, converter=builtin, validator=_count("Budget.max_input_tokens", True)
    )
    max_output_tokens: int | None = attrs.field(
        default=None, converter=builtin, validator=_count("Budget.max_output_tokens", True)
    )
    max_total_tokens: int | None = attrs.field(
        default=None, converter=builtin, validator=_count("Budget.max_total_tokens", True)
    )
    max_cost_usd: float | None = attrs.field(
        default=None, converter=_to_cost, validator=_cost("Budget.max_cost_usd", True)
    )


def check_budget(field: str, value: Any) -> Budget | None:
    """*value* if it is a :class:`Budget` or ``None``.

    Raises:
        InvalidArgumentsError: anything else, naming *field*.
    """
    if value is None or type(value) is Budget:
        return value
    raise InvalidArgumentsError(
        f"{field} must be a trio_delegate.Budget or None, got {describe(value)}; "
        "write td.Budget(max_total_tokens=..., max_cost_usd=...)"
    )


def check_usage(field: str, value: Any) -> Usage:
    """*value* if it is a :class:`Usage`.

    Raises:
        InvalidArgumentsError: anything else, naming *field*.
    """
    if type(value) is Usage:
        return value
    raise InvalidArgumentsError(
        f"{field} must be a trio_delegate.Usage, got {describe(value)}; "
        "write td.Usage(input_tokens=..., output_tokens=..., cost_usd=...)"
    )


# -- what frameworks and CLIs report ---------------------------------------------------


def reported_count(value: Any) -> int:
    """A token or request count from a framework or CLI: a whole number >= 0, else 0.

    Such numbers are data from elsewhere: a bool, a float, a negative number
    or a string is not a count, and one past 2**63-1 is clamped there.
    """
    if type(value) is not int or value < 0:
        return 0
    return min(value, MAX_COUNT)


def _reported_cost(value: Any) -> float:
    """A cost in US dollars from a framework or CLI: a finite number >= 0, else 0.0."""
    if type(value) not in (int, float):
        return 0.0
    try:
        cost = float(value)
    except OverflowError:
        return 0.0
    return cost if math.isfinite(cost) and cost >= 0 else 0.0


def reported_usage(
    *,
    requests: Any = 0,
    input_tokens: Any = 0,
    output_tokens: Any = 0,
    cache_read_input_tokens: Any = 0,
    cache_creation_input_tokens: Any = 0,
    reasoning_output_tokens: Any = 0,
    cost_usd: Any = 0.0,
) -> Usage:
    """A :class:`Usage` from numbers a framework or CLI reported, whatever they are.

    Each field is read as :func:`reported_count` (or :func:`_reported_cost`)
    reads it, so a report that is not one never fails the run that made it:
    it counts as 0.
    ``input_tokens`` is raised to at least the two cache counts and
    ``output_tokens`` to the reasoning count, as :class:`Usage` counts them.
    """
    cache_read = reported_count(cache_read_input_tokens)
    cache_creation = reported_count(cache_creation_input_tokens)
    reasoning = reported_count(reasoning_output_tokens)
    return Usage(
        requests=reported_count(requests),
        input_tokens=max(reported_count(input_tokens), min(cache_read + cache_creation, MAX_COUNT)),
        output_tokens=max(reported_count(output_tokens), reasoning),
        cache_read_input_tokens=cache_read,
        cache_creation_input_tokens=cache_creation,
        reasoning_output_tokens=reasoning,
        cost_usd=_reported_cost(cost_usd),
    )
