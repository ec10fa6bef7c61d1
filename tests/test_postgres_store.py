"""PostgresStore against a real server: failures named, liveness across hosts, notifications.

The contract every store keeps is in test_store_contract.py; here is what only
a store on a server has: connections, credentials, schemas, leases, a server
that drops connections, statements that must not hang.
"""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import attrs
import psycopg
import pytest
import trio

import trio_delegate as td
from trio_delegate._stores._postgres import SCHEMA_VERSION
from trio_delegate._stores._protocol import INTERRUPTED_ERROR_TYPE

from .pg_server import PostgresServer
from .stores import record, runtime_id


@pytest.fixture
def admin(pg_server: PostgresServer) -> Iterator[psycopg.Connection[Any]]:
    """A superuser connection to look at and meddle with the server."""
    with psycopg.connect(pg_server.admin_dsn(), autocommit=True) as conn:
        yield conn


@pytest.fixture
async def stores(pg_server: PostgresServer, pg_schema: str) -> AsyncIterator[list[Any]]:
    """Handles made by a test, closed after it."""
    made: list[Any] = []
    try:
        yield made
    finally:
        for store in made:
            await store.aclose()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port  # nothing listens there once the socket is closed


async def quick(ctx: td.ChildContext) -> dict[str, str]:
    await trio.lowlevel.checkpoint()
    return {"echo": ctx.task, "nul": "a\x00b"}


SUBAGENTS = [td.Subagent("quick", quick)]


# -- failures are StoreErrors that say why, and never show the password ---------------


async def test_an_unreachable_server_is_named_without_its_password() -> None:
    dsn = f"postgresql://someone:hunter2-secret@127.0.0.1:{closed_port()}/db"
    store = td.PostgresStore(dsn, connect_timeout=2)
    assert "hunter2-secret" not in repr(store)
    with trio.fail_after(10), pytest.raises(td.StoreError, match="cannot be reached") as info:
        await store.attach(runtime_id())
    assert "hunter2-secret" not in str(info.value)
    assert info.value.path == f"postgresql://someone:***@127.0.0.1:{dsn.rsplit(':', 1)[1]}"
    await store.aclose()


async def test_bad_credentials_are_named_without_the_password(
    pg_server: PostgresServer, pg_schema: str
) -> None:
    wrong = pg_server.dsn().replace(pg_server.password, "not-the-password")
    store = td.PostgresStore(wrong, schema=pg_schema)
    with pytest.raises(td.StoreError, match="refused the credentials") as info:
        await store.get(record(runtime_id()).run_id)
    assert "not-the-password" not in str(info.value)
    assert "PGPASSWORD" in str(info.value)
    await store.aclose()


async def test_the_password_comes_from_the_environment(
    pg_server: PostgresServer, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    bare = pg_server.dsn(password=False)
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("PGPASSFILE", "/nonexistent")
    store = td.PostgresStore(bare, schema=pg_schema)
    with pytest.raises(td.StoreError, match="refused the credentials"):
        await store.changes(None)
    await store.aclose()
    monkeypatch.setenv("PGPASSWORD", pg_server.password)
    store = td.PostgresStore(bare, schema=pg_schema)
    assert (await store.changes(None)).cursor == 0
    await store.aclose()


async def test_a_foreign_schema_is_refused_and_left_untouched(
    pg_server: PostgresServer, pg_schema: str, admin: psycopg.Connection[Any]
) -> None:
    admin.execute(f"CREATE SCHEMA {pg_schema}")
    admin.execute(f"CREATE TABLE {pg_schema}.invoices (id int PRIMARY KEY, total numeric)")
    admin.execute(f"INSERT INTO {pg_schema}.invoices VALUES (1, 9.5)")
    store = td.PostgresStore(pg_server.dsn(), schema=pg_schema)
    with pytest.raises(td.StoreError, match="belongs to something else"):
        await store.attach(runtime_id())
    await store.aclose()
    tables = admin.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", [pg_schema]
    ).fetchall()
    assert tables == [("invoices",)]


