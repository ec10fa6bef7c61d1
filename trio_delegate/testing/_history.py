"""Recording every call a host makes on its parents, and every answer, as a history.

A :class:`HistoryRecorder` belongs to one process (one runtime). It wraps
parents in :class:`RecordedParent`\\ s, which expose the same calls and
write one :class:`HistoryEvent` when a call begins and one when it answers
(a value or an exception), with the process, the owner, the Trio clock and
the wall clock. With a path, each event is appended to a JSON-lines file and
flushed before the call's answer is handed back, so a process killed at any
moment leaves a history that holds every answer it gave.
:func:`check_history` (``_history_check``) reads the histories of every
process together with the store's final contents.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import IO, Any, TypeVar, final

import attrs
import trio

from .._checks import builtin, describe
from .._converter import to_json_ready
from .._core import Parent, Runtime, SettledRuns
from .._errors import DelegationError, UnresolvedDelegationError
from .._results import AnswerAck, CancelAck, Question, RunHandle, RunResult
from .._usage import Budget, Usage

__all__ = ["HistoryEvent", "HistoryRecorder", "RecordedParent", "RecordedSettled", "read_history"]

T = TypeVar("T")

#: The phases of an event: a call began, it returned, it raised; or a note.
PHASES = ("call", "returned", "raised", "note")
#: The most characters of a text argument a history keeps.
_ARG_CHARS = 200


@final
@attrs.frozen
class HistoryEvent:
    """One line of a history: a call beginning, its answer, or a note.

    Attributes:
        process: the process (runtime) that recorded it, as its recorder names it.
        parent: the recorded parent's name within the process (``"<owner>#<n>"``);
            ``""`` for a note about the whole process.
        owner: the parent's owner (``""`` for a process note).
        seq: the event's position in its process's history (0, 1, 2 ...).
        call: the number of the call this event belongs to (its ``call`` event
            and its answer share it); for a note, its own number.
        op: the call (``"start"``, ``"wait"`` ...), or the note
            (``"open_parent"``, ``"close_parent"``, ``"runtime_closed"``,
            ``"killed"``, ``"settled"``).
        phase: ``"call"``, ``"returned"``, ``"raised"`` or ``"note"``.
        args: the call's arguments, JSON-ready (a ``RecordedParent`` keeps text
            cut to 200 characters, and an argument that is not text, a
            number, a bool or ``None`` by its short ``repr``).
        value: the answer, JSON-ready (see :func:`encode_value`), or ``None``.
        error: for ``"raised"``: ``{"type", "message", "run_id", "status"}``
            and, for ``UnresolvedDelegationError``, ``"unresolved"`` (run ids).
        trio_time: ``trio.current_time()`` when it was recorded (``None``
            outside Trio).
        wall_time: ``time.time()`` when it was recorded.
    """

    process: str
    parent: str
    owner: str
    seq: int
    call: int
    op: str
    phase: str
    args: Mapping[str, Any] = attrs.field(factory=dict)
    value: Any = None
    error: Mapping[str, Any] | None = None
    trio_time: float | None = None
    wall_time: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """The event as one JSON object (what a history file holds per line)."""
        return {
            "process": self.process,
            "parent": self.parent,
            "owner": self.owner,
            "seq": self.seq,
            "call": self.call,
            "op": self.op,
            "phase": self.phase,
            "args": dict(self.args),
            "value": self.value,
            "error": None if self.error is None else dict(self.error),
            "trio_time": self.trio_time,
            "wall_time": self.wall_time,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> HistoryEvent:
        """The event a :meth:`to_json` object describes.

        Raises:
            ValueError: *data* is not such an object (a field is missing or of
                the wrong type).
        """
        try:
            return cls(
                process=str(data["process"]),
                parent=str(data["parent"]),
                owner=str(data["owner"]),
                seq=int(data["seq"]),
                call=int(data["call"]),
                op=str(data["op"]),
                phase=str(data["phase"]),
                args=dict(data.get("args") or {}),
                value=data.get("value"),
                error=None if data.get("error") is None else dict(data["error"]),
                trio_time=None if data.get("trio_time") is None else float(data["trio_time"]),
                wall_time=float(data.get("wall_time", 0.0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a history event ({exc!r}): {data!r:.200}") from exc

    def __str__(self) -> str:
        answer = self.error if self.phase == "raised" else self.value
        return (
            f"{self.process}#{self.seq} {self.parent or '-'} {self.op}"
            f"({json.dumps(dict(self.args), sort_keys=True)}) {self.phase}"
            + ("" if self.phase == "call" else f" {json.dumps(answer, sort_keys=True)}")
        )


def _usage(usage: Usage | None) -> dict[str, Any] | None:
    return None if usage is None else to_json_ready(usage)


def _handle(handle: RunHandle) -> dict[str, Any]:
    return {
        "type": "handle",
        "run_id": handle.run_id,
        "subagent": handle.subagent,
        "status": str(handle.status.value),
        "questions": [q.question_id for q in handle.questions],
        "usage": _usage(handle.usage),
    }


def encode_value(value: object) -> Any:
    """A call's answer as JSON-ready data the checker reads.

    ``RunHandle`` → ``{"type": "handle", run_id, subagent, status, questions,
    usage}``; ``RunResult`` → ``{"type": "result", run_id, subagent,
    final_result}``; ``CancelAck``, ``AnswerAck``, ``Usage``, a tuple of
    handles (``"handles"``) or of questions (``"questions"``) likewise;
    ``None`` as ``None``.
    """
    if value is None:
        return None
    if isinstance(value, RunHandle):
        return _handle(value)
    if isinstance(value, RunResult):
        return {
            "type": "result",
            "run_id": value.run_id,
            "subagent": value.subagent,
            "final_result": to_json_ready(value.final_result),
        }
    if isinstance(value, CancelAck):
        return {
            "type": "cancel_ack",
            "run_id": value.run_id,
            "cancel_requested": value.cancel_requested,
            "status": str(value.status.value),
        }
    if isinstance(value, AnswerAck):
        return {
            "type": "answer_ack",
            "run_id": value.run_id,
            "question_id": value.question_id,
            "accepted": value.accepted,
            "status": str(value.status.value),
        }
    if isinstance(value, Usage):
        return {"type": "usage", **to_json_ready(value)}
    if value == ():
        return {"type": "empty"}
    if isinstance(value, tuple) and all(isinstance(item, RunHandle) for item in value):
        return {"type": "handles", "handles": [_handle(item) for item in value]}
    if isinstance(value, tuple) and all(isinstance(item, Question) for item in value):
        return {
            "type": "questions",
            "questions": [{"question_id": q.question_id, "run_id": q.run_id} for q in value],
        }
    return {"type": "other", "repr": repr(value)[:200]}


def encode_error(exc: BaseException) -> dict[str, Any]:
    """An exception a call raised, as JSON-ready data the checker reads."""
    body: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc)[:500]}
    if isinstance(exc, DelegationError):
        body["run_id"] = exc.run_id
        body["status"] = exc.status
    if isinstance(exc, UnresolvedDelegationError):
        body["unresolved"] = [entry.run_id for entry in exc.unresolved]
    return body


def _arg(value: object) -> Any:
    """A call's argument as a history keeps it: JSON-ready and short, whatever the host passed.

    The arguments are the host's, and a hostile one must not keep its call
    from being made: text is cut to 200 characters (a lone surrogate stays,
    escaped in the file), ``None``, a bool, a float and a short int are kept,
    and anything else (a container nested 1,000 levels deep, an object that
    is no JSON, an integer of thousands of digits) by its short ``repr``.
    """
    value = builtin(value)  # a str or int subclass (an enum member) as the plain value
    if value is None or type(value) in (bool, float):
        return value
    if type(value) is int:
        return value if value.bit_length() <= 128 else describe(value)
    if type(value) is str:
        return value[:_ARG_CHARS]
    return describe(value)


def _now() -> float | None:
    try:
        return trio.current_time()
    except RuntimeError:
        return None


@final
class HistoryRecorder:
    """The history of one process: every recorded parent's calls and answers.

    Args:
        process: the name of this process (runtime) in the histories, e.g.
            ``"p1"``; a restarted process takes a new name (``"p1.1"``).
        path: a JSON-lines file to append each event to (flushed at once),
            or ``None`` to keep the events in memory only.
        keep_events: keep every event in memory too (:attr:`events`); a
            long-running process that writes them to *path* passes
            ``False``, so that its memory does not grow with its history.

    Raises:
        ValueError: *process* is empty, or *keep_events* is False without a *path*.
        OSError: *path* cannot be opened for appending.
    """

    def __init__(
        self,
        process: str,
        path: str | os.PathLike[str] | None = None,
        *,
        keep_events: bool = True,
    ) -> None:
        if not process:
            raise ValueError("HistoryRecorder needs a non-empty process name, got ''")
        if path is None and not keep_events:
            raise ValueError(
                "HistoryRecorder(keep_events=False) needs a path: the events would go nowhere; "
                "pass path=... or keep_events=True"
            )
        self.process = process
        self._events: list[HistoryEvent] = []
        self._keep = keep_events
        self._seq = 0
        self._answered = 0
        self._calls = 0
        self._parents = 0
        self._file: IO[str] | None = None
        if path is not None:
            self._file = Path(path).open("a", encoding="utf-8")  # noqa: SIM115 - closed by close()

    @property
    def events(self) -> tuple[HistoryEvent, ...]:
        """Every event recorded so far, in order (none with ``keep_events=False``)."""
        return tuple(self._events)

    @property
    def recorded(self) -> int:
        """How many events were recorded so far (kept in memory or not)."""
        return self._seq

    @property
    def answered(self) -> int:
        """How many calls were answered so far (a value returned or an exception raised)."""
        return self._answered

    def close(self) -> None:
        """Close the history file (idempotent; the events stay in memory)."""
        file, self._file = self._file, None
        if file is not None:
            file.close()

    def _emit(
        self,
        parent: str,
        owner: str,
        call: int,
        op: str,
        phase: str,
        args: Mapping[str, Any],
        value: Any = None,
        error: Mapping[str, Any] | None = None,
    ) -> HistoryEvent:
        event = HistoryEvent(
            process=self.process,
            parent=parent,
            owner=owner,
            seq=self._seq,
            call=call,
            op=op,
            phase=phase,
            args=args,
            value=value,
            error=error,
            trio_time=_now(),
            wall_time=time.time(),
        )
        self._seq += 1
        self._answered += phase in ("returned", "raised")
        if self._keep:
            self._events.append(event)
        if self._file is not None:
            # Written and flushed before the answer is handed back: a process
            # killed right after an answer leaves that answer in its history.
            self._file.write(json.dumps(event.to_json(), sort_keys=True) + "\n")
            self._file.flush()
        return event

    def _next_call(self) -> int:
        self._calls += 1
        return self._calls

    def note(self, op: str, *, parent: str = "", owner: str = "", **args: Any) -> HistoryEvent:
        """Record a note: e.g. ``"runtime_closed"`` when this process's runtime closed.

        Args:
            op: what happened.
            parent, owner: the parent it concerns, if any.
            args: JSON-ready details.
        """
        return self._emit(parent, owner, self._next_call(), op, "note", args)

    def call(self, op: str, *, parent: str, owner: str, **args: Any) -> int:
        """Record a call made over another surface than a ``Parent`` (e.g. raw MCP).

        The answer is recorded with :meth:`returned` or :meth:`raised` and the
        number this returns. The checker reads *op* and the answer in the
        vocabulary of :class:`RecordedParent` (``"start"``, ``"wait"``,
        ``"cancel"``, ...), so a caller maps its own calls onto it.

        Args:
            op: the ``Parent`` call it stands for.
            parent, owner: the recorded parent's name and its owner.
            args: JSON-ready arguments.

        Returns:
            the call's number in this history.
        """
        call = self._next_call()
        self._emit(parent, owner, call, op, "call", args)
        return call

    def returned(
        self, call: int, op: str, value: Mapping[str, Any], *, parent: str, owner: str
    ) -> None:
        """Record what call *call* (from :meth:`call`) answered: *value*, JSON-ready, in
        :func:`encode_value`'s shapes (``{"type": "result", "run_id", "final_result"}``,
        ``{"type": "handle", "run_id", "status"}``, ...) where it says what they say."""
        self._emit(parent, owner, call, op, "returned", {}, dict(value))

    def raised(
        self, call: int, op: str, error: Mapping[str, Any], *, parent: str, owner: str
    ) -> None:
        """Record that call *call* answered with an error: *error* in
        :func:`encode_error`'s shape (``{"type": "RunFailedError", "run_id", "message"}``)."""
        self._emit(parent, owner, call, op, "raised", {}, None, dict(error))

    def wrap(
        self, parent: Parent, *, budget: Budget | None = None, fail_closed: bool = True
    ) -> RecordedParent:
        """A :class:`RecordedParent` over *parent* (already open), recorded here.

        Args:
            parent: the parent whose calls to record (a nested ``ctx.parent`` too).
            budget: the parent's budget, if it has one (the checker holds its
                usage to it).
            fail_closed: whether its runtime checks resolution (``Config.fail_closed``).
        """
        self._parents += 1
        name = f"{parent.owner}#{self._parents}"
        self.note(
            "open_parent",
            parent=name,
            owner=parent.owner,
            budget=None if budget is None else to_json_ready(budget),
            fail_closed=fail_closed,
        )
        return RecordedParent(self, parent, name)

    @asynccontextmanager
    async def open_parent(
        self, runtime: Runtime, owner: str, **kwargs: Any
    ) -> AsyncIterator[RecordedParent]:
        """``runtime.open_parent(owner, **kwargs)``, recorded, its close included.

        The close is recorded as a ``close_parent`` call: its answer is the
        fail-closed verdict (``UnresolvedDelegationError`` when the parent
        left work unresolved).
        """
        recorded: RecordedParent | None = None
        call: int | None = None
        try:
            async with runtime.open_parent(owner, **kwargs) as raw:
                recorded = self.wrap(
                    raw, budget=kwargs.get("budget"), fail_closed=runtime.config.fail_closed
                )
                yield recorded
                call = recorded._begin("close_parent", {})
        except BaseException as exc:
            if recorded is not None and call is not None:
                recorded._raised(call, "close_parent", exc)
            raise
        if recorded is not None and call is not None:
            recorded._returned(call, "close_parent", None)


