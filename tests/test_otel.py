"""Traces and metrics of runs, read from OpenTelemetry's SDK (in-memory exporter and reader).

The trace shown in docs/observability.md is the one :func:`scenario` produces.
"""

from __future__ import annotations

import contextlib
import logging
import re
import traceback
import tracemalloc
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from opentelemetry import trace
from opentelemetry.metrics import _internal as metrics_internal
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    InMemoryMetricReader,
    NumberDataPoint,
)
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import trio_delegate as td
import trio_delegate.testing as tdt
from trio_delegate._otel import Telemetry, _stacktrace

from .stores import WrappedStore


@attrs.define
class Otel:
    """The SDK set up as an application would, read back by the test."""

    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader
    tracer: trace.Tracer

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [span for span in self.spans() if span.name == name]

    def one(self, name: str) -> ReadableSpan:
        [span] = self.named(name)
        return span

    def points(self, metric: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        assert data is not None
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for found in scope.metrics:
                    if found.name == metric:
                        return list(found.data.data_points)
        return []

    def sums(self, metric: str, *keys: str) -> dict[tuple[Any, ...], float]:
        """A counter's value per combination of attribute *keys*."""
        out: dict[tuple[Any, ...], float] = {}
        for point in self.points(metric):
            assert isinstance(point, NumberDataPoint)
            key = tuple(point.attributes.get(k) for k in keys) if point.attributes else ()
            out[key] = out.get(key, 0) + point.value
        return out


@pytest.fixture
def otel(monkeypatch: pytest.MonkeyPatch) -> Iterator[Otel]:
    """Global tracer and meter providers for one test.

    OpenTelemetry's globals can be set once per process; like its own test
    utilities, the fixture sets them directly and puts them back afterwards,
    so no other test runs traced.
    """
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider(shutdown_on_exit=False)
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", tracer_provider)
    monkeypatch.setattr(metrics_internal, "_METER_PROVIDER", meter_provider)
    yield Otel(exporter, reader, tracer_provider.get_tracer("the application"))
    tracer_provider.shutdown()
    meter_provider.shutdown()


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    found: int = span.context.span_id
    return found


def events(span: ReadableSpan) -> list[str]:
    return [event.name for event in span.events]


def event(span: ReadableSpan, name: str) -> Any:
    [found] = [e for e in span.events if e.name == name]
    return found


def attribute(span: ReadableSpan, key: str) -> Any:
    assert span.attributes is not None
    return span.attributes.get(key)


# -- runners -----------------------------------------------------------------------


async def work(ctx: td.ChildContext) -> str:
    await trio.sleep(1)
    if ctx.task == "fail":
        raise ValueError("bad input \ud800 [bold]x[/bold]")
    return ctx.task.upper()


async def forever(ctx: td.ChildContext) -> None:
    await trio.sleep_forever()


def runner_tracing(tracer: trace.Tracer) -> Any:
    async def traced(ctx: td.ChildContext) -> str:
        with tracer.start_as_current_span("the runner's own step"):
            await trio.sleep(1)
        return "traced"

    return traced


async def boss(ctx: td.ChildContext) -> list[str]:
    assert ctx.parent is not None
    first = await ctx.parent.delegate("worker", "one")
    handle = await ctx.parent.start("traced", "two")
    second = await ctx.parent.wait(handle.run_id)
    assert isinstance(second, td.RunResult)
    return [first.final_result, second.final_result]


def subagents(otel: Otel) -> list[td.Subagent]:
    return [
        td.Subagent("worker", work, description="Does the work."),
        td.Subagent("traced", runner_tracing(otel.tracer)),
        td.Subagent("boss", boss, children=("worker", "traced")),
        td.Subagent("stuck", forever, timeout_seconds=5),
    ]


# -- spans -------------------------------------------------------------------------


async def test_nested_delegation_is_one_tree(
    otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    async with td.open_runtime(subagents(otel)) as rt, rt.open_parent("app") as parent:
        with otel.tracer.start_as_current_span("the agent's turn"):
            result = await parent.delegate("boss", "plan")
    assert result.final_result == ["ONE", "traced"]
    turn = otel.one("the agent's turn")
    boss_span = otel.one("invoke_agent boss")
    worker = otel.one("invoke_agent worker")
    traced = otel.one("invoke_agent traced")
    step = otel.one("the runner's own step")
    assert parent_of(boss_span) == span_id(turn)
    assert parent_of(worker) == span_id(boss_span)
    assert parent_of(traced) == span_id(boss_span)
    assert parent_of(step) == span_id(traced)
    assert {span.context.trace_id for span in otel.spans() if span.context} == {
        turn.context.trace_id if turn.context else 0
    }
    assert attribute(boss_span, "trio_delegate.depth") == 1
    assert attribute(worker, "trio_delegate.depth") == 2
    assert attribute(boss_span, "trio_delegate.owner") == "app"
    assert attribute(worker, "trio_delegate.owner") == (
        f"app/{attribute(boss_span, 'trio_delegate.run_id')}"
    )
    assert attribute(worker, "gen_ai.operation.name") == "invoke_agent"
    assert attribute(worker, "gen_ai.agent.name") == "worker"
    assert attribute(worker, "gen_ai.agent.description") == "Does the work."
    assert attribute(worker, "gen_ai.provider.name") == "trio_delegate"
    assert td.RunStatus(attribute(worker, "trio_delegate.status")) is td.RunStatus.COMPLETED
    # Each observation is an event where the result was handed out.
    observed = [e.attributes for e in boss_span.events if e.name == "trio_delegate.run.observed"]
    assert [o["gen_ai.agent.name"] for o in observed if o] == ["worker", "traced"]
    assert attribute(traced, "trio_delegate.background") is True
    assert attribute(worker, "trio_delegate.background") is False
    # Span times follow the Trio clock: the boss ran both children, 1 s each.
    assert boss_span.end_time is not None
    assert boss_span.start_time is not None
    assert boss_span.end_time - boss_span.start_time == 2_000_000_000


async def test_a_background_run_belongs_to_the_span_that_started_it(
    otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    async with td.open_runtime(subagents(otel)) as rt, rt.open_parent() as parent:
        with otel.tracer.start_as_current_span("start it"):
            handle = await parent.start("worker", "later")
        await trio.sleep(5)  # it ends meanwhile, unobserved
        with otel.tracer.start_as_current_span("read it"):
            result = await parent.wait(handle.run_id)
    assert isinstance(result, td.RunResult)
    assert result.final_result == "LATER"
    run = otel.one("invoke_agent worker")
    start, read = otel.one("start it"), otel.one("read it")
    assert parent_of(run) == span_id(start)
    assert attribute(run, "trio_delegate.background") is True
    assert attribute(run, "trio_delegate.status") == "completed"
    assert run.status.status_code is StatusCode.UNSET
    assert events(run) == ["trio_delegate.run.running"]
    assert events(start) == []
    observed = event(read, "trio_delegate.run.observed")
    assert observed.attributes["trio_delegate.run_id"] == handle.run_id
    assert observed.attributes["gen_ai.agent.name"] == "worker"


async def test_each_ending_has_its_status_attributes_and_events(
    otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    config = td.Config(fail_closed=False, max_concurrent_runs=1)
    async with td.open_runtime(subagents(otel), config=config) as rt, rt.open_parent() as parent:
        with pytest.raises(td.RunFailedError):
            await parent.delegate("worker", "fail")
        failed_id = attribute(otel.one("invoke_agent worker"), "trio_delegate.run_id")
        with pytest.raises(td.RunTimedOutError):
            await parent.delegate("stuck", "wait", replaces=failed_id)
        running = await parent.start("stuck", "cancel me")
        queued = await parent.start("worker", "never runs")
        await trio.sleep(1)
        assert parent.cancel(queued.run_id).status is td.RunStatus.CANCELLED
        parent.cancel(running.run_id)
        with pytest.raises(td.RunCancelledError):
            await parent.wait(running.run_id)
        done = await parent.delegate("worker", "first")
        continued = await parent.continue_run(done.run_id, "again")
        assert isinstance(continued, td.RunResult)
    by_id = {attribute(span, "trio_delegate.run_id"): span for span in otel.spans()}

    failed = by_id[failed_id]
    assert attribute(failed, "trio_delegate.status") == "failed"
    assert attribute(failed, "error.type") == "ValueError"
    assert failed.status.status_code is StatusCode.ERROR
    exception = event(failed, "exception").attributes
    assert exception["exception.type"] == "ValueError"
    # A lone surrogate cannot be exported: it is recorded escaped.
    assert exception["exception.message"] == "bad input \\ud800 [bold]x[/bold]"
    assert "raise ValueError" in exception["exception.stacktrace"]

    [timed_out] = [s for s in otel.named("invoke_agent stuck") if s is not by_id[running.run_id]]
    assert attribute(timed_out, "trio_delegate.status") == "timed_out"
    assert attribute(timed_out, "trio_delegate.replaces") == failed_id
    assert attribute(timed_out, "trio_delegate.timeout_seconds") == 5.0
    assert attribute(timed_out, "error.type") == "RunTimedOutError"
    assert timed_out.status.status_code is StatusCode.ERROR
    assert events(timed_out) == [
        "trio_delegate.run.running",
        "trio_delegate.run.deadline_passed",
        "exception",
    ]
    assert timed_out.start_time is not None
    deadline = event(timed_out, "trio_delegate.run.deadline_passed")
    assert deadline.timestamp - timed_out.start_time == 5_000_000_000

    cancelled = by_id[running.run_id]
    assert attribute(cancelled, "trio_delegate.status") == "cancelled"
    assert attribute(cancelled, "trio_delegate.cancel_reason") == "request"
    assert cancelled.status.status_code is StatusCode.UNSET
    assert events(cancelled) == ["trio_delegate.run.running", "trio_delegate.run.cancel_requested"]
    assert event(cancelled, "trio_delegate.run.cancel_requested").attributes == {
        "trio_delegate.cancel_reason": "request"
    }

    never = by_id[queued.run_id]
    assert attribute(never, "trio_delegate.status") == "cancelled"
    assert events(never) == ["trio_delegate.run.cancel_requested"]  # it never ran

    follow_up = by_id[continued.run_id]
    assert attribute(follow_up, "trio_delegate.continues") == done.run_id
    assert attribute(by_id[done.run_id], "trio_delegate.continues") is None


async def test_a_huge_exception_message_is_cut_before_anything_is_made_of_it(
    otel: Otel, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 8 MB of non-ASCII text ending in a lone surrogate, raised from another
    # such message: escaping and formatting it whole before cutting it, in
    # each attribute, held the event loop for 144-370 ms. What the telemetry
    # allocates while it ends the run's span is counted work, whatever the
    # machine's load: no copy of the message, only the few kilobytes kept.
    huge = "é" * 8_000_000 + "\ud800"
    peaks: list[int] = []
    ended = Telemetry.ended

    def measured(self: Telemetry, run: Any) -> None:
        tracemalloc.start()
        try:
            ended(self, run)
        finally:
            peaks.append(tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()

    monkeypatch.setattr(Telemetry, "ended", measured)

    async def failing(ctx: td.ChildContext) -> Any:
        try:
            raise KeyError(huge)
        except KeyError as exc:
            raise ValueError(huge) from exc

    config = td.Config(fail_closed=False)
    async with (
        td.open_runtime([td.Subagent("huge", failing)], config=config) as rt,
        rt.open_parent() as parent,
    ):
        with trio.fail_after(30), pytest.raises(td.RunFailedError):
            await parent.delegate("huge", "t")
    assert len(peaks) == 1
    assert peaks[0] < 1_000_000, f"ending the span allocated {peaks[0]} bytes"
    span = otel.one("invoke_agent huge")
    exception = event(span, "exception").attributes
    message = exception["exception.message"]
    assert len(message) <= 4096
    assert message.startswith("éé")
    assert message.endswith("…")
    stacktrace = exception["exception.stacktrace"]
    assert len(stacktrace) <= 32_768
    # Laid out as Python prints it: the cause first, its message cut too.
    assert stacktrace.startswith("Traceback (most recent call last):\n")
    assert "KeyError: 'éé" in stacktrace
    assert "raise KeyError(huge)" in stacktrace
    assert span.status.description is not None
    assert len(span.status.description) <= 4096 + len("ValueError: ")


def test_the_stack_trace_of_a_group_and_its_causes_reads_as_pythons() -> None:
    def grouped() -> None:
        try:
            raise OSError("the disk")
        except OSError:
            raise ExceptionGroup("runners failed", [ValueError("one"), TypeError()]) from None

    try:
        try:
            raise KeyError("first")
        except KeyError as exc:
            raise RuntimeError("second") from exc
    except RuntimeError as exc:
        chained = exc
    try:
        grouped()
    except ExceptionGroup as exc:
        group = exc
    assert _stacktrace(chained) == "".join(traceback.format_exception(chained))
    text = _stacktrace(group)
    assert "ExceptionGroup: runners failed (2 sub-exceptions)" in text
    assert "ValueError: one\n" in text
    assert "TypeError\n" in text
    assert "OSError" not in text  # its context was suppressed


async def test_a_closing_parent_names_why_its_runs_were_cancelled(
    otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    config = td.Config(fail_closed=False)
    async with (
        td.open_runtime(subagents(otel), config=config) as rt,
        rt.open_parent() as parent,
    ):
        await parent.start("stuck", "left behind")
    [span] = otel.named("invoke_agent stuck")
    assert attribute(span, "trio_delegate.cancel_reason") == "parent_closed"


class RefusingStore(WrappedStore):
    """A store whose every write fails: no admission can be recorded."""

    async def write(self, records: Sequence[td.RunRecord]) -> None:
        await trio.lowlevel.checkpoint()
        raise td.StoreError("the disk is full")


async def test_an_admission_that_could_not_be_recorded_is_withdrawn(otel: Otel) -> None:
    async with (
        td.open_runtime(subagents(otel), store=RefusingStore()) as rt,
        rt.open_parent() as parent,
    ):
        with pytest.raises(td.StoreError):
            await parent.start("worker", "lost")
    span = otel.one("invoke_agent worker")
    assert attribute(span, "trio_delegate.status") == "withdrawn"
    assert span.status.status_code is StatusCode.ERROR
    assert otel.sums("trio_delegate.runs.live") == {(): 0}


# -- metrics -------------------------------------------------------------------------


async def test_metrics_count_runs_by_subagent_and_status(
    otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    config = td.Config(fail_closed=False, max_concurrent_runs=1)
    async with (
        td.open_runtime(subagents(otel), config=config, store=td.MemoryStore()) as rt,
        rt.open_parent() as parent,
    ):
        first = await parent.start("worker", "a")
        await parent.start("worker", "b")
        live = otel.sums("trio_delegate.runs.live", "gen_ai.agent.name", "trio_delegate.status")
        assert live == {("worker", "running"): 1, ("worker", "pending"): 1}
        await parent.wait(first.run_id)
        with pytest.raises(td.RunFailedError):
            await parent.delegate("worker", "fail")
    ended = otel.sums("trio_delegate.runs.ended", "gen_ai.agent.name", "trio_delegate.status")
    assert ended == {("worker", "completed"): 2, ("worker", "failed"): 1}
    assert otel.sums("trio_delegate.runs.started", "gen_ai.agent.name") == {("worker",): 3}
    live = otel.sums("trio_delegate.runs.live", "trio_delegate.status")
    assert live == {("running",): 0, ("pending",): 0}
    durations = {
        point.attributes["trio_delegate.status"]: point
        for point in otel.points("trio_delegate.run.duration")
    }
    completed = durations["completed"]
    assert isinstance(completed, HistogramDataPoint)
    # "a" ran 1 s; "b" waited 1 s for the slot, then ran 1 s.
    assert (completed.count, completed.sum) == (2, 3.0)
    [commits] = otel.points("trio_delegate.store.commit.records")
    assert isinstance(commits, HistogramDataPoint)
    assert commits.sum >= 6  # an admission and an end per run, in batches
    [latency] = otel.points("trio_delegate.store.commit.duration")
    assert latency.count == commits.count
    assert latency.sum >= 0


# -- tool spans -----------------------------------------------------------------------


async def test_tool_calls_are_spans_linked_to_their_runs(
    otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    async with td.open_runtime(subagents(otel)) as rt, rt.open_parent("model") as parent:
        tools = parent.tools()
        started = await tools.call(
            "delegate_task", {"subagent": "worker", "task": "bg", "background": True}
        )
        await tools.call("wait_subagent", {"run_id": started["run_id"]})
        with pytest.raises(td.UnknownRunError):
            await tools.call("subagent_status", '{"run_id": "run_nobody"}')
        with pytest.raises(td.InvalidArgumentsError):
            await tools.call("no such tool \ud800" * 20, {})
    start, wait = otel.one("execute_tool delegate_task"), otel.one("execute_tool wait_subagent")
    run = otel.one("invoke_agent worker")
    run_id = started["run_id"]
    # The run a tool call starts is its child; a later call links to it.
    assert parent_of(run) == span_id(start)
    assert attribute(start, "trio_delegate.run_id") == run_id
    assert attribute(wait, "trio_delegate.run_id") == run_id
    assert [link.context.span_id for link in wait.links] == [span_id(run)]
    assert event(wait, "trio_delegate.run.observed").attributes["trio_delegate.run_id"] == run_id
    for span in (start, wait):
        assert attribute(span, "gen_ai.operation.name") == "execute_tool"
        assert attribute(span, "gen_ai.tool.type") == "function"
        assert attribute(span, "trio_delegate.owner") == "model"
        assert span.status.status_code is StatusCode.UNSET
    status = otel.one("execute_tool subagent_status")
    assert status.status.status_code is StatusCode.ERROR
    assert attribute(status, "error.type") == "UnknownRunError"
    [bad] = [span for span in otel.spans() if span.name.startswith("execute_tool no such")]
    name = attribute(bad, "gen_ai.tool.name")
    assert len(name) <= 64
    assert "\\ud800" in name
    assert attribute(bad, "error.type") == "InvalidArgumentsError"


async def test_a_frameworks_own_tool_span_is_enriched_not_doubled(
    otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    async with td.open_runtime(subagents(otel)) as rt, rt.open_parent("agent") as parent:
        tools = parent.tools()
        # As Pydantic AI does: its tool call's span is current when the tool runs.
        with otel.tracer.start_as_current_span("execute_tool delegate_task"):
            answer = await tools.call("delegate_task", {"subagent": "worker", "task": "x"})
        with otel.tracer.start_as_current_span("execute_tool wait_subagent"):
            await tools.call("wait_subagent", {"run_id": answer["run_id"]})
    [start] = otel.named("execute_tool delegate_task")
    [wait] = otel.named("execute_tool wait_subagent")
    run = otel.one("invoke_agent worker")
    assert parent_of(run) == span_id(start)
    for span in (start, wait):
        assert attribute(span, "trio_delegate.run_id") == answer["run_id"]
        assert attribute(span, "trio_delegate.owner") == "agent"
    assert [link.context.span_id for link in wait.links] == [span_id(run)]


async def test_an_mcp_tool_call_is_one_span(
    otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    pytest.importorskip("mcp")
    from mcp import Client

    from trio_delegate.mcp import build_server

    async with td.open_runtime(subagents(otel)) as rt:
        with trio.fail_after(100):  # virtual time: beyond the scenario's 2 s
            async with Client(build_server(rt)) as client:
                done = await client.call_tool("delegate_task", {"subagent": "worker", "task": "x"})
                failed = await client.call_tool(
                    "delegate_task", {"subagent": "worker", "task": "fail"}
                )
    assert not done.is_error
    assert failed.is_error
    # A foreground call is served as a start and a wait: still one span.
    tool_spans = otel.named("execute_tool delegate_task")
    assert len(tool_spans) == 2
    runs = otel.named("invoke_agent worker")
    assert sorted(parent_of(run) or 0 for run in runs) == sorted(map(span_id, tool_spans))
    ok, error = sorted(tool_spans, key=lambda span: span.start_time or 0)
    assert ok.status.status_code is StatusCode.UNSET
    assert error.status.status_code is StatusCode.ERROR
    assert attribute(error, "error.type") == "RunFailedError"
    assert attribute(error, "trio_delegate.run_id") == attribute(
        next(run for run in runs if parent_of(run) == span_id(error)), "trio_delegate.run_id"
    )


# -- off, and never in the way --------------------------------------------------------------


async def test_no_provider_means_no_observer() -> None:
    async with td.open_runtime(subagents_without_tracer()) as rt:
        assert not tdt.internals(rt).observed


def subagents_without_tracer() -> list[td.Subagent]:
    return [td.Subagent("worker", work)]


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("OTEL_SDK_DISABLED", "true"),
        ("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "requests, trio-delegate"),
    ],
)
async def test_opentelemetrys_switches_turn_it_off(
    otel: Otel,
    monkeypatch: pytest.MonkeyPatch,
    autojump_clock: trio.testing.MockClock,
    variable: str,
    value: str,
) -> None:
    async with td.open_runtime(subagents(otel)) as rt:
        assert tdt.internals(rt).observed
    monkeypatch.setenv(variable, value)
    async with td.open_runtime(subagents(otel)) as rt, rt.open_parent() as parent:
        assert not tdt.internals(rt).observed
        await parent.delegate("worker", "quiet")
    assert otel.named("invoke_agent worker") == []


async def test_metrics_alone_need_no_tracer(
    otel: Otel, monkeypatch: pytest.MonkeyPatch, autojump_clock: trio.testing.MockClock
) -> None:
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)
    async with td.open_runtime(subagents(otel)) as rt, rt.open_parent() as parent:
        await parent.delegate("worker", "counted")
        handle = await parent.start("worker", "x")
        await parent.tools().call("wait_subagent", {"run_id": handle.run_id})
    assert otel.spans() == []
    assert otel.sums("trio_delegate.runs.ended", "trio_delegate.status") == {("completed",): 2}


class Exploding(SpanProcessor):
    """A span processor that fails on every span it sees end."""

    def on_end(self, span: ReadableSpan) -> None:
        raise RuntimeError("exporter bug")


async def test_a_failing_span_processor_never_fails_a_run(
    otel: Otel, caplog: pytest.LogCaptureFixture, autojump_clock: trio.testing.MockClock
) -> None:
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    provider.add_span_processor(Exploding())
    with caplog.at_level(logging.ERROR, logger="trio_delegate.otel"):
        async with td.open_runtime(subagents(otel)) as rt, rt.open_parent() as parent:
            result = await parent.delegate("worker", "still fine")
    assert result.final_result == "STILL FINE"
    assert any("telemetry failed" in record.getMessage() for record in caplog.records)


# -- the trace in the docs ---------------------------------------------------------------

DOC = Path(__file__).resolve().parent.parent / "docs" / "observability.md"
BLOCK = re.compile(r"<!-- trace: tests/test_otel\.py -->\n```text\n(.*?)```", re.S)


async def fact_checker(ctx: td.ChildContext) -> str:
    await trio.sleep(1)
    return "2 sources agree"


async def researcher(ctx: td.ChildContext) -> str:
    assert ctx.parent is not None
    await trio.sleep(1)
    checked = await ctx.parent.delegate("fact_checker", "check the release date")
    return f"found it; {checked.final_result}"


async def writer(ctx: td.ChildContext) -> str:
    await trio.sleep(2.5)
    return "a draft"


async def searcher(ctx: td.ChildContext) -> str:
    await trio.sleep_forever()


async def scenario(otel: Otel) -> None:
    subagents = [
        td.Subagent("researcher", researcher, children=("fact_checker",)),
        td.Subagent("fact_checker", fact_checker),
        td.Subagent("writer", writer),
        td.Subagent("searcher", searcher, timeout_seconds=2),
    ]
    config = td.Config(fail_closed=False)
    async with td.open_runtime(subagents, config=config) as rt, rt.open_parent("chat-42") as parent:
        with otel.tracer.start_as_current_span("agent turn"):
            await parent.delegate("researcher", "when was 2.0 released?")  # foreground, nested
            draft = await parent.start("writer", "draft the announcement")  # background
            await trio.sleep(0.5)
            search = await parent.start("searcher", "search the forum")
            await trio.sleep(1)
            parent.cancel(search.run_id)  # a cancel
            with contextlib.suppress(td.RunTimedOutError):
                await parent.delegate("searcher", "search the archive")  # a timeout
            await parent.wait(draft.run_id)  # the background run, observed later


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def render(spans: list[ReadableSpan]) -> str:
    """The spans as a tree, times in seconds from the first run's admission."""
    ids = {span.context.span_id: span for span in spans if span.context}
    runs = sorted(
        (span for span in spans if span.name.startswith("invoke_agent")),
        key=lambda span: span.start_time or 0,
    )
    label = {
        span.attributes["trio_delegate.run_id"]: f"run {n}"
        for n, span in enumerate(runs, 1)
        if span.attributes
    }
    origin = runs[0].start_time or 0

    def at(ns: int | None) -> str:
        return f"{((ns or 0) - origin) / 1e9:4.1f}"

    def describe(span: ReadableSpan) -> str:
        attributes: dict[str, Any] = dict(span.attributes or {})
        if "trio_delegate.run_id" not in attributes:
            return f"{span.name}  (the application's span)"
        parts = [
            f"{span.name:<26}",
            f"{at(span.start_time)} → {at(span.end_time)} s",
            f"{label[attributes['trio_delegate.run_id']]}",
            f"{attributes['trio_delegate.status']}",
            "background" if attributes.get("trio_delegate.background") else "foreground",
            f"depth {attributes['trio_delegate.depth']}",
        ]
        if span.status.status_code.name == "ERROR":
            parts.append(f"ERROR {attributes['error.type']}")
        return "  ".join(parts)

    def event(item: Any) -> str:
        name = item.name.removeprefix("trio_delegate.run.")
        attributes = dict(item.attributes or {})
        detail = ""
        if "trio_delegate.cancel_reason" in attributes:
            detail = f" ({attributes['trio_delegate.cancel_reason']})"
        if "trio_delegate.run_id" in attributes:
            detail = f" {label[attributes['trio_delegate.run_id']]}"
        if name == "exception":
            detail = f" {attributes['exception.type']}"
        return f"• {name}{detail} at {at(item.timestamp)} s"

    lines: list[str] = []

    def walk(span: ReadableSpan, prefix: str, last: bool, top: bool) -> None:
        lines.append(("" if top else prefix + ("└─ " if last else "├─ ")) + describe(span))
        inner = "" if top else prefix + ("   " if last else "│  ")
        children = sorted(
            (child for child in spans if parent_id(child) == span_id(span)),
            key=lambda child: child.start_time or 0,
        )
        items: list[tuple[int, Any]] = [(e.timestamp, e) for e in span.events]
        items += [(child.start_time or 0, child) for child in children]
        items.sort(key=lambda pair: pair[0])
        for index, (_, item) in enumerate(items):
            end = index == len(items) - 1
            if isinstance(item, ReadableSpan):
                walk(item, inner, end, False)
            else:
                lines.append(inner + ("└─ " if end else "├─ ") + event(item))

    for span in spans:
        if span.parent is None or span.parent.span_id not in ids:
            walk(span, "", True, True)
    return "\n".join(lines) + "\n"


async def test_the_documented_trace(
    otel: Otel,
    autojump_clock: trio.testing.MockClock,
) -> None:
    await scenario(otel)
    rendered = render(otel.spans())
    found = BLOCK.findall(DOC.read_text())
    assert found, f"docs/observability.md shows no trace; it should show:\n{rendered}"
    assert found[0] == rendered


async def test_a_run_span_carries_the_usage_the_run_reported_itself(
    otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    async def leaf(ctx: td.ChildContext) -> str:
        ctx.add_usage(td.Usage(input_tokens=7, cache_read_input_tokens=2, cost_usd=0.5))
        return "leaf"

    async def boss(ctx: td.ChildContext) -> td.Output:
        assert ctx.parent is not None
        await ctx.parent.delegate("leaf", "go")
        usage = td.Usage(requests=1, input_tokens=5, output_tokens=3, reasoning_output_tokens=1)
        return td.Output("boss", usage=usage)

    async def quiet(ctx: td.ChildContext) -> str:
        return "quiet"

    subs = [
        td.Subagent("boss", boss, children=("leaf",)),
        td.Subagent("leaf", leaf),
        td.Subagent("quiet", quiet),
    ]
    async with td.open_runtime(subs) as rt, rt.open_parent() as parent:
        await parent.delegate("boss", "go")
        await parent.delegate("quiet", "go")
    boss_span = otel.one("invoke_agent boss")
    # Its own report only: the nested run's span carries the nested run's.
    assert {
        key: value for key, value in (boss_span.attributes or {}).items() if "usage" in key
    } == {
        "gen_ai.usage.input_tokens": 5,
        "gen_ai.usage.output_tokens": 3,
        "gen_ai.usage.cache_read.input_tokens": 0,
        "gen_ai.usage.cache_creation.input_tokens": 0,
        "gen_ai.usage.reasoning.output_tokens": 1,
        "trio_delegate.usage.requests": 1,
        "trio_delegate.usage.cost_usd": 0.0,
    }
    leaf_span = otel.one("invoke_agent leaf")
    assert attribute(leaf_span, "gen_ai.usage.input_tokens") == 7
    assert attribute(leaf_span, "gen_ai.usage.cache_read.input_tokens") == 2
    assert attribute(leaf_span, "trio_delegate.usage.cost_usd") == 0.5
    assert attribute(otel.one("invoke_agent quiet"), "gen_ai.usage.input_tokens") is None


async def test_a_budget_stop_is_the_cancel_reason_of_a_span(
    otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    async def spend(ctx: td.ChildContext) -> str:
        ctx.add_usage(td.Usage(input_tokens=50))
        await trio.sleep_forever()
        return "never"  # pragma: no cover

    config = td.Config(fail_closed=False)
    budget = td.Budget(max_input_tokens=10)
    async with (
        td.open_runtime([td.Subagent("spend", spend)], config=config) as rt,
        rt.open_parent(budget=budget) as parent,
    ):
        with pytest.raises(td.RunCancelledError):
            await parent.delegate("spend", "go")
    span = otel.one("invoke_agent spend")
    assert attribute(span, "trio_delegate.cancel_reason") == "budget"
    assert attribute(span, "gen_ai.usage.input_tokens") == 50