async def test_a_newer_schema_is_refused_and_left_untouched(
    pg_server: PostgresServer, pg_schema: str, admin: psycopg.Connection[Any]
) -> None:
    store = td.PostgresStore(pg_server.dsn(), schema=pg_schema)
    await store.write([record(runtime_id(), td.RunStatus.COMPLETED)])
    await store.aclose()
    admin.execute(f"UPDATE {pg_schema}.meta SET value = '99' WHERE key = 'schema_version'")
    newer = td.PostgresStore(pg_server.dsn(), schema=pg_schema)
    with pytest.raises(td.StoreError, match="schema version 99, written by a newer"):
        await newer.list_runs()
    await newer.aclose()
    (count,) = admin.execute(f"SELECT count(*) FROM {pg_schema}.runs").fetchone() or (0,)
    assert count == 1


async def test_a_version_1_schema_is_migrated_and_reads_the_same(
    pg_server: PostgresServer, pg_schema: str, admin: psycopg.Connection[Any]
) -> None:
    me = runtime_id()
    done = record(me, td.RunStatus.COMPLETED, final_result={"kept": [1, 2]})
    store = td.PostgresStore(pg_server.dsn(), schema=pg_schema)
    await store.write([done])
    cursor = (await store.changes(None)).cursor
    await store.aclose()
    # What version 1 made: no writer column (nor the later answer_requests).
    admin.execute(f"ALTER TABLE {pg_schema}.runs DROP COLUMN writer")
    admin.execute(f"ALTER TABLE {pg_schema}.runs DROP COLUMN answer_requests")
    admin.execute(f"UPDATE {pg_schema}.meta SET value = '1' WHERE key = 'schema_version'")
    migrated = td.PostgresStore(pg_server.dsn(), schema=pg_schema)
    assert await migrated.get(done.run_id) == done
    # A row of version 1 counts as changed by someone else, even for its runtime.
    assert (await migrated.changes(cursor - 1, ignore_writes_of=me)).records == (done,)
    await migrated.aclose()
    (version,) = admin.execute(
        f"SELECT value FROM {pg_schema}.meta WHERE key = 'schema_version'"
    ).fetchone() or ("",)
    assert version == str(SCHEMA_VERSION)


async def test_two_handles_creating_one_schema_at_once_both_succeed(
    pg_server: PostgresServer, pg_schema: str, stores: list[Any]
) -> None:
    stores += [td.PostgresStore(pg_server.dsn(), schema=pg_schema) for _ in range(3)]
    async with trio.open_nursery() as nursery:
        for store in stores:
            nursery.start_soon(store.attach, runtime_id())
    assert [await store.list_runs() for store in stores] == [[], [], []]


async def test_a_statement_that_cannot_run_fails_in_bounded_time(
    pg_server: PostgresServer, pg_schema: str, admin: psycopg.Connection[Any], stores: list[Any]
) -> None:
    store = td.PostgresStore(pg_server.dsn(), schema=pg_schema, statement_timeout=0.3)
    stores.append(store)
    await store.write([record(runtime_id())])
    with admin.transaction():
        admin.execute(f"LOCK TABLE {pg_schema}.runs IN ACCESS EXCLUSIVE MODE")
        # The statement timeout, not the hang guard, ends it: the error says so.
        with trio.fail_after(30), pytest.raises(td.StoreError, match="did not answer in time"):
            await store.write([record(runtime_id())])
    await store.write([record(runtime_id())])  # and it goes on once the lock is gone
    assert len(await store.list_runs()) == 2


# -- the data, as text ---------------------------------------------------------------------


