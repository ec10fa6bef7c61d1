"""Row 11: what OpenTelemetry tracing costs per run, off and on.

Sequential foreground delegations (row 1's scenario), each contender in a
fresh process, since a process cannot unset OpenTelemetry's global
providers:

* ``absent`` — OpenTelemetry cannot be imported (the runtime as it was
  before it could trace);
* ``off`` — the API is loaded but no provider is set: the runtime looks
  once when it opens and then observes nothing;
* ``on`` — the SDK's tracer provider (a batch span processor, spans then
  dropped) and meter provider (an in-memory reader) are set: every run is a
  span with its events, and is counted.

Run as ``python -m benchmarks.bench_tracing MODE RUNS`` it measures one
contender and prints its seconds as JSON.
"""

from __future__ import annotations

import functools
import importlib.abc
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import trio

from . import _delegate
from ._model import Figure, Options, Row, Status, judge, paired_ratios
from ._timing import interleaved

__all__ = ["OFF_RATIO", "bench"]

#: off / absent, µs per run: (target, must not exceed). Off must be within noise.
OFF_RATIO = (1.05, 1.25)

_ROOT = Path(__file__).resolve().parent.parent
_MODES = ("absent", "off", "on")


class _Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ImportError(f"No module named {name!r}")


def _set_up(mode: str) -> None:
    if mode == "absent":
        sys.meta_path.insert(0, _Absent())
        return
    from opentelemetry import metrics, trace

    if mode == "off":
        return
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Dropped(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(Dropped()))
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))


def _probe(mode: str, runs: int) -> float:
    _set_up(mode)
    trio.run(_delegate.foreground, min(runs, 500))  # warm every path up
    seconds: float = trio.run(_delegate.foreground, runs)
    return seconds


def _measure(mode: str, runs: int) -> float:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_tracing", mode, str(runs)],
        capture_output=True,
        text=True,
        check=True,
        cwd=_ROOT,
        timeout=600,
    )
    seconds: float = json.loads(done.stdout)["seconds"]
    return seconds


def bench(options: Options) -> list[Row]:
    try:
        import opentelemetry.sdk  # noqa: F401
    except ImportError:
        note = "needs opentelemetry-sdk (the dev extra)"
        return [Row("11", "Tracing: cost per run, off and on", Status.NOT_AVAILABLE, note=note)]
    runs = 20_000 if options.full else 5_000
    # Each measurement starts a process: the quick suite takes fewer of them.
    repetitions = options.repetitions if options.full else 3
    samples = interleaved(
        {mode: functools.partial(_measure, mode, runs) for mode in _MODES},
        repetitions,
        per=runs,
    )
    us = {mode: sample.scaled(1e6) for mode, sample in samples.items()}
    off = paired_ratios(us["off"], us["absent"])
    on = paired_ratios(us["on"], us["off"])
    target, bound = OFF_RATIO
    return [
        Row(
            "11a",
            "Tracing off: foreground delegate with OpenTelemetry loaded, no provider set",
            judge(off.median, target, bound),
            baseline=f"absent {us['absent'].show('{:.1f}', 'µs')}",
            measured=us["off"].show("{:.1f}", "µs"),
            comparison=f"{off.show('{:.3f}', 'x')} absent",
            target=f"≤ {target:g}x",
            bound=f"≤ {bound:g}x",
            note=f"µs per run, {runs:,} runs per process, one fresh process per contender",
            data={"runs": runs, **{m: s.to_json() for m, s in us.items()}, "off": off.to_json()},
            figures=(Figure("off ratio", off.median, 0.05),),
        ),
        Row(
            "11b",
            "Tracing on: the SDK's tracer and meter providers set (spans dropped after export)",
            Status.INFO,
            baseline=f"off {us['off'].show('{:.1f}', 'µs')}",
            measured=us["on"].show("{:.1f}", "µs"),
            comparison=f"{on.show('{:.2f}', 'x')} off",
            note=f"+{us['on'].median - us['off'].median:.1f} µs per run for its span, its "
            "events and its metrics",
            data={"on_vs_off": on.to_json()},
            figures=(Figure("on ratio", on.median, 0.10),),
        ),
    ]


if __name__ == "__main__":
    print(json.dumps({"seconds": _probe(sys.argv[1], int(sys.argv[2]))}))
