"""How a parent admits a run: the checks, then its place in the runtime and the queue.

:func:`admit` is the one place a run enters the runtime (contract §3, §4).
Two of its checks run only off the hot path: a name that is not a plain key
of the parent's children, and a ``replaces`` argument.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from .._checks import builtin, check_text, describe, is_a
from .._errors import InvalidArgumentsError, LimitExceededError, UnknownSubagentError
from .._json import CanonicalJson
from .._schema import SchemaSpec
from .._status import RunStatus
from ._fail_closed import Evicted
from ._run import Run
from ._spending import check_admission

if TYPE_CHECKING:
    from .._subagent import Subagent
    from ._parent_host import ParentHost

__all__ = ["admit", "child_named", "replaceable"]


def admit(
    host: ParentHost,
    name: str,
    task: str,
    final_schema: SchemaSpec | None,
    replaces: str | None,
    history: CanonicalJson | None = None,
    task_field: str = "task",
    *,
    foreground: bool = False,
) -> Run:
    """Validate and admit one run of *host*'s parent, all or nothing, without checkpointing.

    The run takes its place in the scheduler's queue now. Without a store
    its admission is durable at once (it may start before this returns);
    with one, :meth:`ParentHost.record_admission` makes it so.

    Args:
        host: the admitting parent's host.
        name: the child to run.
        task: the run's task (or a continuation's message, see *task_field*).
        final_schema: what the result must satisfy (``None``: the child's).
        replaces: the run this one replaces, as the caller gave it.
        history: the conversation a continuation carries on.
        task_field: the argument's name in errors about *task*.
        foreground: whether the caller waits for the run.

    Raises:
        UnknownSubagentError, InvalidArgumentsError: a bad argument (named).
        LimitExceededError: ``max_depth`` or ``max_live_runs`` would be exceeded.
        BudgetExceededError: a scope the run would be in was stopped by its
            budget, or has a limit with nothing left (contract §20).
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
    # Into the runtime (Registry.withdraw undoes it).
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
    return run


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
