"""Model-facing delegation tools (contract §10)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import jsonschema
import pytest
import trio
import trio.testing

import trio_delegate as td

TOOL_NAMES = (
    "delegate_task",
    "subagent_status",
    "wait_subagent",
    "cancel_subagent",
    "continue_subagent",
    "list_subagent_runs",
)


async def echo(ctx: td.ChildContext) -> dict[str, Any]:
    await trio.sleep(1)
    return {"echo": ctx.task, "history": list(ctx.history)}


async def slow(ctx: td.ChildContext) -> str:
    await trio.sleep(100)
    return "late"


async def broken(ctx: td.ChildContext) -> str:
    await trio.sleep(1)
    raise ValueError("disk on fire")


SUBAGENTS = (
    td.Subagent("echo", echo, description="Repeats the task."),
    td.Subagent("slow", slow, description="Takes 100 s.", timeout_seconds=50),
    td.Subagent("broken", broken, description="Always fails."),
)


@asynccontextmanager
async def tools_for(
    subagents: tuple[str, ...] | None = None, **config: Any
) -> AsyncIterator[tuple[td.Parent, td.DelegationTools]]:
    async with tools_of_runtime(subagents, **config) as (_, parent, tools):
        yield parent, tools


@asynccontextmanager
async def tools_of_runtime(
    subagents: tuple[str, ...] | None = None, **config: Any
) -> AsyncIterator[tuple[td.Runtime, td.Parent, td.DelegationTools]]:
    async with (
        td.open_runtime(SUBAGENTS, config=td.Config(fail_closed=False, **config)) as rt,
        rt.open_parent("root", subagents=subagents) as parent,
    ):
        yield rt, parent, parent.tools()


# -- definitions ----------------------------------------------------------------


async def test_definitions_list_every_tool_with_closed_schemas() -> None:
    async with tools_for() as (_, tools):
        definitions = tools.definitions()
    assert tuple(d.name for d in definitions) == TOOL_NAMES
    for definition in definitions:
        jsonschema.Draft202012Validator.check_schema(definition.parameters)
        assert definition.parameters["type"] == "object"
        assert definition.parameters["additionalProperties"] is False
        assert definition.description


async def test_subagent_parameter_is_an_enum_of_direct_children_with_descriptions() -> None:
    async with tools_for(subagents=("echo", "broken")) as (_, tools):
        delegate = tools.definitions()[0]
    assert delegate.parameters["properties"]["subagent"]["enum"] == ["echo", "broken"]
    assert "echo: Repeats the task." in delegate.description
    assert "broken: Always fails." in delegate.description
    assert "slow" not in delegate.description


async def test_definitions_schema_required_fields_match_contract() -> None:
    async with tools_for() as (_, tools):
        by_name = {d.name: d.parameters for d in tools.definitions()}
    assert by_name["delegate_task"]["required"] == ["subagent", "task"]
    assert set(by_name["delegate_task"]["properties"]) == {
        "subagent",
        "task",
        "final_schema",
        "background",
        "replaces",
    }
    assert by_name["subagent_status"]["required"] == ["run_id"]
    assert by_name["wait_subagent"]["required"] == ["run_id"]
    assert by_name["wait_subagent"]["properties"]["timeout"]["minimum"] == 0
    assert by_name["cancel_subagent"]["required"] == ["run_id"]
    assert by_name["continue_subagent"]["required"] == ["run_id", "message"]


@pytest.mark.parametrize(
    "rule",
    [
        "acknowledgment, not a result",
        "exact run_id",
        "wait again later",
        "does not observe",
        "before you finish",
        "replaces=",
    ],
)
async def test_descriptions_teach_the_delegation_rules(rule: str) -> None:
    async with tools_for() as (_, tools):
        text = " ".join(d.description for d in tools.definitions())
    assert rule in text


async def test_arguments_valid_under_definitions_are_accepted_by_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with tools_for() as (_, tools):
        schema = tools.definitions()[0].parameters
        arguments = {"subagent": "echo", "task": "hi", "background": False}
        jsonschema.validate(arguments, schema)
        result = await tools.call("delegate_task", arguments)
    assert result["final_result"]["echo"] == "hi"


# -- the tools ----------------------------------------------------------------------


async def test_delegate_task_foreground_returns_completed_envelope(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with tools_for() as (parent, tools):
        result = await tools.call("delegate_task", {"subagent": "echo", "task": "  look   here "})
        assert set(result) == {"run_id", "subagent", "task_summary", "final_result"}
        assert result["subagent"] == "echo"
        assert result["task_summary"] == "look here"
        assert result["final_result"] == {"echo": "  look   here ", "history": []}
        assert parent.status(result["run_id"]).status is td.RunStatus.COMPLETED
        json.dumps(result)


async def test_delegate_task_background_returns_admission_handle(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with tools_for() as (_, tools):
        handle = await tools.call(
            "delegate_task", {"subagent": "echo", "task": "t", "background": True}
        )
        assert handle == {"run_id": handle["run_id"], "subagent": "echo", "status": "running"}
        done = await tools.call("wait_subagent", {"run_id": handle["run_id"]})
        assert done["final_result"]["echo"] == "t"


async def test_delegate_task_background_reports_pending_without_a_slot(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with tools_for(max_concurrent_runs=1) as (_, tools):
        await tools.call("delegate_task", {"subagent": "slow", "task": "a", "background": True})
        second = await tools.call(
            "delegate_task", {"subagent": "slow", "task": "b", "background": True}
        )
        assert second["status"] == "pending"


async def test_subagent_status_is_a_snapshot_that_does_not_observe(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with td.open_runtime(SUBAGENTS) as rt, rt.open_parent() as parent:
        tools = parent.tools()
        handle = await parent.start("echo", "t")
        snap = await tools.call("subagent_status", {"run_id": handle.run_id})
        assert snap == {"run_id": handle.run_id, "subagent": "echo", "status": "running"}
        await trio.sleep(5)
        snap = await tools.call("subagent_status", {"run_id": handle.run_id})
        assert snap["status"] == "completed"
        with pytest.raises(td.UnresolvedDelegationError):
            parent.check_resolved()
        await tools.call("wait_subagent", {"run_id": handle.run_id})
        parent.check_resolved()


async def test_wait_subagent_with_timeout_returns_running_handle(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with tools_for() as (parent, tools):
        handle = await parent.start("slow", "t")
        start = trio.current_time()
        answer = await tools.call("wait_subagent", {"run_id": handle.run_id, "timeout": 3})
        assert answer == {"run_id": handle.run_id, "subagent": "slow", "status": "running"}
        assert trio.current_time() - start == pytest.approx(3)
        poll = await tools.call("wait_subagent", {"run_id": handle.run_id, "timeout": 0})
        assert poll["status"] == "running"


async def test_wait_subagent_raises_for_failed_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with tools_for() as (parent, tools):
        handle = await parent.start("broken", "t")
        with pytest.raises(td.RunFailedError) as info:
            await tools.call("wait_subagent", {"run_id": handle.run_id})
    payload = info.value.to_payload()["error"]
    assert payload["type"] == "run_failed"
    assert payload["error_type"] == "ValueError"
    assert payload["error_message"] == "disk on fire"
    assert payload["run_id"] == handle.run_id
    assert payload["status"] == "failed"


async def test_cancel_subagent_returns_ack(autojump_clock: trio.testing.MockClock) -> None:
    async with tools_for() as (parent, tools):
        handle = await parent.start("slow", "t")
        ack = await tools.call("cancel_subagent", {"run_id": handle.run_id})
        assert ack == {"run_id": handle.run_id, "cancel_requested": True, "status": "running"}
        await trio.testing.wait_all_tasks_blocked()
        again = await tools.call("cancel_subagent", {"run_id": handle.run_id})
        assert again == {"run_id": handle.run_id, "cancel_requested": False, "status": "cancelled"}


async def test_continue_subagent_carries_the_conversation(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with tools_for() as (_, tools):
        first = await tools.call("delegate_task", {"subagent": "echo", "task": "one"})
        second = await tools.call(
            "continue_subagent", {"run_id": first["run_id"], "message": "two"}
        )
    assert second["run_id"] != first["run_id"]
    assert second["final_result"]["echo"] == "two"
    assert second["final_result"]["history"] == [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": first["final_result"]},
    ]


async def test_continue_subagent_in_background(autojump_clock: trio.testing.MockClock) -> None:
    async with tools_for() as (_, tools):
        first = await tools.call("delegate_task", {"subagent": "echo", "task": "one"})
        handle = await tools.call(
            "continue_subagent",
            {"run_id": first["run_id"], "message": "two", "background": True},
        )
        assert handle["status"] == "running"
        done = await tools.call("wait_subagent", {"run_id": handle["run_id"]})
        assert done["final_result"]["echo"] == "two"


async def test_arguments_may_be_a_json_string(autojump_clock: trio.testing.MockClock) -> None:
    async with tools_for() as (_, tools):
        result = await tools.call("delegate_task", '{"subagent": "echo", "task": "json"}')
    assert result["final_result"]["echo"] == "json"


async def test_null_optional_fields_count_as_absent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # What a strict-mode client sends for the optional fields it leaves out.
    async with tools_for() as (_, tools):
        result = await tools.call(
            "delegate_task",
            {
                "subagent": "echo",
                "task": "t",
                "final_schema": None,
                "background": None,
                "replaces": None,
            },
        )
    assert result["final_result"]["echo"] == "t"


async def test_final_schema_may_be_json_text(autojump_clock: trio.testing.MockClock) -> None:
    schema = {"type": "object", "required": ["nope"]}
    async with tools_for() as (_, tools):
        with pytest.raises(td.InvalidResultError, match=r"\$: 'nope' is a required property"):
            await tools.call(
                "delegate_task",
                {"subagent": "echo", "task": "t", "final_schema": json.dumps(schema)},
            )


async def test_replaces_through_the_tool_resolves_the_failed_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with (
        td.open_runtime(SUBAGENTS) as rt,
        rt.open_parent() as parent,
    ):
        tools = parent.tools()
        failed = await tools.call(
            "delegate_task", {"subagent": "broken", "task": "t", "background": True}
        )
        with pytest.raises(td.RunFailedError):
            await tools.call("wait_subagent", {"run_id": failed["run_id"]})
        with pytest.raises(td.UnresolvedDelegationError):
            parent.check_resolved()
        await tools.call(
            "delegate_task", {"subagent": "echo", "task": "t", "replaces": failed["run_id"]}
        )
        parent.check_resolved()


# -- bad arguments --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "arguments", "fragment"),
    [
        ("delegate_task", "{not json", "not valid JSON"),
        ("delegate_task", "[1, 2]", "must be a JSON object"),
        ("delegate_task", 42, "must be a JSON object"),
        ("delegate_task", {"task": "t"}, "subagent is required"),
        ("delegate_task", {"subagent": "echo"}, "task is required"),
        ("delegate_task", {"subagent": "echo", "task": "t", "extra": 1}, "'extra' is not a param"),
        ("delegate_task", {"subagent": 3, "task": "t"}, "subagent must be a string"),
        ("delegate_task", {"subagent": "echo", "task": ["t"]}, "task must be a string"),
        ("delegate_task", {"subagent": "echo", "task": "t", "background": "yes"}, "true or false"),
        ("delegate_task", {"subagent": "echo", "task": "t", "background": 1}, "true or false"),
        ("delegate_task", {"subagent": "echo", "task": "t", "final_schema": 5}, "JSON object"),
        ("delegate_task", {"subagent": "echo", "task": "t", "final_schema": "{x"}, "not JSON"),
        ("delegate_task", {"subagent": "echo", "task": "t", "replaces": 7}, "must be a string"),
        ("delegate_task", {"subagent": "echo", "task": "x" * 101}, "at most 100"),
        ("wait_subagent", {"run_id": "r", "timeout": -1}, "timeout must be a finite number"),
        ("wait_subagent", {"run_id": "r", "timeout": "5"}, "timeout must be a finite number"),
        ("wait_subagent", {"run_id": "r", "timeout": True}, "timeout must be a finite number"),
        ("wait_subagent", {"run_id": "r", "timeout": float("nan")}, "finite number"),
        ("wait_subagent", {}, "run_id is required"),
        ("subagent_status", {"run_id": "r" * 129}, "at most 128"),
        ("cancel_subagent", {"run_id": None}, "run_id is required"),
        ("continue_subagent", {"run_id": "r"}, "message is required"),
        ("no_such_tool", {}, "there is no tool 'no_such_tool'"),
    ],
)
async def test_bad_arguments_raise_invalid_arguments_naming_the_field(
    name: str, arguments: Any, fragment: str
) -> None:
    async with tools_of_runtime(max_task_chars=100) as (rt, _, tools):
        with pytest.raises(td.InvalidArgumentsError) as info:
            await tools.call(name, arguments)
        assert fragment in str(info.value)
        assert info.value.to_payload()["error"]["type"] == "invalid_arguments"
        # Nothing was started.
        assert rt.live_runs == 0


async def test_every_problem_is_named_at_once() -> None:
    async with tools_for() as (_, tools):
        with pytest.raises(td.InvalidArgumentsError) as info:
            await tools.call("delegate_task", {"background": "no", "zzz": 1})
    message = str(info.value)
    for fragment in ("'zzz'", "subagent is required", "task is required", "background must"):
        assert fragment in message


async def test_unknown_subagent_lists_the_allowed_names() -> None:
    async with tools_of_runtime(subagents=("echo", "slow")) as (rt, _, tools):
        with pytest.raises(td.UnknownSubagentError) as info:
            await tools.call("delegate_task", {"subagent": "broken", "task": "t"})
        assert info.value.allowed == ("echo", "slow")
        payload = info.value.to_payload()["error"]
        assert payload["type"] == "unknown_subagent"
        assert payload["allowed"] == ["echo", "slow"]
        assert rt.live_runs == 0


async def test_other_schema_violations_win_over_unknown_subagent() -> None:
    async with tools_for() as (_, tools):
        with pytest.raises(td.InvalidArgumentsError):
            await tools.call("delegate_task", {"subagent": "nobody", "task": 5})


async def test_arguments_are_validated_before_any_run_id_lookup() -> None:
    async with tools_for() as (_, tools):
        with pytest.raises(td.InvalidArgumentsError):
            await tools.call("wait_subagent", {"run_id": "run_unknown", "timeout": -5})
        with pytest.raises(td.UnknownRunError):
            await tools.call("wait_subagent", {"run_id": "run_unknown", "timeout": 5})


async def test_unknown_run_id_is_an_error_payload_not_an_empty_result() -> None:
    async with tools_for() as (_, tools):
        with pytest.raises(td.UnknownRunError) as info:
            await tools.call("subagent_status", {"run_id": "run_made_up"})
    assert info.value.to_payload() == {
        "error": {
            "type": "unknown_run",
            "message": info.value.message,
            "run_id": "run_made_up",
        }
    }


async def test_malformed_final_schema_is_refused_before_anything_starts() -> None:
    async with tools_of_runtime() as (rt, _, tools):
        with pytest.raises(td.InvalidArgumentsError, match="not a valid JSON Schema"):
            await tools.call(
                "delegate_task",
                {"subagent": "echo", "task": "t", "final_schema": {"type": "nonsense"}},
            )
        assert rt.live_runs == 0


async def test_tools_of_a_closed_parent_raise_runtime_closed() -> None:
    async with td.open_runtime(SUBAGENTS) as rt:
        async with rt.open_parent() as parent:
            tools = parent.tools()
        with pytest.raises(td.RuntimeClosedError):
            await tools.call("delegate_task", {"subagent": "echo", "task": "t"})
        with pytest.raises(td.RuntimeClosedError):
            parent.tools()


@pytest.mark.parametrize(
    "error",
    [
        td.InvalidArgumentsError("m"),
        td.UnknownRunError("m", run_id="r"),
        td.ExpiredRunError("m", run_id="r"),
        td.RunCancelledError("m", run_id="r", subagent="s", status="cancelled"),
        td.RunTimedOutError("m", run_id="r", subagent="s", status="timed_out"),
        td.LimitExceededError("m"),
        td.RuntimeClosedError("m"),
        td.UnresolvedDelegationError("m", unresolved=[td.UnresolvedRun("r", "s", "failed", "why")]),
        td.InvalidResultError("m", run_id="r", subagent="s", error_type="E", error_message="x"),
        td.UnknownSubagentError("m", subagent="s", allowed=["a"]),
    ],
)
def test_every_error_renders_a_json_payload(error: td.DelegationError) -> None:
    payload = error.to_payload()
    json.dumps(payload)
    body = payload["error"]
    assert body["type"] == error.kind()
    assert body["message"] == "m"
    for key in ("run_id", "subagent", "status"):
        value = getattr(error, key)
        assert body.get(key) == value


def test_error_kinds_are_snake_case() -> None:
    assert td.RunFailedError.kind() == "run_failed"
    assert td.UnresolvedDelegationError.kind() == "unresolved_delegation"
    assert td.RuntimeClosedError.kind() == "runtime_closed"
    assert td.InvalidResultError.kind() == "invalid_result"


async def test_delegation_tools_have_no_public_constructor() -> None:
    async with tools_for() as (parent, _):
        with pytest.raises(TypeError, match="no public constructor"):
            td.DelegationTools(parent, {})  # type: ignore[call-arg, arg-type]


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("subagent_status", {"run_id": "RUN"}),
        ("cancel_subagent", {"run_id": "RUN"}),
        ("wait_subagent", {"run_id": "RUN", "timeout": 0}),
        ("delegate_task", {"subagent": "echo", "task": "t", "background": True}),
    ],
)
async def test_every_tool_call_is_a_checkpoint(
    name: str, arguments: dict[str, Any], autojump_clock: trio.testing.MockClock
) -> None:
    async with tools_for() as (parent, tools):
        handle = await parent.start("slow", "t")
        filled = {k: handle.run_id if v == "RUN" else v for k, v in arguments.items()}
        with trio.testing.assert_checkpoints():
            await tools.call(name, filled)


async def test_a_cancelled_caller_is_refused_before_the_tool_runs() -> None:
    async with tools_of_runtime() as (rt, _, tools):
        with trio.CancelScope() as scope:
            scope.cancel()
            await tools.call("delegate_task", {"subagent": "echo", "task": "t"})
        assert scope.cancelled_caught
        assert rt.live_runs == 0
