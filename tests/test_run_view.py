"""``runs show`` and ``runs list`` read a stored run in a person's terms."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

import trio_delegate as td
from trio_delegate._cli._main import main
from trio_delegate._cli._run_view import lifecycle_rows, seconds_text

from .stores import record, runtime_id

ADMITTED = "2030-01-01T10:00:00.000+00:00"
STARTED = "2030-01-01T10:00:00.850+00:00"
ENDED = "2030-01-01T10:00:05.050+00:00"
DEADLINE = 1893492060.0  # 2030-01-01 10:01:00 UTC


def run_of(status: td.RunStatus, runtime: str | None = None, **fields: Any) -> td.RunRecord:
    """A stored record of *status* with *fields* as given (times included)."""
    return attrs.evolve(record(runtime or runtime_id(), status), **fields)


def stored(db: Path, *records: td.RunRecord) -> None:
    async def write() -> None:
        store = td.SQLiteStore(db)
        try:
            await store.write(list(records))
        finally:
            await store.aclose()

    trio.run(write)


def shown(db: Path, run_id: str, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """The lines ``runs show`` prints for *run_id*."""
    assert main(["runs", "show", run_id, "--db", str(db)]) == 0
    return capsys.readouterr().out.splitlines()


def line_of(lines: list[str], label: str) -> int:
    cell = re.compile(rf"│ {re.escape(label)} +│")
    [index] = [i for i, line in enumerate(lines) if cell.match(line)]
    return index


def test_a_run_cancelled_by_request_reads_how_and_why_it_ended(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.db"
    run = run_of(
        td.RunStatus.CANCELLED,
        admitted_at=ADMITTED,
        started_at=STARTED,
        ended_at=ENDED,
        deadline_at=DEADLINE,
        error_message="cancelled by request",
    )
    stored(db, run)
    lines = shown(db, run.run_id, capsys)
    text = "\n".join(lines)
    assert "cancelled: cancelled by request" in lines[line_of(lines, "ended")]
    # The store's flags are not shown as a person would misread them.
    assert "cancel_requested" not in text
    assert "observed" not in text
    assert "false" not in text.lower()
    # A cancel made in this process: no request went through the store.
    assert "cancel requested through the store" not in text


def test_times_read_in_the_order_they_happened_with_how_long_each_part_took(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.db"
    run = run_of(
        td.RunStatus.COMPLETED,
        admitted_at=ADMITTED,
        started_at=STARTED,
        ended_at=ENDED,
        deadline_at=DEADLINE,
        final_result="done",
        observed=True,
    )
    stored(db, run)
    lines = shown(db, run.run_id, capsys)
    order = [line_of(lines, label) for label in ("admitted", "started", "deadline", "ended at")]
    assert order == sorted(order)
    assert "2030-01-01 10:00:00.850+00:00" in lines[line_of(lines, "started")]
    assert "2030-01-01 10:01:00.000+00:00" in lines[line_of(lines, "deadline")]
    assert "850 ms" in lines[line_of(lines, "queued for")]
    assert "4.2 s" in lines[line_of(lines, "ran for")]
    assert "yes: a wait" in lines[line_of(lines, "outcome reported")]


def test_a_failed_run_says_its_error_is_reported_and_what_raised(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.db"
    run = run_of(
        td.RunStatus.FAILED,
        error_type="ValueError",
        error_message="asked to fail",
    )
    stored(db, run)
    lines = shown(db, run.run_id, capsys)
    assert "failed: the runner raised ValueError: asked to fail" in lines[line_of(lines, "ended")]
    assert "its error on every wait" in lines[line_of(lines, "outcome reported")]


def test_an_unobserved_completed_run_and_a_request_through_the_store_are_said() -> None:
    run = run_of(td.RunStatus.COMPLETED, cancel_requested=True, final_result=1)
    rows = dict(lifecycle_rows(run))
    assert rows["outcome reported"].startswith("not yet")
    assert rows["cancel requested through the store"] == "yes"
    live = dict(lifecycle_rows(run_of(td.RunStatus.PENDING)))
    assert live["status"].startswith("pending")
    assert "outcome reported" not in live
    assert "ended at" not in live


def test_a_tampered_time_is_shown_as_stored_and_not_computed_with() -> None:
    run = run_of(td.RunStatus.COMPLETED, started_at="yesterday", ended_at=ENDED)
    rows = dict(lifecycle_rows(run))
    assert rows["started"] == "yesterday"
    assert "ran for" not in rows


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.85, "850 ms"), (4.2, "4.2 s"), (185, "3 min 5 s"), (7260, "2 h 1 min"), (None, "")],
)
def test_seconds_read_as_a_person_reads_a_duration(seconds: float | None, text: str) -> None:
    assert seconds_text(seconds) == text


def test_runs_list_shows_how_long_each_ran_and_what_it_replaces(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.db"
    runtime = runtime_id()
    first = run_of(
        td.RunStatus.FAILED,
        runtime,
        admitted_at=ADMITTED,
        started_at=STARTED,
        ended_at=ENDED,
        error_message="no",
    )
    retry = run_of(
        td.RunStatus.COMPLETED,
        runtime,
        replaces=first.run_id,
        admitted_at="2030-01-01T10:01:00.000+00:00",
        started_at="2030-01-01T10:01:00.000+00:00",
        ended_at="2030-01-01T10:03:05.000+00:00",
        final_result=1,
    )
    stored(db, first, retry)
    assert main(["runs", "list", "--db", str(db)]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if "status" in line)
    assert "ran for" in header
    assert "replaces" in header
    [retried] = [line for line in lines if retry.run_id[:8] in line and "completed" in line]
    assert "2 min 5 s" in retried
    assert first.run_id[:8] + "…" in retried
    [failed] = [line for line in lines if "failed" in line]
    assert "4.2 s" in failed
    # --json keeps the record as the store holds it.
    assert main(["runs", "list", "--db", str(db), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed[0]["replaces"] == first.run_id


@pytest.mark.parametrize(
    ("command", "words"),
    [("list", "how long it ran"), ("show", "how it ended and why")],
)
def test_runs_help_describes_what_is_shown(
    command: str, words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main(["runs", command, "--help"])
    assert words in " ".join(capsys.readouterr().out.split())
