"""The ``trio-delegate demo`` scenario: a scripted, offline delegation session.

A parent delegates to three scripted subagents (an ``investigator``, a
``writer`` and a flaky ``checker``) and shows, in about fifteen seconds, what a
host relies on: a foreground delegation; background runs whose ``start`` is
an admission ack, not a result; timed waits that answer with a running
handle while the child goes on; a cancellation whose ack reads ``running``
until the child's shielded cleanup ends; a child deadline expiring; a failure
recovered by a replacement run (``replaces=``); a child reporting progress;
a child asking its parent a question (the run reads ``input_required`` until
the parent answers); tokens and cost reported by every run; a run stopped by
its budget; and the fail-closed check, refusing while work is unresolved and
passing at the end.

Runners only ``await trio.sleep(...)`` and return small JSON dicts: no
network, no randomness. All the pacing comes from the Trio clock: under
``trio.testing.MockClock(autojump_threshold=0)`` the scenario runs instantly
and deterministically (tests); the command runs it on a :class:`PacedClock`,
whose speed factor sets how fast it goes. The story is sent to a
:class:`~trio_delegate._demo_view.Reporter` (live table, plain lines, or a
recording one in tests).

The scripted times are chosen so that no two things the story depends on
happen at the same instant: Trio runs tasks woken together in an arbitrary
order, and the output would then differ between runs.
"""

from __future__ import annotations

import collections
import json
import math
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Final, TextIO

import attrs
import trio
from rich.console import Console

import trio_delegate as td

from .._checks import terminal_safe
from .._self import shell_command
from .._threads import VirtualClock
from .._urls import REPOSITORY_URL, docs_page
from ._demo_view import Event, LiveReporter, PlainReporter, Reporter, RunRow, Summary, short_id
from ._runs import DEFAULT_DB

__all__ = ["FlakyCheckError", "PacedClock", "Stopwatch", "pick_reporter", "play", "run_demo"]

OWNER = "demo"

#: The verdict when the final fail-closed check passes.
RESOLVED_VERDICT = (
    "every delegated run completed and was observed, or was replaced by a run that was"
)

# How often, in real seconds, the live table polls run statuses: drawing
# takes a few milliseconds, and ten frames a second is plenty for the eye.
_POLL_SECONDS = 0.1


class FlakyCheckError(Exception):
    """What the scripted checker raises on its first attempt."""


@attrs.frozen
class Stopwatch:
    """Scenario time: Trio seconds since the scenario started."""

    origin: float

    @classmethod
    def starting_now(cls) -> Stopwatch:
        """A stopwatch whose zero is the current Trio time."""
        return cls(trio.current_time())

    def now(self) -> float:
        """Seconds since the start, on the Trio clock."""
        return trio.current_time() - self.origin


class PacedClock(VirtualClock):
    """A Trio clock that plays the scenario *speed* times faster than real time.

    Its time moves only while Trio waits with nothing to run, and only up to
    the deadline Trio waits for: a wait of ``(deadline - now) / speed`` real
    seconds that runs its course brings the clock to that deadline. Work
    holds it still: the event loop's own steps (a slow terminal, garbage
    collection) and, as on a ``MockClock``, the store's work on worker
    threads. Two timers seconds apart in the script therefore never expire
    together, and no timer meets its deadline while the runtime is still
    busy with what came before it: the scenario plays exactly as it does
    under ``MockClock``, at any speed and however busy the machine.
    """

    __slots__ = ("_now", "_target", "_waiting_since", "speed")

    def __init__(self, speed: float = 1.0) -> None:
        if not (math.isfinite(speed) and speed > 0):
            raise ValueError(f"speed must be a finite number > 0, got {speed!r}")
        self.speed = speed
        self._now = 0.0
        # The deadline of the wait in progress, and when (real time) it began.
        self._target = 0.0
        self._waiting_since: float | None = None

    def start_clock(self) -> None:
        """Trio starts running: time 0."""

    def current_time(self) -> float:
        """The scenario's time: the deadline of the last wait that ran its course."""
        since = self._waiting_since
        if since is not None:
            # The first reading after a wait, made by Trio to expire what is due.
            # A wait cut short (something woke the loop) moves nothing: the next
            # one starts over, so when timers expire never depends on when the
            # machine happened to deliver an event.
            self._waiting_since = None
            waited = (time.perf_counter() - since) * self.speed
            # Timeouts are rounded by the system: "ran its course" allows for it.
            if waited >= (self._target - self._now) * _WAIT_COURSE:
                self._now = max(self._now, self._target)
        return self._now

    def deadline_to_sleep_time(self, deadline: float) -> float:
        """Trio has nothing to run until *deadline*: wait for it, at pace."""
        self._target = deadline
        self._waiting_since = time.perf_counter()
        return (deadline - self._now) / self.speed


