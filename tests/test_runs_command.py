"""``trio-delegate runs list|show`` against a real store file."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import trio

import trio_delegate as td
from trio_delegate._cli._main import main

from .pg_server import PostgresServer
from .stores import record, runtime_id
from .test_sqlite_store import V1_SCHEMA


async def quick(ctx: td.ChildContext) -> dict[str, str]:
    await trio.lowlevel.checkpoint()
    if ctx.task == "fail":
        raise ValueError("asked to fail")
    return {"done": ctx.task}


async def fill(db: Path | td.ResultStore) -> list[str]:
    ids = []
    config = td.Config(fail_closed=False)
    store = td.SQLiteStore(db) if isinstance(db, Path) else db
    async with td.open_runtime([td.Subagent("quick", quick)], store=store, config=config) as rt:
        for owner, task in (("alice", "one"), ("bob", "two"), ("alice", "fail")):
            async with rt.open_parent(owner) as parent:
                handle = await parent.start("quick", task)
                ids.append(handle.run_id)
                with pytest.raises(td.RunFailedError) if task == "fail" else _nothing():
                    await parent.wait(handle.run_id)
    return ids


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def test_runs_list_json_filters_and_orders(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.db"
    ids = trio.run(fill, db)
    assert main(["runs", "list", "--db", str(db), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [run["run_id"] for run in listed] == ids[::-1]
    assert main(["runs", "list", "--db", str(db), "--json", "--owner", "alice"]) == 0
    assert [run["task"] for run in json.loads(capsys.readouterr().out)] == ["fail", "one"]
    assert main(["runs", "list", "--db", str(db), "--json", "--status", "failed"]) == 0
    failed = json.loads(capsys.readouterr().out)
    assert [run["error_type"] for run in failed] == ["ValueError"]


def test_runs_list_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "runs.db"
    ids = trio.run(fill, db)
    assert main(["runs", "list", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    for run_id in ids:
        assert run_id in out
    assert "completed" in out
    assert "failed" in out


def test_runs_show(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "runs.db"
    ids = trio.run(fill, db)
    assert main(["runs", "show", ids[0], "--db", str(db), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["final_result"] == {"done": "one"}
    assert shown["owner"] == "alice"
    assert main(["runs", "show", ids[2], "--db", str(db)]) == 0
    assert "asked to fail" in capsys.readouterr().out


def test_runs_show_unknown_id(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "runs.db"
    trio.run(fill, db)
    assert main(["runs", "show", "run_nope", "--db", str(db)]) == 1
    assert "starts with 'run_nope'" in capsys.readouterr().err


# -- runs show by the start of an id: ids only ---------------------------------------------

BIG_RESULT = "r" * 100_000


async def big_runs(store: td.ResultStore, count: int) -> list[str]:
    """*count* completed runs written to *store*, each with a result of 100,000 characters."""
    owner = runtime_id()
    written = [record(owner, td.RunStatus.COMPLETED, final_result=BIG_RESULT) for _ in range(count)]
    await store.write(written)
    aclose = getattr(store, "aclose", None)
    if aclose is not None:
        await aclose()
    return [run.run_id for run in written]


def unique_start(run_id: str, others: list[str]) -> str:
    """The shortest start of *run_id* (past ``run_``) that no other id of *others* has."""
    for end in range(5, len(run_id) + 1):
        start = run_id[:end]
        if not any(other.startswith(start) for other in others if other != run_id):
            return start
    raise AssertionError("ids are unique")


def count_decodes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of every record decoded from here on (one entry per record)."""
    from trio_delegate._stores import _codec

    decoded: list[int] = []
    real = _codec.decode_record

    def counting(head: object, state: object, *rest: Any) -> td.RunRecord:
        decoded.append(len(str(head)) + len(str(state)))
        return real(head, state, *rest)

    monkeypatch.setattr(_codec, "decode_record", counting)
    return decoded


