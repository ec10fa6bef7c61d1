"""An executable reference model of the run lifecycle, in plain Python (no Trio).

:class:`LifecycleModel` is a discrete-event simulation of contract §3 to §7 for
subagents whose runners are :class:`ScriptedRunner`\\ s: given the same
operations a host performs on a real runtime under ``MockClock``, it predicts
every answer (:class:`Answer`) and every event of the runners' trace.

How one instant is processed, mirroring how Trio runs a ``MockClock``:

1. child deadlines that fall at this instant cancel their runs' scopes first
   (a sleep that ends exactly at the deadline is cancelled);
2. then every runner due at this instant runs until it blocks, with
   everything that unblocks (a child settling, a slot freeing) in turn;
3. the host acts only after that, when every task is blocked.

Operations (``start``, ``cancel``, ...) are host actions: each acts on a
quiescent state, then lets everything it set off run at the same instant.

Where two runners act at the same instant and the runtime leaves their order
open, the result can depend on it. The model then raises
:class:`IndeterminateError` instead of guessing; the cases are: a runner
ending (which cancels its nested runs) at the instant one of those runs acts,
a nested admission whose ``max_live_runs`` verdict depends on other runs of
the same instant, and a timed wait whose timeout ends at the instant the run
changes status, and retention evicting by count one of several runs that
ended at the same instant.

Retention is modelled (contract §8): runs evicted by count or age answer
``expired`` (or ``unknown`` once forgotten), or, with a store
(``store=True``), from the store.
"""

from __future__ import annotations

import copy
import enum
import json
import math
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final, NoReturn, final

import attrs

from .._config import Config
from .._core import TOMBSTONES_PER_RETAINED_RUN, Parent
from .._errors import (
    DelegationError,
    IndeterminateError,
    RunFailedError,
    UnresolvedDelegationError,
)
from .._results import CancelAck, Output, RunHandle, RunResult
from .._status import RunStatus
from .._subagent import Subagent
from ._scripted import (
    Checkpoint,
    Delegate,
    Hang,
    Raise,
    Return,
    Script,
    ScriptedRunner,
    Shielded,
    Sleep,
    Spend,
    Start,
    WaitStarted,
)
from ._trace import Trace

__all__ = ["Answer", "IndeterminateError", "LifecycleModel", "answer_of"]

_MAX_OWNER_CHARS: Final = 256

_ERROR_CLASS = {
    "unknown_subagent": "UnknownSubagentError",
    "invalid_arguments": "InvalidArgumentsError",
    "limit_exceeded": "LimitExceededError",
    "runtime_closed": "RuntimeClosedError",
}
_OUTCOME_ERROR = {
    RunStatus.FAILED: ("run_failed", "RunFailedError"),
    RunStatus.CANCELLED: ("run_cancelled", "RunCancelledError"),
    RunStatus.TIMED_OUT: ("run_timed_out", "RunTimedOutError"),
}


@final
@attrs.frozen
class Answer:
    """What one call returned or raised, in a form a model can predict.

    Build one from a real outcome with :func:`answer_of`.

    Attributes:
        kind: ``"ok"`` (returned None), ``"parent"``, ``"handle"``,
            ``"result"``, ``"ack"``, ``"error"``, or ``"blocked"`` (the call
            would never return; only the model answers this).
        run: the run's number (see :class:`LifecycleModel`), if any.
        subagent: the subagent named by the answer, if any.
        status: the status in a handle or ack.
        cancel_requested: the ack's flag.
        final_result: a result's ``final_result``.
        error: an error's kind (``DelegationError.kind()``, e.g. ``"run_failed"``).
        cause: for ``run_failed``, the child exception's type name.
        unresolved: for ``unresolved_delegation``, ``(run, status)`` pairs,
            oldest first.
        parent: for ``"parent"``, the parent's number.
    """

    kind: str
    run: int | None = None
    subagent: str | None = None
    status: RunStatus | None = None
    cancel_requested: bool | None = None
    final_result: Any = None
    error: str | None = None
    cause: str | None = None
    unresolved: tuple[tuple[int | None, RunStatus], ...] = ()
    parent: int | None = None


def answer_of(
    outcome: object,
    *,
    runs: Mapping[str, int] | None = None,
    parents: Mapping[Parent, int] | None = None,
) -> Answer:
    """Turn what a real call returned or raised into an :class:`Answer`.

    Args:
        outcome: the returned value, or the raised ``DelegationError``.
        runs: run id → run number, for the runs the test has bound.
        parents: parent → parent number.

    Raises:
        TypeError: *outcome* is not something the runtime returns or raises.
    """
    runs = runs or {}
    parents = parents or {}

    def number(run_id: str | None) -> int | None:
        return None if run_id is None else runs.get(run_id)

    match outcome:
        case None:
            return Answer("ok")
        case Parent():
            return Answer("parent", parent=parents.get(outcome))
        case RunHandle(run_id=run_id, subagent=subagent, status=status):
            return Answer("handle", number(run_id), subagent, status)
        case RunResult(run_id=run_id, subagent=subagent, final_result=final_result):
            return Answer("result", number(run_id), subagent, final_result=final_result)
        case CancelAck(run_id=run_id, cancel_requested=requested, status=status):
            return Answer("ack", number(run_id), status=status, cancel_requested=requested)
        case UnresolvedDelegationError(unresolved=entries):
            pairs = tuple((number(e.run_id), RunStatus(e.status)) for e in entries)
            return Answer("error", error=outcome.kind(), unresolved=pairs)
        case RunFailedError():
            return Answer(
                "error",
                number(outcome.run_id),
                outcome.subagent,
                error=outcome.kind(),
                cause=outcome.error_type,
            )
        case DelegationError():
            return Answer("error", number(outcome.run_id), outcome.subagent, error=outcome.kind())
    raise TypeError(f"not an outcome of a trio_delegate call: {outcome!r}")


