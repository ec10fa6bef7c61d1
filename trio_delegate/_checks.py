"""Argument checks shared by every public entry point.

Each check raises :class:`InvalidArgumentsError` whose message names the
field, shows the value and says what is allowed.
"""

from __future__ import annotations

import itertools
import math
import re
import reprlib
from collections.abc import Mapping
from typing import Any, Final, TypeGuard, TypeVar, overload

from ._errors import InvalidArgumentsError
from ._json import text_problem

__all__ = [
    "BriefDict",
    "MAX_ITEMS",
    "BriefList",
    "builtin",
    "check_bool",
    "check_int",
    "check_seconds",
    "check_text",
    "describe",
    "is_a",
    "is_mapping",
    "read_items",
    "terminal_safe",
    "terminal_safe_strings",
]

_T = TypeVar("_T")

#: The most items a sequence of subagents or names is read for: an iterable
#: that never ends must not hold the caller forever.
MAX_ITEMS: Final = 10_000


class BriefDict(dict[Any, Any]):
    """A dict whose ``repr`` is :func:`describe`'s: short, whatever it holds.

    Code that formats a value into a message with ``repr`` (jsonschema does,
    for every error) would otherwise copy a large value whole, once per error.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return describe(self)


class BriefList(list[Any]):
    """A list whose ``repr`` is :func:`describe`'s (see :class:`BriefDict`)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return describe(self)


class _ShortRepr(reprlib.Repr):
    """``repr`` bounded in depth, width and length, for values from anywhere."""

    # reprlib finds these by the type's name: brief containers nest level by
    # level like plain ones.
    repr_BriefDict = reprlib.Repr.repr_dict
    repr_BriefList = reprlib.Repr.repr_list

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel = 3
        self.maxdict = 4
        self.maxlist = self.maxtuple = self.maxset = 6
        self.maxstring = 60

    def repr_int(self, x: int, level: int) -> str:
        # repr() of an integer over 4,300 digits raises; a long one says little.
        if x.bit_length() > 128:
            return f"<an integer of about {x.bit_length() * 0.30103:.0f} digits>"
        return repr(x)

    def repr_function(self, x: Any, level: int) -> str:
        # reprlib cuts an object's repr in the middle (``<function syn...x7f…>``):
        # a function is told by its name, and the address says nothing.
        name = getattr(x, "__qualname__", None)
        if not isinstance(name, str):
            return self.repr_instance(x, level)
        return f"<function {name[: self.maxstring]}>"

    repr_builtin_function_or_method = repr_function
    repr_method = repr_function

    def repr_instance(self, x: object, level: int) -> str:
        try:
            return super().repr_instance(x, level)
        except Exception:
            return f"<{type(x).__name__}>"


_SHORT = _ShortRepr()


def describe(value: object, limit: int = 60) -> str:
    """A short ``repr`` of *value* for error messages, cheap whatever *value* is.

    Bounded in depth and size: a megabyte of text, a 400-digit integer or a
    list a million levels deep cost no more than a small value.
    """
    try:
        text = _SHORT.repr(value)
    except Exception:
        # reprlib picks its method by the type's name: a class named "int"
        # or "dict" that is nothing of the sort fails in it.
        text = f"<{type(value).__name__}>"
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


@overload
def is_a(value: object, kind: type[_T]) -> TypeGuard[_T]: ...
@overload
def is_a(value: object, kind: tuple[type, ...]) -> bool: ...
def is_a(value: object, kind: type | tuple[type, ...]) -> bool:
    """``isinstance(value, kind)`` judged by *value*'s own type.

    ``isinstance`` asks the object for its ``__class__`` when its type is not
    *kind*: a host's object may define that to raise, or to claim a type it
    does not have (a ``str`` whose text cannot then be read). Its type
    cannot lie.
    """
    return issubclass(type(value), kind)


def is_mapping(value: object) -> TypeGuard[Mapping[Any, Any]]:
    """``isinstance(value, Mapping)``, judged by *value*'s own type (see :func:`is_a`)."""
    return issubclass(type(value), Mapping)


def read_items(field: str, value: Any, what: str, limit: int) -> list[Any]:
    """The items of the iterable *value*, read once, at most *limit* of them.

    An iterable may never end (an iterator that counts, an object whose
    ``__getitem__`` answers every index): reading stops after *limit* items.

    Raises:
        InvalidArgumentsError: *value* is not iterable, reading it raised, or
            it has more than *limit* items.
    """
    try:
        items = list(itertools.islice(value, limit + 1))
    except Exception:
        raise InvalidArgumentsError(f"{field} must be {what}, got {describe(value)}") from None
    if len(items) > limit:
        raise InvalidArgumentsError(
            f"{field} has more than {limit} items ({describe(value)}), or never ends; "
            f"at most {limit} are allowed: pass a shorter sequence"
        )
    return items


