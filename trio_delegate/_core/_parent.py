"""The delegating side: a :class:`Parent` admits, tracks and answers for its runs.

A parent owns the runs it started: it gives them its ``max_concurrent_runs``
slots in admission order (its :class:`Scheduler`, contract §3), it keeps the
fail-closed ledger of which of them are unresolved (contract §7), and it
answers for every run of its owner (contract §8).

:class:`Parent` is the public face: it checks a call's arguments, admits
and answers; its state and its runs' lifecycle are its :class:`ParentHost`
(``_parent_host``), and the runs known only from the store are answered
for by ``StoredRuns`` (``_stored``). Each public method checks that the
parent and runtime are open before it acts and again after every
``await``: a call in progress when either closes ends with
``RuntimeClosedError`` and leaves no run behind.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar, Final, final

import trio

from .._checks import check_bool, check_seconds, check_text, describe, is_a
from .._construction import NoPublicConstructor
from .._errors import (
    InvalidArgumentsError,
    UnknownRunError,
)
from .._results import AnswerAck, CancelAck, Question, RunHandle, RunResult
from .._schema import SchemaSpec
from .._status import RunStatus
from .._stores._protocol import StoredRun
from .._usage import Usage
from ._admission import admit
from ._changes import run_talk_changed
from ._listing import list_runs
from ._meter import usage_of
from ._parent_host import ParentHost
from ._questions import (
    answer_run,
    check_on_input,
    open_questions,
    serve_foreground,
    wait_or_question,
)
from ._remote import stored_handle
from ._run import CancelReason, Run, State
from ._settlements import SettledRuns
from ._surfaces import ToolsBinding
from ._talk import OnInput, Talk

if TYPE_CHECKING:
    from .._subagent import Subagent
    from .._tools import DelegationTools
    from .._usage import Budget
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
    await parent._host.leave_foreground(run_id)


async def talk_changed(parent: Parent, run_id: str) -> None:
    """Wait until run *run_id* opens or closes a question, or ends (contract §19).

    For a surface that pushes a run's state to its client (the MCP server's
    ``notifications/tasks``). Read the run (``parent.status``) right before
    calling: nothing can change between that read and the start of this
    wait (no checkpoint lies between them), so a change is never missed.
    Returns at once for a run that has ended, and after a second for a run
    this runtime knows only from a shared store (read it again then). A
    progress report does not end the wait.

    Args:
        parent: the parent whose owner the run belongs to.
        run_id: the run.

    Raises:
        InvalidArgumentsError: *parent* is not a :class:`Parent`, or *run_id*
            is not a string.
        UnknownRunError, ExpiredRunError, RuntimeClosedError: as for
            :meth:`Parent.status`.
    """
    if not is_a(parent, Parent):
        raise InvalidArgumentsError(
            f"parent must be a trio_delegate.Parent, got {describe(parent)}"
        )
    parent._host.check_usable()
    await run_talk_changed(parent._registry.lookup(run_id, parent._owner))


# The members read on every run, by short module-level names (as in ``_run``).
_COMPLETED: Final = RunStatus.COMPLETED
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
        "_children",
        "_depth",
        "_host",
        "_ledger",
        "_live",
        "_owner",
        "_registry",
        "_scheduler",
        "_settlements",
    )

    def __init__(self, host: ParentHost) -> None:
        # Its state and its runs' side of it, kept off the public object; the
        # parent reads the same collections directly, on every run.
        self._host = host
        self._registry = host.registry
        self._owner = host.owner
        self._children = host.children
        self._depth = host.depth
        self._live = host.live
        self._scheduler = host.scheduler
        self._ledger = host.ledger
        self._settlements = host.settlements

    def __repr__(self) -> str:
        state = "closed" if self._host.closed else "open"
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
        on_input: OnInput | None = None,
    ) -> RunResult:
        """Run *task* on subagent *name* in the foreground and return its result.

        The run counts as observed. If the caller is cancelled while waiting,
        the child is cancelled and joined before the cancellation propagates.
        Each question the child asks is passed to ``await on_input(question)``
        in this task, and its return value is the answer (contract §19); an
        exception from it propagates once the run is cancelled and joined.

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
        self._host.check_usable()
        answerer = None if on_input is None else check_on_input(on_input)
        run = await admit(
            self._host,
            name,
            task,
            final_schema,
            replaces,
            foreground=True,
            talk=None if answerer is None else Talk(answerer),
        )
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
        self._host.check_usable()
        run = await admit(self._host, name, task, final_schema, replaces)
        return run.admission_ack()

    async def continue_run(
        self,
        run_id: str,
        message: str,
        *,
        final_schema: SchemaSpec | None = None,
        background: bool = False,
        on_input: OnInput | None = None,
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
            on_input: (foreground) answers the new run's questions, as for
                :meth:`delegate`.

        Raises:
            InvalidArgumentsError: the run is still live, or a bad argument.
            UnknownRunError, ExpiredRunError: as for :meth:`status`.
            RunFailedError, RunCancelledError, RunTimedOutError: (foreground)
                the new run did not complete.
            LimitExceededError, StoreError, RuntimeClosedError: as for
                :meth:`start`.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        self._host.check_usable()
        check_bool("background", background)
        answerer = check_on_input(on_input)
        name, carried = await self._registry.carried(run_id, self._owner, self._host.check_usable)
        run = await admit(
            self._host,
            name,
            message,
            final_schema,
            None,
            carried,
            "message",
            foreground=not background,
            continues=run_id,
            talk=None if answerer is None or background else Talk(answerer),
        )
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
        self._host.check_usable()
        found = self._registry.lookup(run_id, self._owner)
        if isinstance(found, StoredRun):
            return stored_handle(run_id, found)
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
            :class:`RunHandle` with the live status: as soon as the run waits
            for an answer (``input_required``, its questions), whatever *timeout*.

        Raises:
            RunFailedError, RunCancelledError, RunTimedOutError: the run ended
                without completing (on every wait).
            UnknownRunError, ExpiredRunError, InvalidArgumentsError: as for
                :meth:`status`, or a bad *timeout*.
            StoreError: the run is only in the store, and it could not be read.
            RuntimeClosedError: this parent or its runtime is closed, or closed
                while the call was waiting.
        """
        self._host.check_usable()
        registry = self._registry
        limit = (
            None
            if timeout is None
            else check_seconds("timeout", timeout, allow_zero=True, allow_none=False)
        )
        try:
            run = self._registry.lookup(run_id, self._owner)
        except UnknownRunError as unknown:
            run = await registry.lookup_in_store(
                run_id, self._owner, unknown, self._host.check_usable
            )
        if type(run) is StoredRun:
            return await self._host.wait_in_store(run_id, limit)
        if run.ended_at is not None:  # terminal
            await trio.lowlevel.checkpoint()
        elif run.subagent.asks:
            # It may need an answer: parent and child must not wait on each other.
            await wait_or_question(run, limit)
        elif limit is None:
            await run.ending().wait()
        else:
            with trio.move_on_after(limit):
                await run.ending().wait()
            if not run.is_terminal and registry.now() >= run.deadline:
                # Past its deadline the run is about to settle: never answer
                # "running" for it (this also settles a tie with the deadline).
                await run.ending().wait()
        if self._host.closed or registry.closed:
            self._host.closed_during(run)
        if run.ended_at is not None:
            return _answer(self._host, run)
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
        self._host.check_usable()
        run = self._registry.lookup(run_id, self._owner)
        if isinstance(run, StoredRun):
            if run.status.is_terminal:
                return CancelAck(run_id, False, run.status)
            # Live in another runtime sharing the store: the request goes
            # through the store, and its owner applies it (contract §16).
            persistence = self._registry.persistence
            assert persistence is not None
            persistence.watcher.request_cancel(run_id)
            return CancelAck(run_id, True, run.status)
        requested = run.request_cancel(self._registry.now(), CancelReason.REQUEST)
        return CancelAck(run.run_id, requested, run.status)

    def answer(self, run_id: str, value: object, *, question_id: str | None = None) -> AnswerAck:
        """Answer a question of a run (contract §19); synchronous.

        Args:
            run_id: a run of this parent's owner.
            value: the answer; it must satisfy the question's schema.
            question_id: the question (``None``: the run's oldest open one).

        Returns:
            an :class:`AnswerAck`; ``accepted`` is False when no such question
            is open (answered, declined, withdrawn, or the run is terminal).

        Raises:
            InvalidArgumentsError: *value* does not satisfy the schema, or is
                too large or deep (the question stays open).
            UnknownRunError, ExpiredRunError, RuntimeClosedError: as for :meth:`status`.
        """
        return self._reply(run_id, question_id, value, False, "")

    def decline(
        self, run_id: str, *, question_id: str | None = None, reason: str = ""
    ) -> AnswerAck:
        """Decline a question of a run: its ``ask`` raises ``QuestionDeclinedError``
        with *reason*. As :meth:`answer` otherwise."""
        text = check_text(
            "reason", reason, max_chars=self._registry.config.max_task_chars, allow_blank=True
        )
        return self._reply(run_id, question_id, None, True, text)

    def questions(self) -> tuple[Question, ...]:
        """A snapshot of the open questions of this parent's runs, oldest first.

        Raises:
            RuntimeClosedError: this parent or its runtime is closed.
        """
        self._host.check_usable()
        return open_questions(self._live.values())

    def _reply(
        self, run_id: str, question_id: str | None, value: object, declined: bool, reason: str
    ) -> AnswerAck:
        self._host.check_usable()
        run = self._registry.lookup(run_id, self._owner)
        if isinstance(run, StoredRun):
            # Live in another runtime sharing the store: the answer goes through
            # the store, and its owner applies it (contract §16, §19).
            persistence = self._registry.persistence
            if run.status.is_terminal or persistence is None:
                return AnswerAck(run_id, question_id, False, run.status)
            stored = persistence.stored
            ack, view = stored.replies.reply(run_id, run, question_id, value, declined, reason)
            stored.replied(run_id, view)
            return ack
        return answer_run(run, question_id, value, declined=declined, reason=reason)

    def check_resolved(self) -> None:
        """Check that every run this parent started is resolved (contract §7).

        Raises:
            UnresolvedDelegationError: listing every unresolved run, when the
                runtime is fail-closed.
            RuntimeClosedError: this parent or its runtime is closed.
        """
        self._host.check_usable()
        self._host.raise_if_unresolved()

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
        self._host.check_usable()
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
        self._host.check_usable()
        return self._settlements.unobserved()

    def runs(self) -> tuple[RunHandle, ...]:
        """This parent's runs that are live or still retained, in admission order (contract §17).

        A snapshot, by owner as every lookup is (contract §8): runs an
        earlier parent of the same owner started are listed while retention
        holds them. A run whose admission is still being recorded is not
        listed (its caller does not have its id yet), nor one retention
        evicted, nor one known only from a store. Not observation: a run
        seen only here is still unresolved (contract §7).

        Raises:
            RuntimeClosedError: this parent or its runtime is closed.
        """
        self._host.check_usable()
        return tuple(run.handle() for run in self._host.listed())

    def usage(self, run_id: str | None = None) -> Usage:
        """What was spent (contract §20): by every run this parent started (nested
        runs included), or by one run of its owner and its nested runs.

        Readable after the parent and its runtime closed: a host reads the bill then.

        Args:
            run_id: one run of this parent's owner; ``None`` for all of the
                parent's runs.

        Raises:
            UnknownRunError, ExpiredRunError, InvalidArgumentsError: as for
                :meth:`status`.
        """
        if run_id is None:
            return usage_of(self._host.spent)
        found = self._registry.lookup(run_id, self._owner)
        if isinstance(found, StoredRun):
            return found.usage or Usage()
        return usage_of(found.spent)

    def tools(self) -> DelegationTools:
        """The model-facing delegation tools bound to this parent (contract §10)."""
        host = self._host
        host.check_usable()
        registry = self._registry
        children = {name: sub.description for name, sub in self._children.items()}
        binding = ToolsBinding(
            parent=self,
            children=children,
            config=registry.config,
            events=registry.events,
            check_usable=host.check_usable,
            listing=functools.partial(list_runs, host),
            asking=frozenset(name for name, sub in self._children.items() if sub.asks),
        )
        return registry.surfaces.tools(binding)

    async def _foreground(self, run: Run) -> RunResult:
        """Wait for foreground *run*; if the caller is cancelled, cancel and join it first."""
        done = run.done
        assert done is not None  # a foreground run's is made at admission
        talk = run.talk
        try:
            if talk is not None and talk.on_input is not None:
                await serve_foreground(run, talk, talk.on_input)
            await done.wait()
        except BaseException:
            with trio.CancelScope(shield=True):
                await self._host.abandon(run)
            raise
        if self._host.closed or self._registry.closed:
            self._host.closed_during(run)
        return _answer(self._host, run)


def _answer(host: ParentHost, run: Run) -> RunResult:
    """The result of *host*'s terminal *run* (observing it), or its error."""
    if not run.foreground:  # a foreground run is never kept as unobserved
        host.settlements.told(run.run_id)
    if run.state.status is _COMPLETED:
        result = run.result()
        registry = host.registry
        if host.ledger.resolve(run.run_id) and registry.persistence is not None:
            # Observed for the first time: the store says so too (§16).
            registry.persistence.writer.observed(run.run_id)
        events = registry.events
        if events is not None:
            events.observed(run)
        return result
    raise run.outcome_error()


def open_parent_host(
    registry: Registry,
    owner: str,
    children: Mapping[str, Subagent],
    depth: int,
    nursery: trio.Nursery,
    *,
    budget: Budget | None = None,
    enclosing: Run | None = None,
) -> ParentHost:
    """Open a parent of *registry*'s runtime whose runs live in *nursery*.

    Returns its host: what the runtime (or the run that holds a nested
    parent) needs of it; ``.parent`` is the public object. *budget* is the
    parent's (contract §20); *enclosing* the run that holds a nested one.
    """
    if budget is not None:
        registry.meter.budgeted = True
    host = ParentHost(registry, owner, children, depth, nursery, budget, enclosing)
    host.parent = Parent._create(host)
    registry.register(host)
    return host
