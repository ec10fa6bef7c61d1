"""One ending per run, in every answer and in the store (contract §3, §12, §16).

A run answers its ending once and that ending never changes; when the store
could not take its terminal record, the record is written again, so the store
ends with the ending the runtime answered, not with a live record that the
next runtime writes off as interrupted.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import trio
import trio.testing

import trio_delegate as td
from trio_delegate._core._unwritten import FIRST_RETRY, LAST_RETRY

from .stores import WrappedStore


class _Full(WrappedStore):
    """A store whose writes fail while it is full (or, with ``endings_only``, its
    writes of terminal records: an admission is still taken)."""

    def __init__(self, inner: td.ResultStore, *, endings_only: bool = False) -> None:
        super().__init__(inner)
        self.full = False
        self.endings_only = endings_only
        self.refused = 0

    async def write(self, records: Sequence[td.RunRecord]) -> Sequence[str] | None:
        ending = any(record.status.is_terminal for record in records)
        if self.full and (ending or not self.endings_only):
            self.refused += 1
            raise td.StoreError("database or disk is full")
        return await self.inner.write(records)


async def _forever(ctx: td.ChildContext) -> str:
    await trio.sleep_forever()
    raise AssertionError("unreachable")  # pragma: no cover


async def _done(ctx: td.ChildContext) -> str:
    return "done"


CONFIG = td.Config(fail_closed=False)


async def _stored(store: td.ResultStore, run_id: str) -> td.RunStatus:
    record = await store.get(run_id)
    assert record is not None
    return record.status


async def test_a_timed_out_ending_the_store_refused_is_written_once_it_recovers(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = _Full(td.MemoryStore())
    subagents = [td.Subagent("hang", _forever, timeout_seconds=5)]
    async with (
        td.open_runtime(subagents, store=store, config=CONFIG) as rt,
        rt.open_parent("alice") as parent,
    ):
        handle = await parent.start("hang", "x")
        store.full = True
        with pytest.raises(td.RunTimedOutError):
            await parent.wait(handle.run_id)
        await trio.testing.wait_all_tasks_blocked()
        assert store.refused >= 1  # its record met the full store
        assert await _stored(store.inner, handle.run_id) is not td.RunStatus.TIMED_OUT
        store.full = False
        await trio.sleep(FIRST_RETRY)
        await trio.testing.wait_all_tasks_blocked()
        assert parent.status(handle.run_id).status is td.RunStatus.TIMED_OUT
        assert await _stored(store.inner, handle.run_id) is td.RunStatus.TIMED_OUT


async def test_retries_back_off_while_the_store_stays_full(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = _Full(td.MemoryStore())
    subagents = [td.Subagent("hang", _forever, timeout_seconds=5)]
    async with (
        td.open_runtime(subagents, store=store, config=CONFIG) as rt,
        rt.open_parent("alice") as parent,
    ):
        handle = await parent.start("hang", "x")
        store.full = True
        with pytest.raises(td.RunTimedOutError):
            await parent.wait(handle.run_id)
        # An hour of a full store: a few attempts, each at most LAST_RETRY apart
        # (doubling from FIRST_RETRY), not one per poll.
        await trio.sleep(3600)
        assert 3600 / LAST_RETRY <= store.refused <= 3600 / LAST_RETRY + 10
        store.full = False
        await trio.sleep(LAST_RETRY)
        assert await _stored(store.inner, handle.run_id) is td.RunStatus.TIMED_OUT


async def test_an_unrecorded_result_is_stored_as_the_failure_it_was_answered_with(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = _Full(td.MemoryStore(), endings_only=True)
    subagents = [td.Subagent("done", _done)]
    async with (
        td.open_runtime(subagents, store=store, config=CONFIG) as rt,
        rt.open_parent("alice") as parent,
    ):
        store.full = True
        with pytest.raises(td.RunFailedError, match="disk is full") as answered:
            await parent.delegate("done", "y")
        run_id = answered.value.run_id
        assert run_id is not None
        store.full = False
        await trio.sleep(FIRST_RETRY)
        await trio.testing.wait_all_tasks_blocked()
        record = await store.inner.get(run_id)
        assert record is not None
        assert record.status is td.RunStatus.FAILED
        assert record.final_result is None
        assert record.error_type == answered.value.error_type
        assert record.error_message == answered.value.error_message


async def test_an_ending_refused_until_the_close_is_written_as_the_runtime_closes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = _Full(td.MemoryStore())
    async with (
        td.open_runtime([td.Subagent("hang", _forever)], store=store, config=CONFIG) as rt,
        rt.open_parent("alice") as parent,
    ):
        handle = await parent.start("hang", "x")
        store.full = True
        parent.cancel(handle.run_id)
        with pytest.raises(td.RunCancelledError):
            await parent.wait(handle.run_id)
        await trio.testing.wait_all_tasks_blocked()
        assert store.refused >= 1
        store.full = False  # and the runtime closes before a retry is due
    assert await _stored(store.inner, handle.run_id) is td.RunStatus.CANCELLED


async def test_an_ending_the_store_never_took_is_written_off_by_the_next_runtime(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = _Full(td.MemoryStore())
    async with (
        td.open_runtime([td.Subagent("hang", _forever)], store=store, config=CONFIG) as rt,
        rt.open_parent("alice") as parent,
    ):
        handle = await parent.start("hang", "x")
        store.full = True
        parent.cancel(handle.run_id)
        with pytest.raises(td.RunCancelledError):
            await parent.wait(handle.run_id)
    # Full until the close: the run's last live record stays, and the next
    # runtime to attach records it as interrupted (docs/persistence.md).
    assert not (await _stored(store.inner, handle.run_id)).is_terminal
    async with td.open_runtime([], store=store.inner, config=CONFIG):
        pass
    record = await store.inner.get(handle.run_id)
    assert record is not None
    assert record.status is td.RunStatus.FAILED
    assert record.error_message is not None
    assert "interrupted" in record.error_message