#: The share of a paced wait after which the wait counts as run to its course.
_WAIT_COURSE: Final = 0.99


# -- the script -------------------------------------------------------------------


@attrs.frozen
class _Script:
    """How a scripted runner handles one task.

    Attributes:
        seconds: how long the work takes before it returns *result*.
        result: the JSON dict returned.
        cleanup_seconds: shielded cleanup after a cancellation (0: none).
        flaky_after: when set, the first attempt raises FlakyCheckError after
            this long; later attempts of the same task succeed.
        flaky_message: the message of that error.
        steps: the work is done in this many equal steps.
        progress: when set, each step is reported with ``ctx.progress``
            as ``"<progress> <n> of <steps>"``.
        usage: what each step spent, reported with ``ctx.add_usage`` after it.
        question: when set, asked of the parent (``ctx.ask``) halfway
            through; the answer is added to the result as ``"answer"``.
    """

    seconds: float
    result: Mapping[str, Any]
    cleanup_seconds: float = 0.0
    flaky_after: float | None = None
    flaky_message: str = ""
    steps: int = 1
    progress: str = ""
    usage: td.Usage | None = None
    question: str = ""


FIND_TASK = "Find where the HTTP client configures request retries"
NOTES_TASK = "Draft release notes for the retry change"
AUDIT_TASK = "Audit every call site of the retry helper across the repository"
GUIDE_TASK = "Rewrite the whole networking guide"
CHECK_TASK = "Run the retry integration tests"
AUDIT_NET_TASK = "Audit the retry helper's call sites in net/ only"
GUIDE_SECTION_TASK = "Update only the retry section of the networking guide"
CHANGELOG_TASK = "Add the retry change to the changelog"
TRACE_TASK = "Trace the retry helper through the whole git history"
TRACE_NET_TASK = "Trace the retry helper through the last release only"

#: What the writer asks while it writes the changelog entry, and the answer.
QUESTION = "Which release ships the retry change?"
ANSWER = "2.4.0"

#: Each investigator run may spend this much: the history trace goes over it.
INVESTIGATOR_BUDGET = td.Budget(max_total_tokens=20_000)


def _spent(requests: int, input_tokens: int, output_tokens: int, cost_usd: float) -> td.Usage:
    return td.Usage(
        requests=requests,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cost_usd=cost_usd,
    )


#: Child deadlines in scenario seconds. The investigator's is short so that
#: the repository-wide audit (8 s of work) runs out of time.
DEADLINES: Mapping[str, float] = {"investigator": 4.0, "writer": 40.0, "checker": 10.0}

