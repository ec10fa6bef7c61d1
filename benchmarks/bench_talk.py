"""Row 14: a child talking back while it runs (contract §19, §20), against raw Trio.

* 14a — progress reports from one run: ``ctx.progress(message, progress=i,
  total=n)`` in a loop inside one child, against assigning the same snapshot
  (a tuple) to a shared attribute from a Trio task. A progress report keeps
  only the latest, O(1) (§19), and a parent reads it when it looks: the
  nearest hand-written equivalent is a snapshot the reader picks up, not a
  memory channel (``send_nowait`` on a channel keeps every report until
  someone drains it, or fails when its buffer is full). The same loop with
  numbers only (``ctx.progress(progress=i)``) is in the note: the difference
  is the message's trimming.
* 14b — a question and its answer: a child ``await ctx.ask(...)`` in a loop;
  a task of the parent waits for the run (``parent.wait`` answers
  ``input_required`` as soon as a question is open) and answers it
  (``parent.answer``). Against two Trio tasks doing the same round trip by
  hand: the asker publishes its question and sets a ``trio.Event``; the
  other task, woken, stores the answer and sets the asker's ``trio.Event``.
* 14c — usage reports: 1,000 live runs three levels deep (10 runs, each
  delegating to 10, each delegating to 10: the 1,000 leaves report), 100
  rounds of ``ctx.add_usage(td.Usage(...))`` over the leaves' contexts,
  100,000 reports, against the same rounds adding the report's seven
  fields to a plain counter per leaf. Each report counts in eight tallies
  (the leaf's own, the leaf, the three parents, the two runs above, the
  runtime); the note has the same reports with a budget on every scope,
  none of them reached.
* 14d — the check (not a timing) that a usage report under budget allocates
  nothing: ``sys.getallocatedblocks()`` around a batch of 100,000 reports
  with a budget on every scope, and the batch's peak of traced memory
  (``tracemalloc``) over its start.

The reports of 14c are made by one task over the leaves' contexts (each
leaf parked in its runner): ``add_usage`` is synchronous and does not look
at the calling task, and timing the loop alone leaves out the scheduler
rounds a runner would take between reports.

Run as ``python -m benchmarks.bench_talk [--full] [--passes N]`` it measures
these rows alone.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable
from typing import Any, Final

import trio
import trio.testing

import trio_delegate as td

from ._allocations import allocations
from ._model import Figure, Options, Row, Sample, Status, judge, paired_ratios
from ._standalone import run_alone
from ._timing import clock, interleaved

__all__ = ["ALLOCATED_BLOCKS_TARGET", "bench"]

#: Net blocks a batch of usage reports under budget may leave allocated.
ALLOCATED_BLOCKS_TARGET: Final = 0

#: How closely passes must agree on an in-process CPU-time ratio.
_RATIO_TOLERANCE: Final = 0.05

_TASK: Final = "Work, and tell the parent how it goes."
_MESSAGE: Final = "Reading the notes"
#: Fan-out per level of the usage tree: 10 x 10 x 10 leaves.
_FAN_OUT: Final = 10
_LEAVES: Final = _FAN_OUT**3
_REPORT: Final = td.Usage(requests=1, input_tokens=120, output_tokens=30)
#: Budgets no report of the row comes near: every scope is checked, none stops.
_ROOMY: Final = td.Budget(max_total_tokens=2**62, max_requests=2**62)


def _us(sample: Sample, digits: int = 3) -> str:
    return sample.show(f"{{:.{digits}f}}", "µs")


# -- 14a: progress ------------------------------------------------------------------


class _Snapshot:
    __slots__ = ("latest",)

    def __init__(self) -> None:
        self.latest: tuple[str, float, float, int] | None = None


async def _snapshot_loop(n: int) -> float:
    box = _Snapshot()
    elapsed = 0.0

    async def child() -> None:
        nonlocal elapsed
        started = clock()
        for i in range(n):
            box.latest = (_MESSAGE, i, n, i + 1)
        elapsed = clock() - started

    async with trio.open_nursery() as nursery:
        nursery.start_soon(child)
    return elapsed


async def _progress_loop(n: int, message: bool) -> float:
    elapsed = 0.0

    async def runner(ctx: td.ChildContext) -> None:
        nonlocal elapsed
        progress = ctx.progress
        started = clock()
        if message:
            for i in range(n):
                progress(_MESSAGE, progress=i, total=n)
        else:
            for i in range(n):
                progress(progress=i)
        elapsed = clock() - started

    subagents = [td.Subagent("reporter", runner, description="reports progress")]
    async with td.open_runtime(subagents) as runtime, runtime.open_parent() as parent:
        await parent.delegate("reporter", _TASK)
    return elapsed


def progress_row(options: Options) -> Row:
    n = 200_000 if options.full else 100_000
    samples = interleaved(
        {
            "snapshot": lambda: trio.run(_snapshot_loop, n),
            "progress": lambda: trio.run(_progress_loop, n, True),
            "numbers": lambda: trio.run(_progress_loop, n, False),
        },
        options.repetitions,
        per=n,
    )
    us = {name: sample.scaled(1e6) for name, sample in samples.items()}
    ratio = paired_ratios(us["progress"], us["snapshot"])
    numbers = paired_ratios(us["numbers"], us["snapshot"])
    per_second = 1e6 / us["progress"].median
    return Row(
        "14a",
        f"Progress: ctx.progress(message, progress=i, total=n) x{n:,} in one run",
        Status.INFO,
        baseline=f"snapshot assigned {_us(us['snapshot'])}",
        measured=f"{_us(us['progress'])}\n{per_second:,.0f} calls/s",
        comparison=f"{ratio.show('{:.1f}', 'x')} snapshot (CPU time)",
        note=(
            "µs per report (CPU time); the baseline assigns the same snapshot, a tuple, to a "
            "shared attribute (the latest report is all a run keeps, §19); numbers only "
            f"(ctx.progress(progress=i)) {_us(us['numbers'])}, "
            f"{numbers.median:.1f}x snapshot: the rest is the message's trimming and cut"
        ),
        data={
            "reports": n,
            **{name: sample.to_json() for name, sample in us.items()},
            "ratio": ratio.to_json(),
            "numbers_ratio": numbers.to_json(),
        },
        figures=(
            Figure("progress ratio", ratio.median, _RATIO_TOLERANCE),
            Figure("numbers-only ratio", numbers.median, _RATIO_TOLERANCE),
        ),
    )


# -- 14b: a question and its answer ---------------------------------------------------


class _Exchange:
    """The hand-written round trip's shared state: a question, an answer, two events."""

    __slots__ = ("answer", "answered", "asked", "question")

    def __init__(self) -> None:
        self.question: str | None = None
        self.answer: str | None = None
        self.asked = trio.Event()
        self.answered = trio.Event()


