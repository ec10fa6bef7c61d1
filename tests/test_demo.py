"""The ``trio-delegate demo`` scenario, its reporters and the command line."""

from __future__ import annotations

import io
import json
import math
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing
from rich.console import Console

import trio_delegate as td
from trio_delegate import RunStatus
from trio_delegate._cli import _demo as demo
from trio_delegate._cli._demo_view import (
    Event,
    LiveReporter,
    PlainReporter,
    RunRow,
    Summary,
    format_event,
)
from trio_delegate._cli._main import main
from trio_delegate._self import installed_script, shell_command
from trio_delegate._threads import run_sync
from trio_delegate._urls import REPOSITORY_URL, docs_page


@attrs.define
class RecordingReporter:
    """Keeps everything the scenario reports, for assertions."""

    poll_interval: float | None = None
    began: bool = False
    steps: list[tuple[float, str]] = attrs.Factory(list)
    events: list[Event] = attrs.Factory(list)
    refreshes: int = 0
    ended: bool = False
    summary: Summary | None = None

    def begin(self) -> None:
        self.began = True

    def step(self, at: float, title: str) -> None:
        self.steps.append((at, title))

    def event(self, event: Event) -> None:
        self.events.append(event)

    def refresh(self, at: float, rows: Sequence[RunRow]) -> None:
        self.refreshes += 1

    def end(self, summary: Summary | None) -> None:
        self.ended = True
        self.summary = summary

    def about(self, run_id: str) -> list[tuple[str, str]]:
        """The (action, answer) pairs of the events about *run_id*, in order."""
        return [(e.action, e.answer) for e in self.events if e.run_id == run_id]

    def at(self, action: str, answer: str) -> list[float]:
        """When events with this action and answer happened."""
        return [e.at for e in self.events if (e.action, e.answer) == (action, answer)]


def run_of(summary: Summary, subagent: str, task: str) -> RunRow:
    """The one run of *task* on *subagent* (the first, when the task was retried)."""
    return next(r for r in summary.runs if (r.subagent, r.task) == (subagent, task))


async def test_scenario_produces_every_behaviour(autojump_clock: trio.testing.MockClock) -> None:
    reporter = RecordingReporter()
    summary = await demo.play(reporter)

    assert reporter.began
    assert reporter.ended
    assert reporter.summary is summary
    assert summary.resolved
    assert summary.verdict == demo.RESOLVED_VERDICT

    # A foreground delegation: one event, the completed result itself.
    found = run_of(summary, "investigator", demo.FIND_TASK)
    assert found.status is RunStatus.COMPLETED
    assert found.observed
    assert reporter.about(found.run_id) == [("delegate", "completed")]

    # Timed waits answer with a running handle; a later wait returns the result.
    notes = run_of(summary, "writer", demo.NOTES_TASK)
    assert notes.status is RunStatus.COMPLETED
    assert reporter.about(notes.run_id) == [
        ("start", "running"),
        ("wait", "running"),
        ("wait", "completed"),
    ]

    # A cancellation: the ack and a status snapshot read running while the
    # child cleans up under a shield; then the wait raises and status settles.
    guide = run_of(summary, "writer", demo.GUIDE_TASK)
    assert guide.status is RunStatus.CANCELLED
    assert reporter.about(guide.run_id) == [
        ("start", "running"),
        ("cancel", "running"),
        ("status", "running"),
        ("cleanup", "running"),
        ("cleanup", "running"),
        ("wait", "RunCancelledError"),
        ("status", "cancelled"),
    ]

    # A child deadline: timed_out, and the wait raised RunTimedOutError.
    audit = run_of(summary, "investigator", demo.AUDIT_TASK)
    assert audit.status is RunStatus.TIMED_OUT
    assert audit.deadline == demo.DEADLINES["investigator"]
    assert reporter.about(audit.run_id)[-1] == ("wait", "RunTimedOutError")

    # A failure, recovered by a replacement of the same task.
    first, retry = (r for r in summary.runs if r.subagent == "checker")
    assert first.status is RunStatus.FAILED
    assert reporter.about(first.run_id) == [("start", "running"), ("wait", "RunFailedError")]
    assert retry.status is RunStatus.COMPLETED
    assert retry.replaces == first.run_id
    assert first.replaced_by == retry.run_id
    assert reporter.about(retry.run_id) == [("start", "running"), ("wait", "completed")]

    # Every run that did not complete was replaced by one that did.
    for row in summary.runs:
        if row.status is not RunStatus.COMPLETED:
            replacement = next(r for r in summary.runs if r.run_id == row.replaced_by)
            assert replacement.status is RunStatus.COMPLETED
            assert replacement.observed
    assert summary.counts() == {
        RunStatus.COMPLETED: 7,
        RunStatus.FAILED: 1,
        RunStatus.CANCELLED: 2,
        RunStatus.TIMED_OUT: 1,
    }

    # The fail-closed check refused while work was unresolved, then passed.
    checks = [e.answer for e in reporter.events if e.action == "check"]
    assert checks == ["UnresolvedDelegationError", "passed"]


