"""trio_delegate.testing: scripted runners, virtual time, the Trio thread, the model."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
import trio
import trio.testing

import trio_delegate as td
import trio_delegate.testing as tdt
from trio_delegate.testing import Answer, LifecycleModel

S = td.RunStatus


def scripted(
    trace: tdt.Trace, *scripts: tuple[str, tdt.Script], name: str = "worker", **kwargs: Any
) -> td.Subagent:
    runner = tdt.ScriptedRunner(trace=trace)
    runner.assign_many(dict(scripts))
    return td.Subagent(name, runner, **kwargs)


def events(trace: tdt.Trace, label: str) -> list[tuple[float, str, str]]:
    return [(e.time, e.kind, e.detail) for e in trace.for_label(label)]


# -- scripts ------------------------------------------------------------------------


def test_a_final_step_must_come_last() -> None:
    with pytest.raises(ValueError, match="could never run"):
        tdt.Script.of(tdt.Return(1), tdt.Sleep(1))
    with pytest.raises(ValueError, match="could never run"):
        tdt.Script.of(tdt.Hang(), tdt.Checkpoint())


@pytest.mark.parametrize("seconds", [-1, math.inf, math.nan])
def test_durations_must_be_finite_and_not_negative(seconds: float) -> None:
    with pytest.raises((ValueError, TypeError)):
        tdt.Sleep(seconds)
    with pytest.raises((ValueError, TypeError)):
        tdt.Script.of(tdt.Return(), cleanup=seconds)


def test_raise_takes_an_exception_class() -> None:
    with pytest.raises(TypeError):
        tdt.Raise(ValueError("an instance"))  # type: ignore[arg-type]


def test_scripts_are_looked_up_by_task_then_default() -> None:
    default = tdt.Script.of(tdt.Return("default"))
    special = tdt.Script.of(tdt.Return("special"))
    runner = tdt.ScriptedRunner(default)
    runner.assign("special", special)
    assert runner.script_for("special") is special
    assert runner.script_for("anything else") is default
    with pytest.raises(LookupError, match="no script"):
        tdt.ScriptedRunner().script_for("x")


# -- scripted runners on a runtime ----------------------------------------------------


async def test_steps_play_on_the_trio_clock_and_are_traced(
    autojump_clock: trio.testing.MockClock,
) -> None:
    trace = tdt.Trace()
    worker = scripted(
        trace, ("t", tdt.Script.of(tdt.Sleep(3), tdt.Checkpoint(), tdt.Sleep(2), tdt.Return(7)))
    )
    start = trio.current_time()
    async with td.open_runtime([worker]) as rt, rt.open_parent() as parent:
        result = await parent.delegate("worker", "t")
    assert result.final_result == 7
    assert [(t - start, kind, detail) for t, kind, detail in events(trace, "t")] == [
        (0, "start", "worker"),
        (0, "step", "0 sleep 3"),
        (3, "step", "1 checkpoint"),
        (3, "step", "2 sleep 2"),
        (5, "step", "3 return 7"),
        (5, "finally", "returned"),
    ]


async def test_a_raising_script_fails_the_run_with_its_exception(
    autojump_clock: trio.testing.MockClock,
) -> None:
    trace = tdt.Trace()
    worker = scripted(trace, ("t", tdt.Script.of(tdt.Sleep(1), tdt.Raise(KeyError, "gone"))))
    config = td.Config(fail_closed=False)
    async with td.open_runtime([worker], config=config) as rt, rt.open_parent() as parent:
        with pytest.raises(td.RunFailedError) as failed:
            await parent.delegate("worker", "t")
    assert failed.value.error_type == "KeyError"
    assert isinstance(failed.value.__cause__, KeyError)
    assert events(trace, "t")[-1][1:] == ("finally", "raised KeyError")


async def test_hang_ends_only_at_the_deadline(autojump_clock: trio.testing.MockClock) -> None:
    trace = tdt.Trace()
    worker = scripted(trace, ("t", tdt.Script.of(tdt.Hang())), timeout_seconds=4.0)
    config = td.Config(fail_closed=False)
    async with td.open_runtime([worker], config=config) as rt, rt.open_parent() as parent:
        start = trio.current_time()
        with pytest.raises(td.RunTimedOutError):
            await parent.delegate("worker", "t")
        assert trio.current_time() - start == 4
    assert [kind for _, kind, _ in events(trace, "t")] == ["start", "step", "cancelled", "finally"]


def test_shielded_steps_and_cleanup_keep_the_run_running() -> None:
    async def main() -> None:
        trace = tdt.Trace()
        worker = scripted(trace, ("t", tdt.Script.of(tdt.Shielded(5), tdt.Hang(), cleanup=3)))
        config = td.Config(fail_closed=False)
        async with td.open_runtime([worker], config=config) as rt, rt.open_parent() as parent:
            handle = await parent.start("worker", "t")
            await tdt.advance(1)
            assert parent.cancel(handle.run_id).status is S.RUNNING
            await tdt.advance(3.5)  # still shielded (ends at 5)
            assert parent.status(handle.run_id).status is S.RUNNING
            await tdt.advance(1)  # at 5.5: cancelled at step 1, cleaning up until 8
            assert parent.status(handle.run_id).status is S.RUNNING
            await tdt.advance(2.5)
            assert parent.status(handle.run_id).status is S.CANCELLED
        assert [(t, kind) for t, kind, _ in events(trace, "t")] == [
            (0, "start"),
            (0, "step"),
            (5, "step"),
            (5, "cancelled"),
            (5, "cleanup"),
            (8, "finally"),
        ]

    tdt.run(main, autojump=False)


async def test_nested_steps_start_delegate_and_wait(autojump_clock: trio.testing.MockClock) -> None:
    trace = tdt.Trace()
    leaf = tdt.ScriptedRunner(trace=trace)
    leaf.assign("a", tdt.Script.of(tdt.Sleep(2), tdt.Return("A")))
    leaf.assign("b", tdt.Script.of(tdt.Sleep(1), tdt.Return("B")))
    boss = tdt.ScriptedRunner(trace=trace)
    boss.assign(
        "job",
        tdt.Script.of(
            tdt.Start("leaf", "a"), tdt.Delegate("leaf", "b"), tdt.WaitStarted(), tdt.Return("ok")
        ),
    )
    subagents = [td.Subagent("leaf", leaf), td.Subagent("boss", boss, children=("leaf",))]
    async with td.open_runtime(subagents) as rt, rt.open_parent(subagents=["boss"]) as parent:
        result = await parent.delegate("boss", "job")
    assert result.final_result == "ok"
    assert events(trace, "job")[-1] == (2, "finally", "returned")
    assert events(trace, "a")[-1] == (2, "finally", "returned")


async def test_nested_steps_need_declared_children(autojump_clock: trio.testing.MockClock) -> None:
    trace = tdt.Trace()
    worker = scripted(trace, ("t", tdt.Script.of(tdt.Start("worker", "u"))))
    config = td.Config(fail_closed=False)
    async with td.open_runtime([worker], config=config) as rt, rt.open_parent() as parent:
        with pytest.raises(td.RunFailedError) as failed:
            await parent.delegate("worker", "t")
    assert failed.value.error_type == "RuntimeError"
    assert "declare the children" in failed.value.error_message


async def test_a_task_without_script_fails_the_run(autojump_clock: trio.testing.MockClock) -> None:
    worker = td.Subagent("worker", tdt.ScriptedRunner())
    config = td.Config(fail_closed=False)
    async with td.open_runtime([worker], config=config) as rt, rt.open_parent() as parent:
        with pytest.raises(td.RunFailedError, match="LookupError"):
            await parent.delegate("worker", "unknown task")


# -- traces ---------------------------------------------------------------------------


def test_trace_labels_runs_by_name_then_task() -> None:
    trace = tdt.Trace()
    trace.record("run_a", "start", task="write", time=0)
    trace.record("run_b", "start", task="review", time=0)
    trace.record("run_c", "start", task="review", time=0)
    trace.record("run_d", "note", time=0)
    trace.record("run_e", "start", task="x", time=0)
    trace.name("run_e", "named")
    trace.record(None, "driver", "hello", time=0.5)
    assert trace.labels() == {
        "run_a": "write",
        "run_b": "review#0",
        "run_c": "review#1",
        "run_d": "#0",
        "run_e": "named",
    }
    lines = trace.lines()
    assert "0.500 - driver hello" in lines
    assert not any(re.search(r"run_[a-e]", line) for line in lines)


def test_canonical_lines_order_by_time_then_label_keeping_each_runs_order() -> None:
    trace = tdt.Trace()
    trace.record("b", "one", time=1.0, task="b")
    trace.record("a", "two", time=1.0, task="a")
    trace.record("b", "three", time=1.0)
    trace.record("a", "zero", time=0.0)
    assert trace.lines() == ["0.000 a zero", "1.000 a two", "1.000 b one", "1.000 b three"]
    assert trace.lines(canonical=False)[0] == "1.000 b one"
    assert len(trace.digest()) == 64
    assert trace.digest() != tdt.Trace().digest()


# -- virtual time ---------------------------------------------------------------------


def test_advance_reaches_every_deadline_on_the_way() -> None:
    async def main() -> list[float]:
        woke: list[float] = []

        async def sleeper(seconds: float) -> None:
            await trio.sleep(seconds)
            woke.append(trio.current_time())

        async with trio.open_nursery() as nursery:
            for seconds in (7, 3, 12):
                nursery.start_soon(sleeper, seconds)
            await tdt.advance(10)
            assert trio.current_time() == 10
            assert woke == [3, 7]
            assert await tdt.jump_to_next_deadline()
            assert trio.current_time() == 12
            assert not await tdt.jump_to_next_deadline()
        return woke

    assert tdt.run(main, autojump=False) == [3, 7, 12]


def test_advance_until_idle_and_its_limit() -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.sleep, 30)
            assert await tdt.advance_until_idle() == 30

            async def ticking() -> None:
                # A periodic task: there is always a next deadline.
                while True:  # noqa: ASYNC110
                    await trio.sleep(1)

            nursery.start_soon(ticking)
            with pytest.raises(TimeoutError):
                await tdt.advance_until_idle(limit=5)
            nursery.cancel_scope.cancel()

    tdt.run(main, autojump=False)


def test_advance_refuses_to_go_back() -> None:
    async def main() -> None:
        with pytest.raises(ValueError, match=">= 0"):
            await tdt.advance(-1)

    tdt.run(main)


async def test_clock_helpers_need_a_mock_clock() -> None:
    with pytest.raises(TypeError, match="MockClock"):
        tdt.current_mock_clock()


def test_drive_jumps_the_clock_only_while_the_call_blocks() -> None:
    async def main() -> None:
        worker = scripted(tdt.Trace(), ("t", tdt.Script.of(tdt.Sleep(42), tdt.Return(1))))
        async with td.open_runtime([worker]) as rt, rt.open_parent() as parent:
            result = await tdt.drive(parent.delegate, "worker", "t")
            assert result.final_result == 1
            assert trio.current_time() == 42
            assert tdt.current_mock_clock().autojump_threshold == math.inf
            with pytest.raises(TimeoutError, match="still blocked"):
                await tdt.drive(trio.sleep_forever, limit=100)
            assert trio.current_time() == 142

    tdt.run(main, autojump=False)


# -- the Trio thread ------------------------------------------------------------------


def test_trio_thread_runs_every_call_in_one_task_and_leaves_blocks_in_any_order() -> None:
    worker = scripted(tdt.Trace(), ("t", tdt.Script.of(tdt.Sleep(5), tdt.Return("x"))))
    with tdt.TrioThread(clock=tdt.mock_clock()) as host:
        runtime = host.enter(td.open_runtime([worker], config=td.Config(fail_closed=False)))
        parent = host.enter(runtime.value.open_parent("p"))
        handle = host.call(parent.value.start, "worker", "t")
        assert host.call_sync(parent.value.status, handle.run_id).status is S.RUNNING
        host.call(tdt.advance, 5)
        assert host.call_sync(trio.current_time) == 5
        tasks = {host.call_sync(trio.lowlevel.current_task) for _ in range(3)}
        assert len(tasks) == 1
        # The runtime closes while the parent block is still open.
        host.call(tdt.drive, runtime.aexit)
        with pytest.raises(td.RuntimeClosedError):
            host.call_sync(parent.value.status, handle.run_id)
        assert parent.is_open
    # Leaving the TrioThread left the parent block.
    assert not parent.is_open


def test_trio_thread_passes_errors_back_and_reports_what_leaving_raised() -> None:
    worker = scripted(tdt.Trace(), ("t", tdt.Script.of(tdt.Return(1))))
    host = tdt.TrioThread(clock=tdt.mock_clock())
    with host:
        runtime = host.enter(td.open_runtime([worker]))
        parent = host.enter(runtime.value.open_parent())
        with pytest.raises(td.UnknownRunError):
            host.call_sync(parent.value.status, "run_" + "0" * 32)
        host.call(parent.value.start, "worker", "t")
        with pytest.raises(td.UnresolvedDelegationError):
            host.close()
    with pytest.raises(RuntimeError, match="not running"):
        host.call_sync(trio.current_time)


# -- the model ------------------------------------------------------------------------


def model_and_runtime(
    *scripts: tuple[str, tdt.Script], **kwargs: Any
) -> tuple[td.Subagent, tdt.Trace]:
    trace = tdt.Trace()
    return scripted(trace, *scripts, **kwargs), trace


class Duo:
    """A runtime in a TrioThread and a LifecycleModel, driven side by side."""

    def __init__(self, host: tdt.TrioThread, model: LifecycleModel) -> None:
        self.host = host
        self.model = model
        self.numbers: dict[str, int] = {}

    def same(self, expected: Answer, call: Any, *args: Any) -> Answer:
        """Make the real call (the clock jumping while it blocks) and compare."""

        async def act() -> Any:
            try:
                return await tdt.drive(call, *args)
            except td.DelegationError as exc:
                await tdt.settle()
                return exc

        outcome = self.host.call(act)
        run_id = getattr(outcome, "run_id", None)
        if run_id is not None and expected.run is not None:
            self.numbers.setdefault(run_id, expected.run)
        actual = tdt.answer_of(outcome, runs=self.numbers)
        assert actual == expected
        return actual

    def run_id(self, number: int) -> str:
        return next(run_id for run_id, n in self.numbers.items() if n == number)


def test_model_predicts_a_scenario_answer_for_answer() -> None:
    """A hand-written scenario: every answer of the runtime equals the model's."""
    config = td.Config(max_concurrent_runs=1, subagent_timeout_seconds=6.0)
    worker, trace = model_and_runtime(
        ("quick", tdt.Script.of(tdt.Sleep(2), tdt.Return("q"))),
        ("slow", tdt.Script.of(tdt.Sleep(9), tdt.Return("s"))),
        ("fails", tdt.Script.of(tdt.Raise(ValueError))),
        ("again", tdt.Script.of(tdt.Return("fixed"))),
    )
    model = LifecycleModel([worker], config)
    with tdt.TrioThread(clock=tdt.mock_clock()) as host:
        duo = Duo(host, model)
        runtime = host.enter(td.open_runtime([worker], config=config))
        block = host.enter(runtime.value.open_parent("p"))
        parent = block.value
        assert model.open_parent("p") == Answer("parent", parent=0)

        duo.same(model.start(0, "worker", "quick"), parent.start, "worker", "quick")
        pending = duo.same(model.start(0, "worker", "slow"), parent.start, "worker", "slow")
        assert pending == Answer("handle", 1, "worker", S.PENDING)
        model.advance(3)
        host.call(tdt.advance, 3)  # quick ended at 2; slow runs until its deadline at 8
        duo.same(model.status(0, 1), _status, parent, duo.run_id(1))
        model.advance(10)
        host.call(tdt.advance, 10)
        timed_out = duo.same(model.wait(0, 1, timeout=0), parent.wait, duo.run_id(1))
        assert timed_out.error == "run_timed_out"
        failed = duo.same(model.delegate(0, "worker", "fails"), parent.delegate, "worker", "fails")
        assert failed.cause == "ValueError"
        verdict = duo.same(model.check_resolved(0), _check, parent)
        assert verdict.unresolved == ((0, S.COMPLETED), (1, S.TIMED_OUT), (2, S.FAILED))
        duo.same(
            model.delegate(0, "worker", "again", replaces=2),
            _delegate_replacing,
            parent,
            "again",
            duo.run_id(2),
        )
        duo.same(model.wait(0, 0, timeout=0), parent.wait, duo.run_id(0))
        duo.same(model.check_resolved(0), _check, parent)
        assert host.call_sync(trio.current_time) == model.now == 13
        assert host.call_sync(trace.lines) == model.trace.lines()
        left = duo.same(model.close_parent(0), block.aexit)
        assert left.unresolved == ((1, S.TIMED_OUT),)


