"""How a parent admits a run: the checks, its place in the runtime and the queue, and
(with a store) the wait for its admission record.

:func:`admit` is the one place a run enters the runtime (contract §3, §4),
and its admission is undone here too when the store cannot record it. Two
of its checks run only off the hot path: a name that is not a plain key of
the parent's children, and a ``replaces`` argument.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Final, final

import trio

from .._checks import builtin, check_text, describe, is_a
from .._errors import InvalidArgumentsError, LimitExceededError, StoreError, UnknownSubagentError
from .._json import CanonicalJson
from .._schema import SchemaSpec
from .._status import RunStatus
from ._fail_closed import Evicted
from ._run import Run, State
from ._spending import check_admission

if TYPE_CHECKING:
    from .._subagent import Subagent
    from ._parent_host import ParentHost
    from ._scheduler import Scheduler
    from ._talk import Talk

__all__ = ["admit", "child_named", "replaceable"]

_ADMITTING: Final = State.ADMITTING


async def admit(
    host: ParentHost,
    name: str,
    task: str,
    final_schema: SchemaSpec | None,
    replaces: str | None,
    history: CanonicalJson | None = None,
    task_field: str = "task",
    *,
    foreground: bool = False,
    continues: str | None = None,
    talk: Talk | None = None,
) -> Run:
    """Validate and admit one run of *host*'s parent, all or nothing.

    The run takes its place in the scheduler's queue now. Without a store
    its admission is durable at once (it may start before this returns),
    and this returns without checkpointing. With one, this returns once the
    store has committed its admission record, and the run may start then:
    the wait is shielded, so a caller cancelled meanwhile still gets its run
    and meets the cancellation at its next checkpoint. If the record cannot
    be written, or the parent or runtime closed meanwhile, the run is
    withdrawn as if it had never been admitted, and the caller gets the error.

    Args:
        host: the admitting parent's host.
        name: the child to run.
        task: the run's task (or a continuation's message, see *task_field*).
        final_schema: what the result must satisfy (``None``: the child's).
        replaces: the run this one replaces, as the caller gave it.
        history: the conversation a continuation carries on.
        task_field: the argument's name in errors about *task*.
        foreground: whether the caller waits for the run.
        continues: the run whose conversation a continuation carries on.
        talk: how the run's questions are answered (a foreground caller's ``on_input``).

    Raises:
        UnknownSubagentError, InvalidArgumentsError: a bad argument (named).
        LimitExceededError: ``max_depth`` or ``max_live_runs`` would be exceeded.
        BudgetExceededError: a scope the run would be in was stopped by its
            budget, or has a limit with nothing left (contract §20).
        StoreError: the store could not record the admission (nothing ran).
        RuntimeClosedError: the parent or its runtime closed while the store
            recorded it.
    """
    registry = host.registry
    config = registry.config
    children = host.children
    subagent = children.get(name) if type(name) is str else None
    if subagent is None:
        subagent = child_named(children, name)  # raises, naming what is allowed
    task = check_text(task_field, task, max_chars=config.max_task_chars)
    schema = (
        registry.schemas_of[subagent.name]
        if final_schema is None
        else registry.compile_schema(final_schema)
    )
    if replaces is not None:
        replaces = replaceable(host, replaces)
    depth = host.depth + 1
    if depth > config.max_depth:
        raise LimitExceededError(
            f"delegating from {host.owner!r} would start a run at depth {depth}, deeper "
            f"than Config.max_depth={config.max_depth}; do this work here instead",
            subagent=name,
        )
    if registry.live_count >= config.max_live_runs:
        raise LimitExceededError(
            f"the runtime already has {registry.live_count} live runs, the most "
            f"Config.max_live_runs allows; wait for some to finish and try again",
            subagent=name,
        )
    if registry.meter.budgeted:
        check_admission(host)
    run = Run(
        registry.run_ids.new(),
        host,
        host.owner,
        subagent,
        task,
        schema,
        history,
        replaces,
        depth,
        registry.timeouts[subagent.name],
        foreground,
    )
    # Into the runtime (_withdraw undoes it).
    registry.runs[run.run_id] = run
    registry.live_count += 1
    events = registry.events
    if events is not None:
        events.admitted(run)
    host.live[run.run_id] = run
    # In admission order ("oldest first"); a run whose admission is still
    # being recorded is left out of the checks until its caller has its id.
    host.ledger.add(run)
    host.scheduler.admit(run)
    run.continues = continues  # before its record is built: recorded by reference
    if talk is not None:
        run.talk = talk
    if run.state is _ADMITTING:
        await _record(host, run)
    return run


async def _record(host: ParentHost, run: Run) -> None:
    """With a store: wait until *run*'s admission is durable; undo it if it cannot be."""
    writer = host.writer
    assert writer is not None
    run_id = run.run_id
    # Its caller does not have its id yet: no check lists it, no stream tells of it.
    announcing = host.announcing
    announcing.add(run_id)
    answer = _Answer(run, host.scheduler)
    try:
        writer.admit(run, answer)
        await answer.wait()
    except StoreError:
        announcing.discard(run_id)
        _withdraw(host, run)
        raise
    if host.closed or host.registry.closed:
        # Its record is durable, so the run exists: the close cancelled it
        # (a pending one at once; one that started as its admission
        # committed is joined by the close like any other). Nobody was
        # told its id, so it is no unresolved work of this parent.
        announcing.discard(run_id)
        host.ledger.withdraw(run_id)
        host.check_usable()
    announcing.discard(run_id)
    if run.state.terminal:  # it ended before its caller had its id
        host.settlements.settled(run)


