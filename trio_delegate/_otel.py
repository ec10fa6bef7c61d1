"""OpenTelemetry traces and metrics of a runtime's runs (docs/observability.md).

The runtime core tells an observer (``_core/_events.py``) what happens to
each run; :class:`Telemetry` turns that into spans named by OpenTelemetry's
GenAI semantic conventions and into metrics:

* one ``invoke_agent <subagent>`` span per run, from its admission to its
  end. Its parent is the span current where ``start``/``delegate``/
  ``continue_run`` was called; inside the run's own task the run's span is
  current, so the spans of nested runs, of tool calls and of whatever the
  runner traces itself are its children. Events mark the run starting, a
  cancel request and a deadline passing; a failed or timed-out run ends with
  status ERROR and its exception recorded. A ``wait`` (or ``delegate``) that
  hands out a run's result adds an event to the span current in the waiting
  task: a background run's observation shows where it happened;
* one ``execute_tool <name>`` span per model-facing tool call, linked to the
  runs it touches;
* run counts, durations, live and pending runs, and the store writer's
  commit latency and batch size.

This module imports OpenTelemetry's API; the runtime imports it only when
OpenTelemetry is loaded (see :func:`open_telemetry`), so a process without
it pays nothing. Every method returns quickly and never raises: a failure
of the telemetry is logged, never a run's failure.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import math
import os
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Final, TypeVar, final

import trio
from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from ._core import StoredEnding, error_type
from ._json import escape_text
from ._status import RunStatus

if TYPE_CHECKING:
    from opentelemetry.trace import Span, SpanContext

    from ._core import CancelReason, Outcome, Run
    from ._usage import Usage

__all__ = ["INSTRUMENTATION_NAME", "Telemetry", "open_telemetry"]

logger = logging.getLogger("trio_delegate.otel")

#: The tracer's and meter's name, and the name ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS`` takes.
INSTRUMENTATION_NAME: Final = "trio_delegate"

#: ``gen_ai.provider.name`` of a run's span: a subagent's runner may call any
#: model, or none; the attributes that follow are this project's.
_PROVIDER: Final = "trio_delegate"

#: How many runs' span contexts are kept for linking tool calls to them: a
#: model waits on a run it started a while ago, but not thousands of runs ago.
_LINKED_RUNS: Final = 4096

#: The longest exception message and stack trace recorded on a span: a
#: runner's exception can carry anything, and exporters limit what they send.
_MAX_MESSAGE_CHARS: Final = 4096
_MAX_STACKTRACE_CHARS: Final = 32_768
_MAX_TOOL_NAME_CHARS: Final = 64
_MAX_TYPE_CHARS: Final = 256
#: How much of an exception's causes, contexts and groups the stack trace
#: goes through: Python's own limits for groups, and as many frames of each
#: traceback as fit (the most recent kept).
_MAX_CHAIN: Final = 32
_MAX_GROUP_WIDTH: Final = 15
_MAX_GROUP_DEPTH: Final = 10
_MAX_FRAMES: Final = 64
_CAUSE: Final = "\nThe above exception was the direct cause of the following exception:\n\n"
_CONTEXT: Final = "\nDuring handling of the above exception, another exception occurred:\n\n"

#: Bucket boundaries (seconds) of the run duration histogram: subagents take
#: from milliseconds to many minutes (the default deadline is 15 minutes).
_RUN_SECONDS: Final = (
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0,
    1800.0, 3600.0,
)  # fmt: skip
#: Bucket boundaries (seconds) of a store commit: a local fsync to a remote round trip.
_COMMIT_SECONDS: Final = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
)  # fmt: skip
#: Bucket boundaries of a commit's batch size (records).
_BATCH_RECORDS: Final = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)

_F = TypeVar("_F", bound=Callable[..., Any])


def _disabled() -> bool:
    """Whether OpenTelemetry's own switches turn this instrumentation off."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return True
    names = os.environ.get("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "")
    return any(
        name.strip().replace("-", "_") in (INSTRUMENTATION_NAME, "*") for name in names.split(",")
    )


def _tracer_provider_set(provider: trace.TracerProvider) -> bool:
    # Without set_tracer_provider the API hands out a proxy that records nothing.
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def _meter_provider_set(provider: metrics.MeterProvider) -> bool:
    # The API's stand-in until set_meter_provider is called has no public name.
    return not (
        isinstance(provider, metrics.NoOpMeterProvider)
        or type(provider).__name__ == "_ProxyMeterProvider"
    )


def open_telemetry() -> Telemetry | None:
    """The observer of a runtime opening now: ``None`` when nothing would receive its data.

    On when the application has set a global tracer provider or meter
    provider (the OpenTelemetry SDK's, or Logfire's), unless
    ``OTEL_SDK_DISABLED=true`` or ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS``
    names ``trio_delegate``.
    """
    if _disabled():
        return None
    tracer_provider = trace.get_tracer_provider()
    meter_provider = metrics.get_meter_provider()
    tracing = _tracer_provider_set(tracer_provider)
    metering = _meter_provider_set(meter_provider)
    if not (tracing or metering):
        return None
    return Telemetry(tracer_provider if tracing else None, meter_provider if metering else None)


def _guarded(method: _F) -> _F:
    """*method*, logging instead of raising: telemetry never fails a run."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except Exception:
            logger.exception("trio_delegate telemetry failed in %s", method.__name__)
            return None

    return wrapper  # type: ignore[return-value]


def _text(value: str, limit: int) -> str:
    """*value* as text any exporter can send: bad code points escaped, at most *limit* chars.

    Cut first, then escaped: a runner's message of megabytes costs what one
    of *limit* characters costs (escaping the whole of it first, in every
    attribute made of it, held the event loop for hundreds of milliseconds).
    """
    cut = len(value) > limit
    text = escape_text(str.__getitem__(value, slice(limit)) if cut else value)
    # An escape makes one code point six characters: cut again.
    if cut or len(text) > limit:
        return text[: limit - 1] + "…"
    return text


def _message(error: BaseException) -> str:
    """*error*'s message, at most ``_MAX_MESSAGE_CHARS``, read without copying it whole."""
    try:
        args = error.args
        if (
            type(error).__str__ is KeyError.__str__
            and type(args) is tuple
            and len(args) == 1
            and type(args[0]) is str
        ):
            # A KeyError's message is its key's repr: a copy of the whole key.
            return _text(repr(args[0][:_MAX_MESSAGE_CHARS]), _MAX_MESSAGE_CHARS)
        text = str(error)
    except Exception:
        text = f"<{_type_name(error)} whose message could not be read>"
    return _text(text, _MAX_MESSAGE_CHARS)


def _type_name(error: BaseException) -> str:
    return _text(error_type(error), _MAX_TYPE_CHARS)


def _stacktrace(error: BaseException) -> str:
    """*error*'s traceback laid out as Python prints it, at most ``_MAX_STACKTRACE_CHARS``.

    Not ``traceback.format_exception``: it joins every message in whole
    (a runner's may be megabytes) before anything could be cut. Here each
    message is cut first, and nothing is formatted past the limit.
    """
    parts: list[str] = []
    room = _MAX_STACKTRACE_CHARS
    for part in _traceback_parts(error, 0):
        parts.append(part[:room])
        room -= len(part)
        if room <= 0:
            break
    return "".join(parts)


def _traceback_parts(error: BaseException, depth: int) -> Iterator[str]:
    """The pieces of *error*'s traceback, its causes and contexts first, lazily."""
    # (exception, what relates it to the one printed after it), newest first.
    chain: list[tuple[BaseException, str]] = [(error, "")]
    seen = {id(error)}
    while len(chain) < _MAX_CHAIN:
        current = chain[-1][0]
        if current.__cause__ is not None:
            older, relation = current.__cause__, _CAUSE
        elif current.__context__ is not None and not current.__suppress_context__:
            older, relation = current.__context__, _CONTEXT
        else:
            break
        if id(older) in seen:
            break
        seen.add(id(older))
        chain.append((older, relation))
    for exception, relation in reversed(chain):
        if exception.__traceback__ is not None:
            yield "Traceback (most recent call last):\n"
            yield from traceback.format_tb(exception.__traceback__, -_MAX_FRAMES)
        message = _message(exception)
        yield f"{_type_name(exception)}: {message}\n" if message else f"{_type_name(exception)}\n"
        if isinstance(exception, BaseExceptionGroup) and depth < _MAX_GROUP_DEPTH:
            members = exception.exceptions
            for index, member in enumerate(members[:_MAX_GROUP_WIDTH], 1):
                yield f"+---------------- {index} ----------------\n"
                yield from _traceback_parts(member, depth + 1)
            if len(members) > _MAX_GROUP_WIDTH:
                yield f"and {len(members) - _MAX_GROUP_WIDTH} more exceptions\n"
        yield relation


def _record_exception(
    span: Span, error: BaseException, type_name: str, message: str, timestamp: int
) -> None:
    """An ``exception`` event (the semantic conventions' fields) that cannot raise.

    ``Span.record_exception`` calls ``str()`` on the exception, which a
    runner's exception may make raise, and records any length.
    """
    attributes = {"exception.type": type_name, "exception.message": message}
    if error.__traceback__ is not None:  # raised (by a runner), not made to describe an end
        try:
            stacktrace = _stacktrace(error)
        except Exception:
            stacktrace = ""
        attributes["exception.stacktrace"] = stacktrace
    span.add_event("exception", attributes, timestamp)


def _usage_attributes(attributes: dict[str, Any], usage: Usage) -> None:
    """Add *usage* to a run span's *attributes*, as the GenAI conventions name it."""
    attributes["gen_ai.usage.input_tokens"] = usage.input_tokens
    attributes["gen_ai.usage.output_tokens"] = usage.output_tokens
    attributes["gen_ai.usage.cache_read.input_tokens"] = usage.cache_read_input_tokens
    attributes["gen_ai.usage.cache_creation.input_tokens"] = usage.cache_creation_input_tokens
    attributes["gen_ai.usage.reasoning.output_tokens"] = usage.reasoning_output_tokens
    attributes["trio_delegate.usage.requests"] = usage.requests
    attributes["trio_delegate.usage.cost_usd"] = usage.cost_usd


def _failure(outcome: Outcome, timeout: float | None) -> tuple[str, str]:
    """The type and message of a failed run's error, each cut first, then escaped.

    A runner's own exception is read here rather than through
    ``Outcome.error_details``, which escapes the whole message before anything
    could cut it; an ending adopted from a store is read as it was recorded.
    """
    error = outcome.error
    assert error is not None
    if type(error) is StoredEnding:
        kind, message = outcome.error_details(timeout)
        return _text(kind or "Error", _MAX_TYPE_CHARS), _text(message or "", _MAX_MESSAGE_CHARS)
    return _type_name(error), _message(error)


@final
class _RunState:
    """What the observer keeps on a run (``Run.telemetry``)."""

    __slots__ = ("admitted", "running", "span")

    def __init__(self, admitted: float) -> None:
        self.admitted = admitted
        self.running = False
        self.span: Span | None = None


@final
class _Meters:
    """The instruments of one meter provider, shared by every runtime reporting to it.

    A meter hands out an instrument once per name: a second runtime gets the
    first one's, observable callback included, so the live counts of all the
    runtimes live here.
    """

    __slots__ = ("commit_records", "commit_seconds", "duration", "ended", "live", "started")

    def __init__(self, meter: metrics.Meter) -> None:
        # (subagent, "pending" | "running") -> runs; read when metrics are collected.
        self.live: dict[tuple[str, str], int] = {}
        self.started = meter.create_counter(
            "trio_delegate.runs.started", unit="{run}", description="Runs that started running."
        )
        self.ended = meter.create_counter(
            "trio_delegate.runs.ended",
            unit="{run}",
            description="Runs that reached a terminal status, by status.",
        )
        meter.create_observable_up_down_counter(
            "trio_delegate.runs.live",
            callbacks=[self._observe_live],
            unit="{run}",
            description="Runs pending (waiting for a slot) or running, by status.",
        )
        self.duration = meter.create_histogram(
            "trio_delegate.run.duration",
            unit="s",
            description="Time from a run's admission to its end, waiting for a slot included.",
            explicit_bucket_boundaries_advisory=_RUN_SECONDS,
        )
        self.commit_seconds = meter.create_histogram(
            "trio_delegate.store.commit.duration",
            unit="s",
            description="Time the store writer took to commit one batch of records.",
            explicit_bucket_boundaries_advisory=_COMMIT_SECONDS,
        )
        self.commit_records = meter.create_histogram(
            "trio_delegate.store.commit.records",
            unit="{record}",
            description="Records the store writer committed in one transaction.",
            explicit_bucket_boundaries_advisory=_BATCH_RECORDS,
        )

    def move(self, subagent: str, leaving: str | None, entering: str | None) -> None:
        """A run of *subagent* leaves one live status and/or enters another."""
        live = self.live
        if leaving is not None:
            live[subagent, leaving] -= 1
        if entering is not None:
            key = (subagent, entering)
            live[key] = live.get(key, 0) + 1

    def _observe_live(self, options: metrics.CallbackOptions) -> Iterator[metrics.Observation]:
        # Called on the metric reader's thread: read a copy (copying a dict
        # of str keys is atomic under the GIL).
        for (subagent, status), count in self.live.copy().items():
            yield metrics.Observation(
                count, {"gen_ai.agent.name": subagent, "trio_delegate.status": status}
            )


#: The instruments of each meter provider, by identity (a provider need not be
#: hashable). Providers are few and live as long as the process.
_METERS: dict[int, tuple[metrics.MeterProvider, _Meters]] = {}


def _meters_for(provider: metrics.MeterProvider) -> _Meters:
    from . import __version__

    found = _METERS.get(id(provider))
    if found is None or found[0] is not provider:
        found = (provider, _Meters(provider.get_meter(INSTRUMENTATION_NAME, __version__)))
        _METERS[id(provider)] = found
    return found[1]


@final
class Telemetry:
    """Spans and metrics of one runtime's runs (a ``RunEvents``).

    Args:
        tracer_provider: where spans go; ``None`` for no spans.
        meter_provider: where metrics go; ``None`` for no metrics.
    """

    __slots__ = ("_anchor_ns", "_linked", "_meters", "_tracer")

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None,
        meter_provider: metrics.MeterProvider | None,
    ) -> None:
        from . import __version__

        # Span times follow the Trio clock, anchored to the wall clock now:
        # the real clock keeps them in step with other spans, and under a
        # MockClock a trace shows the virtual times the runs saw.
        self._anchor_ns = time.time_ns() - round(trio.current_time() * 1e9)
        self._tracer = (
            None
            if tracer_provider is None
            else tracer_provider.get_tracer(INSTRUMENTATION_NAME, __version__)
        )
        self._linked: OrderedDict[str, SpanContext] = OrderedDict()
        self._meters = None if meter_provider is None else _meters_for(meter_provider)

    def _ns(self, now: float) -> int:
        """Trio clock time *now* as a span timestamp (nanoseconds since the epoch)."""
        return self._anchor_ns + round(now * 1e9)

    # -- runs --------------------------------------------------------------------

    @_guarded
    def admitted(self, run: Run) -> None:
        """Open the run's span, as a child of the span current in the admitting task."""
        now = trio.current_time()
        state = run.telemetry = _RunState(now)
        subagent = run.subagent.name
        tracer = self._tracer
        if tracer is not None:
            attributes: dict[str, Any] = {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.provider.name": _PROVIDER,
                "gen_ai.agent.name": subagent,
                "trio_delegate.run_id": run.run_id,
                "trio_delegate.owner": run.owner,
                "trio_delegate.depth": run.depth,
            }
            description = run.subagent.description
            if description:
                attributes["gen_ai.agent.description"] = _text(description, _MAX_MESSAGE_CHARS)
            if run.replaces is not None:
                attributes["trio_delegate.replaces"] = run.replaces
            if run.timeout is not None:
                attributes["trio_delegate.timeout_seconds"] = float(run.timeout)
            span = tracer.start_span(
                f"invoke_agent {subagent}",
                kind=SpanKind.INTERNAL,
                attributes=attributes,
                start_time=self._ns(now),
            )
            state.span = span
            linked = self._linked
            linked[run.run_id] = span.get_span_context()
            if len(linked) > _LINKED_RUNS:
                linked.popitem(last=False)
        if self._meters is not None:
            self._meters.move(subagent, None, "pending")

    @_guarded
    def started(self, run: Run) -> None:
        """The run left ``pending``: an event, and the live count moves to ``running``."""
        state: _RunState | None = run.telemetry
        if state is None:
            return
        state.running = True
        if state.span is not None:
            state.span.add_event("trio_delegate.run.running", None, self._ns(trio.current_time()))
        meters = self._meters
        if meters is not None:
            subagent = run.subagent.name
            meters.started.add(1, {"gen_ai.agent.name": subagent})
            meters.move(subagent, "pending", "running")

    @_guarded
    def entered(self, run: Run) -> None:
        """Make the run's span current in the run's own task.

        The task's context ends with the task: nothing needs detaching.
        """
        state: _RunState | None = run.telemetry
        if state is not None and state.span is not None:
            otel_context.attach(trace.set_span_in_context(state.span))

    @_guarded
    def cancel_requested(self, run: Run, reason: CancelReason) -> None:
        """An event on the run's span, with the reason."""
        state: _RunState | None = run.telemetry
        if state is not None and state.span is not None:
            state.span.add_event(
                "trio_delegate.run.cancel_requested",
                {"trio_delegate.cancel_reason": reason.name.lower()},
                self._ns(trio.current_time()),
            )

    @_guarded
    def observed(self, run: Run) -> None:
        """An event on the span current where the result was handed out."""
        if self._tracer is None:
            return
        span = trace.get_current_span()
        if span.is_recording():
            span.add_event(
                "trio_delegate.run.observed",
                {"trio_delegate.run_id": run.run_id, "gen_ai.agent.name": run.subagent.name},
                self._ns(trio.current_time()),
            )

    @_guarded
    def ended(self, run: Run) -> None:
        """Count the run, and end its span with its outcome."""
        state: _RunState | None = run.telemetry
        if state is None:
            return
        now = trio.current_time()
        status = run.status
        subagent = run.subagent.name
        meters = self._meters
        if meters is not None:
            meters.move(subagent, "running" if state.running else "pending", None)
            ending = {"gen_ai.agent.name": subagent, "trio_delegate.status": status.value}
            meters.ended.add(1, ending)
            meters.duration.record(max(0.0, now - state.admitted), ending)
        span = state.span
        if span is None:
            return
        state.span = None
        ending_attributes: dict[str, Any] = {
            "trio_delegate.status": status.value,
            "trio_delegate.background": not run.foreground,
        }
        if run.continues is not None:
            ending_attributes["trio_delegate.continues"] = run.continues
        spent = run.spent
        if spent is not None and spent.own is not None:
            # What the run reported itself (contract §20); its nested runs'
            # spans carry theirs, so a trace's sums count each report once.
            _usage_attributes(ending_attributes, spent.own.usage())
        span.set_attributes(ending_attributes)
        outcome = run.outcome
        end = self._ns(now)
        if status is RunStatus.FAILED and outcome is not None and outcome.error is not None:
            kind, message = _failure(outcome, run.timeout)
            span.set_attribute("error.type", kind)
            _record_exception(span, outcome.error, kind, message, end)
            span.set_status(Status(StatusCode.ERROR, f"{kind}: {message}"))
        elif status is RunStatus.TIMED_OUT:
            if math.isfinite(run.deadline):
                span.add_event("trio_delegate.run.deadline_passed", None, self._ns(run.deadline))
            error = run.outcome_error()
            kind = _type_name(error)
            message = _message(error)
            span.set_attribute("error.type", kind)
            _record_exception(span, error, kind, message, end)
            span.set_status(Status(StatusCode.ERROR, message))
        elif status is RunStatus.CANCELLED:
            reason = run.cancel_reason or (outcome.reason if outcome is not None else None)
            if reason is not None:
                span.set_attribute("trio_delegate.cancel_reason", reason.name.lower())
        span.end(end)

    @_guarded
    def withdrawn(self, run: Run) -> None:
        """The admission was undone (its record could not be written): close the span so."""
        state: _RunState | None = run.telemetry
        if state is None:
            return
        if self._meters is not None:
            self._meters.move(run.subagent.name, "pending", None)
        span = state.span
        if span is None:
            return
        state.span = None
        self._linked.pop(run.run_id, None)
        span.set_attribute("trio_delegate.status", "withdrawn")
        span.set_status(
            Status(StatusCode.ERROR, "its admission could not be recorded: the run never started")
        )
        span.end(self._ns(trio.current_time()))

    # -- the store writer --------------------------------------------------------------

    @_guarded
    def committed(self, records: int, seconds: float) -> None:
        """One commit of the store writer: its latency and batch size."""
        meters = self._meters
        if meters is not None:
            meters.commit_seconds.record(seconds)
            meters.commit_records.record(records)

    # -- tool calls ------------------------------------------------------------------

    def tool_call(self, name: str, parent_owner: str) -> _ToolCall | _Joined:
        """A context around one tool call from a model: an ``execute_tool`` span.

        A tool call made within another one's span (the MCP server serves a
        foreground call as a start and a wait) joins it: one call, one span.
        """
        current = _CURRENT_TOOL_CALL.get()
        span = trace.get_current_span()
        if current is not None and current.span is not None and span is current.span:
            return _Joined(current)
        # A framework that traces its tool calls (Pydantic AI, say) already
        # has this call's span open: it is enriched rather than doubled.
        if isinstance(name, str) and getattr(span, "name", None) == f"execute_tool {name}":
            return _ToolCall(self, name, parent_owner, adopted=span)
        return _ToolCall(self, name, parent_owner)

    def _span_context(self, run_id: str) -> SpanContext | None:
        return self._linked.get(run_id)

    def _start_tool_span(self, name: str, owner: str) -> Span | None:
        tracer = self._tracer
        if tracer is None:
            return None
        shown = _text(name, _MAX_TOOL_NAME_CHARS) if isinstance(name, str) else "(not a name)"
        return tracer.start_span(
            f"execute_tool {shown}",
            kind=SpanKind.INTERNAL,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": shown,
                "gen_ai.tool.type": "function",
                "trio_delegate.owner": owner,
            },
            start_time=self._ns(trio.current_time()),
        )


