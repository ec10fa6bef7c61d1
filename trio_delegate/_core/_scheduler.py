"""One parent's slots: which of its admitted runs runs next (contract §3, §15).

A run's place in the queue is fixed when it is admitted, so pending runs
start in admission order whatever their callers do meanwhile. A run starts
when a slot is free, every run admitted before it has started or ended, and
its own admission is durable (at once without a store; when the store has
committed its admission record otherwise). A pending run that is cancelled
ends at once and simply never starts.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, final

from ._run import State

if TYPE_CHECKING:
    from ._run import Run

# A module global: read on every admission (see _run's own).
_PENDING: Final = State.PENDING

__all__ = ["Scheduler"]


@final
class Scheduler:
    """Admitted runs of one parent in admission order, and its running count."""

    __slots__ = ("_launch", "_limit", "_queue", "_stopped", "running")

    def __init__(self, limit: int, launch: Callable[[Run], None]) -> None:
        self._limit = limit
        self._launch = launch
        # Admitted runs that have not started, in admission order. Runs that
        # ended while queued (cancelled, withdrawn) stay until they reach the
        # head, where they are dropped: no search through the queue.
        self._queue: deque[Run] = deque()
        self._stopped = False
        self.running = 0

    def admit(self, run: Run) -> None:
        """Fix *run*'s place; it starts as soon as it may (at once, if it may now)."""
        queue = self._queue
        if not queue and run.state is _PENDING and self.running < self._limit and not self._stopped:
            # The common case: a free slot and nobody ahead.
            self.running += 1
            self._launch(run)
        else:
            queue.append(run)

    def ready(self) -> None:
        """An admission became durable: start what may start."""
        self._pump()

    def released(self) -> None:
        """A running run ended: its slot is free."""
        self.running -= 1
        if self._queue:
            self._pump()

    def stop(self) -> None:
        """Start nothing more (the parent is closing)."""
        self._stopped = True

    def queued(self) -> list[Run]:
        """Runs still waiting for a slot, in admission order."""
        return [run for run in self._queue if run.state.live]

    def _pump(self) -> None:
        queue = self._queue
        while queue and not self._stopped:
            head = queue[0]
            state = head.state
            if not state.live:
                queue.popleft()  # ended while it waited
            elif state is not _PENDING or self.running >= self._limit:  # still admitting
                return
            else:
                queue.popleft()
                self.running += 1
                self._launch(head)
