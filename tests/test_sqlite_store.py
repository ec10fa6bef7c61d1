"""The SQLite store for real: files, processes, kills and failures (contract §12)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import stat
from pathlib import Path

import attrs
import pytest
import trio

import trio_delegate as td
from trio_delegate._converter import converter
from trio_delegate._stores._liveness import lock_dir_for
from trio_delegate._stores._protocol import INTERRUPTED_ERROR_TYPE
from trio_delegate._stores._sqlite import SCHEMA_VERSION

from .stores import read_line, record, runtime_id, spawn_child


async def quick(ctx: td.ChildContext) -> str:
    await trio.lowlevel.checkpoint()
    return ctx.task


SUBAGENTS = [td.Subagent("quick", quick)]


async def test_killed_right_after_start_reads_as_interrupted(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    process = await spawn_child(str(db), "start")
    killed = await read_line(process)
    process.send_signal(signal.SIGKILL)
    with trio.fail_after(30):
        await process.wait()
    store = td.SQLiteStore(db)
    stored = await store.get(killed)
    assert stored is not None  # the admission it was told about is there
    assert not stored.status.is_terminal  # nobody has looked yet
    after = runtime_id()
    snapshot = await store.attach(after)
    assert snapshot.interrupted == (killed,)
    stored = await store.get(killed)
    assert stored is not None
    assert stored.status is td.RunStatus.FAILED
    assert stored.error_type == INTERRUPTED_ERROR_TYPE
    await store.detach(after)
    # And through a runtime: the owner's wait says so, with the reason.
    async with (
        td.open_runtime(SUBAGENTS, store=td.SQLiteStore(db)) as rt,
        rt.open_parent("worker") as parent,
    ):
        with pytest.raises(td.RunFailedError, match="interrupted"):
            await parent.wait(killed)


async def test_exit_right_after_wait_keeps_the_result(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    process = await spawn_child(str(db), "wait")
    told = json.loads(await read_line(process))
    with trio.fail_after(30):
        await process.wait()
    async with (
        td.open_runtime(SUBAGENTS, store=td.SQLiteStore(db)) as rt,
        rt.open_parent("worker") as parent,
    ):
        result = await parent.wait(told["run_id"])
    assert isinstance(result, td.RunResult)
    assert result.final_result == told["final_result"]


async def test_two_processes_share_one_file(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    processes = [await spawn_child(str(db), "writer", "40") for _ in range(2)]
    for process in processes:
        assert await read_line(process) == "done"
        with trio.fail_after(30):
            await process.wait()
        assert process.returncode == 0
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        statuses = conn.execute("SELECT status, count(*) FROM runs GROUP BY status").fetchall()
    finally:
        conn.close()
    assert statuses == [("completed", 80)]
    assert list(lock_dir_for(db).iterdir()) == []  # both detached cleanly


async def test_file_is_private_and_created_with_its_folder(tmp_path: Path) -> None:
    db = tmp_path / "deep" / "er" / "runs.db"
    async with (
        td.open_runtime(SUBAGENTS, store=td.SQLiteStore(db)) as rt,
        rt.open_parent() as parent,
    ):
        await parent.delegate("quick", "t")
        lock_files = list(lock_dir_for(db).iterdir())
        assert len(lock_files) == 1  # this runtime's liveness lock
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    assert stat.S_IMODE(db.parent.stat().st_mode) == 0o700
    assert list(lock_dir_for(db).iterdir()) == []


async def test_records_are_plain_json(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    async with (
        td.open_runtime(SUBAGENTS, store=td.SQLiteStore(db)) as rt,
        rt.open_parent("o") as parent,
    ):
        result = await parent.delegate("quick", "some task")
    conn = sqlite3.connect(db)
    try:
        head, state = conn.execute(
            "SELECT record, state FROM runs WHERE run_id = ?", (result.run_id,)
        ).fetchone()
    finally:
        conn.close()
    # What was fixed at admission, and what changed since: both plain JSON.
    data = {**json.loads(head), **json.loads(state)}
    assert data["status"] == "completed"
    assert data["final_result"] == "some task"
    assert data["owner"] == "o"


async def test_tampered_record_is_a_store_error(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    store = td.SQLiteStore(db)
    async with td.open_runtime(SUBAGENTS, store=store) as rt, rt.open_parent("o") as parent:
        result = await parent.delegate("quick", "t")
    conn = sqlite3.connect(db)
    conn.execute(
        "UPDATE runs SET record = ? WHERE run_id = ?",
        ("cos\nsystem\n(S'echo pwned'\ntR.", result.run_id),
    )
    conn.commit()
    conn.close()
    with pytest.raises(td.StoreError, match="not valid trio_delegate JSON") as info:
        await td.SQLiteStore(db).get(result.run_id)
    assert info.value.path == str(db)


@pytest.mark.parametrize(
    ("setup", "fragment"),
    [
        ("garbage", "is not an SQLite database"),
        ("foreign", "not a trio_delegate store"),
        ("newer", "written by a newer trio_delegate"),
    ],
)
async def test_unusable_file_is_refused_and_left_untouched(
    tmp_path: Path, setup: str, fragment: str
) -> None:
    db = tmp_path / "runs.db"
    if setup == "garbage":
        db.write_bytes(os.urandom(8192))
    else:
        conn = sqlite3.connect(db)
        if setup == "foreign":
            conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
        else:
            conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            conn.execute("INSERT INTO meta VALUES ('application', 'trio_delegate')")
            conn.execute(
                "INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION + 1),)
            )
        conn.commit()
        conn.close()
    before = db.read_bytes()
    with pytest.raises(td.StoreError) as info:
        async with td.open_runtime(SUBAGENTS, store=td.SQLiteStore(db)):
            pytest.fail("opened an unusable store")  # pragma: no cover
    assert fragment in str(info.value)
    assert str(db) in str(info.value)
    assert db.read_bytes() == before
    assert info.value.to_payload()["error"]["path"] == str(db)


async def test_unwritable_location_is_a_store_error(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where a folder should be")
    db = blocker / "runs.db"
    with pytest.raises(td.StoreError) as info:
        async with td.open_runtime(SUBAGENTS, store=td.SQLiteStore(db)):
            pytest.fail("opened an unwritable store")  # pragma: no cover
    assert str(db) in str(info.value)


async def test_full_store_fails_cleanly_and_keeps_what_it_had(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"

    async def big(ctx: td.ChildContext) -> str:
        await trio.lowlevel.checkpoint()
        return ctx.task * 2000

    store = td.SQLiteStore(db, max_bytes=64 * 1024)
    kept: list[str] = []
    config = td.Config(fail_closed=False)
    async with (
        td.open_runtime([td.Subagent("big", big)], store=store, config=config) as rt,
        rt.open_parent("o") as parent,
    ):

        async def fill_up() -> None:
            for index in range(100):
                result = await parent.delegate("big", f"{index:05d}")
                kept.append(result.run_id)

        with pytest.raises((td.StoreError, td.RunFailedError)) as info:
            await fill_up()
    error = info.value
    cause = error if isinstance(error, td.StoreError) else error.__cause__
    assert isinstance(cause, td.StoreError)
    assert "is full" in str(cause)
    assert kept
    fresh = td.SQLiteStore(db)
    for run_id in kept:
        record = await fresh.get(run_id)
        assert record is not None
        assert record.status is td.RunStatus.COMPLETED


async def test_store_retention_prunes_old_terminal_runs(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    async with (
        td.open_runtime(SUBAGENTS, store=td.SQLiteStore(db)) as rt,
        rt.open_parent("o") as parent,
    ):
        ids = [(await parent.delegate("quick", str(i))).run_id for i in range(5)]
    capped = td.SQLiteStore(db, max_rows=2)
    pruner = runtime_id()
    await capped.attach(pruner)
    await capped.detach(pruner)
    remaining = [stored.run_id for stored in await capped.list_runs()]
    assert remaining == [ids[4], ids[3]]
    expiring = td.SQLiteStore(db, retention_seconds=0)
    await expiring.attach(pruner)
    await expiring.detach(pruner)
    assert await expiring.list_runs() == []
    await capped.aclose()
    await expiring.aclose()


def _terminal_counts(db: Path) -> tuple[int, int]:
    """(the number of terminal rows kept in meta, the number counted)."""
    conn = sqlite3.connect(db)
    try:
        (kept,) = conn.execute("SELECT value FROM meta WHERE key = 'terminal_rows'").fetchone()
        (counted,) = conn.execute(
            "SELECT count(*) FROM runs WHERE status NOT IN ('pending', 'running')"
        ).fetchone()
    finally:
        conn.close()
    return int(kept), counted


async def test_the_count_of_terminal_runs_follows_every_write_and_prunes_exactly(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    store = td.SQLiteStore(db, max_rows=None, retention_seconds=None)
    me, gone = runtime_id(), runtime_id()
    await store.attach(me)
    # Admitted, then ended (a state update); ended at once (a whole row); an
    # end written twice (the second changes nothing); live runs of a runtime
    # that is gone, interrupted by the next sweep.
    admitted = [record(me) for _ in range(300)]
    await store.write(admitted)
    ended = [attrs.evolve(r, status=td.RunStatus.COMPLETED, ended_at="e") for r in admitted]
    await store.write(ended[:150])
    await store.write(ended[100:200])
    await store.write([record(me, td.RunStatus.FAILED) for _ in range(20)])
    orphans = [record(gone, td.RunStatus.RUNNING) for _ in range(5)]
    await store.write(orphans)
    assert _terminal_counts(db) == (220, 220)
    assert set(await store.sweep(me)) == {orphan.run_id for orphan in orphans}
    assert _terminal_counts(db) == (225, 225)
    # A handle that keeps 50: a write past 512 records prunes to the newest 50.
    capped = td.SQLiteStore(db, max_rows=50)
    last = [record(me, td.RunStatus.COMPLETED) for _ in range(520)]
    await capped.write(last)
    assert _terminal_counts(db) == (50, 50)
    kept = await capped.list_runs(limit=1000)
    assert [r.run_id for r in kept if r.status.is_terminal] == [r.run_id for r in last[:-51:-1]]
    assert sum(r.status is td.RunStatus.PENDING for r in kept) == 100  # never pruned
    await store.detach(me)
    await store.aclose()
    await capped.aclose()


def test_pruning_reads_an_index_not_the_table(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    trio.run(td.SQLiteStore(db).list_runs)  # creates the file
    conn = sqlite3.connect(db)
    try:
        plan = conn.execute(
            "EXPLAIN QUERY PLAN DELETE FROM runs "
            "WHERE status NOT IN ('pending', 'running') AND ended_at < ?",
            ("2030",),
        ).fetchall()
    finally:
        conn.close()
    assert any("runs_ended" in str(step) for step in plan), plan


async def test_live_runs_are_never_pruned(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    store = td.SQLiteStore(db, retention_seconds=0, max_rows=1)
    alive, other_id = runtime_id(), runtime_id()
    live = record(alive, td.RunStatus.RUNNING)
    await store.attach(alive)
    await store.write([live])
    other = td.SQLiteStore(db, retention_seconds=0, max_rows=1)
    snapshot = await other.attach(other_id)
    assert snapshot.interrupted == ()  # the first runtime still holds its lock
    assert await other.get(live.run_id) == live
    await other.detach(other_id)
    await store.detach(alive)


def test_store_arguments_are_checked(tmp_path: Path) -> None:
    with pytest.raises(td.InvalidArgumentsError, match="max_rows"):
        td.SQLiteStore(tmp_path / "x.db", max_rows=0)
    with pytest.raises(td.InvalidArgumentsError, match="retention_seconds"):
        td.SQLiteStore(tmp_path / "x.db", retention_seconds=-1)
    with pytest.raises(td.InvalidArgumentsError, match="max_bytes"):
        td.SQLiteStore(tmp_path / "x.db", max_bytes=10)


async def test_open_runtime_refuses_something_that_is_not_a_store() -> None:
    with pytest.raises(td.InvalidArgumentsError, match="store must be"):
        async with td.open_runtime(SUBAGENTS, store="runs.db"):  # type: ignore[arg-type]
            pytest.fail("accepted a path as a store")  # pragma: no cover


def _tamper(db: Path, statement: str, *params: object) -> None:
    conn = sqlite3.connect(db)
    try:
        conn.execute(statement, params)
        conn.commit()
    finally:
        conn.close()


async def test_a_tampered_runtime_id_names_no_file_to_touch(tmp_path: Path) -> None:
    """Values read back are data, never paths (§15): the liveness check builds no path from one."""
    db = tmp_path / "runs.db"
    store = td.SQLiteStore(db)
    writer = runtime_id()
    await store.attach(writer)
    live = record(writer, td.RunStatus.RUNNING)
    await store.write([live])
    await store.detach(writer)
    victim = tmp_path / "victim.lock"
    victim.write_text("someone else's lock")
    # The lock folder is runs.db-runtimes/: this id points at tmp_path/victim.lock.
    _tamper(db, "UPDATE runs SET runtime_id = ? WHERE run_id = ?", "../victim", live.run_id)
    other, me = td.SQLiteStore(db), runtime_id()
    with pytest.raises(td.StoreError, match="no lock file was touched") as info:
        await other.attach(me)
    assert info.value.path == str(db)
    assert "'../victim'" in str(info.value)
    assert victim.read_text() == "someone else's lock"
    await other.aclose()


async def test_a_tampered_status_is_a_store_error(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    async with (
        td.open_runtime(SUBAGENTS, store=td.SQLiteStore(db)) as rt,
        rt.open_parent("o") as parent,
    ):
        result = await parent.delegate("quick", "t")
    _tamper(db, "UPDATE runs SET status = 'exploded' WHERE run_id = ?", result.run_id)
    store = td.SQLiteStore(db)
    with pytest.raises(td.StoreError, match="'exploded' is not a run status"):
        await store.attach(runtime_id())
    await store.aclose()


async def test_an_unencodable_record_leaves_the_file_intact(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    store = td.SQLiteStore(db)
    me = runtime_id()
    kept = record(me, td.RunStatus.COMPLETED, final_result="kept")
    await store.write([kept])
    bad = record(me, td.RunStatus.COMPLETED, final_result={"nan": float("nan")})
    with pytest.raises(td.StoreError, match="NaN or infinity") as info:
        await store.write([record(me), bad])
    assert info.value.run_id == bad.run_id
    await store.aclose()
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert conn.execute("SELECT run_id FROM runs").fetchall() == [(kept.run_id,)]
    finally:
        conn.close()


# The file a version of trio_delegate with schema 1 wrote.
V1_SCHEMA = [
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE runs (run_id TEXT PRIMARY KEY, runtime_id TEXT NOT NULL, owner TEXT NOT NULL,
        subagent TEXT NOT NULL, status TEXT NOT NULL, admitted_at TEXT NOT NULL, ended_at TEXT,
        record TEXT NOT NULL)""",
    "CREATE INDEX runs_by_owner ON runs (owner)",
    "CREATE INDEX runs_live ON runs (runtime_id) WHERE status IN ('pending', 'running')",
    "INSERT INTO meta VALUES ('application', 'trio_delegate'), ('schema_version', '1')",
]


