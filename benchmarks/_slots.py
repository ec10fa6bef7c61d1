"""Rows measured by optional modules, one per layer built separately.

A slot's row comes from ``benchmarks/<module>.py`` when that module exists.
The module defines::

    def bench(options: benchmarks._model.Options) -> Row | Sequence[Row]

returning rows numbered as its slot (``"6"``; ``"6a"``, ``"6b"`` for several),
each measured against its baseline in the same run like every other row.
Until the module exists, the slot prints as "not available".
"""

from __future__ import annotations

import importlib
import importlib.util
import traceback
from collections.abc import Sequence
from dataclasses import dataclass

from ._model import Options, Row, Status

__all__ = ["SLOTS", "Slot", "slot_rows"]


@dataclass(frozen=True)
class Slot:
    number: str
    title: str
    module: str
    missing: str


SLOTS = (
    Slot(
        "6",
        "Tool dispatch: DelegationTools.call with JSON-string arguments (µs per call)",
        "bench_tools",
        "no tool-dispatch benchmark yet (benchmarks/bench_tools.py)",
    ),
    Slot(
        "7",
        "Deterministic simulation: 10,000 runs over 24 virtual hours, autojump MockClock "
        "(wall seconds)",
        "bench_simulation",
        "no simulation benchmark yet (benchmarks/bench_simulation.py)",
    ),
    Slot(
        "8",
        "SQLiteStore with group commit vs no store (throughput)",
        "bench_sqlite",
        "no durable-store benchmark yet (benchmarks/bench_sqlite.py)",
    ),
    Slot(
        "10",
        "PostgresStore vs SQLiteStore vs no store (throughput, change latency)",
        "bench_postgres",
        "no PostgreSQL benchmark yet (benchmarks/bench_postgres.py)",
    ),
    Slot(
        "11",
        "Tracing: cost per run with OpenTelemetry off and on (µs per run)",
        "bench_tracing",
        "no tracing benchmark yet (benchmarks/bench_tracing.py)",
    ),
    Slot(
        "12",
        "serve: spawn to first answer, idle and with one core busy (wall ms)",
        "bench_startup",
        "no start-up benchmark yet (benchmarks/bench_startup.py)",
    ),
    Slot(
        "13",
        "Temporal: runs through the runtime vs plain asyncio, runs per second",
        "bench_temporal",
        "no Temporal benchmark yet (benchmarks/bench_temporal.py)",
    ),
    Slot(
        "14",
        "Progress, questions and usage reports against raw Trio",
        "bench_talk",
        "no benchmark of progress, questions and usage yet (benchmarks/bench_talk.py)",
    ),
    Slot(
        "15",
        "Model subagents: per model turn against the SDK, memory per live model run",
        "bench_models",
        "no model subagent benchmark yet (benchmarks/bench_models.py)",
    ),
)


def _one(slot: Slot, options: Options) -> list[Row]:
    name = f"{__package__}.{slot.module}"
    if importlib.util.find_spec(name) is None:
        return [Row(slot.number, slot.title, Status.NOT_AVAILABLE, note=slot.missing)]
    try:
        module = importlib.import_module(name)
        produced: Row | Sequence[Row] = module.bench(options)
    except Exception as exc:
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        return [Row(slot.number, slot.title, Status.ERROR, note=f"{name} raised: {detail}")]
    return [produced] if isinstance(produced, Row) else list(produced)


def slot_rows(options: Options) -> list[Row]:
    """The rows of every slot: measured when its module exists, else "not available"."""
    rows: list[Row] = []
    for slot in SLOTS:
        rows.extend(_one(slot, options))
    return rows
