"""The results table: printed with rich, and rendered as Markdown for the docs."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ._model import Row, Status

__all__ = ["exit_code", "markdown_table", "print_table"]

_STYLES = {
    Status.PASS: "green",
    Status.ABOVE_TARGET: "yellow",
    Status.FAIL: "bold red",
    Status.ERROR: "bold red",
    Status.INFO: "cyan",
    Status.NOT_AVAILABLE: "dim",
    Status.NOT_REPRODUCED: "magenta",
}

_COLUMNS = ("#", "scenario", "baseline", "trio_delegate", "ratio", "target", "must not exceed")


def _cells(row: Row) -> tuple[str, ...]:
    return (
        row.number,
        row.title,
        row.baseline,
        row.measured,
        row.comparison,
        row.target,
        row.bound,
    )


def print_table(rows: Sequence[Row], title: str, console: Console | None = None) -> None:
    """Print *rows* as one table, then each row's note."""
    console = console or Console()
    table = Table(title=title, show_lines=True, expand=False)
    for name in _COLUMNS:
        table.add_column(name, overflow="fold", no_wrap=name in ("#", "target"))
    table.add_column("result", no_wrap=True)
    for row in rows:
        style = _STYLES[row.status]
        cells = (escape(cell) for cell in _cells(row))
        table.add_row(*cells, f"[{style}]{row.status.value}[/{style}]")
    console.print(table)
    for row in rows:
        if row.note:
            console.print(f"[bold]{row.number}[/bold]  {escape(row.note)}", highlight=False)


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", "<br>")


def markdown_table(rows: Sequence[Row]) -> str:
    """*rows* as a GitHub-flavoured Markdown table, notes included."""
    header = (*_COLUMNS, "result", "notes")
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
    ]
    for row in rows:
        cells = (*_cells(row), f"**{row.status.value}**", row.note)
        lines.append("| " + " | ".join(_escape(cell) for cell in cells) + " |")
    return "\n".join(lines)


def exit_code(rows: Sequence[Row]) -> int:
    """1 when any row broke a "must not exceed" bound or could not be measured."""
    return 1 if any(row.status.breaks_build for row in rows) else 0
