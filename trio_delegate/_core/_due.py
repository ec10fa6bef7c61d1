"""Live records due by a time (contract §19): what a run said or asked since its last
record, for the store's writer (``_writer``) to write when it is due, not before."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, final

if TYPE_CHECKING:
    from ._run import Run

__all__ = ["DueRecords"]


@final
class DueRecords:
    """The runs whose live record is due, each by a time on the Trio clock."""

    __slots__ = ("_due",)

    def __init__(self) -> None:
        self._due: dict[str, tuple[Run, float]] = {}

    def __bool__(self) -> bool:
        return bool(self._due)

    def add(self, run: Run, at: float) -> bool:
        """*run*'s record is due by *at*; whether that is sooner than it was.

        Its record is built when it is written, so one entry a run is enough:
        it holds the run's latest state then.
        """
        earlier = self._due.get(run.run_id)
        if earlier is not None and earlier[1] <= at:
            return False
        self._due[run.run_id] = (run, at)
        return True

    def drop(self, run_id: str) -> None:
        """*run_id* ended: its end record says everything."""
        self._due.pop(run_id, None)

    def take(self, now: float, held: dict[str, Run]) -> tuple[list[Run], float]:
        """The runs whose record is due at *now* (but those *held*, whose record is
        written anyway), and when the next one is due (``math.inf``: none)."""
        taken = []
        later: dict[str, tuple[Run, float]] = {}
        next_at = math.inf
        for run_id, (run, at) in self._due.items():
            if at <= now:
                if run.talk is not None:
                    run.talk.written_at = now  # the next report waits a second
                if run_id not in held:
                    taken.append(run)
            else:
                later[run_id] = (run, at)
                next_at = min(next_at, at)
        self._due = later
        return taken, next_at
