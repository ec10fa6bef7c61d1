"""A deterministic load simulation: thousands of runs over virtual hours.

:func:`simulate` plays a seeded scenario on a real runtime under an
autojump ``MockClock``: sessions (parents) that come and go, background and
foreground runs with mixed durations, failures, deadlines, nested runs,
cancellations and timed waits. It returns the event trace, rendered without
run ids, so the same seed gives the same bytes on every run and machine.

Why it is deterministic even though Trio orders same-instant tasks freely:

* the host acts only after every task is blocked (:func:`settle`), so its
  requests never race with what the runners do at the same instant;
* every duration is a whole number of seconds and every wait timeout ends at
  a half second, so a timed wait never ties with a run changing status;
* the trace is rendered in canonical order (time, then run label).
"""

from __future__ import annotations

import math
import random
import time as _wall
from collections import Counter
from collections.abc import Mapping
from contextlib import AsyncExitStack
from typing import final

import attrs
import trio

from .._config import Config
from .._core import Parent, Runtime
from .._errors import DelegationError, UnresolvedDelegationError
from .._results import RunResult
from .._subagent import Subagent
from .._surfaces import open_runtime
from ._clock import mock_clock, settle
from ._scripted import (
    Checkpoint,
    Hang,
    Raise,
    Return,
    Script,
    ScriptedRunner,
    Shielded,
    Sleep,
    Start,
    WaitStarted,
)
from ._trace import Trace, digest_lines

__all__ = ["SimulationResult", "simulate"]

_SESSION_SECONDS = 3 * 3600


@final
@attrs.frozen
class SimulationResult:
    """What :func:`simulate` saw.

    Attributes:
        trace: the canonical event trace, one line per event, without run ids.
        virtual_seconds: how far the Trio clock moved.
        wall_seconds: real seconds the simulation took (not part of the trace).
        summary: how many events of each kind (``"admitted running"``,
            ``"finally raised ValueError"``, ``"wait timeout"``, ...).
    """

    trace: tuple[str, ...]
    virtual_seconds: float
    wall_seconds: float
    summary: Mapping[str, int]

    @property
    def digest(self) -> str:
        """SHA-256 of the trace lines joined with newlines."""
        return digest_lines(self.trace)


@attrs.frozen
class _Job:
    index: int
    at: int
    session: int
    subagent: str
    foreground: bool
    cancel_at: int | None
    wait_at: int | None
    wait_timeout: float

    @property
    def task(self) -> str:
        return f"j{self.index:05d}"


@attrs.frozen(order=True)
class _Action:
    at: int
    order: int  # ties at one instant: rotations, then admissions, cancels, waits
    index: int
    kind: str


def _script(rng: random.Random, job: _Job, runners: Mapping[str, ScriptedRunner]) -> Script:
    r = rng.randint
    task = job.task
    match job.subagent:
        case "quick":
            return Script.of(Sleep(r(1, 120)), Return({"job": job.index}))
        case "flaky":
            return Script.of(Sleep(r(1, 60)), Raise(ValueError, "flaky"))
        case "slow":
            return Script.of(Sleep(r(300, 1500)), Checkpoint(), Return("slow"))
        case "stuck":
            return Script.of(Sleep(r(0, 10)), Hang(), cleanup=r(0, 30))
        case "careful":
            steps = (Sleep(r(1, 60)), Shielded(r(1, 20)), Sleep(r(1, 60)), Return("careful"))
            return Script(steps, cleanup=r(5, 60))
        case _:  # "boss": one nested run, usually waited for
            # The child sleeps an odd, the boss an even number of seconds: a
            # boss that ends without waiting never ends at the instant its
            # child acts (which of the two went first would be open).
            child = f"{task}/0"
            runners["quick"].assign(child, Script.of(Sleep(2 * r(0, 30) + 1), Return("child")))
            pause = Sleep(2 * r(1, 15))
            if rng.random() < 0.7:
                return Script.of(Start("quick", child), pause, WaitStarted(), Return("boss"))
            return Script.of(Start("quick", child), pause, Return("boss"))


