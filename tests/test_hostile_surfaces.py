"""Regression tests: the surfaces that hostile values, schemas, stores and
processes reach (contract §5, §8, §11, §13, §15).

Each test is named after the rule it protects. Bounded work is judged by
what the code controls (calls counted, output size, the event loop thread's
CPU time), never by wall-clock time.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest
import trio

import trio_delegate as td

from .helpers import returning, sub

LENIENT = td.Config(fail_closed=False)


# -- 1. JSON checks and copies never call a value's own methods ---------------------


class _Calls:
    """Counts calls of a hostile container's own methods."""

    count = 0


class EndlessList(list[Any]):
    """A list whose own iteration never ends (and that grows while iterated)."""

    def __iter__(self) -> Iterator[Any]:
        while True:
            _Calls.count += 1
            self.append(1)
            yield 1

    def __len__(self) -> int:
        _Calls.count += 1
        return 10**9


class EndlessDict(dict[Any, Any]):
    """A dict whose own views never end."""

    def _endless(self) -> Iterator[Any]:
        while True:
            _Calls.count += 1
            yield 1

    def values(self) -> Any:
        return self._endless()

    def items(self) -> Any:
        return ((str(n), n) for n in self._endless())

    def keys(self) -> Any:
        return self._endless()

    def __iter__(self) -> Iterator[Any]:
        return self._endless()

    def __len__(self) -> int:
        _Calls.count += 1
        return 10**9


class EndlessTuple(tuple[Any, ...]):
    def __iter__(self) -> Iterator[Any]:
        while True:
            _Calls.count += 1
            yield 1


def _hostile_results() -> list[tuple[str, Any, Any]]:
    return [
        ("a list subclass", EndlessList([1, "a"]), [1, "a"]),
        ("a dict subclass", EndlessDict(a=1, b=[2]), {"a": 1, "b": [2]}),
        ("a tuple subclass", EndlessTuple((1, 2)), [1, 2]),
        ("nested", {"k": [EndlessList([EndlessDict(x=None)])]}, {"k": [[{"x": None}]]}),
        ("a large one", EndlessList(range(5000)), list(range(5000))),
    ]


@pytest.mark.parametrize(
    ("value", "expected"),
    [(value, expected) for _, value, expected in _hostile_results()],
    ids=[name for name, _, _ in _hostile_results()],
)
async def test_json_checks_read_builtin_containers_through_the_builtin_types(
    value: Any, expected: Any
) -> None:
    _Calls.count = 0
    async with (
        td.open_runtime([sub("odd", returning(value))], config=LENIENT) as rt,
        rt.open_parent() as parent,
    ):
        with trio.fail_after(30):  # a hang guard only: the work is judged by _Calls
            result = await parent.delegate("odd", "go")
            answer = await parent.tools().call("wait_subagent", {"run_id": result.run_id})
    assert result.final_result == expected
    assert answer["final_result"] == expected
    assert _Calls.count == 0, "a method of the value itself was called"


async def test_a_schema_given_as_a_dict_subclass_is_read_through_the_builtin_type() -> None:
    _Calls.count = 0
    schema = EndlessDict(type="object", properties=EndlessDict(a=EndlessDict(type="integer")))
    async with (
        td.open_runtime([sub("echo", returning({"a": 1}))], config=LENIENT) as rt,
        rt.open_parent() as parent,
    ):
        with trio.fail_after(30):
            result = await parent.delegate("echo", "go", final_schema=schema)
    assert result.final_result == {"a": 1}
    assert _Calls.count == 0


async def test_a_transcript_subclass_is_read_through_the_builtin_type() -> None:
    _Calls.count = 0

    async def runner(ctx: td.ChildContext) -> Any:
        return td.Output("done", transcript=EndlessList([{"role": "user", "content": "go"}]))

    async with (
        td.open_runtime([sub("talk", runner)], config=LENIENT) as rt,
        rt.open_parent() as parent,
    ):
        with trio.fail_after(30):
            first = await parent.delegate("talk", "go")
            assert first.final_result == "done"
    assert _Calls.count == 0


async def test_a_result_sharing_its_containers_is_bounded_by_max_result_bytes() -> None:
    # Sixty levels of [x, x]: 2**60 values to walk, and a few bytes to hold.
    value: Any = 0
    for _ in range(60):
        value = [value, value]
    async with (
        td.open_runtime([sub("dag", returning(value))], config=LENIENT) as rt,
        rt.open_parent() as parent,
    ):
        with trio.fail_after(30):
            with pytest.raises(td.RunFailedError, match="more than 500001 values"):
                await parent.delegate("dag", "go")