_INVESTIGATOR: dict[str, _Script] = {
    FIND_TASK: _Script(
        1.0,
        {"file": "net/retry.py", "setting": "MAX_RETRIES", "value": 3},
        usage=_spent(2, 3_100, 420, 0.012),
    ),
    AUDIT_TASK: _Script(8.0, {"call_sites": 57}),
    AUDIT_NET_TASK: _Script(
        1.0, {"call_sites": 9, "directory": "net/"}, usage=_spent(3, 5_600, 610, 0.021)
    ),
    # Reports 6,000 tokens every 0.5 s: the fourth report, at 2.0 s, passes
    # the 20,000-token budget, well before the 4.0 s deadline.
    TRACE_TASK: _Script(
        4.0,
        {"commits": 1200},
        steps=8,
        progress="reading history chunk",
        usage=_spent(1, 5_000, 1_000, 0.018),
    ),
    TRACE_NET_TASK: _Script(
        1.0, {"commits": 31, "since": "2.3.0"}, usage=_spent(2, 4_400, 380, 0.016)
    ),
}
_WRITER: dict[str, _Script] = {
    NOTES_TASK: _Script(
        5.8,
        {"title": "Retries are now configurable", "words": 118},
        steps=4,
        progress="drafting section",
        usage=_spent(1, 2_300, 510, 0.011),
    ),
    GUIDE_TASK: _Script(30.0, {"pages": 42}, cleanup_seconds=1.0),
    GUIDE_SECTION_TASK: _Script(
        0.8, {"section": "Retries", "words": 230}, usage=_spent(2, 6_800, 1_240, 0.034)
    ),
    CHANGELOG_TASK: _Script(
        1.0,
        {"entry": "Retries are now configurable"},
        steps=2,
        progress="writing the entry, step",
        usage=_spent(1, 1_900, 260, 0.008),
        question=QUESTION,
    ),
}
_CHECKER: dict[str, _Script] = {
    CHECK_TASK: _Script(
        2.0,
        {"passed": 40, "failed": 0},
        usage=_spent(1, 1_200, 90, 0.004),
        flaky_after=1.2,
        flaky_message="2 of 40 tests failed: connection reset by peer",
    ),
}


# -- what the scenario knows of its runs ----------------------------------------------


class _Board:
    """The runs the scenario knows of, as shown in the live table.

    Background runs are known from ``start``; a foreground run's id only comes
    back with its result, so the scripted runners also announce themselves
    when they begin (the live table can then show a foreground run while the
    parent waits for it).
    """

    def __init__(self, watch: Stopwatch, deadlines: Mapping[str, float]) -> None:
        self._watch = watch
        self._deadlines = deadlines
        self._rows: dict[str, RunRow] = {}
        # Foreground replacements by (subagent, task): the run id is not known
        # until the runner starts.
        self._replacing: dict[tuple[str, str], str] = {}

    @property
    def rows(self) -> tuple[RunRow, ...]:
        """Every known run, in the order the scenario learned of it."""
        return tuple(self._rows.values())

    def row(self, run_id: str) -> RunRow:
        """The row of a known run."""
        return self._rows[run_id]

    def learn(self, run_id: str, subagent: str, task: str) -> RunRow:
        """The row of *run_id*, added if it is new."""
        row = self._rows.get(run_id)
        if row is None:
            deadline = self._deadlines.get(subagent)
            row = RunRow(run_id, subagent, task, started_at=self._watch.now(), deadline=deadline)
            self._rows[run_id] = row
            replaces = self._replacing.pop((subagent, task), None)
            if replaces is not None:
                self.link(replaces, run_id)
        return row

    def runner_started(self, ctx: td.ChildContext) -> None:
        """A scripted runner began: learn the run if it is new."""
        self.learn(ctx.run_id, ctx.subagent, ctx.task)

    def expect_replacement(self, subagent: str, task: str, replaces: str) -> None:
        """The next run of *task* on *subagent* replaces *replaces*."""
        self._replacing[(subagent, task)] = replaces

    def link(self, replaced: str, replacement: str) -> None:
        """Record that *replacement* was started with ``replaces=replaced``."""
        self._rows[replacement].replaces = replaced
        self._rows[replaced].replaced_by = replacement

    def saw(self, run_id: str, status: td.RunStatus) -> None:
        """Record a status read from an answer or a poll."""
        row = self._rows[run_id]
        row.status = status
        if status.is_terminal and row.ended_at is None:
            row.ended_at = self._watch.now()

    def saw_handle(self, handle: td.RunHandle) -> None:
        """Record a handle's status, progress, open question and usage."""
        self.saw(handle.run_id, handle.status)
        row = self._rows[handle.run_id]
        row.progress = handle.progress
        row.question = handle.questions[0].text if handle.questions else ""
        if handle.usage is not None:
            row.usage = handle.usage

    def poll(self, parent: td.Parent) -> None:
        """Refresh every run with ``parent.status`` (never observes).

        Ended runs too: the usage a run reported is read from its handle.
        """
        for row in self._rows.values():
            self.saw_handle(parent.status(row.run_id))


