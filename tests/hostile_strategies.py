"""Hypothesis strategies for hostile input (contract §15).

Models and runners send text with lone surrogates, control characters,
markup and terminal escapes; values nested far deeper than anyone needs;
numbers JSON cannot hold; schemas built to be expensive; and, from a Python
host, objects whose every method raises. These strategies draw such values
for the hostile-input suite (``tests/test_hostile.py``).

Values that are costly to build, print or compare (a list 100,000 levels
deep, a megabyte of text, an object whose ``__repr__`` raises) are drawn as
:class:`Built` recipes: Hypothesis shows the recipe in a failing example, and
the test calls :func:`build` to make a fresh value outside the timed part of
the test.
"""

from __future__ import annotations

import dataclasses
import decimal
import enum
import fractions
import json
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

import attrs
from hypothesis import strategies as st

import trio_delegate as td

from .helpers import (
    HostileError,
    LoudDict,
    LoudInt,
    LoudList,
    LoudStr,
    Unreadable,
    raise_hostile,
)

#: ``Config.max_nesting_depth`` by default.
NESTING: Final = td.Config().max_nesting_depth

# -- values made only when needed ------------------------------------------------------


@attrs.frozen(repr=False)
class Built:
    """A value made by *make* each time a test needs it; shown as *recipe*."""

    recipe: str
    make: Callable[[], Any] = attrs.field(eq=False)

    def __repr__(self) -> str:
        return self.recipe


def build(value: Any) -> Any:
    """*value* with every :class:`Built` recipe in it (in plain lists, tuples
    and dicts, as the strategies nest them) replaced by a freshly made value."""
    if isinstance(value, Built):
        return value.make()
    if type(value) is list:
        return [build(item) for item in value]
    if type(value) is tuple:
        return tuple(build(item) for item in value)
    if type(value) is dict:
        return {build(key): build(item) for key, item in value.items()}
    return value


def built(recipe: str, make: Callable[[], Any]) -> st.SearchStrategy[Built]:
    return st.just(Built(recipe, make))


# -- text ------------------------------------------------------------------------------

#: Markup that terminals, renderers or models interpret.
MARKUP: Final = (
    "[/INST]",
    "[INST]",
    "<<SYS>>",
    "[link=file:///etc/passwd]click[/link]",
    "[bold red]alarm[/]",
    "[/]",
    "[",
    "<script>alert(1)</script>",
    "</tool_call>",
    "<|im_end|>",
    "{{7*7}}",
    "${jndi:ldap://x/a}",
    "%s%n%x",
    "'; DROP TABLE runs; --",
    '"}]}',
    "\\",
    "\\ud800",
)
#: ANSI and other terminal escape sequences.
ANSI: Final = (
    "\x1b[31m",
    "\x1b[2J\x1b[H",
    "\x1b]8;;http://example.invalid/\x07link\x1b]8;;\x07",
    "\x1b]0;title\x07",
    "\x1bP+q\x1b\\",
    "\x9b31m",
    "\r\x1b[K",
)
#: Code points that are valid Unicode but odd in text.
ODD_CHARACTERS: Final = (
    "\x00",
    "\x7f",
    "\x85",
    "\u2028",
    "\u2029",
    "\u200b",
    "\u202e",
    "\ufeff",
    "\ufffe",
    "\uffff",
    "\U0010ffff",
    "\U0001f600",
    "e\u0301",
)
WHITESPACE: Final = ("", " ", "\t\n", "\u3000", "\xa0")

lone_surrogates = st.integers(0xD800, 0xDFFF).map(chr)
control_characters = st.integers(0, 0x1F).map(chr) | st.integers(0x7F, 0x9F).map(chr)