def check_show_by_start(
    argv: list[str], ids: list[str], monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    decoded = count_decodes(monkeypatch)
    oldest = ids[0]
    assert main(["runs", "show", unique_start(oldest, ids), *argv, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["run_id"] == oldest
    # The one run shown was read; no other record was.
    assert len(decoded) == 1
    # A start of many: their ids (a few), and nothing read.
    assert main(["runs", "show", "run_", *argv]) == 1
    said = capsys.readouterr().err
    assert "is the start of more than 5 run ids" in said
    assert said.count("run_") == 1 + 5
    assert ", and more" in said
    assert len(decoded) == 1
    # No run starts so: nothing read either.
    for start in ("run_xyz", "run_%", "run__", "%"):
        assert main(["runs", "show", start, *argv]) == 1
        assert "is or starts with" in capsys.readouterr().err
    assert len(decoded) == 1


def test_runs_show_finds_an_id_by_its_start_reading_that_record_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "runs.db"
    ids = trio.run(big_runs, td.SQLiteStore(db), 40)
    check_show_by_start(["--db", str(db)], ids, monkeypatch, capsys)


def test_runs_show_finds_an_id_by_its_start_in_postgres(
    pg_server: PostgresServer,
    pg_schema: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ids = trio.run(big_runs, td.PostgresStore(pg_server.dsn(), schema=pg_schema), 12)
    argv = ["--db", pg_server.dsn(), "--schema", pg_schema]
    check_show_by_start(argv, ids, monkeypatch, capsys)


def test_runs_echo_a_huge_argument_briefly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.db"
    trio.run(fill, db)
    assert main(["runs", "show", "run_" + "a" * 100_000, "--db", str(db)]) == 1
    said = capsys.readouterr().err
    assert "starts with 'run_aaa" in said
    assert len(said) < 300
    for limit in ("9" * 5_000, "9" * 30):
        with pytest.raises(SystemExit) as info:
            main(["runs", "list", "--limit", limit, "--db", str(db)])
        assert info.value.code == 2
        said = capsys.readouterr().err
        assert "--limit" in said
        assert len(said) < 1_000
    assert "from 1 to 1,000,000" in said


def test_runs_without_a_store_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "missing.db"
    assert main(["runs", "list", "--db", str(db)]) == 1
    assert "no store at" in capsys.readouterr().err
    assert not db.exists()


def test_runs_bad_arguments_exit_2(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as info:
        main(["runs", "list", "--status", "bogus"])
    assert info.value.code == 2
    with pytest.raises(SystemExit) as info:
        main(["runs", "list", "--limit", "0"])
    assert info.value.code == 2
    with pytest.raises(SystemExit) as info:
        main(["runs"])
    assert info.value.code == 2


# -- reading only: no write permission, another writer, old files ------------------------

ROOT = Path(__file__).resolve().parent.parent


def _as_reader_without_write_rights() -> list[str]:
    """A command prefix under which this user cannot write files it owns."""
    if os.geteuid() != 0:
        return []
    # Root ignores permission bits; in a user namespace of its own (no ids
    # mapped) it keeps only what the bits give the file's owner.
    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "--user", "true"], check=False).returncode:
        pytest.skip("running as root without user namespaces: cannot drop write permission")
    return [unshare, "--user"]


def test_runs_reads_a_store_it_cannot_write(tmp_path: Path) -> None:
    folder = tmp_path / "store"
    db = folder / "runs.db"
    ids = trio.run(fill, db)
    before = db.read_bytes()
    db.chmod(0o400)
    folder.chmod(0o500)
    try:
        done = subprocess.run(
            [
                *_as_reader_without_write_rights(),
                sys.executable,
                "-m",
                "trio_delegate",
                "runs",
                "list",
                "--db",
                str(db),
                "--json",
            ],
            capture_output=True,
            text=True,
            check=False,
            cwd=ROOT,
            timeout=60,
        )
    finally:
        folder.chmod(0o700)
        db.chmod(0o600)
    assert done.returncode == 0, done.stderr
    assert [run["run_id"] for run in json.loads(done.stdout)] == ids[::-1]
    assert db.read_bytes() == before
    assert sorted(path.name for path in folder.iterdir()) == ["runs.db", "runs.db-runtimes"]


HOLD_WRITE_LOCK = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
conn.execute("UPDATE runs SET owner = owner || '!'")
print("locked", flush=True)
sys.stdin.read()
conn.execute("ROLLBACK")
"""


def test_runs_reads_while_another_process_holds_the_write_lock(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.db"
    ids = trio.run(fill, db)
    with subprocess.Popen(
        [sys.executable, "-c", HOLD_WRITE_LOCK, str(db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as holder:
        assert holder.stdin is not None
        assert holder.stdout is not None
        with holder.stdin:
            assert holder.stdout.readline().strip() == "locked"
            started = time.monotonic()
            assert main(["runs", "list", "--db", str(db), "--json"]) == 0
            listed = json.loads(capsys.readouterr().out)
            assert main(["runs", "show", ids[0], "--db", str(db), "--json"]) == 0
            shown = json.loads(capsys.readouterr().out)
            # Not a wait for the lock: the store would give up after 10 s (the
            # bound is generous for a busy machine, and still short of a wait).
            assert time.monotonic() - started < 10
        holder.wait(timeout=30)
    # What was committed, without the uncommitted change.
    assert [run["owner"] for run in listed] == ["alice", "bob", "alice"]
    assert shown["run_id"] == ids[0]


def test_runs_reads_an_old_file_without_changing_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.db"
    conn = sqlite3.connect(db)
    try:
        for statement in V1_SCHEMA:
            conn.execute(statement)
        old = {
            "run_id": "run_" + "0" * 32,
            "runtime_id": "rt_" + "1" * 32,
            "owner": "o",
            "subagent": "s",
            "task": "old",
            "task_summary": "old",
            "status": "completed",
            "final_result": {"v": 1},
            "admitted_at": "2020-01-01T00:00:00.000+00:00",
            "ended_at": "2020-01-01T00:00:01.000+00:00",
            "usage": {"input_tokens": 5, "output_tokens": 2, "cost_usd": 0.01},
        }
        conn.execute(
            "INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                old["run_id"],
                old["runtime_id"],
                "o",
                "s",
                "completed",
                old["admitted_at"],
                old["ended_at"],
                json.dumps(old),
            ),
        )
        conn.commit()
    finally:
        conn.close()
    before = db.read_bytes()
    assert main(["runs", "show", str(old["run_id"]), "--db", str(db), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["final_result"] == {"v": 1}
    assert shown["observed"] is False
    # The usage of a record of the first layout is in its one document.
    assert main(["runs", "usage", "--db", str(db), "--json"]) == 0
    total = json.loads(capsys.readouterr().out)["total"]
    assert (total["runs"], total["total_tokens"], total["cost_usd"]) == (1, 7, 0.01)
    assert db.read_bytes() == before


# -- every stored string shown literally -------------------------------------------------

HOSTILE_TASK = "[/INST] [link=https://evil.example]click[/link] [bold red]loud[/] \\[x]"
HOSTILE_OWNER = "\x1b[2J\x1b]0;pwned\x07owner\r"
HOSTILE_ERROR = "abc\u202edcba \x9b31m csi \u2066iso\u2069"


async def hostile_store(db: Path) -> str:
    store = td.SQLiteStore(db)
    written = record(
        runtime_id(),
        td.RunStatus.FAILED,
        owner=HOSTILE_OWNER,
        task=HOSTILE_TASK,
        error_type="ValueError",
        error_message=HOSTILE_ERROR,
    )
    await store.write([written])
    await store.aclose()
    # A tampered row: a lone surrogate no runtime would write.
    conn = sqlite3.connect(db)
    try:
        conn.execute("UPDATE runs SET state = replace(state, 'ValueError', 'Value\\ud800Error')")
        conn.commit()
    finally:
        conn.close()
    return written.run_id


def test_runs_shows_every_stored_string_literally(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.db"
    run = trio.run(hostile_store, db)
    assert main(["runs", "list", "--db", str(db)]) == 0
    assert main(["runs", "show", run, "--db", str(db)]) == 0
    out = capsys.readouterr().out
    flat = out.replace("\n", "").replace("│", "").replace(" ", "")
    assert HOSTILE_TASK.replace(" ", "") in flat  # markup printed, not applied
    for raw in ("\x1b", "\x07", "\r", "\u202e", "\x9b", "\u2066", "\ud800"):
        assert raw not in out
    for shown in ("\\x1b[2J", "\\x07owner", "\\u202e", "\\x9b31m", "\\u2066iso", "\\ud800"):
        assert shown in flat


def test_runs_json_escapes_what_a_terminal_would_act_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.db"
    run = trio.run(hostile_store, db)
    assert main(["runs", "show", run, "--db", str(db), "--json"]) == 0
    out = capsys.readouterr().out
    for raw in ("\x1b", "\x07", "\r", "\u202e", "\x9b", "\ud800"):
        assert raw not in out
    shown = json.loads(out)  # and the data is all there
    assert shown["task"] == HOSTILE_TASK
    assert shown["owner"] == HOSTILE_OWNER
    assert shown["error_message"] == HOSTILE_ERROR
    assert shown["error_type"] == "Value\ud800Error"


# -- PostgreSQL ------------------------------------------------------------------------------


async def fill_postgres(dsn: str, schema: str) -> list[str]:
    return await fill(td.PostgresStore(dsn, schema=schema))


def test_runs_reads_postgres_with_the_password_from_the_environment(
    pg_server: PostgresServer,
    pg_schema: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ids = trio.run(fill_postgres, pg_server.dsn(), pg_schema)
    bare = pg_server.dsn(password=False)
    monkeypatch.setenv("PGPASSWORD", pg_server.password)
    common = ["--db", bare, "--schema", pg_schema]
    assert main(["runs", "list", *common, "--json", "--owner", "alice"]) == 0
    assert [run["run_id"] for run in json.loads(capsys.readouterr().out)] == [ids[2], ids[0]]
    assert main(["runs", "show", ids[1], *common]) == 0
    assert "bob" in capsys.readouterr().out
    monkeypatch.delenv("PGPASSWORD")
    # A password in the URI works too, and is never printed.
    assert main(["runs", "list", "--db", pg_server.dsn(), "--schema", pg_schema]) == 0
    out = capsys.readouterr().out
    assert pg_server.password not in out
    assert "postgres:***@127.0.0.1" in out.replace("\n", "")


def test_runs_on_postgres_explains_what_is_wrong_without_the_password(
    pg_server: PostgresServer, pg_schema: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["runs", "list", "--db", pg_server.dsn(), "--schema", pg_schema]) == 1
    err = capsys.readouterr().err
    assert "there is no trio_delegate store" in err
    wrong = pg_server.dsn().replace(pg_server.password, "wrong-secret")
    assert main(["runs", "list", "--db", wrong, "--schema", pg_schema]) == 1
    err = capsys.readouterr().err
    assert "refused the credentials" in err
    assert "wrong-secret" not in err


def test_runs_reads_the_store_a_serve_configuration_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    ids = trio.run(fill, project / "runs.db")
    config = project / "subagents.toml"
    config.write_text('[runtime]\nstore = "runs.db"\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # relative to the configuration, as serve reads it
    assert main(["runs", "list", "--config", str(config), "--json"]) == 0
    assert {entry["run_id"] for entry in json.loads(capsys.readouterr().out)} == set(ids)
    assert main(["runs", "show", ids[0], "--config", str(config), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["run_id"] == ids[0]
    memory_only = project / "memory.toml"
    memory_only.write_text("[runtime]\nsubagent_timeout_seconds = 60\n")
    assert main(["runs", "list", "--config", str(memory_only)]) == 1
    assert "no [runtime] store" in capsys.readouterr().err
    assert main(["runs", "list", "--config", str(project / "missing.toml")]) == 1
    assert "no such file" in capsys.readouterr().err
    assert not (elsewhere / ".trio-delegate").exists()
