"""Structured results: checking ``final_schema`` and results against it (contract §11).

A ``final_schema`` is a JSON Schema (draft 2020-12) given as a mapping, or an
attrs class / dataclass whose schema is derived (see ``_typeschema``). It is
checked once, at admission, before anything runs: a malformed schema is an
``InvalidArgumentsError``. A completed run's result always satisfies it.

Schemas come from models, so checking a result against one is bounded
(contract §15):

* a schema's size and nesting are bounded, and ``$ref`` may only point inside
  it (nothing is ever fetched);
* ``pattern`` and ``patternProperties`` run on RE2, whose matching is linear
  in the text (Python's ``re`` backtracks: ``^(a+)+$`` on 30 characters takes
  seconds, holding the GIL); a pattern RE2 cannot run (look-around,
  back-references) is refused at admission;
* ``uniqueItems`` compares canonical keys in a set (linear), not every pair;
  the keys are text, which the garbage collector does not track;
* a check on a worker thread holds the cyclic garbage collector off
  (:class:`_CollectorPause`): the containers of the copy it checks would
  otherwise set off passes over the whole heap, each holding the GIL, and so
  the event loop, for as long as the heap is large;
* ``anyOf`` and ``oneOf`` stop at a branch's first error and keep none of
  them (jsonschema collects every error of every branch, each formatting the
  value, and links them in reference cycles the garbage collector must then
  walk, holding the interpreter);
* the value checked is a copy whose containers print briefly
  (:class:`BriefDict`, :class:`BriefList`): an error message about a
  megabyte result costs what one about a small one costs;
* every keyword evaluation is counted, weighted by the size of the value and
  of the keyword's argument it may go through (one step per 64 items or
  4 KiB of text): a check that stays small runs inline; one that grows past
  :data:`INLINE_STEPS` starts again on a worker thread, where the run's
  cancellation and child deadline reach it every :data:`CANCEL_CHECK_STEPS`
  steps, and gives up after :data:`MAX_STEPS`. On a ``MockClock`` it keeps
  virtual time still for :data:`RUNAWAY_STEPS` steps, then lets it move, so
  that a virtual deadline stops a runaway check after counted work, not
  after some real time that depends on the machine's load.

A schema itself is checked against the 2020-12 meta-schema at admission, on
the event loop: against one flat copy of it (the published one resolves a
dynamic reference for every subschema, ten times the cost), counted like
any check, and refused past :data:`SCHEMA_CHECK_STEPS`.

jsonschema and RE2 are imported when the first schema is compiled (once, a
few tens of milliseconds on the caller's thread), not with the package: many
processes check none (``trio-delegate serve`` until a call brings a
``final_schema``), and importing them was a tenth of a server's start-up.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import functools
import gc
import hashlib
import json
import json.scanner
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from itertools import islice
from typing import TYPE_CHECKING, Any, Final, final
from urllib.parse import unquote, urljoin

import attrs
import cattrs
import trio

from ._checks import BriefDict, BriefList, describe, is_a, is_mapping
from ._converter import converter, to_json_ready
from ._errors import InvalidArgumentsError
from ._json import CanonicalJson, JsonProblem, TooDeep, check_nesting, plain, text_problem
from ._threads import let_clock_move, run_sync
from ._typeschema import is_structured_type, schema_for_type

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError

__all__ = [
    "CANCEL_CHECK_STEPS",
    "INLINE_STEPS",
    "MAX_SCHEMA_BYTES",
    "MAX_SCHEMA_DEPTH",
    "MAX_SCHEMA_VALUES",
    "MAX_STEPS",
    "RUNAWAY_STEPS",
    "ResultSchema",
    "SCHEMA_CHECK_STEPS",
    "SchemaMismatch",
    "SchemaSpec",
    "compile_result_schema",
    "schema_for_tag",
]

#: Largest accepted schema, in bytes of JSON.
MAX_SCHEMA_BYTES: Final = 64 * 1024
#: Deepest accepted nesting of objects and arrays in a schema.
MAX_SCHEMA_DEPTH: Final = 32
#: Most values (items of its arrays and objects) a schema may hold: each
#: takes at least two bytes of JSON, so a schema with more is over
#: MAX_SCHEMA_BYTES anyway; counting stops here, before encoding.
MAX_SCHEMA_VALUES: Final = MAX_SCHEMA_BYTES // 2
#: Most problems listed when a result does not match.
_MAX_PROBLEMS: Final = 20
#: Longest problem message kept (jsonschema's messages repeat the instance).
_MAX_PROBLEM_CHARS: Final = 300

#: Keyword evaluations a check may take on the event loop: past this, it
#: moves to a worker thread. A step costs about 1 µs for plain keywords and up
#: to about 8 µs through ``$ref`` chains, so the loop is held for at most a
#: few milliseconds (2,000 steps held it for 15 ms, up to 185 ms on a busy host).
INLINE_STEPS: Final = 500
#: Results larger than this (bytes of JSON) are checked on a worker thread
#: from the start: an error message alone repeats the value.
INLINE_BYTES: Final = 64 * 1024
#: Keyword evaluations for which a check on a worker thread keeps a
#: ``MockClock`` still (under a second of work; checking 20,000 small items
#: takes some 40,000): past them it lets virtual time move, so that the run's
#: deadline stops it after the same work on any machine, however busy.
RUNAWAY_STEPS: Final = 100_000
#: How often a check on a worker thread looks for its run's cancellation.
CANCEL_CHECK_STEPS: Final = 1_000
#: Keyword evaluations after which a check gives up: the schema is too costly
#: for this result.
MAX_STEPS: Final = 20_000_000
#: Keyword evaluations allowed for checking a ``final_schema`` against the
#: meta-schema at admission, on the event loop (a few milliseconds): a
#: schema that needs more is refused.
SCHEMA_CHECK_STEPS: Final = 10_000

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


class _OverBudget(Exception):
    """An inline check used its steps: run it again on a worker thread."""


@final
class _Budget:
    """Keyword evaluations left to one check."""

    __slots__ = ("_check_every", "_left", "_still", "_total", "inline")

    def __init__(self, steps: int, *, inline: bool) -> None:
        self.inline = inline
        self._total = steps
        self._check_every = steps if inline else min(steps, CANCEL_CHECK_STEPS)
        self._left = self._check_every
        self._still = RUNAWAY_STEPS

    def spend(self, steps: int = 1) -> None:
        self._left -= steps
        if self._left > 0:
            return
        if self.inline:
            raise _OverBudget
        spent = self._check_every - self._left
        self._total -= spent
        if self._total <= 0:
            raise SchemaMismatch(
                [
                    f"$: checking the result against final_schema took more than {MAX_STEPS} "
                    "steps; simplify the schema (fewer nested anyOf/oneOf, $ref loops and "
                    "unevaluated* keywords) or return a smaller result"
                ]
            )
        self._left = self._check_every
        if self._still > 0:
            self._still -= spent
            if self._still <= 0:
                let_clock_move()
        # Raises trio.Cancelled once the run's scope is cancelled (a cancel
        # request or its child deadline): the thread stops within a few steps.
        trio.from_thread.check_cancelled()


_BUDGET: contextvars.ContextVar[_Budget] = contextvars.ContextVar("trio_delegate_schema_budget")

_Keyword = Callable[[Any, Any, Any, Any], "Iterator[ValidationError] | None"]


def _error(message: str) -> ValidationError:
    """A keyword's error (keywords run only once :func:`_validators` imported jsonschema)."""
    from jsonschema.exceptions import ValidationError

    return ValidationError(message)