# -- scripted subagents -----------------------------------------------------------------


def _runner(
    scripts: Mapping[str, _Script], watch: Stopwatch, board: _Board, reporter: Reporter
) -> Callable[[td.ChildContext], Awaitable[object]]:
    """A runner that plays *scripts* (by task) on the Trio clock."""
    attempts: collections.Counter[str] = collections.Counter()

    async def run(ctx: td.ChildContext) -> object:
        board.runner_started(ctx)
        script = scripts[ctx.task]
        attempts[ctx.task] += 1
        if script.flaky_after is not None and attempts[ctx.task] == 1:
            await trio.sleep(script.flaky_after)
            raise FlakyCheckError(script.flaky_message)
        try:
            answer = await _work(ctx, script)
        except trio.Cancelled:
            if script.cleanup_seconds:
                await _clean_up(ctx, script.cleanup_seconds, watch, reporter)
            raise
        result = dict(script.result)
        if script.question:
            result["answer"] = answer
        return result

    return run


async def _work(ctx: td.ChildContext, script: _Script) -> object:
    """Do *script*'s work step by step: progress, the question, usage."""
    answer: object = None
    for step in range(script.steps):
        if script.progress:
            message = f"{script.progress} {step + 1} of {script.steps}"
            ctx.progress(message, progress=step, total=script.steps)
        if script.question and step == script.steps // 2:
            answer = await ctx.ask(script.question)
        await trio.sleep(script.seconds / script.steps)
        if script.usage is not None:
            ctx.add_usage(script.usage)
    return answer


async def _clean_up(
    ctx: td.ChildContext, seconds: float, watch: Stopwatch, reporter: Reporter
) -> None:
    """Shielded cleanup after a cancellation; the run reads ``running`` meanwhile."""

    def note(text: str) -> None:
        running = td.RunStatus.RUNNING.value
        reporter.event(Event(watch.now(), "cleanup", running, ctx.subagent, ctx.run_id, note=text))

    note("saw the cancellation; saving the partial draft in a shielded scope")
    # Shielded so the cancellation cannot cut the cleanup short; bounded so a
    # stuck cleanup could not hold the run forever.
    with trio.move_on_after(seconds * 2, shield=True):
        await trio.sleep(seconds)
    note("draft saved; re-raising Cancelled, so the run settles as cancelled")


def _subagents(watch: Stopwatch, board: _Board, reporter: Reporter) -> list[td.Subagent]:
    """The investigator, the writer and the flaky checker."""
    return [
        td.Subagent(
            "investigator",
            _runner(_INVESTIGATOR, watch, board, reporter),
            description="Reads the code base and reports findings.",
            timeout_seconds=DEADLINES["investigator"],
            budget=INVESTIGATOR_BUDGET,
        ),
        td.Subagent(
            "writer",
            _runner(_WRITER, watch, board, reporter),
            description="Writes release notes and documentation.",
            timeout_seconds=DEADLINES["writer"],
            asks=True,
        ),
        td.Subagent(
            "checker",
            _runner(_CHECKER, watch, board, reporter),
            description="Runs test suites; a little flaky.",
            timeout_seconds=DEADLINES["checker"],
        ),
    ]


# -- the scripted parent ---------------------------------------------------------------


def _compact(value: Any, width: int = 60) -> str:
    text = json.dumps(value, separators=(", ", ": "))
    return text if len(text) <= width else text[: width - 1] + "…"


