"""Contract §20 as a property: random reports against random budgets of the three
scopes, checked against a small simulation of the rules.

Every run of one parent reports at its own whole seconds (no two reports at the
same instant, so the order is the clock's), then works half a second more and
returns. The simulation counts a report only while its run is live, stops a
scope once what it spent is strictly over its limit (innermost first), cancels
the live runs in it with that scope as their cause, and refuses admission in a
scope that was stopped or has nothing left.
"""

from __future__ import annotations

from typing import Any

import attrs
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

import trio_delegate as td

LIMITS = st.one_of(st.none(), st.integers(0, 60))
#: A parent or runtime limit of 0 admits nothing at all (test_budgets.py has it).
SCOPE_LIMITS = st.one_of(st.none(), st.integers(1, 60))


@attrs.frozen
class Case:
    runtime_limit: int | None
    parent_limit: int | None
    #: Per run: its own limit, and its reports as (second, tokens).
    runs: tuple[tuple[int | None, tuple[tuple[int, int], ...]], ...]


@st.composite
def cases(draw: st.DrawFn) -> Case:
    count = draw(st.integers(1, 4))
    seconds = draw(st.permutations(range(1, 13)))
    runs = []
    used = 0
    for _ in range(count):
        many = draw(st.integers(0, 3))
        times = sorted(seconds[used : used + many])
        used += many
        reports = tuple((time, draw(st.integers(0, 25))) for time in times)
        runs.append((draw(LIMITS), reports))
    return Case(draw(SCOPE_LIMITS), draw(SCOPE_LIMITS), tuple(runs))


def simulate(case: Case) -> tuple[list[str | None], int, bool]:
    """Each run's cause scope (``None``: it completed), what was counted, and
    whether a new run would be admitted at the end."""
    events = sorted(
        (time, index, tokens)
        for index, (_, reports) in enumerate(case.runs)
        for time, tokens in reports
    )
    ends = [reports[-1][0] + 0.5 if reports else 0.5 for _, reports in case.runs]
    spent = [0] * len(case.runs)
    total = 0
    cause: list[str | None] = [None] * len(case.runs)
    stopped = {"parent": False, "runtime": False}
    run_stopped = [False] * len(case.runs)
    for time, index, tokens in events:
        if cause[index] is not None or ends[index] < time:
            continue  # it settled: the report is dropped (it is never made)
        spent[index] += tokens
        total += tokens
        live = [i for i in range(len(case.runs)) if cause[i] is None and ends[i] > time]
        limit = case.runs[index][0]
        if limit is not None and not run_stopped[index] and spent[index] > limit:
            run_stopped[index] = True
            cause[index] = "run"
        for scope, scope_limit in (("parent", case.parent_limit), ("runtime", case.runtime_limit)):
            if scope_limit is not None and not stopped[scope] and total > scope_limit:
                stopped[scope] = True
                for i in live:
                    if cause[i] is None:
                        cause[i] = scope
    admits = not any(stopped.values()) and all(
        limit is None or total < limit for limit in (case.parent_limit, case.runtime_limit)
    )
    return cause, total, admits


def reporter(reports: tuple[tuple[int, int], ...]) -> Any:
    async def runner(ctx: td.ChildContext) -> str:
        start = trio.current_time()
        for time, tokens in reports:
            await trio.sleep_until(start + time)
            ctx.add_usage(td.Usage(input_tokens=tokens))
        await trio.sleep(0.5)
        return "done"

    return runner


async def play(case: Case) -> tuple[list[str | None], int, bool]:
    subagents = [
        td.Subagent(
            f"r{index}",
            reporter(reports),
            budget=None if limit is None else td.Budget(max_input_tokens=limit),
        )
        for index, (limit, reports) in enumerate(case.runs)
    ]
    runtime_budget = (
        None if case.runtime_limit is None else td.Budget(max_input_tokens=case.runtime_limit)
    )
    parent_budget = (
        None if case.parent_limit is None else td.Budget(max_input_tokens=case.parent_limit)
    )
    config = td.Config(fail_closed=False, runtime_budget=runtime_budget)
    causes: list[str | None] = []
    async with (
        td.open_runtime(subagents, config=config) as rt,
        rt.open_parent(budget=parent_budget) as parent,
    ):
        handles = [await parent.start(f"r{index}", "go") for index in range(len(case.runs))]
        for handle in handles:
            try:
                await parent.wait(handle.run_id)
            except td.RunCancelledError as exc:
                cause = exc.__cause__
                causes.append(cause.scope if isinstance(cause, td.BudgetExceededError) else "?")
            else:
                causes.append(None)
        try:
            await parent.start("r0", "again")
        except td.BudgetExceededError:
            admits = False
        else:
            admits = True
        spent = parent.usage().input_tokens
        assert spent == sum(parent.usage(h.run_id).input_tokens for h in handles)
    assert rt.usage.input_tokens == spent
    return causes, spent, admits


@settings(max_examples=150, deadline=None)
@given(cases())
def test_budget_stops_follow_the_rules(case: Case) -> None:
    actual = trio.run(play, case, clock=trio.testing.MockClock(autojump_threshold=0))
    assert actual == simulate(case)