async def test_scenario_shows_progress_a_question_usage_and_a_budget_stop(
    autojump_clock: trio.testing.MockClock,
) -> None:
    reporter = RecordingReporter()
    summary = await demo.play(reporter)
    assert summary.resolved

    # Progress: the timed wait's running handle carries the writer's latest report.
    notes = run_of(summary, "writer", demo.NOTES_TASK)
    (timed_wait,) = [
        e
        for e in reporter.events
        if e.run_id == notes.run_id and (e.action, e.answer) == ("wait", "running")
    ]
    assert timed_wait.note.endswith("progress: drafting section 2 of 4")
    assert notes.progress is not None
    assert notes.progress.message == "drafting section 4 of 4"

    # A question: the wait answers input_required, the parent answers, the
    # child goes on and returns the answer in its result.
    asked = run_of(summary, "writer", demo.CHANGELOG_TASK)
    assert reporter.about(asked.run_id) == [
        ("start", "running"),
        ("wait", "input_required"),
        ("status", "input_required"),
        ("answer", "running"),
        ("wait", "completed"),
    ]
    (question,) = [
        e for e in reporter.events if e.answer == "input_required" and e.action == "wait"
    ]
    assert question.note == f"asks: {demo.QUESTION}"
    assert asked.answer == demo.ANSWER
    assert asked.question == ""
    assert f'"answer": "{demo.ANSWER}"' in asked.outcome

    # A budget stop: cancelled with the budget as its cause, then replaced.
    traced = run_of(summary, "investigator", demo.TRACE_TASK)
    assert traced.status is RunStatus.CANCELLED
    assert traced.outcome == "budget stop: max_total_tokens 24,000 > 20,000"
    assert traced.usage is not None
    assert traced.usage.total_tokens == 24_000
    assert reporter.about(traced.run_id) == [("start", "running"), ("wait", "RunCancelledError")]
    replacement = run_of(summary, "investigator", demo.TRACE_NET_TASK)
    assert replacement.replaces == traced.run_id
    assert replacement.status is RunStatus.COMPLETED

    # Usage per run, as each runner reported it; runs that reported none show a dash.
    assert run_of(summary, "investigator", demo.FIND_TASK).describe_usage() == "3.5k · $0.012"
    assert notes.describe_usage() == "11.2k · $0.044"
    audit = run_of(summary, "investigator", demo.AUDIT_TASK)
    assert audit.usage is None
    assert audit.describe_usage() == "—"
    assert summary.usage is not None
    assert summary.usage.total_tokens == sum(
        row.usage.total_tokens for row in summary.runs if row.usage is not None
    )


async def test_live_table_shows_input_required_then_the_answer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[tuple[str, str, str]] = []

    @attrs.define
    class Watching(RecordingReporter):
        def refresh(self, at: float, rows: Sequence[RunRow]) -> None:
            super().refresh(at, rows)
            for row in rows:
                if row.task == demo.CHANGELOG_TASK:
                    entry = (row.status.value, row.describe_outcome(), row.describe_usage())
                    if not seen or seen[-1] != entry:
                        seen.append(entry)

    await demo.play(Watching(poll_interval=0.1))
    statuses = [status for status, _, _ in seen]
    assert statuses.index("input_required") < statuses.index("completed")
    outcomes = [outcome for _, outcome, _ in seen]
    assert f"asks: {demo.QUESTION}" in outcomes
    assert f"answered {demo.ANSWER}; going on" in outcomes
    assert "writing the entry, step 1 of 2" in outcomes
    assert seen[-1][2] == "4.3k · $0.016"


