"""Checking the histories of every process, and a store's final contents, against the contract.

:func:`check_history` is a pure function: it reads what each process was
answered (its :class:`HistoryEvent`\\ s) and the records the store holds at
the end, and returns every :class:`Violation` it finds, each naming the
invariant and the events that show it.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, final

import attrs

from .._status import RunStatus
from .._stores._protocol import RunRecord
from ._history import HistoryEvent

__all__ = ["INVARIANTS", "HistoryReport", "Violation", "check_history", "check_history_report"]

#: Every invariant the checker knows, by name, with what it says.
INVARIANTS: Final[Mapping[str, str]] = {
    "one_ending": "each run has exactly one ending, the same in every answer and in the store",
    "result_matches_store": "a result handed out equals the stored terminal record",
    "admission_durable": "every start/delegate/continue that returned has a stored record",
    "result_durable": "every completed result that was returned is stored as completed",
    "status_monotonic": "the statuses a process reports for a run never go back",
    "closed_runtime": "no call is answered after its runtime closed, and no run stays live",
    "interrupted": "the live runs of a killed process end failed (interrupted), in bounded time",
    "fail_closed": "fail-closed verdicts agree with the history",
    "observed_by_wait": "a run stored as observed had its result returned by a wait",
    "budget_overrun": "a budget's spend passes a limit by at most the one report that crossed it",
    "budget_admission": "nothing is admitted in a scope whose budget was passed",
    "answer_once": "an answer or decline is accepted at most once per question where it lives",
    "answer_open": "an answer is accepted only for a run that is not terminal",
}

_TERMINAL = frozenset(
    {RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.TIMED_OUT}
)
_RANK = {
    "pending": 0,
    "running": 1,
    "input_required": 1,
    "completed": 2,
    "failed": 2,
    "cancelled": 2,
    "timed_out": 2,
}
_ERROR_STATUS = {
    "RunFailedError": "failed",
    "InvalidResultError": "failed",
    "RunCancelledError": "cancelled",
    "RunTimedOutError": "timed_out",
}
_ADMITTING = frozenset({"start", "delegate", "continue_run"})
_RESULT_OPS = frozenset({"delegate", "wait", "continue_run"})
_BUDGET_FIELDS = {
    "max_requests": ("requests",),
    "max_input_tokens": ("input_tokens",),
    "max_output_tokens": ("output_tokens",),
    "max_total_tokens": ("input_tokens", "output_tokens"),
    "max_cost_usd": ("cost_usd",),
}


@final
@attrs.frozen
class Violation:
    """One broken invariant and the events that show it.

    Attributes:
        invariant: its name, a key of :data:`INVARIANTS`.
        run_id: the run it concerns, if one.
        message: what is wrong, in a sentence.
        calls: the events that show it (empty when only the store shows it).
    """

    invariant: str
    run_id: str | None
    message: str
    calls: tuple[HistoryEvent, ...] = ()

    def __str__(self) -> str:
        lines = [f"[{self.invariant}] {self.message}"]
        # Each event on a line of its own, cut: a listing can name hundreds of runs.
        lines.extend(f"    {_cut(str(event), 400)}" for event in self.calls)
        return "\n".join(lines)


@final
@attrs.frozen
class HistoryReport:
    """What :func:`check_history_report` found, and how much it looked at.

    Attributes:
        violations: every violation found, as :func:`check_history` returns them.
        checked: by invariant (every key of :data:`INVARIANTS`), how many
            cases it was checked on: runs, answers, calls or histories, as
            the invariant reads them. A zero says the histories never
            exercised it, so its silence proves nothing.
        events: how many events the histories hold.
        records: how many records the store held.
    """

    violations: tuple[Violation, ...]
    checked: Mapping[str, int]
    events: int
    records: int

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready summary: the counts, and each violation as its text."""
        return {
            "violations": [str(violation) for violation in self.violations],
            "checked": dict(self.checked),
            "events": self.events,
            "records": self.records,
        }


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@attrs.frozen
class _Claim:
    """What one answer said about one run."""

    run_id: str
    status: str
    event: HistoryEvent
    result: Any = None
    has_result: bool = False


