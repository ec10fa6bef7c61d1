"""The delegating side: a :class:`Parent` admits, tracks and answers for its runs.

A parent owns the runs it started: it alone can see them (contract §8), it
gives them its ``max_concurrent_runs`` slots in admission order (contract §3),
and it keeps the fail-closed ledger of which of them are unresolved (contract §7).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, final

import trio

from .._checks import check_bool, check_seconds, check_text, describe
from .._construction import NoPublicConstructor
from .._errors import (
    ExpiredRunError,
    InvalidArgumentsError,
    InvalidResultError,
    LimitExceededError,
    RunFailedError,
    RuntimeClosedError,
    StoreError,
    UnknownRunError,
    UnknownSubagentError,
)
from .._results import CancelAck, RunHandle, RunResult
from .._schema import SchemaMismatch, SchemaSpec
from .._status import RunStatus
from .._stores._protocol import RunRecord, StoredRun
from .._tools import DelegationTools
from ._execution import execute
from ._fail_closed import Evicted, Ledger
from ._persistence import history_of
from ._run import CancelReason, Run, conversation_of, terminal_error

if TYPE_CHECKING:
    from .._subagent import Subagent
    from ._runtime import Runtime

__all__ = ["Parent"]


@final
class Parent(metaclass=NoPublicConstructor):
    """The delegating agent of one conversation or session.

    Get one from :meth:`Runtime.open_parent` (top level) or from
    ``ctx.parent`` inside a runner whose subagent declares ``children``.
    """

    __slots__ = (
        "__weakref__",
        "_children",
        "_closed",
        "_depth",
        "_ledger",
        "_nursery",
        "_owner",
        "_pending",
        "_running",
        "_runs",
        "_runtime",
        "_serial",
    )

    def __init__(
        self,
        runtime: Runtime,
        owner: str,
        children: Mapping[str, Subagent],
        depth: int,
        nursery: trio.Nursery,
    ) -> None:
        self._runtime = runtime
        self._owner = owner
        self._children = children
        self._depth = depth
        self._nursery = nursery
        self._serial = runtime._next_serial()
        self._closed = False
        # Retained runs of this parent by id: live ones and terminal ones that
        # retention has not evicted yet.
        self._runs: dict[str, Run] = {}
        self._pending: deque[Run] = deque()
        self._running = 0
        self._ledger = Ledger()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<trio_delegate.Parent owner={self._owner!r} {state}>"

    @property
    def owner(self) -> str:
        """The owner id: unique among the runtime's open parents."""
        return self._owner

    @property
    def subagents(self) -> tuple[str, ...]:
        """The names of this parent's direct children."""
        return tuple(self._children)

    # -- public API ------------------------------------------------------------

    async def delegate(
        self,
        name: str,
        task: str,
        *,
        final_schema: SchemaSpec | None = None,
        replaces: str | None = None,
    ) -> RunResult:
        """Run *task* on subagent *name* in the foreground and return its result.

        The run counts as observed. If the caller is cancelled while waiting,
        the child is cancelled and joined before the cancellation propagates.

        Raises:
            RunFailedError, RunCancelledError, RunTimedOutError: the run did not
                complete.
            UnknownSubagentError: *name* is not a direct child.
            InvalidArgumentsError: a malformed argument or ``replaces``.
            LimitExceededError: ``max_live_runs`` or ``max_depth`` would be exceeded.
            RuntimeClosedError: this parent or its runtime is closed.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._closed or self._runtime._closed:
            self._check_usable()
        run = self._admit(name, task, final_schema, replaces)
        if self._runtime._persister is not None:
            await self._commit_admission(run)
        return await self._foreground(run)

    async def start(
        self,
        name: str,
        task: str,
        *,
        final_schema: SchemaSpec | None = None,
        replaces: str | None = None,
    ) -> RunHandle:
        """Admit *task* on subagent *name* in the background.

        Returns an admission acknowledgment with status ``running`` (a slot
        was free) or ``pending``, not a result: the child may fail later. Either
        a handle is returned or no run is left behind.

        Raises:
            UnknownSubagentError, InvalidArgumentsError, LimitExceededError,
            RuntimeClosedError: as for :meth:`delegate`; nothing was started.
        """
        await trio.lowlevel.checkpoint()
        if self._closed or self._runtime._closed:
            self._check_usable()
        run = self._admit(name, task, final_schema, replaces)
        if self._runtime._persister is not None:
            await self._commit_admission(run)
        return run.handle()

    async def continue_run(
        self,
        run_id: str,
        message: str,
        *,
        final_schema: SchemaSpec | None = None,
        background: bool = False,
    ) -> RunResult | RunHandle:
        """Start a new run of the same subagent that carries a run's conversation on.

        The new run (with a new id) gets *message* as ``ctx.task`` and, as
        ``ctx.history``, the earlier run's whole conversation: its transcript,
        or its own history followed by its task (``{"role": "user", ...}``) and,
        if it completed, its result (``{"role": "assistant", ...}``).

        Args:
            run_id: a terminal run of this parent.
            message: the next message of the conversation.
            final_schema: what the new result must satisfy (default: the
                subagent's).
            background: return an admission :class:`RunHandle` instead of
                waiting for the :class:`RunResult`.

        Raises:
            InvalidArgumentsError: the run is still live, or a bad argument.
            UnknownRunError, ExpiredRunError: as for :meth:`status`.
            RunFailedError, RunCancelledError, RunTimedOutError: (foreground)
                the new run did not complete.
            LimitExceededError, RuntimeClosedError: as for :meth:`start`.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_usable()
        check_bool("background", background)
        earlier = self._find(run_id)
        if isinstance(earlier, StoredRun):
            record = await self._load(run_id)
            name, history = record.subagent, history_of(record)
        elif earlier.is_terminal:
            name, history = earlier.subagent.name, conversation_of(earlier)
        else:
            raise InvalidArgumentsError(
                f"run {run_id} is still {earlier.status.value}; only a finished run can be "
                "continued: wait for it first"
            )
        run = self._admit(name, message, final_schema, None, history, "message")
        if self._runtime._persister is not None:
            await self._commit_admission(run)
        if background:
            await trio.lowlevel.cancel_shielded_checkpoint()
            return run.handle()
        return await self._foreground(run)

    def status(self, run_id: str) -> RunHandle:
        """A snapshot of a run's status. Never observes, blocks or changes it.

        Raises:
            UnknownRunError: no such run of this parent (``ExpiredRunError``
                when retention evicted it).
            RuntimeClosedError: this parent or its runtime is closed.
        """
        self._check_usable()
        found = self._find(run_id)
        if isinstance(found, StoredRun):
            return RunHandle(run_id, found.subagent, found.status)
        return found.handle()

    async def wait(self, run_id: str, *, timeout: float | None = None) -> RunResult | RunHandle:
        """Wait for a run and return its result, or its handle if *timeout* ran out.

        Args:
            run_id: a run this parent started.
            timeout: seconds on the Trio clock to wait at most; ``None`` waits
                for the end, ``0`` polls. The timeout bounds this wait only:
                the child is never touched, and a run whose deadline has passed
                is waited for until it settles.

        Returns:
            the :class:`RunResult` of a completed run (now observed), or a
            :class:`RunHandle` with the live status.

        Raises:
            RunFailedError, RunCancelledError, RunTimedOutError: the run ended
                without completing (on every wait).
            UnknownRunError, ExpiredRunError, InvalidArgumentsError,
            RuntimeClosedError: as for :meth:`status`, or a bad *timeout*.
        """
        if self._closed or self._runtime._closed:
            self._check_usable()
        limit = (
            None
            if timeout is None
            else check_seconds("timeout", timeout, allow_zero=True, allow_none=False)
        )
        run = self._find(run_id)
        if type(run) is StoredRun:
            return self._answer_record(await self._load(run_id))
        if run.ended_at is not None:  # terminal
            await trio.lowlevel.checkpoint()
        elif limit is None:
            await run.done.wait()
        else:
            with trio.move_on_after(limit):
                await run.done.wait()
            if not run.is_terminal and self._runtime._now() >= run.deadline:
                # Past its deadline the run is about to settle: never answer
                # "running" for it (this also settles a tie with the deadline).
                await run.done.wait()
        if run.ended_at is not None:  # terminal
            result = run.result
            if result is not None:  # completed: _answer's common case, inline
                self._ledger.resolve(run_id)
                return result
            return self._answer(run)
        return run.handle()

    def cancel(self, run_id: str) -> CancelAck:
        """Request cancellation of a run; idempotent.

        A pending run is cancelled at once. A running one keeps reading
        ``running`` until it has processed the cancellation.

        Returns:
            a :class:`CancelAck`: ``cancel_requested`` is True for a live run,
            False for one that had already ended.

        Raises:
            UnknownRunError, ExpiredRunError, RuntimeClosedError: as for
                :meth:`status`.
        """
        self._check_usable()
        run = self._find(run_id)
        if isinstance(run, StoredRun):
            return CancelAck(run_id, False, run.status)
        requested = run.request_cancel(self._runtime._now(), CancelReason.REQUEST)
        return CancelAck(run.run_id, requested, run.status)

    def check_resolved(self) -> None:
        """Check that every run this parent started is resolved (contract §7).

        Raises:
            UnresolvedDelegationError: listing every unresolved run, when the
                runtime is fail-closed.
            RuntimeClosedError: this parent or its runtime is closed.
        """
        self._check_usable()
        self._raise_if_unresolved()

    def tools(self) -> DelegationTools:
        """The model-facing delegation tools bound to this parent (contract §10)."""
        self._check_usable()
        children = {name: sub.description for name, sub in self._children.items()}
        return DelegationTools._create(self, children)

    # -- admission and slots ----------------------------------------------------

    async def _foreground(self, run: Run) -> RunResult:
        """Wait for *run*; if the caller is cancelled, cancel and join it first."""
        try:
            await run.done.wait()
        except BaseException:
            run.request_cancel(self._runtime._now(), CancelReason.CALLER_CANCELLED)
            with trio.CancelScope(shield=True):
                await run.done.wait()
            raise
        return self._answer(run)

    def _admit(
        self,
        name: str,
        task: str,
        final_schema: SchemaSpec | None,
        replaces: str | None,
        history: tuple[Any, ...] = (),
        task_field: str = "task",
    ) -> Run:
        """Validate and admit one run, all or nothing, without checkpointing."""
        runtime = self._runtime
        config = runtime.config
        subagent = self._children.get(name) if type(name) is str else None
        if subagent is None:
            subagent = self._child(name)  # raises, naming what is allowed
        if type(task) is not str or not 0 < len(task) <= config.max_task_chars or task.isspace():
            check_text(task_field, task, max_chars=config.max_task_chars)  # raises
        schema = (
            subagent._result_schema
            if final_schema is None
            else runtime._compile_schema(final_schema)
        )
        if replaces is not None:
            self._check_replaceable(replaces)
        depth = self._depth + 1
        if depth > config.max_depth:
            raise LimitExceededError(
                f"delegating from {self._owner!r} would start a run at depth {depth}, deeper "
                f"than Config.max_depth={config.max_depth}; do this work here instead",
                subagent=name,
            )
        if runtime._live_count >= config.max_live_runs:
            raise LimitExceededError(
                f"the runtime already has {runtime._live_count} live runs, the most "
                f"Config.max_live_runs allows; wait for some to finish and try again",
                subagent=name,
            )
        run = Run(
            runtime._run_ids.new(),
            self,
            subagent,
            task,
            schema,
            history,
            replaces,
            depth,
            runtime._timeouts[subagent.name],
        )
        run_id = run.run_id
        self._runs[run_id] = run
        self._ledger.add(run)
        runtime._live_count += 1
        if runtime._persister is None:  # else _commit_admission enqueues it
            self._enqueue(run, runtime._now())
        return run

    async def _commit_admission(self, run: Run) -> None:
        """With a store: make the admission durable, then let the run start.

        Without a store, :meth:`_admit` already enqueued it. The write is shielded,
        so a caller cancelled meanwhile still gets its handle and meets the
        cancellation at its next checkpoint; if the write fails, the run is
        withdrawn as if it had never been admitted.
        """
        persister = self._runtime._persister
        assert persister is not None
        try:
            await persister.admit(run)
        except StoreError:
            if not run.settling:
                self._withdraw(run)
            raise
        self._enqueue(run, self._runtime._now())

    def _enqueue(self, run: Run, now: float) -> None:
        """Start an admitted run if a slot is free, else queue it (FIFO)."""
        if run.settling:  # cancelled while its admission was being recorded
            return
        if self._running < self._runtime.config.max_concurrent_runs and not self._pending:
            self._launch(run, now)
        else:
            self._pending.append(run)

    def _withdraw(self, run: Run) -> None:
        run_id = run.run_id
        del self._runs[run_id]
        self._ledger.withdraw(run_id)
        self._runtime._live_count -= 1

    def _launch(self, run: Run, now: float) -> None:
        self._running += 1
        run.start(now)
        self._nursery.start_soon(execute, run, name=run.subagent._task_name)

    def _run_settled(self, run: Run, was_running: bool) -> None:
        """Called by :class:`Run` exactly once, when it reaches a terminal state."""
        runtime = self._runtime
        runtime._live_count -= 1
        runtime._retention.add(run)
        if was_running:
            self._running -= 1
            if self._pending:
                self._launch_pending()

    def _launch_pending(self) -> None:
        """Start pending runs, oldest first, while slots are free."""
        pending = self._pending
        limit = self._runtime.config.max_concurrent_runs
        while pending and self._running < limit and not self._closed and not self._runtime._closed:
            run = pending.popleft()
            if not run.settling:  # cancelled while it waited
                self._launch(run, self._runtime._now())

    def _child(self, name: str) -> Subagent:
        allowed = tuple(self._children)
        if not isinstance(name, str):
            raise InvalidArgumentsError(
                f"name must be a subagent's name (a string), got {describe(name)}; "
                f"choose one of: {', '.join(allowed) or '(none)'}"
            )
        subagent = self._children.get(name)
        if subagent is None:
            raise UnknownSubagentError(
                f"{describe(name)} is not a subagent this parent can delegate to; "
                f"choose one of: {', '.join(allowed) or '(none)'}",
                subagent=str(name),
                allowed=allowed,
            )
        return subagent

    def _check_replaceable(self, replaces: str) -> None:
        if not isinstance(replaces, str):
            raise InvalidArgumentsError(
                f"replaces must be the run_id of a failed, cancelled or timed-out run, "
                f"got {describe(replaces)}"
            )
        record: Run | Evicted | None = self._runs.get(replaces) or self._ledger.get(replaces)
        if record is None:
            raise InvalidArgumentsError(
                f"replaces={replaces!r} is not a run this parent started (or it expired); "
                "pass the exact run_id of the failed, cancelled or timed-out run"
            )
        if record.status is RunStatus.COMPLETED:
            raise InvalidArgumentsError(
                f"replaces={replaces!r} names a completed run, which needs no replacement; "
                "wait for it to read its result"
            )
        if not record.status.is_terminal:
            raise InvalidArgumentsError(
                f"replaces={replaces!r} names a run that is still {record.status.value}; "
                "wait for it, or cancel it first"
            )

    # -- lookup and answers ---------------------------------------------------

    def _find(self, run_id: str) -> Run | StoredRun:
        """This parent's run *run_id*, in memory or (for its owner) in the store.

        Raises:
            InvalidArgumentsError: *run_id* is not a string.
            ExpiredRunError: retention evicted it (and no store holds it).
            UnknownRunError: it is not a run of this parent.
        """
        if not isinstance(run_id, str):
            raise InvalidArgumentsError(f"run_id must be a string, got {describe(run_id)}")
        runtime = self._runtime
        runtime._retention.expire(self._runtime._now())
        run = self._runs.get(run_id)
        if run is not None:
            return run
        persister = runtime._persister
        if persister is not None:
            stored = persister.find(run_id, self._owner)
            if stored is not None:
                return stored
        if runtime._retention.evicted_from(run_id) == self._serial:
            raise self._expired(run_id)
        raise UnknownRunError(
            f"no run {run_id!r} belongs to parent {self._owner!r} in this runtime; use the "
            "exact run_id that start or delegate returned (ids of other parents or runtimes "
            "are not valid here)",
            run_id=run_id,
        )

    def _expired(self, run_id: str) -> ExpiredRunError:
        config = self._runtime.config
        return ExpiredRunError(
            f"run {run_id} has expired: finished runs are kept for "
            f"{config.retention_seconds:g} s and at most {config.retention_max_runs} at a "
            "time, and its result is no longer held; start a new run if you still need it",
            run_id=run_id,
        )

    async def _load(self, run_id: str) -> RunRecord:
        """The stored record of a run :meth:`_find` found in the store."""
        persister = self._runtime._persister
        assert persister is not None
        record = await persister.load(run_id)
        if record is None:  # pruned by the store's own retention meanwhile
            raise self._expired(run_id)
        return record

    def _answer_record(self, record: RunRecord) -> RunResult:
        """Like :meth:`_answer`, for a run known only from the store."""
        if record.status is RunStatus.COMPLETED:
            self._ledger.resolve(record.run_id)
            return RunResult(
                record.run_id, record.subagent, record.task_summary, record.final_result
            )
        failure_type = (
            InvalidResultError if record.error_type == SchemaMismatch.__name__ else RunFailedError
        )
        raise terminal_error(
            record.run_id,
            record.subagent,
            record.status,
            record.error_type,
            record.error_message,
            failure_type,
        )

    def _answer(self, run: Run) -> RunResult:
        """The result of a terminal run (observing it), or its error."""
        if run.status is RunStatus.COMPLETED:
            self._ledger.resolve(run.run_id)
            assert run.result is not None
            return run.result
        raise run.outcome_error()

    def _forget(self, run: Run) -> None:
        """Retention evicted *run*: keep only a small record if it is unresolved."""
        run_id = run.run_id
        del self._runs[run_id]
        persister = self._runtime._persister
        if persister is not None and not isinstance(run.error, StoreError):
            persister.remember(run)
        self._ledger.evicted(run)

    def _raise_if_unresolved(self) -> None:
        if self._runtime.config.fail_closed:
            self._ledger.check(self._owner)

    # -- nesting and closing ----------------------------------------------------

    def _check_usable(self) -> None:
        """Raise RuntimeClosedError if this parent or its runtime is closed.

        Hot paths test ``self._closed or self._runtime._closed`` first and call
        this only to raise.
        """
        if self._runtime._closed:
            raise RuntimeClosedError(
                f"the runtime of parent {self._owner!r} is closed; its runs were cancelled "
                "and nothing more can be done through it: open a new runtime"
            )
        if self._closed:
            raise RuntimeClosedError(
                f"parent {self._owner!r} is closed; open a new parent to delegate again"
            )

    def _open_nested(self, run: Run, nursery: trio.Nursery) -> Parent:
        """The parent a runner gets as ``ctx.parent``; its runs live in *nursery*."""
        runtime = self._runtime
        children = {name: runtime.subagents[name] for name in run.subagent.children}
        nested = Parent._create(
            runtime, f"{self._owner}/{run.run_id}", children, run.depth, nursery
        )
        runtime._register(nested)
        return nested

    def _live_runs(self) -> list[Run]:
        """The runs of this parent that have not ended (live runs are never evicted)."""
        return [run for run in self._runs.values() if not run.is_terminal]

    def _cancel_pending(self, reason: CancelReason) -> None:
        """Cancel every pending run at once (they have no task to stop)."""
        now = self._runtime._now()
        pending = self._pending
        while pending:
            pending.popleft().request_cancel(now, reason)

    def _cancel_runs(self, reason: CancelReason) -> None:
        """Cancel pending runs at once, then request cancellation of running ones.

        Pending ones go first so that no slot freed meanwhile starts one.
        """
        self._cancel_pending(reason)
        now = self._runtime._now()
        for run in self._live_runs():
            run.request_cancel(now, reason)

    def _close_now(self, reason: CancelReason = CancelReason.PARENT_CLOSED) -> None:
        """Close without waiting: no new calls; every live run is told to stop."""
        if self._closed:
            return
        self._closed = True
        self._runtime._unregister(self)
        self._cancel_runs(reason)

    async def _aclose(self) -> None:
        """Close, then join every run that is still live (shielded, as a nursery does)."""
        self._close_now()
        live = self._live_runs()
        if live:
            with trio.CancelScope(shield=True):
                for run in live:
                    # Most have ended by the time the first wait returns: skip
                    # them rather than make and check an event for each.
                    if not run.is_terminal:
                        await run.done.wait()
