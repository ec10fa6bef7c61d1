"""JSON values from models and runners: bounded checks and one canonical form.

Everything that crosses the runtime as data (tool arguments, schemas,
results, transcripts) can come from a model or a runner and can be anything
(contract §15). This module is where such a value is checked — nesting
depth, valid Unicode, numbers that fit, size — without recursion, so a
hostile value can neither exhaust the interpreter's stack nor hold the event
loop for long, and where a value is turned into its one canonical JSON text.

A run's result and transcript are held in that text from settlement on:
memory and store hold the same thing, and every answer decodes a fresh copy,
so no caller can change what another one sees (contract §5, §15).
"""

from __future__ import annotations

import json
import types
from json.encoder import encode_basestring
from typing import Any, Final, final

__all__ = [
    "DEFAULT_MAX_NESTING",
    "IMMUTABLE_SCALARS",
    "MAX_NESTING_LIMIT",
    "CanonicalJson",
    "JsonProblem",
    "NULL",
    "SMALL_NODES",
    "TooDeep",
    "check_nesting",
    "decode",
    "encode",
    "escape_text",
    "is_small",
    "plain",
    "text_problem",
]

#: contract §15: ``Config.max_nesting_depth`` by default.
DEFAULT_MAX_NESTING: Final = 64

#: The largest ``Config.max_nesting_depth`` accepted (contract §13, §15).
#: Parts of the runtime and the libraries it hands values to walk a value by
#: recursion (the C JSON encoder and decoder, cattrs, equality keys of
#: ``uniqueItems``), two or three frames a level; a value this deep leaves
#: them well inside Python's default recursion limit of 1,000 frames,
#: whatever the caller's own stack holds.
MAX_NESTING_LIMIT: Final = 200

#: Items in a value's containers up to which it is handled on the event loop
#: (see :func:`is_small`): well under a millisecond of work.
SMALL_NODES: Final = 2_000

#: Types whose values are never copied: nobody can change them.
IMMUTABLE_SCALARS: Final = (str, int, float, bool, type(None))

#: What nests: the containers a JSON value is walked through. Built once:
#: ``dict | list | tuple`` written in an ``isinstance`` call builds a new union
#: on every call, which costs more than the check itself.
_CONTAINERS: Final = dict | list | tuple

_new = object.__new__

# Built once: json.dumps with options builds a new encoder on every call.
_ENCODER: Final = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


class JsonProblem(ValueError):
    """A value is not a JSON value this runtime accepts; the message says why."""


class TooDeep(JsonProblem):
    """A value nests deeper than allowed."""


def text_problem(text: str) -> str | None:
    """Why *text* is not valid Unicode (a lone surrogate), or ``None``.

    ASCII, the common case, is decided without encoding anything.
    """
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (
            f"it holds a lone surrogate (U+{ord(text[exc.start]):04X}) at index {exc.start}, "
            "which is not valid Unicode"
        )
    return None


def escape_text(text: str) -> str:
    """*text* with every code point that is not valid Unicode written as an escape.

    For text that must be recorded whatever it holds (an exception's message,
    a process's stderr): ``"\\ud800"`` becomes the six characters ``\\ud800``.
    """
    if text_problem(text) is None:
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def check_nesting(value: Any, max_depth: int, max_items: int | None = None) -> None:
    """Raise :class:`JsonProblem` if containers in *value* nest deeper than
    *max_depth* or, given *max_items*, hold more items than that all told.

    Iterative: a value a million levels deep costs a loop, not the stack;
    with *max_items*, a value of a million items costs no more than one of
    *max_items*. Lists, tuples and mappings are containers; a scalar is
    depth 0. A subclass of a builtin container is read through the builtin
    type's own methods (see :func:`_items`): its ``__iter__``, ``values``
    or ``__len__`` are never called.

    Raises:
        JsonProblem: naming the depth or the count and the limit.
    """
    if _is_container(type(value)):
        _shape(value, max_depth, max_items)


def _is_container(cls: type) -> bool:
    """Whether values of *cls* nest: ``dict``, ``list``, ``tuple`` or a subclass.

    Decided on the type (``issubclass`` reads its MRO): ``isinstance`` would
    ask a foreign object for its ``__class__``, which a property can answer
    with anything, and run code while doing so.
    """
    return cls is dict or cls is list or cls is tuple or issubclass(cls, _CONTAINERS)


def _items(item: Any) -> list[Any] | tuple[Any, ...] | Any:
    """The children of a container, read through the builtin type only.

    A ``dict`` or ``list`` subclass may redefine ``__iter__``, ``values``,
    ``items`` or ``__len__`` to never end, to grow the container while it is
    walked, or to raise: the builtin methods called here on the base type
    read the container's storage and run none of them. A list is copied in
    one C call (a snapshot), a mapping's values are its storage's view.
    """
    cls = type(item)
    if cls is dict:
        return item.values()
    if cls is list or cls is tuple:
        return item
    if issubclass(cls, dict):
        return dict.values(item)
    if issubclass(cls, list):
        return list.copy(item)
    return tuple.__getitem__(item, _EVERYTHING)