def _claims(event: HistoryEvent) -> list[_Claim]:
    """What *event* (an answer) says about the status of runs."""
    if event.phase == "raised":
        error = event.error or {}
        status = _ERROR_STATUS.get(str(error.get("type")))
        run_id = error.get("run_id")
        if event.op in _RESULT_OPS and status is not None and isinstance(run_id, str):
            return [_Claim(run_id, status, event)]
        return []
    value = event.value
    if event.phase != "returned" or not isinstance(value, Mapping):
        return []
    kind = value.get("type")
    if kind == "result":
        return [_Claim(value["run_id"], "completed", event, value.get("final_result"), True)]
    if kind in ("handle", "cancel_ack", "answer_ack"):
        return [_Claim(value["run_id"], str(value["status"]), event)]
    if kind == "handles":
        return [_Claim(h["run_id"], str(h["status"]), event) for h in value["handles"]]
    return []


def _admitted(event: HistoryEvent) -> str | None:
    """The run an admitting call's answer shows was admitted, if any."""
    if event.op not in _ADMITTING:
        return None
    if event.phase == "returned" and isinstance(event.value, Mapping):
        run_id = event.value.get("run_id")
        return run_id if isinstance(run_id, str) else None
    # A foreground call that admitted its run and then reports its ending.
    if event.phase == "raised" and str((event.error or {}).get("type")) in _ERROR_STATUS:
        run_id = (event.error or {}).get("run_id")
        return run_id if isinstance(run_id, str) else None
    return None


def _timestamp(text: str | None) -> float | None:
    """The Unix time of a stored ISO 8601 time (``ended_at``), if it reads as one."""
    if not text:
        return None
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


def _spent(usage: Mapping[str, Any], fields: tuple[str, ...]) -> float:
    return float(sum(float(usage.get(field) or 0) for field in fields))