async def test_records_are_json_text_even_with_nul(
    pg_server: PostgresServer, pg_schema: str, admin: psycopg.Connection[Any], stores: list[Any]
) -> None:
    store = td.PostgresStore(pg_server.dsn(), schema=pg_schema)
    stores.append(store)
    written = record(runtime_id(), td.RunStatus.COMPLETED, final_result={"k\x00": "v\x00"})
    await store.write([written])
    head, state = admin.execute(
        f"SELECT record, state FROM {pg_schema}.runs WHERE run_id = %s", [written.run_id]
    ).fetchone() or ("", "")
    assert json.loads(state)["final_result"] == {"k\x00": "v\x00"}
    assert "\\u0000" in state
    assert json.loads(head)["owner"] == written.owner
    assert await store.get(written.run_id) == written


async def test_a_runtime_on_postgres_answers_from_the_store_after_a_restart(
    pg_server: PostgresServer, pg_schema: str
) -> None:
    def store() -> td.PostgresStore:
        return td.PostgresStore(pg_server.dsn(), schema=pg_schema)

    async with td.open_runtime(SUBAGENTS, store=store()) as rt, rt.open_parent("a") as p:
        result = await p.delegate("quick", "keep me")
        handle = await p.start("quick", "in the background")
        background = await p.wait(handle.run_id)
    async with td.open_runtime(SUBAGENTS, store=store()) as rt, rt.open_parent("a") as p:
        assert await p.wait(result.run_id) == result
        assert await p.wait(handle.run_id) == background
        assert p.status(result.run_id).status is td.RunStatus.COMPLETED
        follow_up = await p.continue_run(result.run_id, "and then?")
        assert isinstance(follow_up, td.RunResult)
    async with td.open_runtime(SUBAGENTS, store=store()) as rt, rt.open_parent("b") as p:
        with pytest.raises(td.UnknownRunError):
            await p.wait(result.run_id)


async def test_a_result_observed_in_its_own_runtime_is_flagged_observed(
    pg_server: PostgresServer, pg_schema: str, stores: list[Any]
) -> None:
    async with (
        td.open_runtime(
            SUBAGENTS,
            store=td.PostgresStore(pg_server.dsn(), schema=pg_schema),
            config=td.Config(fail_closed=False),
        ) as rt,
        rt.open_parent("a") as p,
    ):
        foreground = await p.delegate("quick", "in the foreground")
        handle = await p.start("quick", "in the background")
        await p.wait(handle.run_id)
        async with p.settled() as settled:
            never = await p.start("quick", "never looked at")
            async for settling in settled:  # seen settle, never observed
                if settling.run_id == never.run_id:
                    break
    reader = td.PostgresStore(pg_server.dsn(), schema=pg_schema)
    stores.append(reader)
    listed = {record.run_id: record.observed for record in await reader.list_runs()}
    assert listed == {foreground.run_id: True, handle.run_id: True, never.run_id: False}
    for run_id, observed in listed.items():
        record = await reader.get(run_id)
        assert record is not None
        assert record.observed is observed


# -- liveness across hosts -------------------------------------------------------------------


async def test_a_runtime_whose_lease_ran_out_is_gone_though_it_holds_its_lock(
    pg_server: PostgresServer, pg_schema: str, stores: list[Any]
) -> None:
    """A host that cannot renew (hung, cut off) is written off when its lease ends."""
    # Long enough that a busy machine still gets from the attach to the first
    # sweep within it (at 0.6 s, it sometimes did not).
    lease = 3.0
    stuck = td.PostgresStore(
        pg_server.dsn(), schema=pg_schema, lease_seconds=lease, poll_interval=0.1
    )
    other = td.PostgresStore(pg_server.dsn(), schema=pg_schema)
    stores += [stuck, other]
    hung, me = runtime_id(), runtime_id()
    # Its lease runs from its attach: measured from before it, whatever the
    # calls after it cost.
    attached = trio.current_time()
    await stuck.attach(hung)
    live = record(hung, td.RunStatus.RUNNING)
    await stuck.write([live])
    await other.attach(me)
    assert await other.sweep(me) == ()  # its lock is held and its lease runs
    with trio.fail_after(30):
        while not (marked := await other.sweep(me)):  # noqa: ASYNC110 - the server's clock
            await trio.sleep(0.05)
    assert trio.current_time() - attached >= lease * 0.8  # not before its lease ended
    assert marked == (live.run_id,)
    # It comes back late: it renews and goes on, but its run stays written off,
    # and its own end of that run changes nothing.
    assert await stuck.sweep(hung) == ()
    await stuck.write([attrs.evolve(live, status=td.RunStatus.COMPLETED, final_result="late")])
    stored = await other.get(live.run_id)
    assert stored is not None
    assert stored.status is td.RunStatus.FAILED
    assert stored.error_type == INTERRUPTED_ERROR_TYPE
    fresh = record(hung, td.RunStatus.RUNNING)
    await stuck.write([fresh])
    assert await other.sweep(me) == ()  # renewed: alive again