_EVERYTHING: Final = slice(None)

_NONE: Final = type(None)


def _is_scalar(cls: type) -> bool:
    """Whether *cls* is exactly a builtin JSON scalar type (identity only: no
    hash or comparison of a foreign type runs)."""
    return cls is str or cls is int or cls is float or cls is bool or cls is _NONE


def _shape(value: Any, max_depth: int, max_items: int | None) -> bool:
    """Check *value*'s nesting (and count); return whether anything in it is
    not a builtin JSON type exactly (a subclass, or no JSON at all), so that
    it must be read into :func:`plain` builtins before the encoder sees it.
    """
    left = max_items if max_items is not None else -1
    foreign = False
    stack: list[tuple[Any, int]] = [(value, 1)]
    pop, push = stack.pop, stack.append
    while stack:
        item, depth = pop()
        if depth > max_depth:
            raise TooDeep(f"it nests more than {max_depth} levels deep (Config.max_nesting_depth)")
        cls = type(item)
        if not (cls is dict or cls is list or cls is tuple):
            foreign = True
        children = _items(item)
        if left >= 0:
            left -= len(children)
            if left < 0:
                raise JsonProblem(f"it holds more than {max_items} values")
        for child in children:
            cls = type(child)
            if cls is str or cls is int or cls is float or cls is bool or child is None:
                continue
            if _is_container(cls):
                push((child, depth + 1))
            else:
                foreign = True
    return foreign


def plain(value: Any, max_depth: int, max_items: int | None = None) -> Any:
    """A copy of *value* made of builtin ``dict``, ``list``, ``str``, ``int``,
    ``float``, ``bool`` and ``None`` only, read without calling any of its
    own methods; *value* itself when it is made of those already.

    Subclasses of the builtin containers are read through the builtin types
    (see :func:`_items`), tuples become lists, subclasses of ``str``,
    ``int`` and ``float`` become the builtin value (by the builtin type's
    method: no ``__str__`` or ``__hash__`` of theirs runs). Bounded like
    :func:`check_nesting`, and iterative.

    Raises:
        JsonProblem: as :func:`check_nesting`.
        TypeError: *value* holds something that is not JSON; an un-awaited
            coroutine among it is closed first (it can never run now, and
            would warn that it was never awaited).
    """
    cls = type(value)
    if _is_scalar(cls):
        return value
    if not _is_container(cls):
        return _plain_scalar(value)
    if not _shape(value, max_depth, max_items):
        return value
    root: list[Any] = [None]
    # (source container, the copy's parent, the index or key in it)
    stack: list[tuple[Any, Any, Any]] = [(value, root, 0)]
    pop, push = stack.pop, stack.append
    while stack:
        source, parent, slot = pop()
        if issubclass(type(source), dict):
            copy: Any = {}
            for key, child in dict.items(source):
                key = _plain_key(key)
                if _is_container(type(child)):
                    copy[key] = None
                    push((child, copy, key))
                else:
                    copy[key] = _plain_scalar(child)
        else:
            children = _items(source)
            copy = [None] * len(children)
            for index, child in enumerate(children):
                if _is_container(type(child)):
                    push((child, copy, index))
                else:
                    copy[index] = _plain_scalar(child)
        parent[slot] = copy
    return root[0]


def _plain_scalar(value: Any) -> Any:
    cls = type(value)
    if _is_scalar(cls):
        return value
    if issubclass(cls, str):
        return str.__str__(value)
    if issubclass(cls, bool):  # pragma: no cover - bool cannot be subclassed
        return bool(int.__int__(value))
    if issubclass(cls, int):
        return int.__int__(value)
    if issubclass(cls, float):
        return float.__float__(value)
    if cls is types.CoroutineType:
        value.close()
        raise TypeError(
            "a coroutine is not JSON: the runner returned it without awaiting it "
            "(await the call that made it)"
        )
    raise TypeError(f"Object of type {cls.__name__} is not JSON serializable")


def _plain_key(key: Any) -> Any:
    """A mapping key as the builtin value; a key JSON cannot hold is a TypeError."""
    cls = type(key)
    if _is_scalar(cls):
        return key
    try:
        return _plain_scalar(key)
    except TypeError:
        raise TypeError(f"keys must be str, int, float, bool or None, not {cls.__name__}") from None


