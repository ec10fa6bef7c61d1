"""Rewrite the results section of ``docs/performance.md`` after a full run."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._model import Row
from ._plots import PLOTS
from ._report import markdown_table

__all__ = ["BEGIN", "END", "update_docs", "write_record"]

BEGIN = "<!-- results:begin (written by `make bench-full`; do not edit by hand) -->"
END = "<!-- results:end -->"

_PLOT_CAPTIONS = {
    "memory": "Memory held against the number of live runs",
    "time": "Time per run against the number of runs, and time to close",
    "retention": "Resident memory and time per run over sequential completed runs",
}


def _section(rows: Sequence[Row], machine: dict[str, str], plot_dir: str, passes: int) -> str:
    lines = [
        BEGIN,
        "",
        f"Measured on {time.strftime('%Y-%m-%d')} with `make bench-full` ({passes} passes of "
        "the whole suite; a figure is shown only when every pass agreed on it) on:",
        "",
        "| machine | |",
        "|---|---|",
    ]
    lines += [f"| {key} | {value} |" for key, value in machine.items()]
    lines += [
        "",
        "Rows 1 and 2 are judged on instructions per run (counted by callgrind); their "
        "CPU-time figures depend on the host (see *How it is measured*).",
    ]
    lines += ["", markdown_table(rows), ""]
    for key, caption in _PLOT_CAPTIONS.items():
        lines += [f"![{caption}]({plot_dir}/{PLOTS[key]})", ""]
    lines.append(END)
    return "\n".join(lines)


def update_docs(
    document: Path, rows: Sequence[Row], machine: dict[str, str], plot_dir: str, passes: int
) -> None:
    """Replace what lies between the markers of *document* with the new results."""
    text = document.read_text(encoding="utf-8")
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{document} has no results markers ({BEGIN!r} … {END!r})")
    new = text[:start] + _section(rows, machine, plot_dir, passes) + text[end + len(END) :]
    document.write_text(new, encoding="utf-8")


def write_record(
    path: Path, rows: Sequence[Row], machine: dict[str, str], curves: dict[str, Any]
) -> None:
    """Keep every raw figure of the run as JSON beside the plots."""
    record = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine,
        "rows": [row.to_json() for row in rows],
        "curves": curves,
    }
    path.write_text(json.dumps(record, indent=1, default=str) + "\n", encoding="utf-8")
