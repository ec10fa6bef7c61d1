"""Bounded retention of terminal runs and memory of evicted ids (contract §8).

Eviction is lazy: it happens when a run settles (by count, and by time as
of its end) and before every lookup (by time). Nothing can observe a
run between the moment it became evictable and the next call, so this is
indistinguishable from a timer, and it needs no task and no clock of its own.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import TYPE_CHECKING, final

from .._errors import ExpiredRunError

if TYPE_CHECKING:
    from .._config import Config
    from ._run import Run

__all__ = ["TOMBSTONES_PER_RETAINED_RUN", "Retention", "expired_error"]

#: contract §8: evicted ids read as expired for at least 10 x retention_max_runs evictions.
TOMBSTONES_PER_RETAINED_RUN = 10


@final
class Retention:
    """Terminal runs in the order they ended, and tombstones of evicted ones."""

    __slots__ = (
        "_due",
        "_evicted",
        "_kept",
        "_max_runs",
        "_seconds",
        "_tombstone_limit",
        "_tombstones",
    )

    def __init__(self, seconds: float, max_runs: int, evicted: Callable[[Run], None]) -> None:
        self._evicted = evicted
        # ``retention_seconds``.
        self._seconds = seconds
        self._max_runs = max_runs
        self._tombstone_limit = TOMBSTONES_PER_RETAINED_RUN * max_runs
        # Terminal runs, oldest ended first (runs end in clock order).
        self._kept: deque[Run] = deque()
        # When the oldest kept run expires (``inf`` when none is kept): the
        # one place the expiry rule is written. A run expires once the time
        # is past it.
        self._due = math.inf
        # run id -> the owner it belonged to
        self._tombstones: OrderedDict[str, str] = OrderedDict()

    def add(self, run: Run) -> None:
        """Keep a run that has just settled; evict what is too old or too many.

        The run's end is the current time: runs that ended more than
        ``retention_seconds`` before it go now, not at the next lookup.
        """
        ended_at = run.ended_at
        assert ended_at is not None
        kept = self._kept
        if not kept:
            self._due = ended_at + self._seconds
        kept.append(run)
        while len(kept) > self._max_runs or ended_at > self._due:
            self._evict_oldest()

    def expire(self, now: float) -> None:
        """Evict every run that ended more than ``retention_seconds`` before *now*.

        A run has expired once *now* is past its due time; this
        returns at once when none has.
        """
        while now > self._due:
            self._evict_oldest()

    def evicted_owner(self, run_id: str) -> str | None:
        """The owner an evicted id belonged to, if remembered."""
        return self._tombstones.get(run_id)

    def _evict_oldest(self) -> None:
        kept = self._kept
        run = kept.popleft()
        run_id = run.run_id
        if kept:
            ended_at = kept[0].ended_at
            assert ended_at is not None
            self._due = ended_at + self._seconds
        else:
            self._due = math.inf
        self._tombstones[run_id] = run.owner
        if len(self._tombstones) > self._tombstone_limit:
            self._tombstones.popitem(last=False)
        self._evicted(run)


def expired_error(run_id: str, config: Config, *, stored: bool = False) -> ExpiredRunError:
    """The error for a run whose result retention (or a store's own) no longer holds.

    Args:
        stored: the runtime has a store, which may still hold the run's record
            (``status`` and ``cancel`` answer from memory; ``wait`` reads it).
    """
    kept = (
        f"finished runs are kept for {config.retention_seconds:g} s and at most "
        f"{config.retention_max_runs} at a time"
    )
    if stored:
        return ExpiredRunError(
            f"run {run_id} has expired from memory: {kept}; its record may still be "
            "in the store: wait reads it there",
            run_id=run_id,
        )
    return ExpiredRunError(
        f"run {run_id} has expired: {kept}, and its result is no longer held; start a "
        "new run if you still need it",
        run_id=run_id,
    )
