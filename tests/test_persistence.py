"""Durable results, restarts and continuations with a store (contract §12).

Every rule runs against both stores: the in-process MemoryStore and a real
SQLite file.
"""

from __future__ import annotations

import datetime
import os
import re
import signal
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import trio_delegate as td
import trio_delegate.testing as tdt
from trio_delegate._core._persistence import RUNNING_RECORD_DELAY
from trio_delegate._stores._protocol import (
    INTERRUPTED_ERROR_TYPE,
    StoredRun,
    StoreSnapshot,
    wall_clock_now,
)

from .stores import WrappedStore, runtime_id

StoreFactory = Callable[[], td.ResultStore]


async def echo(ctx: td.ChildContext) -> dict[str, Any]:
    await trio.lowlevel.checkpoint()
    return {"echo": ctx.task}


async def forever(ctx: td.ChildContext) -> str:
    await trio.sleep_forever()


async def broken(ctx: td.ChildContext) -> str:
    await trio.lowlevel.checkpoint()
    raise KeyError("missing")


SUBAGENTS = [
    td.Subagent("echo", echo),
    td.Subagent("forever", forever, timeout_seconds=None),
    td.Subagent("broken", broken),
]


@pytest.fixture(params=["memory", "sqlite"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
    if request.param == "memory":
        store = td.MemoryStore()
        return lambda: store
    return lambda: td.SQLiteStore(tmp_path / "runs.db")


async def test_completed_result_survives_a_restart(make_store: StoreFactory) -> None:
    async with td.open_runtime(SUBAGENTS, store=make_store()) as rt, rt.open_parent("a") as p:
        result = await p.delegate("echo", "keep me")
    async with td.open_runtime(SUBAGENTS, store=make_store()) as rt, rt.open_parent("a") as p:
        assert p.status(result.run_id) == td.RunHandle(
            result.run_id, "echo", td.RunStatus.COMPLETED
        )
        again = await p.wait(result.run_id)
        assert again == result
        assert p.cancel(result.run_id) == td.CancelAck(result.run_id, False, td.RunStatus.COMPLETED)
        # Found in the store, it never makes this parent unresolved.
        p.check_resolved()


async def test_stored_runs_belong_to_their_owner(make_store: StoreFactory) -> None:
    async with td.open_runtime(SUBAGENTS, store=make_store()) as rt, rt.open_parent("a") as p:
        result = await p.delegate("echo", "mine")
    async with td.open_runtime(SUBAGENTS, store=make_store()) as rt, rt.open_parent("b") as p:
        with pytest.raises(td.UnknownRunError) as info:
            p.status(result.run_id)
        assert not isinstance(info.value, td.ExpiredRunError)
        with pytest.raises(td.UnknownRunError):
            await p.wait(result.run_id)


async def test_failed_run_is_answered_as_failed_after_restart(make_store: StoreFactory) -> None:
    async with (
        td.open_runtime(SUBAGENTS, store=make_store(), config=td.Config(fail_closed=False)) as rt,
        rt.open_parent("a") as p,
    ):
        handle = await p.start("broken", "t")
        with pytest.raises(td.RunFailedError):
            await p.wait(handle.run_id)
    async with td.open_runtime(SUBAGENTS, store=make_store()) as rt, rt.open_parent("a") as p:
        with pytest.raises(td.RunFailedError) as info:
            await p.wait(handle.run_id)
    assert info.value.error_type == "KeyError"
    assert "missing" in info.value.error_message


async def test_live_runs_of_a_dead_runtime_are_marked_interrupted(tmp_path: Path) -> None:
    """A runtime whose process is gone never detaches; the next one marks its runs."""
    store = td.MemoryStore()
    runtime_ids: list[str] = []
    async with (
        td.open_runtime(SUBAGENTS, store=store, config=td.Config(fail_closed=False)) as rt,
        rt.open_parent("a") as p,
    ):
        handle = await p.start("forever", "t")
        admitted = await store.get(handle.run_id)
        assert admitted is not None
        runtime_ids.append(admitted.runtime_id)
        # Simulate the process dying here: the runtime never detaches.
        store.abandon(runtime_ids[0])
        snapshot = await store.attach(runtime_id())
        assert isinstance(snapshot, StoreSnapshot)
        assert snapshot.interrupted == (handle.run_id,)
        record = await store.get(handle.run_id)
        assert record is not None
        assert record.status is td.RunStatus.FAILED
        assert record.error_type == INTERRUPTED_ERROR_TYPE
        assert "interrupted" in (record.error_message or "")
        assert (handle.run_id, StoredRun("a", "forever", td.RunStatus.FAILED)) in (
            snapshot.terminal
        )


async def test_live_runs_of_a_live_runtime_are_never_touched(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    async with (
        td.open_runtime(SUBAGENTS, store=td.SQLiteStore(path)) as first,
        first.open_parent("a") as p,
    ):
        handle = await p.start("forever", "t")
        # A second runtime (a separate store object, as another process
        # would have) opens the same file while the first is alive.
        other, other_id = td.SQLiteStore(path), runtime_id()
        snapshot = await other.attach(other_id)
        assert snapshot.interrupted == ()
        record = await other.get(handle.run_id)
        assert record is not None
        assert not record.status.is_terminal
        await other.detach(other_id)
        p.cancel(handle.run_id)
        with pytest.raises(td.RunCancelledError):
            await p.wait(handle.run_id)
        replacement = await p.start("echo", "x", replaces=handle.run_id)
        await p.wait(replacement.run_id)


async def test_admission_record_is_durable_when_start_returns(make_store: StoreFactory) -> None:
    store = make_store()
    async with (
        td.open_runtime(SUBAGENTS, store=store, config=td.Config(fail_closed=False)) as rt,
        rt.open_parent("a") as p,
    ):
        handle = await p.start("forever", "the task")
        record = await store.get(handle.run_id)
        assert record is not None
        # Admitted, and perhaps already recorded as started (contract §16).
        assert record.status in (td.RunStatus.PENDING, td.RunStatus.RUNNING)
        assert record.task == "the task"
        assert record.owner == "a"
        assert record.admitted_at
    final = await store.get(handle.run_id)
    assert final is not None
    assert final.status is td.RunStatus.CANCELLED
    assert final.ended_at


async def test_result_is_durable_before_a_waiter_gets_it(make_store: StoreFactory) -> None:
    store = make_store()
    async with td.open_runtime(SUBAGENTS, store=store) as rt, rt.open_parent("a") as p:
        handle = await p.start("echo", "t")
        result = await p.wait(handle.run_id)
        assert isinstance(result, td.RunResult)
        record = await store.get(handle.run_id)
        assert record is not None
        assert record.status is td.RunStatus.COMPLETED
        assert record.final_result == {"echo": "t"}
        assert record.task_summary == "t"


async def _observed_in(store: td.ResultStore, *run_ids: str) -> list[bool]:
    """What *store* says of each run's ``observed`` flag, read by ``get`` and ``list_runs``."""
    listed = {record.run_id: record.observed for record in await store.list_runs()}
    got = []
    for run_id in run_ids:
        record = await store.get(run_id)
        assert record is not None
        assert listed[run_id] is record.observed
        got.append(record.observed)
    return got


async def test_a_result_observed_in_its_own_runtime_is_flagged_observed_in_the_store(
    make_store: StoreFactory,
) -> None:
    store = make_store()
    config = td.Config(fail_closed=False)
    async with (
        td.open_runtime(SUBAGENTS, store=store, config=config) as rt,
        rt.open_parent("a") as p,
    ):
        foreground = await p.delegate("echo", "in the foreground")
        background = await p.start("echo", "in the background")
        assert isinstance(await p.wait(background.run_id), td.RunResult)
        await p.wait(background.run_id)  # a second look flags nothing new
        async with p.settled() as settled:
            never = await p.start("echo", "never looked at")
            async for handle in settled:  # seen settle, never observed
                if handle.run_id == never.run_id:
                    break
        failed = await p.start("broken", "fails")
        with pytest.raises(td.RunFailedError):
            await p.wait(failed.run_id)
    # Once the runtime closed, its writer has set every flag it owed.
    assert await _observed_in(
        store, foreground.run_id, background.run_id, never.run_id, failed.run_id
    ) == [True, True, False, False]
    # A later runtime reads it as observed too; its own wait changes nothing.
    async with td.open_runtime(SUBAGENTS, store=make_store()) as rt, rt.open_parent("a") as p:
        assert await p.wait(foreground.run_id) == foreground
    assert await _observed_in(store, foreground.run_id) == [True]


async def test_the_observed_flag_follows_within_the_running_record_delay(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = td.MemoryStore()
    async with _opened(store) as parent:
        result = await parent.delegate("echo", "look")
        # Not a durability point: it waits for a batch to go with, and none
        # comes, so the delay sends it.
        await trio.sleep(RUNNING_RECORD_DELAY * 0.9)
        assert await _observed_in(store, result.run_id) == [False]
        await trio.sleep(RUNNING_RECORD_DELAY * 0.2)
        assert await _observed_in(store, result.run_id) == [True]


async def test_an_evicted_result_observed_from_the_store_is_flagged_observed(
    make_store: StoreFactory,
) -> None:
    store = make_store()
    config = td.Config(retention_max_runs=1, fail_closed=False)
    async with (
        td.open_runtime(SUBAGENTS, store=store, config=config) as rt,
        rt.open_parent("a") as p,
    ):
        async with p.settled() as settled:
            first = await p.start("echo", "evicted before anyone looked")
            async for handle in settled:  # seen settle, never observed
                if handle.run_id == first.run_id:
                    break
        await p.delegate("echo", "evicts the first")
        assert await _observed_in(store, first.run_id) == [False]
        # Answered from the store, in the runtime that ran it.
        result = await p.wait(first.run_id)
        assert isinstance(result, td.RunResult)
        assert result.final_result == {"echo": "evicted before anyone looked"}
    assert await _observed_in(store, first.run_id) == [True]


async def test_continuation_across_a_restart(make_store: StoreFactory) -> None:
    seen: list[tuple[Any, ...]] = []

    async def chat(ctx: td.ChildContext) -> td.Output:
        seen.append(ctx.history)
        await trio.lowlevel.checkpoint()
        turn = [*ctx.history, {"role": "user", "content": ctx.task}]
        return td.Output(len(turn), transcript=[*turn, {"role": "assistant", "content": "ok"}])

    subagents = [td.Subagent("chat", chat)]
    async with td.open_runtime(subagents, store=make_store()) as rt, rt.open_parent("a") as p:
        first = await p.delegate("chat", "one")
    async with td.open_runtime(subagents, store=make_store()) as rt, rt.open_parent("a") as p:
        second = await p.continue_run(first.run_id, "two")
        assert isinstance(second, td.RunResult)
    async with td.open_runtime(subagents, store=make_store()) as rt, rt.open_parent("a") as p:
        third = await p.continue_run(second.run_id, "three")
        assert isinstance(third, td.RunResult)
    assert [len(h) for h in seen] == [0, 2, 4]
    assert [entry["content"] for entry in seen[2]] == ["one", "ok", "two", "ok"]


async def test_evicted_result_is_answered_from_the_store(make_store: StoreFactory) -> None:
    async def quick(ctx: td.ChildContext) -> str:
        await trio.lowlevel.checkpoint()
        return ctx.task

    config = td.Config(retention_max_runs=1)
    async with (
        td.open_runtime([td.Subagent("quick", quick)], store=make_store(), config=config) as rt,
        rt.open_parent("a") as p,
    ):
        async with p.settled() as settled:
            handle = await p.start("quick", "first")
            async for settling in settled:  # settled, not observed
                if settling.run_id == handle.run_id:
                    break
        await p.delegate("quick", "second")  # its settlement evicts the first
        assert p.status(handle.run_id).status is td.RunStatus.COMPLETED
        assert handle.run_id not in tdt.internals(rt).in_memory
        result = await p.wait(handle.run_id)
        assert isinstance(result, td.RunResult)
        assert result.final_result == "first"
        p.check_resolved()  # observed through the store: resolved


async def test_without_a_store_an_evicted_run_is_expired(
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = td.Config(retention_seconds=10, fail_closed=False)
    async with td.open_runtime(SUBAGENTS, config=config) as rt, rt.open_parent("a") as p:
        handle = await p.start("echo", "t")
        await trio.sleep(60)
        with pytest.raises(td.ExpiredRunError):
            await p.wait(handle.run_id)


async def test_runs_list_filters(make_store: StoreFactory) -> None:
    store = make_store()
    config = td.Config(fail_closed=False)
    async with (
        td.open_runtime(SUBAGENTS, store=store, config=config) as rt,
        rt.open_parent("a") as p,
    ):
        await p.delegate("echo", "1")
        with pytest.raises(td.RunFailedError):
            await p.delegate("broken", "2")
        async with rt.open_parent("b") as p:
            await p.delegate("echo", "3")
    everything = await store.list_runs()
    assert [r.task for r in everything] == ["3", "2", "1"]
    assert [r.task for r in await store.list_runs(owner="a")] == ["2", "1"]
    failed = await store.list_runs(status=td.RunStatus.FAILED)
    assert [r.task for r in failed] == ["2"]
    assert [r.task for r in await store.list_runs(limit=1)] == ["3"]


class FailingStore(WrappedStore):
    """A real store that starts refusing writes on demand (a disk gone bad)."""

    def __init__(self) -> None:
        super().__init__()
        self.fail = False

    async def write(self, records: Sequence[td.RunRecord]) -> None:
        await trio.lowlevel.checkpoint()
        if self.fail:
            raise td.StoreError("the disk is gone", path="/dev/null")
        await self.inner.write(records)


async def test_failed_admission_write_leaves_no_run() -> None:
    store = FailingStore()
    async with td.open_runtime(SUBAGENTS, store=store) as rt, rt.open_parent("a") as p:
        store.fail = True
        with pytest.raises(td.StoreError, match="the disk is gone"):
            await p.start("echo", "t")
        assert rt.live_runs == 0
        assert tdt.internals(rt).in_memory == frozenset()
        p.check_resolved()


async def test_failed_settlement_write_fails_the_run_without_hanging() -> None:
    store = FailingStore()
    async with td.open_runtime(SUBAGENTS, store=store) as rt, rt.open_parent("a") as p:
        handle = await p.start("echo", "t")
        store.fail = True
        with trio.fail_after(30):
            with pytest.raises(td.RunFailedError) as info:
                await p.wait(handle.run_id)
        assert isinstance(info.value.__cause__, td.StoreError)
        assert p.status(handle.run_id).status is td.RunStatus.FAILED
        store.fail = False
        await p.delegate("echo", "again", replaces=handle.run_id)


async def test_cancelled_caller_still_gets_its_handle_once_admission_committed() -> None:
    store = td.MemoryStore()
    async with (
        td.open_runtime(SUBAGENTS, store=store, config=td.Config(fail_closed=False)) as rt,
        rt.open_parent("a") as p,
    ):
        handles: list[td.RunHandle] = []
        with trio.CancelScope() as scope:
            # Cancelled after the initial checkpoint, while the write is pending.
            async def cancel_soon() -> None:
                await trio.lowlevel.checkpoint()
                scope.cancel()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(cancel_soon)
                handles.append(await p.start("forever", "t"))
                await trio.lowlevel.checkpoint()  # the cancellation lands here
                pytest.fail("not reached")  # pragma: no cover
        assert scope.cancelled_caught
        # Either it was never admitted, or the caller got its handle: never half.
        assert len(handles) == len(tdt.internals(rt).in_memory)
        for handle in handles:
            record = await store.get(handle.run_id)
            assert record is not None


class GatedStore(FailingStore):
    """A real store whose writes wait, once armed, until the gate opens."""

    def __init__(self) -> None:
        super().__init__()
        self.gate: trio.Event | None = None
        self.writing = trio.Event()

    async def write(self, records: Sequence[td.RunRecord]) -> None:
        if self.gate is not None:
            self.writing.set()
            await self.gate.wait()
        await super().write(records)


async def test_cancelled_caller_waits_for_its_admission_and_gets_its_handle() -> None:
    store = GatedStore()
    config = td.Config(fail_closed=False)
    async with (
        td.open_runtime(SUBAGENTS, store=store, config=config) as rt,
        rt.open_parent("a") as p,
    ):
        gate = store.gate = trio.Event()
        handles: list[td.RunHandle] = []
        scope = trio.CancelScope()

        async def cancel_then_open() -> None:
            await store.writing.wait()
            scope.cancel()
            await trio.testing.wait_all_tasks_blocked()
            assert not handles  # cancelled, and still waiting for the commit
            gate.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(cancel_then_open)
            with scope:
                handles.append(await p.start("forever", "t"))
                await trio.lowlevel.checkpoint()  # the cancellation lands here
                pytest.fail("not reached")  # pragma: no cover
        assert scope.cancelled_caught
        [handle] = handles
        assert rt.live_runs == 1
        assert await store.get(handle.run_id) is not None


async def test_a_close_as_the_admission_commits_joins_the_run_that_started() -> None:
    # The caller of start waits for its admission record. When that commits,
    # the run starts at once, and the caller wakes in the next scheduling
    # round; if the parent closes first in that round (another task leaving
    # its block), the caller gets RuntimeClosedError, and the run, durable
    # and running, is cancelled and joined by the close like any other.
    # Which of the two tasks runs first in a round is random (Trio reverses
    # half of its rounds), so the race is run 40 times: at least one of them
    # meets the close first (all 40 missing it has odds of 2**-40).
    closed_first = 0
    for _ in range(40):
        store = td.MemoryStore()
        config = td.Config(fail_closed=False)
        seen: list[td.RunHandle | td.RuntimeClosedError] = []
        async with (
            td.open_runtime(SUBAGENTS, store=store, config=config) as rt,
            trio.open_nursery() as nursery,
            rt.open_parent("a") as p,
        ):

            async def admit(parent: td.Parent = p, seen: list[Any] = seen) -> None:
                try:
                    seen.append(await parent.start("forever", "first"))
                except td.RuntimeClosedError as exc:
                    seen.append(exc)

            nursery.start_soon(admit)
            # Recorded in the same commit; this caller leaves the parent's
            # block as soon as it wakes.
            await p.start("forever", "second")
        [answer] = seen
        if isinstance(answer, td.RuntimeClosedError):
            assert "parent 'a' is closed" in str(answer)
            closed_first += 1
        records = await store.list_runs(owner="a")
        assert len(records) == 2
        assert {record.status for record in records} == {td.RunStatus.CANCELLED}
    assert closed_first > 0


def test_keyboard_interrupt_ends_a_main_task_waiting_for_its_admission() -> None:
    store = GatedStore()
    returned: list[td.RunHandle] = []

    async def main() -> None:
        config = td.Config(fail_closed=False)
        async with (
            td.open_runtime(SUBAGENTS, store=store, config=config) as rt,
            rt.open_parent("a") as p,
            trio.open_nursery() as nursery,
        ):
            gate = store.gate = trio.Event()

            async def interrupt() -> None:
                await store.writing.wait()
                await trio.testing.wait_all_tasks_blocked()
                # From a thread, so that the signal lands while Trio's loop
                # waits: Trio then delivers it to the main task.
                await trio.to_thread.run_sync(os.kill, os.getpid(), signal.SIGINT)
                # Had the interrupt waited for the commit, open the gate: the
                # start would then return, which the test would see.
                await trio.testing.wait_all_tasks_blocked()
                gate.set()

            nursery.start_soon(interrupt)
            try:
                returned.append(await p.start("forever", "t"))
            finally:
                gate.set()

    # Trio delivers SIGINT as a KeyboardInterrupt only over the default handler.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(BaseExceptionGroup) as info:
            trio.run(main)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert info.group_contains(KeyboardInterrupt)
    assert returned == []  # it ended the wait: the start never returned


async def test_group_commit_batches_concurrent_writes(tmp_path: Path) -> None:
    config = td.Config(max_concurrent_runs=64, max_live_runs=1000)

    async def quick(ctx: td.ChildContext) -> int:
        await trio.lowlevel.checkpoint()
        return 1

    store = td.SQLiteStore(tmp_path / "runs.db")
    async with (
        td.open_runtime([td.Subagent("quick", quick)], store=store, config=config) as rt,
        rt.open_parent("a") as p,
    ):
        async with trio.open_nursery() as nursery:
            for _ in range(200):
                nursery.start_soon(p.delegate, "quick", "t")
        stats = tdt.internals(rt).write_stats
        assert stats is not None
    # An admission, a start and an end each; a start is folded into its run's
    # end when both wait for the same commit.
    assert 400 <= stats.records <= 600
    assert stats.commits < stats.records / 2
    assert stats.largest_batch > 10


_STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00")


async def test_records_carry_wall_clock_times_to_the_millisecond(
    make_store: StoreFactory,
) -> None:
    store = make_store()
    before = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    async with td.open_runtime(SUBAGENTS, store=store) as rt, rt.open_parent("a") as p:
        result = await p.delegate("echo", "t")
        record = await store.get(result.run_id)
    after = datetime.datetime.now(datetime.UTC)
    assert record is not None
    assert record.ended_at is not None
    assert _STAMP.fullmatch(wall_clock_now())
    for stamp in (record.admitted_at, record.ended_at):
        assert _STAMP.fullmatch(stamp), stamp
        assert before <= datetime.datetime.fromisoformat(stamp) <= after
    assert record.admitted_at <= record.ended_at


@asynccontextmanager
async def _opened(store: td.ResultStore) -> AsyncIterator[td.Parent]:
    """A parent of a runtime on *store* that does not check for unresolved work."""
    async with (
        td.open_runtime(SUBAGENTS, config=td.Config(fail_closed=False), store=store) as runtime,
        runtime.open_parent() as parent,
    ):
        yield parent


class _ReadBack(WrappedStore):
    """A MemoryStore that keeps every record its runtimes' watchers read back."""

    ignores_writes = True

    def __init__(self, inner: td.MemoryStore) -> None:
        super().__init__(inner)
        self.read_back: list[td.RunRecord] = []

    async def changes(
        self, cursor: int | None, *, ignore_writes_of: str | None = None
    ) -> td.ChangeBatch:
        assert isinstance(self.inner, td.MemoryStore)
        batch = await self.inner.changes(cursor, ignore_writes_of=ignore_writes_of)
        self.read_back.extend(batch.records)
        return batch

    async def wait_changes(
        self, cursor: int, timeout: float, *, ignore_writes_of: str | None = None
    ) -> None:
        assert isinstance(self.inner, td.MemoryStore)
        await self.inner.wait_changes(cursor, timeout, ignore_writes_of=ignore_writes_of)


async def test_a_runtime_reads_back_only_what_others_changed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    shared = td.MemoryStore()
    store = _ReadBack(shared)
    async with _opened(store) as parent:
        for index in range(5):
            await parent.delegate("echo", f"mine {index}")
        handle = await parent.start("forever", "mine, running")
        await trio.testing.wait_all_tasks_blocked()
        await trio.sleep(5)
        # Its own records (admissions, starts, ends) are no news to it.
        assert store.read_back == []
        async with (
            td.open_runtime(SUBAGENTS, config=td.Config(fail_closed=False), store=shared) as other,
            other.open_parent() as elsewhere,
        ):
            theirs = await elsewhere.delegate("echo", "theirs")
            # A request from elsewhere on its own run is news.
            elsewhere.cancel(handle.run_id)
            await trio.sleep(1)
        seen = {record.run_id for record in store.read_back}
        assert theirs.run_id in seen
        assert handle.run_id in seen
        with pytest.raises(td.RunCancelledError):
            await parent.wait(handle.run_id)  # it read the request and applied it


class _Writes(WrappedStore):
    """A MemoryStore that keeps the status of every record written, by run."""

    def __init__(self) -> None:
        super().__init__()
        self.written: dict[str, list[td.RunStatus]] = {}

    async def write(self, records: Sequence[td.RunRecord]) -> None:
        await self.inner.write(records)
        for record in records:
            self.written.setdefault(record.run_id, []).append(record.status)


async def test_a_run_that_keeps_running_is_recorded_running_within_the_delay(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = _Writes()
    async with _opened(store) as parent:
        handle = await parent.start("forever", "keeps running")
        started = trio.current_time()
        await trio.testing.wait_all_tasks_blocked()
        # Held for a batch to go with; none comes, so the delay writes it.
        await trio.sleep(RUNNING_RECORD_DELAY * 0.9)
        assert store.written[handle.run_id] == [td.RunStatus.PENDING]
        await trio.sleep(RUNNING_RECORD_DELAY * 0.2)
        assert store.written[handle.run_id] == [td.RunStatus.PENDING, td.RunStatus.RUNNING]
        assert trio.current_time() - started < 1  # contract §16
        stored = await store.get(handle.run_id)
        assert stored is not None
        assert stored.status is td.RunStatus.RUNNING
        assert stored.started_at is not None
        assert stored.deadline_at is None  # "forever" has no timeout
        parent.cancel(handle.run_id)


async def test_a_running_record_goes_with_the_next_batch_someone_waits_for(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = _Writes()
    async with _opened(store) as parent:
        first = await parent.start("forever", "keeps running")
        started = trio.current_time()
        await parent.delegate("echo", "next")  # two batches waited for
        assert trio.current_time() == started  # no delay was waited out
        assert store.written[first.run_id] == [td.RunStatus.PENDING, td.RunStatus.RUNNING]
        stored = await store.get(first.run_id)
        assert stored is not None
        assert stored.status is td.RunStatus.RUNNING
        parent.cancel(first.run_id)


async def test_a_run_that_ends_before_its_running_record_is_written_needs_none(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = _Writes()
    async with _opened(store) as parent:
        results = [await parent.delegate("echo", f"quick {index}") for index in range(5)]
        handles = [await parent.start("echo", f"background {index}") for index in range(5)]
        for handle in handles:
            await parent.wait(handle.run_id)
    ids = [result.run_id for result in results] + [handle.run_id for handle in handles]
    for run_id in ids:
        assert store.written[run_id] == [td.RunStatus.PENDING, td.RunStatus.COMPLETED]
        stored = await store.get(run_id)
        assert stored is not None
        assert stored.started_at is not None  # the end record says when it started


async def test_a_result_and_transcript_are_written_as_their_canonical_text(
    make_store: StoreFactory,
) -> None:
    nested = {"rows": [{"n": n, "text": f"é {n}", "half": n / 2} for n in range(50)]}
    said = [{"role": "user", "content": "go"}, {"role": "assistant", "content": nested}]

    async def talker(ctx: td.ChildContext) -> td.Output:
        await trio.lowlevel.checkpoint()
        return td.Output(nested, transcript=said)

    store = make_store()
    async with (
        td.open_runtime([td.Subagent("talker", talker)], store=store) as runtime,
        runtime.open_parent() as parent,
    ):
        result = await parent.delegate("talker", "go")
    assert result.final_result == nested
    stored = await store.get(result.run_id)
    assert stored is not None
    # Read back as plain JSON data, equal to what the runner gave.
    assert stored.final_result == nested
    assert stored.transcript == tuple(said)
    assert type(stored.final_result) is dict


class _Overlong(list[Any]):
    """A list of the store's own making whose iteration goes on and on (cut
    short here so that reading it fails rather than hangs)."""

    def __iter__(self) -> Any:
        for count in range(100_000):
            yield f"run_{count:032x}"
        raise AssertionError("the store's own list was iterated")


class _Answering(WrappedStore):
    """A store whose write answers *answer*, whatever was written."""

    def __init__(self, answer: Any) -> None:
        super().__init__()
        self.answer = answer

    async def write(self, records: Sequence[td.RunRecord]) -> Any:
        await self.inner.write(records)
        return self.answer


@pytest.mark.parametrize(
    "answer",
    [
        None,  # a store written before write answered anything
        _Overlong(),
        ("run_" + "0" * 32,) * 1000,  # more ids than records
        [42, None, b"run"],
        ["run_" + "0" * 32],  # no run of the batch
        {"run_" + "0" * 32},  # not a sequence
    ],
    ids=["none", "own-list", "too-many", "not-ids", "unknown-id", "a-set"],
)
async def test_a_write_answer_no_store_gives_is_read_as_not_known(
    answer: Any, autojump_clock: trio.testing.MockClock
) -> None:
    # What write returns is only read through built-in types: a value of the
    # store's own making never runs, and a malformed answer names no conflict.
    store = _Answering(answer)
    async with _opened(store) as parent:
        with trio.fail_after(30):
            result = await parent.delegate("echo", "t")
    assert result.final_result == {"echo": "t"}
    stored = await store.get(result.run_id)
    assert stored is not None
    assert stored.status is td.RunStatus.COMPLETED


async def test_status_knows_a_bounded_number_of_runs_known_only_from_the_store(
    make_store: StoreFactory,
) -> None:
    # Evicted runs are indexed for status as retention remembers evicted ids
    # (10 x retention_max_runs): memory stays flat however many runs end.
    # Older ones read as unknown to status; wait still finds them in the store.
    config = td.Config(retention_max_runs=2)
    async with (
        td.open_runtime(SUBAGENTS, store=make_store(), config=config) as rt,
        rt.open_parent("a") as p,
    ):
        results = [await p.delegate("echo", f"run {i}") for i in range(40)]
        oldest, recent = results[0], results[-10]
        assert oldest.run_id not in tdt.internals(rt).in_memory
        assert p.status(recent.run_id).status is td.RunStatus.COMPLETED
        with pytest.raises(td.UnknownRunError, match="wait reads"):
            p.status(oldest.run_id)
        assert await p.wait(oldest.run_id) == oldest
        # Read from the store, it is known again.
        assert p.status(oldest.run_id).status is td.RunStatus.COMPLETED


async def test_attaching_indexes_the_newest_terminal_runs(make_store: StoreFactory) -> None:
    config = td.Config(retention_max_runs=2)
    async with td.open_runtime(SUBAGENTS, store=make_store()) as rt, rt.open_parent("a") as p:
        results = [await p.delegate("echo", f"run {i}") for i in range(30)]
    async with (
        td.open_runtime(SUBAGENTS, store=make_store(), config=config) as rt,
        rt.open_parent("a") as p,
    ):
        # The 20 newest of the store's 30 ended runs.
        assert p.status(results[10].run_id).status is td.RunStatus.COMPLETED
        with pytest.raises(td.UnknownRunError):
            p.status(results[9].run_id)
        assert await p.wait(results[0].run_id) == results[0]


class _LargeStore(WrappedStore):
    """A store whose attachment reports many ended runs (as a store a fleet filled would)."""

    def __init__(self, terminal: int) -> None:
        super().__init__()
        self.terminal = terminal
        self.attached = trio.Event()

    async def attach(self, runtime_id: str) -> td.StoreSnapshot:
        snapshot = await self.inner.attach(runtime_id)
        ended = StoredRun("a", "echo", td.RunStatus.COMPLETED)
        runs = tuple((f"run_{i:024x}", ended) for i in range(self.terminal))
        self.attached.set()
        return StoreSnapshot(snapshot.terminal + runs, snapshot.interrupted)


async def test_attaching_to_a_large_store_keeps_the_event_loop_turning() -> None:
    # Indexing what the store holds checkpoints as it goes (contract §15): a
    # task that only ticks gets to run many times while 50,000 ended runs are
    # indexed, where one long step would give it none.
    store = _LargeStore(60_000)
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        await store.attached.wait()
        while True:
            ticks += 1
            await trio.lowlevel.checkpoint()

    config = td.Config(retention_max_runs=5_000)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(tick)
        async with td.open_runtime(SUBAGENTS, store=store, config=config) as rt:
            opened_at = ticks
            async with rt.open_parent("a") as p:
                assert p.status("run_" + f"{59_999:024x}").status is td.RunStatus.COMPLETED
                with pytest.raises(td.UnknownRunError):
                    p.status("run_" + f"{9_999:024x}")
        nursery.cancel_scope.cancel()
    assert opened_at >= 40


async def test_an_expired_id_the_index_forgot_is_still_read_from_the_store(
    make_store: StoreFactory,
) -> None:
    # Reads of older runs push recently evicted ones out of the index while
    # retention still remembers their ids: status calls them expired (and
    # says wait reads the store), and wait answers from the store.
    config = td.Config(retention_max_runs=2)
    async with (
        td.open_runtime(SUBAGENTS, store=make_store(), config=config) as rt,
        rt.open_parent("a") as p,
    ):
        results = [await p.delegate("echo", f"run {i}") for i in range(25)]
        for old in results[:3]:
            assert await p.wait(old.run_id) == old
        forgotten = results[3]
        with pytest.raises(td.ExpiredRunError, match="wait reads it there"):
            p.status(forgotten.run_id)
        assert await p.wait(forgotten.run_id) == forgotten
        assert await p.continue_run(forgotten.run_id, "more") is not None
