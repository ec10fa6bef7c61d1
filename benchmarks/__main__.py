"""``python -m benchmarks [--full]``: measure, print the table, exit non-zero on a broken bound."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from rich.console import Console

from ._docs import update_docs, write_record
from ._machine import describe_machine
from ._model import Options, reproduced
from ._report import exit_code, print_table
from ._suite import measure_all

_DOCS = Path(__file__).resolve().parent.parent / "docs"
_PLOT_DIR = "performance"
_PIPED_WIDTH = 180


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument(
        "--full",
        action="store_true",
        help="full sizes, growth curves and plots; rewrites docs/performance.md",
    )
    parser.add_argument(
        "--no-docs",
        action="store_true",
        help="with --full: leave docs/ untouched",
    )
    parser.add_argument(
        "--passes",
        type=int,
        default=0,
        help="run the suite this many times and keep only the figures every pass "
        "agrees on (default: 1, or 3 with --full)",
    )
    args = parser.parse_args(argv)
    options = Options.complete() if args.full else Options.quick()
    machine = describe_machine()
    console = Console()
    if not console.is_terminal:
        # Piped or captured output: wide enough for the table not to wrap.
        console = Console(width=_PIPED_WIDTH)
    passes = args.passes or options.passes
    started = time.perf_counter()
    results = measure_all(options)
    every_pass = [results.ordered()]
    for number in range(2, passes + 1):
        console.print(f"[bold]pass {number} of {passes}[/bold]")
        # The growth curves are drawn from the first pass only.
        every_pass.append(measure_all(options, curves=False).ordered())
    rows = reproduced(every_pass)
    elapsed = time.perf_counter() - started
    suite = "full" if options.full else "quick"
    if passes > 1:
        suite += f", {passes} passes"
    print_table(
        rows,
        f"trio_delegate overhead ({suite} suite, {elapsed:.0f} s) on "
        f"{machine['cpu']} x{machine['cores']}, {machine['python']}, trio {machine['trio']}",
        console,
    )
    if options.full and not args.no_docs:
        plot_dir = _DOCS / _PLOT_DIR
        plot_dir.mkdir(parents=True, exist_ok=True)
        from ._plots import draw_plots

        for path in draw_plots(results.curves, plot_dir):
            console.print(f"wrote {path.relative_to(_DOCS.parent)}")
        write_record(plot_dir / "results.json", rows, machine, results.curves)
        update_docs(_DOCS / "performance.md", rows, machine, _PLOT_DIR, passes)
        console.print("updated docs/performance.md")
    code = exit_code(rows)
    if code:
        console.print("[bold red]a must-not-exceed bound is broken, or a benchmark failed[/]")
    return code


if __name__ == "__main__":
    sys.exit(main())
