"""The history recorder and checker (``trio_delegate.testing``): a clean history passes,
and each invariant is caught when a violation is planted in a history or a store."""

from __future__ import annotations

import contextlib
import datetime
import json
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

import trio_delegate as td
import trio_delegate.testing as tdt
from trio_delegate.testing import HistoryEvent, Violation

BUDGET = td.Budget(max_input_tokens=100)


async def ok(ctx: td.ChildContext) -> object:
    await trio.sleep(1)
    ctx.add_usage(td.Usage(requests=1, input_tokens=10))
    return {"task": ctx.task}


async def bad(ctx: td.ChildContext) -> object:
    await trio.sleep(1)
    raise ValueError("no")


async def slow(ctx: td.ChildContext) -> object:
    await trio.sleep(1000)
    return "late"


async def asker(ctx: td.ChildContext) -> object:
    return await ctx.ask("which?")


SUBAGENTS = [
    td.Subagent("ok", ok),
    td.Subagent("bad", bad),
    td.Subagent("slow", slow),
    td.Subagent("asker", asker, asks=True),
]


async def follow(settled: tdt.RecordedSettled) -> None:
    async for _ in settled:
        pass


@attrs.frozen
class Played:
    events: tuple[HistoryEvent, ...]
    records: tuple[td.RunRecord, ...]
    ids: dict[str, str]


