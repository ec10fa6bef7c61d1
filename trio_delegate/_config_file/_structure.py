"""The one converter that structures a configuration file, and what it says when it cannot.

A table of the file is an attrs class whose fields are declared with
:func:`key`: its default, the check that reads its value (or the class of the
table it holds) and the fix to show when that value is wrong. The converter
is the package's (``trio_delegate._converter``), copied with
``forbid_extra_keys=True``: structuring a class reads every key through its
check, and cattrs gathers what went wrong (``ClassValidationError`` holding a
:class:`Problem` per key, ``ForbiddenExtraKeysError`` for keys no field
takes, a ``KeyError`` for a required key that is absent) with the key path in
its notes. :func:`structure` turns the first of those into a
:class:`ConfigError` naming the key, the value and the fix ("did you mean"
included). Unknown keys are reported before the values of the same table;
the values in field order.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Final, TypeVar

import attrs
from cattrs.errors import (
    AttributeValidationNote,
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
    IterableValidationNote,
)
from cattrs.gen import make_dict_structure_fn, override

from .._checks import describe
from .._converter import converter as _package_converter
from .._subagent import NAME_PATTERN
from ._problems import ConfigError, Problem, key_text

__all__ = ["converter", "key", "structure", "structure_items", "structure_table"]

_T = TypeVar("_T")

# What a field declares, in its attrs metadata.
_CHECK: Final = "config_check"
_TABLE: Final = "config_table"
_FIX: Final = "config_fix"
_MISSING: Final = "config_missing"

#: Structures a configuration file's tables: the package's converter, strict about keys.
converter: Final = _package_converter.copy(forbid_extra_keys=True, detailed_validation=True)

#: Where a problem was found: the key's parts, the problem, the fix, the subagent.
_Found = tuple[tuple[str | int, ...], str, str, str | None]


def key(
    default: Any = attrs.NOTHING,
    *,
    check: Callable[[Any], Any] | None = None,
    table: type | None = None,
    fix: str | None = None,
    missing: tuple[str, str] | None = None,
) -> Any:
    """Declare one key of a table: a field of its attrs class.

    Args:
        default: the value when the key is absent; none: the key is required.
        check: reads the value, raising :class:`Problem` when it is wrong.
        table: instead of *check*: the class of the table the key holds.
        fix: what to do when the value is wrong, unless the problem says.
        missing: the problem and fix when a required key is absent; said
            about the table that lacks it.
    """
    metadata = {_CHECK: check, _TABLE: table, _FIX: fix, _MISSING: missing}
    return attrs.field(default=default, metadata=metadata)


def structure_table(value: Any, cls: type[_T]) -> _T:
    """*value*, a TOML table, as *cls*.

    Raises:
        Problem: *value* is not a table.
        ClassValidationError: its keys are wrong (see :func:`structure`).
    """
    if not isinstance(value, dict):
        raise Problem(f"must be a table, got {describe(value)}")
    return converter.structure(value, cls)


def structure_items(values: list[Any], read: Callable[[Any], _T]) -> list[_T]:
    """Each item of *values* read by *read*; a problem is noted with the item's index.

    Raises:
        IterableValidationError: holding the first item's problem.
    """
    items = []
    for index, value in enumerate(values):
        try:
            items.append(read(value))
        except Exception as exc:
            note = IterableValidationNote(f"Structuring item @ index {index}", index, Any)
            exc.__notes__ = [*getattr(exc, "__notes__", []), note]
            raise IterableValidationError("While structuring items", [exc], list) from None
    return items


def structure(data: dict[str, Any], cls: type[_T], path: Path) -> _T:
    """The TOML *data* of the file *path* as *cls*.

    Raises:
        ConfigError: the first problem, naming the key, the value and the fix.
    """
    try:
        return converter.structure(data, cls)
    except Exception as exc:
        at, problem, fix, subagent = _first(exc, data, (), None, None)
        raise ConfigError(path, key_text(at), problem, fix, subagent=subagent) from None


def _is_table(cls: Any) -> bool:
    return isinstance(cls, type) and attrs.has(cls) and hasattr(cls, "keys_say")


def _table_hook(cls: type[Any]) -> Callable[[Any, Any], Any]:
    hooks: dict[str, Any] = {}
    for field in attrs.fields(cls):
        if field.metadata.get(_CHECK) is not None:
            hooks[field.name] = override(struct_hook=_checked(field.metadata[_CHECK]))
        elif field.metadata.get(_TABLE) is not None:
            hooks[field.name] = override(struct_hook=_tabled(field.metadata[_TABLE]))
    return make_dict_structure_fn(cls, converter, **hooks)


def _checked(check: Callable[[Any], Any]) -> Callable[[Any, Any], Any]:
    return lambda value, _: check(value)


def _tabled(cls: type[Any]) -> Callable[[Any, Any], Any]:
    return lambda value, _: structure_table(value, cls)


converter.register_structure_hook_factory(_is_table, _table_hook)


def _first(
    exc: BaseException,
    value: Any,
    at: tuple[str | int, ...],
    field: attrs.Attribute[Any] | None,
    subagent: str | None,
) -> _Found:
    """The first problem in what cattrs raised for *value* (found at *at*, in *field*)."""
    if isinstance(exc, ClassValidationError):
        return _first_in_table(exc, value, at, subagent)
    if isinstance(exc, IterableValidationError):
        for inner in exc.exceptions:
            for note in getattr(inner, "__notes__", ()):
                if isinstance(note, IterableValidationNote) and isinstance(note.index, int):
                    item = value[note.index]
                    # A list of tables is a list of subagents: name each one's errors.
                    name = item.get("name") if isinstance(item, dict) else None
                    named = isinstance(name, str) and NAME_PATTERN.fullmatch(name) is not None
                    return _first(inner, item, (*at, note.index), field, name if named else None)
    if isinstance(exc, Problem):
        fix = exc.fix or (field.metadata.get(_FIX) if field is not None else None)
        return (*at, *exc.at), exc.problem, fix or "fix the value it names", subagent
    # A check let something other than a Problem out: still said, and about this key.
    problem = f"cannot be read: {type(exc).__name__}: {describe(str(exc), 200)}"
    return at, problem, "fix the value it names", subagent


def _first_in_table(
    exc: ClassValidationError, table: Any, at: tuple[str | int, ...], subagent: str | None
) -> _Found:
    fields = attrs.fields_dict(exc.cl)
    for inner in exc.exceptions:
        if isinstance(inner, ForbiddenExtraKeysError):
            # The first in the file, not in the set cattrs gathered them in.
            unknown = next(name for name in table if name in inner.extra_fields)
            fix = _keys_fix(unknown, fields, getattr(exc.cl, "keys_say", "this table takes"))
            return (*at, unknown), "unknown key", fix, subagent
    order = list(fields)
    noted = [
        (order.index(note.name), inner, note.name)
        for inner in exc.exceptions
        for note in getattr(inner, "__notes__", ())
        if isinstance(note, AttributeValidationNote)
    ]
    if not noted:
        return _first(exc.exceptions[0], table, at, None, subagent)
    _, inner, name = min(noted, key=lambda found: found[0])
    field = fields[name]
    if name not in table:
        problem, fix = field.metadata.get(_MISSING) or (f"has no {name}", f"add {name} = ...")
        return at, problem, fix, subagent
    return _first(inner, table[name], (*at, name), field, subagent)


def _keys_fix(unknown: str, allowed: Iterable[str], what: str) -> str:
    names = list(allowed)
    close = difflib.get_close_matches(unknown, names, n=1)
    # One sentence per part: the likely fix first, then what is allowed.
    hint = f"did you mean {close[0]!r}? Otherwise remove it: " if close else ""
    return f"{hint}{what}: {', '.join(names)}"