async def test_scenario_timeline(autojump_clock: trio.testing.MockClock) -> None:
    start = trio.current_time()
    reporter = RecordingReporter()
    summary = await demo.play(reporter)

    # About ten seconds, all of it on the Trio clock.
    assert trio.current_time() - start == pytest.approx(15.5)
    assert summary.at == pytest.approx(15.5)
    assert reporter.at("delegate", "completed") == pytest.approx([1.0, 6.8, 13.5])
    assert reporter.at("wait", "running") == pytest.approx([3.0, 3.0])
    assert reporter.at("cancel", "running") == pytest.approx([3.5])
    # Started at 1.5 with a 4.0 s deadline; the wait's own timeout was 5.0 s.
    assert reporter.at("wait", "RunTimedOutError") == pytest.approx([5.5])
    assert reporter.at("wait", "completed") == pytest.approx([7.3, 7.3, 8.0, 10.0])
    # Asked at 9.0, half a second after its start; answered at 9.5.
    assert reporter.at("wait", "input_required") == pytest.approx([9.0])
    assert reporter.at("answer", "running") == pytest.approx([9.5])
    # The fourth 6,000-token report, 2.0 s after the start at 10.5.
    assert reporter.at("wait", "RunCancelledError") == pytest.approx([4.5, 12.5])
    assert reporter.at("check", "passed") == pytest.approx([14.0])
    titles = [title.split(" ", 1)[0] for _, title in reporter.steps]
    assert titles == [f"{n}." for n in range(1, 11)]


def _story(reporter: RecordingReporter) -> list[tuple[float, str, str, str]]:
    # Run ids are random; everything else must repeat exactly.
    return [(round(e.at, 6), e.action, e.answer, e.subagent) for e in reporter.events]


async def test_scenario_is_deterministic(autojump_clock: trio.testing.MockClock) -> None:
    first, second = RecordingReporter(), RecordingReporter()
    await demo.play(first)
    await demo.play(second)
    assert _story(first) == _story(second)
    assert first.steps == second.steps


async def test_polling_reporter_is_refreshed(autojump_clock: trio.testing.MockClock) -> None:
    reporter = RecordingReporter(poll_interval=0.1)
    summary = await demo.play(reporter)
    assert summary.resolved
    # One poll per 0.1 s of Trio time, over 15.5 s.
    assert reporter.refreshes >= 150


async def test_live_reporter_renders_table_and_summary(
    autojump_clock: trio.testing.MockClock,
) -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120, color_system=None)
    summary = await demo.play(LiveReporter(console))
    assert summary.resolved
    text = out.getvalue()
    for expected in (
        "trio-delegate demo",
        "time/deadline",
        "timed_out",
        "cancelled",
        "replaced by",
    ):
        assert expected in text
    assert "runs by status: 7 completed, 1 failed, 2 cancelled, 1 timed_out" in text
    assert "usage: 63,400 tokens in 20 requests, $0.219" in text
    assert "fail-closed check passed" in text


