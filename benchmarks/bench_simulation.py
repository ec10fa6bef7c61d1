"""Time the deterministic load simulation: 10,000 runs over 24 virtual hours.

``python -m benchmarks.bench_simulation [--seed N] [--runs N] [--hours H]``
plays the scenario of :func:`trio_delegate.testing.simulate` twice with the
same seed, prints the wall time of each run and the trace digest, and exits
non-zero if the two traces differ. The test suite checks determinism on a
smaller scenario; wall time is measured here, not asserted in tests.
"""

from __future__ import annotations

import argparse
import sys

from trio_delegate.testing import simulate

from ._model import Figure, Options, Row, Sample, Status

__all__ = ["bench", "main"]


def bench(options: Options) -> Row:
    """Row 7: wall seconds of the full scenario, played twice with one seed."""
    results = [simulate(0, runs=10_000, hours=24.0) for _ in range(2)]
    wall = Sample.of([result.wall_seconds for result in results])
    identical = results[0].digest == results[1].digest
    return Row(
        "7",
        "Deterministic simulation: 10,000 runs over 24 virtual hours, autojump MockClock "
        "(wall seconds)",
        Status.INFO if identical else Status.FAIL,
        measured=wall.show("{:.2f}", "s"),
        comparison="byte-identical traces" if identical else "the two traces DIFFER",
        note=f"{len(results[0].trace):,} trace lines, sha256 {results[0].digest[:16]}…; "
        "python -m benchmarks.bench_simulation prints the event counts",
        data={"wall_seconds": wall.to_json(), "identical": identical},
        # Wall time of a whole simulation: on a shared machine it moves with
        # the load, hence the wide tolerance.
        figures=(Figure("wall seconds", wall.median, 0.25),),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_simulation")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--hours", type=float, default=24.0)
    args = parser.parse_args(argv)
    results = [simulate(args.seed, runs=args.runs, hours=args.hours) for _ in range(2)]
    for attempt, result in enumerate(results, 1):
        print(
            f"run {attempt}: {args.runs} runs over {result.virtual_seconds / 3600:.2f} virtual "
            f"hours in {result.wall_seconds:.2f} s of wall time; {len(result.trace)} trace "
            f"lines, sha256 {result.digest[:16]}…"
        )
    first = results[0]
    width = max(map(len, first.summary))
    for key, count in first.summary.items():
        print(f"  {key:<{width}}  {count}")
    if results[0].digest != results[1].digest:
        print("the two traces differ: the simulation is not deterministic", file=sys.stderr)
        return 1
    print("the two traces are byte-identical")
    return 0


if __name__ == "__main__":
    sys.exit(main())