async def test_a_runtime_whose_connections_were_killed_is_written_off_and_recovers(
    pg_server: PostgresServer, pg_schema: str, admin: psycopg.Connection[Any], stores: list[Any]
) -> None:
    cut = td.PostgresStore(f"{pg_server.dsn()}?application_name=host_a", schema=pg_schema)
    other = td.PostgresStore(pg_server.dsn(), schema=pg_schema)
    stores += [cut, other]
    host_a, me = runtime_id(), runtime_id()
    await cut.attach(host_a)
    live = [record(host_a, td.RunStatus.RUNNING), record(host_a)]
    await cut.write(live)
    await other.attach(me)
    killed = admin.execute(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE application_name = 'host_a'"
    ).fetchone()
    assert killed is not None
    assert killed[0] >= 2  # its pool and the session holding its lock
    with trio.fail_after(10):
        while not (marked := await other.sweep(me)):  # noqa: ASYNC110 - the server's pace
            await trio.sleep(0.01)
    assert sorted(marked) == sorted(r.run_id for r in live)
    # Host A reconnects: its sweep takes its lock again and renews its lease;
    # the runs it lost stay interrupted, new ones are its own again.
    assert await cut.sweep(host_a) == ()
    await cut.write([attrs.evolve(live[0], status=td.RunStatus.COMPLETED, final_result=1)])
    stored = await other.get(live[0].run_id)
    assert stored is not None
    assert stored.error_type == INTERRUPTED_ERROR_TYPE
    again = record(host_a, td.RunStatus.RUNNING)
    await cut.write([again])
    assert await other.sweep(me) == ()
    batch = await cut.changes(0)
    assert {r.run_id: r.status for r in batch.records}[again.run_id] is td.RunStatus.RUNNING


# -- notifications ----------------------------------------------------------------------------


async def test_wait_changes_is_woken_by_a_notification(
    pg_server: PostgresServer, pg_schema: str, admin: psycopg.Connection[Any], stores: list[Any]
) -> None:
    # With a poll interval of a whole second, only a notification explains a
    # wake-up well before the wait's own timeout.
    waiting = td.PostgresStore(pg_server.dsn(), schema=pg_schema, poll_interval=1.0)
    writer = td.PostgresStore(pg_server.dsn(), schema=pg_schema)
    stores += [waiting, writer]
    cursor = (await waiting.changes(None)).cursor
    with trio.fail_after(30):
        await waiting.wait_changes(cursor, 0.05)  # listening from now on

    async def write_soon(delay: float) -> None:
        await trio.sleep(delay)
        await writer.write([record(runtime_id())])

    for round_ in range(2):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(write_soon, 0.2)
            started = trio.current_time()
            await waiting.wait_changes(cursor, 60)
            assert trio.current_time() - started < 10
        cursor = (await waiting.changes(cursor)).cursor
        if round_ == 0:
            # The server drops the listening session: the next wait listens again.
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE query ILIKE 'LISTEN%%'"
            )
