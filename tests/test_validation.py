"""Input validation of every public entry point: the error class, and a message
that names the field."""

from __future__ import annotations

import math
from typing import Any

import pytest
import trio
import trio.testing

import trio_delegate as td
from tests.helpers import forever, open_parent, returning, sub

ok_runner = returning("v")


def sync_runner(ctx: td.ChildContext) -> str:
    return "not async"


class AsyncCallable:
    async def __call__(self, ctx: td.ChildContext) -> str:
        await trio.lowlevel.checkpoint()
        return "callable"


# -- Subagent -------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["", "Upper", "1abc", "_abc", "-abc", "a b", "a.b", "a" * 65, "é", None, 3, b"abc"],
)
def test_subagent_rejects_bad_names(name: Any) -> None:
    with pytest.raises(td.InvalidArgumentsError, match=r"Subagent\.name"):
        td.Subagent(name, ok_runner)


@pytest.mark.parametrize("name", ["a", "a" * 64, "web-search_2", "z9"])
def test_subagent_accepts_good_names(name: str) -> None:
    assert td.Subagent(name, ok_runner).name == name


@pytest.mark.parametrize(
    "runner",
    [sync_runner, None, "runner", lambda ctx: ok_runner(ctx)],
    ids=["sync", "none", "str", "lambda-returning-coroutine"],
)
def test_subagent_rejects_runners_that_are_not_async(runner: Any) -> None:
    with pytest.raises(td.InvalidArgumentsError, match=r"Subagent\.runner"):
        td.Subagent("child", runner)


