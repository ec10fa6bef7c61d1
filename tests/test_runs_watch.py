"""``trio-delegate runs watch`` and the read-only change feed it follows."""

from __future__ import annotations

import io
import json
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from rich.console import Console

import trio_delegate as td
from trio_delegate._cli._main import main
from trio_delegate._cli._watch import RunsView, watch
from trio_delegate._stores._postgres import PostgresReader
from trio_delegate._stores._sqlite import SQLiteReader

from .pg_server import PostgresServer
from .stores import record, runtime_id
from .test_sqlite_store import V1_SCHEMA


async def write(store: td.ResultStore, *records: td.RunRecord) -> None:
    await store.write(list(records))
    aclose = getattr(store, "aclose", None)
    if aclose is not None:
        await aclose()


def check_feed(store: td.ResultStore, reader: SQLiteReader | PostgresReader) -> None:
    """The reader sees what the store commits after its cursor."""
    owner = runtime_id()
    first = record(owner, td.RunStatus.RUNNING)
    trio.run(write, store, first)
    start = reader.changes(None)
    assert start.records == ()
    assert reader.changes(start.cursor) == start
    second = record(owner)
    ended = attrs.evolve(
        first,
        status=td.RunStatus.FAILED,
        error_type="ValueError",
        error_message="no",
        ended_at="2030-01-01T00:00:02.000+00:00",
    )
    trio.run(write, store, second, ended)
    batch = reader.changes(start.cursor)
    assert {run.run_id: run.status for run in batch.records} == {
        second.run_id: td.RunStatus.PENDING,
        first.run_id: td.RunStatus.FAILED,
    }
    assert batch.cursor > start.cursor
    assert reader.changes(batch.cursor).records == ()
    with pytest.raises(td.StoreError, match="cursor"):
        reader.changes(-1)
    reader.close()


