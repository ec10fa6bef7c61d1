"""Instructions per run, counted by ``valgrind --tool=callgrind``.

CPU time per run depends on the machine: the same code measured 1.37x the
scoped baseline on one host and 1.64x on another the same day, because the
runtime's longer path runs at a lower rate of instructions per cycle than
the baseline's tight loop, and by how much depends on the processor (and on
what its other core is doing). The number of instructions executed does
not: counted by callgrind, a run of either scenario differs by well under
1 % between repetitions and between hosts. Rows 1 and 2 judge that count;
their CPU-time figures are reported beside it.

Each scenario runs in a fresh interpreter under callgrind, twice: with
:data:`SIZES` runs (:data:`FULL_SIZES` in the full suite) after the same
warm-up. The difference of the two totals,
divided by the difference of the sizes, is the cost of one more run with
everything else (start-up, imports, warm-up, teardown) cancelled out. The
smaller size already fills the default retention window (1,000 runs), so
every counted foreground run also evicts one, as in steady use.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

__all__ = ["FULL_SIZES", "SIZES", "available", "count", "per_run"]

#: Runs of each scenario in its two counted processes (quick suite, full suite).
SIZES = (1_100, 2_100)
FULL_SIZES = (1_500, 3_500)

_PROJECT_ROOT = Path(__file__).resolve().parent.parent
_COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


def available() -> bool:
    """Whether ``valgrind`` is on ``PATH``."""
    return shutil.which("valgrind") is not None


def count(scenario: str, runs: int) -> int:
    """Instructions executed by a fresh interpreter running *scenario* with *runs* runs.

    Raises:
        RuntimeError: valgrind or the scenario failed.
    """
    arguments = json.dumps({"scenario": scenario, "runs": runs})
    completed = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            "-m",
            "benchmarks._probe",
            "count",
            arguments,
        ],
        capture_output=True,
        text=True,
        cwd=_PROJECT_ROOT,
        # A fixed hash seed: the layout of dicts and sets, and so the work
        # of looking things up in them, is the same in every process.
        env={**os.environ, "PYTHONHASHSEED": "0"},
        check=False,
    )
    found = _COLLECTED.findall(completed.stderr)
    if completed.returncode != 0 or not found:
        last = completed.stderr.strip().splitlines()[-1:] or ["(no output)"]
        raise RuntimeError(
            f"callgrind of {scenario} ({runs} runs) exited with {completed.returncode}: {last[0]}"
        )
    return int(found[-1])


def per_run(
    scenarios: list[str], sizes: tuple[int, int] = SIZES, workers: int = 2
) -> dict[str, float]:
    """Instructions per run of each scenario (see the module's docstring).

    The processes run *workers* at a time: instruction counts do not depend
    on what else the machine does.
    """
    jobs = [(scenario, runs) for scenario in scenarios for runs in sizes]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        totals = dict(zip(jobs, pool.map(lambda job: count(*job), jobs), strict=True))
    small, large = sizes
    return {
        scenario: (totals[scenario, large] - totals[scenario, small]) / (large - small)
        for scenario in scenarios
    }