class _Mode(enum.Enum):
    """Where a run's runner is."""

    IDLE = "idle"  # pending: no task yet
    NEW = "new"  # launched; its task has not run yet
    STEPS = "steps"  # between steps (transient)
    SLEEP = "sleep"  # in Sleep(s): wakes at wake_at, or by cancellation
    SHIELDED = "shielded"  # in Shielded(s): wakes at wake_at only
    HANG = "hang"  # in Hang(): wakes by cancellation only
    WAIT_CHILD = "wait_child"  # in Delegate: waits for waiting_on
    WAIT_CHILD_SHIELDED = "wait_child_shielded"  # Delegate cancelled: joins the child
    WAIT_STARTED = "wait_started"  # in WaitStarted: waits for waiting_on
    CLEANUP = "cleanup"  # shielded cleanup after a cancellation, until wake_at
    JOIN = "join"  # runner ended; joining nested runs
    DONE = "done"


_CANCELLABLE = frozenset({_Mode.SLEEP, _Mode.HANG, _Mode.WAIT_CHILD, _Mode.WAIT_STARTED})
_TIMED = frozenset({_Mode.SLEEP, _Mode.SHIELDED, _Mode.CLEANUP})

#: (batch, phase): phase 0 = before any runner of the batch acts, 1 = by a runner.
_Stamp = tuple[int, int]
_NEVER: Final[_Stamp] = (math.inf, 0)  # type: ignore[assignment]


@attrs.define(eq=False)
class _Parent:
    index: int | None  # top-level parents only
    owner: str
    children: dict[str, Subagent]
    depth: int
    outer: _Run | None  # the run whose ctx.parent this is
    closed: bool = False
    # What its runs spent (contract §20): requests, input tokens.
    spent: tuple[int, int] = (0, 0)
    runs: list[_Run] = attrs.Factory(list)
    pending: deque[_Run] = attrs.Factory(deque)
    running: int = 0


@attrs.define(eq=False)
class _Run:
    key: str
    number: int | None
    parent: _Parent
    subagent: Subagent
    task: str
    replaces: _Run | None
    depth: int
    timeout: float | None
    status: RunStatus = RunStatus.PENDING
    deadline: float = math.inf
    cancel_requested_at: float | None = None
    scope_cancel: _Stamp | None = None
    ended_at: float | None = None
    result: Any = None
    cause: str | None = None
    observed: bool = False
    replacements: list[_Run] = attrs.Factory(list)
    # Retention: evicted from memory; ambiguous when which of several runs
    # that ended together was evicted depends on Trio's order.
    evicted: bool = False
    ambiguous: bool = False
    # contract §17: told by a wait (or run in the foreground, which tells itself).
    told: bool = False
    foreground: bool = False
    # The runner's progress.
    mode: _Mode = _Mode.IDLE
    script: Script | None = None
    pc: int = 0
    wake_at: float | None = None
    outcome: tuple[str, Any] | None = None
    nested: _Parent | None = None
    waiting_on: _Run | None = None
    started: list[_Run] = attrs.Factory(list)
    wait_index: int = 0
    # Bookkeeping for IndeterminateError.
    active_batch: int = -1
    launched_batch: int = -1
    # The last batch in which the runner passed a cancellation check unharmed
    # (a checkpoint, or a sleep that ended by itself).
    checked_batch: int = -1
    launched_by: _Run | None = None
    changed_at: float = -math.inf
    woken_by: _Run | None = None
    # Schedule points the runner passed (a nested run it admits cannot act
    # before the runner's next one).
    yields: int = 0
    admitted_by: _Run | None = None
    admit_yield: int = -1
    launched_on_admission: bool = False

    @property
    def terminal(self) -> bool:
        return self.ended_at is not None