def builtin(value: Any) -> Any:
    """*value* as the builtin ``str``, ``int`` or ``float`` it is an instance of;
    anything else as it is.

    A host may pass a subclass (an enum member, say) where text or a number is
    expected. Its own ``__hash__``, ``__eq__``, ``strip`` or ``__float__``
    could do anything; the copy made here by the builtin type's own method
    runs none of them, now or later.
    """
    cls = type(value)
    if cls is str or cls is int or cls is float or cls is bool:
        return value
    # By the type itself: see is_a.
    if issubclass(cls, str):
        return str.__str__(value)
    if issubclass(cls, int):  # bool has no subclasses
        return int.__int__(value)
    if issubclass(cls, float):
        return float.__float__(value)
    return value


def check_int(field: str, value: Any, *, minimum: int, maximum: int | None = None) -> int:
    """Check an integer setting: at least *minimum* and, given it, at most *maximum*.

    Raises:
        InvalidArgumentsError: naming the field, the value and the range.
    """
    value = builtin(value)
    if type(value) is not int or value < minimum or (maximum is not None and value > maximum):
        bound = f">= {minimum}" if maximum is None else f"from {minimum} to {maximum}"
        raise InvalidArgumentsError(f"{field} must be an integer {bound}, got {describe(value)}")
    return value


def _as_finite_float(value: Any) -> float | None:
    """*value* as a finite float, or ``None`` when it is no number or does not fit one."""
    value = builtin(value)
    if type(value) is not int and type(value) is not float:
        return None
    try:
        number = float(value)  # an integer of 400 digits does not fit
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def check_seconds(field: str, value: Any, *, allow_zero: bool, allow_none: bool) -> float | None:
    """Check a duration in seconds on the Trio clock: a finite number that fits a float."""
    if value is None and allow_none:
        return None
    number = _as_finite_float(value)
    ok = number is not None and (number >= 0 if allow_zero else number > 0)
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        extra = " or None (no limit)" if allow_none else ""
        raise InvalidArgumentsError(
            f"{field} must be a finite number of seconds {bound}{extra}, got {describe(value)}"
        )
    return number


def check_bool(field: str, value: Any) -> bool:
    if value is not True and value is not False:
        raise InvalidArgumentsError(f"{field} must be True or False, got {describe(value)}")
    return value


def check_text(field: str, value: Any, *, max_chars: int, allow_blank: bool = False) -> str:
    """Check text from a caller or a model: a string, not blank, not too long, valid Unicode."""
    # The common case first, without building anything: isspace() and
    # isascii() scan in C where strip() or encode() would copy the text.
    if (
        type(value) is str
        and 0 < len(value) <= max_chars
        and not value.isspace()
        and value.isascii()
    ):
        return value
    if not is_a(value, str):
        raise InvalidArgumentsError(f"{field} must be a string, got {describe(value)}")
    text: str = builtin(value)
    problem = text_problem(text)
    if problem is not None:
        raise InvalidArgumentsError(
            f"{field} must be valid Unicode text: {problem}; send the text as UTF-8"
        )
    if not allow_blank and not text.strip():
        raise InvalidArgumentsError(f"{field} must not be empty or only whitespace")
    if len(text) > max_chars:
        raise InvalidArgumentsError(
            f"{field} is {len(text)} characters long; at most {max_chars} are allowed "
            "(shorten it, or raise the limit in Config)"
        )
    return text


# What a terminal would act on rather than show: C0 controls (but the line
# break), DEL and C1 controls (ESC and CSI among them), the marks and
# overrides that reorder text, and lone surrogates (not text at all).
TERMINAL_UNSAFE: Final = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_safe(text: str) -> str:
    """*text* with what a terminal would act on (escape sequences, controls,
    reordering marks, lone surrogates) written as ``\\xNN`` / ``\\uNNNN`` escapes.

    For whatever is printed to a person from a file, a store or a process
    (a configuration's names and keys, an import error's message).
    """
    return TERMINAL_UNSAFE.sub(_escape, text)


# What JSON and TOML writers may leave as it is inside a string (they escape
# the other C0 controls themselves; TOML keeps tab) and a terminal would act on.
_UNSAFE_IN_STRINGS: Final = re.compile(
    "[\x09\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)


def _escape_in_string(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def terminal_safe_strings(document: str) -> str:
    """*document* (JSON, or TOML from a writer that escapes C0 controls) with
    what a terminal would act on written as ``\\uNNNN`` escapes.

    Both formats read such an escape in a string as the character itself,
    and a writer leaves these characters nowhere but in strings: the data is
    unchanged, only its text is safe to print.
    """
    return _UNSAFE_IN_STRINGS.sub(_escape_in_string, document)