class _Director:
    """The scripted parent agent: each call reports one event with its answer."""

    def __init__(
        self, parent: td.Parent, board: _Board, watch: Stopwatch, reporter: Reporter
    ) -> None:
        self.parent = parent
        self.board = board
        self.watch = watch
        self.reporter = reporter

    def step(self, title: str) -> None:
        """Narrate the start of a step."""
        self.reporter.step(self.watch.now(), title)

    def report(
        self, action: str, answer: str, run_id: str = "", *, args: str = "", note: str = ""
    ) -> None:
        """Report an event about *run_id* (its subagent is looked up)."""
        subagent = self.board.row(run_id).subagent if run_id else ""
        event = Event(self.watch.now(), action, answer, subagent, run_id, args=args, note=note)
        self.reporter.event(event)

    async def pause(self, seconds: float) -> None:
        """The parent thinks for a moment (scenario seconds)."""
        await trio.sleep(seconds)

    async def follow(self, interval: float) -> None:
        """Poll the known runs' statuses every *interval* seconds, until cancelled."""
        while True:
            await trio.sleep(interval)
            self.board.poll(self.parent)
            self.reporter.refresh(self.watch.now(), self.board.rows)

    async def delegate(self, name: str, task: str, *, replaces: str | None = None) -> None:
        """Delegate in the foreground: the answer is the result itself."""
        if replaces is not None:
            self.board.expect_replacement(name, task, replaces)
        result = await self.parent.delegate(name, task, replaces=replaces)
        self._observed(result)
        args = f"replaces={short_id(replaces)}" if replaces else ""
        note = f"the result itself, observed: {_compact(result.final_result, 56)}"
        self.report("delegate", td.RunStatus.COMPLETED.value, result.run_id, args=args, note=note)

    async def start(self, name: str, task: str, *, replaces: str | None = None) -> str:
        """Start in the background: the answer is an admission ack."""
        handle = await self.parent.start(name, task, replaces=replaces)
        self.board.learn(handle.run_id, name, task)
        self.board.saw(handle.run_id, handle.status)
        args = ""
        if replaces is not None:
            self.board.link(replaces, handle.run_id)
            args = f"replaces={short_id(replaces)}"
        note = "admission ack, not a result"
        self.report("start", handle.status.value, handle.run_id, args=args, note=note)
        return handle.run_id

    async def wait(
        self, run_id: str, *, timeout: float | None = None, note: str = ""
    ) -> td.RunResult | td.RunHandle | None:
        """Wait for a run (*timeout* in scenario seconds); report what came back."""
        args = f"timeout={timeout:.1f}s" if timeout is not None else ""
        try:
            answer = await self.parent.wait(run_id, timeout=timeout)
        except td.DelegationError as exc:
            self._ended_badly(run_id, exc)
            self.report("wait", type(exc).__name__, run_id, args=args, note=note or self._why(exc))
            return None
        if isinstance(answer, td.RunHandle):
            self.board.saw_handle(answer)
            if answer.questions:
                note = note or f"asks: {answer.questions[0].text}"
            elif answer.progress is not None and answer.progress.message:
                note = f"{note}; progress: {answer.progress.message}"
            self.report("wait", answer.status.value, run_id, args=args, note=note)
            return answer
        self._observed(answer)
        note = note or f"the result, now observed: {_compact(answer.final_result, 56)}"
        self.report("wait", td.RunStatus.COMPLETED.value, run_id, args=args, note=note)
        return answer

    def status(self, run_id: str, note: str) -> td.RunHandle:
        """Read a status snapshot (never observes, never blocks)."""
        handle = self.parent.status(run_id)
        self.board.saw_handle(handle)
        self.report("status", handle.status.value, run_id, note=note)
        return handle

    def answer(self, run_id: str, value: str) -> td.AnswerAck:
        """Answer the run's oldest open question."""
        ack = self.parent.answer(run_id, value)
        self.board.saw(run_id, ack.status)
        row = self.board.row(run_id)
        row.question = ""
        row.answer = value
        note = f"accepted={ack.accepted}: the child goes on with the answer"
        self.report("answer", ack.status.value, run_id, args=json.dumps(value), note=note)
        return ack

    def cancel(self, run_id: str) -> td.CancelAck:
        """Request cancellation; the ack is not proof that the child stopped."""
        ack = self.parent.cancel(run_id)
        self.board.saw(run_id, ack.status)
        self.board.row(run_id).cancel_requested = ack.cancel_requested
        note = f"cancel_requested={ack.cancel_requested}: an ack, not proof that it stopped"
        self.report("cancel", ack.status.value, run_id, note=note)
        return ack

    def check(self) -> None:
        """Run the fail-closed check, reporting a refusal instead of raising it."""
        try:
            self.parent.check_resolved()
        except td.UnresolvedDelegationError as exc:
            self.report_refusal(exc)
        else:
            self.report("check", "passed", note=RESOLVED_VERDICT)

    def report_refusal(self, exc: td.UnresolvedDelegationError) -> None:
        """Report the runs a failed fail-closed check listed."""
        listed = ", ".join(
            f"{entry.subagent} {short_id(entry.run_id)} {entry.status}" for entry in exc.unresolved
        )
        note = f"{len(exc.unresolved)} unresolved: {listed}"
        self.report("check", type(exc).__name__, note=note)

    def _observed(self, result: td.RunResult) -> None:
        self.board.learn(result.run_id, result.subagent, result.task_summary)
        self.board.saw(result.run_id, td.RunStatus.COMPLETED)
        row = self.board.row(result.run_id)
        row.observed = True
        row.outcome = _compact(result.final_result)

    def _ended_badly(self, run_id: str, exc: td.DelegationError) -> None:
        if exc.status is not None:  # failed, cancelled or timed_out
            self.board.saw(run_id, td.RunStatus(exc.status))
        self.board.row(run_id).outcome = self._why(exc, short=True)

    def _why(self, exc: td.DelegationError, *, short: bool = False) -> str:
        # A few words for the table and log: the runtime's own messages are
        # whole sentences that also tell a model what to do next.
        if isinstance(exc, td.RunFailedError):
            return f"{exc.error_type}: {exc.error_message}"
        budget = exc.__cause__
        if isinstance(exc, td.RunCancelledError) and isinstance(budget, td.BudgetExceededError):
            spent = f"{budget.limit} {budget.spent:,} > {budget.limit_value:,}"
            return (
                f"budget stop: {spent}"
                if short
                else f"stopped by its {budget.scope} budget: {spent}"
            )
        if isinstance(exc, td.RunCancelledError):
            return "cancelled by request" if short else "cancelled by request, after its cleanup"
        if isinstance(exc, td.RunTimedOutError) and exc.run_id is not None:
            deadline = self.board.row(exc.run_id).deadline
            shown = f"{deadline:.1f}s " if deadline is not None else ""
            if short:
                return f"{shown}deadline passed"
            return f"its {shown}child deadline passed while it ran"
        return str(exc)