def _weight(value: Any) -> int:
    """Steps beyond the first that a keyword may spend going through *value*.

    A keyword may go through every item of its argument (``enum``) or of the
    value it checks (``additionalProperties``), and may copy text into a
    message: one step per 64 items, or per 4 KiB of text. Containers are
    weighed by their length only; their messages are brief.
    """
    if isinstance(value, dict | list):
        return len(value) >> 6
    if isinstance(value, str):
        return len(value) >> 12
    return 0


def _counted(keyword: _Keyword) -> _Keyword:
    """*keyword*, charging the current check's budget for every evaluation."""

    @functools.wraps(keyword)
    def counted(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        _BUDGET.get().spend(1 + _weight(value) + _weight(instance))
        return keyword(validator, value, instance, schema)

    return counted


@functools.cache
def _re2_options() -> Any:
    import re2

    options = re2.Options()
    options.log_errors = False
    return options


@functools.lru_cache(maxsize=1024)
def _regex(pattern: str) -> Any:
    """The compiled RE2 program for *pattern* (cached: schemas repeat their patterns).

    Raises:
        re2.error: RE2 cannot run it.
    """
    import re2

    return re2.compile(pattern, _re2_options())


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and _regex(pattern).search(instance) is None:
        yield _error(f"{describe(instance)} does not match {describe(pattern)}")


def _pattern_properties(
    validator: Any, patterns: Mapping[str, Any], instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    budget = _BUDGET.get()
    for pattern, subschema in patterns.items():
        regex = _regex(pattern)
        for key, value in instance.items():
            budget.spend()
            if regex.search(key) is not None:
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _unique_items(
    validator: Any, unique: bool, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not unique or not validator.is_type(instance, "array"):
        return
    budget = _BUDGET.get()
    seen: set[str] = set()
    for index, item in enumerate(instance):
        key = _equality_key(item)
        # Making the key went through the whole item: one step per 4 KiB of it.
        budget.spend(1 + (len(key) >> 12))
        if key in seen:
            yield _error(f"the array has non-unique elements (item {index} repeats an earlier one)")
            return
        seen.add(key)


def _passes(validator: Any, instance: Any, branch: Any, index: int) -> bool:
    """Whether *instance* satisfies the subschema *branch*; stops at its first error."""
    return next(validator.descend(instance, branch, schema_path=index), None) is None


def _any_of(
    validator: Any, branches: list[Any], instance: Any, schema: Any
) -> Iterator[ValidationError]:
    for index, branch in enumerate(branches):
        if _passes(validator, instance, branch, index):
            return
    yield _error(f"{describe(instance)} is not valid under any of the given schemas")


def _one_of(
    validator: Any, branches: list[Any], instance: Any, schema: Any
) -> Iterator[ValidationError]:
    passed: list[int] = []
    for index, branch in enumerate(branches):
        if _passes(validator, instance, branch, index):
            passed.append(index)
            if len(passed) == 2:
                break
    if not passed:
        yield _error(f"{describe(instance)} is not valid under any of the given schemas")
    elif len(passed) == 2:
        yield _error(
            f"{describe(instance)} is valid under more than one of the given schemas "
            f"(#{passed[0]} and #{passed[1]})"
        )


#: Where an array's or an object's items end, in the walk of :func:`_equality_key`.
_END_ARRAY: Final = object()
_END_OBJECT: Final = object()


def _equality_key(value: Any) -> str:
    """A key equal for values JSON Schema calls equal (``1 == 1.0``, not ``true``).

    Text, not nested tuples and frozensets: a string holds no references, so
    the garbage collector never tracks it. Keys made of containers, one or
    more per item, survived into the collector's oldest generation and made
    it walk the whole heap, again and again, each pass one uninterrupted C
    call holding the GIL (a tenth of a second and more over 60,000 nested
    lists): every other thread, the event loop's included, waited.

    Strings are prefixed with their length, numbers end with ``;`` and an
    integral float is written as the integer it equals: two keys are equal
    exactly when the values are. Iterative: no recursion, whatever the nesting.
    """
    parts: list[str] = []
    put = parts.append
    stack: list[Any] = [value]
    while stack:
        node = stack.pop()
        if node is _END_ARRAY:
            put("]")
        elif node is _END_OBJECT:
            put("}")
        elif isinstance(node, str):
            put(f"s{len(node)}:")
            put(node)
        elif node is None:
            put("z")
        elif isinstance(node, bool):
            put("t" if node else "f")
        elif isinstance(node, int):
            put(f"n{node};")
        elif isinstance(node, float):
            put(f"n{int(node)};" if node.is_integer() else f"n{node!r};")
        elif isinstance(node, Mapping):
            put("{")
            stack.append(_END_OBJECT)
            for key in sorted(node, reverse=True):
                stack.append(node[key])
                stack.append(key)
        else:
            put("[")
            stack.append(_END_ARRAY)
            stack.extend(reversed(node))
    return "".join(parts)


_DRAFT: Final = "https://json-schema.org/draft/2020-12/schema"


@functools.cache
def _validators() -> tuple[Any, Any]:
    """The bounded validator class and the meta-schema's validator, built once, on first use."""
    from jsonschema import Draft202012Validator
    from jsonschema.validators import extend

    keywords: dict[str, _Keyword] = {
        **Draft202012Validator.VALIDATORS,
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "uniqueItems": _unique_items,
        "anyOf": _any_of,
        "oneOf": _one_of,
    }
    bounded = extend(  # type: ignore[no-untyped-call]
        Draft202012Validator,
        validators={name: _counted(keyword) for name, keyword in keywords.items()},
    )
    # Checks schemas against the 2020-12 meta-schema, counted like any check; its
    # "regex" format is not asserted (that would compile patterns with Python's
    # re): RE2 decides on patterns instead.
    return bounded, bounded(_flat_meta_schema())


def _flat_meta_schema() -> dict[str, Any]:
    """The draft 2020-12 meta-schema as one document, without dynamic references.

    The published meta-schema spreads over eight documents joined by
    ``$dynamicRef: "#meta"``; resolving those references is most of the cost
    of checking a schema against it (ten times the rest, or more). For the
    2020-12 dialect itself that reference always means the meta-schema's
    root, so one document holding every vocabulary's ``properties`` and
    ``$defs``, with those references pointing at ``"#"``, checks the same.
    """
    from jsonschema_specifications import REGISTRY as SPECIFICATIONS

    root = SPECIFICATIONS.contents(_DRAFT)
    properties: dict[str, Any] = {}
    defs: dict[str, Any] = {}
    for part in root["allOf"]:
        vocabulary = SPECIFICATIONS.contents(urljoin(_DRAFT, part["$ref"]))
        properties.update(vocabulary.get("properties", {}))
        defs.update(vocabulary.get("$defs", {}))
    properties.update(root["properties"])
    flat = {"type": ["object", "boolean"], "properties": properties, "$defs": defs}
    stack: list[Any] = [flat := copy.deepcopy(flat)]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if node.get("$dynamicRef") == "#meta":
                del node["$dynamicRef"]
                node["$ref"] = "#"
            elif isinstance(node.get("$ref"), str) and "#/$defs/" in node["$ref"]:
                node["$ref"] = "#/$defs/" + node["$ref"].split("#/$defs/", 1)[1]
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return flat


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
    _validator: Any = attrs.field(alias="validator", repr=False)
    _text: str = attrs.field(alias="text", repr=False)

    @property
    def type_tag(self) -> str | None:
        """The tag a store keeps for :attr:`target` (see :func:`schema_for_tag`)."""
        if self.target is None:
            return None
        return _type_tag(self.target, self._text)

    def schema_copy(self) -> dict[str, Any]:
        """A fresh copy of the schema, for a runner to read (and change) freely."""
        fresh: dict[str, Any] = json.loads(self._text)
        return fresh

    def prepare(self, value: Any) -> Any:
        """A runner may return an instance of the target type: make it JSON-ready."""
        if self.target is not None and isinstance(value, self.target):
            return to_json_ready(value)
        return value

    async def check(self, result: CanonicalJson) -> None:
        """Check a *result* against the schema (and the target type), boundedly.

        A small check runs inline; a large or costly one on a worker thread
        (the copy it checks is decoded there too), which the caller's
        cancellation (the run's cancel request or child deadline) stops
        within a few steps.

        Raises:
            SchemaMismatch: naming the failing paths (at most 20), or saying
                the check was too costly.
            trio.Cancelled: the caller was cancelled during a threaded check.
        """
        if result.size <= INLINE_BYTES:
            value = _checkable(result)
            try:
                self._check(value, _Budget(INLINE_STEPS, inline=True))
            except _OverBudget:
                pass
            else:
                self.structure(value)
                return
        await run_sync(self._check_copy, result)

    def check_now(self, value: CanonicalJson, steps: int) -> Any:
        """Check *value* on the event loop, within *steps* keyword evaluations.

        For values that must be judged synchronously (an answer to a child's
        question, contract §19): bounded by the step count, never threaded.

        Returns:
            the checked value, structured into the target type if there is one.

        Raises:
            SchemaMismatch: naming the failing paths, or saying the check took
                more than *steps* steps.
        """
        # Decoded in one C call: on the event loop, short beats fair.
        checkable = _checkable(value, threaded=False)
        try:
            self._check(checkable, _Budget(steps, inline=True))
        except _OverBudget:
            raise SchemaMismatch(
                [
                    f"$: checking the value against its schema took more than {steps} "
                    "steps; send a smaller value or ask with a simpler schema"
                ]
            ) from None
        return self.structure(checkable)

    def _check_copy(self, result: CanonicalJson) -> None:
        with _COLLECTOR.paused():
            value = _checkable(result)
            self._check(value, _Budget(MAX_STEPS, inline=False))
            self.structure(value)

    def structure(self, value: Any) -> Any:
        """*value* (JSON-ready, checked) as the target type, or as it is.

        Raises:
            SchemaMismatch: the value does not structure into the target type.
        """
        if self.target is None:
            return value
        try:
            return converter.structure(value, self.target)
        except Exception as exc:
            raise SchemaMismatch(cattrs.transform_error(exc)) from exc

    def _check(self, value: Any, budget: _Budget) -> None:
        token = _BUDGET.set(budget)
        try:
            errors = list(islice(self._validator.iter_errors(value), _MAX_PROBLEMS + 1))
        except RecursionError:
            raise SchemaMismatch(
                ["$: final_schema refers to itself without consuming the result ($ref loop)"]
            ) from None
        finally:
            _BUDGET.reset(token)
        if not errors:
            return
        errors.sort(key=lambda error: [str(part) for part in error.absolute_path])
        problems = [_problem(error) for error in errors[:_MAX_PROBLEMS]]
        if len(errors) > _MAX_PROBLEMS:
            problems.append("… and more")
        raise SchemaMismatch(problems)


@final
class _CollectorPause:
    """Holds off the cyclic garbage collector while large results are checked.

    The copy a check decodes holds a container per array and object of the
    result, alive until the check ends: with the collector on, they would be
    moved into its oldest generation, and each quarter more of long-lived
    containers sets off a pass over the whole heap, one C call holding the
    GIL for as long as the heap is large (60,000 nested lists: 100-200 ms a
    pass, several passes), while the event loop's thread waits for it. Held
    off, the containers are freed (by their reference counts) when the check
    ends, before the collector ever counted them as long-lived: it has no
    more to do than before. Checks on several threads share one pause; a
    collector the application turned off stays off.
    """

    __slots__ = ("_lock", "_resume", "_users")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._resume = False

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """The collector off from entry until the last check using it exits."""
        with self._lock:
            if self._users == 0:
                self._resume = gc.isenabled()
                gc.disable()
            self._users += 1
        try:
            yield
        finally:
            with self._lock:
                self._users -= 1
                if self._users == 0 and self._resume:
                    gc.enable()


_COLLECTOR: Final = _CollectorPause()


def _checkable(result: CanonicalJson, *, threaded: bool = True) -> Any:
    """A fresh copy of *result* to check, its containers brief in messages.

    JSON objects decode straight into :class:`BriefDict`; the decoder has no
    such hook for arrays, so they are replaced afterwards, without recursion.
    A large result is decoded by json's Python scanner (on a worker thread).
    """
    if result.immutable:
        return result.copy()
    decoder = json.JSONDecoder(object_pairs_hook=BriefDict)
    if threaded and result.size > INLINE_BYTES:
        # json's C scanner decodes the whole text in one call, holding the
        # GIL throughout (some 80 ms of CPU for a megabyte): every other
        # thread, the event loop's included, would wait. Its Python scanner
        # takes three to four times as long on this worker thread, but lets
        # the GIL go between values; its one C call per string is short.
        # (Neither is in the typeshed stubs: both are documented in json's source.)
        decoder.scan_once = json.scanner.py_make_scanner(decoder)  # type: ignore[attr-defined]
    value = decoder.decode(result.text)
    if type(value) is list:
        value = BriefList(value)
    stack = [value]
    while stack:
        node = stack.pop()
        pairs = node.items() if type(node) is BriefDict else enumerate(node)
        for key, child in pairs:
            if type(child) is list:
                node[key] = child = BriefList(child)
            if type(child) is BriefDict or type(child) is BriefList:
                stack.append(child)
    return value


def _problem(error: ValidationError) -> str:
    message = error.message
    if len(message) > _MAX_PROBLEM_CHARS:
        message = message[: _MAX_PROBLEM_CHARS - 1] + "…"
    return f"{error.json_path}: {message}"


def compile_result_schema(
    spec: SchemaSpec, field: str = "final_schema", *, max_nesting: int = MAX_SCHEMA_DEPTH
) -> ResultSchema:
    """Check *spec* and build its :class:`ResultSchema`.

    Raises:
        InvalidArgumentsError: *spec* is not a mapping or a structured type,
            is too large or too deep, is not a valid JSON Schema, has a
            ``pattern`` RE2 cannot run, or has a ``$ref`` that does not point
            inside it.
    """
    if is_structured_type(spec):
        assert isinstance(spec, type)
        return _compile(schema_for_type(spec), spec, field, max_nesting)
    if not is_mapping(spec):
        raise InvalidArgumentsError(
            f"{field} must be a JSON Schema object, an attrs class or a dataclass, "
            f"got {describe(spec)}"
        )
    if not is_a(spec, dict):
        # A host's own mapping (a MappingProxyType, say): read once, here.
        try:
            spec = dict(spec)
        except Exception as exc:
            raise InvalidArgumentsError(
                f"{field} could not be read ({type(exc).__name__}); pass a plain dict"
            ) from None
    # Depth and count first, without recursion and stopping at the limits:
    # encoding a value nested a million levels deep would exhaust the stack,
    # and one of a million items would take seconds before its size showed.
    # The copy is made of builtins only: nothing of a dict subclass's own runs.
    depth_limit = min(max_nesting, MAX_SCHEMA_DEPTH)
    try:
        spec = plain(spec, depth_limit, MAX_SCHEMA_VALUES)
    except TooDeep:
        raise InvalidArgumentsError(
            f"{field} nests more than {depth_limit} levels deep: flatten the schema"
        ) from None
    except JsonProblem as exc:
        raise InvalidArgumentsError(
            f"{field} is not accepted: {exc}; at most {MAX_SCHEMA_BYTES} bytes of JSON are "
            "allowed: simplify the schema"
        ) from None
    except TypeError as exc:
        raise InvalidArgumentsError(f"{field} is not JSON: {exc}") from None
    try:
        encoded = json.dumps(spec, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentsError(f"{field} is not JSON: {exc}") from None
    problem = text_problem(encoded)
    if problem is not None:
        raise InvalidArgumentsError(f"{field} holds text that is not valid Unicode: {problem}")
    size = len(encoded.encode())
    if size > MAX_SCHEMA_BYTES:
        raise InvalidArgumentsError(
            f"{field} is {size} bytes of JSON; at most {MAX_SCHEMA_BYTES} are allowed: "
            "simplify the schema"
        )
    return _compile(json.loads(encoded), None, field, max_nesting)


def _compile(
    schema: dict[str, Any], target: type | None, field: str, max_nesting: int
) -> ResultSchema:
    depth_limit = min(max_nesting, MAX_SCHEMA_DEPTH)
    try:
        check_nesting(schema, depth_limit)
    except JsonProblem:
        raise InvalidArgumentsError(
            f"{field} nests more than {depth_limit} levels deep: flatten the schema"
        ) from None
    import jsonschema.exceptions
    import re2

    bounded, meta_validator = _validators()
    token = _BUDGET.set(_Budget(SCHEMA_CHECK_STEPS, inline=True))
    try:
        error = jsonschema.exceptions.best_match(meta_validator.iter_errors(schema))
        if error is None:
            # In the same budget: every $ref's target is checked as a schema.
            _check_refs(schema, field, meta_validator)
    except _OverBudget:
        raise InvalidArgumentsError(
            f"{field} is too large to check at admission (more than {SCHEMA_CHECK_STEPS} "
            "steps against the JSON Schema meta-schema): simplify it, with fewer "
            "subschemas and keywords"
        ) from None
    finally:
        _BUDGET.reset(token)
    if error is not None:
        raise InvalidArgumentsError(
            f"{field} is not a valid JSON Schema (draft 2020-12): at {error.json_path}: "
            f"{_problem(error).split(': ', 1)[1]}"
        )
    for where, pattern in _patterns(schema):
        try:
            _regex(pattern)
        except re2.error as exc:
            reason = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else exc
            raise InvalidArgumentsError(
                f"{field} has the pattern {describe(pattern)} at {where}, which cannot be "
                f"matched in linear time ({reason}); rewrite it without look-around or "
                "back-references"
            ) from None
    text = json.dumps(schema, ensure_ascii=False, separators=(",", ":"))
    compiled = ResultSchema(schema, target, validator=bounded(schema), text=text)
    if target is not None:
        _KNOWN_TYPES[_type_tag(target, text)] = compiled
    return compiled


#: The schemas of the attrs classes and dataclasses this process has
#: compiled, by tag: how a result read back from a store finds its type
#: (contract §5) without a stored value ever naming code to import. Weak:
#: a type that is gone is forgotten.
_KNOWN_TYPES: weakref.WeakValueDictionary[str, ResultSchema] = weakref.WeakValueDictionary()


def _type_tag(target: type, text: str) -> str:
    """*target*'s module and name, and a digest of its JSON Schema *text*:
    two types of the same name but different fields never share a tag."""
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    return f"{target.__module__}.{target.__qualname__}#{digest}"


def schema_for_tag(tag: object) -> ResultSchema | None:
    """The compiled schema of the type a store's *tag* names, if this process knows it.

    Known are the types given as ``final_schema`` since the process started
    (a subagent's own, or one passed to ``start``/``delegate``), as long as
    they exist.
    """
    if not isinstance(tag, str):
        return None
    return _KNOWN_TYPES.get(tag)


def _walk(node: Any) -> Iterator[tuple[str, Any, Any]]:
    """Every ``(path, key, value)`` of the mappings inside a schema, without recursion."""
    stack: list[tuple[str, Any]] = [("$", node)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, dict):
            for key, value in item.items():
                yield path, key, value
                stack.append((f"{path}.{key}", value))
        elif isinstance(item, list):
            stack.extend((f"{path}[{index}]", value) for index, value in enumerate(item))


def _refs(node: Any) -> Iterator[tuple[str, str, str]]:
    """Every ``(path, keyword, value)`` of ``$ref``, ``$dynamicRef`` and ``$id`` strings."""
    for path, key, value in _walk(node):
        if key in ("$ref", "$dynamicRef", "$id") and isinstance(value, str):
            yield path, key, value


def _patterns(node: Any) -> Iterator[tuple[str, str]]:
    """Every regular expression a schema holds (``pattern`` values and
    ``patternProperties`` keys), with where it is.

    A ``pattern`` that is the name of a property (``properties: {pattern: ...}``)
    is a schema, not a string, and is skipped by the type check.
    """
    for path, key, value in _walk(node):
        if key == "pattern" and isinstance(value, str):
            yield f"{path}.pattern", value
        elif key == "patternProperties" and isinstance(value, dict):
            for pattern in value:
                yield f"{path}.patternProperties", pattern


def _check_refs(schema: dict[str, Any], field: str, meta_validator: Any) -> None:
    """Check that every reference in *schema* points at a schema inside it.

    Each target is resolved as ``jsonschema`` resolves it (a JSON Pointer
    from the root, percent-decoded) and checked against the meta-schema (a
    ``$ref`` to ``5``, ``[1]`` or a ``properties`` mapping would otherwise be
    used as a schema only when a result is checked, after the run did its
    work, and fail there with a raw ``TypeError``). An ``$id`` below the root
    would re-base the references under it onto another document, which is
    not how they are resolved here: it is refused.

    Args:
        schema: the schema, already valid against the meta-schema.
        field: the argument's name, for the error.
        meta_validator: the (counted) meta-schema validator.

    Raises:
        InvalidArgumentsError: naming the reference and what is wrong with it.
        _OverBudget: the targets take more steps than the admission check may.
    """
    import jsonschema.exceptions

    checked: set[int] = set()
    for path, keyword, value in _refs(schema):
        if keyword == "$id":
            if path != "$":
                raise InvalidArgumentsError(
                    f"{field} has $id {describe(value)} at {path}, which would re-base the "
                    "$ref inside it onto another document; remove $id below the root "
                    "(references are resolved from the root, nothing is fetched)"
                )
            continue
        target = _check_ref(schema, value, field)
        if id(target) in checked:
            continue
        checked.add(id(target))
        error = jsonschema.exceptions.best_match(meta_validator.iter_errors(target))
        if error is not None:
            raise InvalidArgumentsError(
                f"{field} has {keyword} {describe(value)} at {path}, which points at "
                f"{describe(target)}: not a valid JSON Schema ({_problem(error).split(': ', 1)[1]})"
                "; point it at a schema (an object or a boolean), e.g. under $defs"
            )


def _check_ref(schema: dict[str, Any], ref: str, field: str) -> Any:
    """The value *ref* points at in *schema*.

    Raises:
        InvalidArgumentsError: *ref* points outside *schema*, or at nothing.
    """
    problem = f"{field} has $ref {ref!r}"
    if ref != "#" and not ref.startswith("#/"):
        raise InvalidArgumentsError(
            f'{problem}; only references inside the schema ("#" or "#/...") are allowed, '
            "nothing is fetched: inline the referenced schema under $defs"
        )
    target: Any = schema
    # Percent-decoded first, then split: as the resolver reads it.
    for raw in unquote(ref[2:]).split("/") if ref != "#" else ():
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
    return target
