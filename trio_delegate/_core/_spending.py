"""Budget stops (contract §20): what happens when a scope spends past its budget.

A report that takes a scope (a run, a parent, the runtime) past a limit
stops it, as a deadline stops a run: every live run in it is asked to stop
with a :class:`BudgetExceededError` naming the scope, the limit and what was
spent (the cause of its ``RunCancelledError``), pending ones end at once, and
from then on admission in it raises that error before anything starts. A
stop is a cancel request (``CancelReason.BUDGET``), so the rules of one
apply: the earliest of a request, a deadline and a budget stop decides
(§3), and the grace period bounds a runner that does not stop (§18).
Scopes are stopped innermost first: a run in several takes the innermost
one's error as its cause.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from .._errors import BudgetExceededError
from .._usage import Budget, Usage
from ._meter import Tally
from ._run import CancelReason, State

if TYPE_CHECKING:
    from ._meter import Passed
    from ._parent_host import ParentHost
    from ._registry import Registry
    from ._run import Run

__all__ = ["check_admission", "remaining", "report"]

_RUNNING: Final = State.RUNNING
#: The tally of a scope with no report yet (read only).
_EMPTY: Final = Tally()

#: What each limit counts, for messages.
_UNITS: Final = {
    "max_requests": "requests",
    "max_input_tokens": "input tokens",
    "max_output_tokens": "output tokens",
    "max_total_tokens": "tokens (input + output)",
    "max_cost_usd": "US dollars",
}

#: Where each scope's budget is set, for messages.
_SET_BY: Final = {
    "run": "Subagent(budget=...)",
    "parent": "open_parent(budget=...)",
    "runtime": "Config(runtime_budget=...)",
}


def _scope_name(kind: str, scope: object) -> str:
    if kind == "run":
        run: Run = scope  # type: ignore[assignment]
        return f"run {run.run_id} (subagent {run.subagent.name!r})"
    if kind == "parent":
        host: ParentHost = scope  # type: ignore[assignment]
        return f"parent {host.owner!r}"
    return "the runtime"


def _error(kind: str, scope: object, passed: Passed, *, admission: bool) -> BudgetExceededError:
    field, limit, spent = passed
    name = _scope_name(kind, scope)
    what = _UNITS[field]
    if admission:
        message = (
            f"{name} has no budget left for a new run: it spent {spent:g} {what} of its "
            f"{field}={limit:g}; nothing was started. Finish with what the earlier runs "
            f"returned, or give new work a larger budget ({_SET_BY[kind]})"
        )
    else:
        message = (
            f"{name} spent {spent:g} {what}, more than its budget's {field}={limit:g}: the "
            f"{kind} was stopped, its live runs cancelled, and it admits no new run; give new "
            f"work a larger budget ({_SET_BY[kind]})"
        )
    run_id = subagent = None
    if kind == "run":
        run: Run = scope  # type: ignore[assignment]
        run_id, subagent = run.run_id, run.subagent.name
    return BudgetExceededError(
        message,
        scope=kind,
        limit=field,
        limit_value=limit,
        spent=spent,
        run_id=run_id,
        subagent=subagent,
    )


def report(run: Run, usage: Usage, *, returned: bool = False) -> None:
    """Count *usage* for live *run* and every scope above it; stop the scopes it
    took past their budget.

    Args:
        run: the run that spent it; a report of a run that settled is dropped.
        usage: what it spent.
        returned: its runner returned it (``Output(usage=...)``): the stops it
            causes never cancel the run itself.
    """
    if not run.state.live:
        return
    host: ParentHost = run.host  # type: ignore[assignment]
    registry = host.registry
    crossed = registry.meter.report(run, usage)
    if crossed is None:
        return
    exempt = run if returned else None
    now = registry.now()
    # Innermost first: a run in several stopped scopes keeps the first error.
    for kind, scope, tally, passed in crossed:
        error = tally.stopped = _error(kind, scope, passed, admission=False)
        if kind == "run":
            _stop_run(registry, scope, error, now, exempt)  # type: ignore[arg-type]
        elif kind == "parent":
            _stop_host(registry, scope, error, now, exempt)  # type: ignore[arg-type]
        else:
            for each in list(registry.parents.values()):
                _stop_live(each, error, now, exempt)


def _stop_live(
    host: ParentHost, error: BudgetExceededError, now: float, exempt: Run | None
) -> None:
    """Cancel *host*'s own live runs, pending ones first (they free no slot)."""
    live = list(host.live.values())
    for run in live:
        if run.state is not _RUNNING and run is not exempt:
            run.request_cancel(now, CancelReason.BUDGET, error)
    for run in live:
        if run.state is _RUNNING and run is not exempt:
            run.request_cancel(now, CancelReason.BUDGET, error)