# -- the story -----------------------------------------------------------------------


@attrs.frozen
class _Background:
    """The ids of the runs started in the background in step 2."""

    notes: str
    audit: str
    guide: str
    checks: str


async def _story(d: _Director) -> None:
    """The whole scripted session, step by step (times are scenario seconds).

    Where the story depends on one thing happening before another (a child
    finishing before its deadline, a wait timing out before the child ends),
    the two are at least 2.5 s apart: ample under any clock, and the
    :class:`PacedClock` keeps them in order even when the process stalls.
    """
    d.step("1. Foreground: delegate() waits and returns the result itself")
    await d.delegate("investigator", FIND_TASK)  # 0.0 → 1.0 (deadline 4.0)
    await d.pause(0.5)

    d.step("2. Background: start() returns at once with an admission ack")
    runs = _Background(  # all four start at 1.5
        notes=await d.start("writer", NOTES_TASK),  # done at 7.3
        audit=await d.start("investigator", AUDIT_TASK),  # deadline at 5.5
        guide=await d.start("writer", GUIDE_TASK),  # would take 30 s
        checks=await d.start("checker", CHECK_TASK),  # raises at 2.7
    )
    await d.pause(0.5)

    d.step("3. Timed waits: the wait gives up, the child goes on")
    note = "a running handle: only the wait timed out"
    await d.wait(runs.notes, timeout=1.0, note=note)  # 2.0 → 3.0
    await d.wait(runs.audit, timeout=0.0, note="timeout=0 is a non-blocking poll")
    await d.pause(0.5)

    d.step("4. Cancel: the ack reads running until the child's shielded cleanup ends")
    d.cancel(runs.guide)  # 3.5
    d.status(runs.guide, "still running: the child is processing the cancellation")
    await d.wait(runs.guide)  # cleanup until 4.5 → RunCancelledError
    d.status(runs.guide, "the cleanup ended, the run settled")

    d.step("5. Child deadline: the run times out, whatever the wait's own timeout")
    await d.wait(runs.audit, timeout=5.0)  # 4.5 → 5.5 → RunTimedOutError

    d.step("6. Failure: the checker failed after its ack; fail-closed refuses to pass")
    await d.wait(runs.checks, timeout=1.0)  # failed at 2.7 → RunFailedError at once
    d.check()  # 5.5: notes running; audit, guide, checks not replaced
    await d.pause(0.5)

    d.step("7. Recovery: replacement runs started with replaces=<run id>")
    await _recover(d, runs)
    await d.pause(0.5)

    d.step("8. A question: the run reads input_required until the parent answers")
    await _question(d)  # 8.5 → 10.0
    await d.pause(0.5)

    d.step("9. A budget: the run that spends past it is stopped, the budget its cause")
    await _budget_stop(d)  # 10.5 → 13.5
    await d.pause(0.5)

    d.step("10. Claim of completion: parent.check_resolved()")