def is_small(value: Any, nodes: int = SMALL_NODES) -> bool:
    """Whether *value* has at most *nodes* items in its containers, all told.

    Cheap whatever *value* is (the walk stops at the limit): a small value is
    checked and encoded on the event loop at once; a larger one on a worker
    thread, so that no step of the loop takes long. Containers are read as
    :func:`check_nesting` reads them.
    """
    if not _is_container(type(value)):
        return True
    stack = [value]
    pop, push = stack.pop, stack.append
    while stack:
        children = _items(pop())
        nodes -= len(children)
        if nodes < 0:
            return False
        for child in children:
            cls = type(child)
            if not (cls is str or cls is int or cls is float) and _is_container(cls):
                push(child)
    return True


def encode(value: Any, *, max_depth: int, max_items: int | None = None) -> tuple[str, int]:
    """The canonical JSON text of *value* (compact, UTF-8 safe, no NaN) and its UTF-8 size.

    The encoder sees only builtin types (:func:`plain`): it would call a
    subclass's own ``items`` or ``__iter__``.

    Raises:
        TypeError: *value* holds something that is not JSON at all.
        JsonProblem: *value* nests too deep, holds more than *max_items*
            values, holds text that is not valid Unicode, or a number JSON
            cannot hold (NaN, infinity, an integer too long to write).
    """
    if type(value) is str:
        # Most results of language-model subagents are one string: the C
        # escaper alone, without the encoder's machinery.
        text = encode_basestring(value)
    else:
        value = plain(value, max_depth, max_items)
        try:
            text = _ENCODER.encode(value)
        except ValueError as exc:
            raise JsonProblem(f"it holds a number JSON cannot hold: {exc}") from None
    return _sized(text)


def _sized(text: str) -> tuple[str, int]:
    """*text* and its size in bytes of UTF-8.

    Raises:
        JsonProblem: *text* holds a lone surrogate.
    """
    if text.isascii():
        return text, len(text)
    problem = text_problem(text)
    if problem is not None:
        raise JsonProblem(problem)
    return text, len(text.encode("utf-8"))


def decode(text: str) -> Any:
    """A fresh value decoded from canonical JSON *text* made by :func:`encode`."""
    return json.loads(text)


def parse(text: str, **options: Any) -> Any:
    """``json.loads(text, **options)`` for text from outside (a model, a process).

    Raises:
        ValueError: *text* is not JSON; :class:`TooDeep` (a ``ValueError`` too)
            when it nests past what Python's parser reads, which
            ``json.loads`` reports as ``RecursionError``.
    """
    try:
        return json.loads(text, **options)
    except RecursionError:
        raise TooDeep("it nests too deeply to read") from None


@final
class CanonicalJson:
    """A JSON value held once, as canonical text, and handed out as fresh copies.

    Immutable scalars (the common result: one string) are kept as they are:
    a copy of them is themselves.

    Attributes:
        text: the canonical JSON text.
        size: its length in bytes of UTF-8.
        immutable: whether the value is an immutable scalar (``null``
            included), so that :attr:`scalar` is every copy of it.
        scalar: that value, when *immutable*; ``None`` otherwise.
    """

    __slots__ = ("immutable", "scalar", "size", "text")

    def __init__(self, text: str, size: int, immutable: bool = False, scalar: Any = None) -> None:
        self.text = text
        self.size = size
        self.immutable = immutable
        # Kept only for an immutable scalar, which needs no decoding: copy()
        # returns it as it is.
        self.scalar = scalar

    @classmethod
    def of(cls, value: Any, *, max_depth: int, max_items: int | None = None) -> CanonicalJson:
        """Check and encode *value* (at most *max_items* values all told, given it).

        Raises:
            TypeError, JsonProblem: see :func:`encode`.
        """
        if value is None:  # the result of many a runner that only acts
            return NULL
        if type(value) is str:
            # The usual result of a language-model subagent, and most often
            # ASCII: escaped and measured without encode()'s general path.
            text = encode_basestring(value)
            if text.isascii():
                # Every ASCII string result comes this way: made without a
                # call to __init__ (one Python frame less per such run).
                canonical = _new(cls)
                canonical.text = text
                canonical.size = len(text)
                canonical.immutable = True
                canonical.scalar = value
                return canonical
            return cls(*_sized(text), True, value)
        text, size = encode(value, max_depth=max_depth, max_items=max_items)
        if type(value) in IMMUTABLE_SCALARS:
            # Only a scalar round-trips unchanged (a tuple comes back a list).
            return cls(text, size, True, value)
        return cls(text, size)

    def copy(self) -> Any:
        """A fresh copy of the value, as JSON would decode it."""
        if self.immutable:
            return self.scalar
        return json.loads(self.text)

    def __repr__(self) -> str:
        return f"CanonicalJson({self.text[:60]!r})"


#: The canonical ``null``: one object for every ``None``.
NULL: Final = CanonicalJson("null", 4, True, None)
