"""A failed run's store record says which error it answers with (``RunRecord.failure``).

A run answered from its store, in a later runtime, raises the same error as
it did in the runtime that ran it: ``InvalidResultError`` for a result that
broke its ``final_schema``, ``RunFailedError`` otherwise.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

import trio_delegate as td


async def _text(ctx: td.ChildContext) -> str:
    return "not a number"


async def _broken(ctx: td.ChildContext) -> str:
    raise RuntimeError("disk on fire")


SUBAGENTS = [
    td.Subagent("counter", _text, final_schema={"type": "integer"}),
    td.Subagent("broken", _broken),
]
LENIENT = td.Config(fail_closed=False)


async def _failed_runs(db: Path) -> dict[str, str]:
    """Run one of each failure in a runtime on *db*; their ids by subagent."""
    ids = {}
    async with (
        td.open_runtime(SUBAGENTS, config=LENIENT, store=td.SQLiteStore(db)) as rt,
        rt.open_parent("o") as parent,
    ):
        for name in ("counter", "broken"):
            handle = await parent.start(name, "go")
            with pytest.raises(td.RunFailedError):
                await parent.wait(handle.run_id)
            ids[name] = handle.run_id
    return ids


async def _answer(db: Path, run_id: str) -> td.RunFailedError:
    """The error a new runtime on *db* answers for *run_id* with."""
    async with (
        td.open_runtime(SUBAGENTS, config=LENIENT, store=td.SQLiteStore(db)) as rt,
        rt.open_parent("o") as parent,
    ):
        with pytest.raises(td.RunFailedError) as raised:
            await parent.wait(run_id)
    return raised.value


async def test_the_record_keeps_the_failure_and_a_later_runtime_answers_with_it(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    ids = await _failed_runs(db)
    store = td.SQLiteStore(db)
    schema_record = await store.get(ids["counter"])
    error_record = await store.get(ids["broken"])
    assert schema_record is not None
    assert error_record is not None
    assert schema_record.failure == "invalid_result"
    assert error_record.failure == "run_failed"
    assert type(await _answer(db, ids["counter"])) is td.InvalidResultError
    assert type(await _answer(db, ids["broken"])) is td.RunFailedError


async def test_the_failure_is_read_from_the_record_not_from_the_error_type(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    ids = await _failed_runs(db)
    _edit_state(db, ids["broken"], failure="invalid_result")
    assert type(await _answer(db, ids["broken"])) is td.InvalidResultError


async def test_a_row_from_before_the_failure_kind_is_read_by_its_error_type(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    ids = await _failed_runs(db)
    for run_id in ids.values():
        _edit_state(db, run_id, failure=None, drop=True)
    assert type(await _answer(db, ids["counter"])) is td.InvalidResultError
    assert type(await _answer(db, ids["broken"])) is td.RunFailedError


def _edit_state(db: Path, run_id: str, *, failure: str | None, drop: bool = False) -> None:
    conn = sqlite3.connect(db)
    try:
        (text,) = conn.execute("SELECT state FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        state = json.loads(text)
        if drop:
            del state["failure"]
        else:
            state["failure"] = failure
        with conn:
            conn.execute("UPDATE runs SET state = ? WHERE run_id = ?", (json.dumps(state), run_id))
    finally:
        conn.close()
