"""The runtime against its reference model, as a Hypothesis state machine.

Every rule performs one operation on a real runtime (in a Trio run hosted by
``TrioThread``, on a manual ``MockClock``) and on ``LifecycleModel``, and
compares the two answers. After every step the invariants compare the whole
state: statuses, fail-closed verdicts, the clock, live runs and the runners'
trace (every step of every runner, with its time), plus checks that need no
model at all: terminal states never change, at most ``max_concurrent_runs``
run per parent, pending runs start in admission order, a timed wait leaves
its child as it was, and every runner's ``finally`` ran once its parent or
runtime closed.

Each example draws a store (none, ``MemoryStore``, or an SQLite file) and
retention limits (often small, so runs are evicted and answered as expired
or from the store), and mixes continuations and several starts issued in
the same scheduler tick by separate tasks into the operations.

The operations reach the runtime through :class:`PythonSurface`, the public
Python API. The model-facing tools (``parent.tools()``) answer the same
questions in another form; a surface that goes through them can be added
beside it to fuzz that layer with the same rules and model.

A second, smaller machine (:class:`QuestionsMachine`) drives runs that
report progress, ask questions and spend (contract §19-§20) through their
runners' commands, and answers, declines, cancels and lets asks and
deadlines run out at random, under budgets drawn per subagent and per
parent, with no store, a ``MemoryStore`` or an SQLite file, against its own
model of each run and parent: its status, its open questions, its latest
report, what each ``ask`` ended with, its usage, each budget stop and its
cause, the pending runs it ends, and the admissions a stopped scope
refuses.
"""

from __future__ import annotations

import functools
import math
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar, TypeVarTuple

import attrs
import pytest
import trio
from hypothesis import note, reject, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)

import trio_delegate as td
import trio_delegate.testing as tdt
from trio_delegate.testing import Answer, IndeterminateError, LifecycleModel

from .stores import WrappedStore

S = td.RunStatus
T = TypeVar("T")
Ts = TypeVarTuple("Ts")
NAMES = ("alpha", "beta", "gamma", "boss")
BOSS_CHILDREN = ("alpha", "beta", "boss")
OWNERS = ("p0", "p1", "p2")