_LONG_TEXTS: Final = (
    ("'a' * 100_000", lambda: "a" * 100_000),
    ("'a' * 100_001", lambda: "a" * 100_001),
    ("'é' * 100_001", lambda: "é" * 100_001),
    ("'x' * 1_000_000", lambda: "x" * 1_000_000),
    ("'[/INST]' * 20_000", lambda: "[/INST]" * 20_000),
    ("'\\ud800' * 50_000", lambda: "\ud800" * 50_000),
)
long_texts = st.sampled_from([Built(recipe, make) for recipe, make in _LONG_TEXTS])


def hostile_text(max_pieces: int = 6) -> st.SearchStrategy[Any]:
    """Text a model might send: mostly short, often with something nasty in it."""
    piece = (
        st.text(max_size=10)
        | st.sampled_from(MARKUP)
        | st.sampled_from(ANSI)
        | st.sampled_from(ODD_CHARACTERS)
        | st.sampled_from(WHITESPACE)
        | lone_surrogates
        | control_characters
    )
    return st.lists(piece, max_size=max_pieces).map("".join) | long_texts


def accepted_text() -> st.SearchStrategy[str]:
    """Text the runtime accepts (valid Unicode, not blank, short) that is still
    nasty: markup, terminal escapes, control and odd characters."""
    piece = (
        st.text(max_size=10)
        | st.sampled_from(MARKUP)
        | st.sampled_from(ANSI)
        | st.sampled_from(ODD_CHARACTERS)
        | control_characters
    )
    return st.lists(piece, min_size=1, max_size=5).map("".join).filter(lambda text: text.strip())


