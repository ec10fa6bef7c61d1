"""The delegating side: a :class:`Parent` admits, tracks and answers for its runs.

A parent owns the runs it started: it gives them its ``max_concurrent_runs``
slots in admission order (its :class:`Scheduler`, contract §3), it keeps the
fail-closed ledger of which of them are unresolved (contract §7), and it
answers for every run of its owner (contract §8). Each public method checks
that the parent and runtime are open before it acts and again after every
``await``: a call in progress when either closes ends with
``RuntimeClosedError`` and leaves no run behind.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, ClassVar, Final, NoReturn, final

import trio

from .._checks import builtin, check_bool, check_seconds, check_text, describe, is_a
from .._construction import NoPublicConstructor
from .._errors import (
    DelegationError,
    ExpiredRunError,
    InvalidArgumentsError,
    LimitExceededError,
    RuntimeClosedError,
    StoreError,
    UnknownRunError,
    UnknownSubagentError,
)
from .._json import CanonicalJson, JsonProblem, text_problem
from .._results import CancelAck, RunHandle, RunResult
from .._schema import SchemaMismatch, SchemaSpec, schema_for_tag
from .._status import RunStatus
from .._stores._protocol import RunRecord, StoredRun, is_run_id
from ._adoption import failure_type_of
from ._execution import execute
from ._fail_closed import Evicted, Ledger
from ._run import CancelReason, Outcome, Run, State, terminal_error
from ._scheduler import Scheduler
from ._settlements import SettledRuns, Settlements
from ._surfaces import ToolsBinding

if TYPE_CHECKING:
    from .._subagent import Subagent
    from .._tools import DelegationTools
    from ._registry import Registry

__all__ = ["Parent", "ParentHost", "abandon", "open_parent_host"]


async def abandon(parent: Parent, run_id: str) -> None:
    """The caller waiting for run *run_id* in the foreground leaves without its answer.

    For a surface that serves a foreground call on the public API, as a
    :meth:`Parent.start` followed by a bounded :meth:`Parent.wait` (the MCP
    server does, so that a call still running at its limit goes on in the
    background), and whose caller is cancelled while it waits. The run is
    cancelled and joined as :meth:`Parent.delegate` does for its own cancelled
    caller, with the same verdict: a run that completed anyway is unobserved
    and unresolved (contract §7, §17); any other ending is answered by the
    caller's cancellation. Shield the call (``trio.CancelScope(shield=True)``):
    the caller is being cancelled. Nothing is raised: a run that is not this
    parent's, or that is known only from the store, is left alone.

    Args:
        parent: the parent that started the run.
        run_id: the run the caller was waiting for.

    Raises:
        InvalidArgumentsError: *parent* is not a :class:`Parent`.
    """
    if not is_a(parent, Parent):
        raise InvalidArgumentsError(
            f"parent must be a trio_delegate.Parent, got {describe(parent)}"
        )
    await parent._leave_foreground(run_id)


# The members read on every run, by short module-level names (as in ``_run``).
_COMPLETED: Final = RunStatus.COMPLETED
_ADMITTING: Final = State.ADMITTING
_RUNNING: Final = State.RUNNING


@final
class Parent(metaclass=NoPublicConstructor):
    """The delegating agent of one conversation or session.

    Get one from :meth:`Runtime.open_parent` (top level) or from
    ``ctx.parent`` inside a runner whose subagent declares ``children``.
    """

    _made_by: ClassVar[str] = (
        "Runtime.open_parent() (async with runtime.open_parent(owner) as parent), or "
        "ctx.parent inside a runner whose subagent declares children"
    )

    __slots__ = (
        "__weakref__",
        "_announcing",
        "_children",
        "_closed",
        "_closed_at",
        "_depth",
        "_host",
        "_ledger",
        "_live",
        "_nursery",
        "_owner",
        "_registry",
        "_scheduler",
        "_settlements",
    )

    def __init__(
        self,
        registry: Registry,
        owner: str,
        children: Mapping[str, Subagent],
        depth: int,
        nursery: trio.Nursery,
    ) -> None:
        self._registry = registry
        self._owner = owner
        self._children = children
        self._depth = depth
        self._nursery = nursery
        self._closed = False
        self._closed_at: float | None = None
        # This parent's runs that have not ended, in admission order.
        self._live: dict[str, Run] = {}
        self._scheduler = Scheduler(registry.config.max_concurrent_runs, self._launch)
        self._ledger = Ledger()
        # Runs whose admission a store is recording: their callers do not have
        # their ids yet, so no check lists them and no stream tells of them.
        # The parent's to know, not the run's: it is about the parent's caller.
        self._announcing: set[str] = set()
        self._settlements = Settlements(owner)
        # What this parent's runs see of it: kept off the public object.
        self._host = ParentHost(self)

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
            StoreError: the store could not record the admission (nothing ran).
            RuntimeClosedError: this parent or its runtime is closed, or closed
                while the call was in progress.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_usable()
        run = self._admit(name, task, final_schema, replaces, foreground=True)
        if run.state is _ADMITTING:
            await self._record_admission(run)
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
            StoreError, RuntimeClosedError: as for :meth:`delegate`; nothing
                was started.
        """
        await trio.lowlevel.checkpoint()
        self._check_usable()
        run = self._admit(name, task, final_schema, replaces)
        if run.state is _ADMITTING:
            await self._record_admission(run)
        return run.admission_ack()

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
            run_id: a terminal run of this parent's owner.
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
            LimitExceededError, StoreError, RuntimeClosedError: as for
                :meth:`start`.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_usable()
        check_bool("background", background)
        try:
            earlier = self._find(run_id)
        except UnknownRunError as unknown:
            earlier = await self._find_admitted_elsewhere(run_id, unknown)
        if isinstance(earlier, StoredRun):
            record = await self._load(run_id)
            self._check_usable()  # it may have closed while the store answered
            if not record.status.is_terminal:
                raise InvalidArgumentsError(
                    f"run {run_id} is still {record.status.value} (in another runtime); only "
                    "a finished run can be continued: wait for it first"
                )
            name = record.subagent
            persister = self._registry.persister
            assert persister is not None
            try:
                # Rebuilt along its chain of continuations (contract §12).
                carried = await persister.conversation(
                    record, self._registry.config.max_nesting_depth
                )
            except (JsonProblem, TypeError) as exc:  # pragma: no cover - checked when recorded
                raise InvalidArgumentsError(
                    f"the conversation of run {run_id} cannot be carried on: {exc}"
                ) from None
            self._check_usable()  # it may have closed while the store answered
        elif earlier.is_terminal:
            # From the canonical JSON the run holds, never decoded here.
            name, carried = earlier.subagent.name, earlier.carried()
        else:
            raise InvalidArgumentsError(
                f"run {run_id} is still {earlier.status.value}; only a finished run can be "
                "continued: wait for it first"
            )
        run = self._admit(
            name, message, final_schema, None, carried, "message", foreground=not background
        )
        run.continues = run_id
        if run.state is _ADMITTING:
            await self._record_admission(run)
        if background:
            handle = run.admission_ack()  # as start gives it
            await trio.lowlevel.cancel_shielded_checkpoint()
            return handle
        return await self._foreground(run)

    def status(self, run_id: str) -> RunHandle:
        """A snapshot of a run's status. Never observes, blocks or changes it.

        Raises:
            UnknownRunError: no such run of this parent's owner
                (``ExpiredRunError`` when retention evicted it).
            InvalidArgumentsError: *run_id* is not a string.
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
            run_id: a run of this parent's owner.
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
            UnknownRunError, ExpiredRunError, InvalidArgumentsError: as for
                :meth:`status`, or a bad *timeout*.
            StoreError: the run is only in the store, and it could not be read.
            RuntimeClosedError: this parent or its runtime is closed, or closed
                while the call was waiting.
        """
        self._check_usable()
        registry = self._registry
        limit = (
            None
            if timeout is None
            else check_seconds("timeout", timeout, allow_zero=True, allow_none=False)
        )
        try:
            run = self._find(run_id)
        except UnknownRunError as unknown:
            run = await self._find_admitted_elsewhere(run_id, unknown)
        if type(run) is StoredRun:
            return await self._wait_in_store(run_id, limit)
        if run.ended_at is not None:  # terminal
            await trio.lowlevel.checkpoint()
        elif limit is None:
            await run.ending().wait()
        else:
            with trio.move_on_after(limit):
                await run.ending().wait()
            if not run.is_terminal and registry.now() >= run.deadline:
                # Past its deadline the run is about to settle: never answer
                # "running" for it (this also settles a tie with the deadline).
                await run.ending().wait()
        if self._closed or registry.closed:
            self._closed_during(run)
        if run.ended_at is not None:
            return self._answer(run)
        return run.handle()

    def cancel(self, run_id: str) -> CancelAck:
        """Request cancellation of a run; idempotent.

        A pending run is cancelled at once (the ack and ``status`` read
        ``cancelled``). A running one keeps reading ``running`` until it has
        processed the cancellation.

        Returns:
            a :class:`CancelAck`: ``cancel_requested`` is True for a live run,
            False for one that had already ended.

        Raises:
            UnknownRunError, ExpiredRunError, InvalidArgumentsError,
            RuntimeClosedError: as for :meth:`status`.
        """
        self._check_usable()
        run = self._find(run_id)
        if isinstance(run, StoredRun):
            if run.status.is_terminal:
                return CancelAck(run_id, False, run.status)
            # Live in another runtime sharing the store: the request goes
            # through the store, and its owner applies it (contract §16).
            persister = self._registry.persister
            assert persister is not None
            persister.request_cancel(run_id)
            return CancelAck(run_id, True, run.status)
        requested = run.request_cancel(self._registry.now(), CancelReason.REQUEST)
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

    def settled(self) -> SettledRuns:
        r"""The runs of this parent as they reach a terminal state (contract §17).

        An async iterator of :class:`RunHandle`\ s, one per run that settles
        from now on, in settlement order; runs ended by this parent's own
        close come before it ends, which it does when the parent closes.
        Several may be open at once. Reading it never observes or changes a
        run: a run seen only here is still unresolved (contract §7). Leave
        it early with ``aclose()`` (it is also an async context manager).

        Raises:
            RuntimeClosedError: this parent or its runtime is closed.
        """
        self._check_usable()
        return self._settlements.subscribe()

    def unobserved(self) -> tuple[RunHandle, ...]:
        """This parent's ended runs whose outcome nobody has been told yet (contract §17).

        Oldest settled first. A run leaves once a ``wait`` has returned its
        result or raised its error; a foreground ``delegate`` (or
        ``continue_run``) tells its caller itself and never appears here.
        Not observation: these runs are still unresolved.

        Raises:
            RuntimeClosedError: this parent or its runtime is closed.
        """
        self._check_usable()
        return self._settlements.unobserved()

    def tools(self) -> DelegationTools:
        """The model-facing delegation tools bound to this parent (contract §10)."""
        self._check_usable()
        registry = self._registry
        children = {name: sub.description for name, sub in self._children.items()}
        binding = ToolsBinding(self, children, registry.config, registry.events, self._check_usable)
        return registry.surfaces.tools(binding)

    # -- admission -------------------------------------------------------------

    def _admit(
        self,
        name: str,
        task: str,
        final_schema: SchemaSpec | None,
        replaces: str | None,
        history: CanonicalJson | None = None,
        task_field: str = "task",
        *,
        foreground: bool = False,
    ) -> Run:
        """Validate and admit one run, all or nothing, without checkpointing.

        The run takes its place in the scheduler's queue now. Without a store
        its admission is durable at once (it may start before this returns);
        with one, :meth:`_record_admission` makes it so.
        """
        registry = self._registry
        config = registry.config
        subagent = self._children.get(name) if type(name) is str else None
        if subagent is None:
            subagent = self._child(name)  # raises, naming what is allowed
        task = check_text(task_field, task, max_chars=config.max_task_chars)
        schema = (
            registry.schemas_of[subagent.name]
            if final_schema is None
            else registry.compile_schema(final_schema)
        )
        if replaces is not None:
            replaces = self._check_replaceable(replaces)
        depth = self._depth + 1
        if depth > config.max_depth:
            raise LimitExceededError(
                f"delegating from {self._owner!r} would start a run at depth {depth}, deeper "
                f"than Config.max_depth={config.max_depth}; do this work here instead",
                subagent=name,
            )
        if registry.live_count >= config.max_live_runs:
            raise LimitExceededError(
                f"the runtime already has {registry.live_count} live runs, the most "
                f"Config.max_live_runs allows; wait for some to finish and try again",
                subagent=name,
            )
        run = Run(
            registry.run_ids.new(),
            self._host,
            self._owner,
            subagent,
            task,
            schema,
            history,
            replaces,
            depth,
            registry.timeouts[subagent.name],
            foreground,
        )
        # Into the runtime (Registry.withdraw undoes it).
        registry.runs[run.run_id] = run
        registry.live_count += 1
        events = registry.events
        if events is not None:
            events.admitted(run)
        self._live[run.run_id] = run
        # In admission order ("oldest first"); a run whose admission is still
        # being recorded is left out of the checks until its caller has its id.
        self._ledger.add(run)
        self._scheduler.admit(run)
        return run

    async def _record_admission(self, run: Run) -> None:
        """With a store: make the admission durable; the run may start once it is.

        The write is shielded, so a caller cancelled meanwhile still gets its
        handle and meets the cancellation at its next checkpoint. If the write
        fails, or the parent or runtime closed meanwhile, the run is withdrawn
        as if it had never been admitted, and the caller gets the error.
        """
        persister = self._registry.persister
        assert persister is not None

        def durable() -> None:
            run.admitted()
            self._scheduler.ready()

        announcing = self._announcing
        announcing.add(run.run_id)
        try:
            await persister.admit(run, durable)
        except StoreError:
            announcing.discard(run.run_id)
            self._withdraw(run)
            raise
        if self._closed or self._registry.closed:
            # Its record is durable, so the run exists: the close cancelled it
            # (a pending one at once; one that started as its admission
            # committed is joined by the close like any other). Nobody was
            # told its id, so it is no unresolved work of this parent.
            announcing.discard(run.run_id)
            self._ledger.withdraw(run.run_id)
            self._check_usable()
        announcing.discard(run.run_id)
        if run.state.terminal:  # it ended before its caller had its id
            self._settlements.settled(run)

    def _withdraw(self, run: Run) -> None:
        """Undo *run*'s admission, which could not be recorded (its caller gets the
        error and no run id)."""
        self._ledger.withdraw(run.run_id)
        if not run.state.live:
            return  # a close cancelled it while it was recorded: it stays a record
        run.withdraw()
        del self._live[run.run_id]
        self._registry.withdraw(run)

    def _launch(self, run: Run) -> None:
        """Start *run* now (the scheduler decided it may)."""
        registry = self._registry
        now = registry.now()
        run.start(now)
        if registry.persister is not None:
            registry.persister.started(run, now)
        if registry.events is not None:
            registry.events.started(run)
        registry.grace.started(run)
        self._nursery.start_soon(
            execute, run, self._host, name=registry.task_names[run.subagent.name]
        )

    async def _foreground(self, run: Run) -> RunResult:
        """Wait for foreground *run*; if the caller is cancelled, cancel and join it first."""
        done = run.done
        assert done is not None  # a foreground run's is made at admission
        try:
            await done.wait()
        except BaseException:
            with trio.CancelScope(shield=True):
                await self._abandon(run)
            raise
        if self._closed or self._registry.closed:
            self._closed_during(run)
        return self._answer(run)

    async def _leave_foreground(self, run_id: str) -> None:
        """:func:`abandon`: the foreground caller of *run_id*, served by a surface, left."""
        try:
            found = self._find(run_id)
        except DelegationError:
            await trio.lowlevel.checkpoint()
            return
        if isinstance(found, StoredRun):
            await trio.lowlevel.checkpoint()
            return
        await self._abandon(found)

    async def _abandon(self, run: Run) -> None:
        """The caller of a foreground call leaves without its answer: cancel *run*, join it.

        The one verdict on such a run, whichever surface made the call: a run
        that completed anyway (its runner shielded its last step, say) was
        observed by nobody, so it is unobserved (contract §17) and unresolved
        (§7); any other ending is answered by the caller's own cancellation.
        The caller shields this wait.
        """
        run.request_cancel(self._registry.now(), CancelReason.CALLER_CANCELLED)
        await run.ending().wait()
        # From now on a wait tells of this run like of any background run.
        run.foreground = False
        self._settlements.untold(run, run.status is _COMPLETED)

    def _child(self, name: str) -> Subagent:
        allowed = tuple(self._children)
        name = builtin(name)
        if not is_a(name, str):
            raise InvalidArgumentsError(
                f"name must be a subagent's name (a string), got {describe(name)}; "
                f"choose one of: {', '.join(allowed) or '(none)'}"
            )
        subagent = self._children.get(name)
        if subagent is None:
            raise UnknownSubagentError(
                f"{describe(name)} is not a subagent this parent can delegate to; "
                f"choose one of: {', '.join(allowed) or '(none)'}",
                subagent=name,
                allowed=allowed,
            )
        return subagent

    def _check_replaceable(self, replaces: str) -> str:
        """*replaces* as a plain ``str``, if it names a run this parent may replace."""
        replaces = builtin(replaces)
        if not is_a(replaces, str):
            raise InvalidArgumentsError(
                f"replaces must be the run_id of a failed, cancelled or timed-out run (or of "
                "a completed one that expired before it was observed), "
                f"got {describe(replaces)}"
            )
        record: Run | Evicted | None = self._ledger.get(replaces)
        if record is None:
            found = self._registry.runs.get(replaces)
            if found is not None and found.host is self._host:
                record = found
        if record is None:
            raise InvalidArgumentsError(
                f"replaces={describe(replaces)} is not a run this parent started (or it "
                "expired); pass the exact run_id of the failed, cancelled or timed-out run"
            )
        if record.status is RunStatus.COMPLETED and not isinstance(record, Evicted):
            # A completed run that expired before anyone observed it is the
            # exception: its result is gone from memory, and a replacement is
            # the only way left to resolve it (contract §7, fail-closed).
            raise InvalidArgumentsError(
                f"replaces={replaces!r} names a completed run, which needs no replacement; "
                "wait for it to read its result"
            )
        if not record.status.is_terminal:
            raise InvalidArgumentsError(
                f"replaces={replaces!r} names a run that is still {record.status.value}; "
                "wait for it, or cancel it first"
            )
        return replaces

    # -- lookup and answers ---------------------------------------------------

    def _find(self, run_id: str) -> Run | StoredRun:
        """The run *run_id* of this parent's owner, in memory or in the store.

        Whether a run is visible depends only on its owner (contract §8).

        Raises:
            InvalidArgumentsError: *run_id* is not a string.
            ExpiredRunError: retention evicted it (and no store holds it).
            UnknownRunError: it is not a run of this parent's owner.
        """
        if type(run_id) is not str:
            run_id = builtin(run_id)  # a str subclass is read as the text it holds
            if not is_a(run_id, str):
                raise InvalidArgumentsError(f"run_id must be a string, got {describe(run_id)}")
        if not run_id.isascii() and text_problem(run_id) is not None:
            raise InvalidArgumentsError(
                f"run_id must be valid Unicode text, got {describe(run_id)}; use the exact "
                "run_id that start or delegate returned"
            )
        registry = self._registry
        found = registry.find(run_id, self._owner)
        if found is not None:
            return found
        if registry.expired_for(run_id, self._owner):
            raise self._expired(run_id)
        raise UnknownRunError(
            f"no run {describe(run_id)} belongs to parent {self._owner!r} in this runtime; "
            "use the exact run_id that start or delegate returned (ids of other parents or "
            "runtimes are not valid here)",
            run_id=run_id if len(run_id) <= 128 else None,
        )

    async def _find_admitted_elsewhere(self, run_id: str, unknown: UnknownRunError) -> StoredRun:
        """The run *run_id* of this owner that another runtime sharing the store admitted.

        This runtime's view of the store trails a commit elsewhere (contract
        §16), and a run admitted elsewhere while still live is not in it at
        all: an id this runtime has never seen is read from the store itself
        before it is called unknown.

        Raises:
            UnknownRunError: *unknown*, when the store does not hold it for this owner
                either (or there is no store).
            StoreError: the store could not be read.
            RuntimeClosedError: this parent or its runtime closed meanwhile.
        """
        persister = self._registry.persister
        if persister is None or type(unknown) is not UnknownRunError or not is_run_id(run_id):
            raise unknown
        record = await persister.load(run_id)
        self._check_usable()
        if record is None or record.owner != self._owner:
            raise unknown
        persister.found(record)  # status and cancel know it from now on
        return StoredRun(record.owner, record.subagent, record.status)

    def _expired(self, run_id: str) -> ExpiredRunError:
        config = self._registry.config
        return ExpiredRunError(
            f"run {run_id} has expired: finished runs are kept for "
            f"{config.retention_seconds:g} s and at most {config.retention_max_runs} at a "
            "time, and its result is no longer held; start a new run if you still need it",
            run_id=run_id,
        )

    async def _load(self, run_id: str) -> RunRecord:
        """The stored record of a run :meth:`_find` found in the store."""
        persister = self._registry.persister
        assert persister is not None
        record = await persister.load(run_id)
        if record is None:  # pruned by the store's own retention meanwhile
            raise self._expired(run_id)
        return record

    async def _wait_in_store(self, run_id: str, limit: float | None) -> RunResult | RunHandle:
        """``wait`` for a run known from the store: ended, or live in another runtime.

        Each look reads the store itself (so ``timeout=0`` is the fresh
        answer); between looks the wait sleeps until the store watcher sees
        the run change, or a poll interval passes. A run past its recorded
        deadline is waited for until its end is recorded (contract §16).
        """
        registry = self._registry
        persister = registry.persister
        assert persister is not None
        ends = None if limit is None else registry.now() + limit
        while True:
            record = await self._load(run_id)
            self._check_usable()
            persister.found(record)  # the freshest answer status and cancel can give
            if record.status.is_terminal:
                if record.status is RunStatus.COMPLETED:
                    if record.runtime_id != persister.runtime_id:
                        persister.mark_observed(run_id)  # its owner's parent counts it
                    elif not record.observed:
                        persister.observed(run_id)  # this runtime's, evicted from memory
                return self._answer_record(record)
            now = registry.now()
            overdue = record.deadline_at is not None and time.time() >= record.deadline_at
            if ends is not None and now >= ends and not overdue:
                return RunHandle(run_id, record.subagent, record.status)
            pause = persister.store.poll_interval
            if ends is not None and not overdue:
                pause = min(pause, ends - now)
            await persister.changed(run_id, pause)

    def _answer_record(self, record: RunRecord) -> RunResult:
        """Like :meth:`_answer`, for a run known only from the store."""
        self._settlements.told(record.run_id)
        if record.status is RunStatus.COMPLETED:
            self._ledger.resolve(record.run_id)
            persister = self._registry.persister
            assert persister is not None
            value = record.final_result
            schema = persister.schema_of(record.run_id)
            if schema is None and record.result_type is not None:
                # After a restart: the type the result was structured into,
                # when this process knows it (contract §5).
                schema = schema_for_tag(record.result_type)
                if schema is not None:
                    try:
                        value = schema.structure(value)
                    except SchemaMismatch as exc:
                        raise StoreError(
                            f"the stored result of run {record.run_id} does not fit its type "
                            f"{schema.target!r} any more ({exc}); the store was changed by "
                            "something else",
                            run_id=record.run_id,
                        ) from None
                    schema = None
            if schema is not None:
                value = schema.structure(value)
            return RunResult(record.run_id, record.subagent, record.task_summary, value)
        raise terminal_error(
            record.run_id,
            record.subagent,
            record.status,
            record.error_type,
            record.error_message,
            failure_type_of(record),
        )

    def _answer(self, run: Run) -> RunResult:
        """The result of a terminal run (observing it), or its error."""
        if not run.foreground:  # a foreground run is never kept as unobserved
            self._settlements.told(run.run_id)
        if run.state.status is _COMPLETED:
            result = run.result()
            registry = self._registry
            if self._ledger.resolve(run.run_id) and registry.persister is not None:
                # Observed for the first time: the store says so too (§16).
                registry.persister.observed(run.run_id)
            events = registry.events
            if events is not None:
                events.observed(run)
            return result
        raise run.outcome_error()

    def _raise_if_unresolved(self) -> None:
        if self._registry.config.fail_closed:
            self._ledger.check(self._owner, self._announcing)

    # -- nesting and closing ----------------------------------------------------

    def _check_usable(self) -> None:
        """Raise RuntimeClosedError if this parent or its runtime is closed."""
        if self._registry.closed:
            raise RuntimeClosedError(
                f"the runtime of parent {self._owner!r} is closed; its runs were cancelled "
                "and nothing more can be done through it: open a new runtime"
            )
        if self._closed:
            raise RuntimeClosedError(
                f"parent {self._owner!r} is closed; open a new parent to delegate again"
            )

    def _closed_during(self, run: Run) -> NoReturn:
        """Raise for a call about *run* that was waiting when this parent or runtime closed."""
        which = "its runtime" if self._registry.closed else f"parent {self._owner!r}"
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

    def _open_nested(self, run: Run, nursery: trio.Nursery) -> ParentHost:
        """The host of the parent a runner gets as ``ctx.parent``; its runs live in *nursery*."""
        registry = self._registry
        children = {name: registry.subagents[name] for name in run.subagent.children}
        return open_parent_host(
            registry, f"{self._owner}/{run.run_id}", children, run.depth, nursery
        )

    def _close_now(self, reason: CancelReason = CancelReason.PARENT_CLOSED) -> None:
        """Close without waiting: no new calls; every live run is told to stop.

        Pending runs end first, in admission order (they have no task to
        stop), so that no slot freed meanwhile starts one.
        """
        if self._closed:
            return
        self._closed = True
        now = self._closed_at = self._registry.now()
        self._scheduler.stop()
        for run in self._scheduler.queued():
            run.request_cancel(now, reason)
        for run in list(self._live.values()):
            run.request_cancel(now, reason)

    def _cancel_pending(self, reason: CancelReason) -> None:
        """End every pending run at once (the runtime is closing)."""
        now = self._registry.now()
        self._scheduler.stop()
        for run in self._scheduler.queued():
            run.request_cancel(now, reason)

    async def _join(self) -> None:
        """Wait (shielded, as a nursery does) until every run of this parent has ended."""
        live = self._live
        if live:
            with trio.CancelScope(shield=True):
                while live:
                    await next(iter(live.values())).ending().wait()

    async def _aclose(self) -> None:
        """Close, join every run that is still live, then free the owner."""
        self._close_now()
        try:
            await self._join()
        finally:
            self._joined()

    def _joined(self) -> None:
        """Every run of this closed parent has ended: free its owner, end its streams."""
        self._registry.unregister(self._host)
        self._settlements.close()


