"""The soak's measurements and its report (used by ``tools/soak.py``).

Each worker process samples itself every :data:`SAMPLE_SECONDS`: its
resident memory, how many calls its parents had answered, and the longest
step the Trio event loop took since the last sample, in CPU time of the
loop's thread (a :class:`StepTimer` instrument times every task step with
``time.thread_time()``, so a step that waits on nothing but the CPU counts,
and a process stopped by SIGSTOP does not). The samples go to
``samples/<process>.jsonl`` beside its history.

At the end the driver reads them with the histories and the checker's
:class:`trio_delegate.testing.HistoryReport` and writes ``summary.json`` and
(when matplotlib is installed: the ``bench`` dependency group) ``soak.png``
into the output folder, then prints the report.
"""

from __future__ import annotations

import importlib
import itertools
import json
import os
import statistics
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import trio

import trio_delegate.testing as tdt

#: How often a worker samples itself (seconds, wall clock).
SAMPLE_SECONDS = 1.0
#: The samples of the first seconds of each process are its warm-up: left
#: out of the memory verdict (imports, caches and pools fill up then).
WARM_UP_SECONDS = 20.0
#: Resident memory may grow this much after warm-up before the report calls it growth.
FLAT_MIB = 8.0
MIB = 1024 * 1024


class StepTimer(trio.abc.Instrument):
    """The longest task step since the last :meth:`take`, in CPU time of the loop's thread."""

    def __init__(self) -> None:
        self.longest = 0.0
        self.longest_task = ""
        self._began = 0.0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._began = time.thread_time()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        step = time.thread_time() - self._began
        if step > self.longest:
            self.longest, self.longest_task = step, task.name

    def take(self) -> tuple[float, str]:
        """The longest step since the last call and the task that took it; start over."""
        taken = self.longest, self.longest_task
        self.longest, self.longest_task = 0.0, ""
        return taken


def rss_bytes() -> int:
    """This process's resident memory now (Linux ``/proc``, else its peak so far)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def append_sample(path: Path, *, answered: int, events: int, longest: float, task: str) -> None:
    """Append one sample line to *path*: now, this process's RSS, and the given counts.

    Appended and closed each time: a killed process leaves every sample it took.
    """
    line = {
        "wall_time": time.time(),
        "rss": rss_bytes(),
        "answered": answered,
        "events": events,
        "longest_step": longest,
        "longest_task": task,
    }
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


class Sampler:
    """Appends one JSON line per sample to *path*: wall time, RSS, answers, longest step.

    The answers and events counted are *recorder*'s, and those of every
    recorder it followed before (:meth:`follow`).
    """

    def __init__(self, path: Path, recorder: tdt.HistoryRecorder, timer: StepTimer) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.recorder = recorder
        self.timer = timer
        self._answered_before = self._recorded_before = 0

    def follow(self, recorder: tdt.HistoryRecorder) -> None:
        """Count *recorder*'s answers and events from now on, after the current one's."""
        if recorder is not self.recorder:
            self._answered_before += self.recorder.answered
            self._recorded_before += self.recorder.recorded
            self.recorder = recorder

    @property
    def recorded(self) -> int:
        """Events recorded by every recorder followed so far."""
        return self._recorded_before + self.recorder.recorded

    def sample(self) -> None:
        longest, task = self.timer.take()
        append_sample(
            self.path,
            answered=self._answered_before + self.recorder.answered,
            events=self.recorded,
            longest=longest,
            task=task,
        )

    async def run(self) -> None:
        """Sample every :data:`SAMPLE_SECONDS` until cancelled."""
        while True:
            self.sample()
            await trio.sleep(SAMPLE_SECONDS)


def read_samples(directory: Path) -> dict[str, list[dict[str, Any]]]:
    """Every process's samples, by process name (whole lines only)."""
    found: dict[str, list[dict[str, Any]]] = {}
    for path in sorted((directory / "samples").glob("*.jsonl")):
        rows = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue  # a line cut by a kill
        found[path.stem] = rows
    return found