def mostly_none(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """None three times in four, else a value of *strategy*."""
    return st.one_of(st.none(), st.none(), st.none(), strategy)


#: What start and delegate name: mostly registered subagents, sometimes not.
SUBAGENT_NAMES = st.sampled_from([*NAMES, *NAMES, "nope"])
#: An id no runtime ever issued (rules draw None for it, now and then).
BOGUS_ID = "run_" + "0" * 32

# -- what the strategies draw ---------------------------------------------------


@attrs.frozen
class Setup:
    """The runtime's configuration, drawn once per example."""

    max_concurrent_runs: int
    max_live_runs: int
    max_depth: int
    subagent_timeout: int | None
    timeouts: tuple[Any, ...]  # Subagent.timeout_seconds, per NAMES
    fail_closed: bool
    max_result_bytes: int
    store: Literal["none", "memory", "sqlite"]
    retention_seconds: float
    retention_max_runs: int

    def config(self) -> td.Config:
        return td.Config(
            subagent_timeout_seconds=self.subagent_timeout,
            max_concurrent_runs=self.max_concurrent_runs,
            max_live_runs=self.max_live_runs,
            max_depth=self.max_depth,
            fail_closed=self.fail_closed,
            max_result_bytes=self.max_result_bytes,
            retention_seconds=self.retention_seconds,
            retention_max_runs=self.retention_max_runs,
        )


@attrs.frozen
class Nested:
    """A ``Start`` or ``Delegate`` step, with the script its run will play."""

    kind: Literal["start", "delegate"]
    subagent: str
    plan: Plan


@attrs.frozen
class Plan:
    """A script before it is given task names: steps, then a final step."""

    steps: tuple[PlanStep, ...]
    final: tdt.Return | tdt.Raise | tdt.Hang | None
    cleanup: int


@attrs.frozen
class ParentRef:
    number: int
    owner: str


@attrs.frozen
class RunRef:
    number: int
    parent: ParentRef


@st.composite
def setups(draw: st.DrawFn) -> Setup:
    # Short deadlines, against runs of up to a few seconds: many runs time out,
    # some while others wait for a slot.
    timeout = st.one_of(st.just(td.INHERIT), st.none(), st.integers(1, 6).map(float))
    return Setup(
        max_concurrent_runs=draw(st.sampled_from([1, 1, 2, 3])),
        # Small limits make admissions fail; the large one lets nesting run free.
        max_live_runs=draw(st.integers(2, 8) | st.just(10_000)),
        max_depth=draw(st.integers(1, 3)),
        subagent_timeout=draw(st.one_of(st.none(), st.integers(1, 8), st.integers(1, 8))),
        timeouts=tuple(draw(timeout) for _ in NAMES),
        fail_closed=draw(st.booleans()),
        max_result_bytes=draw(st.sampled_from([20, 1_000_000])),
        store=draw(st.sampled_from(["none", "none", "memory", "sqlite"])),
        # Small limits evict runs while the example still asks about them.
        retention_seconds=draw(st.sampled_from([1e9, 1e9, 4.0, 12.0])),
        retention_max_runs=draw(st.sampled_from([100_000, 100_000, 2, 4])),
    )


RESULTS = st.sampled_from(
    [None, 0, 7, "ok", {"k": [1, 2]}, ("tu", ("ple",)), "x" * 40, b"raw", math.nan, "\ud800"]
)
FINALS = st.one_of(
    st.none(),
    st.builds(tdt.Return, RESULTS),
    st.builds(tdt.Raise, st.sampled_from([RuntimeError, KeyError])),
    st.just(tdt.Hang()),
)
SLEEP = st.builds(tdt.Sleep, st.integers(0, 8))
LEAF_STEPS = st.one_of(
    SLEEP,
    SLEEP,
    st.just(tdt.Checkpoint()),
    st.builds(tdt.Shielded, st.integers(0, 5)),
    # Usage reports (contract §20), added up the tree.
    st.builds(tdt.Spend, st.integers(0, 1_000)),
)


PlanStep = tdt.Sleep | tdt.Checkpoint | tdt.Shielded | tdt.Spend | tdt.WaitStarted | Nested


def _plans(nested: st.SearchStrategy[Plan] | None) -> st.SearchStrategy[Plan]:
    """Plans whose nested runs play plans drawn from *nested* (none if None)."""
    options: list[st.SearchStrategy[PlanStep]] = [LEAF_STEPS]
    if nested is not None:
        kinds = st.sampled_from(["start", "delegate"])
        children = st.sampled_from([*BOSS_CHILDREN, "gamma"])
        options += [st.builds(Nested, kinds, children, nested), st.just(tdt.WaitStarted())]
    return st.builds(
        Plan,
        st.lists(st.one_of(*options), max_size=4).map(tuple),
        FINALS,
        st.sampled_from([0, 0, 1, 3]),
    )


#: Plans up to two levels of nested runs deep (built once: drawing is the slow part).
PLANS = _plans(_plans(_plans(None)))


# -- reaching the runtime -------------------------------------------------------


class PythonSurface:
    """The operations of the state machine, through the public Python API.

    Each method runs inside the Trio thread and returns what the call
    returned or the ``DelegationError`` it raised.
    """

    async def start(self, parent: td.Parent, name: str, task: str, replaces: str | None) -> Any:
        return await parent.start(name, task, replaces=replaces)

    async def delegate(self, parent: td.Parent, name: str, task: str, replaces: str | None) -> Any:
        return await parent.delegate(name, task, replaces=replaces)

    async def status(self, parent: td.Parent, run_id: str) -> Any:
        return parent.status(run_id)

    async def wait(self, parent: td.Parent, run_id: str, timeout: float | None) -> Any:
        return await parent.wait(run_id, timeout=timeout)

    async def cancel(self, parent: td.Parent, run_id: str) -> Any:
        return parent.cancel(run_id)

    async def continue_run(
        self, parent: td.Parent, run_id: str, message: str, background: bool
    ) -> Any:
        return await parent.continue_run(run_id, message, background=background)

    async def check_resolved(self, parent: td.Parent) -> Any:
        parent.check_resolved()
        return None


class GatedStore(WrappedStore):
    """A memory store whose writes can be held, so that admissions share one commit."""

    def __init__(self) -> None:
        super().__init__()
        self._gate: trio.Event | None = None

    def hold(self) -> None:
        self._gate = trio.Event()

    def release(self) -> None:
        if self._gate is not None:
            self._gate.set()
        self._gate = None

    async def write(self, records: Sequence[td.RunRecord]) -> None:
        if self._gate is not None:
            await self._gate.wait()
        await super().write(records)


#: Virtual seconds after which an operation is taken as blocked forever: far
#: beyond anything the scripts add up to.
BLOCKED = 100_000.0


async def _outcome(act: Callable[[], Awaitable[Any]]) -> Any:
    """Run *act* with the clock jumping while it blocks; its result or its error."""
    try:
        return await tdt.drive(act, limit=BLOCKED)
    except td.DelegationError as exc:
        await tdt.settle()
        return exc


async def _leave(block: tdt.Entered[Any]) -> Any:
    """Leave a block (no time limit: its cancel scope would sit inside the block)."""
    try:
        return await tdt.drive(block.aexit)
    except td.DelegationError as exc:
        await tdt.settle()
        return exc


@attrs.frozen
class Snapshot:
    now: float
    live_runs: int
    statuses: dict[int, td.RunHandle | td.DelegationError]
    verdicts: dict[int, td.DelegationError | None]
    trace: list[str]
    looked_up: bool
    unobserved: dict[int, tuple[td.RunHandle, ...]]
    delivered: dict[int, list[td.RunHandle]]
    listed: dict[int, tuple[td.RunHandle, ...]]
    #: ``(requests, input_tokens)`` of ``Runtime.usage`` and of each parent's
    #: ``usage()``, readable after close (contract §20).
    spent: tuple[int, int]
    spent_by: dict[int, tuple[int, int]]


class RuntimeMachine(RuleBasedStateMachine):
    """One runtime, several parents, and the model alongside."""

    parents = Bundle("parents")
    runs = Bundle("runs")

    def __init__(self) -> None:
        super().__init__()
        # Every call takes milliseconds; a planted deadlock should not cost more.
        self.host = tdt.TrioThread(clock=tdt.mock_clock(), call_timeout=10.0)
        self.host.start()
        self.surface = PythonSurface()
        self.trace = tdt.Trace()
        self.runners = {name: tdt.ScriptedRunner(trace=self.trace) for name in NAMES}
        self.model: LifecycleModel | None = None
        self.setup: Setup | None = None
        self.runtime: tdt.Entered[td.Runtime] | None = None
        self.blocks: dict[int, tdt.Entered[td.Parent]] = {}
        self.parent_numbers: dict[td.Parent, int] = {}
        self.owners: dict[int, str] = {}
        self.run_ids: dict[int, str] = {}
        self.numbers: dict[str, int] = {}
        self.tasks = 0
        self.latest: Snapshot | None = None
        # For the checks that need no model.
        self.seen: dict[int, S] = {}
        self.admitted_pending: dict[int, list[int]] = {}
        self.folder: Path | None = None
        self.gated: GatedStore | None = None
        # What each parent's settled() stream delivered, and whose stream ended.
        self.settlements: dict[int, list[td.RunHandle]] = {}
        self.streams_ended: set[int] = set()

    # -- plumbing ------------------------------------------------------------

    @property
    def m(self) -> LifecycleModel:
        assert self.model is not None
        return self.model

    def predict(self, operation: Callable[[LifecycleModel], Answer]) -> Answer:
        try:
            return operation(self.m)
        except IndeterminateError as exc:
            # Trio may order this tie either way: not a case one answer fits.
            note(f"indeterminate: {exc}")
            reject()

    def answer(self, outcome: Any) -> Answer:
        return tdt.answer_of(outcome, runs=self.numbers, parents=self.parent_numbers)

    def bind(self, outcome: Any, expected: Answer) -> None:
        """Bind the run id a real answer names to the number the model gave."""
        run_id = getattr(outcome, "run_id", None)
        if run_id is not None and run_id not in self.numbers and expected.run is not None:
            self.numbers[run_id] = expected.run
            self.run_ids[expected.run] = run_id
            self.trace.name(run_id, self.m.run_task(expected.run))

    def check(self, what: str, expected: Answer, outcome: Any) -> Answer:
        self.bind(outcome, expected)
        actual = self.answer(outcome)
        assert actual == expected, f"{what}:\n  runtime: {actual}\n  model:   {expected}"
        return actual

    def run_id(self, run: RunRef | None) -> str:
        return BOGUS_ID if run is None else self.run_ids[run.number]

    def may_block(self, parent: ParentRef, name: str) -> bool:
        assert self.setup is not None
        if name not in NAMES:
            return False
        timeout = self.setup.timeouts[NAMES.index(name)]
        if timeout is td.INHERIT:
            timeout = self.setup.subagent_timeout
        return timeout is None or self.m.running(parent.number) >= self.setup.max_concurrent_runs

    def asked(self, run: RunRef | None, via: ParentRef | None) -> ParentRef:
        """The parent to ask about *run*: *via*, else the run's own (else the first)."""
        if via is not None:
            return via
        return run.parent if run is not None else ParentRef(0, OWNERS[0])

    def parent(self, ref: ParentRef) -> td.Parent:
        return self.blocks[ref.number].value

    def new_task(self, name: str, plan: Plan) -> str:
        task = f"t{self.tasks}"
        self.tasks += 1
        if name in self.runners:
            self.runners[name].assign(task, self.materialize(plan, task))
        return task

    def materialize(self, plan: Plan, task: str) -> tdt.Script:
        steps: list[tdt.ScriptStep] = []
        children = 0
        # With a store, a nested admission takes a round trip to the store,
        # during which the run that admits it may end: the model reasons about
        # instants without that round trip, so nested runs play without a store.
        nesting = self.setup is None or self.setup.store == "none"
        for step in plan.steps:
            if isinstance(step, Nested) and not nesting:
                continue
            if isinstance(step, Nested):
                child = f"{task}/{children}"
                children += 1
                self.runners[step.subagent].assign(child, self.materialize(step.plan, child))
                kind = tdt.Start if step.kind == "start" else tdt.Delegate
                steps.append(kind(step.subagent, child))
            else:
                steps.append(step)
        if plan.final is not None:
            steps.append(plan.final)
        return tdt.Script(steps, cleanup=plan.cleanup)

    # -- rules -----------------------------------------------------------------

    @initialize(target=parents, setup=setups())
    def open_runtime(self, setup: Setup) -> Any:
        """Open the runtime, and a first parent so that runs can start at once."""
        self.setup = setup
        subagents = [
            td.Subagent(
                name,
                self.runners[name],
                timeout_seconds=timeout,
                children=BOSS_CHILDREN if name == "boss" else (),
            )
            for name, timeout in zip(NAMES, setup.timeouts, strict=True)
        ]
        store: td.ResultStore | None = None
        if setup.store == "memory":
            store = self.gated = GatedStore()
        elif setup.store == "sqlite":
            self.folder = Path(tempfile.mkdtemp(prefix="trio-delegate-machine-"))
            store = td.SQLiteStore(self.folder / "runs.db")
        self.runtime = self.host.enter(
            td.open_runtime(subagents, config=setup.config(), store=store)
        )
        self.model = LifecycleModel(subagents, setup.config(), now=0.0, store=setup.store != "none")
        return self.open_parent(OWNERS[0], None)

    @precondition(lambda self: sum(block.is_open for block in self.blocks.values()) < 3)
    @rule(
        target=parents,
        owner=st.sampled_from(OWNERS),
        # Mostly every subagent; sometimes a subset (or an unknown name).
        children=st.none() | st.none() | st.lists(st.sampled_from([*NAMES, "nope"]), max_size=3),
    )
    def open_parent(self, owner: str, children: list[str] | None) -> Any:
        expected = self.predict(lambda m: m.open_parent(owner, subagents=children))
        assert self.runtime is not None
        manager = self.runtime.value.open_parent(owner, subagents=children)
        try:
            block = self.host.enter(manager)
        except td.DelegationError as exc:
            self.check("open_parent", expected, exc)
            return multiple()
        assert expected.kind == "parent", expected
        assert expected.parent is not None
        self.blocks[expected.parent] = block
        self.parent_numbers[block.value] = expected.parent
        self.owners[expected.parent] = owner
        self.check("open_parent", expected, block.value)
        self.follow_settlements(expected.parent, block.value)
        return ParentRef(expected.parent, owner)

    def follow_settlements(self, number: int, parent: td.Parent) -> None:
        """Read the parent's settlement stream for as long as it is open (contract §17)."""
        delivered = self.settlements[number] = []
        ended = self.streams_ended

        async def follow() -> None:
            async for handle in parent.settled():
                delivered.append(handle)
            ended.add(number)

        async def spawn() -> None:
            trio.lowlevel.spawn_system_task(follow)

        self.host.call(spawn)

    @rule(
        target=runs,
        parent=parents,
        name=SUBAGENT_NAMES,
        plan=PLANS,
        replaces=mostly_none(runs),
    )
    def start(self, parent: ParentRef, name: str, plan: Plan, replaces: RunRef | None) -> Any:
        ref = self.start_one(parent, name, plan, replaces)
        return multiple() if ref is None else ref

    def start_one(
        self, parent: ParentRef, name: str, plan: Plan, replaces: RunRef | None
    ) -> RunRef | None:
        task = self.new_task(name, plan)
        replaced = None if replaces is None else replaces.number
        real_replaces = None if replaces is None else self.run_ids[replaces.number]
        p = self.parent(parent)
        expected = self.predict(lambda m: m.start(parent.number, name, task, replaces=replaced))
        outcome = self.call(_outcome, lambda: self.surface.start(p, name, task, real_replaces))
        self.check("start", expected, outcome)
        if expected.status is S.PENDING and expected.run is not None:
            self.admitted_pending.setdefault(parent.number, []).append(expected.run)
        return None if expected.run is None else RunRef(expected.run, parent)

    @rule(target=runs, run=runs, name=SUBAGENT_NAMES, plan=PLANS, foreground=st.booleans())
    def replace(self, run: RunRef, name: str, plan: Plan, foreground: bool) -> Any:
        """A replacement for *run* (contract §7), from the parent that started it."""
        if foreground:
            return self.delegate(run.parent, name, plan, run)
        return self.start(run.parent, name, plan, run)

    @rule(
        target=runs,
        parent=parents,
        batch=st.lists(st.tuples(SUBAGENT_NAMES, PLANS), min_size=2, max_size=4),
    )
    def start_several(self, parent: ParentRef, batch: list[tuple[str, Plan]]) -> Any:
        """Several background starts in a row: queues of pending runs form."""
        refs = [self.start_one(parent, name, plan, None) for name, plan in batch]
        return multiple(*(ref for ref in refs if ref is not None))

    @precondition(
        lambda self: (
            self.model is not None
            and not self.m.closed
            and self.setup is not None
            and self.setup.store == "memory"
            and self.m.live_runs + 4 <= self.setup.max_live_runs
        )
    )
    @rule(
        target=runs,
        parent=parents,
        batch=st.lists(st.tuples(st.sampled_from(NAMES), PLANS), min_size=2, max_size=4),
    )
    def start_concurrently(self, parent: ParentRef, batch: list[tuple[str, Plan]]) -> Any:
        """Starts from separate tasks whose admissions share one store commit.

        The store holds its writes while the tasks admit their runs one after
        another; then one commit makes them all durable and their callers wake
        in whatever order Trio picks. Pending runs must still start in
        admission order, whatever order the callers return in (the handles'
        statuses depend on that order, and are left out of the comparison).
        """
        if not self.m.is_open(parent.number):
            return multiple()
        p = self.parent(parent)
        tasks = [(name, self.new_task(name, plan)) for name, plan in batch]
        store = self.gated
        assert store is not None

        async def all_at_once() -> dict[str, Any]:
            answers: dict[str, Any] = {}

            async def one(name: str, task: str) -> None:
                try:
                    answers[task] = await self.surface.start(p, name, task, None)
                except td.DelegationError as exc:
                    answers[task] = exc

            async with trio.open_nursery() as nursery:
                store.hold()
                for name, task in tasks:
                    nursery.start_soon(one, name, task)
                    # Admitted, and waiting for the held commit.
                    await trio.testing.wait_all_tasks_blocked()
                store.release()
            await tdt.settle()
            return answers

        answers = self.call(all_at_once)
        refs: list[RunRef] = []
        for name, task in tasks:
            expected = self.predict(functools.partial(_start_in, parent.number, name, task))
            outcome = answers[task]
            if expected.kind == "handle" and isinstance(outcome, td.RunHandle):
                expected = attrs.evolve(expected, status=outcome.status)
            self.check("concurrent start", expected, outcome)
            if expected.run is not None:
                if self.m.peek_status(expected.run) is S.PENDING:
                    self.admitted_pending.setdefault(parent.number, []).append(expected.run)
                refs.append(RunRef(expected.run, parent))
        return multiple(*refs)

    @rule(
        target=runs,
        run=runs,
        plan=PLANS,
        background=st.booleans(),
        via=mostly_none(parents),
    )
    def continue_run(self, run: RunRef, plan: Plan, background: bool, via: ParentRef | None) -> Any:
        """``continue_run``: a new run of the earlier one's subagent (contract §12)."""
        parent = self.asked(run, via)
        if not self.m.is_open(parent.number):
            return multiple()
        name = self.m.run_subagent(run.number)
        message = self.new_task(name, plan)
        p, run_id = self.parent(parent), self.run_id(run)
        trial = self.m if background or not self.may_block(parent, name) else self.m.fork()
        expected = self.predict(
            lambda _: trial.continue_run(parent.number, run.number, message, background=background)
        )
        if expected.kind == "blocked":
            return multiple()
        self.model = trial
        outcome = self.call(
            _outcome, lambda: self.surface.continue_run(p, run_id, message, background)
        )
        self.check("continue_run", expected, outcome)
        if expected.kind == "handle" and expected.status is S.PENDING and expected.run is not None:
            self.admitted_pending.setdefault(parent.number, []).append(expected.run)
        return multiple() if expected.run is None else RunRef(expected.run, parent)

    @rule(
        target=runs,
        parent=parents,
        name=SUBAGENT_NAMES,
        plan=PLANS,
        replaces=mostly_none(runs),
    )
    def delegate(self, parent: ParentRef, name: str, plan: Plan, replaces: RunRef | None) -> Any:
        task = self.new_task(name, plan)
        replaced = None if replaces is None else replaces.number
        real_replaces = None if replaces is None else self.run_ids[replaces.number]
        p = self.parent(parent)
        # A delegation that would wait forever is not run: tried on a copy first
        # when it might (no deadline, or no free slot to start it).
        trial = self.m.fork() if self.may_block(parent, name) else self.m
        expected = self.predict(
            lambda _: trial.delegate(parent.number, name, task, replaces=replaced)
        )
        if expected.kind == "blocked":
            return multiple()
        self.model = trial
        outcome = self.call(_outcome, lambda: self.surface.delegate(p, name, task, real_replaces))
        self.check("delegate", expected, outcome)
        return multiple() if expected.run is None else RunRef(expected.run, parent)

    @rule(seconds=st.integers(0, 6))
    def advance(self, seconds: int) -> None:
        try:
            self.m.advance(seconds)
        except IndeterminateError as exc:
            note(f"indeterminate: {exc}")
            reject()
        self.call(tdt.advance, seconds)

    @rule(run=st.one_of(runs, runs, runs, st.none()), via=mostly_none(parents))
    def status(self, run: RunRef | None, via: ParentRef | None) -> None:
        parent = self.asked(run, via)
        number = None if run is None else run.number
        expected = self.predict(lambda m: m.status(parent.number, number))
        p, run_id = self.parent(parent), self.run_id(run)
        outcome = self.call(_outcome, lambda: self.surface.status(p, run_id))
        self.check("status", expected, outcome)

    @rule(run=st.one_of(runs, runs, runs, st.none()), via=mostly_none(parents))
    def poll(self, run: RunRef | None, via: ParentRef | None) -> None:
        """``wait(timeout=0)``: a result, an error, or the live handle."""
        parent = self.asked(run, via)
        number = None if run is None else run.number
        p, run_id = self.parent(parent), self.run_id(run)

        async def wait_and_look() -> tuple[Any, Any, Any]:
            # The status right before and right after, to check the wait left it alone.
            before = await _outcome(lambda: self.surface.status(p, run_id))
            during = await _outcome(lambda: self.surface.wait(p, run_id, 0))
            after = await _outcome(lambda: self.surface.status(p, run_id))
            return before, during, after

        expected = self.predict(lambda m: m.wait(parent.number, number, timeout=0))
        before, during, after = self.call(wait_and_look)
        self.check("wait(timeout=0)", expected, during)
        if isinstance(during, td.RunHandle):
            # The wait timed out: the child is exactly as it was.
            assert isinstance(before, td.RunHandle)
            assert isinstance(after, td.RunHandle)
            assert before.status == during.status == after.status, (before, during, after)

    @rule(run=st.one_of(runs, runs, runs, st.none()), via=mostly_none(parents))
    def cancel(self, run: RunRef | None, via: ParentRef | None) -> None:
        parent = self.asked(run, via)
        number = None if run is None else run.number
        expected = self.predict(lambda m: m.cancel(parent.number, number))
        p, run_id = self.parent(parent), self.run_id(run)
        outcome = self.call(_outcome, lambda: self.surface.cancel(p, run_id))
        self.check("cancel", expected, outcome)

    # Not before a few runs; a closed parent leaves the bundle (runs keep
    # naming it, so calls on a closed parent still happen).
    @precondition(lambda self: self.model is not None and self.m.runs >= 3)
    @rule(parent=consumes(parents))
    def close_parent(self, parent: ParentRef) -> None:
        block = self.blocks[parent.number]
        if not block.is_open:
            return
        expected = self.predict(lambda m: m.close_parent(parent.number))
        outcome = self.call(_leave, block)
        self.check("leaving the parent block", expected, outcome)
        self.assert_all_runners_ended(parent.number)
        assert parent.number in self.streams_ended, "settled() did not end with its parent"

    # Not before a few runs: a runtime closed at once makes a short example.
    @precondition(lambda self: self.model is not None and not self.m.closed and self.m.runs >= 4)
    @rule()
    def close_runtime(self) -> None:
        expected = self.predict(lambda m: m.close_runtime())
        assert self.runtime is not None
        outcome = self.call(_leave, self.runtime)
        self.check("leaving the runtime block", expected, outcome)
        self.assert_all_runners_ended(None)

    # -- invariants -----------------------------------------------------------

    def call(self, async_fn: Callable[[*Ts], Awaitable[T]], *args: *Ts) -> T:
        """Run one operation in the Trio thread, and snapshot the state right after it.

        One round trip instead of two: the invariants read the snapshot.
        """

        async def operation() -> tuple[T, Snapshot]:
            result = await async_fn(*args)
            return result, self.look()

        result, self.latest = self.host.call(operation)
        return result

    def snapshot(self) -> Snapshot:
        latest, self.latest = self.latest, None
        return latest if latest is not None else self.host.call_sync(self.look)

    def look(self) -> Snapshot:
        """What the runtime says now (called inside the Trio thread)."""
        # Raw outcomes: run ids are bound to numbers after the operation returns.
        statuses: dict[int, td.RunHandle | td.DelegationError] = {}
        verdicts: dict[int, td.DelegationError | None] = {}
        unobserved: dict[int, tuple[td.RunHandle, ...]] = {}
        listed: dict[int, tuple[td.RunHandle, ...]] = {}
        looked_up = False
        for number, block in self.blocks.items():
            if not block.is_open or self.m.closed:
                continue
            parent = block.value
            for run, run_id in self.run_ids.items():
                if self.m.run_parent(run) == number:
                    looked_up = True
                    try:
                        statuses[run] = parent.status(run_id)
                    except td.DelegationError as exc:  # evicted: expired or unknown
                        statuses[run] = exc
            try:
                parent.check_resolved()
            except td.DelegationError as exc:
                verdicts[number] = exc
            else:
                verdicts[number] = None
            unobserved[number] = parent.unobserved()
            listed[number] = parent.runs()
        assert self.runtime is not None
        total = self.runtime.value.usage
        spent_by = {}
        for number, block in self.blocks.items():
            usage = block.value.usage()
            spent_by[number] = (usage.requests, usage.input_tokens)
        return Snapshot(
            trio.current_time(),
            self.runtime.value.live_runs,
            statuses,
            verdicts,
            self.trace.lines(),
            looked_up,
            unobserved,
            {number: list(handles) for number, handles in self.settlements.items()},
            listed,
            (total.requests, total.input_tokens),
            spent_by,
        )

    @invariant()
    def agrees_with_model(self) -> None:
        if self.model is None:
            return
        snap = self.snapshot()
        m = self.m
        assert snap.now == m.now, f"clock: runtime {snap.now}, model {m.now}"
        if snap.looked_up:
            m.expire()  # the runtime's lookups applied retention
        for run, handle in snap.statuses.items():
            parent = m.run_parent(run)
            assert parent is not None
            if m.is_ambiguous(run):
                continue  # which of two runs that ended together was evicted is open
            actual, expected = self.answer(handle), m.status(parent, run)
            assert actual == expected, f"status of run {run}: runtime {actual}, model {expected}"
        for parent, verdict in snap.verdicts.items():
            actual, expected = self.answer(verdict), m.check_resolved(parent)
            assert actual == expected, f"verdict of parent {parent}: {actual} != {expected}"
        if not m.closed:
            assert snap.live_runs == m.live_runs, (snap.live_runs, m.live_runs)
        self.check_settlements(snap)
        self.check_listing(snap)
        assert snap.spent == m.spent(), f"runtime usage: {snap.spent} != {m.spent()}"
        for parent, spent in snap.spent_by.items():
            assert spent == m.spent(parent), f"usage of parent {parent}: {spent}"
        assert snap.trace == m.trace.lines(), _trace_diff(snap.trace, m.trace.lines())
        self.check_without_model(snap)

    def check_settlements(self, snap: Snapshot) -> None:
        """contract §17: each parent's stream delivers each terminal run of it once,
        in the order they ended, with its status; ``unobserved()`` lists those no
        wait has told about. Neither is observation: the verdicts above agree with
        a model in which nothing but a wait observes."""
        m = self.m
        for parent, delivered in snap.delivered.items():
            numbers = [self.numbers.get(handle.run_id, -1) for handle in delivered]
            assert -1 not in numbers, f"parent {parent} streamed a run it did not start"
            assert len(set(numbers)) == len(numbers), f"parent {parent} streamed a run twice"
            expected = {
                run
                for run in range(m.runs)
                if m.run_parent(run) == parent and m.ended_at(run) is not None
            }
            assert set(numbers) == expected, (parent, sorted(numbers), sorted(expected))
            for handle, run in zip(delivered, numbers, strict=True):
                assert handle.status is m.peek_status(run), (run, handle, m.peek_status(run))
            ends = [m.ended_at(run) or 0.0 for run in numbers]
            assert ends == sorted(ends), f"parent {parent} streamed out of order: {ends}"
        for parent, handles in snap.unobserved.items():
            listed = [self.numbers.get(handle.run_id, -1) for handle in handles]
            assert sorted(listed) == sorted(m.unobserved(parent)), (parent, listed)
            ends = [m.ended_at(run) or 0.0 for run in listed]
            assert ends == sorted(ends), f"unobserved of parent {parent} out of order"

    def check_listing(self, snap: Snapshot) -> None:
        """contract §17: ``parent.runs()`` lists runs of the parent's owner in admission
        order, each as a lookup finds it; every run of the parent a lookup finds in
        memory is listed (without a store, every run a lookup finds at all; with
        one, an evicted run is answered from the store and not listed)."""
        assert self.setup is not None
        m = self.m
        for parent, handles in snap.listed.items():
            numbers = [self.numbers.get(handle.run_id, -1) for handle in handles]
            assert -1 not in numbers, f"parent {parent} listed a run nobody was told of"
            assert numbers == sorted(set(numbers)), f"parent {parent} listed {numbers}"
            owner = self.owners[parent]
            for run in numbers:
                started_by = m.run_parent(run)
                assert started_by is not None
                assert self.owners[started_by] == owner, (parent, run, started_by)
            by_number = dict(zip(numbers, handles, strict=True))
            for run, looked_up in snap.statuses.items():
                if m.run_parent(run) != parent:
                    continue
                if not isinstance(looked_up, td.RunHandle):
                    assert run not in by_number, (parent, run, looked_up)
                elif run in by_number or self.setup.store == "none":
                    assert by_number.get(run) == looked_up, (parent, run, looked_up)

    def check_without_model(self, snap: Snapshot) -> None:
        assert self.setup is not None
        statuses = {
            run: handle.status
            for run, handle in snap.statuses.items()
            if isinstance(handle, td.RunHandle)
        }
        # Terminal states never change.
        for run, status in statuses.items():
            previous = self.seen.get(run)
            if previous is not None and previous.is_terminal:
                assert status is previous, f"run {run} went from {previous} to {status}"
            self.seen[run] = status
        # At most max_concurrent_runs run per parent.
        for parent in snap.verdicts:
            running = [
                run
                for run, status in statuses.items()
                if status is S.RUNNING and self.m.run_parent(run) == parent
            ]
            assert len(running) <= self.setup.max_concurrent_runs, (parent, running)
        # Pending runs start in admission order: never a later one before an earlier one.
        starts = {
            line.split(" ")[1]: float(line.split(" ")[0])
            for line in snap.trace
            if line.split(" ")[2] == "start"
        }
        for parent, queued in self.admitted_pending.items():
            if parent not in snap.verdicts:
                continue
            started_at = [starts.get(self.m.run_task(run)) for run in queued]
            for i, run in enumerate(queued):
                for j in range(i + 1, len(queued)):
                    earlier_start, later_start = started_at[i], started_at[j]
                    if later_start is None:
                        continue
                    assert statuses.get(run) is not S.PENDING, (
                        f"run {queued[j]} started while the earlier run {run} is still pending"
                    )
                    if earlier_start is not None:
                        assert earlier_start <= later_start, (run, queued[j], started_at)

    def assert_all_runners_ended(self, parent: int | None) -> None:
        """No runner outlives its parent (or, for None, the runtime)."""
        lines = self.host.call_sync(self.trace.lines)
        prefixes = None
        if parent is not None:
            prefixes = tuple(
                self.m.run_task(run)
                for run in range(self.m.runs)
                if self.m.run_parent(run) == parent
            )
        started, ended = set(), set()
        for line in lines:
            _, label, kind, *_ = line.split(" ")
            if prefixes is not None and label.split("/")[0] not in prefixes:
                continue
            if kind == "start":
                started.add(label)
            elif kind == "finally":
                ended.add(label)
        assert started <= ended, f"runners still running: {sorted(started - ended)}"

    def teardown(self) -> None:
        try:
            for block in self.blocks.values():
                if block.is_open:
                    self.host.call(_leave, block)
            if self.runtime is not None and self.runtime.is_open:
                self.host.call(_leave, self.runtime)
        finally:
            self.host.close()
            if self.folder is not None:
                shutil.rmtree(self.folder, ignore_errors=True)


def _start_in(parent: int, name: str, task: str, model: LifecycleModel) -> Answer:
    return model.start(parent, name, task)


def _trace_diff(actual: list[str], expected: list[str]) -> str:
    for index, (a, e) in enumerate(zip(actual, expected, strict=False)):
        if a != e:
            return f"traces differ at line {index}:\n  runtime: {a}\n  model:   {e}"
    return f"traces differ in length: runtime {len(actual)} lines, model {len(expected)}"


# Shrinking a failure takes minutes: far more than the suite's per-test limit.
@pytest.mark.timeout(1800)
def test_runtime_matches_its_model() -> None:
    current = settings()
    run_state_machine_as_test(
        RuntimeMachine,
        settings=settings(
            current,
            max_examples=max(200, current.max_examples),
            stateful_step_count=40,
        ),
    )


# -- progress, questions, usage and budgets (contract §19-§20) ----------------------

#: The subagents of the talking machine: one without a deadline, one with.
ASKERS = {"asker": None, "hasty": 30.0}
#: Its parents' owners.
TALKERS = ("root", "other")
#: The largest single usage report a runner of the talking machine makes.
MOST_REPORTED = 3


@attrs.define
class _Talking:
    """The talking machine's model of one run."""

    #: Its subagent's ``timeout_seconds``; its deadline, from the moment it started.
    timeout: float | None
    parent: str
    #: What the runner reports in its cleanup once cancelled (``requests``; 0: nothing).
    cleanup: int
    status: td.RunStatus = S.PENDING
    deadline: float = math.inf
    #: The open question: ``(until, schema kind)``; None while the runner is idle.
    question: tuple[float, str] | None = None
    #: What the runner's asks ended with, in order.
    heard: list[Any] = attrs.Factory(list)
    seq: int = 0
    highest: float = -math.inf
    #: The latest report: (message, progress).
    latest: tuple[str, float | None] | None = None
    #: Requests counted for it (contract §20), and whether any report counted.
    spent: int = 0
    reported: bool = False
    #: Its own budget's ``max_requests`` (its subagent's), and whether it stopped.
    limit: int | None = None
    stopped: bool = False
    #: The scope of the budget stop that cancelled it (None: not a budget stop).
    cause: str | None = None

    @property
    def live(self) -> bool:
        return not self.status.is_terminal

    @property
    def holds_slot(self) -> bool:
        return self.status in (S.RUNNING, S.INPUT_REQUIRED)

    def begin(self, now: float) -> None:
        """It takes a slot and its runner starts: its deadline runs from now."""
        self.status = S.RUNNING
        self.deadline = math.inf if self.timeout is None else now + self.timeout


@attrs.define
class _Purse:
    """The talking machine's model of one parent's budget scope."""

    limit: int | None
    spent: int = 0
    stopped: bool = False

    def refuses(self) -> bool:
        """Admission is refused: stopped, or nothing left (contract §20)."""
        return self.stopped or (self.limit is not None and self.spent >= self.limit)


@attrs.frozen
class TalkSetup:
    """The talking machine's runtime: a store, and the budgets of its scopes."""

    store: Literal["none", "memory", "sqlite"]
    #: ``Config.max_concurrent_runs``: small, so that runs wait as ``pending``.
    slots: int
    #: ``max_requests`` of each subagent's run budget (per ASKERS), None for none.
    run_limits: tuple[int | None, ...]
    #: ``max_requests`` of each parent's budget (per TALKERS), None for none.
    parent_limits: tuple[int | None, ...]


def _budget(limit: int | None) -> td.Budget | None:
    return None if limit is None else td.Budget(max_requests=limit)


class QuestionsMachine(RuleBasedStateMachine):
    """Runs that report progress, ask questions and spend, against a small model
    of contract §19 and §20.

    Questions are answered, declined, timed out and cancelled at random; runs
    report usage (``ctx.add_usage``), return it (``Output(usage=...)``) and
    report more in their cleanup once cancelled, under budgets drawn per
    subagent and per parent, so reports cross limits and stop runs and
    parents; with few slots per parent, runs wait as ``pending`` and start
    in admission order as slots free, and a stopped parent's pending runs
    end at once. Each run's runner obeys commands sent to it (report, spend, ask,
    return), so the machine decides what a child does and when; the clock
    moves only when a rule advances it. The model predicts every status, open
    question, latest report, what each ``ask`` ended with, each run's and
    parent's usage, each budget stop's cause and each admission a stopped
    scope refuses; the invariants also check, without the model, that no
    scope's spend passes its limit by more than one report.
    """

    runs = Bundle("talking_runs")

    def __init__(self) -> None:
        super().__init__()
        self.host = tdt.TrioThread(clock=tdt.mock_clock(), call_timeout=10.0)
        self.host.start()
        self.inboxes: dict[str, trio.MemorySendChannel[tuple[Any, ...]]] = {}
        self.receivers: dict[str, trio.MemoryReceiveChannel[tuple[Any, ...]]] = {}
        self.cleanups: dict[str, int] = {}  # task -> requests reported in cleanup
        self.tasks: dict[str, str] = {}  # run id -> task
        self.heard: dict[str, list[Any]] = {}
        self.model: dict[str, _Talking] = {}
        self.purses: dict[str, _Purse] = {}
        self.now = 0.0
        self.setup: TalkSetup | None = None
        self.folder: Path | None = None
        self.runtime: tdt.Entered[td.Runtime] | None = None
        self.blocks: dict[str, tdt.Entered[td.Parent]] = {}

    async def _runner(self, ctx: td.ChildContext) -> Any:
        task = ctx.task
        heard = self.heard[task]
        receive = self.receivers.pop(task)
        ended = False
        try:
            async for command in receive:
                if command[0] == "return":
                    ended = True
                    if command[1] is None:
                        return "done"
                    return td.Output("done", usage=td.Usage(requests=command[1]))
                if command[0] == "spend":
                    ctx.add_usage(td.Usage(requests=command[1]))
                    continue
                if command[0] == "progress":
                    try:
                        ctx.progress(command[1], progress=command[2])
                    except td.InvalidArgumentsError:
                        heard.append("refused")
                    continue
                _, kind, timeout = command
                schema = {"type": "integer"} if kind == "integer" else None
                try:
                    answer = await ctx.ask(f"{kind}?", schema=schema, timeout=timeout)
                    heard.append(("answer", answer))
                except td.QuestionDeclinedError as exc:
                    heard.append(("declined", exc.reason))
                except td.AskTimeoutError:
                    heard.append("timeout")
            ended = True
            return "closed"
        finally:
            # Cancelled (a request, a budget stop, a close): what the cleanup spent
            # is reported too, and counts unless a budget already stopped a scope
            # of the run (contract §20: the overrun is at most the crossing report).
            if not ended and self.cleanups[task]:
                ctx.add_usage(td.Usage(requests=self.cleanups[task]))

    def _send(self, run: str, command: tuple[Any, ...]) -> bool:
        """Send *command* to *run*'s runner if it waits for one (as the model says)."""
        m = self.model[run]
        if not m.holds_slot or m.question is not None:
            return False

        async def send() -> None:
            self.inboxes[self.tasks[run]].send_nowait(command)
            await tdt.settle()

        self.host.call(send)
        return True

    # -- the model of usage and budgets (contract §20) -------------------------------

    def _report(self, run: str, requests: int, *, returned: bool = False) -> None:
        """*run* reported *requests*: count it, and stop the scopes it took past a limit."""
        m = self.model[run]
        purse = self.purses[m.parent]
        if m.stopped or purse.stopped:
            return  # a report in a stopped scope is dropped
        m.spent += requests
        m.reported = True
        purse.spent += requests
        if m.limit is not None and m.spent > m.limit:
            m.stopped = True
            if not returned:
                self._stop(m, "run")
        if purse.limit is not None and purse.spent > purse.limit:
            purse.stopped = True
            for each in self.model.values():
                if each.parent == m.parent and not (returned and each is m):
                    self._stop(each, "parent")

    def _stop(self, m: _Talking, scope: str) -> None:
        """A budget stop reaches *m*: a live run is cancelled with it as the cause,
        its question withdrawn; its cleanup's report is dropped (its scope stopped)."""
        if not m.live:
            return
        m.status = S.CANCELLED
        m.question = None
        m.cause = scope

    def _cancelled(self, run: str) -> None:
        """*run* was cancelled by request: its cleanup reports what it spent (a
        pending run never started, and ends at once)."""
        m = self.model[run]
        started = m.holds_slot
        m.status = S.CANCELLED
        m.question = None
        if started and m.cleanup:
            self._report(run, m.cleanup)

    def _promote(self, owner: str, now: float) -> None:
        """Start *owner*'s pending runs, in admission order, while it has free slots."""
        assert self.setup is not None
        mine = [m for m in self.model.values() if m.parent == owner]
        free = self.setup.slots - sum(m.holds_slot for m in mine)
        for m in mine:
            if free <= 0:
                break
            if m.status is S.PENDING:
                m.begin(now)
                free -= 1

    def _promote_all(self, now: float) -> None:
        for owner in TALKERS:
            self._promote(owner, now)

    # -- rules -----------------------------------------------------------------------

    @initialize(
        setup=st.builds(
            TalkSetup,
            # An SQLite file makes an example ten times slower (its writes go
            # through a worker thread): one in thirty-two.
            st.sampled_from(["none"] * 16 + ["memory"] * 15 + ["sqlite"]),
            st.sampled_from([1, 2, 1_000]),
            st.tuples(*(st.sampled_from([None, None, 0, 2, 5]) for _ in ASKERS)),
            st.tuples(*(st.sampled_from([None, 0, 3, 6, 10]) for _ in TALKERS)),
        )
    )
    def open_runtime(self, setup: TalkSetup) -> None:
        self.setup = setup
        subagents = [
            td.Subagent(
                name, self._runner, asks=True, timeout_seconds=timeout, budget=_budget(limit)
            )
            for (name, timeout), limit in zip(ASKERS.items(), setup.run_limits, strict=True)
        ]
        config = td.Config(fail_closed=False, max_concurrent_runs=setup.slots)
        store: td.ResultStore | None = None
        if setup.store == "memory":
            store = td.MemoryStore()
        elif setup.store == "sqlite":
            self.folder = Path(tempfile.mkdtemp(prefix="trio-delegate-talk-"))
            store = td.SQLiteStore(self.folder / "runs.db")
        self.runtime = self.host.enter(td.open_runtime(subagents, config=config, store=store))
        for owner, limit in zip(TALKERS, setup.parent_limits, strict=True):
            manager = self.runtime.value.open_parent(owner, budget=_budget(limit))
            self.blocks[owner] = self.host.enter(manager)
            self.purses[owner] = _Purse(limit)

    @rule(
        target=runs,
        name=st.sampled_from(sorted(ASKERS)),
        owner=st.sampled_from(TALKERS),
        cleanup=st.sampled_from([0, 0, 1, MOST_REPORTED]),
    )
    def start(self, name: str, owner: str, cleanup: int) -> Any:
        task = f"t{len(self.heard)}"
        send, receive = trio.open_memory_channel[tuple[Any, ...]](math.inf)
        self.inboxes[task] = send
        self.receivers[task] = receive
        self.heard[task] = []
        # A runner with a deadline reports nothing in cleanup: runs that time out
        # together would report in an order Trio picks.
        self.cleanups[task] = cleanup if ASKERS[name] is None else 0
        parent = self.blocks[owner].value

        async def start() -> Any:
            before = len(parent.runs())
            try:
                handle = await parent.start(name, task)
            except td.DelegationError as exc:
                await tdt.settle()
                # Admission is all-or-nothing: a refused start leaves no run behind.
                assert len(parent.runs()) == before
                return exc
            await tdt.settle()
            return handle.run_id

        outcome = self.host.call(start)
        purse = self.purses[owner]
        if purse.refuses():
            # contract §20: admission in a stopped scope (or one with nothing left)
            # raises BudgetExceededError before anything starts.
            assert isinstance(outcome, td.BudgetExceededError), outcome
            assert outcome.scope == "parent"
            assert outcome.limit == "max_requests"
            assert outcome.limit_value == purse.limit
            return multiple()
        assert isinstance(outcome, str), outcome
        assert self.setup is not None
        limit = self.setup.run_limits[list(ASKERS).index(name)]
        self.model[outcome] = _Talking(ASKERS[name], owner, self.cleanups[task], limit=limit)
        self.tasks[outcome] = task
        self._promote(owner, self.now)
        return outcome

    @rule(
        run=runs,
        kind=st.sampled_from(["text", "integer"]),
        timeout=mostly_none(st.sampled_from([1.5, 4.5, 40.5])),
    )
    def ask(self, run: str, kind: str, timeout: float | None) -> None:
        m = self.model[run]
        if self._send(run, ("ask", kind, timeout)):
            m.question = (math.inf if timeout is None else self.now + timeout, kind)
            m.status = S.INPUT_REQUIRED

    @rule(run=runs, progress=st.none() | st.integers(0, 5), message=st.sampled_from(["a", "b"]))
    def report(self, run: str, progress: int | None, message: str) -> None:
        m = self.model[run]
        if self._send(run, ("progress", message, progress)):
            if progress is not None and progress < m.highest:
                m.heard.append("refused")
                return
            if progress is not None:
                m.highest = progress
            m.seq += 1
            m.latest = (message, None if progress is None else float(progress))

    @rule(run=runs, requests=st.integers(0, MOST_REPORTED))
    def spend(self, run: str, requests: int) -> None:
        """``ctx.add_usage``: counted up the tree; it may cross a budget and stop."""
        if self._send(run, ("spend", requests)):
            self._report(run, requests)
            self._promote_all(self.now)

    @rule(run=runs, valid=st.booleans(), oldest=st.booleans())
    def answer(self, run: str, valid: bool, oldest: bool) -> None:
        m = self.model[run]
        parent = self.blocks[m.parent].value
        question_id = None
        if not oldest:
            open_ids = [q.question_id for q in parent.questions() if q.run_id == run]
            question_id = open_ids[0] if open_ids else "q_none"
        value = 7 if valid else [7]
        outcome = self._reply(lambda: parent.answer(run, value, question_id=question_id))
        if m.question is None:
            assert isinstance(outcome, td.AnswerAck)
            assert not outcome.accepted
            return
        kind = m.question[1]
        if not valid:  # a list is neither a string nor an integer
            assert isinstance(outcome, td.InvalidArgumentsError), outcome
            return
        if kind == "text":  # 7 is no string either
            assert isinstance(outcome, td.InvalidArgumentsError), outcome
            return
        assert isinstance(outcome, td.AnswerAck)
        assert outcome.accepted
        assert outcome.status is S.RUNNING
        m.question = None
        m.status = S.RUNNING
        m.heard.append(("answer", 7))

    @rule(run=runs)
    def decline(self, run: str) -> None:
        m = self.model[run]
        parent = self.blocks[m.parent].value
        outcome = self._reply(lambda: parent.decline(run, reason="no"))
        assert isinstance(outcome, td.AnswerAck)
        assert outcome.accepted is (m.question is not None)
        if m.question is not None:
            m.question = None
            m.status = S.RUNNING
            m.heard.append(("declined", "no"))

    @rule(run=runs)
    def answer_elsewhere(self, run: str) -> None:
        """A parent that did not start the run cannot answer it: ``UnknownRunError``."""
        m = self.model[run]
        other = self.blocks[next(o for o in TALKERS if o != m.parent)].value
        outcome = self._reply(lambda: other.answer(run, 7))
        assert isinstance(outcome, td.UnknownRunError), outcome

    def _reply(self, act: Callable[[], Any]) -> Any:
        async def reply() -> Any:
            try:
                outcome = act()
            except td.DelegationError as exc:
                outcome = exc
            await tdt.settle()
            return outcome

        return self.host.call(reply)

    @rule(run=runs, usage=st.none() | st.integers(0, MOST_REPORTED))
    def finish(self, run: str, usage: int | None) -> None:
        """The runner returns, with ``Output(usage=...)`` or without: what it returns
        counts, and may stop the other runs of its scopes, never its own run."""
        if self._send(run, ("return", usage)):
            self.model[run].status = S.COMPLETED
            if usage is not None:
                self._report(run, usage, returned=True)
            self._promote_all(self.now)

    @rule(run=runs)
    def cancel(self, run: str) -> None:
        m = self.model[run]
        parent = self.blocks[m.parent].value

        async def cancel() -> td.CancelAck:
            ack = parent.cancel(run)
            # Its questions are withdrawn at once, before its runner runs again.
            assert all(q.run_id != run for q in parent.questions())
            now = parent.status(run)
            assert now.status is not S.INPUT_REQUIRED
            assert now.questions == ()
            await tdt.settle()
            return ack

        ack = self.host.call(cancel)
        assert ack.cancel_requested is m.live
        if m.live:
            self._cancelled(run)
            self._promote_all(self.now)

    @rule(seconds=st.integers(1, 12))
    def advance(self, seconds: int) -> None:
        self.host.call(tdt.advance, seconds)
        end = self.now + seconds
        # Deadlines free slots, and pending runs start then: one instant at a time.
        while True:
            due = [m.deadline for m in self.model.values() if m.live and m.deadline <= end]
            at = min(due, default=end)
            for m in self.model.values():
                if not m.live:
                    continue
                asked = m.question
                if asked is not None and asked[0] <= at and asked[0] < m.deadline:
                    m.question = None
                    m.status = S.RUNNING
                    m.heard.append("timeout")
                if m.deadline <= at:
                    m.question = None
                    m.status = S.TIMED_OUT
            self._promote_all(at)
            if not due:
                break
        self.now = end

    @rule(run=runs)
    def poll(self, run: str) -> None:
        m = self.model[run]
        parent = self.blocks[m.parent].value

        async def poll() -> Any:
            try:
                return await parent.wait(run, timeout=0)
            except td.DelegationError as exc:
                return exc

        outcome = self.host.call(poll)
        if m.status is S.COMPLETED:
            assert isinstance(outcome, td.RunResult)
        elif m.status is S.CANCELLED:
            assert isinstance(outcome, td.RunCancelledError), outcome
            cause = outcome.__cause__
            if m.cause is None:
                assert not isinstance(cause, td.BudgetExceededError), cause
            else:
                # contract §20: the budget stop is the cause, naming the innermost scope.
                assert isinstance(cause, td.BudgetExceededError), cause
                assert cause.scope == m.cause
                assert cause.limit == "max_requests"
                limit = m.limit if m.cause == "run" else self.purses[m.parent].limit
                assert cause.limit_value == limit
                assert isinstance(cause.spent, int)
                assert limit is not None
                assert limit < cause.spent <= limit + MOST_REPORTED
        elif m.status is S.TIMED_OUT:
            assert isinstance(outcome, td.RunTimedOutError)
        else:
            assert isinstance(outcome, td.RunHandle)
            assert outcome.status is m.status
            assert len(outcome.questions) == (m.question is not None)

    # -- invariants ------------------------------------------------------------------

    @invariant()
    def matches_the_model(self) -> None:
        if self.runtime is None:
            return

        def look() -> tuple[Any, ...]:
            parents = {owner: block.value for owner, block in self.blocks.items()}
            handles = {run_id: parents[m.parent].status(run_id) for run_id, m in self.model.items()}
            questions = {owner: p.questions() for owner, p in parents.items()}
            unobserved = {owner: p.unobserved() for owner, p in parents.items()}
            usage = {owner: p.usage() for owner, p in parents.items()}
            assert self.runtime is not None
            return handles, questions, unobserved, usage, self.runtime.value.usage

        handles, questions, unobserved, usage, total = self.host.call_sync(look)
        for owner, asked in questions.items():
            asking = [
                r for r, m in self.model.items() if m.question is not None and m.parent == owner
            ]
            assert sorted(q.run_id for q in asked) == sorted(asking), owner
        for run_id, m in self.model.items():
            handle = handles[run_id]
            assert handle.status is m.status, (run_id, handle, m)
            assert len(handle.questions) == (m.question is not None)
            if m.seq == 0:
                assert handle.progress is None
            else:
                assert handle.progress == td.Progress(
                    m.latest[0] if m.latest else None,
                    m.latest[1] if m.latest else None,
                    None,
                    m.seq,
                )
            assert self.heard[self.tasks[run_id]] == m.heard
            assert handle.usage == (td.Usage(requests=m.spent) if m.reported else None), (
                run_id,
                handle,
                m,
            )
            # Without the model: a run's spend passes its own limit by at most one report.
            if m.limit is not None and handle.usage is not None:
                assert handle.usage.requests <= m.limit + MOST_REPORTED, (run_id, handle)
        for owner, purse in self.purses.items():
            assert usage[owner] == td.Usage(requests=purse.spent), (owner, usage[owner], purse)
            if purse.limit is not None:
                assert usage[owner].requests <= purse.limit + MOST_REPORTED, (owner, usage[owner])
            # unobserved() handles carry the same progress and usage as status (§19-§20).
            for handle in unobserved[owner]:
                assert handle == handles[handle.run_id], (handle, handles[handle.run_id])
        assert total == td.Usage(requests=sum(purse.spent for purse in self.purses.values()))

    def teardown(self) -> None:
        try:
            for block in self.blocks.values():
                self.host.call(_leave, block)
            if self.runtime is not None:
                self.host.call(_leave, self.runtime)
        finally:
            self.host.close()
            if self.folder is not None:
                shutil.rmtree(self.folder, ignore_errors=True)


@pytest.mark.timeout(1800)
def test_progress_questions_and_budgets_match_their_model() -> None:
    current = settings()
    run_state_machine_as_test(
        QuestionsMachine,
        settings=settings(
            current, max_examples=max(200, current.max_examples), stateful_step_count=50
        ),
    )
