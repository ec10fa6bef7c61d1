"""The vocabulary of the benchmark suite: options, samples, rows and verdicts."""

from __future__ import annotations

import enum
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "KIB",
    "MIB",
    "Figure",
    "Options",
    "Row",
    "Sample",
    "Status",
    "agree",
    "judge",
    "paired_ratios",
    "reproduced",
]

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
    NOT_REPRODUCED = "did not reproduce"

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
        passes: how many times the whole suite runs; a figure is published
            only when every pass agrees on it (see :func:`reproduced`).
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
    passes: int = 1

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
            passes=3,
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
    """Per-repetition ratios of two samples taken side by side, in the same order.

    Its median, the median of the paired ratios, is the figure a row reports:
    each repetition's ratio compares two measurements taken back to back, so
    a slow spell of the machine moves both sides of a ratio, not one side of
    a ratio of medians.
    """
    if len(measured.values) != len(baseline.values):
        raise ValueError("paired samples must have the same number of repetitions")
    return Sample(tuple(m / b for m, b in zip(measured.values, baseline.values, strict=True)))


@dataclass(frozen=True)
class Figure:
    """A number a row publishes, and how closely passes must agree on it.

    Attributes:
        name: what it is ("ratio", "µs per call", ...), for the notes.
        value: the number.
        tolerance: the largest disagreement between passes that still
            counts as the same figure: relative to the median of the passes
            (0.05 is 5 %), or in the figure's own unit when *absolute*.
        absolute: whether *tolerance* is in the figure's unit.
    """

    name: str
    value: float
    tolerance: float
    absolute: bool = False


def agree(values: Sequence[float], tolerance: float, *, absolute: bool = False) -> bool:
    """Whether *values* (one per pass) lie within *tolerance* of each other.

    Relative: the spread (largest minus smallest) is at most *tolerance*
    times the magnitude of their median. Absolute: the spread is at most
    *tolerance*.
    """
    if not values:
        raise ValueError("agreement needs at least one value")
    spread = max(values) - min(values)
    if absolute:
        return spread <= tolerance
    return spread <= tolerance * abs(statistics.median(values))


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
    figures: tuple[Figure, ...] = ()

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
            "figures": {figure.name: figure.value for figure in self.figures},
        }


def _fmt(value: float) -> str:
    return f"{value:.3g}"


def reproduced(passes: Sequence[Sequence[Row]]) -> list[Row]:
    """One row per number, from passes of the whole suite: what may be published.

    A row whose figures every pass agrees on (:func:`agree`, each within its
    tolerance) is published as measured by the pass whose first figure is
    the median, with the passes' figures in its note. A row on which the
    passes disagree is published without its figures: its status is
    ``did not reproduce`` and its note lists what each pass measured. Rows
    without figures (errors, slots not built) come from the first pass.
    """
    if not passes:
        raise ValueError("reproduction needs at least one pass")
    published: list[Row] = []
    for first in passes[0]:
        rows = [row for rows in passes for row in rows if row.number == first.number]
        if len(passes) == 1 or not first.figures or len(rows) != len(passes):
            published.append(first)
            continue
        names = [figure.name for figure in first.figures]
        by_name = {
            name: [next(f.value for f in row.figures if f.name == name) for row in rows]
            for name in names
            if all(any(f.name == name for f in row.figures) for row in rows)
        }
        disagreeing = [
            figure.name
            for figure in first.figures
            if figure.name not in by_name
            or not agree(by_name[figure.name], figure.tolerance, absolute=figure.absolute)
        ]
        listing = "; ".join(
            f"{name}: {' / '.join(_fmt(value) for value in values)}"
            for name, values in by_name.items()
        )
        if disagreeing:
            published.append(
                Row(
                    first.number,
                    first.title,
                    Status.NOT_REPRODUCED,
                    target=first.target,
                    bound=first.bound,
                    measured="not published",
                    comparison=f"{len(passes)} passes disagree on {', '.join(disagreeing)}",
                    note=f"figures of the {len(passes)} passes: {listing}",
                    data={"passes": [row.to_json() for row in rows]},
                    figures=first.figures,
                )
            )
            continue
        primary = by_name[names[0]]
        order = sorted(range(len(rows)), key=primary.__getitem__)
        chosen = rows[order[(len(rows) - 1) // 2]]
        note = f"reproduced in {len(passes)} passes ({listing})"
        published.append(
            Row(
                chosen.number,
                chosen.title,
                chosen.status,
                baseline=chosen.baseline,
                measured=chosen.measured,
                comparison=chosen.comparison,
                target=chosen.target,
                bound=chosen.bound,
                note=f"{chosen.note}; {note}" if chosen.note else note,
                data=chosen.data | {"passes": [row.to_json() for row in rows]},
                figures=chosen.figures,
            )
        )
    return published
