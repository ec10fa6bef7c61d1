"""``trio-delegate runs watch`` and the read-only change feed it follows."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import attrs
import pytest
import trio

import trio_delegate as td
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
