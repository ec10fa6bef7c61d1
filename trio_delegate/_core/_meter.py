"""What runs spent, added up the delegation tree (contract §20).

A report counts once in each scope that contains its run: the run itself,
the parent that started it, the run that holds that parent (for a nested
one), its parent, and so on up to the runtime. Each scope keeps a
:class:`Tally`, made at its first report: a run that reports nothing costs
nothing. A report is a walk of the scopes above its run, O(depth), adding
into mutable tallies: nothing is allocated while every scope is under its
budget (costs aside, which add as exact decimals). When a scope passes a
limit, ``_spending`` stops it.
"""

from __future__ import annotations

import decimal
from typing import TYPE_CHECKING, Final, final

from .._usage import EXACT as _EXACT
from .._usage import MAX_COUNT, Budget, Usage, cost_decimal, cost_float

if TYPE_CHECKING:
    from .._errors import BudgetExceededError
    from ._parent_host import ParentHost
    from ._run import Run

__all__ = ["Meter", "Tally", "Passed", "usage_of"]

#: A limit a scope passed or has nothing left of: ``(field, limit, spent)``.
Passed = tuple[str, int | float, int | float]

_ZERO: Final = decimal.Decimal(0)


@final
class Tally:
    """What one scope spent so far, added in place.

    Attributes:
        stopped: the error of the budget stop that ended this scope, once it
            was stopped; it stays stopped for its lifetime.
        own: a run's tally only: what the run reported itself, without its
            nested runs (its span tells that), made at its first own report.
    """

    __slots__ = (
        "cache_creation",
        "cache_read",
        "cost",
        "input",
        "output",
        "own",
        "reasoning",
        "requests",
        "stopped",
    )

    def __init__(self) -> None:
        self.requests = 0
        self.input = 0
        self.output = 0
        self.cache_read = 0
        self.cache_creation = 0
        self.reasoning = 0
        self.cost = _ZERO
        self.stopped: BudgetExceededError | None = None
        self.own: Tally | None = None

    def add(self, usage: Usage, cost: decimal.Decimal | None) -> None:
        """Add *usage*, each count saturating at 2**63-1; its cost is *cost*, the
        exact decimal of ``usage.cost_usd`` (``None`` for none), made once per report."""
        value = self.requests + usage.requests
        self.requests = value if value <= MAX_COUNT else MAX_COUNT
        value = self.input + usage.input_tokens
        self.input = value if value <= MAX_COUNT else MAX_COUNT
        value = self.output + usage.output_tokens
        self.output = value if value <= MAX_COUNT else MAX_COUNT
        value = self.cache_read + usage.cache_read_input_tokens
        self.cache_read = value if value <= MAX_COUNT else MAX_COUNT
        value = self.cache_creation + usage.cache_creation_input_tokens
        self.cache_creation = value if value <= MAX_COUNT else MAX_COUNT
        value = self.reasoning + usage.reasoning_output_tokens
        self.reasoning = value if value <= MAX_COUNT else MAX_COUNT
        if cost is not None:
            self.cost = _EXACT.add(self.cost, cost)

    def usage(self) -> Usage:
        """What was spent, as a value."""
        return Usage(
            self.requests,
            self.input,
            self.output,
            self.cache_read,
            self.cache_creation,
            self.reasoning,
            cost_float(self.cost),
        )

    def total(self) -> int:
        value = self.input + self.output
        return value if value <= MAX_COUNT else MAX_COUNT

    def passed(self, budget: Budget) -> Passed | None:
        """The first limit of *budget* that what was spent is strictly over, if any."""
        limit = budget.max_requests
        if limit is not None and self.requests > limit:
            return "max_requests", limit, self.requests
        limit = budget.max_input_tokens
        if limit is not None and self.input > limit:
            return "max_input_tokens", limit, self.input
        limit = budget.max_output_tokens
        if limit is not None and self.output > limit:
            return "max_output_tokens", limit, self.output
        limit = budget.max_total_tokens
        if limit is not None and self.total() > limit:
            return "max_total_tokens", limit, self.total()
        cost = budget.max_cost_usd
        if cost is not None and self.cost > cost_decimal(cost):
            return "max_cost_usd", cost, cost_float(self.cost)
        return None

    def exhausted(self, budget: Budget) -> Passed | None:
        """The first limit of *budget* with nothing left (spent >= limit), if any."""
        for field, limit, spent in self._counts(budget):
            if limit is not None and spent >= limit:
                return field, limit, spent
        cost = budget.max_cost_usd
        if cost is not None and self.cost >= cost_decimal(cost):
            return "max_cost_usd", cost, cost_float(self.cost)
        return None

    def left(self, budget: Budget) -> tuple[int | float | None, ...]:
        """What is left of each limit of *budget*, clamped at 0 (``None``: no limit),
        in the order of ``Budget``'s fields."""
        cost = budget.max_cost_usd
        return (
            *(
                None if limit is None else max(limit - spent, 0)
                for _, limit, spent in self._counts(budget)
            ),
            None
            if cost is None
            else cost_float(max(_EXACT.subtract(cost_decimal(cost), self.cost), _ZERO)),
        )

    def _counts(self, budget: Budget) -> tuple[tuple[str, int | None, int], ...]:
        return (
            ("max_requests", budget.max_requests, self.requests),
            ("max_input_tokens", budget.max_input_tokens, self.input),
            ("max_output_tokens", budget.max_output_tokens, self.output),
            ("max_total_tokens", budget.max_total_tokens, self.total()),
        )