async def _recover(d: _Director, runs: _Background) -> None:
    """Replace every run that did not complete, and read every result."""
    retry = await d.start("checker", CHECK_TASK, replaces=runs.checks)  # 6.0 → 8.0
    audit = await d.start("investigator", AUDIT_NET_TASK, replaces=runs.audit)  # 6.0 → 7.0
    await d.delegate("writer", GUIDE_SECTION_TASK, replaces=runs.guide)  # 6.0 → 6.8
    await d.wait(runs.notes, timeout=5.0)  # 6.8 → 7.3: the later wait returns the result
    await d.wait(audit)  # done at 7.0 already: answers at once
    await d.wait(retry)  # 7.3 → 8.0


async def _question(d: _Director) -> None:
    """A child asks; the wait answers input_required at once; the parent answers."""
    run_id = await d.start("writer", CHANGELOG_TASK)  # 8.5; asks at 9.0
    await d.wait(run_id)  # 9.0: input_required, whatever the timeout
    await d.pause(0.5)
    d.status(run_id, "still input_required: the run keeps its slot, its deadline runs on")
    d.answer(run_id, ANSWER)  # 9.5
    await d.wait(run_id)  # 10.0


async def _budget_stop(d: _Director) -> None:
    """A run goes over its budget and is cancelled; a narrower replacement completes."""
    run_id = await d.start("investigator", TRACE_TASK)  # 10.5; over budget at 12.5
    await d.wait(run_id)  # 12.5 → RunCancelledError, caused by BudgetExceededError
    await d.delegate("investigator", TRACE_NET_TASK, replaces=run_id)  # 12.5 → 13.5


async def _alongside_poller(d: _Director, body: Callable[[_Director], Awaitable[None]]) -> None:
    """Run *body*, with the status-polling task when the reporter wants one."""
    interval = d.reporter.poll_interval
    if interval is None:
        await body(d)
        return
    failure: BaseException | None = None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(d.follow, interval)
        try:
            await body(d)
        except BaseException as exc:
            # Kept aside so it comes out as itself, not inside the nursery's group.
            failure = exc
        finally:
            nursery.cancel_scope.cancel()
    if failure is not None:
        raise failure


async def _play_and_claim(d: _Director) -> None:
    """The story, then the claim of completion (raises if anything is unresolved)."""
    await _story(d)
    # The summary shows the runs as they stand at the claim.
    d.board.poll(d.parent)
    # Leaving the parent's block would raise the same error: the check is the
    # claim of completion made explicit.
    d.parent.check_resolved()
    d.report("check", "passed", note=RESOLVED_VERDICT)
    # Leave the final table on screen for a moment.
    await d.pause(1.5)


