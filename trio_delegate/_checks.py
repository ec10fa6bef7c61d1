"""Argument checks shared by every public entry point.

Each check raises :class:`InvalidArgumentsError` whose message names the
field, shows the value and says what is allowed.
"""

from __future__ import annotations

import math
from typing import Any

from ._errors import InvalidArgumentsError

__all__ = ["check_bool", "check_int", "check_seconds", "check_text", "describe"]


def describe(value: object, limit: int = 60) -> str:
    """A short ``repr`` of *value* for error messages."""
    text = repr(value)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


def check_int(field: str, value: Any, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidArgumentsError(
            f"{field} must be an integer >= {minimum}, got {describe(value)}"
        )
    return value


def check_seconds(field: str, value: Any, *, allow_zero: bool, allow_none: bool) -> float | None:
    """Check a duration in seconds on the Trio clock."""
    if value is None and allow_none:
        return None
    ok = (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and math.isfinite(value)
        and (value >= 0 if allow_zero else value > 0)
    )
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        extra = " or None (no limit)" if allow_none else ""
        raise InvalidArgumentsError(
            f"{field} must be a finite number of seconds {bound}{extra}, got {describe(value)}"
        )
    return float(value)


def check_bool(field: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgumentsError(f"{field} must be True or False, got {describe(value)}")
    return value


def check_text(field: str, value: Any, *, max_chars: int, allow_blank: bool = False) -> str:
    # The common case first, without building anything: isspace() scans in C
    # where strip() would copy the text.
    if type(value) is str and 0 < len(value) <= max_chars and not value.isspace():
        return value
    if not isinstance(value, str):
        raise InvalidArgumentsError(f"{field} must be a string, got {describe(value)}")
    if not allow_blank and not value.strip():
        raise InvalidArgumentsError(f"{field} must not be empty or only whitespace")
    if len(value) > max_chars:
        raise InvalidArgumentsError(
            f"{field} is {len(value)} characters long; at most {max_chars} are allowed "
            "(shorten it, or raise the limit in Config)"
        )
    return value
