"""Structured results: final_schema as JSON Schema or as a host type (contract §11)."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Literal

import attrs
import jsonschema
import pytest
import trio
import trio.testing

import trio_delegate as td
from trio_delegate._schema import MAX_SCHEMA_BYTES, MAX_SCHEMA_DEPTH

VERDICT = {
    "type": "object",
    "properties": {
        "verdict": {"enum": ["pass", "fail"]},
        "score": {"type": "integer", "minimum": 0},
    },
    "required": ["verdict"],
    "additionalProperties": False,
}


class Severity(enum.Enum):
    LOW = "low"
    HIGH = "high"


@attrs.frozen
class Finding:
    title: str
    severity: Severity
    lines: list[int] = attrs.Factory(list)


@attrs.frozen
class Report:
    """A review report."""

    verdict: Literal["pass", "fail"]
    findings: list[Finding]
    summary: str | None = None
    scores: dict[str, float] = attrs.Factory(dict)
    span: tuple[int, int] = (0, 0)


@dataclasses.dataclass(frozen=True)
class Point:
    x: int
    y: int = 0
    label: str | int = "origin"


@attrs.frozen
class Tree:
    name: str
    children: list[Tree] = attrs.Factory(list)


def returning(value: Any) -> td.Subagent:
    async def runner(ctx: td.ChildContext) -> Any:
        await trio.sleep(1)
        return value

    return td.Subagent("worker", runner)


async def delegate(subagent: td.Subagent, final_schema: Any = None) -> td.RunResult:
    async with td.open_runtime([subagent]) as rt, rt.open_parent() as parent:
        return await parent.delegate("worker", "task", final_schema=final_schema)


async def test_result_satisfying_schema_completes(autojump_clock: trio.testing.MockClock) -> None:
    result = await delegate(returning({"verdict": "pass", "score": 3}), VERDICT)
    assert result.final_result == {"verdict": "pass", "score": 3}


async def test_result_violating_schema_fails_with_every_path(
    autojump_clock: trio.testing.MockClock,
) -> None:
    bad = {"verdict": "maybe", "score": -1, "extra": True}
    async with td.open_runtime([returning(bad)]) as rt, rt.open_parent() as parent:
        handle = await parent.start("worker", "t", final_schema=VERDICT)
        with pytest.raises(td.InvalidResultError) as info:
            await parent.wait(handle.run_id)
        assert parent.status(handle.run_id).status is td.RunStatus.FAILED
        with pytest.raises(td.RunFailedError):
            await parent.wait(handle.run_id)  # every time it is asked
        await parent.delegate("worker", "t", replaces=handle.run_id)
    message = str(info.value)
    assert "$.verdict: 'maybe' is not one of ['pass', 'fail']" in message
    assert "$.score: -1 is less than the minimum of 0" in message
    assert "Additional properties are not allowed ('extra' was unexpected)" in message
    assert isinstance(info.value.__cause__, ValueError)


async def test_context_carries_the_schema(autojump_clock: trio.testing.MockClock) -> None:
    seen: list[Any] = []

    async def runner(ctx: td.ChildContext) -> Any:
        seen.append(ctx.final_schema)
        await trio.lowlevel.checkpoint()
        return {"verdict": "fail"}

    await delegate(td.Subagent("worker", runner), VERDICT)
    assert seen == [VERDICT]


async def test_subagent_final_schema_is_the_default(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def runner(ctx: td.ChildContext) -> Any:
        await trio.lowlevel.checkpoint()
        return {"verdict": "maybe"}

    subagent = td.Subagent("worker", runner, final_schema=VERDICT)
    with pytest.raises(td.InvalidResultError):
        await delegate(subagent)
    # A call's own schema takes precedence over the default.
    result = await delegate(subagent, {"type": "object"})
    assert result.final_result == {"verdict": "maybe"}


@pytest.mark.parametrize(
    ("schema", "fragment"),
    [
        ({"type": "nonsense"}, "not a valid JSON Schema"),
        ({"properties": {"a": {"minimum": "zero"}}}, "not a valid JSON Schema"),
        ({"$ref": "https://example.com/schema.json"}, "only references inside the schema"),
        ({"$ref": "#/$defs/missing"}, "points at nothing"),
        ({"description": "x" * (MAX_SCHEMA_BYTES + 1)}, "bytes of JSON"),
        ({"default": float("nan")}, "not JSON"),
        ("{}", "must be a JSON Schema object"),
        (42, "must be a JSON Schema object"),
    ],
)
async def test_malformed_schema_is_refused_at_admission(schema: Any, fragment: str) -> None:
    async with td.open_runtime([returning(1)]) as rt, rt.open_parent() as parent:
        with pytest.raises(td.InvalidArgumentsError, match="final_schema") as info:
            await parent.start("worker", "t", final_schema=schema)
        assert fragment in str(info.value)
        assert rt.live_runs == 0


async def test_deeply_nested_schema_is_refused() -> None:
    schema: dict[str, Any] = {"type": "array"}
    for _ in range(MAX_SCHEMA_DEPTH):
        schema = {"type": "array", "items": schema}
    async with td.open_runtime([returning(1)]) as rt, rt.open_parent() as parent:
        with pytest.raises(td.InvalidArgumentsError, match="nests"):
            await parent.start("worker", "t", final_schema=schema)


def test_malformed_subagent_schema_fails_at_definition() -> None:
    with pytest.raises(td.InvalidArgumentsError, match=r"Subagent\.final_schema of 'worker'"):
        td.Subagent("worker", returning(1).runner, final_schema={"type": 5})


async def test_schema_is_checked_before_anything_runs() -> None:
    started: list[str] = []

    async def runner(ctx: td.ChildContext) -> Any:
        started.append(ctx.run_id)
        await trio.lowlevel.checkpoint()
        return 1

    async with td.open_runtime([td.Subagent("worker", runner)]) as rt, rt.open_parent() as p:
        with pytest.raises(td.InvalidArgumentsError):
            await p.delegate("worker", "t", final_schema={"type": "bogus"})
        await trio.testing.wait_all_tasks_blocked()
    assert started == []


# -- host types ---------------------------------------------------------------------


async def test_attrs_class_round_trip(autojump_clock: trio.testing.MockClock) -> None:
    raw = {
        "verdict": "fail",
        "findings": [{"title": "leak", "severity": "high", "lines": [3, 4]}],
        "scores": {"style": 0.5},
        "span": [1, 9],
    }
    result = await delegate(returning(raw), Report)
    assert result.final_result == Report(
        verdict="fail",
        findings=[Finding("leak", Severity.HIGH, [3, 4])],
        scores={"style": 0.5},
        span=(1, 9),
    )


async def test_runner_may_return_an_instance_of_the_type(
    autojump_clock: trio.testing.MockClock,
) -> None:
    point = Point(3, 4, 7)
    result = await delegate(returning(point), Point)
    assert result.final_result == point


async def test_dataclass_round_trip_with_defaults(autojump_clock: trio.testing.MockClock) -> None:
    result = await delegate(returning({"x": 1}), Point)
    assert result.final_result == Point(1)


async def test_type_violation_names_the_path(autojump_clock: trio.testing.MockClock) -> None:
    raw = {"verdict": "pass", "findings": [{"title": "t", "severity": "medium"}]}
    with pytest.raises(td.InvalidResultError) as info:
        await delegate(returning(raw), Report)
    assert "$.findings[0].severity: 'medium' is not one of ['low', 'high']" in str(info.value)


async def test_recursive_type_validates_through_defs(
    autojump_clock: trio.testing.MockClock,
) -> None:
    raw = {"name": "a", "children": [{"name": "b", "children": [{"name": "c"}]}]}
    result = await delegate(returning(raw), Tree)
    assert result.final_result == Tree("a", [Tree("b", [Tree("c")])])
    with pytest.raises(td.InvalidResultError, match=r"\$.children\[0\].children\[0\].name"):
        await delegate(returning({"name": "a", "children": [{"children": [{"name": 1}]}]}), Tree)


async def test_context_gets_the_derived_schema(autojump_clock: trio.testing.MockClock) -> None:
    seen: list[Any] = []

    async def runner(ctx: td.ChildContext) -> Any:
        seen.append(ctx.final_schema)
        await trio.lowlevel.checkpoint()
        return {"x": 1}

    await delegate(td.Subagent("worker", runner), Point)
    schema = seen[0]
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["required"] == ["x"]
    assert schema["properties"]["y"] == {"type": "integer", "default": 0}
    assert schema["properties"]["label"]["anyOf"] == [{"type": "string"}, {"type": "integer"}]


def test_derived_schema_covers_the_supported_types() -> None:
    from trio_delegate._typeschema import schema_for_type

    schema = schema_for_type(Report)
    props = schema["properties"]
    assert schema["title"] == "Report"
    assert schema["description"] == "A review report."
    assert schema["required"] == ["verdict", "findings"]
    assert schema["additionalProperties"] is False
    assert props["verdict"] == {"enum": ["pass", "fail"]}
    assert props["findings"] == {"type": "array", "items": {"$ref": "#/$defs/Finding"}}
    assert props["summary"] == {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}
    assert props["scores"] == {"type": "object", "additionalProperties": {"type": "number"}}
    assert props["span"]["prefixItems"] == [{"type": "integer"}, {"type": "integer"}]
    assert props["span"]["default"] == [0, 0]
    finding = schema["$defs"]["Finding"]
    assert finding["properties"]["severity"] == {"enum": ["low", "high"]}
    assert "default" not in finding["properties"]["lines"]  # a factory has no fixed default


def test_unsupported_field_type_is_refused_naming_the_field() -> None:
    @attrs.frozen
    class Bad:
        when: complex

    with pytest.raises(td.InvalidArgumentsError, match=r"Bad\.when"):
        td.Subagent("worker", returning(1).runner, final_schema=Bad)

    @attrs.frozen
    class BadKeys:
        table: dict[int, str]

    with pytest.raises(td.InvalidArgumentsError, match="str keys"):
        td.Subagent("worker", returning(1).runner, final_schema=BadKeys)