async def _events_loop(n: int) -> float:
    exchange = _Exchange()
    elapsed = 0.0

    async def asker() -> None:
        nonlocal elapsed
        started = clock()
        for _ in range(n):
            exchange.answered = trio.Event()
            exchange.question = "Go on?"
            exchange.asked.set()
            await exchange.answered.wait()
            assert exchange.answer == "yes"
        elapsed = clock() - started

    async def answerer() -> None:
        for _ in range(n):
            await exchange.asked.wait()
            exchange.asked = trio.Event()
            exchange.answer = "yes"
            exchange.answered.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(answerer)
        nursery.start_soon(asker)
    return elapsed


async def _ask_loop(n: int) -> float:
    elapsed = 0.0

    async def runner(ctx: td.ChildContext) -> None:
        nonlocal elapsed
        started = clock()
        for _ in range(n):
            answer = await ctx.ask("Go on?")
            assert answer == "yes"
        elapsed = clock() - started

    subagents = [td.Subagent("asker", runner, description="asks", asks=True)]
    async with td.open_runtime(subagents) as runtime, runtime.open_parent() as parent:
        run_id = (await parent.start("asker", _TASK)).run_id
        while True:
            seen = await parent.wait(run_id)
            if not isinstance(seen, td.RunHandle):
                break
            parent.answer(run_id, "yes")
    return elapsed