def mostly(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """*good* three times in four, else *bad*: calls get far enough to reach the
    code behind their first check.

    (``st.one_of`` would not do: it draws each distinct branch of its
    arguments, flattened, with the same chance.)
    """
    return st.integers(0, 3).flatmap(lambda choice: bad if choice == 3 else good)


# -- numbers ---------------------------------------------------------------------------

HUGE: Final = 10**400
NUMBERS: Final = (
    HUGE,
    -HUGE,
    Built("10**5000", lambda: 10**5000),
    1e308,
    -1e308,
    math.inf,
    -math.inf,
    math.nan,
    -0.0,
    0,
    0.0,
    5e-324,
    1e-300,
    -1,
    -1e-300,
    2**63,
    2**64 + 1,
    9007199254740993,
    True,
    False,
)
hostile_numbers = st.sampled_from(NUMBERS) | st.integers() | st.floats()


# -- nesting ---------------------------------------------------------------------------


def nested(depth: int, kind: str = "list", leaf: Any = "x") -> Any:
    """*leaf* inside *depth* containers: lists, dicts, or both in turn."""
    value = leaf
    for level in range(depth):
        wrap_in_list = kind == "list" or (kind == "mixed" and level % 2)
        value = [value] if wrap_in_list else {"k": value}
    return value


#: Just under, at, just over, and far over the default limit.
DEPTHS: Final = (NESTING - 1, NESTING, NESTING + 1, 2 * NESTING, 1_000, 100_000)


@st.composite
def deep_values(draw: st.DrawFn, depths: tuple[int, ...] = DEPTHS) -> Built:
    depth = draw(st.sampled_from(depths))
    kind = draw(st.sampled_from(["list", "dict", "mixed"]))
    return Built(f"nested({depth}, {kind!r})", lambda: nested(depth, kind))


# -- odd Python objects (only a host can send these) -----------------------------------


class RaisingStr:
    """An object that cannot be printed."""

    __str__ = __repr__ = __format__ = raise_hostile


class RaisingEq:
    """An object that cannot be compared, hashed or tested for truth."""

    __eq__ = __ne__ = __hash__ = __bool__ = __lt__ = raise_hostile


class StrSub(str):
    """A plain subclass of str."""


class IntSub(int):
    """A plain subclass of int."""


class FloatSub(float):
    """A plain subclass of float."""


class DictSub(dict[str, Any]):
    """A plain subclass of dict."""


class ListSub(list[Any]):
    """A plain subclass of list."""


class StrEnum(enum.StrEnum):
    ECHO = "echo"
    TASK = "a task"


class Color(enum.Enum):
    RED = 1


@attrs.frozen
class Finding:
    title: str
    score: int


@dataclasses.dataclass
class Note:
    text: str


class Cycle(list[Any]):
    """A list that contains itself."""

    def __init__(self) -> None:
        super().__init__()
        self.append(self)


def _cyclic_dict() -> dict[str, Any]:
    value: dict[str, Any] = {}
    value["self"] = value
    return value


def _generator() -> Iterator[int]:
    yield 1


_ODD_OBJECTS: Final[tuple[tuple[str, Callable[[], Any]], ...]] = (
    ("b'bytes'", lambda: b"bytes"),
    ("bytearray(b'x')", lambda: bytearray(b"x")),
    ("{1, 2}", lambda: {1, 2}),
    ("frozenset()", frozenset),
    ("1j", lambda: 1j),
    ("Decimal('NaN')", lambda: decimal.Decimal("NaN")),
    ("Decimal('1e400')", lambda: decimal.Decimal("1e400")),
    ("Fraction(1, 3)", lambda: fractions.Fraction(1, 3)),
    ("object()", object),
    ("HostileError", lambda: HostileError),
    ("lambda", lambda: lambda: None),
    ("generator", _generator),
    ("range(3)", lambda: range(3)),
    ("Ellipsis", lambda: ...),
    ("RaisingStr()", RaisingStr),
    ("RaisingEq()", RaisingEq),
    ("Unreadable()", Unreadable),
    ("StrSub('echo')", lambda: StrSub("echo")),
    ("LoudStr('echo')", lambda: LoudStr("echo")),
    ("IntSub(3)", lambda: IntSub(3)),
    ("LoudInt(3)", lambda: LoudInt(3)),
    ("FloatSub(0.5)", lambda: FloatSub(0.5)),
    ("DictSub(type='object')", lambda: DictSub(type="object")),
    ("LoudDict(type='object')", lambda: LoudDict(type="object")),
    ("ListSub([1])", lambda: ListSub([1])),
    ("LoudList([1])", lambda: LoudList([1])),
    ("StrEnum.ECHO", lambda: StrEnum.ECHO),
    ("Color.RED", lambda: Color.RED),
    ("Finding('t', 1)", lambda: Finding("t", 1)),
    ("Note('n')", lambda: Note("n")),
    ("td.RunStatus.RUNNING", lambda: td.RunStatus.RUNNING),
    ("Cycle()", Cycle),
    ("{'self': ...}", _cyclic_dict),
    ("HostileError('boom')", lambda: HostileError("boom")),
)
odd_objects = st.sampled_from([Built(recipe, make) for recipe, make in _ODD_OBJECTS])


# -- JSON values -----------------------------------------------------------------------


def json_scalars() -> st.SearchStrategy[Any]:
    return st.none() | st.booleans() | hostile_numbers | hostile_text(4)


def hostile_values(*, odd: bool = True) -> st.SearchStrategy[Any]:
    """Values as a runner or a host may hand them over: JSON-like, mostly."""
    leaves = json_scalars() | deep_values()
    if odd:
        leaves = leaves | odd_objects
    return st.recursive(
        leaves,
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.dictionaries(hostile_text(3), inner, max_size=4)
            | st.tuples(inner, inner)
        ),
        max_leaves=8,
    )


# -- schemas ---------------------------------------------------------------------------


def _exponential_refs(levels: int) -> dict[str, Any]:
    """Each level doubles the work of checking any value."""
    defs: dict[str, Any] = {f"l{levels}": {"type": "integer"}}
    for level in range(levels - 1, -1, -1):
        ref = {"$ref": f"#/$defs/l{level + 1}"}
        defs[f"l{level}"] = {"anyOf": [{"allOf": [ref, {"minimum": 1}]}, ref]}
    return {"$defs": defs, "$ref": "#/$defs/l0"}


