"""``trio-delegate runs answer``: a run's open question answered from another terminal
through the shared store (contract §19, §16).

The run lives in this test's runtime; the command runs in a process of its
own, as it would in another terminal. Real time, as the shared-store tests.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

import trio_delegate as td
from trio_delegate._cli._main import main

from .helpers import sub
from .stores import ROOT
from .test_shared_store import NEWS
from .test_store_questions import painter, result_of

LENIENT = td.Config(fail_closed=False)


async def answer(db: Path, *args: str) -> tuple[int, str, str]:
    """``trio-delegate runs answer ARGS --db DB`` in a process of its own."""
    done = await trio.run_process(
        [sys.executable, "-m", "trio_delegate", "runs", "answer", *args, "--db", str(db)],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        cwd=ROOT,
    )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def asking_run(parent: td.Parent, store: td.ResultStore) -> tuple[str, str]:
    """Start a run that asks; its id and its question's, once the store holds it."""
    run_id = (await parent.start("painter", "paint the fence")).run_id

    async def stored() -> Any:
        record = await store.get(run_id)
        return record is not None and record.questions

    with trio.fail_after(NEWS):
        # Written by the runtime's writer task within 0.25 s: poll the store.
        while not await stored():  # noqa: ASYNC110
            await trio.sleep(0.02)
    return run_id, parent.questions()[0].question_id


async def test_an_answer_from_another_terminal_reaches_the_child(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    store = td.SQLiteStore(db)
    async with (
        td.open_runtime([sub("painter", painter, asks=True)], store=store, config=LENIENT) as rt,
        rt.open_parent("alice") as parent,
    ):
        run_id, question_id = await asking_run(parent, store)
        code, _, err = await answer(db, run_id, "blue")
        assert code == 1
        assert "is not JSON" in err
        code, _, err = await answer(db, run_id, '"green"')
        assert code == 1
        assert "does not satisfy its schema" in err
        assert question_id in err
        code, _, err = await answer(db, "run_" + "0" * 32, '"blue"')
        assert code == 1
        assert "holds no run" in err
        code, _, err = await answer(db, run_id, '"blue"', "--owner", "bob")
        assert code == 1
        assert "holds no run" in err
        code, _, err = await answer(db, run_id, '"blue"', "--question", "q_" + "0" * 32)
        assert code == 1
        assert "no open question q_" in err
        code, out, _ = await answer(
            db, run_id, '"blue"', "--question", question_id, "--owner", "alice", "--json"
        )
        assert code == 0
        assert json.loads(out) == {
            "run_id": run_id,
            "question_id": question_id,
            "accepted": True,
            "status": "running",
        }
        assert (await result_of(parent, run_id)).final_result == {"colour": "blue"}
        code, _, err = await answer(db, run_id, '"red"')
        assert code == 1
        assert "no open question" in err


async def test_a_question_declined_from_another_terminal(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    store = td.SQLiteStore(db)
    async with (
        td.open_runtime([sub("painter", painter, asks=True)], store=store, config=LENIENT) as rt,
        rt.open_parent("alice") as parent,
    ):
        run_id, question_id = await asking_run(parent, store)
        code, out, _ = await answer(db, run_id, "--decline", "ask someone else")
        assert code == 0
        assert out.startswith(f"declined question {question_id} of run {run_id}")
        result = await result_of(parent, run_id)
        assert result.final_result == {"declined": "ask someone else"}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["not-a-run"], "is not a run id"),
        (["run_" + "a" * 32], "give the answer as JSON, or --decline REASON"),
        (["run_" + "a" * 32, '"x"', "--decline", "no"], "not both nor neither"),
        (["run_" + "a" * 32, '"x"', "--db", "{nowhere}"], "no store at"),
    ],
)
def test_malformed_commands_say_what_to_do(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [arg.replace("{nowhere}", str(tmp_path / "missing.db")) for arg in argv]
    assert main(["runs", "answer", *argv]) == 1
    assert message in capsys.readouterr().err
    assert not (tmp_path / "missing.db").exists()


def test_the_command_is_listed_among_the_runs_actions() -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "trio_delegate", "runs", "--help"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    assert "answer a run's open question" in shown


async def runs_cli(db: Path, *args: str) -> tuple[int, str, str]:
    """``trio-delegate runs ARGS --db DB`` in a process of its own."""
    done = await trio.run_process(
        [sys.executable, "-m", "trio_delegate", "runs", *args, "--db", str(db)],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        cwd=ROOT,
    )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def test_show_and_watch_read_the_question_and_progress_the_store_holds(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    store = td.SQLiteStore(db)
    async with (
        td.open_runtime([sub("painter", painter, asks=True)], store=store, config=LENIENT) as rt,
        rt.open_parent("alice") as parent,
    ):
        run_id, question_id = await asking_run(parent, store)
        code, out, err = await runs_cli(db, "show", run_id)
        assert code == 0, err
        assert "which colour?" in out
        assert question_id in out
        assert "1/3" in out
        code, out, err = await runs_cli(db, "show", run_id, "--json")
        assert code == 0, err
        shown = json.loads(out)
        assert shown["waiting_for_answer"] is True
        assert [q["question_id"] for q in shown["questions"]] == [question_id]
        assert shown["progress"]["message"] == "choosing"
        code, out, err = await runs_cli(db, "watch", "--duration", "0.01", "--json")
        assert code == 0, err
        line = json.loads(out.splitlines()[0])
        assert line["waiting_for_answer"] is True
        assert line["progress"]["progress"] == 1
        parent.answer(run_id, "blue")
        assert (await result_of(parent, run_id)).final_result == {"colour": "blue"}
