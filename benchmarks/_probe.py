"""Measurements that need a fresh process each, so resident memory means something.

Run as ``python -m benchmarks._probe <probe> <json-arguments>``; prints one
JSON object on stdout. The parent side is :func:`run_probe`.

* ``live`` — hold ``runs`` live children of ``kind`` (``bare``, ``scoped``
  or ``delegate``), record memory once they are all parked, then close
  everything and time the close. With ``traced`` the memory is also counted
  by :mod:`tracemalloc` (which slows allocation, so close times of a traced
  probe are not reported).
* ``retention`` — ``runs`` sequential foreground delegations under the
  default config, sampling resident memory, live Python objects and the
  time per run ``samples`` times.
* ``count`` — one timed scenario (see :data:`COUNTED`) of ``runs`` runs after
  a warm-up, and nothing else: run under ``valgrind --tool=callgrind`` by
  :mod:`benchmarks._instructions` to count the instructions it executes.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import tracemalloc
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any, NoReturn

import trio

import trio_delegate as td

from . import _delegate, _trio_baselines
from ._timing import clock

__all__ = ["COUNTED", "resident_bytes", "run_probe"]

_PROJECT_ROOT = Path(__file__).resolve().parent.parent
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def resident_bytes() -> int:
    """The resident set size of this process now (Linux: ``/proc/self/statm``)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * _PAGE_SIZE
    except OSError:  # pragma: no cover - not Linux: fall back to the peak
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _hold(kind: str, runs: int, measure: Any) -> float:
    if kind == "delegate":
        return trio.run(_delegate.hold_and_close, runs, measure)
    if kind == "bare":
        return trio.run(_trio_baselines.hold_and_close, "bare", runs, measure)
    if kind == "scoped":
        return trio.run(_trio_baselines.hold_and_close, "scoped", runs, measure)
    raise ValueError(f"unknown kind {kind!r}")


def _live(kind: str, runs: int, traced: bool) -> dict[str, Any]:
    # Warm every code path up first, so that first-use allocations (caches,
    # lazily built helpers) are not charged to the runs.
    _hold(kind, 64, lambda label: None)
    gc.collect()
    if traced:
        tracemalloc.start()
    marks: dict[str, tuple[int, int]] = {}

    def measure(label: str) -> None:
        # The cyclic collector is paused while the runs are set up (that is not
        # what is measured, and it would triple the set-up time); it runs in
        # full before each reading and is back on for the timed close.
        gc.enable()
        gc.collect()
        traced_now = tracemalloc.get_traced_memory()[0] if traced else 0
        marks[label] = (resident_bytes(), traced_now)
        if label == "empty":
            gc.disable()
        elif traced:
            # A traced probe reports memory only: skip the close and the
            # interpreter's teardown of a large heap.
            _answer(_live_answer(kind, runs, traced, None, marks))

    close_seconds = _hold(kind, runs, measure)
    return _live_answer(kind, runs, traced, close_seconds, marks)


def _live_answer(
    kind: str,
    runs: int,
    traced: bool,
    close_seconds: float | None,
    marks: dict[str, tuple[int, int]],
) -> dict[str, Any]:
    (rss_empty, traced_empty), (rss_live, traced_live) = marks["empty"], marks["live"]
    return {
        "kind": kind,
        "runs": runs,
        "traced": traced,
        "close_seconds": close_seconds,
        "rss_empty": rss_empty,
        "rss_live": rss_live,
        "rss_per_run": (rss_live - rss_empty) / runs,
        "traced_per_run": (traced_live - traced_empty) / runs if traced else None,
    }


def _answer(result: dict[str, Any]) -> NoReturn:
    """Print *result* and leave at once, skipping the teardown of a large heap."""
    sys.stdout.write(json.dumps(result))
    sys.stdout.flush()
    os._exit(0)


async def _sequential(runs: int, samples: int) -> list[dict[str, Any]]:
    every = max(runs // samples, 1)
    points: list[dict[str, Any]] = []
    async with (
        td.open_runtime(_delegate.subagents(), config=td.Config()) as runtime,
        runtime.open_parent() as parent,
    ):
        points.append(
            {"runs": 0, "rss": resident_bytes(), "objects": len(gc.get_objects()), "us": None}
        )
        chunk_started = clock()
        for done in range(1, runs + 1):
            await parent.delegate(_delegate.SUBAGENT, _delegate.TASK)
            if done % every == 0:
                elapsed = clock() - chunk_started
                points.append(
                    {
                        "runs": done,
                        "rss": resident_bytes(),
                        "objects": len(gc.get_objects()),
                        "us": elapsed / every * 1e6,
                    }
                )
                chunk_started = clock()
    return points


def _retention(runs: int, samples: int) -> dict[str, Any]:
    trio.run(_sequential, 100, 1)  # warm-up
    gc.collect()
    return {"runs": runs, "points": trio.run(_sequential, runs, samples)}


#: The scenarios whose instructions are counted, by name: the timed scenarios
#: of rows 1 and 2 and their baselines.
COUNTED: dict[str, Callable[[int], Awaitable[float]]] = {
    "delegate-foreground": _delegate.foreground,
    "scoped-foreground": partial(_trio_baselines.foreground, "scoped"),
    "delegate-background": _delegate.background,
    "scoped-background": partial(_trio_baselines.background, "scoped", checkpoint=True),
}

#: Runs of the warm-up before a counted scenario: first-use work (caches,
#: lazily built helpers) is not counted, as the timed rows discard a round.
COUNT_WARMUP = 200


def _count(scenario: str, runs: int) -> dict[str, Any]:
    counted = COUNTED[scenario]
    trio.run(counted, COUNT_WARMUP)
    gc.collect()
    trio.run(counted, runs)
    return {"scenario": scenario, "runs": runs}


def run_probe(probe: str, **arguments: Any) -> dict[str, Any]:
    """Run one probe in a fresh interpreter and return its JSON answer."""
    completed = subprocess.run(
        [sys.executable, "-m", "benchmarks._probe", probe, json.dumps(arguments)],
        capture_output=True,
        text=True,
        cwd=_PROJECT_ROOT,
        check=False,
    )
    if completed.returncode != 0:
        last = completed.stderr.strip().splitlines()[-1:] or ["(no output)"]
        raise RuntimeError(
            f"the {probe} probe {arguments} exited with {completed.returncode}: {last[0]}"
        )
    answer: dict[str, Any] = json.loads(completed.stdout)
    return answer


def main(argv: list[str]) -> None:
    probe, arguments = argv[0], json.loads(argv[1])
    if probe == "live":
        result = _live(arguments["kind"], arguments["runs"], arguments["traced"])
    elif probe == "retention":
        result = _retention(arguments["runs"], arguments["samples"])
    elif probe == "count":
        result = _count(arguments["scenario"], arguments["runs"])
    else:
        raise SystemExit(f"unknown probe {probe!r}")
    _answer(result)


if __name__ == "__main__":
    main(sys.argv[1:])
