"""The growth curves of the full suite, drawn with matplotlib (the bench dependency group)."""

from __future__ import annotations

import importlib
import statistics
from pathlib import Path
from typing import Any

from ._model import MIB

__all__ = ["PLOTS", "draw_plots"]

#: File names of the plots, written beside docs/performance.md.
PLOTS = {
    "memory": "memory-vs-live-runs.png",
    "time": "time-vs-runs.png",
    "retention": "retention.png",
}

_LABELS = {
    "bare": "bare Trio",
    "scoped": "scoped Trio",
    "checkpointed": "scoped Trio, checkpointing start",
    "delegate": "trio_delegate",
    "asyncio": "asyncio reference",
}
_KINDS = ("bare", "scoped", "delegate")


def _pyplot() -> Any:
    matplotlib = importlib.import_module("matplotlib")
    matplotlib.use("Agg")
    return importlib.import_module("matplotlib.pyplot")


def _median(probes: list[dict[str, Any]], key: str) -> float | None:
    values = [probe[key] for probe in probes if probe.get(key) is not None]
    return statistics.median(values) if values else None


def _memory(plt: Any, live: dict[int, Any], path: Path) -> None:
    sizes = sorted(live)
    figure, (traced_axes, rss_axes) = plt.subplots(1, 2, figsize=(11, 4.2))
    for kind in _KINDS:
        traced_points = [
            (size, per_run * size / MIB)
            for size in sizes
            if (per_run := _median(live[size]["traced"].get(kind, []), "traced_per_run"))
            is not None
        ]
        if traced_points:
            xs, ys = zip(*traced_points, strict=True)
            traced_axes.plot(xs, ys, marker="o", label=_LABELS[kind])
        rss_points = [
            (size, (_median(live[size]["untraced"][kind], "rss_per_run") or 0.0) * size / MIB)
            for size in sizes
            if live[size]["untraced"].get(kind)
        ]
        if rss_points:
            xs, ys = zip(*rss_points, strict=True)
            rss_axes.plot(xs, ys, marker="o", label=_LABELS[kind])
    traced_axes.set_title("Memory held by live runs (tracemalloc)")
    rss_axes.set_title("Resident memory added by live runs (RSS)")
    for axes in (traced_axes, rss_axes):
        axes.set_xscale("log")
        axes.set_yscale("log")
        axes.set_xlabel("live runs")
        axes.set_ylabel("MiB")
        axes.grid(True, alpha=0.3)
        axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _time(plt: Any, background: dict[str, Any], live: dict[int, Any], path: Path) -> None:
    figure, (start_axes, close_axes) = plt.subplots(1, 2, figsize=(11, 4.2))
    sizes = background.get("sizes", [])
    for kind in (*_KINDS, "checkpointed", "asyncio"):
        if kind in background:
            start_axes.plot(sizes, background[kind], marker="o", label=_LABELS[kind])
    start_axes.set_xscale("log")
    start_axes.set_title("Background: start N runs, then wait for all")
    start_axes.set_xlabel("runs")
    start_axes.set_ylabel("µs per run")
    live_sizes = sorted(live)
    for kind in _KINDS:
        points = [
            (size, seconds)
            for size in live_sizes
            if (seconds := _median(live[size]["untraced"].get(kind, []), "close_seconds"))
            is not None
        ]
        if points:
            xs, ys = zip(*points, strict=True)
            close_axes.plot(xs, ys, marker="o", label=_LABELS[kind])
    close_axes.set_xscale("log")
    close_axes.set_yscale("log")
    close_axes.set_title("Close everything holding N live runs")
    close_axes.set_xlabel("live runs")
    close_axes.set_ylabel("seconds")
    for axes in (start_axes, close_axes):
        axes.grid(True, alpha=0.3)
        axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _retention(plt: Any, points: list[dict[str, Any]], path: Path) -> None:
    figure, (rss_axes, time_axes) = plt.subplots(1, 2, figsize=(11, 4.2))
    runs = [point["runs"] for point in points]
    rss_axes.plot(runs, [point["rss"] / MIB for point in points], marker=".")
    rss_axes.set_title("Resident memory, default retention")
    rss_axes.set_xlabel("completed runs")
    rss_axes.set_ylabel("RSS (MiB)")
    rss_axes.set_ylim(bottom=0)
    timed = [point for point in points if point["us"] is not None]
    time_axes.plot([point["runs"] for point in timed], [point["us"] for point in timed], ".-")
    time_axes.set_title("Time per foreground run, by chunk")
    time_axes.set_xlabel("completed runs")
    time_axes.set_ylabel("µs per run")
    time_axes.set_ylim(bottom=0)
    for axes in (rss_axes, time_axes):
        axes.grid(True, alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def draw_plots(curves: dict[str, Any], directory: Path) -> list[Path]:
    """Draw every curve present in *curves* into *directory*; returns the files."""
    plt = _pyplot()
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    live = curves.get("live", {})
    if live:
        path = directory / PLOTS["memory"]
        _memory(plt, live, path)
        written.append(path)
    if live or curves.get("background"):
        path = directory / PLOTS["time"]
        _time(plt, curves.get("background", {}), live, path)
        written.append(path)
    if curves.get("retention"):
        path = directory / PLOTS["retention"]
        _retention(plt, curves["retention"], path)
        written.append(path)
    return written