def ask_row(options: Options) -> Row:
    n = 20_000 if options.full else 10_000
    samples = interleaved(
        {
            "events": lambda: trio.run(_events_loop, n),
            "ask": lambda: trio.run(_ask_loop, n),
        },
        options.repetitions,
        per=n,
    )
    us = {name: sample.scaled(1e6) for name, sample in samples.items()}
    ratio = paired_ratios(us["ask"], us["events"])
    return Row(
        "14b",
        f"Question and answer: await ctx.ask(...) answered by a parent task, x{n:,}",
        Status.INFO,
        baseline=f"two trio.Events {_us(us['events'], 1)}",
        measured=_us(us["ask"], 1),
        comparison=f"{ratio.show('{:.1f}', 'x')} events (CPU time)",
        note=(
            "µs per round trip (CPU time), timed in the asking child; the parent's task "
            "waits for the run (parent.wait answers input_required) and answers "
            "(parent.answer); the baseline's asker publishes its question and sets a "
            "trio.Event, the other task stores the answer and sets the asker's trio.Event"
        ),
        data={
            "round_trips": n,
            **{name: sample.to_json() for name, sample in us.items()},
            "ratio": ratio.to_json(),
        },
        figures=(Figure("round-trip ratio", ratio.median, _RATIO_TOLERANCE),),
    )


# -- 14c and 14d: usage reports from 1,000 live runs three levels deep ---------------


class _Counter:
    __slots__ = ("cache_creation", "cache_read", "cost", "input", "output", "reasoning", "requests")

    def __init__(self) -> None:
        self.requests = 0
        self.input = 0
        self.output = 0
        self.cache_read = 0
        self.cache_creation = 0
        self.reasoning = 0
        self.cost = 0.0


def _counted(counter: _Counter, usage: td.Usage) -> None:
    counter.requests += usage.requests
    counter.input += usage.input_tokens
    counter.output += usage.output_tokens
    counter.cache_read += usage.cache_read_input_tokens
    counter.cache_creation += usage.cache_creation_input_tokens
    counter.reasoning += usage.reasoning_output_tokens
    counter.cost += usage.cost_usd


async def _counter_loop(rounds: int) -> float:
    counters = [_Counter() for _ in range(_LEAVES)]
    usage = _REPORT
    started = clock()
    for _ in range(rounds):
        for counter in counters:
            _counted(counter, usage)
    return clock() - started


async def _with_leaves(budgeted: bool, work: Callable[[list[td.ChildContext]], Any]) -> Any:
    """Hold 1,000 live leaves three levels deep; call *work* with their contexts."""
    leaves: list[td.ChildContext] = []
    release = trio.Event()
    budget = _ROOMY if budgeted else None

    async def fan_out(ctx: td.ChildContext) -> None:
        assert ctx.parent is not None
        child = "middle" if ctx.subagent == "top" else "leaf"
        handles = [await ctx.parent.start(child, _TASK) for _ in range(_FAN_OUT)]
        for handle in handles:
            await ctx.parent.wait(handle.run_id)

    async def leaf(ctx: td.ChildContext) -> None:
        leaves.append(ctx)
        await release.wait()

    subagents = [
        td.Subagent("top", fan_out, description="delegates", children=("middle",), budget=budget),
        td.Subagent("middle", fan_out, description="delegates", children=("leaf",), budget=budget),
        td.Subagent("leaf", leaf, description="reports usage", budget=budget),
    ]
    size = 2 * (_LEAVES + _FAN_OUT**2 + _FAN_OUT)
    config = td.Config(
        max_concurrent_runs=size,
        max_live_runs=size,
        max_depth=3,
        runtime_budget=budget,
    )
    async with (
        td.open_runtime(subagents, config=config) as runtime,
        runtime.open_parent(budget=budget) as parent,
    ):
        async with trio.open_nursery() as nursery:
            for _ in range(_FAN_OUT):
                nursery.start_soon(parent.delegate, "top", _TASK)
            await trio.testing.wait_all_tasks_blocked()
            if len(leaves) != _LEAVES:
                raise RuntimeError(f"{len(leaves)} leaves live, expected {_LEAVES}")
            result = work(leaves)
            release.set()
        spent = runtime.usage
    return result, spent


def _reports(leaves: list[td.ChildContext], rounds: int) -> float:
    usage = _REPORT
    adders = [ctx.add_usage for ctx in leaves]
    started = clock()
    for _ in range(rounds):
        for add in adders:
            add(usage)
    return clock() - started