def _withdraw(host: ParentHost, run: Run) -> None:
    """Undo *run*'s admission, which could not be recorded (its caller gets the
    error and no run id)."""
    host.ledger.withdraw(run.run_id)
    if not run.state.live:
        return  # a close cancelled it while it was recorded: it stays a record
    run.withdraw()
    del host.live[run.run_id]
    host.registry.withdraw(run)


@final
class _Answer:
    """The writer's answer about one admission record, waited for uninterruptibly.

    The writer calls it from its own task (``Writer.admit``). The caller
    parks until then. A cancellation cannot end the wait (the caller meets
    it at its next checkpoint, with its run), as if the wait were in a
    shielded cancel scope; a ``KeyboardInterrupt`` for a waiting main task
    ends it at once, as it would there. Parking directly needs neither an
    event nor a shielded scope for each admission.
    """

    __slots__ = ("_answered", "_error", "_run", "_scheduler", "_task")

    def __init__(self, run: Run, scheduler: Scheduler) -> None:
        self._run = run
        self._scheduler = scheduler
        self._answered = False
        self._error: StoreError | None = None
        self._task: trio.lowlevel.Task | None = None

    def __call__(self, error: StoreError | None) -> None:
        """The writer's answer: committed (``None``) or the error.

        Committed: the run may start now, before its caller wakes.
        """
        if error is None:
            self._run.admitted()
            self._scheduler.ready()
        else:
            self._error = error
        self._answered = True
        task = self._task
        if task is not None:
            self._task = None
            trio.lowlevel.reschedule(task)

    async def wait(self) -> None:
        """Until the answer; a cancellation does not end it.

        Raises:
            StoreError: the record could not be committed.
        """
        if self._answered:  # answered at once (a stopped writer)
            await trio.lowlevel.cancel_shielded_checkpoint()
        else:
            self._task = trio.lowlevel.current_task()
            await trio.lowlevel.wait_task_rescheduled(self._abort)
        if self._error is not None:
            raise self._error

    def _abort(self, raise_cancel: trio.lowlevel.RaiseCancelT) -> trio.lowlevel.Abort:
        # Trio asks once per wait, for a cancellation or a KeyboardInterrupt;
        # raise_cancel raises the one it is for (it has no other effect).
        try:
            raise_cancel()
        except trio.Cancelled:
            return trio.lowlevel.Abort.FAILED  # keep waiting, as if shielded
        except BaseException:
            pass
        # A KeyboardInterrupt: stop waiting (Trio raises it in the caller).
        self._task = None
        return trio.lowlevel.Abort.SUCCEEDED


def child_named(children: Mapping[str, Subagent], name: object) -> Subagent:
    """The child *name* of a parent with *children*; called once a plain lookup failed.

    Raises:
        InvalidArgumentsError: *name* is not a string.
        UnknownSubagentError: no child has that name (the error names those allowed).
    """
    allowed = tuple(children)
    name = builtin(name)
    if not is_a(name, str):
        raise InvalidArgumentsError(
            f"name must be a subagent's name (a string), got {describe(name)}; "
            f"choose one of: {', '.join(allowed) or '(none)'}"
        )
    subagent = children.get(name)
    if subagent is None:
        raise UnknownSubagentError(
            f"{describe(name)} is not a subagent this parent can delegate to; "
            f"choose one of: {', '.join(allowed) or '(none)'}",
            subagent=name,
            allowed=allowed,
        )
    return subagent


def replaceable(host: ParentHost, replaces: object) -> str:
    """*replaces* as a plain ``str``, if it names a run the parent of *host* may replace.

    Raises:
        InvalidArgumentsError: it names no run of this parent, or one that is
            live or completed (and not evicted unobserved).
    """
    replaces = builtin(replaces)
    if not is_a(replaces, str):
        raise InvalidArgumentsError(
            f"replaces must be the run_id of a failed, cancelled or timed-out run (or of "
            "a completed one that expired before it was observed), "
            f"got {describe(replaces)}"
        )
    record: Run | Evicted | None = host.ledger.get(replaces)
    if record is None:
        found = host.registry.runs.get(replaces)
        if found is not None and found.host is host:
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