@final
class ParentHost:
    """A parent as its runs see it: the :class:`RunHost` interface of ``_run``, and
    what a run's task needs (``_execution``).

    Kept apart from :class:`Parent` so that the public object shows only the
    contract's names (§2, §17).
    """

    __slots__ = (
        "_announcing",
        "_live",
        "_parent",
        "_registry",
        "_scheduler",
        "_settlements",
        "config",
        "depth",
        "events",
        "grace",
        "now",
        "parent",
        "records",
        "run_evicted",
    )

    def __init__(self, parent: Parent) -> None:
        self._parent = self.parent = parent
        self.depth = parent._depth
        registry = self._registry = parent._registry
        # The parent's own collections, which a run's end updates.
        self._live = parent._live
        self._announcing = parent._announcing
        self._settlements = parent._settlements
        self._scheduler = parent._scheduler
        self.config = registry.config
        # The runtime's observer (or None), fixed when it opened.
        self.events = registry.events
        # The runtime's clock.
        self.now = registry.now
        # Decides runs whose runners do not stop (contract §18); a run's task
        # tells it when it returns (``_execution``).
        self.grace = registry.grace
        # Whether decided outcomes are recorded (with a store).
        self.records = registry.persister is not None
        # Retention evicted a run; the ledger keeps a small record of it if it
        # is unresolved.
        self.run_evicted = parent._ledger.evicted

    def closing_time(self) -> tuple[float, CancelReason] | None:
        parent = self._parent
        registry = parent._registry
        if registry.closed_at is not None:
            return registry.closed_at, CancelReason.RUNTIME_CLOSED
        if parent._closed_at is not None:
            return parent._closed_at, CancelReason.PARENT_CLOSED
        return None

    def record(
        self, run: Run, outcome: Outcome, recorded: Callable[[StoreError | None], None]
    ) -> None:
        # Asked only when outcomes are recorded (``records``): with a store.
        # When the run commits is the run's own rule (Run.decide).
        persister = self._parent._registry.persister
        assert persister is not None
        persister.settle(run, outcome, recorded)

    def run_committed(self, run: Run, was_running: bool) -> None:
        del self._live[run.run_id]
        announcing = self._announcing
        if not announcing or run.run_id not in announcing:
            self._settlements.settled(run)
        # Out of the runtime's live runs, into retention.
        registry = self._registry
        registry.live_count -= 1
        events = self.events
        if events is not None:
            events.ended(run)
        registry.retention.add(run)
        if was_running:
            self._scheduler.released()

    def run_cancel_requested(self, run: Run, reason: CancelReason) -> None:
        if run.state is _RUNNING:  # live and running
            # Its runner has a grace to stop in (contract §18).
            self.grace.delivered(run, self.now())
        events = self.events
        if events is not None:
            events.cancel_requested(run, reason)

    def run_observed_elsewhere(self, run: Run) -> None:
        parent = self._parent
        parent._ledger.resolve(run.run_id)
        parent._settlements.told(run.run_id)

    # -- what a run's task does with its nested parent (``_execution``) -------------

    def open_nested(self, run: Run, nursery: trio.Nursery) -> ParentHost:
        """The host of the parent a runner gets as ``ctx.parent``; its runs live in *nursery*."""
        return self._parent._open_nested(run, nursery)

    def close_now(self) -> None:
        """Close this parent without waiting (its run's runner has returned or raised)."""
        self._parent._close_now()

    def joined(self) -> None:
        """Every run of this closed parent has ended: free its owner."""
        self._parent._joined()

    def raise_if_unresolved(self) -> None:
        """Raise ``UnresolvedDelegationError`` if this parent left work unresolved."""
        self._parent._raise_if_unresolved()

    # -- what the runtime does with its parents ------------------------------------

    def cancel_pending(self, reason: CancelReason) -> None:
        """End every pending run of this parent at once (the runtime is closing)."""
        self._parent._cancel_pending(reason)

    async def aclose(self) -> None:
        """Close the parent, join every run that is still live, then free the owner."""
        await self._parent._aclose()


def open_parent_host(
    registry: Registry,
    owner: str,
    children: Mapping[str, Subagent],
    depth: int,
    nursery: trio.Nursery,
) -> ParentHost:
    """Open a parent of *registry*'s runtime whose runs live in *nursery*.

    Returns its host: what the runtime (or the run that holds a nested
    parent) needs of it; ``.parent`` is the public object.
    """
    parent = Parent._create(registry, owner, children, depth, nursery)
    host = parent._host
    registry.register(host)
    return host
