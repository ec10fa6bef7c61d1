"""Regression tests: what models, runners and stores really send (contract §15).

Each test is named after the rule it protects and reproduces one way the
runtime used to hang, reorder, leak or lose something.
"""

from __future__ import annotations

import gc
import json
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

import trio_delegate as td
from trio_delegate._core._groups import open_transparent_nursery
from trio_delegate._json import CanonicalJson
from trio_delegate._schema import _checkable, compile_result_schema

from .helpers import (
    LoudDict,
    LoudInt,
    LoudList,
    LoudStr,
    StepTimer,
    Unreadable,
    forever,
    returning,
    slow_cleanup,
    sub,
    timed_steps,
)
from .stores import WrappedStore

LENIENT = td.Config(fail_closed=False)


def nested(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = [value]
    return value


@pytest.fixture(params=["none", "memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> td.ResultStore | None:
    if request.param == "memory":
        return td.MemoryStore()
    if request.param == "sqlite":
        return td.SQLiteStore(tmp_path / "runs.db")
    return None


# -- text that is not valid Unicode -----------------------------------------------


async def test_task_with_a_lone_surrogate_is_refused_at_admission(
    store: td.ResultStore | None,
) -> None:
    async with (
        td.open_runtime([sub("echo", returning("ok"))], store=store) as rt,
        rt.open_parent() as parent,
    ):
        tools = parent.tools()
        with trio.fail_after(10):
            with pytest.raises(td.InvalidArgumentsError, match="lone surrogate"):
                await tools.call("delegate_task", '{"subagent": "echo", "task": "a\\ud800b"}')
            with pytest.raises(td.InvalidArgumentsError, match="lone surrogate"):
                await parent.start("echo", "x\udfff")
            # Nothing was admitted, and the runtime goes on.
            assert rt.live_runs == 0
            assert (await parent.delegate("echo", "fine")).final_result == "ok"


def test_subagent_description_with_a_lone_surrogate_is_refused() -> None:
    # It goes into every tool definition: no model could be sent the tools.
    with pytest.raises(td.InvalidArgumentsError, match=r"description .*valid Unicode"):
        td.Subagent("echo", returning("ok"), description="finds \ud800 facts")


async def test_error_text_with_a_lone_surrogate_is_recorded_escaped(
    store: td.ResultStore | None,
) -> None:
    async def broken(ctx: td.ChildContext) -> Any:
        await trio.lowlevel.checkpoint()
        raise ValueError("bad \ud800 text")

    async with (
        td.open_runtime([sub("broken", broken)], store=store, config=LENIENT) as rt,
        rt.open_parent() as parent,
    ):
        with trio.fail_after(10):
            with pytest.raises(td.RunFailedError) as info:
                await parent.delegate("broken", "t")
    assert info.value.error_message == "bad \\ud800 text"
    json.dumps(info.value.to_payload()).encode("utf-8")  # valid Unicode throughout
    if store is not None:
        record = await store.get(info.value.run_id or "")
        assert record is not None
        assert record.error_message == "bad \\ud800 text"


async def test_transcript_with_a_lone_surrogate_fails_the_run_without_hanging(
    store: td.ResultStore | None,
) -> None:
    async def chatty(ctx: td.ChildContext) -> Any:
        await trio.lowlevel.checkpoint()
        return td.Output("done", transcript=[{"role": "user", "content": "\ud800"}])

    async with (
        td.open_runtime([sub("chatty", chatty)], store=store, config=LENIENT) as rt,
        rt.open_parent() as parent,
    ):
        with trio.fail_after(10):
            with pytest.raises(td.RunFailedError, match="lone surrogate"):
                await parent.delegate("chatty", "t")
            assert (await parent.start("chatty", "again")).status is not None


async def test_error_text_given_as_a_str_subclass_is_recorded_as_plain_text(
    store: td.ResultStore | None,
) -> None:
    class Odd(Exception):
        def __str__(self) -> str:
            return LoudStr("odd \ud800 text")

    Odd.__name__ = LoudStr("Odd")

    async def broken(ctx: td.ChildContext) -> Any:
        await trio.lowlevel.checkpoint()
        raise Odd

    async with (
        td.open_runtime([sub("broken", broken)], store=store, config=LENIENT) as rt,
        rt.open_parent() as parent,
    ):
        with trio.fail_after(10), pytest.raises(td.RunFailedError) as info:
            await parent.delegate("broken", "t")
    assert (info.value.error_type, info.value.error_message) == ("Odd", "odd \\ud800 text")
    assert type(info.value.error_message) is str
    json.dumps(info.value.to_payload()).encode("utf-8")
    if store is not None:
        record = await store.get(info.value.run_id or "")
        assert record is not None
        assert record.error_message == "odd \\ud800 text"


# -- values nested too deep ---------------------------------------------------------


@pytest.mark.parametrize("depth", [65, 400, 900, 100_000])
async def test_deeply_nested_result_fails_the_run_without_hanging(
    store: td.ResultStore | None, depth: int
) -> None:
    async with (
        td.open_runtime([sub("deep", returning(nested(depth)))], store=store, config=LENIENT) as rt,
        rt.open_parent() as parent,
    ):
        with trio.fail_after(10):
            with pytest.raises(td.RunFailedError, match="nests more than 64 levels"):
                await parent.delegate("deep", "t")


async def test_result_at_the_nesting_limit_completes() -> None:
    value = nested(63)  # 63 lists around a string: 63 levels
    async with td.open_runtime([sub("deep", returning(value))]) as rt, rt.open_parent() as p:
        assert (await p.delegate("deep", "t")).final_result == value


async def test_nesting_limit_is_configurable() -> None:
    config = td.Config(max_nesting_depth=3, fail_closed=False)
    async with (
        td.open_runtime([sub("deep", returning(nested(4)))], config=config) as rt,
        rt.open_parent() as parent,
    ):
        with pytest.raises(td.RunFailedError, match="more than 3 levels"):
            await parent.delegate("deep", "t")
        tools = parent.tools()
        with pytest.raises(td.InvalidArgumentsError, match="more than 3 levels"):
            await tools.call("subagent_status", {"run_id": "x", "extra": nested(5)})


async def test_deeply_nested_tool_arguments_are_invalid_arguments() -> None:
    async with td.open_runtime([sub("echo", returning(1))]) as rt, rt.open_parent() as parent:
        tools = parent.tools()
        deep_text = '{"run_id": ' + "[" * 100_000 + "]" * 100_000 + "}"
        # So many brackets are too many values before they are too deep.
        with pytest.raises(td.InvalidArgumentsError, match=r"nest|JSON values"):
            await tools.call("subagent_status", deep_text)
        with pytest.raises(td.InvalidArgumentsError, match="nest"):
            await tools.call("subagent_status", '{"run_id": ' + "[" * 5000 + "]" * 5000 + "}")
        with pytest.raises(td.InvalidArgumentsError, match="nest"):
            await tools.call("subagent_status", {"run_id": nested(100_000)})
        schema: Any = {"type": "object"}
        for _ in range(100_000):
            schema = {"not": schema}
        with pytest.raises(td.InvalidArgumentsError, match="nests more than"):
            await tools.call(
                "delegate_task", {"subagent": "echo", "task": "t", "final_schema": schema}
            )
        with pytest.raises(td.InvalidArgumentsError, match="nests more than"):
            await parent.delegate("echo", "t", final_schema=schema)


async def test_tool_arguments_are_bounded_in_values_before_they_are_decoded() -> None:
    # Eight megabytes of small values were decoded and walked on the event
    # loop before anything looked at them: seconds in one step.
    numbers = '{"subagent": "echo", "task": "t", "x": [' + "1," * 4_000_000 + "1]}"
    objects = (
        '{"subagent": "echo", "task": "t", "final_schema": {"enum": [' + "{}," * 1_000_000 + "{}]}}"
    )
    mapping = {"subagent": "echo", "task": "t", "x": list(range(1_000_000))}
    # Commas, brackets and escaped quotes inside a string are one value.
    long_task = json.dumps({"subagent": "echo", "task": 'a,[{"' * 20_000})
    async with (
        timed_steps() as timer,
        td.open_runtime([sub("echo", returning("ok"))]) as rt,
        rt.open_parent() as parent,
    ):
        tools = parent.tools()
        for arguments in (numbers, objects, mapping):
            with pytest.raises(td.InvalidArgumentsError, match="more than 40000"):
                await tools.call("delegate_task", arguments)
        assert rt.live_runs == 0
        answer = await tools.call("delegate_task", long_task)
        assert answer["final_result"] == "ok"
    timer.check()


async def test_a_huge_final_schema_is_refused_before_it_is_encoded() -> None:
    schema = {"enum": list(range(4_000_000))}
    async with (
        timed_steps() as timer,
        td.open_runtime([sub("echo", returning("ok"))]) as rt,
        rt.open_parent() as parent,
    ):
        with pytest.raises(td.InvalidArgumentsError, match="more than 32768 values"):
            await parent.start("echo", "t", final_schema=schema)
    timer.check()


# -- numbers that do not fit ----------------------------------------------------------


async def test_overflowing_numbers_are_invalid_arguments() -> None:
    async with (
        td.open_runtime([sub("idle", forever)], config=LENIENT) as rt,
        rt.open_parent() as parent,
    ):
        handle = await parent.start("idle", "t")
        tools = parent.tools()
        huge = "9" * 400
        for arguments in (
            f'{{"run_id": "{handle.run_id}", "timeout": {huge}}}',
            {"run_id": handle.run_id, "timeout": 10**400},
            f'{{"run_id": "{handle.run_id}", "timeout": 1e400}}',
        ):
            with pytest.raises(td.InvalidArgumentsError, match="timeout"):
                await tools.call("wait_subagent", arguments)
        with pytest.raises(td.InvalidArgumentsError, match="timeout"):
            await parent.wait(handle.run_id, timeout=10**400)
        five_thousand_digits = '{"run_id": "x", "timeout": ' + "9" * 5000 + "}"
        with pytest.raises(td.InvalidArgumentsError):
            await tools.call("wait_subagent", five_thousand_digits)
        parent.cancel(handle.run_id)
    with pytest.raises(td.InvalidArgumentsError, match="subagent_timeout_seconds"):
        td.Config(subagent_timeout_seconds=10**400)


async def test_result_with_an_integer_too_long_for_json_fails_the_run() -> None:
    async with (
        td.open_runtime([sub("big", returning([10**5000]))], config=LENIENT) as rt,
        rt.open_parent() as parent,
    ):
        with trio.fail_after(10), pytest.raises(td.RunFailedError, match="number JSON"):
            await parent.delegate("big", "t")


# -- model-supplied schemas cannot stall the event loop -----------------------------------


async def test_catastrophic_pattern_does_not_stall_the_event_loop() -> None:
    schema = {"type": "string", "pattern": "^(a+)+$"}
    timer = StepTimer()
    trio.lowlevel.add_instrument(timer)
    try:
        async with (
            td.open_runtime([sub("echo", returning("a" * 30 + "b"))], config=LENIENT) as rt,
            rt.open_parent() as parent,
        ):
            with trio.fail_after(10), pytest.raises(td.InvalidResultError, match="does not match"):
                await parent.delegate("echo", "t", final_schema=schema)
            long_match = "a" * 100_000
            async with (
                td.open_runtime([sub("long", returning(long_match))]) as rt2,
                rt2.open_parent() as p2,
            ):
                result = await p2.delegate("long", "t", final_schema=schema)
                assert result.final_result == long_match
    finally:
        trio.lowlevel.remove_instrument(timer)
    timer.check()


async def test_pattern_that_needs_backtracking_is_refused_at_admission() -> None:
    async with td.open_runtime([sub("echo", returning("x"))]) as rt, rt.open_parent() as parent:
        for pattern in ("(?=a)b", r"(a)\1", "(?<!x)y"):
            with pytest.raises(td.InvalidArgumentsError, match="linear time"):
                await parent.start("echo", "t", final_schema={"pattern": pattern})
        with pytest.raises(td.InvalidArgumentsError, match="linear time"):
            await parent.start("echo", "t", final_schema={"patternProperties": {"(?=k)": {}}})
        assert rt.live_runs == 0


async def test_unique_items_over_thousands_of_objects_does_not_stall_the_event_loop() -> None:
    # 5,000 objects: a quadratic check would hold the loop for seconds, while
    # handing the result back (decoded on the loop) stays well under the bound.
    items = [{"id": index, "tags": ["a", "b"], "n": index * 1.5} for index in range(5_000)]
    duplicated = [*items, {"tags": ["a", "b"], "id": 7, "n": 10.5}]
    schema = {"type": "array", "uniqueItems": True}
    timer = StepTimer()
    trio.lowlevel.add_instrument(timer)
    try:
        async with (
            td.open_runtime(
                [sub("unique", returning(items)), sub("dupes", returning(duplicated))],
                config=td.Config(fail_closed=False, max_result_bytes=10_000_000),
            ) as rt,
            rt.open_parent() as parent,
        ):
            with trio.fail_after(20):
                ok = await parent.delegate("unique", "t", final_schema=schema)
                assert len(ok.final_result) == 5_000
                with pytest.raises(td.InvalidResultError, match="non-unique"):
                    await parent.delegate("dupes", "t", final_schema=schema)
    finally:
        trio.lowlevel.remove_instrument(timer)
    timer.check()


async def test_checking_a_large_result_sets_off_no_garbage_collection() -> None:
    # Each pass of the garbage collector over the whole heap is one C call
    # holding the GIL: with uniqueItems over 60,000 nested lists, the keys
    # (nested tuples) and the decoded copy set off pass after pass, and held
    # every other thread (the event loop's too) for 150-490 ms at a time.
    # How many collections a check sets off is counted work, whatever the
    # machine's load; decoding the same result, outside a check, shows that
    # the count works.
    result = CanonicalJson.of([[[index], [str(index)]] for index in range(60_000)], max_depth=8)
    schema = compile_result_schema({"type": "array", "uniqueItems": True})
    main = threading.main_thread()
    collections = 0

    def count(phase: str, info: dict[str, int]) -> None:
        nonlocal collections
        if phase == "start" and threading.current_thread() is not main:
            collections += 1

    gc.callbacks.append(count)
    try:
        with trio.fail_after(60):
            await trio.to_thread.run_sync(_checkable, result)
            decoding, collections = collections, 0
            await schema.check(result)  # on a worker thread: the result is large
            checking = collections
    finally:
        gc.callbacks.remove(count)
    assert decoding > 100, f"decoding 180,000 lists set off {decoding} collections"
    assert checking < 5, f"checking set off {checking} collections"
    assert gc.isenabled()


async def test_unique_items_follows_json_equality() -> None:
    async with (
        td.open_runtime(
            [
                sub("a", returning([1, 1.0])),
                sub("b", returning([1, True])),
                sub("c", returning([])),
            ],
            config=LENIENT,
        ) as rt,
        rt.open_parent() as parent,
    ):
        schema = {"uniqueItems": True}
        with pytest.raises(td.InvalidResultError):
            await parent.delegate("a", "t", final_schema=schema)
        assert (await parent.delegate("b", "t", final_schema=schema)).final_result == [1, True]
        assert (await parent.delegate("c", "t", final_schema=schema)).final_result == []


async def test_exponential_schema_is_stopped_by_the_child_deadline() -> None:
    # Each level doubles the work: 2**40 evaluations would take days.
    defs: dict[str, Any] = {"l40": {"type": "integer"}}
    for level in range(39, -1, -1):
        ref = {"$ref": f"#/$defs/l{level + 1}"}
        defs[f"l{level}"] = {"anyOf": [{"allOf": [ref, {"minimum": 1}]}, ref]}
    schema = {"$defs": defs, "$ref": "#/$defs/l0"}
    timer = StepTimer()
    trio.lowlevel.add_instrument(timer)
    try:
        async with (
            td.open_runtime([sub("zero", returning(0), timeout_seconds=0.5)], config=LENIENT) as rt,
            rt.open_parent() as parent,
        ):
            with trio.fail_after(10), pytest.raises(td.RunTimedOutError):
                await parent.delegate("zero", "t", final_schema=schema)
    finally:
        trio.lowlevel.remove_instrument(timer)
    timer.check()


async def test_self_referencing_schema_fails_the_run_cleanly() -> None:
    async with (
        td.open_runtime([sub("one", returning(1))], config=LENIENT) as rt,
        rt.open_parent() as parent,
    ):
        with trio.fail_after(10), pytest.raises(td.InvalidResultError):
            await parent.delegate("one", "t", final_schema={"$ref": "#"})


async def test_schema_errors_about_a_large_result_stay_brief_and_within_the_deadline() -> None:
    # Each failing branch used to format the whole result into its message:
    # a thousand copies of 600 KB, seconds past a half-second deadline.
    big = list(range(100_000))
    schema = {"anyOf": [{"type": "string"}] * 1000}
    subagents = [sub("big", returning(big), timeout_seconds=0.5)]
    async with (
        timed_steps() as timer,
        td.open_runtime(subagents, config=LENIENT) as rt,
        rt.open_parent() as parent,
    ):
        # The CPU time of every thread of this process: what the check cost,
        # however long other processes kept it waiting.
        started = time.process_time()
        with trio.fail_after(30), pytest.raises((td.RunFailedError, td.RunTimedOutError)) as info:
            await parent.delegate("big", "t", final_schema=schema)
        took = time.process_time() - started
    assert took < 2.5, f"the check took {took:.1f} s of CPU time against a deadline of 0.5 s"
    assert len(str(info.value)) < 2000
    timer.check()


async def test_failed_schema_check_leaves_no_reference_cycles() -> None:
    # jsonschema links every error of every anyOf branch to its parent: tens
    # of thousands of cycles whose collection holds the interpreter (and so
    # the event loop) for a quarter of a second.
    schema = {
        "anyOf": [
            {"items": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
            {"type": "object"},
        ]
    }
    async with (
        td.open_runtime([sub("ints", returning([1] * 1000))], config=LENIENT) as rt,
        rt.open_parent() as parent,
    ):
        gc.collect()
        gc.disable()
        try:
            with pytest.raises(td.InvalidResultError):
                await parent.delegate("ints", "t", final_schema=schema)
            unreachable = gc.collect()
        finally:
            gc.enable()
    assert unreachable < 500, f"{unreachable} objects were left in reference cycles"


async def test_schema_check_at_admission_is_bounded() -> None:
    # Checking a model's schema against the meta-schema took 300 ms for a
    # 4 KB schema (dynamic references resolved per subschema), on the loop.
    accepted: dict[str, Any] = {"allOf": [{}] * 1000}
    too_costly = {"allOf": [{"minimum": 1}] * 4000}  # 60 KB
    async with (
        timed_steps() as timer,
        td.open_runtime([sub("one", returning(1))], config=LENIENT) as rt,
        rt.open_parent() as parent,
    ):
        result = await parent.delegate("one", "t", final_schema=accepted)
        assert result.final_result == 1
        with pytest.raises(td.InvalidArgumentsError, match="too large to check"):
            await parent.start("one", "t", final_schema=too_costly)
        assert rt.live_runs == 0
    timer.check()


# -- objects from a host whose own methods raise ---------------------------------------


async def _noop(ctx: td.ChildContext) -> Any:
    return None


def test_config_numbers_are_read_as_builtin_numbers() -> None:
    config = td.Config(max_concurrent_runs=LoudInt(3), subagent_timeout_seconds=LoudInt(5))
    assert type(config.max_concurrent_runs) is int
    assert config.max_concurrent_runs == 3
    assert type(config.subagent_timeout_seconds) is int
    with pytest.raises(td.InvalidArgumentsError, match="max_task_chars"):
        td.Config(max_task_chars=LoudInt(0))


def test_subagent_arguments_whose_methods_raise_are_invalid_arguments() -> None:
    with pytest.raises(td.InvalidArgumentsError, match="children"):
        td.Subagent("a", _noop, children=1j)  # type: ignore[arg-type]
    with pytest.raises(td.InvalidArgumentsError, match="children"):
        td.Subagent("a", _noop, children=LoudList(["b"]))
    with pytest.raises(td.InvalidArgumentsError, match="runner"):
        td.Subagent("a", Unreadable())  # type: ignore[arg-type]
    with pytest.raises(td.InvalidArgumentsError, match="name"):
        td.Subagent(LoudDict(), _noop)
    subagent = td.Subagent(LoudStr("a"), _noop, description=LoudStr("d"), children=[LoudStr("b")])
    assert (type(subagent.name), type(subagent.description)) == (str, str)
    assert [type(child) for child in subagent.children] == [str]


async def test_runtime_and_tool_arguments_whose_methods_raise() -> None:
    with pytest.raises(td.InvalidArgumentsError, match="subagents"):
        async with td.open_runtime(LoudList([sub("echo", returning("ok"))])):
            pass
    with pytest.raises(td.InvalidArgumentsError, match="store"):
        async with td.open_runtime([], store=Unreadable()):  # type: ignore[arg-type]
            pass
    async with td.open_runtime([sub("echo", returning("ok"))]) as rt:
        with pytest.raises(td.InvalidArgumentsError, match="subagents"):
            async with rt.open_parent("root", subagents=LoudList(["echo"])):
                pass
        with pytest.raises(td.InvalidArgumentsError, match=r"subagents .*the string"):
            async with rt.open_parent("root", subagents=LoudStr("echo")):
                pass
        async with rt.open_parent(LoudStr("root")) as parent:
            assert type(parent.owner) is str
            tools = parent.tools()
            with pytest.raises(td.UnknownRunError):
                await tools.call(LoudStr("subagent_status"), {"run_id": LoudStr("x")})
            with pytest.raises(td.InvalidArgumentsError, match="could not be read"):
                await tools.call("subagent_status", LoudDict(run_id="x"))
            # A dict subclass in a schema is read through dict's own methods,
            # none of its own: {"a": {}} it is.
            answer = await tools.call(
                "delegate_task",
                {"subagent": "echo", "task": "t", "final_schema": {"a": LoudDict()}},
            )
            assert answer["final_result"] == "ok"
            checked = await parent.delegate("echo", "t", final_schema={"a": LoudDict()})
            assert checked.final_result == "ok"
            handle = await parent.start("echo", "t")
            result = await parent.wait(handle.run_id, timeout=LoudInt(5))
            assert isinstance(result, td.RunResult)


async def test_parent_arguments_whose_methods_raise_are_read_as_plain_text() -> None:
    async def echo(ctx: td.ChildContext) -> str:
        await trio.lowlevel.checkpoint()
        assert type(ctx.task) is str
        return ctx.task

    subagents = [sub("echo", echo), sub("broken", returning(float("nan")))]
    async with td.open_runtime(subagents, config=LENIENT) as rt, rt.open_parent() as parent:
        result = await parent.delegate(LoudStr("echo"), LoudStr("a task"))
        assert result.final_result == "a task"
        assert result.task_summary == "a task"
        with pytest.raises(td.RunFailedError) as info:
            await parent.delegate("broken", "t")
        failed = info.value.run_id
        assert failed is not None
        again = await parent.delegate("echo", "again", replaces=LoudStr(failed))
        assert again.final_result == "again"
        parent.check_resolved()


# -- store interleavings ----------------------------------------------------------------


async def test_pending_runs_start_in_admission_order_with_a_store(
    store: td.ResultStore | None,
) -> None:
    started: list[str] = []

    async def record(ctx: td.ChildContext) -> str:
        started.append(ctx.task)
        await trio.sleep(0.01)
        return ctx.task

    config = td.Config(max_concurrent_runs=1)
    async with (
        td.open_runtime([sub("r", record)], store=store, config=config) as rt,
        rt.open_parent() as parent,
    ):
        handles: list[td.RunHandle] = []

        async def admit(task: str) -> None:
            handles.append(await parent.start("r", task))

        # Admitted one after another, in one scheduler tick each, by separate
        # tasks: their callers wake from the store's commit in any order.
        async with trio.open_nursery() as nursery:
            for index in range(40):
                nursery.start_soon(admit, f"t{index:02}")
                await trio.testing.wait_all_tasks_blocked()
        for handle in handles:
            await parent.wait(handle.run_id)
    assert started == sorted(started), started
    assert len(started) == 40


async def test_pending_cancel_is_immediate_with_a_store(store: td.ResultStore | None) -> None:
    config = td.Config(max_concurrent_runs=1, fail_closed=False)
    async with (
        td.open_runtime([sub("idle", forever)], store=store, config=config) as rt,
        rt.open_parent() as parent,
    ):
        first = await parent.start("idle", "first")
        second = await parent.start("idle", "second")
        assert second.status is td.RunStatus.PENDING
        ack = parent.cancel(second.run_id)
        assert ack == td.CancelAck(second.run_id, True, td.RunStatus.CANCELLED)
        assert parent.status(second.run_id).status is td.RunStatus.CANCELLED
        with pytest.raises(td.RunCancelledError):
            await parent.wait(second.run_id, timeout=0)
        parent.cancel(first.run_id)
    if store is not None:
        record = await store.get(second.run_id)
        assert record is not None
        assert record.status is td.RunStatus.CANCELLED


@attrs.frozen
class Finding:
    title: str
    tags: tuple[str, ...]


async def test_repeated_waits_return_equal_values_also_after_eviction(
    store: td.ResultStore | None,
) -> None:
    config = td.Config(retention_max_runs=1)
    subagents = [
        sub("tuple", returning((1, (2, 3)))),
        sub("typed", returning(Finding("x", ("a", "b"))), final_schema=Finding),
        sub("filler", returning(None)),
    ]
    async with (
        td.open_runtime(subagents, store=store, config=config) as rt,
        rt.open_parent() as parent,
    ):
        plain = await parent.start("tuple", "t")
        first_plain = await parent.wait(plain.run_id)
        assert first_plain == await parent.wait(plain.run_id)
        typed = await parent.start("typed", "t")
        first_typed = await parent.wait(typed.run_id)
        assert isinstance(first_typed, td.RunResult)
        assert first_typed.final_result == Finding("x", ("a", "b"))
        await parent.delegate("filler", "evicts the others")
        if store is None:
            with pytest.raises(td.ExpiredRunError):
                await parent.wait(plain.run_id)
            return
        assert await parent.wait(plain.run_id) == first_plain
        assert await parent.wait(typed.run_id) == first_typed
    assert isinstance(first_plain, td.RunResult)
    assert first_plain.final_result == [1, [2, 3]]  # held as JSON from settlement on


class GateStore(WrappedStore):
    """A memory store whose reads wait at a gate the test opens."""

    def __init__(self) -> None:
        super().__init__()
        self.gate: trio.Event | None = None
        self.reading = trio.Event()

    async def get(self, run_id: str) -> td.RunRecord | None:
        if self.gate is not None:
            self.reading.set()
            with trio.CancelScope(shield=True):
                await self.gate.wait()
        return await self.inner.get(run_id)


@pytest.mark.parametrize("closing", ["parent", "runtime"])
async def test_continue_run_in_flight_when_closing_leaves_no_run(closing: str) -> None:
    store = GateStore()
    config = td.Config(retention_max_runs=1, fail_closed=False)
    subagents = [sub("echo", returning("ok")), sub("idle", forever)]
    outcome: list[BaseException] = []
    async with trio.open_nursery() as outer:
        async with td.open_runtime(subagents, store=store, config=config) as rt:
            async with rt.open_parent("a") as parent:
                done = await parent.delegate("echo", "first")
                await parent.delegate("echo", "evicts the first")  # now only in the store
            leave = trio.Event()

            async def host(*, task_status: trio.TaskStatus[td.Parent]) -> None:
                async with rt.open_parent("a") as second:
                    task_status.started(second)
                    await leave.wait()

            second: td.Parent = await outer.start(host)

            async def carry_on() -> None:
                try:
                    await second.continue_run(done.run_id, "next")
                except td.DelegationError as exc:
                    outcome.append(exc)

            gate = store.gate = trio.Event()
            outer.start_soon(carry_on)
            await store.reading.wait()  # continue_run is reading the earlier run
            if closing == "parent":
                leave.set()
                await trio.testing.wait_all_tasks_blocked()  # the parent has closed
                gate.set()
                await trio.testing.wait_all_tasks_blocked()
        # Leaving the runtime's block closed it (for "runtime", while the read waited).
        gate.set()
        leave.set()
    [error] = outcome
    assert isinstance(error, td.RuntimeClosedError)
    assert "closed" in str(error)
    assert rt.live_runs == 0
    records = await store.inner.list_runs()
    assert [record.task for record in records] == ["evicts the first", "first"]


async def test_visibility_depends_only_on_the_owner(store: td.ResultStore | None) -> None:
    config = td.Config(retention_max_runs=2)
    subagents = [sub("echo", returning("ok"))]
    async with td.open_runtime(subagents, store=store, config=config) as rt:
        async with rt.open_parent("a") as first:
            kept = await first.delegate("echo", "kept")
        async with rt.open_parent("a") as again, rt.open_parent("b") as other:
            # Retained in memory: the owner sees it, another owner does not.
            assert again.status(kept.run_id).status is td.RunStatus.COMPLETED
            with pytest.raises(td.UnknownRunError) as info:
                other.status(kept.run_id)
            assert not isinstance(info.value, td.ExpiredRunError)
            for index in range(3):
                await other.delegate("echo", f"evict {index}")
            # Evicted: the same answers (from the store), or expired for the owner only.
            if store is None:
                with pytest.raises(td.ExpiredRunError):
                    again.status(kept.run_id)
            else:
                assert again.status(kept.run_id).status is td.RunStatus.COMPLETED
            with pytest.raises(td.UnknownRunError) as info:
                other.status(kept.run_id)
            assert not isinstance(info.value, td.ExpiredRunError)


# -- owners -----------------------------------------------------------------------


async def test_owners_with_a_slash_are_reserved_for_nested_parents() -> None:
    async with td.open_runtime([sub("idle", forever)]) as rt:
        with pytest.raises(td.InvalidArgumentsError, match="reserved"):
            async with rt.open_parent("p/run_0123"):
                pass


async def test_owner_stays_taken_until_its_runs_are_joined(
    autojump_clock: trio.testing.MockClock,
) -> None:
    opened_while_closing: list[BaseException | str] = []
    config = td.Config(fail_closed=False)
    async with td.open_runtime([sub("slow", slow_cleanup(5))], config=config) as rt:
        async with trio.open_nursery() as nursery:

            async def second_parent() -> None:
                await trio.sleep(1)  # the first is closing, its run cleaning up
                try:
                    async with rt.open_parent("a"):
                        opened_while_closing.append("opened")
                except td.InvalidArgumentsError as exc:
                    opened_while_closing.append(exc)

            async with rt.open_parent("a") as parent:
                await parent.start("slow", "t")
                nursery.start_soon(second_parent)
        async with rt.open_parent("a"):
            pass  # free again once the first has joined its runs
    [outcome] = opened_while_closing
    assert isinstance(outcome, td.InvalidArgumentsError)


# -- isolation --------------------------------------------------------------------


async def test_a_runner_changing_its_history_changes_nothing_else() -> None:
    seen: list[Any] = []

    async def meddler(ctx: td.ChildContext) -> Any:
        await trio.lowlevel.checkpoint()
        seen.append(json.loads(json.dumps(ctx.history)))
        for entry in ctx.history:
            entry["content"] = "tampered"
        if ctx.final_schema is not None:
            ctx.final_schema["type"] = "string"  # type: ignore[index]
        return {"answer": ctx.task}

    schema = {"type": "object", "required": ["answer"]}
    async with (
        td.open_runtime([sub("m", meddler, final_schema=schema)]) as rt,
        rt.open_parent() as parent,
    ):
        first = await parent.delegate("m", "q1")
        first.final_result["answer"] = "changed by the caller"
        again = await parent.wait(first.run_id)
        assert again.final_result == {"answer": "q1"}  # type: ignore[union-attr]
        await parent.continue_run(first.run_id, "q2")
        await parent.continue_run(first.run_id, "q3")
    assert (
        seen[1]
        == seen[2]
        == [
            {"role": "user", "content": "q1"},
            {"role": "assistant", "content": {"answer": "q1"}},
        ]
    )


async def test_continuing_a_large_conversation_does_not_stall_the_event_loop() -> None:
    # The earlier conversation was decoded, walked and encoded again on the
    # event loop, in the step of the continue_run call: 200 ms for a result of
    # a million short strings (4 MB of JSON).
    config = td.Config(fail_closed=False, max_result_bytes=8_000_000)
    big = ["ab"] * 1_000_000

    async def answer(ctx: td.ChildContext) -> Any:
        await trio.lowlevel.checkpoint()
        return big if not ctx.history else len(ctx.history)

    async with td.open_runtime([sub("big", answer)], config=config) as rt, rt.open_parent() as p:
        first = await p.delegate("big", "t")
        async with timed_steps(this_task_only=True) as timer:
            carried = await p.continue_run(first.run_id, "how long was it?")
    assert isinstance(carried, td.RunResult)
    assert carried.final_result == 2  # the task and the result
    # Against the work itself, on this thread now: decoding the conversation
    # and encoding it again, which the caller's step used to do (and more).
    # A fixed bound in seconds would miss it (0.2 s) or fail a busy machine.
    conversation = [{"role": "user", "content": "t"}, {"role": "assistant", "content": big}]
    started = time.thread_time()
    json.dumps(json.loads(json.dumps(conversation)))
    timer.check(limit=(time.thread_time() - started) / 2)


# -- how runs end -------------------------------------------------------------------


async def test_timed_out_run_is_recorded_with_its_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = td.MemoryStore()

    async def boss(ctx: td.ChildContext) -> Any:
        assert ctx.parent is not None
        await ctx.parent.start("idle", "inner")
        await trio.sleep_forever()

    subagents = [
        sub("boss", boss, children=("idle",), timeout_seconds=5),
        sub("idle", forever, timeout_seconds=5),
    ]
    async with (
        td.open_runtime(subagents, store=store, config=LENIENT) as rt,
        rt.open_parent() as parent,
    ):
        handle = await parent.start("boss", "t")
        with pytest.raises(td.RunTimedOutError):
            await parent.wait(handle.run_id)
    for record in await store.list_runs():
        assert record.status is td.RunStatus.TIMED_OUT, record
        assert record.error_message == "its deadline of 5 s passed", record


async def test_child_error_is_kept_when_the_body_raises_too() -> None:
    async def child() -> None:
        raise RuntimeError("child failed")

    async def body() -> None:
        async with open_transparent_nursery() as nursery:
            nursery.start_soon(child)
            await trio.testing.wait_all_tasks_blocked()
            raise ValueError("body failed")

    with pytest.raises(ValueError, match="body failed") as info:
        await body()
    chain = []
    exc: BaseException | None = info.value
    while exc is not None:
        chain.append(exc)
        exc = exc.__context__
    assert any(isinstance(e, RuntimeError) and str(e) == "child failed" for e in chain)
    assert any("child failed" in note for note in getattr(info.value, "__notes__", []))


# -- a store that fails in every way ----------------------------------------------------


class FaultyStore(WrappedStore):
    """A memory store whose writes fail as told, per run task or for everything."""

    def __init__(self) -> None:
        super().__init__()
        self.bad_tasks: set[str] = set()
        self.raise_for_bad: BaseException = UnicodeEncodeError("utf-8", "\ud800", 0, 1, "bad")
        self.writes = 0

    async def write(self, records: Sequence[td.RunRecord]) -> None:
        await trio.lowlevel.checkpoint()
        self.writes += 1
        if any(record.task in self.bad_tasks for record in records):
            raise self.raise_for_bad
        await self.inner.write(records)


@pytest.mark.parametrize(
    "error",
    [
        UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed"),
        RuntimeError("driver bug"),
        td.StoreError("disk full"),
    ],
    ids=["encoding", "runtime-error", "store-error"],
)
async def test_one_bad_record_fails_only_its_own_run(error: BaseException) -> None:
    store = FaultyStore()
    store.raise_for_bad = error
    go = trio.Event()

    async def echo(ctx: td.ChildContext) -> str:
        await go.wait()
        return "ok"

    config = td.Config(max_concurrent_runs=64, fail_closed=False)
    async with (
        td.open_runtime([sub("echo", echo)], store=store, config=config) as rt,
        rt.open_parent() as parent,
    ):
        handles = [await parent.start("echo", f"t{index}") for index in range(20)]
        store.bad_tasks.add("t7")  # its end record will not encode
        go.set()  # the twenty end records are written in one batch
        with trio.fail_after(10):
            outcomes: dict[str, Any] = {}
            for handle in handles:
                try:
                    outcomes[handle.run_id] = await parent.wait(handle.run_id)
                except td.RunFailedError as exc:
                    outcomes[handle.run_id] = exc
        failures = [value for value in outcomes.values() if isinstance(value, Exception)]
        assert len(failures) == 1
        assert isinstance(failures[0].__cause__, td.StoreError)
        # The writer lives on.
        assert (await parent.delegate("echo", "after")).final_result == "ok"
    stored = {record.task: record.status for record in await store.inner.list_runs(limit=100)}
    assert stored["t7"] is td.RunStatus.RUNNING  # its end could not be recorded
    assert all(status is td.RunStatus.COMPLETED for task, status in stored.items() if task != "t7")


async def test_a_writer_stopped_mid_batch_answers_every_waiter() -> None:
    store = FaultyStore()
    store.raise_for_bad = KeyboardInterrupt()
    config = td.Config(max_concurrent_runs=64, fail_closed=False)
    results: list[Any] = []

    async def session() -> None:
        async with (
            td.open_runtime([sub("idle", slow_cleanup(0))], store=store, config=config) as rt,
            rt.open_parent() as parent,
        ):
            handles = [await parent.start("idle", f"t{index}") for index in range(5)]
            store.bad_tasks.add("t2")

            async def waiter(run_id: str) -> None:
                try:
                    results.append(await parent.wait(run_id))
                except td.DelegationError as exc:
                    results.append(exc)

            async with trio.open_nursery() as nursery:
                for handle in handles:
                    nursery.start_soon(waiter, handle.run_id)
                await trio.testing.wait_all_tasks_blocked()
                for handle in handles:
                    parent.cancel(handle.run_id)

    with pytest.raises(KeyboardInterrupt):
        await session()
    # Every waiter was answered before the interrupt came out.
    assert len(results) == 5
    assert all(isinstance(result, td.DelegationError) for result in results)


async def test_unresolved_runs_are_listed_in_admission_order_with_a_store() -> None:
    store = td.MemoryStore()
    admitted: list[str] = []

    async def session(rt: td.Runtime) -> None:
        async with rt.open_parent() as parent, trio.open_nursery() as nursery:
            for index in range(6):
                nursery.start_soon(parent.start, "idle", f"t{index}")
            await trio.testing.wait_all_tasks_blocked()
            # The store lists them newest admission first.
            admitted.extend(record.run_id for record in reversed(await store.list_runs()))

    async with td.open_runtime([sub("idle", forever)], store=store) as rt:
        with pytest.raises(td.UnresolvedDelegationError) as info:
            await session(rt)
    assert [entry.run_id for entry in info.value.unresolved] == admitted


async def test_background_continuation_answers_with_its_admission_ack() -> None:
    async def eager(ctx: td.ChildContext) -> str:
        if ctx.history:
            raise RuntimeError("fails in its first step")
        await trio.lowlevel.checkpoint()
        return "first"

    async with (
        td.open_runtime([sub("eager", eager)], config=LENIENT) as rt,
        rt.open_parent() as parent,
    ):
        first = await parent.delegate("eager", "t")
        handle = await parent.continue_run(first.run_id, "again", background=True)
        assert isinstance(handle, td.RunHandle)
        assert handle.status is td.RunStatus.RUNNING  # an ack, not the outcome
        with pytest.raises(td.RunFailedError):
            await parent.wait(handle.run_id)


class HeldStore(WrappedStore):
    """A memory store whose end records wait for the test to let them through.

    Only this process uses it (``in_process``): a store other processes share
    holds a started run's every ending until its record is written
    (tests/test_leased_endings.py).
    """

    in_process = True

    def __init__(self) -> None:
        super().__init__()
        self.gate = trio.Event()

    async def write(self, records: Sequence[td.RunRecord]) -> None:
        if any(record.status.is_terminal for record in records):
            await self.gate.wait()
        await super().write(records)


async def test_only_a_result_waits_for_its_record(autojump_clock: trio.testing.MockClock) -> None:
    store = HeldStore()

    async def quick(ctx: td.ChildContext) -> str:
        await trio.sleep(1)
        return "kept"

    async with (
        td.open_runtime([sub("idle", forever), sub("quick", quick)], store=store) as rt,
        rt.open_parent() as parent,
    ):
        idle = await parent.start("idle", "t")
        parent.cancel(idle.run_id)
        # A cancellation is answered while its record is still on its way.
        with pytest.raises(td.RunCancelledError):
            await parent.wait(idle.run_id)
        store.gate.set()
        done = await parent.start("quick", "t")
        store.gate = trio.Event()
        # A result only once it is durable: until then the run reads running.
        answer = await parent.wait(done.run_id, timeout=5)
        assert answer == td.RunHandle(done.run_id, "quick", td.RunStatus.RUNNING)
        store.gate.set()
        assert (await parent.wait(done.run_id)).final_result == "kept"  # type: ignore[union-attr]
        replacement = await parent.start("quick", "again", replaces=idle.run_id)
        await parent.wait(replacement.run_id)


async def test_an_admission_ack_is_running_or_pending_even_if_the_run_already_ended() -> None:
    async def instant(ctx: td.ChildContext) -> str:
        raise RuntimeError("fails in its first step")

    async with (
        td.open_runtime([sub("instant", instant)], store=td.MemoryStore(), config=LENIENT) as rt,
        rt.open_parent() as parent,
    ):
        # The run starts when its admission commits and may end before its
        # caller wakes from that commit: the ack still says how it was admitted.
        for _ in range(20):
            handle = await parent.start("instant", "t")
            assert handle.status is td.RunStatus.RUNNING


async def test_a_record_the_store_names_fails_alone_without_splitting_the_batch() -> None:
    go = trio.Event()

    async def echo(ctx: td.ChildContext) -> str:
        await go.wait()
        return "ok"

    class Naming(FaultyStore):
        async def write(self, records: Sequence[td.RunRecord]) -> None:
            await trio.lowlevel.checkpoint()
            self.writes += 1
            for record in records:
                if record.task in self.bad_tasks:
                    raise td.StoreError("cannot encode it", run_id=record.run_id)
            await self.inner.write(records)

    store = Naming()
    config = td.Config(max_concurrent_runs=64, fail_closed=False)
    async with (
        td.open_runtime([sub("echo", echo)], store=store, config=config) as rt,
        rt.open_parent() as parent,
    ):
        handles = [await parent.start("echo", f"t{index}") for index in range(32)]
        await trio.testing.wait_all_tasks_blocked()
        store.bad_tasks.add("t7")
        before = store.writes
        go.set()
        failed = []
        for handle in handles:
            try:
                await parent.wait(handle.run_id)
            except td.RunFailedError:
                failed.append(handle.run_id)
        assert failed == [handles[7].run_id]
        # The batch of 32 ends: written once, then once more without t7.
        assert store.writes - before <= 3


async def test_a_slow_store_failure_fails_its_batch_at_once() -> None:
    class Unreachable(FaultyStore):
        down = False

        async def write(self, records: Sequence[td.RunRecord]) -> None:
            self.writes += 1
            if self.down:
                await trio.to_thread.run_sync(time.sleep, 0.6)  # a connect timeout
                raise td.StoreError("the server does not answer")
            await self.inner.write(records)

    store = Unreachable()
    go = trio.Event()

    async def echo(ctx: td.ChildContext) -> str:
        await go.wait()
        return "ok"

    config = td.Config(max_concurrent_runs=64, fail_closed=False)
    async with (
        td.open_runtime([sub("echo", echo)], store=store, config=config) as rt,
        rt.open_parent() as parent,
    ):
        handles = [await parent.start("echo", f"t{index}") for index in range(32)]
        await trio.testing.wait_all_tasks_blocked()
        store.down = True
        before = store.writes
        go.set()
        with trio.fail_after(10):
            for handle in handles:
                with pytest.raises(td.RunFailedError, match="does not answer"):
                    await parent.wait(handle.run_id)
        # One attempt for the batch, not one timeout per record.
        assert store.writes - before <= 2
        store.down = False


@pytest.mark.parametrize("name", ["\t\udf7c", "x" * 10_000])
async def test_an_unknown_subagent_error_payload_can_always_be_sent(name: str) -> None:
    # open_parent(subagents=...) and delegate(name) both name what was asked;
    # the payload carries it only when it can be encoded as it is.
    async with td.open_runtime([sub("echo", returning("ok"))]) as rt:
        with pytest.raises(td.UnknownSubagentError) as info:
            async with rt.open_parent("p", subagents=[name]):
                pass  # pragma: no cover
        errors = [info.value]
        async with rt.open_parent("q") as parent:
            with pytest.raises(td.UnknownSubagentError) as info:
                await parent.delegate(name, "t")
            errors.append(info.value)
    for error in errors:
        assert error.subagent is None
        json.dumps(error.to_payload(), ensure_ascii=False).encode("utf-8")
        assert len(str(error)) < 500
