"""``trio-delegate runs list|show`` against a real store file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

import trio_delegate as td
from trio_delegate._cli._main import main


async def quick(ctx: td.ChildContext) -> dict[str, str]:
    await trio.lowlevel.checkpoint()
    if ctx.task == "fail":
        raise ValueError("asked to fail")
    return {"done": ctx.task}


async def fill(db: Path) -> list[str]:
    ids = []
    config = td.Config(fail_closed=False)
    store = td.SQLiteStore(db)
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
    assert "no run 'run_nope'" in capsys.readouterr().err


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
