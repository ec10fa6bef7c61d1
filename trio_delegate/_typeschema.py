"""JSON Schema (draft 2020-12) derived from a host's attrs class or dataclass.

Supported field types: ``str``, ``int``, ``float``, ``bool``, ``None``,
``Any``; ``Optional``/unions; ``list``, ``tuple`` (homogeneous or fixed),
``set``/``frozenset``, ``Sequence``; ``dict``/``Mapping`` with ``str`` keys;
``Enum`` with JSON scalar values; ``Literal``; nested attrs classes and
dataclasses (recursive ones through ``$defs``). Fields with a default are
optional and carry it as ``default`` when it is JSON-ready.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import json
import types
import typing
from typing import Any

import attrs

from ._checks import is_a
from ._converter import to_json_ready
from ._errors import InvalidArgumentsError

__all__ = ["is_structured_type", "schema_for_type"]

_SCALARS: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
    None: {"type": "null"},
}
_ARRAYS = {list, collections.abc.Sequence, collections.abc.MutableSequence}
_SETS = {set, frozenset, collections.abc.Set, collections.abc.MutableSet}
_MAPPINGS = {dict, collections.abc.Mapping, collections.abc.MutableMapping}


def is_structured_type(value: object) -> bool:
    """Whether *value* is an attrs class or a dataclass (the class, not an instance)."""
    # By its type: an instance's __class__ may raise, or claim to be a class.
    return is_a(value, type) and (attrs.has(value) or dataclasses.is_dataclass(value))


def schema_for_type(cls: type) -> dict[str, Any]:
    """The JSON Schema of *cls*, an attrs class or dataclass.

    Raises:
        InvalidArgumentsError: a field's type has no JSON Schema equivalent
            (the message names the field's path).
    """
    builder = _Builder()
    root = builder.object_schema(cls, f"{cls.__qualname__}")
    if builder.defs:
        root["$defs"] = builder.defs
    return root


class _Builder:
    def __init__(self) -> None:
        self.defs: dict[str, dict[str, Any]] = {}
        self._building: set[type] = set()
        self._root: type | None = None

    def object_schema(self, cls: type, path: str) -> dict[str, Any]:
        if self._root is None:
            self._root = cls
        self._building.add(cls)
        hints = typing.get_type_hints(cls)
        properties: dict[str, Any] = {}
        required: list[str] = []
        for name, has_default, default in _fields(cls):
            schema = self.schema(hints.get(name, Any), f"{path}.{name}")
            if has_default:
                encoded = _json_default(default)
                if encoded is not _NO_DEFAULT:
                    schema = {**schema, "default": encoded}
            else:
                required.append(name)
            properties[name] = schema
        self._building.discard(cls)
        result: dict[str, Any] = {
            "type": "object",
            "title": cls.__name__,
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        }
        doc = (cls.__doc__ or "").strip()
        if doc and not doc.startswith(f"{cls.__name__}("):  # skip dataclass's generated doc
            result["description"] = doc.splitlines()[0]
        return result

    def schema(self, tp: Any, path: str) -> dict[str, Any]:
        if tp in _SCALARS:
            return dict(_SCALARS[tp])
        if tp is Any or tp is object:
            return {}
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)
        if origin is typing.Union or origin is types.UnionType:
            return {"anyOf": [self.schema(arg, path) for arg in args]}
        if origin is typing.Literal:
            return _enum_schema(list(args), path)
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            return _enum_schema([member.value for member in tp], path)
        if is_structured_type(tp):
            return self.reference(tp, path)
        if origin in _ARRAYS or tp in _ARRAYS:
            return self.array(args[0] if args else Any, path)
        if origin in _SETS or tp in _SETS:
            return {**self.array(args[0] if args else Any, path), "uniqueItems": True}
        if origin is tuple:
            return self.tuple_schema(args, path)
        if origin in _MAPPINGS or tp in _MAPPINGS:
            return self.mapping(args, path)
        raise InvalidArgumentsError(
            f"final_schema: the type {tp!r} of {path} has no JSON Schema equivalent; use str, "
            "int, float, bool, None, lists, tuples, sets, dicts with str keys, enums, "
            "Literal, unions, or nested attrs classes/dataclasses"
        )

    def reference(self, cls: type, path: str) -> dict[str, Any]:
        name = cls.__name__
        if cls is self._root:
            return {"$ref": "#"}
        if name in self.defs or cls in self._building:
            return {"$ref": f"#/$defs/{name}"}
        self.defs[name] = {}  # placeholder: a recursive reference finds it
        self.defs[name] = self.object_schema(cls, path)
        return {"$ref": f"#/$defs/{name}"}

    def array(self, item: Any, path: str) -> dict[str, Any]:
        return {"type": "array", "items": self.schema(item, f"{path}[]")}

    def tuple_schema(self, args: tuple[Any, ...], path: str) -> dict[str, Any]:
        if len(args) == 2 and args[1] is Ellipsis:
            return self.array(args[0], path)
        items = [self.schema(arg, f"{path}[{index}]") for index, arg in enumerate(args)]
        return {
            "type": "array",
            "prefixItems": items,
            "items": False,
            "minItems": len(items),
            "maxItems": len(items),
        }

    def mapping(self, args: tuple[Any, ...], path: str) -> dict[str, Any]:
        key, value = args if args else (str, Any)
        if key is not str:
            raise InvalidArgumentsError(
                f"final_schema: {path} is a mapping with {key!r} keys; JSON objects only "
                "have str keys"
            )
        return {"type": "object", "additionalProperties": self.schema(value, f"{path}{{}}")}


_NO_DEFAULT: Any = object()


def _fields(cls: type) -> list[tuple[str, bool, Any]]:
    """(name, has_default, default) of every init field of *cls*."""
    if attrs.has(cls):
        out = []
        for field in attrs.fields(cls):
            if not field.init:
                continue
            default = field.default
            if default is attrs.NOTHING:
                out.append((field.name, False, None))
            elif isinstance(default, attrs.Factory):  # type: ignore[arg-type]
                out.append((field.name, True, _NO_DEFAULT))
            else:
                out.append((field.name, True, default))
        return out
    out = []
    for field in dataclasses.fields(cls):
        if not field.init:
            continue
        if field.default is not dataclasses.MISSING:
            out.append((field.name, True, field.default))
        elif field.default_factory is not dataclasses.MISSING:
            out.append((field.name, True, _NO_DEFAULT))
        else:
            out.append((field.name, False, None))
    return out


def _json_default(value: Any) -> Any:
    if value is _NO_DEFAULT:
        return _NO_DEFAULT
    try:
        encoded = to_json_ready(value)
        json.dumps(encoded, allow_nan=False)
    except (TypeError, ValueError):
        return _NO_DEFAULT
    return encoded


def _enum_schema(values: list[Any], path: str) -> dict[str, Any]:
    for value in values:
        if not (value is None or isinstance(value, str | int | float | bool)):
            raise InvalidArgumentsError(
                f"final_schema: {path} allows {value!r}, which is not a JSON scalar; enum and "
                "Literal values must be str, int, float, bool or None"
            )
    return {"enum": values}