async def _session(
    watch: Stopwatch, board: _Board, reporter: Reporter, store: td.ResultStore | None
) -> Summary:
    """Open a runtime and a parent, play the story, and claim completion."""
    config = td.Config(subagent_timeout_seconds=60.0)
    subagents = _subagents(watch, board, reporter)
    director: _Director | None = None
    try:
        async with (
            td.open_runtime(subagents, config=config, store=store) as rt,
            rt.open_parent(OWNER) as parent,
        ):
            director = _Director(parent, board, watch, reporter)
            await _alongside_poller(director, _play_and_claim)
    except td.UnresolvedDelegationError as exc:
        if director is not None:
            director.report_refusal(exc)
        usage = director.parent.usage() if director is not None else None
        return Summary(board.rows, False, str(exc), watch.now(), usage)
    usage = director.parent.usage() if director is not None else None
    return Summary(board.rows, True, RESOLVED_VERDICT, watch.now(), usage)


async def play(reporter: Reporter, store: td.ResultStore | None = None) -> Summary:
    """Play the scripted scenario, sending what happens to *reporter*.

    It takes 15.5 s on the Trio clock: run it under ``MockClock`` to take no
    time, or on a :class:`PacedClock` to watch it. With a *store*, every run
    is recorded there.

    Returns:
        how it ended; ``summary.resolved`` tells whether the final
        fail-closed check passed.
    """
    watch = Stopwatch.starting_now()
    board = _Board(watch, DEADLINES)
    reporter.begin()
    try:
        summary = await _session(watch, board, reporter, store)
    except BaseException:
        reporter.end(None)
        raise
    reporter.end(summary)
    return summary


# -- entry point ----------------------------------------------------------------------


def _is_interactive(stream: TextIO) -> bool:
    """Whether *stream* is a terminal that can show a live display."""
    try:
        return stream.isatty() and Console(file=stream).is_terminal
    except ValueError:  # a closed stream
        return False


def pick_reporter(live: bool, stream: TextIO, speed: float = 1.0) -> Reporter:
    """The live table when asked for and *stream* is a terminal, else plain lines.

    The live table is redrawn ten times a real second: *speed* times as many
    seconds on a :class:`PacedClock` of that speed.
    """
    if live and _is_interactive(stream):
        console = Console(file=stream)
        if not console.is_dumb_terminal:
            return LiveReporter(console, poll_interval=_POLL_SECONDS * speed)
    return PlainReporter(stream)


def run_demo(
    *,
    live: bool = True,
    speed: float = 1.0,
    db: Path | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Play the scenario in a fresh Trio run; return the process exit code.

    Args:
        live: show the live table when stdout is a terminal.
        speed: how many times faster than real time to play (> 0).
        db: an SQLite store to record the runs in, or ``None``.
        stdout, stderr: where to write (default: the process's).

    Returns:
        0 when the final fail-closed check passed, 1 otherwise (with the
        reason on *stderr*).
    """
    out = sys.stdout if stdout is None else stdout
    err = sys.stderr if stderr is None else stderr
    print(INTRODUCTION, file=out)
    clock = PacedClock(speed)
    store = td.SQLiteStore(db) if db is not None else None
    try:
        summary = trio.run(play, pick_reporter(live, out, speed), store, clock=clock)
    except td.StoreError as exc:
        print(
            f"trio-delegate demo: {terminal_safe(str(exc))}; pass --db PATH or --no-store", file=err
        )
        return 1
    if db is not None:
        where = () if Path(db) == DEFAULT_DB else ("--db", str(db))
        command = shell_command("runs", "list", *where)
        print(terminal_safe(f"The runs are recorded in {db}: see them with {command}"), file=out)
    print(NEXT_STEPS, file=out)
    if summary.resolved:
        return 0
    print(f"trio-delegate demo: the fail-closed check failed: {summary.verdict}", file=err)
    return 1


#: What the demo is, said before it plays: no model is involved.
INTRODUCTION: Final = f"""\
A scripted delegation session, offline: no model is involved. A parent delegates
to three stand-in subagents that sleep and return canned results, so that every
rule shows in about 15 s. The script: {REPOSITORY_URL}/blob/main/trio_delegate/_cli/_demo.py
"""

#: Where to go from the demo, said after it.
NEXT_STEPS: Final = f"""Next:
  your own subagents in code:  {docs_page("library")}
  subagents backed by a model: {docs_page("quickstart", "with-a-real-model")}
    (examples: {REPOSITORY_URL}/tree/main/examples)
  for Claude Code, Codex or any MCP client: trio-delegate init, then trio-delegate serve"""
