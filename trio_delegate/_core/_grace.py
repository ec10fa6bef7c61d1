"""Runners that do not stop (contract §18): the grace after a cancellation.

A runner is user code: it can catch ``trio.Cancelled`` and carry on, or
shield itself for ever, and Trio cannot kill a task. So once a run's
cancellation has been delivered (a request, its child deadline, its
caller's or parent's cancellation, a close), :class:`Grace` decides the run
``Config.cancel_grace_seconds`` later if its runner has not returned by
then: ``cancelled`` (``timed_out`` for a deadline) with a reason saying the
runner did not stop. Waiters, ``status``, settlement streams and the
fail-closed check answer from then on, and the parent's slot is free.

The runner's task still holds its runtime's nursery open until it returns.
While the runtime closes, the watchdog logs, at once and then every grace
period, which runs refuse to stop and for how long.

One watchdog task per runtime keeps a heap of ``(decide_at, seq, run)``:
an entry per running run with a deadline and one per delivered cancellation
(at most three per run: its deadline, its first cancel request, the
runtime's close). A run with a deadline is only noted when it starts (a
list append, and a wake-up if it is due before the watchdog would look);
the watchdog gives it its entry when it next looks, and only if it is still
live then, so a run that settles in time (nearly every run) never has one.
The list is kept to the same bound as the heap. An entry of a run that has
settled is dead; before a push finds more than :data:`_SPREAD` entries per run task
(plus a slack), the heap is rebuilt without them, so it holds no more than a
small multiple of the running runs (and no settled run's result for long).
A rebuilt heap holds at most half of that bound (the slack grows by twice
the live entries of runs without a task, pending runs the close reached), so
the next rebuild is at least as many pushes away as it costs.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
from collections.abc import Callable
from heapq import heappush
from typing import TYPE_CHECKING, Final, final

import trio

from .._status import RunStatus
from ._run import Outcome

if TYPE_CHECKING:
    from ._run import Run

__all__ = ["Grace", "RunnerDidNotStop"]

logger = logging.getLogger("trio_delegate")

# Rebuild the heap before it holds more than _SPREAD entries per run task plus
# a slack of at least _SLACK. A running run has at most three live entries, so
# a rebuilt heap holds at most half of the bound.
_SPREAD: Final = 6
_SLACK: Final = 64
_INF: Final = math.inf


@final
class RunnerDidNotStop(Exception):
    """Why a run was decided without its runner: the cause of its ending."""


@final
class Grace:
    """One runtime's grace watchdog (see the module docstring)."""

    __slots__ = (
        "_abandoned",
        "_closing",
        "_heap",
        "_horizon",
        "_now",
        "_scope",
        "_seq",
        "_slack",
        "_started",
        "_target",
        "_wake",
        "seconds",
        "tasks",
        "watching",
    )

    def __init__(self, seconds: float, now: Callable[[], float]) -> None:
        self.seconds = seconds
        self._now = now
        self._heap: list[tuple[float, int, Run]] = []
        # Breaks ties of decide_at: runs are never compared.
        self._seq = itertools.count()
        self._slack = _SLACK
        # Runs with a deadline started since the watchdog last looked: their
        # entries, made when it looks and only for the runs still live then.
        self._started: list[Run] = []
        # When the earliest of the runs it found settled would have been due:
        # it looks again no earlier, so a run that starts after one that
        # settled does not wake it.
        self._horizon = math.inf
        self._wake = trio.Event()
        # When the watchdog will look next (math.inf: it waits for an entry).
        self._target = math.inf
        # Run tasks that have been started and have not returned.
        self.tasks = 0
        # Runs decided without their runner, whose task has not returned: run -> since.
        self._abandoned: dict[Run, float] = {}
        self._closing = False
        # Whether a returning run task must call task_returned: some run is
        # abandoned, or the runtime is closing.
        self.watching = False
        self._scope: trio.CancelScope | None = None

    # -- what the runtime tells it ---------------------------------------------------

    def started(self, run: Run) -> None:
        """*run*'s task is about to start; its deadline, if any, starts its grace.

        Called for every run, so it only notes the run (see the module
        docstring); the list's size is checked against the run tasks,
        counted here anyway, rather than the runtime's live runs, which
        would cost a call.
        """
        tasks = self.tasks = self.tasks + 1
        at = run.deadline + self.seconds
        if at != _INF:
            started = self._started
            if len(started) > _SPREAD * tasks + _SLACK:
                # Mostly runs that settled: keep only the live ones.
                started[:] = [run for run in started if run.state.live]
            started.append(run)
            if at < self._target:
                self._target = at
                self._wake.set()

    def delivered(self, run: Run, now: float) -> None:
        """*run*'s cancellation was delivered at *now*: decide it a grace later."""
        self._push(now + self.seconds, run)

    def task_returned(self, run: Run) -> None:
        """*run*'s task returned (``_execution``): it is off :attr:`tasks`.

        While :attr:`watching`, a run decided without its runner is logged as
        it returns late, and the watchdog ends with the last task of a
        closing runtime.
        """
        self.tasks -= 1
        if not self.watching:
            return
        since = self._abandoned.pop(run, None)
        self.watching = self._closing or bool(self._abandoned)
        if since is not None:
            logger.warning(
                "run %s (subagent %r) returned %.1f s after it was decided %s; what it "
                "returned was dropped",
                run.run_id,
                run.subagent.name,
                self._clock() - since,
                run.status.value,
            )
        if self._closing and self.tasks == 0 and self._scope is not None:
            self._scope.cancel()

    def closing(self) -> None:
        """The runtime is closing: report stuck runs until every task has returned."""
        self._closing = True
        self.watching = True
        if self._abandoned:
            self._report()
        if self.tasks == 0 and self._scope is not None:
            self._scope.cancel()
        self._wake.set()

    # -- the watchdog ------------------------------------------------------------

    async def watch(self) -> None:
        """Decide overdue runs, and report stuck ones while the runtime closes.

        Shielded: the runtime's close cancels the nursery this task lives in,
        and the grace must still run out; it ends once the runtime is closing
        and every run task has returned.
        """
        with trio.CancelScope(shield=True) as scope:
            self._scope = scope
            if self._closing and self.tasks == 0:
                return
            next_report = math.inf
            while True:
                now = self._clock()
                self._take_started()
                self._decide_due(now)
                if self._closing and self._abandoned:
                    if next_report == math.inf:
                        next_report = now + self.seconds
                    elif now >= next_report:
                        self._report()
                        next_report = now + self.seconds
                self._target = min(
                    self._heap[0][0] if self._heap else math.inf, self._horizon, next_report
                )
                wake = self._wake = trio.Event()
                with trio.move_on_at(self._target):
                    await wake.wait()

    def _take_started(self) -> None:
        """Give the live runs started since the last look their heap entries."""
        started, self._started = self._started, []
        horizon = math.inf
        for run in started:
            at = run.deadline + self.seconds
            if run.is_live:
                self._push(at, run)
            elif at < horizon:
                horizon = at
        self._horizon = horizon

    def _decide_due(self, now: float) -> None:
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, _, run = heapq.heappop(heap)
            if run.is_live and run.state.holds_slot:  # running or input_required
                self._give_up(run, now)

    def _give_up(self, run: Run, now: float) -> None:
        """Decide *run* without its runner, which has not stopped."""
        # cancelled or timed_out exactly as if the runner had stopped (contract §3).
        interrupted = run.interrupted()
        error = RunnerDidNotStop(
            f"its runner did not stop within the {self.seconds:g} s grace after its "
            "cancellation, Config.cancel_grace_seconds, and the run was decided without it"
        )
        # A budget stop's error stays reachable as the cause (contract §20).
        error.__cause__ = interrupted.error
        outcome = Outcome(interrupted.status, error=error, reason=interrupted.reason)
        self._abandoned[run] = now
        self.watching = True
        logger.warning(
            "run %s (subagent %r) did not stop within %g s of its cancellation: it is %s now; "
            "its runner still holds the runtime open until it returns",
            run.run_id,
            run.subagent.name,
            self.seconds,
            outcome.status.value,
        )
        run.decide(outcome)

    def _report(self) -> None:
        now = self._clock()
        stuck = ", ".join(
            f"{run.run_id} (subagent {run.subagent.name!r}, {now - since:.1f} s)"
            for run, since in self._abandoned.items()
        )
        logger.warning(
            "the runtime is closing, and %d run(s) refuse to stop (for how long since they "
            "were decided): %s",
            len(self._abandoned),
            stuck,
        )

    def abandoned(self) -> list[tuple[str, str, RunStatus, float]]:
        """``(run_id, subagent, status, seconds since decided)`` of the runs that refuse
        to stop."""
        now = self._clock()
        return [
            (run.run_id, run.subagent.name, run.status, now - since)
            for run, since in list(self._abandoned.items())
        ]

    def _push(self, at: float, run: Run) -> None:
        heap = self._heap
        if len(heap) > _SPREAD * self.tasks + self._slack:
            self._compact()
        heappush(heap, (at, next(self._seq), run))
        if at < self._target:
            self._target = at
            self._wake.set()

    def _compact(self) -> None:
        """Mostly dead entries (runs that settled): keep only the live ones."""
        heap = self._heap
        heap[:] = [entry for entry in heap if entry[2].is_live]
        heapq.heapify(heap)
        # Live entries beyond three per task are pending runs' (the close
        # delivered to them): room for twice as many, or every push would
        # rebuild while they wait.
        untasked = len(heap) - 3 * self.tasks
        self._slack = _SLACK + 2 * max(untasked, 0)

    def _clock(self) -> float:
        return self._now()