@final
class RecordedParent:
    """A ``td.Parent`` whose every call and answer goes into a :class:`HistoryRecorder`.

    The same calls as ``Parent`` (``tools()`` is not recorded: a history
    holds what the host asked and was answered). ``raw`` is the parent itself.
    """

    __slots__ = ("name", "raw", "recorder")

    def __init__(self, recorder: HistoryRecorder, raw: Parent, name: str) -> None:
        self.recorder = recorder
        self.raw = raw
        self.name = name

    @property
    def owner(self) -> str:
        """The parent's owner."""
        return self.raw.owner

    @property
    def subagents(self) -> tuple[str, ...]:
        """The parent's direct children."""
        return self.raw.subagents

    def _begin(self, op: str, args: Mapping[str, Any]) -> int:
        call = self.recorder._next_call()
        kept = {key: _arg(value) for key, value in args.items()}
        self.recorder._emit(self.name, self.raw.owner, call, op, "call", kept)
        return call

    def _returned(self, call: int, op: str, value: object) -> None:
        value = encode_value(value)
        self.recorder._emit(self.name, self.raw.owner, call, op, "returned", {}, value)

    def _raised(self, call: int, op: str, exc: BaseException) -> None:
        error = encode_error(exc)
        self.recorder._emit(self.name, self.raw.owner, call, op, "raised", {}, None, error)

    def _sync(self, op: str, args: Mapping[str, Any], fn: Callable[[], T]) -> T:
        call = self._begin(op, args)
        try:
            value = fn()
        except BaseException as exc:
            self._raised(call, op, exc)
            raise
        self._returned(call, op, value)
        return value

    async def _async(self, op: str, args: Mapping[str, Any], fn: Callable[[], Awaitable[T]]) -> T:
        call = self._begin(op, args)
        try:
            value = await fn()
        except BaseException as exc:
            self._raised(call, op, exc)
            raise
        self._returned(call, op, value)
        return value

    async def delegate(self, name: str, task: str, **kwargs: Any) -> RunResult:
        """``Parent.delegate``, recorded."""
        args = {"name": name, "task": task, "replaces": kwargs.get("replaces")}
        return await self._async("delegate", args, lambda: self.raw.delegate(name, task, **kwargs))

    async def start(self, name: str, task: str, **kwargs: Any) -> RunHandle:
        """``Parent.start``, recorded."""
        args = {"name": name, "task": task, "replaces": kwargs.get("replaces")}
        return await self._async("start", args, lambda: self.raw.start(name, task, **kwargs))

    async def continue_run(self, run_id: str, message: str, **kwargs: Any) -> RunResult | RunHandle:
        """``Parent.continue_run``, recorded."""
        args = {"run_id": run_id, "background": kwargs.get("background", False)}
        return await self._async(
            "continue_run", args, lambda: self.raw.continue_run(run_id, message, **kwargs)
        )

    def status(self, run_id: str) -> RunHandle:
        """``Parent.status``, recorded."""
        return self._sync("status", {"run_id": run_id}, lambda: self.raw.status(run_id))

    async def wait(self, run_id: str, *, timeout: float | None = None) -> RunResult | RunHandle:
        """``Parent.wait``, recorded."""
        args = {"run_id": run_id, "timeout": timeout}
        return await self._async("wait", args, lambda: self.raw.wait(run_id, timeout=timeout))

    def cancel(self, run_id: str) -> CancelAck:
        """``Parent.cancel``, recorded."""
        return self._sync("cancel", {"run_id": run_id}, lambda: self.raw.cancel(run_id))

    def answer(self, run_id: str, value: object, *, question_id: str | None = None) -> AnswerAck:
        """``Parent.answer``, recorded."""
        args = {"run_id": run_id, "question_id": question_id}
        return self._sync(
            "answer", args, lambda: self.raw.answer(run_id, value, question_id=question_id)
        )

    def decline(
        self, run_id: str, *, question_id: str | None = None, reason: str = ""
    ) -> AnswerAck:
        """``Parent.decline``, recorded."""
        args = {"run_id": run_id, "question_id": question_id}
        return self._sync(
            "decline",
            args,
            lambda: self.raw.decline(run_id, question_id=question_id, reason=reason),
        )

    def questions(self) -> tuple[Question, ...]:
        """``Parent.questions``, recorded."""
        return self._sync("questions", {}, self.raw.questions)

    def check_resolved(self) -> None:
        """``Parent.check_resolved``, recorded (the fail-closed verdict)."""
        self._sync("check_resolved", {}, self.raw.check_resolved)

    def usage(self, run_id: str | None = None) -> Usage:
        """``Parent.usage``, recorded."""
        return self._sync("usage", {"run_id": run_id}, lambda: self.raw.usage(run_id))

    def runs(self) -> tuple[RunHandle, ...]:
        """``Parent.runs``, recorded."""
        return self._sync("runs", {}, self.raw.runs)

    def unobserved(self) -> tuple[RunHandle, ...]:
        """``Parent.unobserved``, recorded."""
        return self._sync("unobserved", {}, self.raw.unobserved)

    def settled(self) -> RecordedSettled:
        """``Parent.settled``: each settled run it yields is recorded as a ``settled`` note."""
        return RecordedSettled(self, self.raw.settled())

    def tools(self) -> Any:
        """``Parent.tools`` (not recorded)."""
        return self.raw.tools()


