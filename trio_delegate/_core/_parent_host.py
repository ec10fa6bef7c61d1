"""A parent as its runs and its runtime see it: its state, its runs' lifecycle, its close.

The public :class:`Parent` (``_parent``) shows only the contract's names
(§2, §17): it checks a caller's arguments, admits and answers. Everything
else a parent is lives here, in its :class:`ParentHost`: the runs it has
not ended, its scheduler, its fail-closed ledger and its settlements (the
parent reads them too, on every run), what its runs need of it
(:class:`RunHost`), launching a run the scheduler lets start, abandoning a
foreground run whose caller left, and closing: cancelling what is live,
joining it, freeing the owner. A run's admission, with its record in a
store, is ``_admission``'s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Final, NoReturn, final

import trio

from .._errors import DelegationError, RuntimeClosedError, StoreError
from .._results import RunHandle, RunResult
from .._status import RunStatus
from .._stores._protocol import RunRecord, StoredRun
from ._execution import execute
from ._fail_closed import Ledger
from ._run import CancelReason, Outcome, Run, State
from ._scheduler import Scheduler
from ._settlements import Settlements

if TYPE_CHECKING:
    from .._subagent import Subagent
    from .._usage import Budget
    from ._meter import Tally
    from ._parent import Parent
    from ._registry import Registry

__all__ = ["ParentHost", "Record"]

#: How a run's terminal record is written (``RunHost.record``).
Record = Callable[[Run, Outcome, Callable[[StoreError | None], None]], None]

# The members read on every run, by short module-level names (as in ``_run``).
_COMPLETED: Final = RunStatus.COMPLETED
_RUNNING: Final = State.RUNNING


def _unrecorded(run: Run, outcome: Outcome, recorded: Callable[[StoreError | None], None]) -> None:
    """Never called: a host without a store does not record (``records`` is False)."""
    raise AssertionError("a run without a store was asked to record its outcome")


@final
class ParentHost:
    """One parent's state and its runs' side of it: the :class:`RunHost` interface of
    ``_run``, what a run's task needs (``_execution``) and what the runtime does
    with its parents.

    Attributes:
        parent: the public object.
        registry, owner, children, depth: the parent's runtime, owner, direct
            children and depth.
        live: the parent's runs that have not ended, in admission order.
        scheduler, ledger, settlements: its slots (contract §3), its
            fail-closed ledger (§7) and its settlement streams (§17).
        announcing: runs whose admission a store is recording: their callers
            do not have their ids yet, so no check lists them and no stream
            tells of them (the parent's to know, not the run's).
        closed, closed_at: whether (and when) the parent began to close.
        spent, budget: what its runs spent (made at the first report) and its
            budget (contract §20).
        enclosing: the run whose ``ctx.parent`` this is, for a nested parent.
    """

    __slots__ = (
        "announcing",
        "budget",
        "children",
        "closed",
        "closed_at",
        "config",
        "depth",
        "enclosing",
        "events",
        "grace",
        "ledger",
        "live",
        "now",
        "nursery",
        "owner",
        "parent",
        "record",
        "records",
        "registry",
        "run_evicted",
        "scheduler",
        "settlements",
        "spent",
        "writer",
    )

    parent: Parent

    def __init__(
        self,
        registry: Registry,
        owner: str,
        children: Mapping[str, Subagent],
        depth: int,
        nursery: trio.Nursery,
        budget: Budget | None = None,
        enclosing: Run | None = None,
    ) -> None:
        self.registry = registry
        self.budget = budget
        self.enclosing = enclosing
        self.spent: Tally | None = None
        self.owner = owner
        self.children = children
        self.depth = depth
        self.nursery = nursery
        self.closed = False
        self.closed_at: float | None = None
        self.live: dict[str, Run] = {}
        self.scheduler = Scheduler(registry.config.max_concurrent_runs, self.launch)
        self.ledger = Ledger()
        self.announcing: set[str] = set()
        self.settlements = Settlements(owner)
        self.config = registry.config
        # The runtime's observer (or None), fixed when it opened.
        self.events = registry.events
        # The runtime's clock.
        self.now = registry.now
        # Decides runs whose runners do not stop (contract §18); a run's task
        # tells it when it returns (``_execution``).
        self.grace = registry.grace
        # Whether decided outcomes are recorded (with a store), and where: a
        # settlement goes from the run to the store's writer (which answers the
        # run itself; Run.decide says when it commits), as do its questions.
        persistence = registry.persistence
        self.records = persistence is not None
        self.writer = persistence.writer if persistence is not None else None
        self.record: Record = persistence.writer.settle if persistence is not None else _unrecorded
        # Retention evicted a run; the ledger keeps a record of it if unresolved.
        self.run_evicted = self.ledger.evicted

    # -- what its runs see of it (``RunHost``) ---------------------------------------

    def closing_time(self) -> tuple[float, CancelReason] | None:
        registry = self.registry
        if registry.closed_at is not None:
            return registry.closed_at, CancelReason.RUNTIME_CLOSED
        if self.closed_at is not None:
            return self.closed_at, CancelReason.PARENT_CLOSED
        return None

    def run_committed(self, run: Run, was_running: bool) -> None:
        del self.live[run.run_id]
        announcing = self.announcing
        if not announcing or run.run_id not in announcing:
            self.settlements.settled(run)
        # Out of the runtime's live runs, into retention.
        registry = self.registry
        registry.live_count -= 1
        events = self.events
        if events is not None:
            events.ended(run)
        registry.retention.add(run)
        if was_running:
            self.scheduler.released()

    def run_cancel_requested(self, run: Run, reason: CancelReason) -> None:
        if run.state is _RUNNING:  # live and running
            # Its runner has a grace to stop in (contract §18).
            self.grace.delivered(run, self.now())
        events = self.events
        if events is not None:
            events.cancel_requested(run, reason)

    def run_observed_elsewhere(self, run: Run) -> None:
        self.ledger.resolve(run.run_id)
        self.settlements.told(run.run_id)

    # -- its runs' lifecycle -----------------------------------------------------------

    def launch(self, run: Run) -> None:
        """Start *run* now (the scheduler decided it may)."""
        registry = self.registry
        now = registry.now()
        run.start(now)
        if registry.persistence is not None:
            registry.persistence.writer.started(run, now)
        if registry.events is not None:
            registry.events.started(run)
        registry.grace.started(run)
        self.nursery.start_soon(execute, run, self, name=registry.task_names[run.subagent.name])

    async def leave_foreground(self, run_id: str) -> None:
        """``abandon``: the foreground caller of *run_id*, served by a surface, left.

        A run that is not this parent's, or that is known only from the
        store, is left alone.
        """
        try:
            found = self.registry.lookup(run_id, self.owner)
        except DelegationError:
            await trio.lowlevel.checkpoint()
            return
        if isinstance(found, StoredRun):
            await trio.lowlevel.checkpoint()
            return
        await self.abandon(found)

    async def abandon(self, run: Run) -> None:
        """The caller of a foreground call leaves without its answer: cancel *run*, join it.

        The one verdict on such a run, whichever surface made the call: a run
        that completed anyway (its runner shielded its last step, say) was
        observed by nobody, so it is unobserved (contract §17) and unresolved
        (§7); any other ending is answered by the caller's own cancellation.
        The caller shields this wait.
        """
        run.request_cancel(self.registry.now(), CancelReason.CALLER_CANCELLED)
        await run.ending().wait()
        # From now on a wait tells of this run like of any background run.
        run.foreground = False
        self.settlements.untold(run, run.status is _COMPLETED)

    def listed(self) -> list[Run]:
        """This parent's runs, live or retained, in admission order (``Parent.runs``).

        By owner, as every lookup is (contract §8). A run whose admission is
        still being recorded is left out: its caller does not have its id yet.
        """
        return self.registry.runs_of(self.owner, self.announcing)

    # -- whether it can be used ------------------------------------------------------

    def check_usable(self) -> None:
        """Raise RuntimeClosedError if this parent or its runtime is closed."""
        if self.registry.closed:
            raise RuntimeClosedError(
                f"the runtime of parent {self.owner!r} is closed; its runs were cancelled "
                "and nothing more can be done through it: open a new runtime"
            )
        if self.closed:
            raise RuntimeClosedError(
                f"parent {self.owner!r} is closed; open a new parent to delegate again"
            )

    def closed_during(self, run: Run) -> NoReturn:
        """Raise for a call about *run* that was waiting when this parent or runtime closed."""
        which = "its runtime" if self.registry.closed else f"parent {self.owner!r}"
        error = RuntimeClosedError(
            f"{which} closed while this call was waiting for run {run.run_id}, which is "
            f"{run.status.value}; nothing more can be done through it",
            run_id=run.run_id,
            subagent=run.subagent.name,
            status=run.status.value,
        )
        if run.is_terminal and run.status is not RunStatus.COMPLETED:
            raise error from run.outcome_error()
        raise error

    def raise_if_unresolved(self) -> None:
        """Raise ``UnresolvedDelegationError`` if this parent left work unresolved."""
        if self.config.fail_closed:
            self.ledger.check(self.owner, self.announcing)

    # -- nesting and closing ---------------------------------------------------------

    def open_nested(self, run: Run, nursery: trio.Nursery) -> ParentHost:
        """The host of the parent a runner gets as ``ctx.parent``; its runs live in *nursery*."""
        # Imported here: ``_parent`` builds the public object on this host.
        from ._parent import open_parent_host

        registry = self.registry
        children = {name: registry.subagents[name] for name in run.subagent.children}
        return open_parent_host(
            registry, f"{self.owner}/{run.run_id}", children, run.depth, nursery, enclosing=run
        )

    def close_now(self, reason: CancelReason = CancelReason.PARENT_CLOSED) -> None:
        """Close without waiting: no new calls; every live run is told to stop.

        Pending runs end first, in admission order (they have no task to
        stop), so that no slot freed meanwhile starts one.
        """
        if self.closed:
            return
        self.closed = True
        now = self.closed_at = self.registry.now()
        self.scheduler.stop()
        for run in self.scheduler.queued():
            run.request_cancel(now, reason)
        for run in list(self.live.values()):
            run.request_cancel(now, reason)

    def cancel_pending(self, reason: CancelReason) -> None:
        """End every pending run of this parent at once (the runtime is closing)."""
        now = self.registry.now()
        self.scheduler.stop()
        for run in self.scheduler.queued():
            run.request_cancel(now, reason)

    async def aclose(self) -> None:
        """Close the parent, join every run that is still live, then free the owner."""
        self.close_now()
        try:
            live = self.live
            if live:
                # Shielded, as a nursery's join is.
                with trio.CancelScope(shield=True):
                    while live:
                        await next(iter(live.values())).ending().wait()
        finally:
            self.joined()

    def joined(self) -> None:
        """Every run of this closed parent has ended: free its owner, end its streams."""
        self.registry.unregister(self)
        self.settlements.close()

    async def wait_in_store(self, run_id: str, limit: float | None) -> RunResult | RunHandle:
        """``wait`` for a run known from the store (see :meth:`StoredRuns.wait`)."""
        persistence = self.registry.persistence
        assert persistence is not None
        record = await persistence.stored.wait(run_id, limit, self.check_usable)
        if type(record) is RunHandle:
            return record
        assert type(record) is RunRecord
        # As ``_parent._answer`` does: the caller is told, and a result resolves the run.
        self.settlements.told(run_id)
        if record.status is _COMPLETED:
            self.ledger.resolve(run_id)
        return persistence.stored.answer(record)