def test_the_sqlite_reader_follows_changes(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    trio.run(write, td.SQLiteStore(db))  # creates the file
    check_feed(td.SQLiteStore(db), SQLiteReader(db))


def test_the_postgres_reader_follows_changes_in_a_read_only_session(
    pg_server: PostgresServer, pg_schema: str
) -> None:
    store = td.PostgresStore(pg_server.dsn(), schema=pg_schema)
    check_feed(store, PostgresReader(pg_server.dsn(), schema=pg_schema))


def test_a_store_without_a_change_log_says_so(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    with sqlite3.connect(db) as conn:
        for statement in V1_SCHEMA:
            conn.execute(statement)
    with pytest.raises(td.StoreError, match="older trio_delegate"):
        SQLiteReader(db).changes(None)


# -- the view ---------------------------------------------------------------------------


def test_the_view_keeps_the_newest_matching_runs() -> None:
    owner = runtime_id()

    def at(second: int, **fields: Any) -> td.RunRecord:
        return attrs.evolve(
            record(owner, **fields), admitted_at=f"2030-01-01T00:00:{second:02d}.000+00:00"
        )

    runs = [at(second, owner="alice" if second % 2 else "bob") for second in range(6)]
    view = RunsView(limit=2, owner="alice")
    view.load(run for run in runs if run.owner == "alice")
    assert [run.run_id for run in view.rows()] == [runs[5].run_id, runs[3].run_id]
    newer = at(9, owner="alice", status=td.RunStatus.RUNNING)
    changed, dropped = view.apply([newer, at(8, owner="bob")])
    assert (changed, dropped) == ([newer], False)
    assert [run.run_id for run in view.rows()] == [newer.run_id, runs[5].run_id]
    # The same record again is no change; a run leaving the filter is.
    assert view.apply([newer]) == ([], False)
    moved = attrs.evolve(newer, owner="bob")
    assert view.apply([moved]) == ([moved], True)
    assert [run.run_id for run in view.rows()] == [runs[5].run_id]


def render(view: RunsView, width: int = 200) -> str:
    output = io.StringIO()
    Console(file=output, width=width, force_terminal=False).print(view.table("runs in a store"))
    return output.getvalue()


def test_the_table_shows_stored_strings_literally() -> None:
    hostile = "[bold]not bold[/bold] \x1b[2J \u202eevil \ud800"
    failed = record(
        runtime_id(),
        td.RunStatus.FAILED,
        task=hostile,
        owner="[red]owner",
        error_type="Value\x07Error",
        error_message="boom [link=file:///etc]x[/link]",
    )
    out = render(RunsView(limit=5)) + render(_loaded(failed))
    assert "no runs match yet" in out
    for raw in ("\x1b", "\x07", "\u202e", "\ud800"):
        assert raw not in out
    for shown in ("[bold]not bold[/bold]", "\\x1b[2J", "\\u202eevil", "\\ud800", "[red]owner"):
        assert shown in out
    assert "Value\\x07Error: boom [link=file:///etc]x[/link]" in out
    assert "1 shown: 1 failed" in out


def _loaded(*records: td.RunRecord) -> RunsView:
    view = RunsView(limit=5)
    view.load(records)
    return view


# -- following a store another process writes ----------------------------------------------

WRITER = """
import sys
from pathlib import Path

import trio

import trio_delegate as td

kind, where, schema, go = sys.argv[1:]


async def gated(ctx):
    while not Path(go).exists():
        await trio.sleep(0.02)
    if ctx.task == "doomed work":
        raise RuntimeError("doomed \\x1b[31m [red]on purpose[/red]")
    return "opened"


async def quick(ctx):
    return "done"


async def main():
    store = td.SQLiteStore(where) if kind == "sqlite" else td.PostgresStore(where, schema=schema)
    subagents = [td.Subagent("gated", gated), td.Subagent("quick", quick)]
    config = td.Config(fail_closed=False)
    async with td.open_runtime(subagents, store=store, config=config) as rt:
        async with rt.open_parent("writer") as parent:
            await parent.delegate("quick", "[bold]markup[/bold] \\x1b[2J \\u202e kept literally")
            gate = await parent.start("gated", "gated work")
            doomed = await parent.start("gated", "doomed work")
            print("ready", gate.run_id, doomed.run_id, flush=True)
            await parent.wait(gate.run_id)
            try:
                await parent.wait(doomed.run_id)
            except td.RunFailedError:
                pass
    print("done", flush=True)


trio.run(main)
"""

# Ctrl-C as at a terminal: a child started from a non-interactive shell's
# background job inherits SIGINT ignored, and Python then never raises
# KeyboardInterrupt for it.
WATCH = (
    "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "from trio_delegate._cli._main import main; sys.exit(main(sys.argv[1:]))"
)


class Lines:
    """The lines a child process prints, read on a thread, each awaited with a deadline."""

    def __init__(self, process: subprocess.Popen[str], deadline: float) -> None:
        self.process = process
        self.deadline = deadline
        self.seen: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._queue.put(line)
        self._queue.put(None)

    def until(self, *needles: str) -> str:
        """The first line, read already or read now, that holds every needle."""
        for seen in self.seen:
            if all(needle in seen for needle in needles):
                return seen
        while True:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no line with {needles!r} in time: {self.seen!r}")
            try:
                line = self._queue.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(f"the process ended before {needles!r}: {self.seen!r}")
            self.seen.append(line)
            if all(needle in line for needle in needles):
                return line


def _spawn(script: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdout=subprocess.PIPE,
        text=True,
        encoding="utf-8",
        errors="replace",
    )


def follow_another_process(tmp_path: Path, kind: str, where: str, schema: str) -> None:
    go = tmp_path / "go"
    deadline = time.monotonic() + 60  # the whole exchange, however slow the machine
    writer = _spawn(WRITER, kind, where, schema, str(go))
    watcher: subprocess.Popen[str] | None = None
    try:
        written = Lines(writer, deadline)
        _, gate, doomed = written.until("ready").split()
        watcher = _spawn(
            WATCH, "runs", "watch", "--db", where, "--schema", schema, "--interval", "0.05"
        )
        watched = Lines(watcher, deadline)
        watched.until("watching for changes")
        table = "".join(watched.seen)
        # Still live (pending or running, as far as the store was told).
        assert gate in table
        assert doomed in table
        go.touch()
        watched.until(gate, "completed")
        watched.until(doomed, "failed", "[RuntimeError]")
        written.until("done")
        assert writer.wait(timeout=max(1, deadline - time.monotonic())) == 0
        watcher.send_signal(signal.SIGINT)
        assert watcher.wait(timeout=max(1, deadline - time.monotonic())) == 130
    finally:
        for process in (writer, watcher):
            if process is not None:
                if process.poll() is None:
                    process.kill()
                    process.wait()
                if process.stdout is not None:
                    process.stdout.close()
    out = "".join(watched.seen)
    assert "[bold]markup[/bold] \\x1b[2J \\u202e kept literally" in out
    assert "\x1b" not in out
    assert "\u202e" not in out


def test_watch_follows_an_sqlite_store_another_process_writes(tmp_path: Path) -> None:
    follow_another_process(tmp_path, "sqlite", str(tmp_path / "runs.db"), "trio_delegate")


def test_watch_follows_a_postgres_store_another_process_writes(
    tmp_path: Path, pg_server: PostgresServer, pg_schema: str
) -> None:
    follow_another_process(tmp_path, "postgres", pg_server.dsn(), pg_schema)


# -- the command ------------------------------------------------------------------------------


async def fill(db: Path) -> list[str]:
    async def answer(ctx: td.ChildContext) -> str:
        await trio.lowlevel.checkpoint()
        return ctx.task

    config = td.Config(fail_closed=False)
    store = td.SQLiteStore(db)
    subagents = [td.Subagent("answer", answer)]
    async with (
        td.open_runtime(subagents, store=store, config=config) as rt,
        rt.open_parent("alice") as parent,
    ):
        return [(await parent.delegate("answer", task)).run_id for task in ("one", "two")]


def test_on_a_terminal_the_table_is_live(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    ids = trio.run(fill, db)
    output = io.StringIO()
    console = Console(file=output, width=160, force_terminal=True)
    reader = SQLiteReader(db)
    try:
        watch(reader, str(db), console, RunsView(limit=10), interval=0.02, duration=0.1)
    finally:
        reader.close()
    out = output.getvalue()
    for run_id in ids:
        assert run_id in out
    assert "2 shown: 2 completed" in out
    assert "\x1b[" in out  # drawn with the terminal's codes, in place


def test_json_lines_and_a_bounded_watch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "runs.db"
    ids = trio.run(fill, db)
    args = ["runs", "watch", "--db", str(db), "--interval", "0.02", "--duration", "0.1"]
    assert main([*args, "--json"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line)["run_id"] for line in lines] == ids  # oldest first
    assert main([*args, "--owner", "bob"]) == 0
    assert "no runs match yet" in capsys.readouterr().out


def test_watch_says_what_is_wrong(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "watch", "--db", str(tmp_path / "missing.db")]) == 1
    assert "no store at" in capsys.readouterr().err
    old = tmp_path / "old.db"
    with sqlite3.connect(old) as conn:
        for statement in V1_SCHEMA:
            conn.execute(statement)
    assert main(["runs", "watch", "--db", str(old), "--duration", "0.1"]) == 1
    assert "older trio_delegate" in capsys.readouterr().err
    for bad in (["--interval", "0"], ["--interval", "nan"], ["--duration", "-1"]):
        with pytest.raises(SystemExit) as exit_:
            main(["runs", "watch", "--db", str(old), *bad])
        assert exit_.value.code == 2