@final
class RecordedSettled:
    """``Parent.settled()`` whose every yielded handle is recorded."""

    __slots__ = ("_inner", "_parent")

    def __init__(self, parent: RecordedParent, inner: SettledRuns) -> None:
        self._parent = parent
        self._inner = inner

    def __aiter__(self) -> RecordedSettled:
        return self

    async def __anext__(self) -> RunHandle:
        handle = await self._inner.__anext__()
        parent = self._parent
        parent.recorder._emit(
            parent.name,
            parent.owner,
            parent.recorder._next_call(),
            "settled",
            "returned",
            {},
            encode_value(handle),
        )
        return handle

    async def aclose(self) -> None:
        """Stop following the settlements."""
        await self._inner.aclose()


def read_history(path: str | os.PathLike[str]) -> tuple[HistoryEvent, ...]:
    """The events of a history file a :class:`HistoryRecorder` wrote.

    A last line cut short (the process was killed while writing it) is
    left out; any other malformed line is an error.

    Raises:
        ValueError: a line (not the last) is not a history event; it names the line.
        OSError: the file cannot be read.
    """
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    events: list[HistoryEvent] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            events.append(HistoryEvent.from_json(json.loads(line)))
        except ValueError as exc:
            if number == len(lines):
                break  # a write cut short by a kill
            raise ValueError(f"{path}: line {number} is not a history event: {exc}") from exc
    return tuple(events)


def histories_in(paths: Iterable[str | os.PathLike[str]]) -> list[tuple[HistoryEvent, ...]]:
    """:func:`read_history` of each of *paths*."""
    return [read_history(path) for path in paths]