@final
class LifecycleModel:
    """A reference model of one runtime with scripted subagents.

    Args:
        subagents: the same ``Subagent`` objects given to ``open_runtime``;
            every runner must be a :class:`ScriptedRunner` (its scripts are
            read when a run starts, so assign them before).
        config: the runtime's config; ``Config()`` when omitted.
        now: the Trio clock time at which the runtime was opened.
        store: whether the runtime has a durable store (evicted runs are
            then answered from it).

    Runs are numbered ``0, 1, 2, …`` in the order top-level parents admitted
    them (nested runs have no number); parents likewise, in the order they
    were opened. Operations take and answer these numbers; bind each real run
    id to the number the model answered to compare (see :func:`answer_of`).

    Raises:
        TypeError: a runner is not a ``ScriptedRunner``.
    """

    def __init__(
        self,
        subagents: Iterable[Subagent],
        config: Config | None = None,
        *,
        now: float = 0.0,
        store: bool = False,
    ) -> None:
        self._config = config if config is not None else Config()
        # With a durable store, runs that retention evicted are answered from it.
        self._store = store
        self._subagents: dict[str, Subagent] = {}
        for subagent in subagents:
            if not isinstance(subagent.runner, ScriptedRunner):
                raise TypeError(
                    f"subagent {subagent.name!r} has runner {subagent.runner!r}; the model "
                    "can only predict ScriptedRunner runners"
                )
            self._subagents[subagent.name] = subagent
        self._now = float(now)
        self._closed = False
        self._closed_at: float | None = None
        self._closed_stamp: _Stamp | None = None
        self._parents: list[_Parent] = []
        self._open_owners: dict[str, _Parent] = {}
        self._top: list[_Run] = []
        self._all: list[_Run] = []
        self._running: dict[str, _Run] = {}
        self._live = 0
        # Retention (contract §8): terminal runs in the order they ended, and
        # the owners of evicted ids, oldest first.
        self._kept: deque[_Run] = deque()
        self._tombstones: OrderedDict[str, str] = OrderedDict()
        # With a store: the evicted runs ``status`` and ``cancel`` still know
        # (as many as there are tombstones), most recently evicted or read last.
        self._indexed: OrderedDict[str, None] = OrderedDict()
        self._trace = Trace()
        # What every run spent (contract §20): requests, input tokens.
        self._spent = (0, 0)
        self._queue: deque[tuple[_Run, str]] = deque()
        self._queued: dict[str, int] = {}
        self._batch = 0
        # What changed the live count in the current batch, in order, and the
        # nested admissions that read it: (position, admitting run, live, accepted).
        self._batch_log: list[tuple[str, _Run]] = []
        self._batch_decisions: list[tuple[int, _Run, int, bool]] = []

    # -- reading --------------------------------------------------------------

    @property
    def now(self) -> float:
        """The model's Trio clock time."""
        return self._now

    def spent(self, parent: int | None = None) -> tuple[int, int]:
        """``(requests, input_tokens)`` spent by top-level *parent*'s runs, nested
        runs included (``Parent.usage()``), or by every run (``Runtime.usage``)
        when *parent* is ``None`` (contract §20)."""
        if parent is None:
            return self._spent
        return self._parents[parent].spent

    @property
    def live_runs(self) -> int:
        """Pending plus running runs in the whole runtime (``Runtime.live_runs``)."""
        return self._live

    @property
    def closed(self) -> bool:
        """Whether the runtime was closed."""
        return self._closed

    @property
    def trace(self) -> Trace:
        """The runners' trace as the model predicts it (compare ``lines()``)."""
        return self._trace

    @property
    def runs(self) -> int:
        """How many top-level runs were admitted (the next run's number)."""
        return len(self._top)

    def run_parent(self, run: int) -> int | None:
        """The number of the parent that admitted run *run*."""
        return self._top[run].parent.index

    def run_task(self, run: int) -> str:
        """The task of run *run*."""
        return self._top[run].task

    def run_subagent(self, run: int) -> str:
        """The subagent of run *run*."""
        return self._top[run].subagent.name

    def ended_at(self, run: int) -> float | None:
        """When run *run* ended, if it did."""
        return self._top[run].ended_at

    def unobserved(self, parent: int) -> list[int]:
        """``parent.unobserved()`` as run numbers, in no particular order among runs
        that ended at one instant (contract §17)."""
        return [
            run.number
            for run in self._parents[parent].runs
            if run.number is not None and run.terminal and not run.told and not run.foreground
        ]

    def expire(self) -> None:
        """Apply time-based retention now, as every lookup of the runtime does."""
        self._expire(self._now)

    def peek_status(self, run: int) -> RunStatus:
        """Run *run*'s status, without the checks a real ``status`` call makes."""
        return self._top[run].status

    def running(self, parent: int) -> int:
        """How many runs of *parent* hold one of its ``max_concurrent_runs`` slots."""
        return self._parents[parent].running

    def is_open(self, parent: int) -> bool:
        """Whether parent *parent* has not been closed."""
        return not self._parents[parent].closed

    def fork(self) -> LifecycleModel:
        """An independent copy, to try an operation without committing to it."""
        memo: dict[int, Any] = {id(s): s for s in self._subagents.values()}
        memo[id(self._config)] = self._config
        return copy.deepcopy(self, memo)

    # -- parents --------------------------------------------------------------

    def open_parent(self, owner: str = "root", *, subagents: Iterable[str] | None = None) -> Answer:
        """``rt.open_parent(owner, subagents=...)`` entered; answers ``"parent"``."""
        if self._closed:
            return _error("runtime_closed")
        if (
            not isinstance(owner, str)
            or not owner.strip()
            or len(owner) > _MAX_OWNER_CHARS
            or not owner.isprintable()
            or "/" in owner
        ):
            return _error("invalid_arguments")
        if subagents is None:
            children = dict(self._subagents)
        else:
            if isinstance(subagents, str):
                return _error("invalid_arguments")
            children = {}
            for name in subagents:
                found = self._subagents.get(name) if isinstance(name, str) else None
                if found is None:
                    return _error("unknown_subagent", subagent=str(name))
                if name in children:
                    return _error("invalid_arguments")
                children[name] = found
        if owner in self._open_owners:
            return _error("invalid_arguments")
        parent = _Parent(len(self._parents), owner, children, 0, None)
        self._parents.append(parent)
        self._open_owners[owner] = parent
        return Answer("parent", parent=parent.index)

    def close_parent(self, parent: int) -> Answer:
        """Leave parent *parent*'s ``async with`` normally (a claim of completion).

        Returns:
            ``"ok"``, or the ``unresolved_delegation`` error it raises.

        Raises:
            ValueError: the parent was closed already.
        """
        p = self._parents[parent]
        if p.closed:
            raise ValueError(f"parent {parent} was closed already")
        self._begin_batch()
        p.closed = True
        if self._open_owners.get(p.owner) is p:
            del self._open_owners[p.owner]
        self._cancel_runs(p, (self._batch, 0))
        self._drain()
        self._end_batch()
        if not self._run_until(lambda: all(run.terminal for run in p.runs)):
            raise AssertionError("model error: a cancelled run never ended")  # pragma: no cover
        return self._verdict(p)

    def close_runtime(self) -> Answer:
        """Leave the runtime's ``async with`` normally; answers ``"ok"``.

        Raises:
            ValueError: the runtime was closed already.
        """
        if self._closed:
            raise ValueError("the runtime was closed already")
        self._begin_batch()
        self._closed = True
        self._closed_at = self._now
        stamp = (self._batch, 0)
        self._closed_stamp = stamp
        for p in self._parents:
            if p.depth == 0 and not p.closed:
                self._cancel_pending(p, stamp)
        for run in list(self._running.values()):
            self._wake_cancelled(run)
        self._drain()
        self._end_batch()
        if not self._run_until(lambda: self._live == 0):
            raise AssertionError("model error: a cancelled run never ended")  # pragma: no cover
        return Answer("ok")

    def check_resolved(self, parent: int) -> Answer:
        """``parent.check_resolved()``: ``"ok"`` or the ``unresolved_delegation`` error."""
        p = self._parents[parent]
        refused = self._refuse_closed(p)
        if refused is not None:
            return refused
        return self._verdict(p)

    # -- runs -----------------------------------------------------------------

    def start(
        self, parent: int, subagent: str, task: str, *, replaces: int | None = None
    ) -> Answer:
        """``parent.start(subagent, task, replaces=...)``: a handle or an error."""
        p = self._parents[parent]
        refused = self._refuse_closed(p)
        if refused is not None:
            return refused
        admitted = self._admit(p, subagent, task, replaces)
        if isinstance(admitted, Answer):
            return admitted
        answer = self._handle(admitted)
        self._begin_batch()
        self._drain()
        self._end_batch()
        return answer

    def delegate(
        self, parent: int, subagent: str, task: str, *, replaces: int | None = None
    ) -> Answer:
        """``parent.delegate(...)``: the result or error, after the run ended.

        Returns ``"blocked"`` (and leaves the model with its time moved past
        every event) when the run would never end; try it on a :meth:`fork`.
        """
        p = self._parents[parent]
        refused = self._refuse_closed(p)
        if refused is not None:
            return refused
        admitted = self._admit(p, subagent, task, replaces)
        if isinstance(admitted, Answer):
            return admitted
        run = admitted
        run.foreground = True
        self._begin_batch()
        self._drain()
        self._end_batch()
        if not self._run_until(lambda: run.terminal):
            return Answer("blocked", run.number)
        return self._outcome(run)

    def continue_run(
        self, parent: int, run: int | None, message: str, *, background: bool = False
    ) -> Answer:
        """``parent.continue_run(run_id, message, background=...)``.

        The new run is of the earlier run's subagent; like :meth:`start` with
        *background*, else like :meth:`delegate` (``"blocked"`` included).
        """
        p = self._parents[parent]
        refused = self._refuse_closed(p)
        if refused is not None:
            return refused
        found = self._lookup(p, run, reads_store=True)
        if isinstance(found, Answer):
            return found
        if not found.terminal:
            return _error("invalid_arguments")
        admitted = self._admit(p, found.subagent.name, message, None)
        if isinstance(admitted, Answer):
            return admitted
        admitted.foreground = not background
        handle = self._handle(admitted)  # an admission ack: the status at admission
        self._begin_batch()
        self._drain()
        self._end_batch()
        if background:
            return handle
        new = admitted
        if not self._run_until(lambda: new.terminal):
            return Answer("blocked", new.number)
        return self._outcome(new)

    def is_ambiguous(self, run: int) -> bool:
        """Whether run *run*'s eviction depended on Trio's order (answers about it are open)."""
        return self._top[run].ambiguous

    def status(self, parent: int, run: int | None) -> Answer:
        """``parent.status(run_id)``; *run* ``None`` stands for an id never issued."""
        p = self._parents[parent]
        refused = self._refuse_closed(p)
        if refused is not None:
            return refused
        found = self._lookup(p, run)
        if isinstance(found, Answer):
            return found
        return self._handle(found)

    def wait(self, parent: int, run: int | None, *, timeout: float | None = None) -> Answer:
        """``parent.wait(run_id, timeout=...)``.

        Returns ``"blocked"`` when an unbounded wait would never return.

        Raises:
            IndeterminateError: the timeout ends at the instant the run changes
                status (before its deadline).
        """
        p = self._parents[parent]
        refused = self._refuse_closed(p)
        if refused is not None:
            return refused
        if timeout is not None and (
            isinstance(timeout, bool) or not math.isfinite(timeout) or timeout < 0
        ):
            return _error("invalid_arguments")
        found = self._lookup(p, run, reads_store=True)
        if isinstance(found, Answer):
            return found
        target = found
        if not target.terminal:
            if timeout is None:
                if not self._run_until(lambda: target.terminal):
                    return Answer("blocked", target.number)
            else:
                until = self._now + timeout
                if timeout > 0 and not self._run_until(lambda: target.terminal, until=until):
                    self._advance_to(until)
                if timeout > 0 and target.changed_at == until < target.deadline:
                    raise IndeterminateError(
                        f"the wait's timeout ends at {until:g}, the instant run "
                        f"{target.task!r} became {target.status.value}"
                    )
                if not target.terminal and self._now >= target.deadline:
                    self._run_until(lambda: target.terminal)
        if target.terminal:
            return self._outcome(target)
        return self._handle(target)

    def cancel(self, parent: int, run: int | None) -> Answer:
        """``parent.cancel(run_id)``: the ack (status right after the request)."""
        p = self._parents[parent]
        refused = self._refuse_closed(p)
        if refused is not None:
            return refused
        found = self._lookup(p, run)
        if isinstance(found, Answer):
            return found
        if found.evicted:  # answered from the store: it ended
            return Answer("ack", found.number, status=found.status, cancel_requested=False)
        self._begin_batch()
        requested = self._request_cancel(found, (self._batch, 0))
        answer = Answer("ack", found.number, status=found.status, cancel_requested=requested)
        self._drain()
        self._end_batch()
        return answer

    def advance(self, seconds: float) -> None:
        """Move time forward by *seconds*, processing every instant on the way."""
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"seconds must be a finite number >= 0, got {seconds!r}")
        self._advance_to(self._now + seconds)

    def unresolved(self, parent: int) -> tuple[tuple[int | None, RunStatus], ...]:
        """The unresolved runs of *parent* as ``(run, status)``, oldest first."""
        return tuple((run.number, run.status) for run in self._unresolved(self._parents[parent]))

    # -- time -----------------------------------------------------------------

    def _next_time(self) -> float | None:
        best = math.inf
        for run in self._running.values():
            if run.scope_cancel is None and run.deadline < best:
                best = run.deadline
            if run.wake_at is not None and run.mode in _TIMED and run.wake_at < best:
                best = run.wake_at
        return best if best != math.inf else None

    def _advance_to(self, target: float) -> None:
        while True:
            when = self._next_time()
            if when is None or when > target:
                break
            self._instant(when)
        self._now = max(self._now, target)

    def _run_until(self, done: Callable[[], bool], *, until: float = math.inf) -> bool:
        while not done():
            when = self._next_time()
            if when is None or when > until:
                return False
            self._instant(when)
        return True

    def _instant(self, when: float) -> None:
        self._now = when
        self._begin_batch()
        stamp = (self._batch, 0)
        for run in list(self._running.values()):
            if run.scope_cancel is None and run.deadline <= when:
                self._cancel_scope(run, stamp)
        for run in list(self._running.values()):
            if run.mode in _TIMED and run.wake_at is not None and run.wake_at <= when:
                self._enqueue(run, "wake")
        self._drain()
        self._end_batch()

    # -- batches: what ran at one instant, for IndeterminateError --------------

    def _begin_batch(self) -> None:
        self._batch += 1
        self._batch_log = []
        self._batch_decisions = []

    def _end_batch(self) -> None:
        """Check that no nested admission's verdict depended on the order of the batch.

        Events of other runs at the same instant could have come before or after
        the admission; those of the admitting run's own chain could not.
        """
        limit = self._config.max_live_runs
        for position, runner, seen, accepted in self._batch_decisions:
            chain = set(map(id, self._causes(runner)))
            up = down = 0  # how far other orders could move the count it read
            for index, (kind, member) in enumerate(self._batch_log):
                if id(member) in chain or (index >= position and member.admitted_by is runner):
                    continue
                # An earlier settling could come after, a later admission before: up.
                if (kind == "settle") == (index < position):
                    up += 1
                else:
                    down += 1
            robust = seen + up < limit if accepted else seen - down >= limit
            if not robust:
                raise IndeterminateError(
                    "a nested admission met max_live_runs at an instant when other runs "
                    "started or ended too: its verdict depends on their order"
                )

    def _causes(self, run: _Run) -> list[_Run]:
        """*run*, its ancestors, and the runs whose settling launched any of them."""
        found: list[_Run] = []
        todo = [run]
        while todo:
            member = todo.pop()
            if any(member is seen for seen in found):
                continue
            found.append(member)
            todo.extend(self._ancestors(member))
            if member.launched_by is not None:
                todo.append(member.launched_by)
        return found

    def _enqueue(self, run: _Run, reason: str) -> None:
        self._queue.append((run, reason))
        self._queued[run.key] = self._queued.get(run.key, 0) + 1

    def _drain(self) -> None:
        while self._queue:
            run, reason = self._queue.popleft()
            self._queued[run.key] -= 1
            self._process(run, reason)

    # -- admission ------------------------------------------------------------

    def _admit(
        self, p: _Parent, name: str, task: str, replaces: int | None, *, by: _Run | None = None
    ) -> _Run | Answer:
        config = self._config
        subagent = p.children.get(name) if isinstance(name, str) else None
        if subagent is None:
            return _error("unknown_subagent", subagent=str(name))
        if not isinstance(task, str) or not task.strip() or len(task) > config.max_task_chars:
            return _error("invalid_arguments")
        replaced: _Run | None = None
        if replaces is not None:
            if not 0 <= replaces < len(self._top) or self._top[replaces].parent is not p:
                return _error("invalid_arguments")
            replaced = self._top[replaces]
            if replaced.ambiguous:
                raise IndeterminateError(
                    f"whether run {replaced.task!r} was evicted depends on Trio's order"
                )
            if replaced.evicted and self._resolved(replaced):
                return _error("invalid_arguments")  # forgotten: nothing left to replace
            if not replaced.terminal:
                return _error("invalid_arguments")
            if replaced.status is RunStatus.COMPLETED and not replaced.evicted:
                # A completed run needs no replacement, unless it expired
                # before anyone observed it: then a replacement is the way
                # left to resolve it (contract §7).
                return _error("invalid_arguments")
        depth = p.depth + 1
        if depth > config.max_depth:
            return _error("limit_exceeded", subagent=name)
        accepted = self._live < config.max_live_runs
        if by is not None:
            self._batch_decisions.append((len(self._batch_log), by, self._live, accepted))
        if not accepted:
            return _error("limit_exceeded", subagent=name)
        run = _Run(
            f"m{len(self._all)}",
            len(self._top) if p.depth == 0 else None,
            p,
            subagent,
            task,
            replaced,
            depth,
            subagent.resolve_timeout(config.subagent_timeout_seconds),
        )
        self._all.append(run)
        if by is not None:
            self._batch_log.append(("admit", run))
            run.admitted_by = by
        if p.depth == 0:
            self._top.append(run)
        if replaced is not None:
            replaced.replacements.append(run)
        p.runs.append(run)
        self._live += 1
        if p.running < config.max_concurrent_runs and not p.pending:
            self._launch(run)
            run.launched_on_admission = True
        else:
            p.pending.append(run)
        return run

    def _launch(self, run: _Run) -> None:
        p = run.parent
        p.running += 1
        run.status = RunStatus.RUNNING
        run.active_batch = run.launched_batch = self._batch
        run.changed_at = self._now
        if run.timeout is not None:
            run.deadline = self._now + run.timeout
        run.mode = _Mode.NEW
        if run.subagent.children:
            children = {name: self._subagents[name] for name in run.subagent.children}
            run.nested = _Parent(None, f"{p.owner}/{run.key}", children, run.depth, run)
        self._running[run.key] = run
        self._enqueue(run, "start")

    def _launch_pending(self, p: _Parent, cause: _Run) -> None:
        limit = self._config.max_concurrent_runs
        while p.pending and p.running < limit and not p.closed and not self._closed:
            run = p.pending.popleft()
            if not run.terminal:
                self._launch(run)
                run.launched_by = cause

    # -- cancellation ---------------------------------------------------------

    def _ancestors(self, run: _Run) -> Iterator[_Run]:
        outer = run.parent.outer
        while outer is not None:
            yield outer
            outer = outer.parent.outer

    def _stamp_above(self, run: _Run) -> _Stamp:
        """When a scope above *run*'s own was first cancelled (or never)."""
        stamps = [a.scope_cancel for a in self._ancestors(run) if a.scope_cancel is not None]
        if self._closed_stamp is not None:
            stamps.append(self._closed_stamp)
        return min(stamps, default=_NEVER)

    def _stamp_at_or_above(self, run: _Run) -> _Stamp:
        own = run.scope_cancel if run.scope_cancel is not None else _NEVER
        return min(own, self._stamp_above(run))

    def _cancelled(self, run: _Run) -> bool:
        return self._stamp_at_or_above(run) != _NEVER

    def _passes(self, run: _Run) -> bool:
        """A checkpoint: False when a cancellation is due (the caller raises it)."""
        if self._cancelled(run):
            return False
        run.checked_batch = self._batch
        return True

    def _subtree(self, run: _Run) -> Iterator[_Run]:
        yield run
        if run.nested is not None:
            for child in run.nested.runs:
                yield from self._subtree(child)

    def _wake_cancelled(self, run: _Run) -> None:
        """Deliver a new cancellation to *run* and its nested runs where they block."""
        for member in self._subtree(run):
            if member.mode in _CANCELLABLE and self._cancelled(member):
                self._enqueue(member, "cancel")

    def _cancel_scope(self, run: _Run, stamp: _Stamp) -> None:
        if run.scope_cancel is None:
            run.scope_cancel = stamp
        self._wake_cancelled(run)

    def _request_cancel(self, run: _Run, stamp: _Stamp) -> bool:
        """``Run.request_cancel``: whether the run was live."""
        if run.terminal:
            return False
        if run.cancel_requested_at is None:
            run.cancel_requested_at = self._now
        if run.status is RunStatus.PENDING:
            self._settle(run, RunStatus.CANCELLED)
        else:
            self._cancel_scope(run, stamp)
        return True

    def _cancel_pending(self, p: _Parent, stamp: _Stamp) -> None:
        while p.pending:
            self._request_cancel(p.pending.popleft(), stamp)

    def _cancel_runs(self, p: _Parent, stamp: _Stamp) -> None:
        self._cancel_pending(p, stamp)
        for run in list(p.runs):
            if not run.terminal:
                self._request_cancel(run, stamp)

    # -- the runner -----------------------------------------------------------

    def _record(self, run: _Run, kind: str, detail: str = "", task: str | None = None) -> None:
        self._trace.record(run.key, kind, detail, task=task, time=self._now)

    def _process(self, run: _Run, reason: str) -> None:
        mode = run.mode
        run.woken_by = None
        if reason == "start":
            if mode is not _Mode.NEW:
                return
            run.active_batch = self._batch
            self._record(run, "start", run.subagent.name, task=run.task)
            runner = run.subagent.runner
            assert isinstance(runner, ScriptedRunner)
            try:
                run.script = runner.script_for(run.task)
            except LookupError as exc:
                self._runner_end(run, ("raised", type(exc).__name__))
                return
            run.mode = _Mode.STEPS
            self._play(run)
        elif reason == "wake":
            if mode not in _TIMED or run.wake_at is None or run.wake_at > self._now:
                return
            run.active_batch = self._batch
            run.wake_at = None
            if mode is _Mode.CLEANUP:
                self._runner_end(run, ("cancelled", None))
            elif mode is _Mode.SLEEP and not self._passes(run):
                self._raise_cancel(run)
            else:
                run.pc += 1
                run.mode = _Mode.STEPS
                self._play(run)
        elif reason == "cancel":
            if mode not in _CANCELLABLE or not self._cancelled(run):
                return
            run.active_batch = self._batch
            if mode is _Mode.WAIT_CHILD:
                child = run.waiting_on
                assert child is not None
                self._request_cancel(child, (self._batch, 1))
                if child.terminal:
                    run.waiting_on = None
                    self._raise_cancel(run)
                else:
                    run.mode = _Mode.WAIT_CHILD_SHIELDED
                return
            run.wake_at = None
            run.waiting_on = None
            self._raise_cancel(run)
        else:  # "child": something this run waits for has ended
            child = run.waiting_on
            if mode is _Mode.JOIN:
                if not self._running_children(run):
                    run.active_batch = self._batch
                    self._finish(run)
                return
            if child is None or not child.terminal:
                return
            run.active_batch = self._batch
            run.woken_by = child
            run.waiting_on = None
            if mode is _Mode.WAIT_CHILD:
                if child.status is RunStatus.COMPLETED:
                    child.observed = True
                    run.pc += 1
                    run.mode = _Mode.STEPS
                    self._play(run)
                else:
                    self._runner_end(run, ("raised", _OUTCOME_ERROR[child.status][1]))
            elif mode is _Mode.WAIT_CHILD_SHIELDED:
                self._raise_cancel(run)
            elif mode is _Mode.WAIT_STARTED:
                if child.status is RunStatus.COMPLETED:
                    child.observed = True
                    run.wait_index += 1
                    self._wait_started(run)
                else:
                    self._runner_end(run, ("raised", _OUTCOME_ERROR[child.status][1]))

    def _play(self, run: _Run) -> None:
        """Run *run*'s steps from ``pc`` at this instant until it blocks or ends."""
        script = run.script
        assert script is not None
        steps = script.steps
        while True:
            if run.pc >= len(steps):
                self._runner_end(run, ("returned", None))
                return
            step = steps[run.pc]
            self._record(run, "step", f"{run.pc} {step.describe()}")
            match step:
                case Sleep(seconds=seconds):
                    if self._cancelled(run):
                        self._raise_cancel(run)
                        return
                    if seconds > 0:
                        run.mode = _Mode.SLEEP
                        run.wake_at = self._now + seconds
                        return
                    self._passes(run)
                    run.yields += 1
                case Checkpoint():
                    if not self._passes(run):
                        self._raise_cancel(run)
                        return
                    run.yields += 1
                case Shielded(seconds=seconds):
                    if seconds > 0:
                        run.mode = _Mode.SHIELDED
                        run.wake_at = self._now + seconds
                        return
                    run.yields += 1
                case Return(value=value):
                    self._runner_end(run, ("returned", value))
                    return
                case Raise(error=error):
                    if not issubclass(error, Exception):
                        raise TypeError(
                            f"the model covers runners raising Exception subclasses, not "
                            f"{error.__name__}"
                        )
                    self._runner_end(run, ("raised", error.__name__))
                    return
                case Hang():
                    if self._cancelled(run):
                        self._raise_cancel(run)
                    else:
                        run.mode = _Mode.HANG
                    return
                case Start(subagent=name, task=task) | Delegate(subagent=name, task=task):
                    nested = run.nested
                    if nested is None:
                        self._runner_end(run, ("raised", "RuntimeError"))
                        return
                    if not self._passes(run):
                        self._raise_cancel(run)
                        return
                    if isinstance(step, Start):
                        run.yields += 1  # start() checkpoints before admitting
                    admitted = self._admit(nested, name, task, None, by=run)
                    if isinstance(admitted, Answer):
                        assert admitted.error is not None
                        self._runner_end(run, ("raised", _ERROR_CLASS[admitted.error]))
                        return
                    admitted.admit_yield = run.yields
                    if isinstance(step, Start):
                        run.started.append(admitted)
                    else:
                        run.mode = _Mode.WAIT_CHILD
                        run.waiting_on = admitted
                        return
                case Spend(tokens=tokens):
                    self._spend(run, tokens)
                case WaitStarted():
                    if run.nested is None:
                        self._runner_end(run, ("raised", "RuntimeError"))
                        return
                    run.wait_index = 0
                    self._wait_started(run)
                    return
            run.pc += 1

    def _spend(self, run: _Run, tokens: int) -> None:
        """*run* reports one request of *tokens*: it counts for its parent, each run
        and parent above it, and the runtime; dropped once the run settled."""
        if run.terminal:
            return
        parent: _Parent | None = run.parent
        while parent is not None:
            requests, spent = parent.spent
            parent.spent = (requests + 1, spent + tokens)
            parent = parent.outer.parent if parent.outer is not None else None
        requests, spent = self._spent
        self._spent = (requests + 1, spent + tokens)

    def _wait_started(self, run: _Run) -> None:
        """``parent.wait`` on each started run in turn (the WaitStarted step)."""
        while run.wait_index < len(run.started):
            if self._closed:
                self._runner_end(run, ("raised", "RuntimeClosedError"))
                return
            child = run.started[run.wait_index]
            # Each wait looks the run up, applying retention first.
            self._expire(self._now)
            if child.ambiguous:
                raise IndeterminateError(
                    f"whether nested run {child.task!r} was evicted depends on Trio's order"
                )
            if child.evicted and not self._store:
                remembered = self._tombstones.get(child.key) == child.parent.owner
                error = "ExpiredRunError" if remembered else "UnknownRunError"
                self._runner_end(run, ("raised", error))
                return
            if self._cancelled(run):
                # A wait on a settled run is a checkpoint; on a live one it blocks:
                # either way a pending cancellation is raised here.
                self._raise_cancel(run)
                return
            if not child.terminal:
                run.mode = _Mode.WAIT_STARTED
                run.waiting_on = child
                return
            run.yields += 1  # the wait on a settled run is a checkpoint
            run.checked_batch = self._batch
            if child.status is not RunStatus.COMPLETED:
                self._runner_end(run, ("raised", _OUTCOME_ERROR[child.status][1]))
                return
            child.observed = True
            run.wait_index += 1
        run.mode = _Mode.STEPS
        run.pc += 1
        self._play(run)

    def _raise_cancel(self, run: _Run) -> None:
        """The runner sees ``Cancelled``: shielded cleanup first, if scripted."""
        self._record(run, "cancelled", f"at step {run.pc}")
        script = run.script
        if script is not None and script.cleanup:
            self._record(run, "cleanup", f"{script.cleanup:g}")
            run.mode = _Mode.CLEANUP
            run.wake_at = self._now + script.cleanup
            return
        self._runner_end(run, ("cancelled", None))

    def _runner_end(self, run: _Run, outcome: tuple[str, Any]) -> None:
        kind, value = outcome
        self._record(run, "finally", f"raised {value}" if kind == "raised" else kind)
        run.outcome = outcome
        run.wake_at = None
        run.waiting_on = None
        nested = run.nested
        if nested is not None:
            self._check_close_race(run, nested)
            # The nested parent closes: pending runs cancelled, running ones told to stop.
            nested.closed = True
            self._cancel_runs(nested, (self._batch, 1))
            if self._running_children(run):
                run.mode = _Mode.JOIN
                return
        self._finish(run)

    def _running_children(self, run: _Run) -> bool:
        nested = run.nested
        return nested is not None and any(not child.terminal for child in nested.runs)

    def _check_close_race(self, run: _Run, nested: _Parent) -> None:
        """Refuse to guess when closing *nested* now races with its runs' own activity.

        The runner's end cancels its nested runs at this instant. Any of them
        that acts at the same instant could, in Trio, act before or after that:
        the answer is open when its activity passes a cancellation check (it
        would see the cancellation in the other order), or frees a slot for a
        pending run (which the close would cancel instead).
        """
        batch = self._batch
        spared = run.woken_by  # settled before this runner woke: surely first

        def quiet(child: _Run) -> bool:
            # Admitted by this runner with no schedule point since: its task
            # cannot have run yet, so it surely sees the close.
            return (
                child.admitted_by is run
                and child.launched_on_admission
                and child.launched_batch == batch
                and child.admit_yield == run.yields
                and child.mode is _Mode.NEW
            )

        def refuse(child: _Run, why: str) -> NoReturn:
            raise IndeterminateError(
                f"run {run.task!r} ends at {self._now:g}, the instant its nested run "
                f"{child.task!r} {why}: which comes first is open"
            )

        closed_at = self._closed_at
        for child in nested.runs:
            if child is spared or quiet(child) or child.status is RunStatus.PENDING:
                continue
            if child.launched_batch == batch and child.launched_by not in (None, spared):
                refuse(child, "was started as another one ended")
            acted = child.active_batch == batch or self._queued.get(child.key, 0) > 0
            if (
                acted
                and closed_at is not None
                and child.cancel_requested_at is None
                and closed_at < child.deadline <= self._now
            ):
                refuse(child, "may count its cancellation from the runtime closing")
            if self._stamp_at_or_above(child) < (batch, 1):
                continue  # cancelled already: the close changes nothing for it
            for member in self._subtree(child):
                if member.checked_batch == batch:
                    refuse(member, "passed a checkpoint")
                if member.terminal or not self._queued.get(member.key, 0):
                    continue
                checks, settles = self._dry_run(member)
                if checks:
                    refuse(member, "is about to pass a checkpoint")
                if settles and member is child and nested.pending:
                    refuse(member, "is about to end and free a slot")

    def _dry_run(self, run: _Run) -> tuple[bool, bool]:
        """What *run* would do next at this instant: (passes a checkpoint, ends)."""
        probe = self.fork()
        twin = probe._all[int(run.key[1:])]
        mine = [item for item in probe._queue if item[0] is twin]
        probe._queue = deque(item for item in probe._queue if item[0] is not twin)
        try:
            for member, reason in mine:
                probe._process(member, reason)
        except IndeterminateError:
            return True, True
        return twin.checked_batch == probe._batch, twin.terminal

    def _finish(self, run: _Run) -> None:
        """The run's task ends: settle it from the runner's outcome (contract §3)."""
        assert run.outcome is not None
        kind, value = run.outcome
        if kind == "raised":
            self._settle(run, RunStatus.FAILED, cause=value)
        elif kind == "cancelled":
            self._settle_interrupted(run)
        elif run.nested is not None and self._config.fail_closed and self._unresolved(run.nested):
            self._settle(run, RunStatus.FAILED, cause="UnresolvedDelegationError")
        else:
            self._settle_returned(run, value)

    def _settle_returned(self, run: _Run, value: Any) -> None:
        """A returned value, held as canonical JSON (contract §5): checked, then decoded."""
        transcript = None
        if isinstance(value, Output):
            value, transcript = value.final_result, value.transcript
        limit = self._config.max_nesting_depth
        try:
            if transcript is not None:
                _canonical(list(transcript), limit)
            encoded = _canonical(value, limit)
        except (TypeError, ValueError) as exc:
            self._settle(run, RunStatus.FAILED, cause=type(exc).__name__)
            return
        if len(encoded.encode()) > self._config.max_result_bytes:
            self._settle(run, RunStatus.FAILED, cause="LimitExceededError")
            return
        self._settle(run, RunStatus.COMPLETED, result=json.loads(encoded))

    def _settle_interrupted(self, run: _Run) -> None:
        requested = run.cancel_requested_at
        if requested is None:
            requested = self._closed_at if self._closed_at is not None else self._now
        status = RunStatus.CANCELLED if requested < run.deadline else RunStatus.TIMED_OUT
        self._settle(run, status)

    def _settle(
        self, run: _Run, status: RunStatus, *, result: Any = None, cause: str | None = None
    ) -> None:
        was_running = run.status is RunStatus.RUNNING
        run.status = status
        run.ended_at = self._now
        run.result = result
        run.cause = cause
        run.mode = _Mode.DONE
        run.wake_at = None
        run.active_batch = self._batch
        run.changed_at = self._now
        self._live -= 1
        self._batch_log.append(("settle", run))
        self._running.pop(run.key, None)
        p = run.parent
        if run in p.pending:
            p.pending.remove(run)
        outer = p.outer
        if outer is not None and (outer.waiting_on is run or outer.mode is _Mode.JOIN):
            self._enqueue(outer, "child")
        if was_running:
            p.running -= 1
            self._launch_pending(p, run)
        self._retain(run)

    # -- retention (contract §8) ------------------------------------------------

    def _retain(self, run: _Run) -> None:
        """``Retention.add``: keep *run*; evict the oldest past the count, then by age."""
        kept = self._kept
        kept.append(run)
        if len(kept) > self._config.retention_max_runs:
            oldest = kept[0]
            # Which of several runs that ended at one instant ended first can
            # be Trio's choice: the one evicted is open.
            twins = [other for other in kept if other.ended_at == oldest.ended_at]
            if len(twins) > 1:
                for other in twins:
                    other.ambiguous = True
            self._evict_oldest()
        self._expire(run.ended_at if run.ended_at is not None else self._now)

    def _expire(self, now: float) -> None:
        """``Retention.expire``: evict every run that ended more than retention_seconds ago."""
        kept = self._kept
        seconds = self._config.retention_seconds
        while kept and kept[0].ended_at is not None and now > kept[0].ended_at + seconds:
            self._evict_oldest()

    def _evict_oldest(self) -> None:
        run = self._kept.popleft()
        run.evicted = True
        tombstones = self._tombstones
        tombstones[run.key] = run.parent.owner
        if len(tombstones) > TOMBSTONES_PER_RETAINED_RUN * self._config.retention_max_runs:
            tombstones.popitem(last=False)
        if self._store:
            self._index(run)

    def _index(self, run: _Run) -> None:
        """*run*, evicted, is known again to ``status`` and ``cancel`` (read from the store)."""
        indexed = self._indexed
        indexed[run.key] = None
        indexed.move_to_end(run.key)
        if len(indexed) > TOMBSTONES_PER_RETAINED_RUN * self._config.retention_max_runs:
            indexed.popitem(last=False)

    # -- answers --------------------------------------------------------------

    def _refuse_closed(self, p: _Parent) -> Answer | None:
        if self._closed or p.closed:
            return _error("runtime_closed")
        return None

    def _lookup(
        self, p: _Parent, number: int | None, *, reads_store: bool = False
    ) -> _Run | Answer:
        """``Parent._find``: the run if its owner is *p*'s (contract §8), after expiring.

        With a store, an evicted run is found by a call that reads the store
        (*reads_store*: ``wait``, ``continue_run``), and by the others while
        it is indexed.
        """
        self._expire(self._now)
        if number is None or not 0 <= number < len(self._top):
            return _error("unknown_run", run=number)
        run = self._top[number]
        if run.parent.owner != p.owner:
            return _error("unknown_run", run=number)
        if run.ambiguous:
            raise IndeterminateError(
                f"whether run {run.task!r} was evicted depends on Trio's order"
            )
        if not run.evicted:
            return run
        if self._store and (reads_store or run.key in self._indexed):
            if reads_store:
                self._index(run)
            return run
        if self._tombstones.get(run.key) == p.owner:
            return _error("expired_run", run=number)
        return _error("unknown_run", run=number)

    def _handle(self, run: _Run) -> Answer:
        return Answer("handle", run.number, run.subagent.name, run.status)

    def _outcome(self, run: _Run) -> Answer:
        """The answer a wait gives on a terminal run (observing a completed one)."""
        run.told = True
        if run.status is RunStatus.COMPLETED:
            run.observed = True
            return Answer("result", run.number, run.subagent.name, final_result=run.result)
        kind, _ = _OUTCOME_ERROR[run.status]
        cause = run.cause if run.status is RunStatus.FAILED else None
        return Answer("error", run.number, run.subagent.name, error=kind, cause=cause)

    def _resolved(self, run: _Run) -> bool:
        """contract §7, from its definition."""
        if run.status is RunStatus.COMPLETED:
            # Or, once it expired unobserved, by a replacement that succeeded.
            return run.observed or any(self._resolved(r) for r in run.replacements)
        if run.terminal:
            return any(self._resolved(r) for r in run.replacements)
        return False

    def _unresolved(self, p: _Parent) -> list[_Run]:
        return [run for run in p.runs if not self._resolved(run)]

    def _verdict(self, p: _Parent) -> Answer:
        if not self._config.fail_closed:
            return Answer("ok")
        unresolved = self._unresolved(p)
        if not unresolved:
            return Answer("ok")
        pairs = tuple((run.number, run.status) for run in unresolved)
        return Answer("error", error="unresolved_delegation", unresolved=pairs)


def _error(kind: str, *, run: int | None = None, subagent: str | None = None) -> Answer:
    return Answer("error", run, subagent, error=kind)


def _canonical(value: Any, max_depth: int) -> str:
    """The canonical JSON text the runtime holds a value in (see ``trio_delegate._json``).

    Raises:
        TypeError: not JSON at all.
        ValueError: too deep, NaN or infinity, or text that is not valid Unicode.
    """
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list | tuple):
            if depth + 1 > max_depth:
                raise ValueError("too deep")
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("a lone surrogate") from None
    return text