def _version_1_file(db: Path, *records: td.RunRecord) -> None:
    conn = sqlite3.connect(db)
    try:
        for statement in V1_SCHEMA:
            conn.execute(statement)
        for old in records:
            data = {
                key: value
                for key, value in converter.unstructure(old).items()
                if key not in ("started_at", "deadline_at", "cancel_requested", "observed")
            }
            conn.execute(
                "INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    old.run_id,
                    old.runtime_id,
                    old.owner,
                    old.subagent,
                    old.status.value,
                    old.admitted_at,
                    old.ended_at,
                    json.dumps(data),
                ),
            )
        conn.commit()
    finally:
        conn.close()


async def test_a_version_1_file_is_migrated_and_reads_the_same(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    old_runtime = runtime_id()
    done = record(old_runtime, td.RunStatus.COMPLETED, final_result={"kept": [1, 2]})
    live = record(old_runtime, td.RunStatus.RUNNING)
    _version_1_file(db, done, live)
    store, me = td.SQLiteStore(db), runtime_id()
    snapshot = await store.attach(me)  # migrates; the old runtime is gone
    assert snapshot.interrupted == (live.run_id,)
    assert await store.get(done.run_id) == done
    await store.mark_observed(done.run_id)
    stored = await store.get(done.run_id)
    assert stored is not None
    assert stored.observed
    changed = await store.changes(0)
    assert [r.run_id for r in changed.records] == [live.run_id, done.run_id]
    await store.detach(me)
    conn = sqlite3.connect(db)
    try:
        version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    finally:
        conn.close()
    assert version == (str(SCHEMA_VERSION),)