class _Checker:
    def __init__(
        self,
        histories: Sequence[Sequence[HistoryEvent]],
        records: Sequence[RunRecord],
        max_report: Mapping[str, float] | None,
        interrupt_bound_seconds: float,
    ) -> None:
        self.histories = [sorted(history, key=lambda e: e.seq) for history in histories]
        self.events = [event for history in self.histories for event in history]
        self.records = {record.run_id: record for record in records}
        self.max_report = max_report
        self.bound = interrupt_bound_seconds
        self.found: list[Violation] = []
        # How many cases each invariant was checked on (HistoryReport.checked).
        self.checked: dict[str, int] = dict.fromkeys(INVARIANTS, 0)
        self.claims: dict[str, list[_Claim]] = defaultdict(list)
        for event in self.events:
            for claim in _claims(event):
                self.claims[claim.run_id].append(claim)
        # Which recorded parent each run's admitting call answered in.
        self.admitted_by: dict[str, tuple[str, str]] = {}  # run id -> (process, parent)
        for event in self.events:
            run_id = _admitted(event)
            if run_id is not None:
                self.admitted_by.setdefault(run_id, (event.process, event.parent))
        self.calls: dict[tuple[str, int], HistoryEvent] = {
            (e.process, e.call): e for e in self.events if e.phase == "call"
        }

    def flag(self, invariant: str, run_id: str | None, message: str, *calls: HistoryEvent) -> None:
        self.found.append(Violation(invariant, run_id, message, tuple(calls)))

    def with_call(self, event: HistoryEvent) -> tuple[HistoryEvent, ...]:
        """*event* preceded by the call it answers (so a report shows the arguments)."""
        call = self.calls.get((event.process, event.call))
        return (event,) if call is None or call is event else (call, event)

    # -- the invariants ---------------------------------------------------------

    def endings(self) -> None:
        for run_id, claims in self.claims.items():
            terminal = [c for c in claims if _RANK.get(c.status) == 2]
            record = self.records.get(run_id)
            stored = record.status.value if record and record.status in _TERMINAL else None
            endings = {c.status for c in terminal} | ({stored} if stored else set())
            self.checked["one_ending"] += 1
            if len(endings) > 1:
                shown = [e for c in terminal for e in self.with_call(c.event)]
                self.flag(
                    "one_ending",
                    run_id,
                    f"run {run_id} has {len(endings)} endings: answers say "
                    f"{sorted({c.status for c in terminal})}, the store says {stored}",
                    *shown,
                )
            for claim in terminal:
                if not claim.has_result:
                    continue
                self.checked["result_durable"] += 1
                if record is not None and record.status is RunStatus.COMPLETED:
                    self.checked["result_matches_store"] += 1
                if record is None:
                    self.flag(
                        "result_durable",
                        run_id,
                        f"run {run_id}'s result was handed out but the store has no record of it",
                        *self.with_call(claim.event),
                    )
                elif record.status is RunStatus.COMPLETED and record.final_result != claim.result:
                    self.flag(
                        "result_matches_store",
                        run_id,
                        f"run {run_id}'s result handed out is {claim.result!r:.200}, "
                        f"the store holds {record.final_result!r:.200}",
                        *self.with_call(claim.event),
                    )

    def admissions(self) -> None:
        for event in self.events:
            run_id = _admitted(event)
            self.checked["admission_durable"] += run_id is not None
            if run_id is not None and run_id not in self.records:
                self.flag(
                    "admission_durable",
                    run_id,
                    f"{event.op} returned run {run_id} but the store holds no record of it",
                    *self.with_call(event),
                )

    def monotonic(self) -> None:
        for history in self.histories:
            last: dict[str, _Claim] = {}
            for event in history:
                for claim in _claims(event):
                    before = last.get(claim.run_id)
                    self.checked["status_monotonic"] += before is not None
                    if before is not None and (
                        _RANK.get(claim.status, 0) < _RANK.get(before.status, 0)
                    ):
                        self.flag(
                            "status_monotonic",
                            claim.run_id,
                            f"process {event.process} reported run {claim.run_id} "
                            f"{before.status}, then {claim.status}",
                            *self.with_call(before.event),
                            *self.with_call(event),
                        )
                    last[claim.run_id] = claim

    def closed(self) -> None:
        for history in self.histories:
            closed = next((e for e in history if e.op == "runtime_closed"), None)
            if closed is None:
                continue
            for event in history:
                self.checked["closed_runtime"] += event.seq > closed.seq
                if event.seq > closed.seq and event.phase == "returned" and event.op != "usage":
                    self.flag(
                        "closed_runtime",
                        None,
                        f"process {event.process} answered {event.op} after its runtime closed",
                        closed,
                        *self.with_call(event),
                    )
        for run_id, record in self.records.items():
            self.checked["closed_runtime"] += 1
            if record.status not in _TERMINAL:
                self.flag(
                    "closed_runtime",
                    run_id,
                    f"run {run_id} is still {record.status.value} in the store after every "
                    "runtime closed or died",
                )

    def interrupted(self) -> None:
        for history in self.histories:
            killed = next((e for e in history if e.op == "killed"), None)
            if killed is None:
                continue
            admitted = {_admitted(e) for e in history} - {None}
            for run_id in sorted(r for r in admitted if r is not None):
                self.checked["interrupted"] += 1
                # Ended after its process was killed: only an interruption can end it then.
                record = self.records.get(run_id)
                ended = None if record is None else _timestamp(record.ended_at)
                if (
                    record is not None
                    and ended is not None
                    and ended > killed.wall_time
                    and record.status is not RunStatus.FAILED
                ):
                    self.flag(
                        "interrupted",
                        run_id,
                        f"run {run_id} of killed process {killed.process} ended "
                        f"{record.status.value} {ended - killed.wall_time:.1f} s after the kill; "
                        "a run whose process is gone can only be failed (interrupted)",
                        killed,
                    )
                # Answers of other processes, past the bound, must not read it live.
                for claim in self.claims.get(run_id, ()):
                    if (
                        claim.event.process != killed.process
                        and _RANK.get(claim.status) != 2
                        and claim.event.wall_time > killed.wall_time + self.bound
                    ):
                        self.flag(
                            "interrupted",
                            run_id,
                            f"run {run_id} of killed process {killed.process} still read "
                            f"{claim.status} {claim.event.wall_time - killed.wall_time:.1f} s "
                            f"after the kill (bound {self.bound} s)",
                            killed,
                            *self.with_call(claim.event),
                        )
                        break

    def _observed_before(self, run_id: str, event: HistoryEvent, same_process: bool) -> bool:
        """Whether a result of *run_id* was handed out before *event*."""
        for claim in self.claims.get(run_id, ()):
            if not claim.has_result:
                continue
            other = claim.event
            if same_process:
                if other.process == event.process and other.seq < event.seq:
                    return True
            elif other.wall_time <= event.wall_time or (
                other.process == event.process and other.seq < event.seq
            ):
                return True
        return False

    def fail_closed(self) -> None:
        opened = {e.parent: e for e in self.events if e.op == "open_parent"}
        for history in self.histories:
            started: dict[str, list[str]] = defaultdict(list)  # parent -> run ids
            replaced_by: dict[str, list[str]] = defaultdict(list)
            for event in history:
                run_id = _admitted(event)
                if run_id is not None:
                    started[event.parent].append(run_id)
                    call = self.calls.get((event.process, event.call))
                    replaces = None if call is None else call.args.get("replaces")
                    if isinstance(replaces, str):
                        replaced_by[replaces].append(run_id)
                if event.op not in ("check_resolved", "close_parent") or event.phase == "call":
                    continue
                note = opened.get(event.parent)
                if note is not None and not note.args.get("fail_closed", True):
                    continue
                if event.phase == "returned":
                    known: dict[str, bool] = {}  # what this verdict's runs were found
                    for run_id in started[event.parent]:
                        self.checked["fail_closed"] += 1
                        if not self._resolved(run_id, event, replaced_by, known):
                            self.flag(
                                "fail_closed",
                                run_id,
                                f"{event.op} of {event.parent} found nothing unresolved, but "
                                f"run {run_id} it started was neither observed nor replaced "
                                "by a resolved run",
                                *self.with_call(event),
                            )
                elif event.error and event.error.get("type") == "UnresolvedDelegationError":
                    for run_id in event.error.get("unresolved") or ():
                        self.checked["fail_closed"] += 1
                        # Only runs this parent started count (§7): one another parent
                        # admitted, or of another owner, is never its unresolved work.
                        # (A run whose admitting call raised without naming it may
                        # still be this parent's: it is given the benefit of the doubt.)
                        here = (event.process, event.parent)
                        other = self.admitted_by.get(run_id, here)
                        record = self.records.get(run_id)
                        if other != here or (record is not None and record.owner != event.owner):
                            self.flag(
                                "fail_closed",
                                run_id,
                                f"{event.op} of {event.parent} names run {run_id} unresolved, "
                                "but that parent never started it "
                                f"({'/'.join(other)} did, for owner "
                                f"{record.owner if record is not None else '?'})",
                                *self.with_call(event),
                            )
                        elif self._observed_before(run_id, event, same_process=True):
                            self.flag(
                                "fail_closed",
                                run_id,
                                f"{event.op} of {event.parent} names run {run_id} unresolved, "
                                "but its result was handed out in this process before",
                                *self.with_call(event),
                            )

    def _resolved(
        self,
        run_id: str,
        event: HistoryEvent,
        replaced_by: Mapping[str, list[str]],
        known: dict[str, bool],
    ) -> bool:
        """Whether *run_id*, or a run that replaced it (or replaced that one, and
        so on), was observed before *event*.

        Walked with a stack, not recursion: a chain of replacements may be
        thousands of runs long. *known* holds what earlier walks for the same
        *event* found, so that the runs of one chain are walked once in all.
        """
        if run_id in known:
            return known[run_id]
        came_from: dict[str, str | None] = {run_id: None}
        stack = [run_id]
        while stack:
            current = stack.pop()
            if known.get(current) or self._observed(current, event):
                # Every run on the way here was replaced, in the end, by this one.
                step: str | None = current
                while step is not None:
                    known[step] = True
                    step = came_from[step]
                return True
            for replacement in replaced_by.get(current, ()):
                if replacement not in came_from and known.get(replacement) is not False:
                    came_from[replacement] = current
                    stack.append(replacement)
        # Nothing this walk reached was observed, nor anything beyond it.
        known.update(dict.fromkeys(came_from, False))
        return False

    def _observed(self, run_id: str, event: HistoryEvent) -> bool:
        """Whether *run_id* itself was observed before *event*."""
        if self._observed_before(run_id, event, same_process=False):
            return True
        record = self.records.get(run_id)
        # Observed by a call whose answer the history did not keep (its
        # process died right after): the store's word stands.
        return record is not None and record.observed and record.status is RunStatus.COMPLETED

    def observed(self) -> None:
        answered = {(e.process, e.call) for e in self.events if e.phase in ("returned", "raised")}
        asked: set[str] = set()  # runs a result was handed out for, or asked by a lost call
        unanswered_fg: set[str] = set()  # owners with a foreground call that never answered
        for event in self.events:
            if (
                event.op == "wait"
                and event.phase == "call"
                and (event.process, event.call) not in answered
            ):
                # A wait whose answer the history lost (its process died).
                asked.add(str(event.args.get("run_id")))
            if event.phase == "returned" and event.op in _RESULT_OPS:
                value = event.value if isinstance(event.value, Mapping) else {}
                run_id = value.get("run_id")
                if isinstance(run_id, str) and value.get("type") == "result":
                    asked.add(run_id)
            if (
                event.phase == "call"
                and event.op in ("delegate", "continue_run")
                and (event.process, event.call) not in answered
            ):
                unanswered_fg.add(event.owner)
        for run_id, record in self.records.items():
            self.checked["observed_by_wait"] += record.observed
            if record.observed and run_id not in asked and record.owner not in unanswered_fg:
                self.flag(
                    "observed_by_wait",
                    run_id,
                    f"run {run_id} is stored as observed, but no wait or delegate"
                    " returned its result",
                )

    def budgets(self) -> None:
        opened = {e.parent: e for e in self.events if e.op == "open_parent"}
        for history in self.histories:
            passed: dict[str, HistoryEvent] = {}
            for event in history:
                note = opened.get(event.parent)
                budget = None if note is None else note.args.get("budget")
                if not isinstance(budget, Mapping):
                    continue
                if (
                    event.op == "usage"
                    and event.phase == "returned"
                    and isinstance(event.value, Mapping)
                ):
                    call = self.calls.get((event.process, event.call))
                    if call is not None and call.args.get("run_id") is not None:
                        continue  # one run's usage, not the parent's
                    self._usage(event, budget, passed)
                    continue
                self.checked["budget_admission"] += _admitted(event) is not None
                if event.parent in passed and _admitted(event) is not None:
                    self.flag(
                        "budget_admission",
                        _admitted(event),
                        f"{event.parent} admitted a run after its budget was passed",
                        passed[event.parent],
                        *self.with_call(event),
                    )

    def _usage(
        self, event: HistoryEvent, budget: Mapping[str, Any], passed: dict[str, HistoryEvent]
    ) -> None:
        for limit, fields in _BUDGET_FIELDS.items():
            value = budget.get(limit)
            if value is None:
                continue
            spent = _spent(event.value, fields)
            self.checked["budget_overrun"] += 1
            if spent > float(value):
                passed.setdefault(event.parent, event)
                if self.max_report is None:
                    continue
                allowed = float(value) + _spent(self.max_report, fields)
                if spent > allowed:
                    self.flag(
                        "budget_overrun",
                        None,
                        f"{event.parent} spent {spent} against {limit}={value}, more than one "
                        f"report past it (at most {allowed})",
                        *self.with_call(event),
                    )

    def answers(self) -> None:
        accepted: dict[str, list[HistoryEvent]] = defaultdict(list)
        for history in self.histories:
            ended: dict[str, HistoryEvent] = {}
            for event in history:
                for claim in _claims(event):
                    if _RANK.get(claim.status) == 2 and event.op != "answer":
                        ended.setdefault(claim.run_id, event)
                value = event.value
                if not (
                    event.op in ("answer", "decline")
                    and event.phase == "returned"
                    and isinstance(value, Mapping)
                    and value.get("accepted")
                ):
                    continue
                run_id = str(value.get("run_id"))
                self.checked["answer_open"] += 1
                # Applied where the run lives: an acceptance in another process that
                # shares the store is a request its owner applies (§16, §19), which
                # the owner's own history cannot show; those are not counted here.
                admitted = self.admitted_by.get(run_id)
                if admitted is None or admitted[0] == event.process:
                    accepted[str(value.get("question_id"))].append(event)
                if run_id in ended:
                    self.flag(
                        "answer_open",
                        run_id,
                        f"an {event.op} was accepted for run {run_id} after it was reported ended",
                        *self.with_call(ended[run_id]),
                        *self.with_call(event),
                    )
        self.checked["answer_once"] += len(accepted)
        for question_id, events in accepted.items():
            if len(events) > 1:
                self.flag(
                    "answer_once",
                    str(events[0].value.get("run_id")),
                    f"question {question_id} was answered or declined {len(events)} times",
                    *[e for event in events for e in self.with_call(event)],
                )