def usage_of(tally: Tally | None) -> Usage:
    """What a scope spent: zero when it never had a report."""
    return Usage() if tally is None else tally.usage()


@final
class Meter:
    """The runtime's scope: what every run spent, and its budget.

    Attributes:
        spent: the runtime's tally.
        budget: ``Config.runtime_budget``.
        budgeted: whether any scope may have a budget (a run's subagent, a
            parent, the runtime): admission checks budgets only then.
    """

    __slots__ = ("budget", "budgeted", "spent")

    def __init__(self, budget: Budget | None, budgeted: bool) -> None:
        self.spent = Tally()
        self.budget = budget
        self.budgeted = budgeted or budget is not None

    def report(self, run: Run, usage: Usage) -> list[tuple[str, object, Tally, Passed]] | None:
        """Add *usage* to every scope that contains live *run*.

        A report of a run in a scope that was stopped already is dropped: a
        stopped scope's spend stays where the report that crossed its limit
        took it, whatever its runs report while they stop (in a shielded
        cleanup, say), so the overrun is at most that one report.

        Returns:
            the scopes whose budget this report took past a limit, innermost
            first, as ``(kind, scope, tally, passed)``; ``None`` (the usual
            answer, with nothing made) when none.
        """
        if self.budgeted and self._in_stopped_scope(run):
            return None
        crossed: list[tuple[str, object, Tally, Passed]] | None = None
        cost = cost_decimal(usage.cost_usd) if usage.cost_usd else None
        own = run.spent
        if own is None:
            own = run.spent = Tally()
        if own.own is None:
            own.own = Tally()
        own.own.add(usage, cost)
        node: Run | None = run
        while node is not None:
            tally = node.spent
            if tally is None:
                tally = node.spent = Tally()
            tally.add(usage, cost)
            budget = node.subagent.budget
            if budget is not None and tally.stopped is None:
                passed = tally.passed(budget)
                if passed is not None:
                    crossed = crossed or []
                    crossed.append(("run", node, tally, passed))
            host: ParentHost = node.host  # type: ignore[assignment]
            tally = host.spent
            if tally is None:
                tally = host.spent = Tally()
            tally.add(usage, cost)
            budget = host.budget
            if budget is not None and tally.stopped is None:
                passed = tally.passed(budget)
                if passed is not None:
                    crossed = crossed or []
                    crossed.append(("parent", host, tally, passed))
            node = host.enclosing
        tally = self.spent
        tally.add(usage, cost)
        budget = self.budget
        if budget is not None and tally.stopped is None:
            passed = tally.passed(budget)
            if passed is not None:
                crossed = crossed or []
                crossed.append(("runtime", self, tally, passed))
        return crossed

    def _in_stopped_scope(self, run: Run) -> bool:
        """Whether a scope that contains *run* was stopped by its budget."""
        if self.spent.stopped is not None:
            return True
        node: Run | None = run
        while node is not None:
            tally = node.spent
            if tally is not None and tally.stopped is not None:
                return True
            host: ParentHost = node.host  # type: ignore[assignment]
            tally = host.spent
            if tally is not None and tally.stopped is not None:
                return True
            node = host.enclosing
        return False
