"""One ending per run on a store other processes share (contract §3, §16).

Another runtime writes this runtime's runs off (``failed``, interrupted) once
this runtime's process died, or, on a store with a lease, once it has not
renewed its lease in time; the first terminal record stored wins. An ending
answered before its record is stored could then differ from the store's: on
a shared store the ending of a run that started, and on a leased store of one
decided once the lease may have lapsed, waits for its record and the run
answers as the store says. A pending run's cancellation still reads
``cancelled`` at once (while the lease, if any, is fresh).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import attrs
import pytest
import trio
import trio.testing

import trio_delegate as td
from trio_delegate._stores._protocol import interrupted

from .stores import WrappedStore

LEASE = 30.0
CONFIG = td.Config(max_concurrent_runs=1, fail_closed=False)


class _Leased(WrappedStore):
    """A shared store with a lease, where another runtime writes a run off as
    interrupted just before this runtime's ending of it is written (the run ids
    in ``rivalled``), and whose sweeps (which renew the lease) can be held up."""

    def __init__(self) -> None:
        super().__init__(td.MemoryStore())
        self.lease_seconds = LEASE
        self.rivalled: set[str] = set()
        # Set while its sweeps are held up: they wait for it.
        self.thawed: trio.Event | None = None

    async def write(self, records: Sequence[td.RunRecord]) -> Sequence[str] | None:
        for record in records:
            if record.status.is_terminal and record.run_id in self.rivalled:
                self.rivalled.discard(record.run_id)
                gone = attrs.evolve(record, status=td.RunStatus.RUNNING, error_type=None)
                await self.inner.write([interrupted(gone)])
        return await self.inner.write(records)

    async def sweep(self, runtime_id: str) -> tuple[str, ...]:
        if self.thawed is not None:
            await self.thawed.wait()
        return await self.inner.sweep(runtime_id)


async def _forever(ctx: td.ChildContext) -> str:
    await trio.sleep_forever()
    raise AssertionError("unreachable")  # pragma: no cover


HANG = td.Subagent("hang", _forever, timeout_seconds=5)
IDLE = td.Subagent("idle", _forever)


@asynccontextmanager
async def _parent(store: td.ResultStore, subagent: td.Subagent) -> AsyncIterator[td.Parent]:
    """Alice's parent on a runtime of *subagent* over *store*, one run at a time."""
    async with (
        td.open_runtime([subagent], store=store, config=CONFIG) as rt,
        rt.open_parent("alice") as parent,
    ):
        yield parent


async def _stored(store: td.ResultStore, run_id: str) -> td.RunRecord:
    record = await store.get(run_id)
    assert record is not None
    return record


async def test_a_deadline_on_a_leased_store_answers_the_ending_the_store_kept(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = _Leased()
    async with _parent(store, HANG) as parent:
        handle = await parent.start("hang", "x")
        store.rivalled.add(handle.run_id)
        with pytest.raises(td.RunFailedError, match="interrupted"):
            await parent.wait(handle.run_id)
        assert parent.status(handle.run_id).status is td.RunStatus.FAILED
        assert (await _stored(store.inner, handle.run_id)).status is td.RunStatus.FAILED


async def test_a_deadline_on_a_leased_store_reads_timed_out_once_it_is_stored(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = _Leased()
    async with _parent(store, HANG) as parent:
        handle = await parent.start("hang", "x")
        with pytest.raises(td.RunTimedOutError):
            await parent.wait(handle.run_id)
        assert (await _stored(store.inner, handle.run_id)).status is td.RunStatus.TIMED_OUT


async def test_a_pending_cancellation_with_a_fresh_lease_reads_cancelled_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = _Leased()
    async with _parent(store, IDLE) as parent:
        first = await parent.start("idle", "first")
        second = await parent.start("idle", "second")
        assert second.status is td.RunStatus.PENDING
        ack = parent.cancel(second.run_id)
        assert ack == td.CancelAck(second.run_id, True, td.RunStatus.CANCELLED)
        assert parent.status(second.run_id).status is td.RunStatus.CANCELLED
        parent.cancel(first.run_id)
    assert (await _stored(store.inner, second.run_id)).status is td.RunStatus.CANCELLED


async def test_a_pending_cancellation_once_the_lease_may_have_lapsed_answers_as_stored(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = _Leased()
    async with _parent(store, IDLE) as parent:
        first = await parent.start("idle", "first")
        second = await parent.start("idle", "second")
        # Its sweeps are held up past half its lease (its lease may run out
        # before its writes get through), but not so long that it stops its runs.
        thawed = store.thawed = trio.Event()
        await trio.sleep(LEASE / 2 + 1)
        store.rivalled.add(second.run_id)
        parent.cancel(second.run_id)
        # Not cancelled at once: the store's answer decides.
        assert parent.status(second.run_id).status is td.RunStatus.PENDING
        with pytest.raises(td.RunFailedError, match="interrupted"):
            await parent.wait(second.run_id)
        thawed.set()
        parent.cancel(first.run_id)
    assert (await _stored(store.inner, second.run_id)).status is td.RunStatus.FAILED


class _HeldEndings(WrappedStore):
    """A store other processes share (no lease): its terminal records are
    written only once ``released`` is set."""

    def __init__(self) -> None:
        super().__init__(td.MemoryStore())
        self.released = trio.Event()

    async def write(self, records: Sequence[td.RunRecord]) -> Sequence[str] | None:
        if any(record.status.is_terminal for record in records):
            await self.released.wait()
        return await self.inner.write(records)


async def test_on_a_shared_store_a_started_runs_ending_is_answered_once_it_is_stored(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Without a lease too: a process that answered timed_out and died before
    # the record was written would leave the store saying failed (interrupted)
    # to everyone else, two endings for one run.
    store = _HeldEndings()
    async with _parent(store, HANG) as parent:
        handle = await parent.start("hang", "x")
        await trio.sleep(60)  # long past the deadline; the record is held
        try:
            assert parent.status(handle.run_id).status is td.RunStatus.RUNNING
        finally:
            store.released.set()
        with pytest.raises(td.RunTimedOutError):
            await parent.wait(handle.run_id)
        assert parent.status(handle.run_id).status is td.RunStatus.TIMED_OUT
        assert (await _stored(store.inner, handle.run_id)).status is td.RunStatus.TIMED_OUT


async def test_a_run_stopped_because_the_lease_could_not_be_renewed_ends_as_the_fleet_records_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The runtime stops its runs before its lease runs out, without waiting
    # for a store it cannot reach; the others write them off (failed,
    # interrupted) once the lease has run out. Both say the same.
    store = _Leased()
    async with _parent(store, IDLE) as parent:
        running = await parent.start("idle", "running")
        pending = await parent.start("idle", "pending")
        thawed = store.thawed = trio.Event()
        store.rivalled.update({running.run_id, pending.run_id})
        with pytest.raises(td.RunFailedError, match="could not renew its lease") as info:
            await parent.wait(running.run_id)
        assert "interrupted" in str(info.value)
        assert parent.status(running.run_id).status is td.RunStatus.FAILED
        assert parent.status(pending.run_id).status is td.RunStatus.FAILED
        thawed.set()
    for handle in (running, pending):
        record = await _stored(store.inner, handle.run_id)
        assert record.status is td.RunStatus.FAILED
        assert record.error_type == "Interrupted"
