"""What a running child tells its parent while it runs: its progress and its
questions (contract §19), kept per run in a :class:`Talk`.

A run gets its talk only when its runner first reports or asks (or when a
foreground caller hands it an ``on_input``): a run that never does costs
nothing more than the one empty slot of :attr:`Run.talk`. A talk keeps the
latest report only (a runner may report in a hot loop at O(1) memory) and
the run's open questions, oldest first; it moves the run between
``running`` and ``input_required`` (the state table of ``_run``) and wakes
the waits that wait for either a question or the run's end.
"""

from __future__ import annotations

import itertools
import math
import secrets
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, final

import trio

from .._checks import builtin, describe
from .._errors import InvalidArgumentsError, StoreError
from .._json import escape_text
from .._results import Progress, Question, RunHandle
from .._status import RunStatus
from .._summary import summarize_task

if TYPE_CHECKING:
    from .._schema import ResultSchema
    from ._run import Run

__all__ = [
    "MAX_PROGRESS_CHARS",
    "PROGRESS_WRITE_INTERVAL",
    "QUESTION_RECORD_DELAY",
    "OnInput",
    "OpenQuestion",
    "Talk",
    "check_progress",
    "new_question_id",
    "talk_fields",
    "talk_of",
]

#: The longest progress message kept; a longer one is cut (marked with ``…``).
MAX_PROGRESS_CHARS: Final = 1000

#: A run's progress is written to its store at most once in this many seconds.
PROGRESS_WRITE_INTERVAL: Final = 1.0
#: A question opened or closed reaches the store within this many seconds:
#: other runtimes' views may trail by at most 1 s (contract §16, §19).
QUESTION_RECORD_DELAY: Final = 0.25

#: A foreground caller's answerer: ``async (td.Question) -> answer``.
OnInput = Callable[[Question], Awaitable[Any]]

_ASKING: Final = RunStatus.INPUT_REQUIRED
_STARTED: Final = RunStatus.RUNNING

#: Orders every question of the process: ``questions()`` lists them oldest first.
_ORDER: Final = itertools.count()


def new_question_id() -> str:
    """A fresh question id: 128 random bits (contract §19 asks for at least 96)."""
    return "q_" + secrets.token_hex(16)


def _number(field: str, value: Any) -> float | None:
    if value is None:
        return None
    plain = builtin(value)
    if type(plain) is int or type(plain) is float:
        try:
            number = float(plain)
        except OverflowError:
            number = math.inf
        if math.isfinite(number) and number >= 0:
            return number
    raise InvalidArgumentsError(
        f"ctx.progress({field}=...) must be a finite number >= 0 or None, got "
        f"{describe(value)}: pass how far the run is as a plain number"
    )


def check_progress(
    message: Any, progress: Any, total: Any
) -> tuple[str | None, float | None, float | None]:
    """A progress report's fields, checked: the message trimmed, collapsed and cut.

    Raises:
        InvalidArgumentsError: the message is not a string, or a number is not
            finite and >= 0.
    """
    text: str | None = None
    if message is not None:
        if type(message) is not str and not isinstance(message, str):
            raise InvalidArgumentsError(
                f"ctx.progress(message=...) must be a string or None, got {describe(message)}"
            )
        text = summarize_task(escape_text(builtin(message)), MAX_PROGRESS_CHARS)
    return text, _number("progress", progress), _number("total", total)