def _plan(
    seed: int, runs: int, seconds: int, sessions: int, runners: Mapping[str, ScriptedRunner]
) -> tuple[list[_Job], list[_Action]]:
    rng = random.Random(seed)
    kinds = ["quick", "flaky", "slow", "stuck", "careful", "boss"]
    weights = [50, 12, 10, 5, 13, 10]
    times = sorted(rng.randrange(seconds) for _ in range(runs))
    jobs: list[_Job] = []
    actions: list[_Action] = []
    for index, at in enumerate(times):
        foreground = rng.random() < 0.1
        cancel_at = wait_at = None
        if not foreground and rng.random() < 0.08:
            cancel_at = at + rng.randint(0, 200)
        if not foreground and rng.random() < 0.25:
            wait_at = at + rng.randint(0, 60)
        job = _Job(
            index,
            at,
            rng.randrange(sessions),
            rng.choices(kinds, weights)[0],
            foreground,
            cancel_at,
            wait_at,
            rng.randint(1, 240) + 0.5,
        )
        runners[job.subagent].assign(job.task, _script(rng, job, runners))
        jobs.append(job)
        actions.append(_Action(at, 1, index, "admit"))
        if cancel_at is not None:
            actions.append(_Action(cancel_at, 2, index, "cancel"))
        if wait_at is not None:
            actions.append(_Action(wait_at, 3, index, "wait"))
    stagger = _SESSION_SECONDS // sessions
    for session in range(sessions):
        for at in range(stagger * (session + 1), seconds, _SESSION_SECONDS):
            actions.append(_Action(at, 0, session, "rotate"))
    actions.sort()
    return jobs, actions


@attrs.define(eq=False)
class _Driver:
    """The host: one task acting at planned times, after everything else settled."""

    runtime: Runtime
    trace: Trace
    jobs: list[_Job]
    nursery: trio.Nursery
    sessions: list[tuple[str, Parent, AsyncExitStack]] = attrs.Factory(list)
    generation: list[int] = attrs.Factory(list)
    admitted: dict[int, tuple[Parent, str]] = attrs.Factory(dict)
    tasks_by_id: dict[str, str] = attrs.Factory(dict)

    async def open_session(self, session: int) -> None:
        if session == len(self.generation):
            self.generation.append(0)
        else:
            self.generation[session] += 1
        owner = f"s{session}.{self.generation[session]}"
        stack = AsyncExitStack()
        parent = await stack.enter_async_context(self.runtime.open_parent(owner))
        entry = (owner, parent, stack)
        if session == len(self.sessions):
            self.sessions.append(entry)
        else:
            self.sessions[session] = entry
        self.trace.record(None, "session", f"{owner} opened")

    async def close_session(self, session: int) -> None:
        owner, _, stack = self.sessions[session]
        try:
            await stack.aclose()
        except UnresolvedDelegationError as exc:
            statuses = Counter(entry.status for entry in exc.unresolved)
            detail = ", ".join(f"{status} {count}" for status, count in sorted(statuses.items()))
            self.trace.record(None, "session", f"{owner} closed: unresolved {detail}")
        else:
            self.trace.record(None, "session", f"{owner} closed: resolved")

    async def act(self, action: _Action) -> None:
        job = self.jobs[action.index] if action.kind != "rotate" else None
        match action.kind:
            case "rotate":
                await self.close_session(action.index)
                await self.open_session(action.index)
            case "admit":
                assert job is not None
                await self.admit(job)
            case "cancel":
                assert job is not None
                self.cancel(job)
            case "wait":
                assert job is not None
                if job.index in self.admitted:
                    parent, run_id = self.admitted[job.index]
                    self.nursery.start_soon(self.waiter, parent, run_id, job.wait_timeout)

    async def admit(self, job: _Job) -> None:
        _, parent, _ = self.sessions[job.session]
        if job.foreground:
            self.nursery.start_soon(self.caller, parent, job)
            return
        try:
            handle = await parent.start(job.subagent, job.task)
        except DelegationError as exc:
            self.trace.record(None, "refused", f"{job.task} {exc.kind()}")
            return
        self.admitted[job.index] = (parent, handle.run_id)
        self.tasks_by_id[handle.run_id] = job.task
        self.trace.record(handle.run_id, "admitted", handle.status.value, task=job.task)

    async def caller(self, parent: Parent, job: _Job) -> None:
        try:
            result = await parent.delegate(job.subagent, job.task)
        except DelegationError as exc:
            if exc.run_id is None:
                self.trace.record(None, "refused", f"{job.task} {exc.kind()}")
            else:
                self.trace.record(exc.run_id, "delegate", f"error {exc.kind()}", task=job.task)
            return
        self.trace.record(result.run_id, "delegate", "result", task=job.task)

    def cancel(self, job: _Job) -> None:
        if job.index not in self.admitted:
            return
        parent, run_id = self.admitted[job.index]
        try:
            ack = parent.cancel(run_id)
        except DelegationError as exc:
            self.trace.record(run_id, "cancel", f"error {exc.kind()}")
            return
        self.trace.record(run_id, "cancel", f"requested={ack.cancel_requested} {ack.status}")

    async def waiter(self, parent: Parent, run_id: str, timeout: float) -> None:
        for attempt in range(3):
            # The first wait starts on a whole second and ends on a half one;
            # the next ones start there, so whole-second timeouts keep them
            # ending on half seconds, never tied with a run changing status.
            seconds = timeout if attempt == 0 else float(math.floor(timeout))
            try:
                answer = await parent.wait(run_id, timeout=seconds)
            except DelegationError as exc:
                self.trace.record(run_id, "wait", f"error {exc.kind()}")
                return
            if isinstance(answer, RunResult):
                self.trace.record(run_id, "wait", "result")
                return
            self.trace.record(run_id, "wait", f"timeout {answer.status}")


