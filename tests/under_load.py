"""Run the suite (or some modules) several times in a row while a core is kept busy.

A deterministic suite passes on a machine with other work as it does on an
idle one. This runs pytest *runs* times in a row while one other process
(pure Python, spinning) keeps one core busy, and says how many runs were
green; it exits with status 1 unless every run was. ``make test-under-load``
runs it::

    make test-under-load RUNS=10 MODULES="tests/test_hardening.py tests/test_hostile.py"

or directly: ``.venv/bin/python -m tests.under_load --runs 10 tests/test_hardening.py``.
Arguments after ``--`` go to pytest as they are.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

#: What the busy process runs: a loop that never blocks, one core's worth of work.
SPIN = "while True:\n    pass\n"


@contextmanager
def busy_cores(count: int) -> Iterator[None]:
    """Keep *count* cores busy, each with a spinning Python process, until the block ends."""
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(count)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
        for spinner in spinners:
            spinner.wait()


def run_once(pytest_args: Sequence[str]) -> tuple[bool, float, list[str]]:
    """One pytest run with *pytest_args*: whether it was green, how long it took, what failed."""
    started = time.monotonic()
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args]
    finished = subprocess.run(command, capture_output=True, text=True, check=False)
    took = time.monotonic() - started
    lines = finished.stdout.splitlines()
    failed = [line for line in lines if line.startswith(("FAILED ", "ERROR "))]
    if finished.returncode != 0 and not failed:
        # No summary to quote (a crash, a collection error): the last lines say why.
        failed = (lines or finished.stderr.splitlines())[-5:]
    return finished.returncode == 0, took, failed


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line *argv*; the exit status (0: every run green).

    Args:
        argv: the arguments (``sys.argv[1:]`` when ``None``).
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs in a row (default 5)")
    parser.add_argument(
        "--busy", type=int, default=1, help="cores to keep busy meanwhile (default 1)"
    )
    parser.add_argument(
        "modules", nargs="*", default=["tests"], help="test modules or folders (default: tests)"
    )
    # Whatever else is given (after --, say) goes to pytest as it is.
    args, pytest_args = parser.parse_known_args(argv)
    if args.runs < 1 or args.busy < 0:
        parser.error(
            f"--runs must be at least 1 and --busy at least 0, not {args.runs} and {args.busy}"
        )
    pytest_args = [arg for arg in [*args.modules, *pytest_args] if arg != "--"]
    green = 0
    what = " ".join(pytest_args)
    print(f"{args.runs} runs of {what}, {args.busy} core(s) kept busy", flush=True)
    with busy_cores(args.busy):
        for index in range(1, args.runs + 1):
            ok, took, failed = run_once(pytest_args)
            green += ok
            verdict = "green" if ok else "RED"
            print(f"run {index} of {args.runs}: {verdict} ({took:.0f} s)", flush=True)
            for line in failed:
                print(f"    {line}", flush=True)
    print(f"{green} of {args.runs} runs green")
    return 0 if green == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