@final
class OpenQuestion:
    """One question a runner asked: open until answered, declined or withdrawn."""

    __slots__ = (
        "answer",
        "answer_json",
        "answered",
        "declined",
        "event",
        "order",
        "question_id",
        "reason",
        "schema",
        "settled",
        "text",
        "until",
    )

    def __init__(self, text: str, schema: ResultSchema, until: float) -> None:
        self.question_id = new_question_id()
        self.text = text
        self.schema = schema
        # When its ask's own timeout passes (math.inf: none).
        self.until = until
        self.order = next(_ORDER)
        self.event = trio.Event()
        # Set once: answered (answer), declined (declined, reason) or
        # withdrawn (neither); nothing changes it afterwards.
        self.settled = False
        self.answered = False
        self.declined = False
        self.reason = ""
        self.answer: Any = None
        # The answer as plain JSON, as its record holds it.
        self.answer_json: Any = None

    def public(self, run_id: str) -> Question:
        """The caller's own copy of this question."""
        return Question(self.question_id, run_id, self.text, self.schema.schema_copy())


@final
class Talk:
    """One run's latest progress report and open questions."""

    __slots__ = (
        "highest",
        "message",
        "on_input",
        "open",
        "progress",
        "seq",
        "stranded",
        "total",
        "unanswered",
        "unrecorded",
        "waiters",
        "written_at",
    )

    def __init__(self, on_input: OnInput | None = None) -> None:
        self.message: str | None = None
        self.progress: float | None = None
        self.total: float | None = None
        # The highest progress number reported so far: it never goes down.
        self.highest = -math.inf
        self.seq = 0
        # Open questions by id, oldest first (a dict keeps insertion order).
        self.open: dict[str, OpenQuestion] = {}
        # Events of the waits that wake when a question opens or the run ends.
        self.waiters: set[trio.Event] = set()
        # The foreground caller's answerer, if it gave one.
        self.on_input = on_input
        # The oldest question open when the run was cancelled, for the
        # fail-closed error: ``(question_id, text)``.
        self.unanswered: tuple[str, str] | None = None
        # Questions withdrawn by a cancellation: their asks end with the
        # cancellation, or (shielded) once the run ends (see `ended`).
        self.stranded: list[OpenQuestion] = []
        # With a store: questions answered or declined whose answer no
        # committed record holds yet; their asks wait for one (contract §19).
        self.unrecorded: list[OpenQuestion] = []
        # When (Trio clock) the run's record last went to the store for what
        # it said or asked: progress is written at most once a second.
        self.written_at = -math.inf

    # -- progress ------------------------------------------------------------------

    def report(
        self, run: Run, text: str | None, progress: float | None, total: float | None
    ) -> None:
        """Keep a checked report as *run*'s latest; with a store, its record follows
        within a second (coalesced: at most one write a second, never waited for).

        Raises:
            InvalidArgumentsError: *progress* is below a number reported before.
        """
        if progress is not None:
            if progress < self.highest:
                raise InvalidArgumentsError(
                    f"ctx.progress(progress={progress:g}) is lower than {self.highest:g}, "
                    "reported before; progress never goes down: report the same number or "
                    "a higher one (or progress=None)"
                )
            self.highest = progress
        self.message = text
        self.progress = progress
        self.total = total
        self.seq += 1
        writer = run.host.writer
        if writer is not None:
            writer.touch(run, max(run.host.now(), self.written_at + PROGRESS_WRITE_INTERVAL))

    def latest(self) -> Progress | None:
        """The latest report as a value (made on reading: reports are many, reads few)."""
        if self.seq == 0:
            return None
        return Progress(self.message, self.progress, self.total, self.seq)

    def status(self, run: Run) -> RunStatus:
        """*run*'s status, ``running`` once its deadline passed while it asked
        (its questions are about to be withdrawn)."""
        status = run.state.status
        if status is _ASKING and run.host.now() >= run.deadline:
            return _STARTED
        return status

    def handle(self, run: Run, status: RunStatus | None = None) -> RunHandle:
        """*run*'s handle (with *status*, if given) with its progress, open
        questions and usage."""
        if status is None:
            status = self.status(run)
        questions = (
            tuple(question.public(run.run_id) for question in self.open.values())
            if status is _ASKING
            else ()
        )
        return RunHandle(
            run.run_id, run.subagent.name, status, self.latest(), questions, run.usage()
        )

    # -- questions -----------------------------------------------------------------

    def opened(self, run: Run, question: OpenQuestion) -> None:
        """*question* is open: *run* reads ``input_required`` and waits wake."""
        self.open[question.question_id] = question
        run.asking(True)
        self.wake()
        self._changed(run)

    def closed(self, run: Run, question: OpenQuestion) -> None:
        """*question* is no longer open; with the last one, *run* is ``running`` again.

        Waits wake to look again (a foreground caller passes the next question on).
        """
        question.settled = True
        if self.open.pop(question.question_id, None) is not None:
            if not self.open:
                run.asking(False)
            self.wake()
            self._changed(run)

    def _changed(self, run: Run) -> None:
        """A question opened or closed: with a store, *run*'s record follows soon
        (other runtimes sharing it see the question, contract §19)."""
        writer = run.host.writer
        if writer is not None and run.state.live:
            writer.touch(run, run.host.now() + QUESTION_RECORD_DELAY)

    def accepted(self, run: Run, question: OpenQuestion) -> None:
        """*question* was answered or declined: its ask gets the answer once it is
        durable (with a store, once a record holding it is committed)."""
        writer = run.host.writer
        if writer is None or not writer.touch(run, run.host.now()):
            question.event.set()  # nothing is recorded: it has its answer at once
            return
        self.unrecorded.append(question)

    def recorded_with(self, answered: list[OpenQuestion]) -> Callable[[StoreError | None], None]:
        """What to do once a record holding the answers of *answered* is committed."""

        def recorded(error: StoreError | None) -> None:
            # Committed, or the store failed: the ask gets its answer either
            # way (a store that fails ends the run's record with an error).
            for question in answered:
                question.event.set()
            unrecorded = self.unrecorded
            if unrecorded:
                self.unrecorded = [q for q in unrecorded if not q.event.is_set()]

        return recorded

    def withdraw_all(self, run: Run) -> None:
        """Withdraw every open question (the run is being cancelled)."""
        if self.open and self.unanswered is None:
            oldest = next(iter(self.open.values()))
            self.unanswered = (oldest.question_id, oldest.text)
        for question in list(self.open.values()):
            self.closed(run, question)
            # Not woken now: the cancellation itself must reach its ask.
            self.stranded.append(question)

    def ended(self) -> None:
        """The run is terminal: nothing is open, every wait wakes.

        An ``ask`` still waiting (its runner did not stop, contract §18)
        wakes too, and raises: nobody will answer it.
        """
        for question in [*self.open.values(), *self.stranded, *self.unrecorded]:
            question.settled = True
            question.event.set()
        self.open.clear()
        self.stranded.clear()
        self.unrecorded.clear()
        self.wake()

    def wake(self) -> None:
        waiters = self.waiters
        if waiters:
            for event in waiters:
                event.set()
            waiters.clear()


def talk_fields(talk: Talk, live: bool) -> dict[str, Any]:
    """The fields of a run's record that say what *talk* holds (contract §19): its
    open questions (in a *live* record), the answers no record holds yet, and
    its latest progress; only those there are."""
    fields: dict[str, Any] = {}
    if live and talk.open:
        fields["questions"] = tuple(
            {"question_id": q.question_id, "text": q.text, "schema": q.schema.schema_copy()}
            for q in talk.open.values()
        )
    if talk.unrecorded:
        fields["answers"] = tuple(
            {"question_id": q.question_id, "declined": True, "reason": q.reason}
            if q.declined
            else {"question_id": q.question_id, "answer": q.answer_json.copy()}
            for q in talk.unrecorded
        )
    if talk.seq:
        fields["progress"] = {
            "message": talk.message,
            "progress": talk.progress,
            "total": talk.total,
            "seq": talk.seq,
        }
    return fields


def talk_of(run: Run) -> Talk:
    """*run*'s talk, made on first use."""
    talk = run.talk
    if talk is None:
        talk = run.talk = Talk()
    return talk
