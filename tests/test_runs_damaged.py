"""``trio-delegate runs list|show|watch`` on a store file damaged by hand.

A real SQLite store, then changed behind the runtime's back: a record cut
short, a record of a layout no version of trio_delegate wrote, a task of
20,000,000 characters, a row of the first schema's layout. Every view shows
the healthy runs, marks the damaged ones by their run id, and prints a
bounded amount whatever a record holds.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import trio

import trio_delegate as td
from trio_delegate._cli._main import main

from .pg_server import PostgresServer
from .stores import record, runtime_id

HUGE = 20_000_000


async def _write(db: Path, records: list[td.RunRecord]) -> None:
    store = td.SQLiteStore(db)
    try:
        await store.write(records)
    finally:
        await store.aclose()


def _set(db: Path, run_id: str, *, head: str, state: str | None) -> None:
    conn = sqlite3.connect(db)
    try:
        with conn:
            conn.execute(
                "UPDATE runs SET record = ?, state = ? WHERE run_id = ?", (head, state, run_id)
            )
    finally:
        conn.close()


def damaged_store(db: Path) -> dict[str, str]:
    """A store of healthy runs and damaged rows; the run ids by what each holds."""
    owner = runtime_id()
    names = ("healthy", "cut", "other layout", "huge task", "first layout", "newest")
    runs = {
        name: record(owner, td.RunStatus.COMPLETED, task=name, final_result={"for": name})
        for name in names
    }
    trio.run(_write, db, list(runs.values()))
    ids = {name: run.run_id for name, run in runs.items()}
    # Cut short, as a crash of whatever rewrote it would leave it.
    _set(db, ids["cut"], head=f'{{"run_id": "{ids["cut"]}", "broken', state=None)
    # Of a layout no trio_delegate writes (a future one, say): other keys, another status.
    _set(
        db,
        ids["other layout"],
        head=json.dumps({"layout": 9, "id": ids["other layout"], "job": {"text": "?"}}),
        state=json.dumps({"status": "paused", "progress": 0.5}),
    )
    # A task no runtime would admit, 20 MB of it.
    conn = sqlite3.connect(db)
    try:
        (head,) = conn.execute(
            "SELECT record FROM runs WHERE run_id = ?", (ids["huge task"],)
        ).fetchone()
    finally:
        conn.close()
    fields = json.loads(head)
    fields["task"] = fields["task_summary"] = "y" * HUGE
    _set(db, ids["huge task"], head=json.dumps(fields), state=_state_of(db, ids["huge task"]))
    # The whole record in the head and no state: the first schema's rows, which read as before.
    first = ids["first layout"]
    whole = {**json.loads(_head_of(db, first)), **json.loads(_state_of(db, first))}
    _set(db, first, head=json.dumps(whole), state=None)
    return ids


def _head_of(db: Path, run_id: str) -> str:
    return str(_column(db, "record", run_id))


def _state_of(db: Path, run_id: str) -> str:
    return str(_column(db, "state", run_id))


def _column(db: Path, column: str, run_id: str) -> object:
    conn = sqlite3.connect(db)
    try:
        (value,) = conn.execute(f"SELECT {column} FROM runs WHERE run_id = ?", (run_id,)).fetchone()
    finally:
        conn.close()
    return value


HEALTHY = ("healthy", "huge task", "first layout", "newest")
DAMAGED = ("cut", "other layout")


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    db = tmp_path_factory.mktemp("damaged") / "runs.db"
    return db, damaged_store(db)


def test_runs_list_json_lists_the_healthy_runs_and_marks_the_damaged(
    store: tuple[Path, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    db, ids = store
    code, out, err = _cli(["runs", "list", "--db", str(db), "--json"], capsys)
    assert code == 0, err
    assert len(out) < 60_000, len(out)
    listed = json.loads(out)
    healthy = {run["run_id"]: run for run in listed if not run.get("damaged")}
    assert set(healthy) == {ids[name] for name in HEALTHY}
    damaged = [run for run in listed if run.get("damaged")]
    assert {run["run_id"] for run in damaged} == {ids[name] for name in DAMAGED}
    assert all("not valid trio_delegate JSON" in run["error"] for run in damaged)
    # The 20 MB task: cut, and said so.
    huge = healthy[ids["huge task"]]
    assert huge["truncated"] == ["task", "task_summary"]
    assert huge["task"].startswith("y" * 100)
    assert f"{HUGE - 1_000:,} more characters" in huge["task"]
    assert f"runs show {ids['huge task']} --field task prints all of it" in huge["task"]
    assert huge["final_result"] == {"for": "huge task"}
    assert "truncated" not in healthy[ids["healthy"]]
    assert healthy[ids["first layout"]]["final_result"] == {"for": "first layout"}
    # Each damaged row is said on stderr too, by its run id.
    for name in DAMAGED:
        assert f"the run {ids[name]} is damaged" in err
    assert len(err) < 2_000


def test_runs_list_table_lists_the_healthy_runs_and_marks_the_damaged(
    store: tuple[Path, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    db, ids = store
    code, out, err = _cli(["runs", "list", "--db", str(db)], capsys)
    assert code == 0, err
    assert len(out) < 20_000, len(out)
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if "│ run_" in line}
    assert set(rows) == set(ids.values())
    for name in DAMAGED:
        assert "damaged" in rows[ids[name]]
    for name in HEALTHY:
        assert "completed" in rows[ids[name]]


def test_a_limited_listing_counts_a_damaged_row_as_a_run(
    store: tuple[Path, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    db, ids = store
    # The newest four rows: the healthy runs newest first, then the damaged one.
    code, out, _ = _cli(["runs", "list", "--db", str(db), "--json", "--limit", "4"], capsys)
    assert code == 0
    listed = json.loads(out)
    assert [run["run_id"] for run in listed] == [
        ids["newest"],
        ids["first layout"],
        ids["huge task"],
        ids["other layout"],
    ]
    assert listed[-1]["damaged"] is True


def test_runs_show_marks_a_damaged_run_and_cuts_a_huge_field(
    store: tuple[Path, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    db, ids = store
    for name in DAMAGED:
        code, out, err = _cli(["runs", "show", ids[name], "--db", str(db), "--json"], capsys)
        assert code == 1
        assert json.loads(out) == {
            "run_id": ids[name],
            "damaged": True,
            "error": json.loads(out)["error"],
        }
        assert f"the run {ids[name]} is damaged" in err
        code, out, err = _cli(["runs", "show", ids[name][:12], "--db", str(db)], capsys)
        assert code == 1
        assert f"the run {ids[name]} is damaged" in err
    huge = ids["huge task"]
    code, out, _ = _cli(["runs", "show", huge, "--db", str(db), "--json"], capsys)
    assert code == 0
    assert len(out) < 20_000, len(out)
    shown = json.loads(out)
    assert shown["truncated"] == ["task", "task_summary"]
    assert shown["task"].endswith(" more characters; --field task prints all of it)")
    code, out, _ = _cli(["runs", "show", huge, "--db", str(db)], capsys)
    assert code == 0
    assert len(out) < 40_000, len(out)
    assert "--field task prints all of it" in out.replace("│", "").replace("\n", "")


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_runs_show_field_prints_one_field_whole(
    store: tuple[Path, dict[str, str]], capsys: pytest.CaptureFixture[str], as_json: bool
) -> None:
    db, ids = store
    argv = ["runs", "show", ids["huge task"], "--db", str(db), "--field", "task"]
    code, out, _ = _cli(argv + (["--json"] if as_json else []), capsys)
    assert code == 0
    assert (json.loads(out) if as_json else out[:-1]) == "y" * HUGE
    argv = ["runs", "show", ids["healthy"], "--db", str(db), "--field", "final_result"]
    code, out, _ = _cli(argv, capsys)
    assert code == 0
    assert json.loads(out) == {"for": "healthy"}


def test_runs_watch_lists_the_healthy_runs_and_marks_the_damaged(
    store: tuple[Path, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    db, ids = store
    watch = ["runs", "watch", "--db", str(db), "--interval", "0.01", "--duration", "0.02"]
    code, out, err = _cli([*watch, "--json"], capsys)
    assert code == 0, err
    assert len(out) < 60_000, len(out)
    lines: list[dict[str, Any]] = [json.loads(line) for line in out.splitlines()]
    assert {line["run_id"] for line in lines if not line.get("damaged")} == {
        ids[name] for name in HEALTHY
    }
    assert {line["run_id"] for line in lines if line.get("damaged")} == {
        ids[name] for name in DAMAGED
    }
    huge = next(line for line in lines if line["run_id"] == ids["huge task"])
    assert huge["truncated"] == ["task", "task_summary"]
    code, out, err = _cli(watch, capsys)
    assert code == 0, err
    assert len(out) < 40_000, len(out)
    for name in DAMAGED:
        assert f"damaged row {ids[name]}" in out
    for name in HEALTHY:
        assert ids[name] in out


def test_runs_list_on_postgres_names_a_damaged_row_by_its_run_id(
    pg_server: PostgresServer, pg_schema: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import psycopg

    owner = runtime_id()
    runs = [record(owner, td.RunStatus.COMPLETED, task=task) for task in ("one", "two")]

    async def write() -> None:
        store = td.PostgresStore(pg_server.dsn(), schema=pg_schema)
        try:
            await store.write(runs)
        finally:
            await store.aclose()

    trio.run(write)
    cut_short = runs[1].run_id
    with psycopg.connect(pg_server.admin_dsn(), autocommit=True) as conn:
        conn.execute(
            f"UPDATE {pg_schema}.runs SET record = %s WHERE run_id = %s",
            (f'{{"run_id": "{cut_short}", "broken', cut_short),
        )
    argv = ["--db", pg_server.dsn(), "--schema", pg_schema]
    code, out, err = _cli(["runs", "list", *argv, "--json"], capsys)
    assert code == 0, err
    listed = json.loads(out)
    # The healthy runs, then the damaged rows.
    assert [(run["run_id"], run.get("damaged", False)) for run in listed] == [
        (runs[0].run_id, False),
        (cut_short, True),
    ]
    code, out, err = _cli(["runs", "show", cut_short[:10], *argv], capsys)
    assert code == 1
    assert f"the run {cut_short} is damaged" in err