async def test_a_returned_coroutine_fails_the_run_and_is_closed() -> None:
    made: list[Any] = []

    async def inner() -> str:
        return "never"

    async def forgetful(ctx: td.ChildContext) -> Any:
        coroutine = inner()
        made.append(coroutine)
        return coroutine if ctx.task == "bare" else {"nested": [coroutine]}

    async with (
        td.open_runtime([sub("forgetful", forgetful)], config=LENIENT) as rt,
        rt.open_parent() as parent,
    ):
        for task in ("bare", "nested"):
            with pytest.raises(td.RunFailedError, match="without awaiting it"):
                await parent.delegate("forgetful", task)
    assert [coroutine.cr_frame for coroutine in made] == [None, None]
    # Closed: collecting it warns of nothing (warnings are errors in this suite).
    made.clear()
    gc.collect()


# -- 2. a final_schema's references point at schemas inside it --------------------


@pytest.mark.parametrize(
    ("schema", "says"),
    [
        ({"x": {"y": 5}, "$ref": "#/x/y"}, "points at 5"),
        ({"x": {"y": [1]}, "$ref": "#/x/y"}, "points at"),
        ({"x": {"y": "s"}, "$ref": "#/x/y"}, "points at"),
        ({"x": {"y": None}, "$ref": "#/x/y"}, "points at None"),
        ({"properties": {"type": {"type": "string"}}, "$ref": "#/properties"}, "not a valid"),
        ({"enum": [{"type": 7}], "$ref": "#/enum/0"}, "not a valid"),
        ({"$defs": {"a": {"$ref": "#/x/y"}}, "x": {"y": 5}, "$ref": "#/$defs/a"}, "points at 5"),
        ({"$defs": {"a": {"$id": "b", "$ref": "#/x"}}, "$ref": "#/$defs/a"}, "re-base"),
        (
            {
                "$defs": {"a": {"$id": "http://o.example/", "x": {}, "$ref": "#/x"}},
                "$ref": "#/$defs/a",
            },
            "re-base",
        ),
    ],
)
async def test_a_reference_to_something_that_is_not_a_schema_is_refused_at_admission(
    schema: dict[str, Any], says: str
) -> None:
    ran: list[str] = []

    async def runner(ctx: td.ChildContext) -> int:
        ran.append(ctx.task)
        return 1

    async with (
        td.open_runtime([sub("checked", runner)], config=LENIENT) as rt,
        rt.open_parent() as parent,
    ):
        with pytest.raises(td.InvalidArgumentsError, match=f"final_schema .*{says}"):
            await parent.delegate("checked", "t", final_schema=schema)
        with pytest.raises(td.InvalidArgumentsError, match=says):
            await parent.tools().call(
                "delegate_task", {"subagent": "checked", "task": "t", "final_schema": schema}
            )
    assert ran == [], "the runner ran for a schema that is refused"


async def test_a_percent_encoded_reference_is_resolved_as_the_validator_does() -> None:
    schema = {"$defs": {"a b": {"type": "integer"}}, "$ref": "#/$defs/a%20b"}
    async with (
        td.open_runtime([sub("one", returning(1))], config=LENIENT) as rt,
        rt.open_parent() as parent,
    ):
        assert (await parent.delegate("one", "t", final_schema=schema)).final_result == 1


# -- 4. Config.max_nesting_depth is bounded (contract §13, §15) -------------------


def _nested(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth - 1):
        value = [value]
    return [value] if depth else value


def test_max_nesting_depth_is_refused_past_what_can_be_walked() -> None:
    with pytest.raises(td.InvalidArgumentsError, match=r"max_nesting_depth .* from 1 to 200"):
        td.Config(max_nesting_depth=10**6)
    with pytest.raises(td.InvalidArgumentsError, match="max_nesting_depth"):
        td.Config(max_nesting_depth=201)
    assert td.Config(max_nesting_depth=200).max_nesting_depth == 200


