"""A runtime's lease on a shared store (contract §16): renewed, guarded, maybe lapsed.

A leased store (``lease_seconds``) counts a runtime as gone once it has not
renewed its lease for that long, and other runtimes then record its live
runs as interrupted. The store watcher renews the lease with each sweep
(:meth:`Lease.renewed`); :meth:`Lease.guard` stops the runtime's live runs
before it runs out; the writer asks :meth:`Lease.may_be_written_off` whether
the endings it writes must be checked against the store (see ``_adoption``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, final

import trio

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._stores._protocol import ResultStore

__all__ = ["Lease"]


@final
class Lease:
    """When this runtime's lease on its store was last renewed, and whether it may have lapsed."""

    __slots__ = ("_lapsed", "_renewal", "_renewed_at", "_store")

    def __init__(self, store: ResultStore) -> None:
        self._store = store
        # When a sweep last renewed the lease (Trio clock), and what the guard
        # waits on once it has stopped the live runs.
        self._renewed_at = 0.0
        self._renewal = trio.Event()
        # Whether the lease may have run out at some point (a stopped process,
        # a long cut): from then on, each ending this runtime writes is checked
        # against the store (see _adoption). Sticky.
        self._lapsed = False

    def started(self, now: float) -> None:
        """The runtime attached to its store, or began to watch it: the lease is fresh."""
        self._renewed_at = now

    def renewed(self, now: float) -> None:
        """A sweep renewed the lease at *now* (Trio clock)."""
        self._note_gap(now)
        self._renewed_at = now
        self._renewal.set()

    def may_be_written_off(self) -> bool:
        """Whether another runtime may have recorded this runtime's runs as interrupted.

        Only once its lease may have run out: a runtime that kept renewing
        its lease cannot have been written off, and its writes are not checked.
        """
        if not self._lapsed and self._store.lease_seconds is not None:
            self._note_gap(trio.current_time())
        return self._lapsed

    def holds_up(self, started: bool, lease_lost: bool) -> bool:
        """Whether an ending other than a result waits for its record, on a store
        other processes share (contract §16).

        Another runtime writes this runtime's runs off once this process has
        died (and, with a lease, once it has not renewed the lease in time),
        and the first terminal record stored wins. An ending answered before
        its record is stored could then differ from the store's: it waits, and
        the run ends as the store says (see ``_adoption``). A running run's
        ending always waits (the process can die, or the lease run out, while
        its record is written); a pending run's cancellation reads
        ``cancelled`` at once (contract §5) while the lease, if any, is fresh;
        a run stopped because the lease could not be renewed (*lease_lost*) is
        not held up by the store it cannot reach.

        Args:
            started: the run holds a slot (it started).
            lease_lost: the ending is the stop of a run whose runtime could not
                renew its lease.
        """
        if lease_lost:
            return False
        return started or self.may_be_written_off()

    async def guard(self, lost: Callable[[bool], None], within: float, lease: float) -> None:
        """Call *lost* whenever no sweep has renewed the lease for *within* seconds.

        *lost* is told whether the whole *lease* has run out. A task of its
        own: a sweep against an unreachable server can block far longer than
        the lease (connection attempts, timeouts).
        """
        while True:
            await trio.sleep_until(self._renewed_at + within)
            now = trio.current_time()
            if self._renewed_at + within <= now:
                self._lapsed = True
                lost(now >= self._renewed_at + lease)
                renewal = self._renewal = trio.Event()
                await renewal.wait()  # a sweep got through again: guard anew

    def _note_gap(self, now: float) -> None:
        """Note if the lease had gone without renewal for long, as of *now*."""
        lease = self._store.lease_seconds
        if lease is not None and now - self._renewed_at >= lease / 2:
            self._lapsed = True