_CURRENT_TOOL_CALL: contextvars.ContextVar[_ToolCall | None] = contextvars.ContextVar(
    "trio_delegate_tool_call", default=None
)


@final
class _ToolCall:
    """One ``execute_tool`` span, current while the call runs."""

    __slots__ = ("_adopted", "_owner", "_runs", "_telemetry", "_tokens", "name", "span")

    def __init__(
        self, telemetry: Telemetry, name: str, owner: str, adopted: Span | None = None
    ) -> None:
        self._telemetry = telemetry
        self.name = name
        self._owner = owner
        # A span someone else opened for this call: noted on, never ended here.
        self._adopted = adopted
        self.span: Span | None = None
        self._runs: list[str] = []
        self._tokens: (
            tuple[
                contextvars.Token[otel_context.Context] | None,
                contextvars.Token[_ToolCall | None],
            ]
            | None
        ) = None

    def __enter__(self) -> _ToolCall:
        try:
            adopted = self._adopted
            if adopted is not None:
                self.span = adopted
                adopted.set_attribute("trio_delegate.owner", self._owner)
                self._tokens = (None, _CURRENT_TOOL_CALL.set(self))
                return self
            span = self.span = self._telemetry._start_tool_span(self.name, self._owner)
            if span is not None:
                token = otel_context.attach(trace.set_span_in_context(span))
                self._tokens = (token, _CURRENT_TOOL_CALL.set(self))
        except Exception:
            logger.exception("trio_delegate telemetry failed to open a tool call's span")
        return self

    @_guarded
    def note_run(self, run_id: object) -> None:
        """The call touches run *run_id*: name it on the span and link the run's span."""
        span = self.span
        if span is None or type(run_id) is not str or run_id in self._runs:
            return
        self._runs.append(run_id)
        if len(self._runs) == 1:
            span.set_attribute("trio_delegate.run_id", run_id)
        linked = self._telemetry._span_context(run_id)
        if linked is not None:
            span.add_link(linked, {"trio_delegate.run_id": run_id})

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, _: Any
    ) -> None:
        self._close(error)

    @_guarded
    def _close(self, error: BaseException | None) -> None:
        tokens, self._tokens = self._tokens, None
        if tokens is not None:
            if tokens[0] is not None:
                otel_context.detach(tokens[0])
            _CURRENT_TOOL_CALL.reset(tokens[1])
        span = self.span
        if span is None:
            return
        if self._adopted is not None:
            # Its owner ends it, and records the error its own way.
            if error is not None:
                self.note_run(getattr(error, "run_id", None))
            return
        if error is not None:
            self.note_run(getattr(error, "run_id", None))
            kind = _type_name(error)
            span.set_attribute("error.type", kind)
            span.set_status(Status(StatusCode.ERROR, f"{kind}: {_message(error)}"))
        span.end(self._telemetry._ns(trio.current_time()))


@final
class _Joined:
    """A tool call inside another one's span: its runs are noted on that span."""

    __slots__ = ("_call",)

    def __init__(self, call: _ToolCall) -> None:
        self._call = call

    def __enter__(self) -> _ToolCall:
        return self._call

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, _: Any
    ) -> None:
        if error is not None:
            self._call.note_run(getattr(error, "run_id", None))