async def test_the_deepest_nesting_allowed_is_walked_everywhere_without_recursion() -> None:
    limit = 200
    config = td.Config(fail_closed=False, max_nesting_depth=limit)
    deepest, deeper = _nested(limit), _nested(500)
    outputs = {"deepest": deepest, "deeper": deeper}

    async def runner(ctx: td.ChildContext) -> Any:
        value = outputs.get(ctx.task, "next")
        # The transcript's list and entry take two levels of the limit.
        entry = {"role": "user", "content": _nested(limit - 2)}
        return td.Output(value, transcript=[entry])

    unique = {"type": "array", "uniqueItems": True}
    async with (
        td.open_runtime([sub("deep", runner)], config=config) as rt,
        rt.open_parent() as parent,
    ):
        tools = parent.tools()
        result = await parent.delegate("deep", "deepest", final_schema=unique)
        assert result.final_result == deepest
        handle = await tools.call(
            "delegate_task", {"subagent": "deep", "task": "deepest", "background": True}
        )
        answer = await tools.call("wait_subagent", {"run_id": handle["run_id"]})
        assert answer["final_result"] == deepest
        carried = await parent.continue_run(result.run_id, "more")
        assert isinstance(carried, td.RunResult)
        assert carried.final_result == "next"
        # Deeper than allowed: the run fails, as a DelegationError, wherever it is read.
        with pytest.raises(td.RunFailedError, match="nests more than 200"):
            await parent.delegate("deep", "deeper")
        handle = await tools.call(
            "delegate_task", {"subagent": "deep", "task": "deeper", "background": True}
        )
        with pytest.raises(td.RunFailedError, match="nests more than 200"):
            await tools.call("wait_subagent", {"run_id": handle["run_id"]})


# -- 5. tools after the runtime closed (contract §8) --------------------------------


def _every_tools_call(tools: td.DelegationTools) -> dict[str, Any]:
    return {
        "names": lambda: tools.names,
        "definitions": tools.definitions,
        "openai_chat_tools": tools.openai_chat_tools,
        "openai_responses_tools": tools.openai_responses_tools,
        "anthropic_tools": tools.anthropic_tools,
    }


async def _all_raise_closed(tools: td.DelegationTools) -> None:
    for method in _every_tools_call(tools).values():
        with pytest.raises(td.RuntimeClosedError):
            method()
    with pytest.raises(td.RuntimeClosedError):
        await tools.call("subagent_status", {"run_id": "run_x"})
    with pytest.raises(td.RuntimeClosedError):
        await tools.call("no such tool", "not json")
    assert "DelegationTools" in repr(tools)


async def test_every_tools_method_raises_runtime_closed_after_close() -> None:
    async with td.open_runtime([sub("echo", returning("ok"))], config=LENIENT) as rt:
        async with rt.open_parent() as parent:
            tools = parent.tools()
            assert tools.definitions()
        await _all_raise_closed(tools)  # its parent closed
        async with rt.open_parent() as parent:
            tools = parent.tools()
    await _all_raise_closed(tools)  # its runtime closed


# -- 8. the testing kit answers in bounded time ----------------------------------


def test_advance_goes_on_past_a_task_that_never_blocks() -> None:
    import trio_delegate.testing as tdt

    steps = 0

    async def spinning(ctx: td.ChildContext) -> Any:
        nonlocal steps
        while True:
            steps += 1
            await trio.sleep(0)  # noqa: ASYNC115 - the loop as users write it

    async def main() -> None:
        spinner = td.Subagent("spin", spinning, timeout_seconds=5)
        async with (
            td.open_runtime([spinner], config=LENIENT) as rt,
            rt.open_parent() as parent,
        ):
            handle = await parent.start("spin", "go")
            await tdt.advance(10)
            assert trio.current_time() == 10
            # Its own deadline, at 5 s, was reached and ended it.
            assert parent.status(handle.run_id).status is td.RunStatus.TIMED_OUT
            with pytest.raises(td.RunTimedOutError):
                await parent.wait(handle.run_id)

    tdt.run(main, autojump=False)
    # Bounded work: a few settles' worth of the loop, not an endless one.
    assert 0 < steps < 100_000


def test_trio_thread_call_from_its_own_trio_thread_fails_at_once() -> None:
    import trio_delegate.testing as tdt

    # call_timeout is only a hang guard: the call must fail at once.
    with tdt.TrioThread(clock=tdt.mock_clock(), call_timeout=30) as host:
        inner: list[BaseException] = []

        async def reenter() -> None:
            try:
                host.call(trio.sleep, 0)
            except RuntimeError as exc:
                inner.append(exc)
            try:
                host.call_sync(trio.current_time)
            except RuntimeError as exc:
                inner.append(exc)

        host.call(reenter)
        assert len(inner) == 2
        assert all("own Trio run" in str(exc) for exc in inner)
        assert host.call_sync(trio.current_time) == 0
