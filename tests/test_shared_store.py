"""Runtimes sharing a store (contract §16): a parent answers for every run of its owner.

Two runtimes share one store here, as two processes or hosts would (each
with a store handle of its own); the runs live in one of them, the other
observes them through the store. Real time: the stores work on threads, and
another runtime's news arrives by notification or by poll (≤ 1 s).
"""

from __future__ import annotations

import gc
import secrets
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import trio_delegate as td

from .helpers import forever, slow_cleanup, sub
from .stores import WrappedStore, read_line, spawn_child

LENIENT = td.Config(fail_closed=False)
#: How long a change may take to reach the other runtime, in real time: the
#: contract says ≤ 1 s on an idle machine; this is an outer guard, generous for
#: a busy one (news that never comes still fails).
NEWS = 20.0


class Hosts:
    """Store handles of one store, one per "host"."""

    def __init__(self, kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
        self.kind = kind
        self.tmp_path = tmp_path
        self.request = request
        self.memory = td.MemoryStore()
        self.schema = ""
        if kind == "postgres":
            self.schema = request.getfixturevalue("pg_schema")
            self.server = request.getfixturevalue("pg_server")

    def store(self) -> Any:
        if self.kind == "memory":
            return self.memory
        if self.kind == "sqlite":
            return td.SQLiteStore(self.tmp_path / "runs.db")
        return td.PostgresStore(self.server.dsn(), schema=self.schema)

    def location(self) -> list[str]:
        """What ``tests.store_child`` takes to open this store in another process."""
        if self.kind == "sqlite":
            return [str(self.tmp_path / "runs.db")]
        return ["--schema", self.schema, self.server.dsn()]


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def hosts(request: pytest.FixtureRequest, tmp_path: Path) -> Hosts:
    return Hosts(request.param, tmp_path, request)


async def eventually(check: Callable[[], Any], within: float = NEWS) -> Any:
    """*check()*'s value once it stops raising or returning a falsy value."""
    with trio.fail_after(within):
        while True:
            try:
                value = check()
            except (td.DelegationError, AssertionError):
                value = None
            if value:
                return value
            await trio.sleep(0.02)


def resolved(parent: td.Parent) -> bool:
    parent.check_resolved()  # raises while something is unresolved
    return True


def gated(go: trio.Event, result: Any = "done") -> Any:
    async def runner(ctx: td.ChildContext) -> Any:
        await go.wait()
        return result

    return runner


@asynccontextmanager
async def runtime(store: Any, *subagents: td.Subagent, **kwargs: Any) -> AsyncIterator[td.Runtime]:
    async with td.open_runtime(list(subagents), store=store, **kwargs) as rt:
        yield rt


async def test_a_parent_answers_for_its_owners_runs_in_another_runtime(hosts: Hosts) -> None:
    go = trio.Event()
    subagents = [sub("gated", gated(go, {"answer": 42}))]
    async with (
        runtime(hosts.store(), *subagents) as host_a,
        runtime(hosts.store(), *subagents) as host_b,
        host_a.open_parent("alice") as on_a,
        host_b.open_parent("alice") as on_b,
        host_b.open_parent("bob") as bob,
    ):
        handle = await on_a.start("gated", "the question")
        # Host B's view trails host A by at most a notification or a poll.
        seen = td.RunHandle(handle.run_id, "gated", td.RunStatus.RUNNING)
        await eventually(lambda: on_b.status(handle.run_id) == seen)
        # A wait reads the store itself: timeout=0 is the fresh answer.
        assert await on_b.wait(handle.run_id, timeout=0) == seen
        with pytest.raises(td.UnknownRunError):
            bob.status(handle.run_id)  # another owner's run, on every host
        with pytest.raises(td.UnknownRunError):
            await bob.wait(handle.run_id, timeout=0)
        go.set()
        with trio.fail_after(NEWS):
            result = await on_b.wait(handle.run_id)
        assert result == td.RunResult(handle.run_id, "gated", "the question", {"answer": 42})
        # Observed on host B: the parent that started it counts it as observed.
        await eventually(lambda: resolved(on_a))


async def test_a_cancel_from_another_runtime_stops_the_run(
    hosts: Hosts,
) -> None:
    async with (
        runtime(hosts.store(), sub("idle", forever), config=LENIENT) as host_a,
        runtime(hosts.store(), sub("idle", forever), config=LENIENT) as host_b,
        host_a.open_parent("alice") as on_a,
        host_b.open_parent("alice") as on_b,
    ):
        handle = await on_a.start("idle", "t")
        await eventually(lambda: on_b.status(handle.run_id).status is td.RunStatus.RUNNING)
        ack = on_b.cancel(handle.run_id)
        assert ack == td.CancelAck(handle.run_id, True, td.RunStatus.RUNNING)
        # The hang guard only: how soon the news arrives depends on the machine.
        with trio.fail_after(NEWS), pytest.raises(td.RunCancelledError):
            await on_a.wait(handle.run_id)
        with trio.fail_after(NEWS), pytest.raises(td.RunCancelledError):
            await on_b.wait(handle.run_id)
        # Once the end has reached host B's view, a cancel finds it ended.
        await eventually(lambda: on_b.cancel(handle.run_id).cancel_requested is False)


class RefusesCancels(WrappedStore):
    """A store handle that fails every cancel request for the runs in ``refused``
    (a row it cannot write), and takes the others."""

    def __init__(self, inner: td.ResultStore) -> None:
        super().__init__(inner)
        self.refused: set[str] = set()
        self.tried: list[str] = []

    async def request_cancel(self, run_id: str) -> td.RunRecord | None:
        self.tried.append(run_id)
        if run_id in self.refused:
            raise td.StoreError(f"run {run_id}'s row cannot be written")
        return await super().request_cancel(run_id)


async def test_a_flag_the_store_refuses_holds_back_none_queued_after_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = td.MemoryStore()
    flags = RefusesCancels(store)
    async with (
        runtime(store, sub("idle", forever), config=LENIENT) as host_a,
        runtime(flags, sub("idle", forever), config=LENIENT) as host_b,
        host_a.open_parent("alice") as on_a,
        host_b.open_parent("alice") as on_b,
    ):
        stuck = (await on_a.start("idle", "stuck")).run_id
        other = (await on_a.start("idle", "other")).run_id
        await trio.sleep(5)
        flags.refused.add(stuck)
        assert on_b.cancel(stuck).cancel_requested
        assert on_b.cancel(other).cancel_requested  # queued behind the refused one
        with trio.fail_after(30), pytest.raises(td.RunCancelledError):
            await on_a.wait(other)
        # The refused flag is tried again at each poll, on its own.
        await trio.sleep(5)
        assert flags.tried.count(stuck) > 2
        assert flags.tried.count(other) == 1
        assert on_a.status(stuck).status is td.RunStatus.RUNNING
        flags.refused.clear()
        with trio.fail_after(30), pytest.raises(td.RunCancelledError):
            await on_a.wait(stuck)


def live_events() -> int:
    gc.collect()
    return sum(isinstance(o, trio.Event) for o in gc.get_objects())


async def test_timed_waits_on_runs_that_never_change_leave_nothing_behind(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # A wait on another runtime's run sleeps on a wake-up for that run; a run
    # that never changes again must not keep it once nobody waits.
    store = td.MemoryStore()
    config = td.Config(fail_closed=False, max_concurrent_runs=50)
    async with (
        runtime(store, sub("idle", forever), config=config) as host_a,
        runtime(store, sub("idle", forever), config=config) as host_b,
        host_a.open_parent("alice") as on_a,
        host_b.open_parent("alice") as on_b,
    ):
        run_ids = [(await on_a.start("idle", f"run {i}")).run_id for i in range(50)]
        await on_b.wait(run_ids[0], timeout=0.5)  # every lazy structure made once
        before = live_events()
        for run_id in run_ids:
            assert isinstance(await on_b.wait(run_id, timeout=0.5), td.RunHandle)
        assert live_events() - before < 10
        for run_id in run_ids:
            on_a.cancel(run_id)


class FrozenView(WrappedStore):
    """A store handle whose runtime's watcher learns nothing of other runtimes while
    ``frozen``: its view trails the store for as long as a test needs (the
    contract allows it to trail by up to a second; a test cannot wait on that)."""

    def __init__(self, inner: td.ResultStore) -> None:
        super().__init__(inner)
        self.frozen = True

    async def list_runs(
        self, *, status: td.RunStatus | None = None, owner: str | None = None, limit: int = 100
    ) -> list[td.RunRecord]:
        if self.frozen:
            return []
        return await super().list_runs(status=status, owner=owner, limit=limit)

    async def changes(
        self, cursor: int | None, *, ignore_writes_of: str | None = None
    ) -> td.ChangeBatch:
        batch = await super().changes(cursor, ignore_writes_of=ignore_writes_of)
        if self.frozen and cursor is not None:
            return td.ChangeBatch(cursor)  # nothing new, and asked again next time
        return batch


async def test_a_run_a_wait_found_is_known_to_status_and_cancel_at_once(hosts: Hosts) -> None:
    # Host B's view of the store does not move at all: whatever B knows of
    # host A's runs, it knows from reading the store in its own calls.
    view = FrozenView(hosts.store())
    async with (
        runtime(hosts.store(), sub("idle", forever), config=LENIENT) as host_a,
        runtime(view, sub("idle", forever), config=LENIENT) as host_b,
        host_a.open_parent("alice") as on_a,
        host_b.open_parent("alice") as on_b,
        host_b.open_parent("bob") as bob,
    ):
        first = await on_a.start("idle", "first")
        second = await on_a.start("idle", "second")
        # Not read yet: status and cancel answer alike from the view.
        with pytest.raises(td.UnknownRunError):
            on_b.status(first.run_id)
        with pytest.raises(td.UnknownRunError):
            on_b.cancel(first.run_id)

        # wait, then status, then cancel.
        found = await on_b.wait(first.run_id, timeout=0)
        assert isinstance(found, td.RunHandle)
        assert not found.status.is_terminal
        assert on_b.status(first.run_id) == found
        assert on_b.cancel(first.run_id) == td.CancelAck(first.run_id, True, found.status)
        # wait, then cancel, then status.
        found = await on_b.wait(second.run_id, timeout=0)
        assert isinstance(found, td.RunHandle)
        assert not found.status.is_terminal
        assert on_b.cancel(second.run_id) == td.CancelAck(second.run_id, True, found.status)
        assert on_b.status(second.run_id) == found
        # Another owner's run stays unknown, read or not.
        with pytest.raises(td.UnknownRunError):
            await bob.wait(first.run_id, timeout=0)
        with pytest.raises(td.UnknownRunError):
            bob.cancel(first.run_id)

        # The cancels reach the runtime that owns the runs, which applies them.
        for run_id in (first.run_id, second.run_id):
            with trio.fail_after(NEWS), pytest.raises(td.RunCancelledError):
                await on_a.wait(run_id)
            with trio.fail_after(NEWS), pytest.raises(td.RunCancelledError):
                await on_b.wait(run_id)
            # The wait read the end: status and cancel say so, with no news from the view.
            assert on_b.status(run_id).status is td.RunStatus.CANCELLED
            assert on_b.cancel(run_id) == td.CancelAck(run_id, False, td.RunStatus.CANCELLED)
        # Once news flows again, the view agrees: a terminal run stays terminal.
        view.frozen = False
        third = await on_a.start("idle", "third")
        await eventually(lambda: on_b.status(third.run_id))
        assert on_b.status(first.run_id).status is td.RunStatus.CANCELLED
        # status first (from the view), then cancel: both know the run.
        assert on_b.cancel(third.run_id).cancel_requested is True
        with trio.fail_after(NEWS), pytest.raises(td.RunCancelledError):
            await on_a.wait(third.run_id)


async def test_a_wait_elsewhere_never_answers_running_past_the_deadline(
    hosts: Hosts,
) -> None:
    # Past its 0.3 s deadline the run spends 1 s in shielded cleanup: it still
    # reads running on its host, but a wait elsewhere waits for its end.
    subagents = [sub("slow", slow_cleanup(1.0), timeout_seconds=0.3)]
    async with (
        runtime(hosts.store(), *subagents, config=LENIENT) as host_a,
        runtime(hosts.store(), *subagents, config=LENIENT) as host_b,
        host_a.open_parent("alice") as on_a,
        host_b.open_parent("alice") as on_b,
    ):
        handle = await on_a.start("slow", "t")
        await eventually(lambda: on_b.status(handle.run_id))
        await trio.sleep(0.5)  # its deadline has passed; its cleanup has not
        assert on_a.status(handle.run_id).status is td.RunStatus.RUNNING
        with trio.fail_after(NEWS), pytest.raises(td.RunTimedOutError):
            await on_b.wait(handle.run_id, timeout=0)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_runs_of_a_killed_process_are_interrupted_for_a_waiter_elsewhere(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    hosts = Hosts(kind, tmp_path, request)
    process = await spawn_child(*hosts.location(), "start")
    try:
        run_id = await read_line(process)
        async with (
            runtime(hosts.store(), sub("forever", forever), config=LENIENT) as rt,
            rt.open_parent("worker") as parent,  # the child's owner
        ):
            still = await parent.wait(run_id, timeout=0)
            assert isinstance(still, td.RunHandle)
            assert not still.status.is_terminal
            process.send_signal(signal.SIGKILL)
            with trio.fail_after(NEWS), pytest.raises(td.RunFailedError, match="interrupted"):
                await parent.wait(run_id)
    finally:
        process.kill()
        with trio.move_on_after(10):
            await process.wait()


async def test_a_runtime_cut_off_from_postgres_stops_its_runs_within_its_lease(
    pg_server: Any, pg_schema: str
) -> None:
    import psycopg

    role, password = "cut_" + secrets.token_hex(6), secrets.token_hex(8)
    with psycopg.connect(pg_server.admin_dsn(), autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
        admin.execute(f"GRANT CREATE ON DATABASE postgres TO {role}")
        try:
            dsn = f"postgresql://{role}:{password}@127.0.0.1:{pg_server.port}/postgres"
            store = td.PostgresStore(dsn, schema=pg_schema, lease_seconds=2)
            async with (
                runtime(store, sub("idle", forever), config=LENIENT) as rt,
                rt.open_parent("alice") as parent,
            ):
                handle = await parent.start("idle", "t")
                # The host is cut off: it can neither reach the server nor get back in.
                admin.execute(f"ALTER ROLE {role} NOLOGIN")
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                    [role],
                )
                # Stopped before its lease ran out, by the runtime's own account
                # of its lease (past it, the reason would be that the lease ran
                # out): nothing goes on that the fleet wrote off, and it ends as
                # the fleet records it, failed (interrupted).
                with (
                    trio.fail_after(30),
                    pytest.raises(td.RunFailedError, match="could not renew its lease"),
                ):
                    await parent.wait(handle.run_id)
                assert parent.status(handle.run_id).status is td.RunStatus.FAILED
                # Back in, so that the runtime closes without waiting out timeouts.
                admin.execute(f"ALTER ROLE {role} LOGIN")
        finally:
            admin.execute(f"ALTER ROLE {role} LOGIN")
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                [role],
            )
            admin.execute(f"DROP SCHEMA IF EXISTS {pg_schema} CASCADE")
            admin.execute(f"REVOKE CREATE ON DATABASE postgres FROM {role}")
            admin.execute(f"DROP ROLE {role}")
