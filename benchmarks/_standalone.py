"""One slot's rows on their own: ``python -m benchmarks.<module> [--full] [--passes N]``.

The same measurements as in the whole suite, the same reproduction rule
(:func:`benchmarks._model.reproduced`) over the passes, printed as the
suite prints its table, then as Markdown; ``docs/`` is not touched.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

from rich.console import Console

from ._model import Options, Row, reproduced
from ._report import exit_code, markdown_table, print_table

__all__ = ["run_alone"]

_WIDTH = 180


def run_alone(
    name: str, bench: Callable[[Options], Row | Sequence[Row]], argv: Sequence[str]
) -> int:
    """Measure *bench* as ``python -m benchmarks.<name>``; the exit status of the suite."""
    parser = argparse.ArgumentParser(prog=f"python -m benchmarks.{name}")
    parser.add_argument("--full", action="store_true", help="the full suite's sizes")
    parser.add_argument(
        "--passes", type=int, default=1, help="passes; a figure shows only when all agree"
    )
    args = parser.parse_args(argv)
    options = Options.complete() if args.full else Options.quick()
    console = Console(width=_WIDTH)
    every_pass: list[list[Row]] = []
    for number in range(1, args.passes + 1):
        console.print(f"[bold]pass {number} of {args.passes}[/bold]")
        produced = bench(options)
        every_pass.append([produced] if isinstance(produced, Row) else list(produced))
    rows = reproduced(every_pass)
    suite = "full" if args.full else "quick"
    print_table(rows, f"benchmarks.{name} ({suite} sizes, {args.passes} passes)", console)
    console.print(markdown_table(rows), highlight=False, soft_wrap=True)
    return exit_code(rows)