def check_history(
    histories: Iterable[Sequence[HistoryEvent]],
    records: Iterable[RunRecord],
    *,
    max_report: Mapping[str, float] | None = None,
    interrupt_bound_seconds: float = 30.0,
) -> list[Violation]:
    """Every violation of the contract that the histories and the store show.

    Args:
        histories: one sequence of events per process (what
            :class:`HistoryRecorder` recorded, or :func:`read_history` read).
            A killed process's history ends with a ``"killed"`` note
            (``HistoryRecorder.note("killed")``, written by whoever killed it).
        records: the store's records once every runtime has closed or died
            and a runtime opened on it since (so that it marked the runs of
            dead processes interrupted): ``await store.list_runs(limit=...)``.
        max_report: the largest single usage report any runner makes, by
            ``td.Usage`` field (``{"input_tokens": 500, ...}``); ``None``
            leaves the overrun bound unchecked (budget admission is still checked).
        interrupt_bound_seconds: how long (wall clock) after a kill another
            process may still read a run of the killed one live.

    Returns:
        the violations found, grouped by invariant in :data:`INVARIANTS` order.
    """
    report = check_history_report(
        histories,
        records,
        max_report=max_report,
        interrupt_bound_seconds=interrupt_bound_seconds,
    )
    return list(report.violations)


def check_history_report(
    histories: Iterable[Sequence[HistoryEvent]],
    records: Iterable[RunRecord],
    *,
    max_report: Mapping[str, float] | None = None,
    interrupt_bound_seconds: float = 30.0,
) -> HistoryReport:
    """:func:`check_history`, with how many cases each invariant was checked on.

    Args:
        histories, records, max_report, interrupt_bound_seconds: as for
            :func:`check_history`.

    Returns:
        a :class:`HistoryReport`: the same violations, in the same order, and
        the per-invariant counts (a soak prints them: an invariant checked
        zero times was not exercised).
    """
    checker = _Checker(
        [tuple(history) for history in histories],
        list(records),
        max_report,
        interrupt_bound_seconds,
    )
    checker.endings()
    checker.admissions()
    checker.monotonic()
    checker.closed()
    checker.interrupted()
    checker.fail_closed()
    checker.observed()
    checker.budgets()
    checker.answers()
    order = list(INVARIANTS)
    found = sorted(checker.found, key=lambda v: order.index(v.invariant))
    return HistoryReport(
        violations=tuple(found),
        checked=dict(checker.checked),
        events=len(checker.events),
        records=len(checker.records),
    )
