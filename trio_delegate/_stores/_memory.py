"""A store that keeps run records in this process only."""

from __future__ import annotations

from collections.abc import Sequence
from typing import final

import trio

from .._status import RunStatus
from ._protocol import RunRecord, StoreSnapshot, interrupted, terminal_index

__all__ = ["MemoryStore"]


@final
class MemoryStore:
    """A store that keeps records in this process only.

    It outlives the runtimes that use it, so a new runtime opened on the same
    object finds the results (and the interrupted runs) of earlier ones, the
    way a file store would after a restart. Runtimes "gone" are those that
    attached and never detached.
    """

    __slots__ = ("_attached", "_records")

    def __init__(self) -> None:
        self._records: dict[str, RunRecord] = {}
        self._attached: set[str] = set()

    def __repr__(self) -> str:
        return f"<trio_delegate.MemoryStore {len(self._records)} runs>"

    async def attach(self, runtime_id: str) -> StoreSnapshot:
        await trio.lowlevel.checkpoint()
        marked = []
        for record in list(self._records.values()):
            live = not record.status.is_terminal
            if live and record.runtime_id not in self._attached:
                self._records[record.run_id] = interrupted(record)
                marked.append(record.run_id)
        self._attached.add(runtime_id)
        return StoreSnapshot(terminal_index(self._records.values()), tuple(marked))

    async def detach(self, runtime_id: str) -> None:
        await trio.lowlevel.checkpoint()
        self._attached.discard(runtime_id)

    async def write(self, records: Sequence[RunRecord]) -> None:
        await trio.lowlevel.checkpoint()
        for record in records:
            self._records[record.run_id] = record

    async def get(self, run_id: str) -> RunRecord | None:
        await trio.lowlevel.checkpoint()
        return self._records.get(run_id)

    async def list_runs(
        self, *, status: RunStatus | None = None, owner: str | None = None, limit: int = 100
    ) -> list[RunRecord]:
        await trio.lowlevel.checkpoint()
        chosen = [
            record
            for record in reversed(self._records.values())
            if (status is None or record.status is status)
            and (owner is None or record.owner == owner)
        ]
        return chosen[:limit]

    def abandon(self, runtime_id: str) -> None:
        """Forget that *runtime_id* is attached, as if its process had died.

        For tests of what a restart finds; a live runtime must not be abandoned.
        """
        self._attached.discard(runtime_id)