async def _usage_loop(rounds: int, budgeted: bool) -> float:
    gc.collect()
    elapsed, spent = await _with_leaves(budgeted, lambda leaves: _reports(leaves, rounds))
    if spent.requests != rounds * _LEAVES:
        raise RuntimeError(f"the runtime counted {spent.requests} reports of {rounds * _LEAVES}")
    seconds: float = elapsed
    return seconds


def _allocations(leaves: list[td.ChildContext], rounds: int) -> dict[str, int]:
    usage = _REPORT
    adders = [ctx.add_usage for ctx in leaves]
    # The first report of each leaf makes its tallies; this one also takes every
    # count it adds to past 256, out of CPython's cache of small integers, which
    # a count leaves once (one block for good), not once per report.
    warm_up = td.Usage(requests=300, input_tokens=300, output_tokens=300)
    for add in adders:
        add(warm_up)

    def batch(rounds: int) -> None:
        for _ in range(rounds):
            for add in adders:
                add(usage)

    return allocations(batch, rounds)


async def _allocation_check(rounds: int) -> dict[str, int]:
    found, _ = await _with_leaves(True, lambda leaves: _allocations(leaves, rounds))
    checked: dict[str, int] = found
    return checked


def usage_rows(options: Options) -> list[Row]:
    rounds = 100
    reports = rounds * _LEAVES
    samples = interleaved(
        {
            "counter": lambda: trio.run(_counter_loop, rounds),
            "usage": lambda: trio.run(_usage_loop, rounds, False),
            "budgeted": lambda: trio.run(_usage_loop, rounds, True),
        },
        options.repetitions,
        per=reports,
    )
    us = {name: sample.scaled(1e6) for name, sample in samples.items()}
    ratio = paired_ratios(us["usage"], us["counter"])
    budgeted = paired_ratios(us["budgeted"], us["counter"])
    timing = Row(
        "14c",
        f"Usage: {reports:,} ctx.add_usage reports from {_LEAVES:,} live runs three levels deep",
        Status.INFO,
        baseline=f"plain counter {_us(us['counter'])}",
        measured=f"{_us(us['usage'])}\nbudgeted {_us(us['budgeted'])}",
        comparison=(
            f"{ratio.show('{:.1f}', 'x')} counter (CPU time)\n"
            f"budgeted {budgeted.show('{:.1f}', 'x')}"
        ),
        note=(
            "µs per report (CPU time), the same td.Usage each time; a report counts in eight "
            "tallies (the leaf's own, the leaf, three parents, two runs above, the runtime), "
            "each field saturating; the baseline adds the seven fields to one counter per "
            "leaf; budgeted: a budget on every subagent, the parent and the runtime, never "
            "reached"
        ),
        data={
            "reports": reports,
            "leaves": _LEAVES,
            **{name: sample.to_json() for name, sample in us.items()},
            "ratio": ratio.to_json(),
            "budgeted_ratio": budgeted.to_json(),
        },
        figures=(
            Figure("usage ratio", ratio.median, _RATIO_TOLERANCE),
            Figure("budgeted ratio", budgeted.median, _RATIO_TOLERANCE),
        ),
    )
    found = trio.run(_allocation_check, rounds)
    check = Row(
        "14d",
        f"Usage under budget: blocks left allocated by {reports:,} reports",
        judge(found["blocks"], ALLOCATED_BLOCKS_TARGET, None),
        baseline="",
        measured=f"{found['blocks']:+,} blocks\n{found['traced_net']:+,} B traced",
        comparison=f"peak {found['traced_peak']:,} B over the start",
        target=f"{ALLOCATED_BLOCKS_TARGET} blocks",
        note=(
            "a check, not a timing: sys.getallocatedblocks() around a batch of reports with "
            "a budget on every scope (after a first report of each leaf made its tallies and "
            "took its counts past CPython's small integers), then tracemalloc around a second "
            "batch; the peak is the integers CPython makes for the sums and frees at once"
        ),
        data={"reports": reports, **found},
        figures=(
            Figure("blocks", found["blocks"], 0, absolute=True),
            Figure("traced net bytes", found["traced_net"], 0, absolute=True),
        ),
    )
    return [timing, check]


def bench(options: Options) -> list[Row]:
    rows = [progress_row(options), ask_row(options)]
    rows.extend(usage_rows(options))
    return rows


if __name__ == "__main__":
    sys.exit(run_alone("bench_talk", bench, sys.argv[1:]))
