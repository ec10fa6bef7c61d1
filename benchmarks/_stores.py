"""Durable-store scenarios shared by the store rows (8 and 10).

Stores do their work on other threads and, for PostgreSQL, in another
process: these scenarios are timed on the wall clock, not on this process's
CPU time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import trio

import trio_delegate as td
from trio_delegate._core._persistence import WriteStats

from . import _delegate

__all__ = ["NullStore", "StoreFactory", "concurrent_runs"]

#: Makes the store of one repetition (``None``: no store).
StoreFactory = Callable[[], Any]


class NullStore:
    """A store that keeps nothing: what the runtime's side of durability costs by itself.

    Every write is a checkpoint and nothing else, so a run through it pays for
    building its records and for waiting on their commits, not for any
    encoding, SQL or disk.
    """

    poll_interval = 0.5
    lease_seconds = None
    splices_json = False
    in_process = False
    ignores_writes = False

    async def attach(self, runtime_id: str) -> td.StoreSnapshot:
        await trio.lowlevel.checkpoint()
        return td.StoreSnapshot((), ())

    async def detach(self, runtime_id: str) -> None:
        await trio.lowlevel.checkpoint()

    async def write(self, records: Sequence[td.RunRecord]) -> None:
        await trio.lowlevel.checkpoint()

    async def get(self, run_id: str) -> td.RunRecord | None:
        await trio.lowlevel.checkpoint()
        return None

    async def list_runs(
        self, *, status: td.RunStatus | None = None, owner: str | None = None, limit: int = 100
    ) -> list[td.RunRecord]:
        await trio.lowlevel.checkpoint()
        return []

    async def sweep(self, runtime_id: str) -> tuple[str, ...]:
        await trio.lowlevel.checkpoint()
        return ()

    async def changes(
        self, cursor: int | None, *, ignore_writes_of: str | None = None
    ) -> td.ChangeBatch:
        await trio.lowlevel.checkpoint()
        return td.ChangeBatch(0)

    async def wait_changes(
        self, cursor: int, timeout: float, *, ignore_writes_of: str | None = None
    ) -> None:
        await trio.sleep(timeout)

    async def request_cancel(self, run_id: str) -> td.RunRecord | None:
        await trio.lowlevel.checkpoint()
        return None

    async def mark_observed(self, run_id: str) -> None:
        await trio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


async def _concurrent_runs(
    concurrency: int, runs: int, store: Any, stats: list[WriteStats]
) -> float:
    config = _delegate.roomy_config(concurrency)
    each, extra = divmod(runs, concurrency)
    async with (
        td.open_runtime(_delegate.subagents(), config=config, store=store) as runtime,
        runtime.open_parent() as parent,
    ):

        async def worker(count: int) -> None:
            # A host's loop: start a background run, wait for its result.
            for _ in range(count):
                handle = await parent.start(_delegate.SUBAGENT, _delegate.TASK)
                await parent.wait(handle.run_id)

        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for index in range(concurrency):
                nursery.start_soon(worker, each + (index < extra))
        elapsed = time.perf_counter() - started
        persistence = runtime._registry.persistence
        if persistence is not None:
            stats.append(persistence.writer.stats)
    if store is not None:
        await store.aclose()
    return elapsed


def concurrent_runs(
    concurrency: int, runs: int, make_store: StoreFactory, stats: list[WriteStats]
) -> float:
    """Wall seconds for *runs* background runs, *concurrency* of them live at a time.

    Each of *concurrency* tasks starts a run and waits for its result, over
    and over, in a fresh runtime on the store *make_store* returns; the write
    statistics of the store's writer are appended to *stats*.
    """
    return trio.run(_concurrent_runs, concurrency, runs, make_store(), stats)