async def _status(parent: td.Parent, run_id: str) -> td.RunHandle:
    return parent.status(run_id)


async def _check(parent: td.Parent) -> None:
    parent.check_resolved()


async def _delegate_replacing(parent: td.Parent, task: str, replaces: str) -> td.RunResult:
    return await parent.delegate("worker", task, replaces=replaces)


def test_model_ties_at_the_deadline_go_to_the_deadline() -> None:
    worker, _ = model_and_runtime(("t", tdt.Script.of(tdt.Sleep(5), tdt.Return(1))))
    model = LifecycleModel([worker], td.Config(subagent_timeout_seconds=5.0))
    model.open_parent()
    assert model.delegate(0, "worker", "t").error == "run_timed_out"
    assert model.now == 5


def test_model_refuses_to_guess_a_race_it_cannot_decide() -> None:
    leaf = tdt.ScriptedRunner()
    leaf.assign("child", tdt.Script.of(tdt.Sleep(2), tdt.Checkpoint(), tdt.Return(1)))
    boss = tdt.ScriptedRunner()
    # The boss ends at 2, the instant its child passes a checkpoint.
    boss.assign("job", tdt.Script.of(tdt.Start("leaf", "child"), tdt.Sleep(2)))
    subagents = [td.Subagent("leaf", leaf), td.Subagent("boss", boss, children=("leaf",))]
    model = LifecycleModel(subagents, td.Config(fail_closed=False))
    model.open_parent()
    model.start(0, "boss", "job")
    with pytest.raises(tdt.IndeterminateError, match="which comes first is open"):
        model.advance(2)


