"""The vocabulary of the benchmark suite: options, samples, rows and verdicts."""

from __future__ import annotations

import enum
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["KIB", "MIB", "Options", "Row", "Sample", "Status", "judge", "paired_ratios"]

KIB = 1024
MIB = 1024 * 1024


class Status(enum.Enum):
    """The verdict of one row."""

    PASS = "pass"
    ABOVE_TARGET = "above target"
    FAIL = "FAIL"
    INFO = "info"
    NOT_AVAILABLE = "not available"
    ERROR = "ERROR"

    @property
    def breaks_build(self) -> bool:
        """Whether ``make bench`` must exit non-zero because of this row."""
        return self in (Status.FAIL, Status.ERROR)


@dataclass(frozen=True)
class Options:
    """How big and how often: ``quick`` for ``make bench``, ``full`` for ``make bench-full``.

    Attributes:
        full: the full suite (bigger sizes, growth curves, plots, docs update).
        repetitions: measured repetitions of every in-process timing.
        foreground_children: sequential foreground delegations per repetition.
        background_children: background runs started, then waited, per repetition.
        live_runs: live runs held for the close-time and memory rows.
        close_repetitions: fresh processes per kind for the close-time row.
        memory_repetitions: fresh processes per kind for the memory row.
        retention_runs: sequential completed runs of the retention row.
        curve_sizes: live-run counts of the growth curves (full only).
    """

    full: bool
    repetitions: int
    foreground_children: int
    background_children: int
    live_runs: int
    close_repetitions: int
    memory_repetitions: int
    retention_runs: int
    curve_sizes: tuple[int, ...] = ()

    @classmethod
    def quick(cls) -> Options:
        return cls(
            full=False,
            repetitions=5,
            foreground_children=10_000,
            background_children=10_000,
            live_runs=100_000,
            close_repetitions=3,
            memory_repetitions=1,
            retention_runs=100_000,
        )

    @classmethod
    def complete(cls) -> Options:
        return cls(
            full=True,
            repetitions=9,
            foreground_children=20_000,
            background_children=10_000,
            live_runs=100_000,
            close_repetitions=5,
            memory_repetitions=3,
            retention_runs=1_000_000,
            curve_sizes=(1_000, 3_000, 10_000, 30_000, 100_000),
        )


@dataclass(frozen=True)
class Sample:
    """Repeated measurements of one figure; reported as median and spread."""

    values: tuple[float, ...]

    @classmethod
    def of(cls, values: Sequence[float]) -> Sample:
        if not values:
            raise ValueError("a sample needs at least one value")
        return cls(tuple(values))

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def low(self) -> float:
        return min(self.values)

    @property
    def high(self) -> float:
        return max(self.values)

    def scaled(self, factor: float) -> Sample:
        return Sample(tuple(value * factor for value in self.values))

    def show(self, fmt: str = "{:.1f}", unit: str = "") -> str:
        """``median [min-max] unit``; the range is left out for a single value."""
        text = fmt.format(self.median)
        if len(self.values) > 1:
            text += f" [{fmt.format(self.low)}-{fmt.format(self.high)}]"
        return f"{text} {unit}".rstrip()

    def to_json(self) -> dict[str, Any]:
        return {
            "median": self.median,
            "min": self.low,
            "max": self.high,
            "values": list(self.values),
        }


def paired_ratios(measured: Sample, baseline: Sample) -> Sample:
    """Per-repetition ratios of two samples taken side by side, in the same order."""
    if len(measured.values) != len(baseline.values):
        raise ValueError("paired samples must have the same number of repetitions")
    return Sample(tuple(m / b for m, b in zip(measured.values, baseline.values, strict=True)))


def judge(value: float, target: float | None, bound: float | None) -> Status:
    """``PASS`` within the target, ``ABOVE_TARGET`` within the bound, else ``FAIL``."""
    if bound is not None and value > bound:
        return Status.FAIL
    if target is not None and value > target:
        return Status.ABOVE_TARGET
    if target is None and bound is None:
        return Status.INFO
    return Status.PASS


@dataclass(frozen=True)
class Row:
    """One line of the results table.

    Every text column is already formatted; *data* keeps the raw figures for
    the JSON record and the plots.
    """

    number: str
    title: str
    status: Status
    baseline: str = ""
    measured: str = ""
    comparison: str = ""
    target: str = ""
    bound: str = ""
    note: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "title": self.title,
            "status": self.status.value,
            "baseline": self.baseline,
            "measured": self.measured,
            "comparison": self.comparison,
            "target": self.target,
            "bound": self.bound,
            "note": self.note,
            "data": self.data,
        }