def _subagents(runners: Mapping[str, ScriptedRunner]) -> list[Subagent]:
    return [
        Subagent("quick", runners["quick"], description="answers fast"),
        Subagent("flaky", runners["flaky"], description="fails"),
        Subagent("slow", runners["slow"], timeout_seconds=900.0, description="often too slow"),
        Subagent("stuck", runners["stuck"], timeout_seconds=300.0, description="never answers"),
        Subagent("careful", runners["careful"], description="cleans up when cancelled"),
        Subagent("boss", runners["boss"], children=("quick",), description="delegates"),
    ]


def simulate(
    seed: int = 0, *, runs: int = 10_000, hours: float = 24.0, sessions: int = 8
) -> SimulationResult:
    """Play a seeded scenario of *runs* runs over *hours* virtual hours.

    Runs are spread uniformly over the period, each on one of *sessions*
    parents (each closed and reopened every three virtual hours, recording
    its fail-closed verdict). About half the runs answer in up to two
    minutes; others fail, outlive their deadline, hang, clean up slowly
    when cancelled, or start a nested run. One in ten is a foreground
    ``delegate``; of the background ones, 8 % get cancelled and 25 % get
    timed waits. The same seed always gives the same trace.

    Args:
        seed: the scenario's random seed.
        runs: how many runs to admit.
        hours: the virtual period over which they are admitted.
        sessions: how many parents at a time.

    Returns:
        the trace and a summary; see :class:`SimulationResult`.

    Raises:
        ValueError: *runs*, *hours* or *sessions* is not positive.
    """
    if runs < 1 or sessions < 1 or not hours > 0:
        raise ValueError("runs, hours and sessions must be positive")
    trace = Trace()
    names = ("quick", "flaky", "slow", "stuck", "careful", "boss")
    runners = {name: ScriptedRunner(trace=trace) for name in names}
    seconds = max(1, round(hours * 3600))
    jobs, actions = _plan(seed, runs, seconds, sessions, runners)
    config = Config(
        subagent_timeout_seconds=600.0,
        max_concurrent_runs=4,
        # Never reached: a nested admission racing other runs of its instant
        # for the last live slot would make the trace depend on Trio's order.
        max_live_runs=4 * runs,
        retention_seconds=7200.0,
        retention_max_runs=max(1000, runs),
    )

    async def main() -> float:
        async with (
            open_runtime(_subagents(runners), config=config) as runtime,
            trio.open_nursery() as nursery,
        ):
            driver = _Driver(runtime, trace, jobs, nursery)
            for session in range(sessions):
                await driver.open_session(session)
            for action in actions:
                await trio.sleep_until(action.at)
                await settle()
                await driver.act(action)
            await trio.sleep_until(seconds)
            await settle()
            for session in range(sessions):
                await driver.close_session(session)
        return trio.current_time()

    started = _wall.perf_counter()
    virtual = trio.run(main, clock=mock_clock(autojump=True))
    wall = _wall.perf_counter() - started
    summary = Counter(_summary_key(event.kind, event.detail) for event in trace.events)
    return SimulationResult(tuple(trace.lines()), virtual, wall, dict(sorted(summary.items())))


def _summary_key(kind: str, detail: str) -> str:
    """The summary bucket of one event: its kind and the gist of its detail."""
    words = detail.split()
    if kind in ("start", "cleanup", "cancelled"):
        return kind
    if kind in ("step", "refused"):  # "<index> <step> ..." / "<task> <error>"
        return f"{kind} {words[1]}"
    if kind == "session":  # "<owner> opened" / "<owner> closed: [un]resolved ..."
        return " ".join([kind, *(word.rstrip(":") for word in words[1:3])])
    return f"{kind} {' '.join(words[:2])}"