def last_answered(path: Path) -> int | None:
    """The calls answered in the last whole sample of *path*, if it has one."""
    try:
        lines = path.read_bytes().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            answered: int = json.loads(line)["answered"]
        except (ValueError, KeyError):
            continue  # a line cut short
        return answered
    return None


def open_calls(path: Path) -> list[tdt.HistoryEvent]:
    """The calls of the history at *path* that were never answered, in order."""
    events = tdt.read_history(path)
    answered = {e.call for e in events if e.phase in ("returned", "raised")}
    return [e for e in events if e.phase == "call" and e.call not in answered]


def _memory(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """RSS after warm-up: its first and last medians, and whether it stayed flat."""
    if not rows:
        return {"samples": 0}
    began = rows[0]["wall_time"]
    settled = [r["rss"] / MIB for r in rows if r["wall_time"] - began >= WARM_UP_SECONDS]
    summary: dict[str, Any] = {
        "samples": len(rows),
        "peak_mib": round(max(r["rss"] for r in rows) / MIB, 1),
    }
    if len(settled) < 6:
        summary["flat"] = None  # too short past warm-up to say
        return summary
    third = len(settled) // 3
    first, last = statistics.median(settled[:third]), statistics.median(settled[-third:])
    summary.update(
        after_warm_up_mib=round(first, 1),
        at_end_mib=round(last, 1),
        growth_mib=round(last - first, 1),
        flat=last - first <= FLAT_MIB,
    )
    return summary


def throughput(
    samples: Mapping[str, Sequence[Mapping[str, Any]]], began: float
) -> list[list[float]]:
    """Calls answered per second by all processes, per :data:`SAMPLE_SECONDS` interval:
    ``[[seconds since the start, calls per second], ...]``."""
    buckets: Counter[int] = Counter()
    for rows in samples.values():
        for before, after in itertools.pairwise(rows):
            slot = int((after["wall_time"] - began) // SAMPLE_SECONDS)
            buckets[slot] += after["answered"] - before["answered"]
    return [
        [slot * SAMPLE_SECONDS, round(count / SAMPLE_SECONDS, 1)]
        for slot, count in sorted(buckets.items())
    ]


def summarize(
    *,
    seed: int,
    replay: str,
    histories: Sequence[Sequence[tdt.HistoryEvent]],
    report: tdt.HistoryReport,
    faults: Mapping[str, int],
    samples: Mapping[str, Sequence[Mapping[str, Any]]],
    began: float,
    elapsed: float,
) -> dict[str, Any]:
    """The report as JSON-ready data."""
    calls = Counter(e.op for history in histories for e in history if e.phase == "call")
    raised = Counter(e.op for history in histories for e in history if e.phase == "raised")
    longest = max(
        (
            (row["longest_step"], name, row.get("longest_task"))
            for name, rows in samples.items()
            for row in rows
        ),
        default=(0.0, None, None),
    )
    rates = [rate for _, rate in throughput(samples, began)]
    memory = {name: _memory(rows) for name, rows in samples.items()}
    return {
        "seed": seed,
        "replay": replay,
        "seconds": round(elapsed, 1),
        "calls": sum(calls.values()),
        "calls_by_op": dict(sorted(calls.items())),
        "raised_by_op": dict(sorted(raised.items())),
        "faults": dict(faults),
        "violations": len(report.violations),
        "checked": dict(report.checked),
        "events": report.events,
        "records": report.records,
        "throughput": {
            "mean_calls_per_second": round(sum(calls.values()) / max(elapsed, 1e-9), 1),
            "median_interval": statistics.median(rates) if rates else None,
            "series": throughput(samples, began),
        },
        "memory": memory,
        "memory_flat": all(m.get("flat") is not False for m in memory.values()),
        "longest_step_seconds": round(longest[0], 4),
        "longest_step_process": longest[1],
        "longest_step_task": longest[2],
        "violation_texts": [str(v) for v in report.violations],
    }


def draw(summary: Mapping[str, Any], samples: Mapping[str, Any], began: float, path: Path) -> bool:
    """Throughput, memory and the longest step over time, as a PNG; False without matplotlib."""
    try:
        matplotlib = importlib.import_module("matplotlib")
    except ImportError:
        return False
    matplotlib.use("Agg")
    plt = importlib.import_module("matplotlib.pyplot")
    figure, (rate_axes, memory_axes, step_axes) = plt.subplots(3, 1, figsize=(10, 9), sharex=True)
    series = summary["throughput"]["series"]
    if series:
        xs, ys = zip(*series, strict=True)
        rate_axes.plot(xs, ys, color="tab:blue")
    rate_axes.set_ylabel("calls answered / s")
    rate_axes.set_title(f"soak, seed {summary['seed']}: throughput (all processes)")
    for name, rows in sorted(samples.items()):
        times = [row["wall_time"] - began for row in rows]
        # Markers too: a process killed early may have a single sample.
        memory_axes.plot(times, [row["rss"] / MIB for row in rows], ".-", label=name)
        step_axes.plot(times, [row["longest_step"] * 1000 for row in rows], ".-", label=name)
    if summary["seconds"] > WARM_UP_SECONDS:
        memory_axes.axvline(WARM_UP_SECONDS, color="grey", linestyle=":", label="warm-up")
    memory_axes.set_ylabel("RSS (MiB)")
    memory_axes.set_title("resident memory per process (flat after warm-up)")
    step_axes.set_ylabel("ms (CPU)")
    step_axes.set_yscale("log")
    step_axes.set_title("longest event-loop step per interval")
    step_axes.set_xlabel("seconds since the start")
    for axes in (rate_axes, memory_axes, step_axes):
        axes.grid(True, alpha=0.3)
    memory_axes.legend(fontsize="small", ncol=4)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return True


def write_report(
    out: Path, summary: dict[str, Any], samples: Mapping[str, Any], began: float
) -> None:
    """Write ``summary.json`` and ``soak.png`` into *out*, and print the report."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    drawn = draw(summary, samples, began, out / "soak.png")
    print(f"soak report (seed {summary['seed']}, {summary['seconds']:g} s):")
    ops = ", ".join(f"{op} {n}" for op, n in summary["calls_by_op"].items())
    print(f"  calls: {summary['calls']} ({ops})")
    faults = ", ".join(f"{what} {n}" for what, n in summary["faults"].items()) or "none"
    print(f"  faults: {faults}")
    rate = summary["throughput"]
    print(
        f"  throughput: {rate['mean_calls_per_second']:g} calls/s on average, "
        f"median interval {rate['median_interval']}"
    )
    for name, memory in summary["memory"].items():
        if memory.get("flat") is None:
            print(f"  memory {name}: peak {memory.get('peak_mib')} MiB (too short to judge)")
        else:
            verdict = "flat" if memory["flat"] else f"GREW (more than {FLAT_MIB:g} MiB)"
            print(
                f"  memory {name}: {memory['after_warm_up_mib']} MiB after warm-up, "
                f"{memory['at_end_mib']} MiB at the end: {verdict}"
            )
    print(
        f"  longest event-loop step: {summary['longest_step_seconds'] * 1000:.1f} ms CPU "
        f"({summary['longest_step_process']}, task {summary.get('longest_step_task')})"
    )
    checked = ", ".join(f"{name} {n}" for name, n in summary["checked"].items())
    print(f"  checked: {checked}")
    print(f"  violations: {summary['violations']}")
    print(f"  summary: {out / 'summary.json'}")
    if drawn:
        print(f"  plot: {out / 'soak.png'}")
    else:
        print("  plot: not drawn (matplotlib is in the bench group: uv pip install --group bench)")