async def test_subagent_accepts_an_async_callable_object(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_parent(td.Subagent("obj", AsyncCallable())) as parent:
        assert (await parent.delegate("obj", "t")).final_result == "callable"


@pytest.mark.parametrize("description", [None, 3, ["a"]])
def test_subagent_rejects_non_string_descriptions(description: Any) -> None:
    with pytest.raises(td.InvalidArgumentsError, match=r"Subagent\.description"):
        td.Subagent("child", ok_runner, description=description)


@pytest.mark.parametrize("timeout", [0, 0.0, -1, -0.5, math.nan, math.inf, True, False, "5", [5]])
def test_subagent_rejects_bad_timeouts(timeout: Any) -> None:
    with pytest.raises(td.InvalidArgumentsError, match=r"Subagent\.timeout_seconds"):
        td.Subagent("child", ok_runner, timeout_seconds=timeout)


@pytest.mark.parametrize("timeout", [td.INHERIT, None, 0.001, 5, 900.0])
def test_subagent_accepts_good_timeouts(timeout: Any) -> None:
    assert td.Subagent("child", ok_runner, timeout_seconds=timeout).timeout_seconds == timeout


@pytest.mark.parametrize("schema", ["string", 3, ["type"]])
def test_subagent_rejects_non_object_final_schema(schema: Any) -> None:
    with pytest.raises(td.InvalidArgumentsError, match=r"Subagent\.final_schema"):
        td.Subagent("child", ok_runner, final_schema=schema)


@pytest.mark.parametrize(
    "children",
    ["leaf", ("Leaf",), ("leaf", "leaf"), (3,), ("",)],
    ids=["bare-string", "bad-name", "duplicate", "not-a-string", "empty"],
)
def test_subagent_rejects_bad_children(children: Any) -> None:
    with pytest.raises(td.InvalidArgumentsError, match=r"Subagent\.children"):
        td.Subagent("child", ok_runner, children=children)


# -- Config ---------------------------------------------------------------------

INT_FIELDS = [
    "max_concurrent_runs",
    "max_live_runs",
    "max_depth",
    "retention_max_runs",
    "max_task_chars",
    "max_result_bytes",
]


@pytest.mark.parametrize("field", INT_FIELDS)
@pytest.mark.parametrize("value", [0, -1, True, 2.0, "4", None, math.nan])
def test_config_rejects_bad_integer_limits(field: str, value: Any) -> None:
    kwargs: dict[str, Any] = {field: value}
    with pytest.raises(td.InvalidArgumentsError, match=rf"Config\.{field}"):
        td.Config(**kwargs)


@pytest.mark.parametrize("field", INT_FIELDS)
def test_config_accepts_an_integer_limit_of_one(field: str) -> None:
    kwargs: dict[str, Any] = {field: 1}
    assert getattr(td.Config(**kwargs), field) == 1


@pytest.mark.parametrize("value", [0, -1, math.nan, math.inf, True, "900"])
def test_config_rejects_bad_subagent_timeout(value: Any) -> None:
    with pytest.raises(td.InvalidArgumentsError, match=r"Config\.subagent_timeout_seconds"):
        td.Config(subagent_timeout_seconds=value)


@pytest.mark.parametrize("value", [-1, -0.001, math.nan, math.inf, True, None, "10"])
def test_config_rejects_bad_retention_seconds(value: Any) -> None:
    with pytest.raises(td.InvalidArgumentsError, match=r"Config\.retention_seconds"):
        td.Config(retention_seconds=value)


def test_config_accepts_zero_retention_seconds() -> None:
    assert td.Config(retention_seconds=0).retention_seconds == 0


@pytest.mark.parametrize("value", [0, 1, "yes", None])
def test_config_rejects_non_bool_fail_closed(value: Any) -> None:
    with pytest.raises(td.InvalidArgumentsError, match=r"Config\.fail_closed"):
        td.Config(fail_closed=value)


def test_config_takes_keywords_only() -> None:
    with pytest.raises(TypeError):
        td.Config(900.0)  # type: ignore[call-arg]


# -- open_runtime ---------------------------------------------------------------


async def _open_runtime(subagents: Any, **kwargs: Any) -> None:
    async with td.open_runtime(subagents, **kwargs):
        pass  # pragma: no cover


@pytest.mark.parametrize(
    "subagents",
    [
        td.Subagent("a", ok_runner),
        "a",
        {"a": td.Subagent("a", ok_runner)},
        None,
        3,
    ],
    ids=["single-subagent", "string", "mapping", "none", "int"],
)
async def test_open_runtime_rejects_non_sequence_subagents(subagents: Any) -> None:
    with pytest.raises(td.InvalidArgumentsError, match="subagents"):
        await _open_runtime(subagents)


async def test_open_runtime_rejects_non_subagent_entries() -> None:
    with pytest.raises(td.InvalidArgumentsError, match=r"subagents\[1\]"):
        await _open_runtime([td.Subagent("a", ok_runner), "b"])


async def test_open_runtime_rejects_duplicate_names() -> None:
    with pytest.raises(td.InvalidArgumentsError, match=r"subagents\[1\].*'a'"):
        await _open_runtime([td.Subagent("a", ok_runner), td.Subagent("a", forever)])


async def test_open_runtime_rejects_unregistered_children() -> None:
    with pytest.raises(td.InvalidArgumentsError, match="'ghost'"):
        await _open_runtime([td.Subagent("a", ok_runner, children=("ghost",))])


@pytest.mark.parametrize("config", [{}, {"max_depth": 2}, "default", 3])
async def test_open_runtime_rejects_a_config_that_is_not_a_config(config: Any) -> None:
    with pytest.raises(td.InvalidArgumentsError, match="config"):
        await _open_runtime([], config=config)


@pytest.mark.parametrize("store", ["memory", 3, object()])
async def test_open_runtime_rejects_a_store_that_is_not_a_store(store: Any) -> None:
    with pytest.raises(td.InvalidArgumentsError, match="store"):
        await _open_runtime([], store=store)


async def test_open_runtime_accepts_an_empty_registry_and_a_generator() -> None:
    async with td.open_runtime(s for s in [td.Subagent("a", ok_runner)]) as rt:
        assert list(rt.subagents) == ["a"]
    async with td.open_runtime([]) as rt:
        assert list(rt.subagents) == []


# -- open_parent ----------------------------------------------------------------


@pytest.mark.parametrize("owner", ["", "   ", "a\nb", "x" * 257, None, 3, b"root"], ids=repr)
async def test_open_parent_rejects_bad_owners(owner: Any) -> None:
    async with td.open_runtime([td.Subagent("a", ok_runner)]) as rt:
        with pytest.raises(td.InvalidArgumentsError, match="owner"):
            async with rt.open_parent(owner):
                pass  # pragma: no cover


async def test_open_parent_rejects_an_owner_that_is_open_already() -> None:
    async with td.open_runtime([td.Subagent("a", ok_runner)]) as rt:
        async with rt.open_parent("alice"):
            with pytest.raises(td.InvalidArgumentsError, match="'alice'"):
                async with rt.open_parent("alice"):
                    pass  # pragma: no cover
            async with rt.open_parent("bob"):
                pass
        # Closed: the owner may be used again.
        async with rt.open_parent("alice"):
            pass


async def test_open_parent_rejects_unknown_or_repeated_subagents() -> None:
    async with td.open_runtime([td.Subagent("a", ok_runner)]) as rt:
        with pytest.raises(td.UnknownSubagentError, match="'ghost'") as info:
            async with rt.open_parent("p", subagents=["ghost"]):
                pass  # pragma: no cover
        assert info.value.allowed == ("a",)
        for bad in ("a", 3, [3], [None]):
            with pytest.raises(td.InvalidArgumentsError, match="subagents"):
                async with rt.open_parent("p", subagents=bad):  # type: ignore[arg-type]
                    pass  # pragma: no cover
        with pytest.raises(td.InvalidArgumentsError, match="'a'"):
            async with rt.open_parent("p", subagents=["a", "a"]):
                pass  # pragma: no cover


async def test_open_parent_subagents_limits_the_direct_children(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with td.open_runtime([sub("a", returning(1)), sub("b", returning(2))]) as rt:
        async with rt.open_parent("p", subagents=["b"]) as parent:
            assert parent.subagents == ("b",)
            with pytest.raises(td.UnknownSubagentError) as info:
                await parent.delegate("a", "t")
            assert info.value.allowed == ("b",)
            assert (await parent.delegate("b", "t")).final_result == 2
        async with rt.open_parent("q", subagents=[]) as empty:
            with pytest.raises(td.UnknownSubagentError):
                await empty.start("a", "t")
        async with rt.open_parent("r") as everyone:
            assert everyone.subagents == ("a", "b")


# -- delegate / start -----------------------------------------------------------


@pytest.mark.parametrize("method", ["start", "delegate"])
@pytest.mark.parametrize(
    ("kwargs", "error", "field"),
    [
        ({"name": "ghost"}, td.UnknownSubagentError, "ghost"),
        ({"name": 3}, td.InvalidArgumentsError, "name"),
        ({"name": None}, td.InvalidArgumentsError, "name"),
        ({"task": ""}, td.InvalidArgumentsError, "task"),
        ({"task": " \n\t"}, td.InvalidArgumentsError, "task"),
        ({"task": None}, td.InvalidArgumentsError, "task"),
        ({"task": b"bytes"}, td.InvalidArgumentsError, "task"),
        ({"task": 42}, td.InvalidArgumentsError, "task"),
        ({"final_schema": "string"}, td.InvalidArgumentsError, "final_schema"),
        ({"final_schema": ["type"]}, td.InvalidArgumentsError, "final_schema"),
        ({"replaces": 3}, td.InvalidArgumentsError, "replaces"),
        ({"replaces": "run_unknown"}, td.InvalidArgumentsError, "replaces"),
    ],
)
async def test_delegation_rejects_bad_arguments_and_starts_nothing(
    autojump_clock: trio.testing.MockClock,
    method: str,
    kwargs: dict[str, Any],
    error: type[td.DelegationError],
    field: str,
) -> None:
    calls: list[str] = []

    async def runner(ctx: td.ChildContext) -> str:
        calls.append(ctx.run_id)
        return "v"

    arguments: dict[str, Any] = {"name": "child", "task": "t", **kwargs}
    name = arguments.pop("name")
    task = arguments.pop("task")
    async with td.open_runtime([sub("child", runner)]) as rt, rt.open_parent() as parent:
        with pytest.raises(error, match=field):
            await getattr(parent, method)(name, task, **arguments)
        await trio.sleep(1)
        assert calls == []
        assert rt.live_runs == 0


# -- status / wait / cancel -----------------------------------------------------


@pytest.mark.parametrize("run_id", [None, 3, b"run_x", ["run_x"]])
async def test_lookups_reject_non_string_run_ids(
    autojump_clock: trio.testing.MockClock, run_id: Any
) -> None:
    async with open_parent(sub("ok", returning(1))) as parent:
        with pytest.raises(td.InvalidArgumentsError, match="run_id"):
            parent.status(run_id)
        with pytest.raises(td.InvalidArgumentsError, match="run_id"):
            parent.cancel(run_id)
        with pytest.raises(td.InvalidArgumentsError, match="run_id"):
            await parent.wait(run_id)


@pytest.mark.parametrize("timeout", [-1, -0.001, math.nan, True, False, "1", [1]])
async def test_wait_rejects_bad_timeouts(
    autojump_clock: trio.testing.MockClock, timeout: Any
) -> None:
    async with open_parent(sub("ok", returning(1))) as parent:
        handle = await parent.start("ok", "t")
        with pytest.raises(td.InvalidArgumentsError, match="timeout"):
            await parent.wait(handle.run_id, timeout=timeout)
        # A bad timeout is reported before the id is even looked up.
        with pytest.raises(td.InvalidArgumentsError, match="timeout"):
            await parent.wait("run_unknown", timeout=timeout)
        await parent.wait(handle.run_id)


@pytest.mark.parametrize("timeout", [0, 0.0, 1, 2.5])
async def test_wait_accepts_zero_and_positive_timeouts(
    autojump_clock: trio.testing.MockClock, timeout: float
) -> None:
    async with open_parent(sub("ok", returning(1))) as parent:
        handle = await parent.start("ok", "t")
        await trio.sleep(1)
        result = await parent.wait(handle.run_id, timeout=timeout)
        assert isinstance(result, td.RunResult)


def test_runtime_and_parent_have_no_public_constructor() -> None:
    with pytest.raises(TypeError):
        td.Runtime()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        td.Parent()  # type: ignore[call-arg]
