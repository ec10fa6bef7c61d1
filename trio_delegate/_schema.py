"""Structured results: checking ``final_schema`` and results against it (contract §11).

A ``final_schema`` is a JSON Schema (draft 2020-12) given as a mapping, or an
attrs class / dataclass whose schema is derived (see ``_typeschema``). It is
checked once, at admission, before anything runs: a malformed schema is an
``InvalidArgumentsError``. A completed run's result always satisfies it.

Schemas can come from a model, so their size and nesting are bounded and
``$ref`` may only point inside the schema itself (nothing is ever fetched).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any, Final, final

import attrs
import cattrs
import jsonschema
from jsonschema import Draft202012Validator

from ._checks import describe
from ._converter import converter, to_json_ready
from ._errors import InvalidArgumentsError
from ._typeschema import is_structured_type, schema_for_type

__all__ = [
    "MAX_SCHEMA_BYTES",
    "MAX_SCHEMA_DEPTH",
    "ResultSchema",
    "SchemaMismatch",
    "SchemaSpec",
    "compile_result_schema",
]

#: Largest accepted schema, in bytes of JSON.
MAX_SCHEMA_BYTES: Final = 64 * 1024
#: Deepest accepted nesting of objects and arrays in a schema.
MAX_SCHEMA_DEPTH: Final = 32
#: Most problems listed when a result does not match.
_MAX_PROBLEMS: Final = 20

#: What ``final_schema`` accepts: a JSON Schema mapping or an attrs class / dataclass.
SchemaSpec = Mapping[str, Any] | type


class SchemaMismatch(ValueError):
    """A result did not satisfy its ``final_schema``.

    Attributes:
        problems: one ``"$.path: message"`` line per failing path.
    """

    def __init__(self, problems: list[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("the result does not satisfy final_schema: " + "; ".join(problems))


@final
@attrs.frozen(eq=False)
class ResultSchema:
    """A checked ``final_schema``, ready to validate results.

    Attributes:
        json_schema: the JSON Schema (derived, for a type).
        target: the attrs class or dataclass results are structured into, if any.
    """

    json_schema: Mapping[str, Any]
    target: type | None
    _validator: Draft202012Validator = attrs.field(alias="validator", repr=False)

    def apply(self, value: Any) -> Any:
        """Validate *value* (JSON-ready) and structure it into the target type.

        Raises:
            SchemaMismatch: naming every failing path.
        """
        errors = sorted(self._validator.iter_errors(value), key=lambda e: list(e.absolute_path))
        if errors:
            problems = [f"{error.json_path}: {error.message}" for error in errors]
            if len(problems) > _MAX_PROBLEMS:
                extra = len(problems) - _MAX_PROBLEMS
                problems = [*problems[:_MAX_PROBLEMS], f"… and {extra} more"]
            raise SchemaMismatch(problems)
        if self.target is None:
            return value
        try:
            return converter.structure(value, self.target)
        except Exception as exc:
            raise SchemaMismatch(cattrs.transform_error(exc)) from exc

    def prepare(self, value: Any) -> Any:
        """A runner may return an instance of the target type: make it JSON-ready."""
        if self.target is not None and isinstance(value, self.target):
            return to_json_ready(value)
        return value


def compile_result_schema(spec: SchemaSpec, field: str = "final_schema") -> ResultSchema:
    """Check *spec* and build its :class:`ResultSchema`.

    Raises:
        InvalidArgumentsError: *spec* is not a mapping or a structured type,
            is too large or too deep, is not a valid JSON Schema, or has a
            ``$ref`` that does not point inside it.
    """
    if is_structured_type(spec):
        assert isinstance(spec, type)
        return _compile(schema_for_type(spec), spec, field)
    if not isinstance(spec, Mapping):
        raise InvalidArgumentsError(
            f"{field} must be a JSON Schema object, an attrs class or a dataclass, "
            f"got {describe(spec)}"
        )
    try:
        encoded = json.dumps(spec, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentsError(f"{field} is not JSON: {exc}") from None
    if len(encoded.encode()) > MAX_SCHEMA_BYTES:
        raise InvalidArgumentsError(
            f"{field} is {len(encoded.encode())} bytes of JSON; at most {MAX_SCHEMA_BYTES} "
            "are allowed: simplify the schema"
        )
    return _compile(json.loads(encoded), None, field)


def _compile(schema: dict[str, Any], target: type | None, field: str) -> ResultSchema:
    depth = _depth(schema)
    if depth > MAX_SCHEMA_DEPTH:
        raise InvalidArgumentsError(
            f"{field} nests {depth} levels deep; at most {MAX_SCHEMA_DEPTH} are allowed: "
            "flatten the schema"
        )
    try:
        Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise InvalidArgumentsError(
            f"{field} is not a valid JSON Schema (draft 2020-12): at {exc.json_path}: {exc.message}"
        ) from None
    for ref in _refs(schema):
        _check_ref(schema, ref, field)
    return ResultSchema(schema, target, validator=Draft202012Validator(schema))


def _depth(node: Any) -> int:
    # Iterative, so a hostile schema cannot exhaust the interpreter's stack.
    deepest = 0
    stack: list[tuple[Any, int]] = [(node, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in item.values())
        elif isinstance(item, list):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in item)
    return deepest


def _refs(node: Any) -> Iterator[str]:
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, value in item.items():
                if key in ("$ref", "$dynamicRef") and isinstance(value, str):
                    yield value
                else:
                    stack.append(value)
        elif isinstance(item, list):
            stack.extend(item)


def _check_ref(schema: dict[str, Any], ref: str, field: str) -> None:
    problem = f"{field} has $ref {ref!r}"
    if ref != "#" and not ref.startswith("#/"):
        raise InvalidArgumentsError(
            f'{problem}; only references inside the schema ("#" or "#/...") are allowed, '
            "nothing is fetched: inline the referenced schema under $defs"
        )
    target: Any = schema
    for raw in ref[2:].split("/") if ref != "#" else ():
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(target, dict) and part in target:
            target = target[part]
        elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
            target = target[int(part)]
        else:
            raise InvalidArgumentsError(
                f"{problem}, which points at nothing in the schema: fix the path or add the "
                "missing definition under $defs"
            )
