"""Following other runtimes that share a store (contract §16): the store watcher.

Every poll interval (at once on a notification, where the store has them)
the :class:`Watcher` sends the flags this runtime set on other runtimes'
runs (cancel requests, observations), renews this runtime's lease and marks
the runs of gone runtimes interrupted (``sweep``), and reads the changes
since its last look: what other runtimes did to this runtime's runs goes to
its :class:`WatchHost`, and every record it reads goes to the stored runs
(``_stored``), which update the view ``status`` and ``cancel`` answer from
and wake the waits on them.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, final

import trio

from .._status import RunStatus

if TYPE_CHECKING:
    from .._stores._protocol import ChangeBatch, ResultStore, RunRecord
    from ._lease import Lease

__all__ = ["WatchHost", "Watcher"]


class WatchHost(Protocol):
    """What the store watcher tells the runtime."""

    def own_record(self, record: RunRecord) -> None:
        """The store's record of one of this runtime's runs changed (another runtime
        may have flagged it, or recorded it as ended)."""

    def lease_lost(self, expired: bool = False) -> None:
        """The store stayed unreachable for most of this runtime's lease
        (*expired*: for all of it)."""


@final
class Watcher:
    """Reads what other runtimes write to a shared store, and sends them this runtime's flags."""

    __slots__ = (
        "_flagged",
        "_flags",
        "_ignores_writes",
        "_in_process",
        "_lease",
        "runtime_id",
        "store",
    )

    def __init__(self, store: ResultStore, runtime_id: str, lease: Lease) -> None:
        self.store = store
        self.runtime_id = runtime_id
        self._lease = lease
        # What the store declares it can do (ResultStore); anything but True
        # is read as False.
        # A store that can leave out what this runtime wrote itself spares the
        # watcher reading every record it wrote back (and waking for them).
        self._ignores_writes = store.ignores_writes is True
        # A store shared only within this process wakes its watcher on every
        # write: it needs no polling, no timer that would move a mock clock,
        # and no sweeps (its runtimes attach and detach in this process).
        self._in_process = store.in_process is True
        # Flags to set on other runtimes' runs (cancel requests, observations,
        # answers to their questions), sent with the next poll.
        self._flags: list[tuple[str, str, Any]] = []
        self._flagged = trio.Event()

    def request_cancel(self, run_id: str) -> None:
        """Ask the runtime that owns *run_id* to cancel it (sent by the watcher)."""
        self._flag(run_id, "cancel")

    def mark_observed(self, run_id: str) -> None:
        """Tell the runtime that owns *run_id* its result was observed (sent by the watcher)."""
        self._flag(run_id, "observed")

    def post_answer(self, run_id: str, request: dict[str, Any]) -> None:
        """Leave an answer for a question of *run_id* in the store, for the runtime
        that owns the run to apply (sent by the watcher, contract §19)."""
        self._flag(run_id, "answer", request)

    def _flag(self, run_id: str, flag: str, request: Any = None) -> None:
        self._flags.append((run_id, flag, request))
        self._flagged.set()

    async def run(
        self,
        host: WatchHost,
        seen: Callable[[RunRecord], None],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Follow what other runtimes do in the store, for as long as the runtime is open.

        Every poll interval (at once on a notification, where the store has
        them): send queued flags, renew this runtime's liveness and mark the
        runs of gone runtimes interrupted (``sweep``), and read the changes
        since the last look: flags other runtimes set on this runtime's runs
        go to *host*; every record read goes to *seen* (the stored runs: other
        runtimes' runs update the view ``status`` and ``cancel`` answer from,
        and wake waits on them). A store that cannot be reached is tried again
        at the next poll; when a leased store stays unreachable for most of
        its lease, *host* stops its live runs.
        """
        runtime_id = self.runtime_id

        def see(record: RunRecord) -> None:
            """One record as the store holds it now."""
            if record.runtime_id == runtime_id:
                host.own_record(record)
            seen(record)

        store = self.store
        in_process = self._in_process
        interval = math.inf if in_process else store.poll_interval
        lease = store.lease_seconds
        margin = max(2 * store.poll_interval, 0.2 * lease) if lease is not None else 0.0
        cursor = 0
        try:
            cursor = (await store.changes(None)).cursor
            for status in (RunStatus.PENDING, RunStatus.RUNNING):
                for record in await store.list_runs(status=status, limit=1_000_000):
                    see(record)
        except Exception:
            pass
        task_status.started()
        self._lease.started(trio.current_time())
        async with trio.open_nursery() as nursery:
            if lease is not None:
                nursery.start_soon(self._lease.guard, host.lease_lost, lease - margin, lease)
            await self._watch(see, cursor, interval, in_process)

    async def _changes(self, cursor: int) -> ChangeBatch:
        """The changes after *cursor* this runtime did not write itself, where the store can
        leave those out (it knows them already); else every change."""
        if self._ignores_writes:
            return await self.store.changes(cursor, ignore_writes_of=self.runtime_id)
        return await self.store.changes(cursor)

    async def _watch(
        self, see: Callable[[RunRecord], None], cursor: int, interval: float, in_process: bool
    ) -> None:
        store = self.store
        while True:
            await self._send_flags()
            try:
                if not in_process:
                    await store.sweep(self.runtime_id)
            except Exception:
                pass
            else:
                self._lease.renewed(trio.current_time())
            try:
                batch = await self._changes(cursor)
            except Exception:
                pass
            else:
                cursor = batch.cursor
                for record in batch.records:
                    see(record)
            await self._wait_for_news(cursor, interval)

    async def _wait_for_news(self, cursor: int, interval: float) -> None:
        """Until the store has changed after *cursor*, a flag is queued, or *interval* passed."""
        store = self.store

        async def changed(nursery: trio.Nursery) -> None:
            with contextlib.suppress(Exception):  # the poll goes on regardless
                if self._ignores_writes:
                    # This runtime's own writes are no news to it.
                    await store.wait_changes(cursor, interval, ignore_writes_of=self.runtime_id)
                else:
                    await store.wait_changes(cursor, interval)
            nursery.cancel_scope.cancel()

        async def flagged(nursery: trio.Nursery) -> None:
            await self._flagged.wait()
            nursery.cancel_scope.cancel()

        with trio.move_on_after(interval):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(changed, nursery)
                nursery.start_soon(flagged, nursery)

    async def _send_flags(self) -> None:
        flags, self._flags = self._flags, []
        self._flagged = trio.Event()
        for index, (run_id, flag, request) in enumerate(flags):
            try:
                if flag == "cancel":
                    await self.store.request_cancel(run_id)
                elif flag == "answer":
                    # Only a store with post_answer is sent answers (see Replies).
                    await self.store.post_answer(run_id, request)  # type: ignore[attr-defined]
                else:
                    await self.store.mark_observed(run_id)
            except Exception:
                # Kept for the next poll, this one behind the others: a flag the
                # store refuses for good (a row it cannot write) must not hold
                # back the flags queued after it. The rest wait too: a store
                # that cannot be reached would fail each in turn, slowly, and
                # the sweep that renews the lease comes after the flags.
                self._flags[:0] = [*flags[index + 1 :], (run_id, flag, request)]
                return