async def play(path: Path | None = None) -> Played:
    """A host's session: every kind of call, each answered as the contract says."""
    store = td.MemoryStore()
    recorder = tdt.HistoryRecorder("p1", path)
    ids: dict[str, str] = {}
    async with (
        td.open_runtime(SUBAGENTS, store=store) as rt,
        recorder.open_parent(rt, "alice", budget=BUDGET) as parent,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(follow, parent.settled())
        ids["waited"] = (await parent.start("ok", "a")).run_id
        parent.status(ids["waited"])
        await parent.wait(ids["waited"])
        ids["delegated"] = (await parent.delegate("ok", "b")).run_id
        ids["slow"] = (await parent.start("slow", "c")).run_id
        await parent.wait(ids["slow"], timeout=1)
        parent.cancel(ids["slow"])
        with pytest.raises(td.RunCancelledError):
            await parent.wait(ids["slow"])
        await parent.delegate("ok", "c again", replaces=ids["slow"])
        with pytest.raises(td.RunFailedError) as failed:
            await parent.delegate("bad", "d")
        assert failed.value.run_id is not None
        ids["bad"] = failed.value.run_id
        await parent.delegate("ok", "d again", replaces=ids["bad"])
        ids["asker"] = (await parent.start("asker", "e")).run_id
        asking = await parent.wait(ids["asker"])
        assert isinstance(asking, td.RunHandle)
        assert [q.run_id for q in parent.questions()] == [ids["asker"]]
        assert parent.answer(ids["asker"], "this").accepted
        await parent.wait(ids["asker"])
        parent.usage()
        parent.runs()
        parent.check_resolved()
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    recorder.note("runtime_closed")
    recorder.close()
    records = await store.list_runs(limit=1000)
    return Played(recorder.events, tuple(records), ids)


def renumbered(events: Sequence[HistoryEvent]) -> list[HistoryEvent]:
    return [attrs.evolve(event, seq=seq) for seq, event in enumerate(events)]


def invariants(found: Sequence[Violation]) -> set[str]:
    return {violation.invariant for violation in found}


def answer_of(played: Played, op: str, run_id: str | None = None) -> int:
    """The index of the first answer of *op* (about *run_id*) in the history."""
    for index, event in enumerate(played.events):
        if event.op != op or event.phase not in ("returned", "raised"):
            continue
        about = (event.value or {}).get("run_id") if isinstance(event.value, dict) else None
        if run_id is None or about == run_id:
            return index
    raise AssertionError(f"no {op} answer about {run_id}")


def record_of(played: Played, run_id: str) -> td.RunRecord:
    return next(record for record in played.records if record.run_id == run_id)


def with_record(played: Played, run_id: str, **changes: Any) -> list[td.RunRecord]:
    return [
        attrs.evolve(record, **changes) if record.run_id == run_id else record
        for record in played.records
    ]


async def test_a_history_that_keeps_the_contract_has_no_violation(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    played = await play(tmp_path / "p1.jsonl")
    assert tdt.check_history([played.events], played.records, max_report={"input_tokens": 10}) == []
    # The file holds the same events, a line each.
    assert tdt.read_history(tmp_path / "p1.jsonl") == played.events
    ops = {event.op for event in played.events}
    assert {"start", "delegate", "wait", "status", "cancel", "answer", "usage"} <= ops
    assert {"check_resolved", "close_parent", "open_parent", "runtime_closed", "settled"} <= ops
    settled = [e.value["status"] for e in played.events if e.op == "settled"]
    assert sorted(settled) == ["cancelled", *["completed"] * 5, "failed"]


async def test_a_recorded_call_raises_what_the_parent_raises_and_records_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    recorder = tdt.HistoryRecorder("p1")
    async with td.open_runtime(SUBAGENTS) as rt, rt.open_parent("bob") as raw:
        parent = recorder.wrap(raw)
        with pytest.raises(td.UnknownRunError):
            parent.status("td_nosuchrun")
    call, answer = recorder.events[-2:]
    assert (call.op, call.phase, call.args) == ("status", "call", {"run_id": "td_nosuchrun"})
    assert answer.phase == "raised"
    assert answer.call == call.call
    assert answer.error is not None
    assert answer.error["type"] == "UnknownRunError"
    assert answer.trio_time is not None
    assert answer.wall_time > 0


def test_a_history_cut_short_by_a_kill_reads_up_to_its_last_whole_line(tmp_path: Path) -> None:
    event = HistoryEvent("p1", "a#1", "a", 0, 1, "status", "call", {"run_id": "x"})
    path = tmp_path / "h.jsonl"
    path.write_text(json.dumps(event.to_json()) + "\n" + '{"process": "p1", "par')
    assert tdt.read_history(path) == (event,)
    path.write_text('{"broken\n' + json.dumps(event.to_json()) + "\n")
    with pytest.raises(ValueError, match="line 1"):
        tdt.read_history(path)


# -- planted violations: each invariant is caught ------------------------------------


async def test_two_endings_of_a_run_are_caught(autojump_clock: trio.testing.MockClock) -> None:
    played = await play()
    events = list(played.events)
    index = answer_of(played, "status", played.ids["waited"])
    value = dict(events[index].value, status="failed")
    events[index] = attrs.evolve(events[index], value=value)
    found = tdt.check_history([events], played.records)
    assert invariants(found) == {"one_ending"}
    assert any(v.run_id == played.ids["waited"] for v in found if v.invariant == "one_ending")


async def test_an_ending_other_than_the_stored_one_is_caught(
    autojump_clock: trio.testing.MockClock,
) -> None:
    played = await play()
    records = with_record(played, played.ids["bad"], status=td.RunStatus.TIMED_OUT)
    found = tdt.check_history([played.events], records)
    assert invariants(found) == {"one_ending"}
    assert "timed_out" in found[0].message
    assert "failed" in found[0].message
    assert any(event.op == "delegate" for event in found[0].calls)


async def test_a_result_that_differs_from_the_stored_one_is_caught(
    autojump_clock: trio.testing.MockClock,
) -> None:
    played = await play()
    records = with_record(played, played.ids["waited"], final_result={"task": "z"})
    found = tdt.check_history([played.events], records)
    assert invariants(found) == {"result_matches_store"}
    assert found[0].run_id == played.ids["waited"]


async def test_an_admitted_run_missing_from_the_store_is_caught(
    autojump_clock: trio.testing.MockClock,
) -> None:
    played = await play()
    lost = played.ids["delegated"]
    records = [record for record in played.records if record.run_id != lost]
    found = tdt.check_history([played.events], records)
    assert invariants(found) == {"admission_durable", "result_durable"}
    assert {v.run_id for v in found} == {lost}


async def test_a_status_that_goes_back_is_caught(autojump_clock: trio.testing.MockClock) -> None:
    played = await play()
    events = list(played.events)
    index = answer_of(played, "status", played.ids["waited"])
    waited = events[index]
    late = attrs.evolve(waited, value=dict(waited.value, status="pending"))
    after = answer_of(played, "wait", played.ids["waited"]) + 1
    events = renumbered([*events[:after], late, *events[after:]])
    found = tdt.check_history([events], played.records)
    assert invariants(found) == {"status_monotonic"}
    assert "completed, then pending" in found[0].message


async def test_an_answer_after_the_runtime_closed_is_caught(
    autojump_clock: trio.testing.MockClock,
) -> None:
    played = await play()
    listed = played.events[answer_of(played, "questions")]
    events = renumbered([*played.events, listed])
    found = tdt.check_history([events], played.records)
    assert invariants(found) == {"closed_runtime"}


async def test_a_run_left_live_in_the_store_is_caught(
    autojump_clock: trio.testing.MockClock,
) -> None:
    played = await play()
    records = with_record(played, played.ids["slow"], status=td.RunStatus.RUNNING)
    found = tdt.check_history([played.events], records)
    assert "closed_runtime" in invariants(found)
    assert any("still running" in v.message for v in found)


async def test_a_run_of_a_killed_process_read_live_past_the_bound_is_caught(
    autojump_clock: trio.testing.MockClock,
) -> None:
    played = await play()
    run_id = played.ids["slow"]
    # Killed after every run ended (as the store says): only what others read is at stake.
    at = max(
        datetime.datetime.fromisoformat(r.ended_at).timestamp()
        for r in played.records
        if r.ended_at
    )
    killed = HistoryEvent("p1", "", "", len(played.events), 999, "killed", "note", wall_time=at)
    dead = [*played.events, killed]
    status = HistoryEvent(
        "p2", "alice#1", "alice", 0, 1, "status", "returned",
        value={"type": "handle", "run_id": run_id, "subagent": "slow", "status": "running"},
        wall_time=at + 31,
    )  # fmt: skip
    found = tdt.check_history([dead, [status]], played.records, interrupt_bound_seconds=30)
    assert invariants(found) == {"interrupted"}
    assert found[0].calls[0] == killed
    assert found[0].calls[-1] == status
    # Within the bound it is no violation.
    early = attrs.evolve(status, wall_time=at + 29)
    assert tdt.check_history([dead, [early]], played.records, interrupt_bound_seconds=30) == []


async def test_a_passing_verdict_over_an_unobserved_run_is_caught(
    autojump_clock: trio.testing.MockClock,
) -> None:
    played = await play()
    waited = played.ids["waited"]
    index = answer_of(played, "wait", waited)
    events = renumbered([*played.events[: index - 1], *played.events[index + 1 :]])
    records = with_record(played, waited, observed=False)
    found = tdt.check_history([events], records)
    assert invariants(found) == {"fail_closed"}
    assert {v.run_id for v in found} == {waited}
    assert {e.op for v in found for e in v.calls} == {"check_resolved", "close_parent"}


async def test_an_unresolved_verdict_naming_an_observed_run_is_caught(
    autojump_clock: trio.testing.MockClock,
) -> None:
    played = await play()
    events = list(played.events)
    index = answer_of(played, "check_resolved")
    error = {
        "type": "UnresolvedDelegationError",
        "message": "",
        "unresolved": [played.ids["waited"]],
    }
    events[index] = attrs.evolve(events[index], phase="raised", error=error)
    found = tdt.check_history([events], played.records)
    assert invariants(found) == {"fail_closed"}
    assert "handed out" in found[0].message


async def test_a_run_stored_observed_that_no_wait_asked_for_is_caught(
    autojump_clock: trio.testing.MockClock,
) -> None:
    played = await play()
    records = with_record(played, played.ids["slow"], observed=True)
    found = tdt.check_history([played.events], records)
    assert invariants(found) == {"observed_by_wait"}


async def test_a_spend_past_a_limit_by_more_than_one_report_is_caught(
    autojump_clock: trio.testing.MockClock,
) -> None:
    played = await play()
    events = list(played.events)
    index = answer_of(played, "usage")
    events[index] = attrs.evolve(events[index], value=dict(events[index].value, input_tokens=111))
    found = tdt.check_history([events], played.records, max_report={"input_tokens": 10})
    assert invariants(found) == {"budget_overrun"}
    assert "111" in found[0].message
    # Past the limit by no more than one report: allowed.
    events[index] = attrs.evolve(events[index], value=dict(events[index].value, input_tokens=110))
    assert tdt.check_history([events], played.records, max_report={"input_tokens": 10}) == []


async def test_an_admission_after_the_budget_was_passed_is_caught(
    autojump_clock: trio.testing.MockClock,
) -> None:
    played = await play()
    usage = played.events[answer_of(played, "usage")]
    over = attrs.evolve(usage, value=dict(usage.value, input_tokens=101))
    first = answer_of(played, "start")
    events = renumbered([*played.events[:first], over, *played.events[first:]])
    found = tdt.check_history([events], played.records)
    assert "budget_admission" in invariants(found)
    assert invariants(found) <= {"budget_admission"}


async def test_an_answer_accepted_twice_is_caught(autojump_clock: trio.testing.MockClock) -> None:
    played = await play()
    index = answer_of(played, "answer")
    events = renumbered(
        [*played.events[: index + 1], played.events[index], *played.events[index + 1 :]]
    )
    found = tdt.check_history([events], played.records)
    assert invariants(found) == {"answer_once"}


async def test_an_answer_accepted_for_an_ended_run_is_caught(
    autojump_clock: trio.testing.MockClock,
) -> None:
    played = await play()
    answer = played.events[answer_of(played, "answer")]
    ended = answer_of(played, "wait", played.ids["asker"])
    # The run's last wait (its result) comes after the answer: plant the answer after it.
    last = max(
        i for i, e in enumerate(played.events)
        if e.op == "wait" and isinstance(e.value, dict) and e.value.get("type") == "result"
        and e.value.get("run_id") == played.ids["asker"]
    )  # fmt: skip
    assert last > ended
    events = renumbered([*played.events[: last + 1], answer, *played.events[last + 1 :]])
    found = tdt.check_history([events], played.records)
    assert "answer_open" in invariants(found)


def test_every_invariant_is_named_and_described() -> None:
    assert set(tdt.INVARIANTS) == {
        "one_ending",
        "result_matches_store",
        "admission_durable",
        "result_durable",
        "status_monotonic",
        "closed_runtime",
        "interrupted",
        "fail_closed",
        "observed_by_wait",
        "budget_overrun",
        "budget_admission",
        "answer_once",
        "answer_open",
    }


async def test_a_violation_renders_its_calls_a_line_each_cut_short(
    autojump_clock: trio.testing.MockClock,
) -> None:
    played = await play()
    records = with_record(played, played.ids["bad"], status=td.RunStatus.TIMED_OUT)
    (found,) = tdt.check_history([played.events], records)
    lines = str(found).splitlines()
    assert lines[0].startswith("[one_ending] run ")
    assert len(lines) == 1 + len(found.calls)
    assert all(len(line) <= 404 for line in lines[1:])
    assert any(line.endswith("…") for line in lines[1:])  # the error messages are long


async def test_an_unresolved_verdict_naming_another_parents_run_is_caught(
    autojump_clock: trio.testing.MockClock,
) -> None:
    played = await play()
    events = list(played.events)
    index = answer_of(played, "check_resolved")
    start = answer_of(played, "start", played.ids["waited"])
    # The run's start answered in another parent (of another owner).
    events[start] = attrs.evolve(events[start], parent="bob#9", owner="bob")
    error = {
        "type": "UnresolvedDelegationError",
        "message": "",
        "unresolved": [played.ids["waited"]],
    }
    events[index] = attrs.evolve(events[index], phase="raised", error=error)
    found = tdt.check_history([events], played.records)
    assert "fail_closed" in invariants(found)
    assert any("never started it (p1/bob#9 did" in v.message for v in found)


async def test_a_run_of_a_killed_process_ended_otherwise_than_failed_is_caught(
    autojump_clock: trio.testing.MockClock,
) -> None:
    played = await play()
    run_id = played.ids["slow"]
    record = record_of(played, run_id)
    assert record.ended_at is not None
    ended = datetime.datetime.fromisoformat(record.ended_at).timestamp()
    # The process was killed a second before the store says the run ended.
    killed = HistoryEvent(
        "p1", "", "", len(played.events), 999, "killed", "note", wall_time=ended - 1
    )
    found = tdt.check_history([[*played.events, killed]], played.records)
    assert invariants(found) == {"interrupted"}
    (about,) = [v for v in found if v.run_id == run_id]
    assert "ended cancelled 1.0 s after the kill" in about.message
    # Failed (interrupted) is how such a run ends.
    records = with_record(played, run_id, status=td.RunStatus.FAILED)
    found = tdt.check_history([[*played.events, killed]], records)
    assert [v for v in found if v.run_id == run_id and v.invariant == "interrupted"] == []


async def test_an_answer_accepted_in_another_process_is_a_request_not_a_second_answer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    played = await play()
    answer = played.events[answer_of(played, "answer")]
    remote = [attrs.evolve(answer, process="p2", seq=0)]
    assert tdt.check_history([played.events, remote], played.records) == []


# -- the report: what each invariant was checked on ------------------------------------


async def test_the_report_counts_what_each_invariant_was_checked_on(
    autojump_clock: trio.testing.MockClock,
) -> None:
    played = await play()
    report = tdt.check_history_report([played.events], played.records)
    assert report.violations == ()
    assert set(report.checked) == set(tdt.INVARIANTS)
    assert (report.events, report.records) == (len(played.events), len(played.records))
    admitting = [
        e
        for e in played.events
        if e.op in ("start", "delegate", "continue_run")
        and (e.phase == "returned" or (e.error or {}).get("run_id"))
    ]
    results = [
        e
        for e in played.events
        if e.phase == "returned" and (e.value or {}).get("type") == "result"
    ]
    assert report.checked["admission_durable"] == len(admitting) == 7
    assert report.checked["result_durable"] == len(results)
    assert report.checked["result_matches_store"] == len(results)
    assert report.checked["closed_runtime"] == len(played.records)
    assert report.checked["observed_by_wait"] == sum(r.observed for r in played.records)
    assert report.checked["answer_open"] == report.checked["answer_once"] == 1
    # No process was killed: the interruption rule had nothing to look at.
    assert report.checked["interrupted"] == 0
    killed = HistoryEvent("p1", "", "", len(played.events), 10**6, "killed", "note", {})
    after_kill = tdt.check_history_report([[*played.events, killed]], played.records)
    assert after_kill.checked["interrupted"] == 7  # each run the killed process admitted


async def test_the_report_holds_the_violations_check_history_returns(
    autojump_clock: trio.testing.MockClock,
) -> None:
    played = await play()
    records = with_record(played, played.ids["slow"], status=td.RunStatus.RUNNING)
    report = tdt.check_history_report([played.events], records)
    assert list(report.violations) == tdt.check_history([played.events], records)
    assert invariants(report.violations) == {"closed_runtime"}
    summary = report.to_json()
    assert summary["checked"] == dict(report.checked)
    assert summary["violations"] == [str(v) for v in report.violations]
    json.dumps(summary)


# -- a history written to its file only, and calls over other surfaces -----------------


async def test_a_recorder_that_keeps_no_events_writes_them_all_and_counts_them(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    path = tmp_path / "p1.jsonl"
    recorder = tdt.HistoryRecorder("p1", path, keep_events=False)
    async with td.open_runtime(SUBAGENTS) as rt, recorder.open_parent(rt, "alice") as parent:
        await parent.delegate("ok", "a")
        with pytest.raises(td.UnknownRunError):
            parent.status("td_nosuchrun")
    recorder.close()
    written = tdt.read_history(path)
    assert recorder.events == ()
    assert [e.seq for e in written] == list(range(len(written)))
    assert recorder.recorded == len(written)
    assert recorder.answered == sum(e.phase in ("returned", "raised") for e in written)
    assert recorder.answered == 3  # delegate, status, close_parent (open_parent is a note)
    with pytest.raises(ValueError, match=r"keep_events=False.*needs a path"):
        tdt.HistoryRecorder("p2", keep_events=False)


async def test_calls_recorded_by_hand_are_checked_as_a_parents_are(
    autojump_clock: trio.testing.MockClock,
) -> None:
    played = await play()
    run_id = played.ids["delegated"]
    stored = record_of(played, run_id).final_result

    def by_hand(final_result: object) -> tuple[HistoryEvent, ...]:
        recorder = tdt.HistoryRecorder("m1")
        call = recorder.call("wait", parent="mcp", owner="dora", run_id=run_id, timeout=0)
        value = {"type": "result", "run_id": run_id, "final_result": final_result}
        recorder.returned(call, "wait", value, parent="mcp", owner="dora")
        call = recorder.call("wait", parent="mcp", owner="dora", run_id=run_id)
        error = {"type": "RunFailedError", "run_id": run_id, "message": "?"}
        recorder.raised(call, "wait", error, parent="mcp", owner="dora")
        return recorder.events

    events = by_hand(stored)
    assert [(e.op, e.phase, e.call) for e in events] == [
        ("wait", "call", 1),
        ("wait", "returned", 1),
        ("wait", "call", 2),
        ("wait", "raised", 2),
    ]
    found = tdt.check_history([played.events, events], played.records)
    # The second answer says the run failed: two endings.
    assert invariants(found) == {"one_ending"}
    found = tdt.check_history([played.events, by_hand("other")[:2]], played.records)
    assert invariants(found) == {"result_matches_store"}
    assert tdt.check_history([played.events, events[:2]], played.records) == []


class Unprintable:
    """An argument that is no JSON, has no truth value and no repr of its own."""

    def __bool__(self) -> bool:
        raise RuntimeError("no truth value")

    def __repr__(self) -> str:
        raise RuntimeError("no repr")


async def test_hostile_arguments_are_recorded_and_the_call_goes_on(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    deep: Any = "x"
    for _ in range(1000):
        deep = [deep]
    with contextlib.closing(tdt.HistoryRecorder("p1", tmp_path / "p1.jsonl")) as recorder:
        async with td.open_runtime(SUBAGENTS) as rt, rt.open_parent("bob") as raw:
            parent = recorder.wrap(raw)
            handle = await parent.start("ok", "t")
            refused: list[Callable[[], object]] = [
                lambda: parent.status("\ud800"),
                lambda: parent.status(Unprintable()),  # type: ignore[arg-type]
                lambda: parent.status(deep),
                lambda: parent.cancel(10**5000),  # type: ignore[arg-type]
                lambda: parent.answer(deep, 1, question_id=deep),
                lambda: parent.decline(handle.run_id, question_id=Unprintable()),  # type: ignore[arg-type]
            ]
            for call in refused:
                # The parent's own refusal, not the recorder's failure.
                with pytest.raises(td.InvalidArgumentsError):
                    call()
            refused_later: list[Callable[[], Awaitable[object]]] = [
                lambda: parent.start("ok", 5),  # type: ignore[arg-type]
                lambda: parent.start(deep, "t"),
                lambda: parent.start("ok", "t", replaces=deep),
                lambda: parent.wait(handle.run_id, timeout=Unprintable()),  # type: ignore[arg-type]
                lambda: parent.continue_run(handle.run_id, "more", background=Unprintable()),
            ]
            for later in refused_later:
                with pytest.raises(td.InvalidArgumentsError):
                    await later()
            long = await parent.start("ok", "y" * 50_000 + "\u202e")
            done = await parent.wait(long.run_id)
            await parent.wait(handle.run_id)
        assert isinstance(done, td.RunResult)
    calls = [e for e in recorder.events if e.phase == "call"]
    assert recorder.answered == len(calls) == 1 + len(refused) + len(refused_later) + 3
    raised = [e for e in recorder.events if e.phase == "raised"]
    assert {e.error["type"] for e in raised if e.error} == {"InvalidArgumentsError"}
    assert recorder.events[-3].value == {
        "type": "result",
        "run_id": long.run_id,
        "subagent": "ok",
        "final_result": {"task": "y" * 50_000 + "\u202e"},
    }
    # Every argument is kept as short JSON, and the file holds every event.
    for event in calls:
        assert len(json.dumps(dict(event.args))) < 1_000
    assert tdt.read_history(tmp_path / "p1.jsonl") == recorder.events
    tdt.check_history([recorder.events], [])


def test_a_chain_of_ten_thousand_replacements_is_checked_without_recursion() -> None:
    def chain(observe_last: bool) -> tuple[HistoryEvent, ...]:
        recorder = tdt.HistoryRecorder("p1")
        where = {"parent": "alice#1", "owner": "alice"}
        previous = None
        for n in range(10_000):
            run_id = f"run_{n:032x}"
            call = recorder.call("start", name="ok", task="t", replaces=previous, **where)
            handle = {"type": "handle", "run_id": run_id, "status": "pending"}
            recorder.returned(call, "start", handle, **where)
            previous = run_id
        if observe_last:
            call = recorder.call("wait", run_id=previous, timeout=None, **where)
            result = {"type": "result", "run_id": previous, "final_result": 1}
            recorder.returned(call, "wait", result, **where)
        call = recorder.call("check_resolved", **where)
        recorder.returned(call, "check_resolved", {}, **where)
        return recorder.events

    # Each run is resolved by the last one, 10,000 replacements down the chain.
    report = tdt.check_history_report([chain(observe_last=True)], [])
    assert report.checked["fail_closed"] == 10_000
    assert "fail_closed" not in invariants(report.violations)
    unobserved = tdt.check_history([chain(observe_last=False)], [])
    assert len([v for v in unobserved if v.invariant == "fail_closed"]) == 10_000
