"""Contract §12: a store keeps a chain of continuations in space linear in its length.

Counted in bytes of JSON stored (SQLite's and PostgreSQL's ``record`` and
``state`` texts, a MemoryStore's records encoded), not in file sizes or time.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import attrs
import psycopg
import pytest
import trio
import trio.testing

import trio_delegate as td

LINKS = 30
RESULT_CHARS = 2_000


async def _reply(ctx: td.ChildContext) -> str:
    # Big enough that every copy of an earlier result would show.
    return ctx.task[:1] * RESULT_CHARS


def _expected_history(tasks: list[str]) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    for task in tasks:
        entries.append({"role": "user", "content": task})
        entries.append({"role": "assistant", "content": task[:1] * RESULT_CHARS})
    return entries


class _Kind:
    def __init__(self, kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
        self.kind = kind
        self.path = tmp_path / "runs.db"
        self.memory = td.MemoryStore()
        if kind == "postgres":
            self.schema: str = request.getfixturevalue("pg_schema")
            self.server: Any = request.getfixturevalue("pg_server")

    def store(self) -> Any:
        if self.kind == "memory":
            return self.memory
        if self.kind == "sqlite":
            return td.SQLiteStore(self.path)
        return td.PostgresStore(self.server.dsn(), schema=self.schema)

    async def stored_bytes(self, store: Any) -> int:
        if self.kind == "memory":
            records = await store.list_runs(limit=10_000)
            return sum(len(json.dumps(attrs.asdict(record), default=str)) for record in records)
        if self.kind == "sqlite":
            with sqlite3.connect(self.path) as conn:
                (total,) = conn.execute(
                    "SELECT sum(length(record)) + sum(coalesce(length(state), 0)) FROM runs"
                ).fetchone()
            return int(total)
        with psycopg.connect(self.server.admin_dsn(), autocommit=True) as conn:
            (total,) = conn.execute(
                f"SELECT sum(length(record)) + sum(length(state)) FROM {self.schema}.runs"
            ).fetchone() or (0,)
        return int(total)

    def tamper_link(self, run_id: str, continues: str) -> None:
        """Make the stored head of *run_id* say it continues *continues*, as something
        other than a runtime would (an editor, a migration gone wrong, an attacker)."""
        if self.kind == "memory":
            row = self.memory._rows[run_id]
            head = json.loads(row.head)
            head["continues"] = continues
            row.head = json.dumps(head)
        elif self.kind == "sqlite":
            with contextlib.closing(sqlite3.connect(self.path)) as conn, conn:
                conn.execute(
                    "UPDATE runs SET record = json_set(record, '$.continues', ?) WHERE run_id = ?",
                    (continues, run_id),
                )
        else:
            with psycopg.connect(self.server.admin_dsn(), autocommit=True) as server:
                server.execute(
                    f"UPDATE {self.schema}.runs SET record = "
                    "jsonb_set(record::jsonb, '{continues}', to_jsonb(%s::text))::text "
                    "WHERE run_id = %s",
                    (continues, run_id),
                )


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def kind(request: pytest.FixtureRequest, tmp_path: Path) -> _Kind:
    return _Kind(request.param, tmp_path, request)


async def test_a_chain_of_continuations_is_stored_in_space_linear_in_its_length(
    kind: _Kind,
) -> None:
    seen: list[tuple[Any, ...]] = []

    async def reply(ctx: td.ChildContext) -> str:
        seen.append(ctx.history)
        return await _reply(ctx)

    subagents = [td.Subagent("reply", reply)]
    tasks = [chr(ord("a") + index % 26) + f" turn {index}" for index in range(LINKS)]
    store = kind.store()
    with trio.fail_after(60):
        async with td.open_runtime(subagents, store=store) as rt, rt.open_parent() as parent:
            result = await parent.delegate("reply", tasks[0])
            for task in tasks[1:]:
                result = await parent.continue_run(result.run_id, task)  # type: ignore[assignment]
        last = result.run_id
        stored = await kind.stored_bytes(store)
        # Each run's own turn once (about RESULT_CHARS), not every earlier one
        # again: a quadratic store would hold about LINKS / 2 times as much.
        assert stored < 3 * LINKS * RESULT_CHARS, stored
        assert seen[-1] == tuple(_expected_history(tasks[:-1]))

        # After a restart the history is rebuilt from the chain, whole.
        seen.clear()
        async with (
            td.open_runtime(subagents, store=kind.store()) as rt,
            rt.open_parent() as parent,
        ):
            await parent.continue_run(last, "once more")
        assert seen == [tuple(_expected_history(tasks))]


async def test_a_continuation_whose_chain_lost_a_link_is_refused_with_a_clear_error(
    tmp_path: Path,
) -> None:
    subagents = [td.Subagent("reply", _reply)]
    store = td.MemoryStore()
    async with td.open_runtime(subagents, store=store) as rt, rt.open_parent() as parent:
        first = await parent.delegate("reply", "a first")
        second = await parent.continue_run(first.run_id, "b second")
    # Something else removed the first run from the store.
    store._rows.pop(first.run_id)
    async with td.open_runtime(subagents, store=store) as rt, rt.open_parent() as parent:
        with pytest.raises(td.InvalidArgumentsError, match="no longer in the store"):
            await parent.continue_run(second.run_id, "c third")


async def test_a_chain_link_to_another_owners_run_is_a_tampered_store(kind: _Kind) -> None:
    seen: list[tuple[Any, ...]] = []

    async def reply(ctx: td.ChildContext) -> str:
        seen.append(ctx.history)
        return f"reply to {ctx.task}"

    subagents = [td.Subagent("reply", reply)]
    async with td.open_runtime(subagents, store=kind.store()) as rt:
        async with rt.open_parent("alice") as alice:
            first = await alice.delegate("reply", "alice's first")
            second = await alice.continue_run(first.run_id, "alice's second")
        async with rt.open_parent("mallory") as mallory:
            secret = await mallory.delegate("reply", "mallory's secret")
    # Alice's continuation now claims to continue Mallory's run.
    kind.tamper_link(second.run_id, secret.run_id)
    seen.clear()
    async with (
        td.open_runtime(subagents, store=kind.store()) as rt,
        rt.open_parent("alice") as alice,
    ):
        with pytest.raises(td.StoreError) as caught:
            await alice.continue_run(second.run_id, "alice's third")
    message = str(caught.value)
    assert second.run_id in message, message
    assert secret.run_id in message, message
    assert "another owner" in message, message
    assert "secret" not in message, message
    # Nothing of Mallory's conversation reached a runner: no run started at all.
    assert seen == []