def test_model_only_takes_scripted_runners() -> None:
    async def plain(ctx: td.ChildContext) -> None:
        return None

    with pytest.raises(TypeError, match="ScriptedRunner"):
        LifecycleModel([td.Subagent("plain", plain)])


@pytest.mark.parametrize("store", [False, True])
def test_model_predicts_retention(store: bool) -> None:
    worker, _ = model_and_runtime(("t", tdt.Script.of(tdt.Return(1))))
    model = LifecycleModel([worker], td.Config(retention_seconds=10.0), store=store)
    model.open_parent("a")
    model.delegate(0, "worker", "t")
    model.advance(10)
    assert model.status(0, 0) == Answer("handle", 0, "worker", td.RunStatus.COMPLETED)
    model.advance(1)
    if store:  # answered from the store
        assert model.status(0, 0) == Answer("handle", 0, "worker", td.RunStatus.COMPLETED)
        assert model.wait(0, 0) == Answer("result", 0, "worker", final_result=1)
    else:
        assert model.status(0, 0) == Answer("error", 0, error="expired_run")


def test_model_forks_are_independent() -> None:
    worker, _ = model_and_runtime(("t", tdt.Script.of(tdt.Hang())), timeout_seconds=None)
    model = LifecycleModel([worker])
    model.open_parent()
    trial = model.fork()
    assert trial.delegate(0, "worker", "t") == Answer("blocked", 0)
    assert model.runs == 0
    assert model.now == 0


def test_answer_of_refuses_foreign_outcomes() -> None:
    with pytest.raises(TypeError):
        tdt.answer_of(42)