async def test_unresolved_work_fails_the_check(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def no_recovery(d: object, runs: object) -> None:
        await trio.lowlevel.checkpoint()

    monkeypatch.setattr(demo, "_recover", no_recovery)
    reporter = RecordingReporter()
    summary = await demo.play(reporter)
    assert not summary.resolved
    assert "4 unresolved delegated run(s)" in summary.headline
    # As they stood at the claim: the notes completed, but were never waited for.
    notes = run_of(summary, "writer", demo.NOTES_TASK)
    assert notes.status is RunStatus.COMPLETED
    assert not notes.observed
    checks = [e.answer for e in reporter.events if e.action == "check"]
    assert checks == ["UnresolvedDelegationError", "UnresolvedDelegationError"]


def test_plain_line_format() -> None:
    event = Event(
        2.0,
        "start",
        "running",
        "investigator",
        "run_3f9c" + "0" * 28,
        note="admission ack, not a result",
    )
    assert format_event(event) == (
        "[ 2.0s] start    investigator run_3f9c… -> running (admission ack, not a result)"
    )


# -- the paced clock (real time) ------------------------------------------------------


def _reference_story() -> list[tuple[float, str, str, str]]:
    reporter = RecordingReporter()
    trio.run(demo.play, reporter, clock=trio.testing.MockClock(autojump_threshold=0))
    return _story(reporter)


def _story_shape(story: list[tuple[float, str, str, str]]) -> list[tuple[str, str, str]]:
    # On a real clock the times drift by a little; the order and answers may not.
    return [(action, answer, subagent) for _, action, answer, subagent in story]


def test_paced_clock_plays_the_same_story_faster() -> None:
    reporter = RecordingReporter()
    started = time.perf_counter()
    summary = trio.run(demo.play, reporter, clock=demo.PacedClock(100.0))
    elapsed = time.perf_counter() - started
    assert summary.resolved
    # 15.5 s of scenario at 100x: never faster than 0.155 s of real time,
    # and faster than the scenario's own 15.5 s however busy the machine.
    assert 0.155 <= elapsed < 15.5
    assert summary.at == pytest.approx(15.5, abs=0.5)
    assert _story_shape(_story(reporter)) == _story_shape(_reference_story())


@attrs.define
class StallingReporter(RecordingReporter):
    """Blocks the whole process for a while on every event, like a slow terminal."""

    stall_seconds: float = 0.003

    def event(self, event: Event) -> None:
        super().event(event)
        time.sleep(self.stall_seconds)


def test_paced_clock_keeps_timers_in_order_through_stalls() -> None:
    # Each stall is 3 ms of real time: 3 s of scenario time at 1000x, longer
    # than the gap between the timers the story depends on. A clock that only
    # scaled real time would expire those timers together, in arbitrary order.
    reporter = StallingReporter()
    summary = trio.run(demo.play, reporter, clock=demo.PacedClock(1000.0))
    assert summary.resolved
    assert _story_shape(_story(reporter)) == _story_shape(_reference_story())


def test_paced_clock_plays_the_mock_clock_story_with_a_real_store(tmp_path: Path) -> None:
    # The store writes on worker threads, milliseconds of real time each:
    # seconds of scenario at 1000x. A clock that moved while Trio waited for
    # them let a 30 s runner finish before its cancel and a replacement then
    # be refused ("names a completed run"); the times drifted by minutes.
    reporter = RecordingReporter()
    store = td.SQLiteStore(tmp_path / "runs.db")
    summary = trio.run(demo.play, reporter, store, clock=demo.PacedClock(1000.0))
    assert summary.resolved
    assert _story(reporter) == _reference_story()


def test_paced_clock_stands_still_while_a_thread_works() -> None:
    # 0.2 s of real work on a worker thread is 200 s at 1000x: a timer one
    # second away must not expire during it.
    woke: list[float] = []

    async def main() -> float:
        async def sleeper() -> None:
            await trio.sleep(1.0)
            woke.append(trio.current_time())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(sleeper)
            await trio.lowlevel.checkpoint()  # the sleeper is asleep now
            await run_sync(time.sleep, 0.2)
            after_work = trio.current_time()
            assert woke == []
        return after_work

    assert trio.run(main, clock=demo.PacedClock(1000.0)) == 0.0
    assert woke == [1.0]


@pytest.mark.parametrize("speed", [0.0, -1.0, math.inf, math.nan])
def test_paced_clock_rejects_bad_speeds(speed: float) -> None:
    with pytest.raises(ValueError, match="speed"):
        demo.PacedClock(speed)


# -- the command line (real clock, fast) ------------------------------------------------


def test_demo_command_plain(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--no-live", "--speed", "1000", "--no-store"]) == 0
    out = capsys.readouterr().out
    for expected in (
        "== 1. Foreground",
        "delegate investigator",
        "-> running (admission ack, not a result)",
        "timeout=1.0s -> running",
        "cancel   writer",
        "-> RunCancelledError",
        "-> RunTimedOutError",
        "-> RunFailedError (FlakyCheckError: 2 of 40 tests failed",
        "replaces=run_",
        "-> UnresolvedDelegationError (4 unresolved",
        "summary  11 runs: 7 completed, 1 failed, 2 cancelled, 1 timed_out",
        "usage    63,400 tokens in 20 requests, $0.219",
        "progress: drafting section 2 of 4",
        "-> input_required (asks: Which release ships the retry change?)",
        "answer   writer       run_",
        '"2.4.0" -> running',
        "-> RunCancelledError (stopped by its run budget: max_total_tokens 24,000 > 20,000)",
        "verdict  fail-closed check passed",
    ):
        assert expected in out
    # It says what it is before it plays, and where to go after.
    first, *_ = out.splitlines()
    assert first.startswith("A scripted delegation session, offline: no model is involved.")
    assert "trio_delegate/_cli/_demo.py" in out.split("== 1.")[0]
    after = out.split("verdict  fail-closed check passed")[1]
    assert docs_page("quickstart", "with-a-real-model") in after
    assert f"{REPOSITORY_URL}/tree/main/examples" in after
    assert "trio-delegate init, then trio-delegate serve" in after


def test_demo_falls_back_to_plain_lines_off_a_terminal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # capsys's stdout is not a terminal: no live display, no escape codes.
    assert main(["demo", "--speed", "1000", "--no-store"]) == 0
    out = capsys.readouterr().out
    assert "verdict  fail-closed check passed" in out
    assert "\x1b[" not in out


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_demo_live_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TTY_COMPATIBLE", "FORCE_COLOR", "NO_COLOR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    out = _Terminal()
    live = demo.pick_reporter(True, out, speed=1000.0)
    assert isinstance(live, LiveReporter)
    # Ten redraws per real second, whatever the speed.
    assert live.poll_interval == pytest.approx(100.0)
    assert isinstance(demo.pick_reporter(False, out), PlainReporter)
    assert isinstance(demo.pick_reporter(True, io.StringIO()), PlainReporter)
    assert demo.run_demo(live=True, speed=1000.0, stdout=out) == 0
    assert "fail-closed check passed" in out.getvalue()


def test_demo_exit_code_when_the_check_fails(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    async def no_recovery(d: object, runs: object) -> None:
        await trio.lowlevel.checkpoint()

    monkeypatch.setattr(demo, "_recover", no_recovery)
    assert main(["demo", "--no-live", "--speed", "1000", "--no-store"]) == 1
    captured = capsys.readouterr()
    assert "verdict  fail-closed check FAILED: parent 'demo' has 4 unresolved" in captured.out
    # The whole error, with what to do about each run, goes to stderr.
    assert "trio-delegate demo: the fail-closed check failed" in captured.err
    assert "start one with replaces=" in captured.err


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["nope"],
        ["demo", "--bogus"],
        ["demo", "--speed"],
        ["demo", "--speed", "fast"],
        ["demo", "--speed", "0"],
        ["demo", "--speed", "-2"],
        ["demo", "--speed", "nan"],
        ["demo", "--speed", "inf"],
        ["demo", "--speed", "1001"],
    ],
)
def test_bad_arguments_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert "usage: trio-delegate" in capsys.readouterr().err


def test_python_dash_m(tmp_path: Path) -> None:
    # In a folder of its own: the demo records its runs under the working
    # directory, which must not be the checkout.
    done = subprocess.run(
        [sys.executable, "-m", "trio_delegate", "demo", "--no-live", "--speed", "1000"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "verdict  fail-closed check passed" in done.stdout
    assert (tmp_path / ".trio-delegate" / "runs.db").is_file()


# -- the demo records its runs ----------------------------------------------------------


async def test_demo_records_every_run_in_its_store(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = td.MemoryStore()
    summary = await demo.play(RecordingReporter(), store)
    assert summary.resolved
    records = await store.list_runs()
    assert len(records) == len(summary.runs) == 11
    assert {record.owner for record in records} == {demo.OWNER}
    assert sorted(record.status.value for record in records) == sorted(
        row.status.value for row in summary.runs
    )


def test_demo_command_writes_the_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "demo" / "runs.db"
    assert main(["demo", "--no-live", "--speed", "100", "--db", str(db)]) == 0
    said = capsys.readouterr().out
    assert f"The runs are recorded in {db}" in said
    # The command it suggests names the same store, and runs as written.
    suggested = shlex.split(said.rsplit("see them with ", 1)[1].splitlines()[0])
    assert suggested[-4:] == ["runs", "list", "--db", str(db)]
    listed_by_hand = subprocess.run(
        [*suggested, "--json"], capture_output=True, text=True, check=True, timeout=60
    )
    listed_runs = json.loads(listed_by_hand.stdout)
    assert len(listed_runs) == 11
    # Usage is recorded, and listed as JSON.
    assert sum(run["usage"] is not None for run in listed_runs) == 8
    assert main(["runs", "list", "--db", str(db), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert len(listed) == 11


def test_the_suggested_command_runs_without_an_activated_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = installed_script()
    assert script is not None, "the tests run from an installation with its script"
    # Not on PATH (a .venv that is not activated): the script's own path,
    # relative from a folder above it, absolute from elsewhere.
    monkeypatch.setenv("PATH", os.defpath)
    monkeypatch.chdir(script.parent.parent)
    assert shell_command("runs", "list") == f"{Path(script.parent.name, script.name)} runs list"
    monkeypatch.chdir(tmp_path)
    assert shell_command("runs", "list") == f"{script} runs list"
    # On PATH: the plain name.
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.defpath}")
    expected = "trio-delegate runs list --db 'a b.db'"
    assert shell_command("runs", "list", "--db", "a b.db") == expected