def _stop_host(
    registry: Registry,
    host: ParentHost,
    error: BudgetExceededError,
    now: float,
    exempt: Run | None,
) -> None:
    """Cancel every live run *host* started, and everything they delegated."""
    for run in list(host.live.values()):
        _stop_nested(registry, run, error, now, exempt)
    _stop_live(host, error, now, exempt)


def _stop_run(
    registry: Registry, run: Run, error: BudgetExceededError, now: float, exempt: Run | None
) -> None:
    """Cancel *run* and everything it delegated."""
    _stop_nested(registry, run, error, now, exempt)
    if run is not exempt:
        run.request_cancel(now, CancelReason.BUDGET, error)


def _stop_nested(
    registry: Registry, run: Run, error: BudgetExceededError, now: float, exempt: Run | None
) -> None:
    if run.subagent.children:
        nested = registry.parents.get(f"{run.owner}/{run.run_id}")
        if nested is not None:
            _stop_host(registry, nested, error, now, exempt)


def check_admission(host: ParentHost) -> None:
    """Refuse a new run of *host*'s parent if a scope it would be in was stopped or
    has a limit with nothing left.

    Raises:
        BudgetExceededError: naming the scope and the limit.
    """
    registry = host.registry
    empty = _EMPTY
    scope: ParentHost | None = host
    while scope is not None:
        _check_scope("parent", scope, scope.spent or empty, scope.budget)
        run = scope.enclosing
        if run is None:
            break
        _check_scope("run", run, run.spent or empty, run.subagent.budget)
        scope = run.host  # type: ignore[assignment]
    meter = registry.meter
    _check_scope("runtime", meter, meter.spent, meter.budget)


def _check_scope(kind: str, scope: object, tally: Tally, budget: Budget | None) -> None:
    stopped = tally.stopped
    if stopped is not None:
        was = (stopped.limit, stopped.limit_value, stopped.spent)
        raise _error(kind, scope, was, admission=True) from stopped
    if budget is not None:
        passed = tally.exhausted(budget)
        if passed is not None:
            raise _error(kind, scope, passed, admission=True)


def remaining(run: Run) -> Budget | None:
    """The tightest remaining limits over every scope that contains *run*, clamped
    at 0, as a :class:`Budget`; ``None`` when no scope has a budget."""
    host: ParentHost = run.host  # type: ignore[assignment]
    meter = host.registry.meter
    if not meter.budgeted:
        return None
    tightest: list[int | float | None] | None = None
    node: Run | None = run
    pairs: list[tuple[Tally, Budget | None]] = []
    while node is not None:
        pairs.append((node.spent or _EMPTY, node.subagent.budget))
        host = node.host  # type: ignore[assignment]
        pairs.append((host.spent or _EMPTY, host.budget))
        node = host.enclosing
    pairs.append((meter.spent, meter.budget))
    for tally, budget in pairs:
        if budget is None:
            continue
        left = tally.left(budget)
        if tightest is None:
            tightest = list(left)
            continue
        for index, value in enumerate(left):
            if value is not None:
                current = tightest[index]
                tightest[index] = value if current is None else min(current, value)
    if tightest is None:
        return None
    return Budget(*tightest)