def _nested_keyword(keyword: str, depth: int, fanout: int = 2) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer"}
    for _ in range(depth):
        schema = {keyword: [schema] * fanout}
    return schema


def _not_chain(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {}
    for _ in range(depth):
        schema = {"not": schema}
    return schema


#: Schemas that are valid but built to be costly or surprising to check against.
COSTLY_SCHEMAS: Final[tuple[tuple[str, Callable[[], Any]], ...]] = (
    ("pattern ^(a+)+$", lambda: {"type": "string", "pattern": "^(a+)+$"}),
    ("pattern (x+x+)+y", lambda: {"pattern": "(x+x+)+y"}),
    (
        "patternProperties ^(a|aa)+$",
        lambda: {"patternProperties": {"^(a|aa)+$": {"type": "integer"}}},
    ),
    ("uniqueItems", lambda: {"type": "array", "uniqueItems": True}),
    (
        "uniqueItems of objects",
        lambda: {"type": "array", "uniqueItems": True, "items": {"type": "object"}},
    ),
    ("$ref #", lambda: {"$ref": "#"}),
    (
        "$ref loop a->b->a",
        lambda: {
            "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
            "$ref": "#/$defs/a",
        },
    ),
    ("exponential $ref 40", lambda: _exponential_refs(40)),
    ("anyOf 15 deep", lambda: _nested_keyword("anyOf", 15)),
    ("oneOf 15 deep", lambda: _nested_keyword("oneOf", 15)),
    ("allOf x3 10 deep", lambda: _nested_keyword("allOf", 10, 3)),
    (
        "unevaluatedProperties under anyOf",
        lambda: {
            "anyOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}}],
            "unevaluatedProperties": False,
        },
    ),
    ("unknown keywords", lambda: {"x-vendor": {"$ref": "http://example.invalid/"}, "foo": [1]}),
    ("format regex", lambda: {"type": "string", "format": "regex"}),
    ("enum of 5000", lambda: {"enum": list(range(5000))}),
    ("enum of deep values", lambda: {"enum": [nested(20), nested(20, "dict")]}),
    ("multipleOf 1e-308", lambda: {"multipleOf": 1e-308}),
    ("multipleOf 0.1", lambda: {"multipleOf": 0.1}),
    ("maximum 1e308", lambda: {"maximum": 1e308}),
    ("contains many", lambda: {"contains": {"pattern": "^(a+)+$"}, "minContains": 10**18}),
    ("not 31 deep", lambda: _not_chain(31)),
    ("const huge", lambda: {"const": 10**300}),
    ("if/then/else", lambda: {"if": {"type": "string"}, "then": {"maxLength": 0}, "else": {}}),
    ("$dynamicRef", lambda: {"$dynamicAnchor": "m", "items": {"$dynamicRef": "#m"}}),
    (
        "allOf of 3000",
        lambda: {"allOf": [{"minimum": index} for index in range(3000)]},
    ),
    (
        "2000 properties",
        lambda: {"properties": {f"p{index}": {"type": "string"} for index in range(2000)}},
    ),
    ("true", dict),
)

#: Schemas that are not valid (or not acceptable) as ``final_schema``.
MALFORMED_SCHEMAS: Final[tuple[tuple[str, Callable[[], Any]], ...]] = (
    ("type bogus", lambda: {"type": "bogus"}),
    ("minimum '3'", lambda: {"minimum": "3"}),
    ("required 'a'", lambda: {"required": "a"}),
    ("properties []", lambda: {"properties": []}),
    ("enum 5", lambda: {"enum": 5}),
    ("pattern 5", lambda: {"pattern": 5}),
    ("pattern (", lambda: {"pattern": "("}),
    ("pattern look-ahead", lambda: {"pattern": "(?=a)b"}),
    ("pattern back-reference", lambda: {"pattern": r"(a)\1"}),
    ("pattern a{1000}{1000}", lambda: {"pattern": "(a{1000}){1000}"}),
    ("pattern of a lone surrogate", lambda: {"pattern": "\ud800"}),
    ("patternProperties (?<!x)", lambda: {"patternProperties": {"(?<!x)y": {}}}),
    ("$ref http", lambda: {"$ref": "http://example.invalid/schema"}),
    ("$ref file", lambda: {"$ref": "file:///etc/passwd"}),
    ("$ref nowhere", lambda: {"$ref": "#/nowhere"}),
    ("$ref 5", lambda: {"$ref": 5}),
    ("not 33 deep", lambda: _not_chain(33)),
    ("not 100000 deep", lambda: _not_chain(100_000)),
    ("enum of 20000", lambda: {"enum": list(range(20_000))}),
    ("anyOf 8 wide 6 deep", lambda: _nested_keyword("anyOf", 6, 8)),
    ("const NaN", lambda: {"const": math.nan}),
    ("minimum 10**400", lambda: {"minimum": 10**400}),
    ("maximum inf", lambda: {"maximum": math.inf}),
    ("key not a string", lambda: {1: {}}),
    ("bytes value", lambda: {"const": b"x"}),
    ("set value", lambda: {"enum": {1, 2}}),
    ("True", lambda: True),
    ("a list", lambda: [{"type": "string"}]),
    ("a string", lambda: '{"type": "string"}'),
    ("JSON text that is not JSON", lambda: "{bad"),
    ("None", lambda: None),
    ("DictSub", lambda: DictSub(type="string")),
    ("LoudDict", lambda: LoudDict(type="string")),
    ("$schema draft-04", lambda: {"$schema": "http://json-schema.org/draft-04/schema#"}),
    ("a type that is no schema type", lambda: Color),
)

costly_schemas = st.sampled_from([Built(recipe, make) for recipe, make in COSTLY_SCHEMAS])
malformed_schemas = st.sampled_from([Built(recipe, make) for recipe, make in MALFORMED_SCHEMAS])
hostile_schemas = st.none() | costly_schemas | malformed_schemas | odd_objects


#: Results that exercise the costly schemas (long runs of one letter, big arrays).
_SCHEMA_RESULTS: Final[tuple[tuple[str, Callable[[], Any]], ...]] = (
    ("'a' * 30 + 'b'", lambda: "a" * 30 + "b"),
    ("'a' * 100_000", lambda: "a" * 100_000),
    ("'x' * 40", lambda: "x" * 40),
    ("{'a' * 40: 1}", lambda: {"a" * 40: 1}),
    ("20_000 distinct objects", lambda: [{"id": index, "tags": ["a"]} for index in range(20_000)]),
    ("20_000 objects, one repeated", lambda: [{"id": index % 19_999} for index in range(20_000)]),
    ("[1, 1.0, True]", lambda: [1, 1.0, True]),
    ("10**300", lambda: 10**300),
    ("0", lambda: 0),
    ("{'a': 1, 'b': 2}", lambda: {"a": 1, "b": 2}),
    ("['a' * 40] * 1000", lambda: ["a" * 40] * 1000),
)
schema_results = st.sampled_from([Built(recipe, make) for recipe, make in _SCHEMA_RESULTS])


# -- JSON text from a model ------------------------------------------------------------


_HOSTILE_JSON_TEXTS: Final[tuple[tuple[str, Callable[[], str]], ...]] = (
    ("not JSON", lambda: "{bad"),
    ("empty", lambda: ""),
    ("whitespace", lambda: "   "),
    ("null", lambda: "null"),
    ("array", lambda: "[]"),
    ("string", lambda: '"delegate"'),
    ("number", lambda: "1e400"),
    ("BOM", lambda: '\ufeff{"run_id": "x"}'),
    ("trailing garbage", lambda: '{"run_id": "x"} trailing'),
    ("two objects", lambda: '{"run_id": "x"}{"run_id": "y"}'),
    ("duplicate keys", lambda: '{"run_id": "x", "run_id": "@RUN@"}'),
    ("escaped lone surrogate", lambda: '{"subagent": "echo", "task": "a\\ud800b"}'),
    ("escaped low surrogate key", lambda: '{"\\udc00": 1, "run_id": "@RUN@"}'),
    ("raw lone surrogate", lambda: '{"subagent": "echo", "task": "\ud800"}'),
    ("escaped NUL", lambda: '{"subagent": "echo", "task": "a\\u0000b"}'),
    ("NaN timeout", lambda: '{"run_id": "@RUN@", "timeout": NaN}'),
    ("Infinity timeout", lambda: '{"run_id": "@RUN@", "timeout": Infinity}'),
    ("-Infinity timeout", lambda: '{"run_id": "@RUN@", "timeout": -Infinity}'),
    ("1e400 timeout", lambda: '{"run_id": "@RUN@", "timeout": 1e400}'),
    ("-0.0 timeout", lambda: '{"run_id": "@RUN@", "timeout": -0.0}'),
    ("400-digit timeout", lambda: '{"run_id": "@RUN@", "timeout": ' + "9" * 400 + "}"),
    ("5000-digit timeout", lambda: '{"run_id": "@RUN@", "timeout": ' + "9" * 5000 + "}"),
    ("true timeout", lambda: '{"run_id": "@RUN@", "timeout": true}'),
    ("100k-deep run_id", lambda: '{"run_id": ' + "[" * 100_000 + "]" * 100_000 + "}"),
    (
        "65-deep extra",
        lambda: '{"run_id": "@RUN@", "extra": ' + "[" * 65 + "]" * 65 + "}",
    ),
    (
        "unclosed 100k-deep",
        lambda: '{"subagent": "echo", "task": ' + "[" * 100_000,
    ),
    (
        "8 MiB of small numbers",
        lambda: '{"subagent": "echo", "task": "t", "x": [' + "1," * (4 * 1024 * 1024 - 40) + "1]}",
    ),
    (
        "8 MiB of empty lists",
        lambda: '{"subagent": "echo", "task": "t", "x": [' + "[]," * 2_796_000 + "[]]}",
    ),
    (
        "a schema of 1M empty objects",
        lambda: (
            '{"subagent": "echo", "task": "t", "final_schema": {"enum": ['
            + "{}," * 1_000_000
            + "{}]}}"
        ),
    ),
    ("9 MiB task", lambda: json.dumps({"subagent": "echo", "task": "a" * (9 * 1024 * 1024)})),
    ("schema as text, not JSON", lambda: '{"subagent": "echo", "task": "t", "final_schema": "{"}'),
    (
        "schema as text, 65 deep",
        lambda: json.dumps(
            {"subagent": "echo", "task": "t", "final_schema": json.dumps(nested(65, "dict"))}
        ),
    ),
    (
        "schema as text, 100k deep",
        lambda: json.dumps(
            {"subagent": "echo", "task": "t", "final_schema": "[" * 100_000 + "]" * 100_000}
        ),
    ),
    (
        "schema as text, catastrophic pattern",
        lambda: json.dumps(
            {
                "subagent": "echo",
                "task": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab",
                "final_schema": json.dumps({"pattern": "^(a+)+$"}),
            }
        ),
    ),
    (
        "markup everywhere",
        lambda: json.dumps(
            {"subagent": "[/INST]", "task": "<script>\x1b[2J", "replaces": "[link=x]y[/link]"}
        ),
    ),
)
hostile_json_texts = st.sampled_from(
    [Built(f"<{recipe}>", make) for recipe, make in _HOSTILE_JSON_TEXTS]
)

#: Stands for a run id the session was told about, in drawn tool arguments.
RUN_REF: Final = "@RUN@"


def fill_run_refs(value: Any, run_id: str) -> Any:
    """*value* (arguments as a mapping or JSON text) with :data:`RUN_REF` replaced
    (in the text, or in the mapping's values)."""
    if type(value) is str:
        return value.replace(RUN_REF, run_id)
    if type(value) is dict:
        return {
            key: run_id if type(item) is str and item == RUN_REF else item
            for key, item in value.items()
        }
    return value


TOOL_NAMES: Final = (
    "delegate_task",
    "subagent_status",
    "wait_subagent",
    "cancel_subagent",
    "continue_subagent",
    "list_subagent_runs",
    "answer_subagent",
)


def tool_calls(subagents: tuple[str, ...]) -> st.SearchStrategy[tuple[Any, Any]]:
    """A tool call ``(name, arguments)``: mostly a known tool with arguments that
    are mostly acceptable (hostile inside), else anything at all; the
    arguments as a mapping or as JSON text, or hostile JSON text."""
    value = hostile_values()
    run_id = mostly(st.just(RUN_REF), value | hostile_text(3))
    text = mostly(accepted_text(), hostile_text() | value)
    schema = mostly(costly_schemas, malformed_schemas | value)
    background = mostly(st.booleans(), value)
    timeout = mostly(st.sampled_from([0, 0.5, 5, 1e300, -0.0]), hostile_numbers | value)
    parameters = {
        "delegate_task": st.fixed_dictionaries(
            {"subagent": mostly(st.sampled_from(subagents), value), "task": text},
            optional={"final_schema": schema, "background": background, "replaces": run_id},
        ),
        "subagent_status": st.fixed_dictionaries({"run_id": run_id}),
        "wait_subagent": st.fixed_dictionaries({"run_id": run_id}, optional={"timeout": timeout}),
        "cancel_subagent": st.fixed_dictionaries({"run_id": run_id}),
        "continue_subagent": st.fixed_dictionaries(
            {"run_id": run_id, "message": text},
            optional={"final_schema": schema, "background": background},
        ),
        "list_subagent_runs": st.fixed_dictionaries({}),
        "answer_subagent": st.fixed_dictionaries(
            {"run_id": run_id},
            optional={"answer": mostly(text, value), "question_id": value, "decline": background},
        ),
    }
    extra = st.dictionaries(hostile_text(2), value, min_size=1, max_size=2)
    names = hostile_text(2) | odd_objects | st.none()
    others = hostile_json_texts | value | st.none()

    @st.composite
    def call(draw: st.DrawFn) -> tuple[Any, Any]:
        tool = draw(st.sampled_from(TOOL_NAMES))
        arguments = draw(parameters[tool])
        if draw(st.integers(0, 7)) == 0:
            arguments.update(draw(extra))
        name = draw(mostly(st.just(tool), names))
        form = draw(st.sampled_from(["mapping", "mapping", "json", "json", "hostile"]))
        if form == "json":
            ascii_only = draw(st.booleans())
            return name, Built(
                f"json.dumps({arguments!r})", lambda: _dumps(arguments, ascii_only=ascii_only)
            )
        if form == "hostile":
            return name, draw(others)
        return name, arguments

    return call()


def _dumps(arguments: Mapping[str, Any], *, ascii_only: bool) -> str:
    """JSON text of drawn arguments, as a model would send it (if it can be written)."""
    made = build(arguments)
    try:
        return json.dumps(made, ensure_ascii=ascii_only, allow_nan=True)
    except Exception:  # odd objects: send what a model could have sent
        return json.dumps({str(key): type(item).__name__ for key, item in made.items()})


# -- objects whose dunder methods raise or return junk ---------------------------------


class Runaway(BaseException):
    """An endless iterable was read far past any bound the runtime keeps.

    A ``BaseException``: no ``except Exception`` of the runtime takes it for
    an ordinary failure of the object, so a read that never stops fails the
    test at once instead of holding it forever.
    """


#: How many items an endless iterable hands out before it raises Runaway.
RUNAWAY_ITEMS: Final = 100_000

#: The dunder methods a host's object may define to do anything (and
#: ``__class__``, which ``isinstance`` asks).
DUNDERS: Final = (
    "__str__",
    "__repr__",
    "__format__",
    "__eq__",
    "__ne__",
    "__hash__",
    "__len__",
    "__bool__",
    "__index__",
    "__int__",
    "__float__",
    "__iter__",
    "__next__",
    "__getitem__",
    "__contains__",
    "__lt__",
    "__class__",
)
#: What such a method does: raise, never end (``__iter__`` / ``__getitem__``
#: / ``__next__``), or return something of the wrong type or range.
BEHAVIOURS: Final = (
    "raise",
    "endless",
    "self",
    None,
    "junk",
    -1,
    HUGE,
    math.nan,
    b"x",
    ("a", "tuple"),
)
#: The types ``__class__`` may claim.
CLAIMED_CLASSES: Final = (str, int, float, bool, dict, list, tuple, type, td.Config, td.Subagent)
#: Builtin bases, each with a value that would be a good argument somewhere.
BASES: Final[tuple[tuple[type, Any], ...]] = (
    (object, None),
    (str, "echo"),
    (int, 3),
    (float, 0.5),
    (dict, {"type": "object"}),
    (list, ["echo"]),
    (tuple, ("echo",)),
)


def _endless(self: Any, *args: Any) -> Any:
    """An iterator that never ends (for ``__iter__``), or its next item (the
    others): items are counted, and the count is bounded by RUNAWAY_ITEMS."""
    return _Endless()


class _Endless:
    def __init__(self) -> None:
        self.count = 0

    def __iter__(self) -> _Endless:
        return self

    def __next__(self) -> str:
        self.count += 1
        if self.count > RUNAWAY_ITEMS:
            raise Runaway(f"an endless iterable was read for {RUNAWAY_ITEMS} items")
        return "echo"


def _method(dunder: str, behaviour: Any, claimed: type) -> Any:
    if dunder == "__class__":
        if behaviour == "raise":
            return property(raise_hostile)
        return property(lambda self: claimed)
    if behaviour == "raise":
        return raise_hostile
    if behaviour == "endless":
        if dunder == "__iter__":
            return _endless
        counter = _Endless()
        return lambda self, *args: next(counter)  # __getitem__ answers every index
    if behaviour == "self":
        return lambda self, *args: self
    return lambda self, *args: behaviour


@attrs.frozen
class DunderRecipe:
    """A class derived from *base* whose *dunders* do *behaviour*."""

    base: int
    dunders: tuple[str, ...]
    behaviour: Any
    claimed: int

    def __repr__(self) -> str:
        base = BASES[self.base][0].__name__
        claim = CLAIMED_CLASSES[self.claimed].__name__
        return f"<{base} whose {', '.join(self.dunders)} do {self.behaviour!r} (claims {claim})>"

    def make(self) -> Any:
        base, value = BASES[self.base]
        claimed = CLAIMED_CLASSES[self.claimed]
        namespace = {dunder: _method(dunder, self.behaviour, claimed) for dunder in self.dunders}
        cls = type(f"Hostile{base.__name__.title()}", (base,), namespace)
        return cls() if value is None else cls(value)


def dunder_object(base: int, dunders: tuple[str, ...], behaviour: Any, claimed: int) -> Built:
    """The :class:`DunderRecipe` of these, as a value made when the test needs it."""
    recipe = DunderRecipe(base, dunders, behaviour, claimed)
    return Built(repr(recipe), recipe.make)


def hostile_dunder_objects() -> st.SearchStrategy[Built]:
    """Objects of a host whose dunder methods raise, never end, or return junk."""
    return st.builds(
        dunder_object,
        st.integers(0, len(BASES) - 1),
        st.lists(st.sampled_from(DUNDERS), min_size=1, max_size=4, unique=True).map(tuple),
        st.sampled_from(BEHAVIOURS),
        st.integers(0, len(CLAIMED_CLASSES) - 1),
    )
