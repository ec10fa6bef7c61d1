"""What a runner receives: the :class:`ChildContext` of its run."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, final

from .._usage import Budget, Usage, check_usage
from ._questions import ask
from ._spending import remaining, report
from ._talk import check_progress, talk_of

if TYPE_CHECKING:
    from ._parent import Parent
    from ._run import Run

__all__ = ["ChildContext", "context_of", "worker_context"]


@final
class ChildContext:
    """The run a runner is executing; every attribute is read-only.

    One is made for every run, so it is a plain class with read-only
    properties over private slots: a frozen attrs class would set each field
    through its checked ``__setattr__``. It can be built directly to test a
    runner alone (its usage reports are then checked and dropped, and
    :meth:`remaining` is ``None``).

    A runner reports what it spent with :meth:`add_usage` and reads what its
    budgets leave with :meth:`remaining` (contract §20), from the run's own
    Trio task (a worker thread hands its usage back to it).

    Attributes:
        run_id: the run's id.
        subagent: the subagent's name.
        task: the task text (the new message, for a continuation).
        final_schema: the JSON Schema the result must satisfy, or ``None``.
        history: the earlier conversation: ``()`` for an ordinary delegation.
        deadline: the child deadline on the Trio clock, or ``math.inf``.
        parent: a :class:`Parent` for nested delegation when the subagent
            declares ``children``, else ``None``.
        asks: whether the subagent declares ``asks=True``, so that :meth:`ask`
            may be called (a runner offers its model a way to ask only then);
            ``False`` for a context built directly.

    A context built directly belongs to no run: :meth:`progress` checks its
    arguments and keeps nothing, and :meth:`ask` raises ``InputUnavailableError``.
    """

    __slots__ = (
        "_deadline",
        "_final_schema",
        "_history",
        "_parent",
        "_run",
        "_run_id",
        "_subagent",
        "_tally",
        "_task",
    )
    #: Where the reports of a context made by :func:`worker_context` go; unset
    #: for every other context (a run's reports go to its run).
    _tally: _Tally

    def __init__(
        self,
        run_id: str,
        subagent: str,
        task: str,
        final_schema: Mapping[str, Any] | None = None,
        history: tuple[Any, ...] = (),
        deadline: float = math.inf,
        parent: Parent | None = None,
    ) -> None:
        self._run_id = run_id
        self._subagent = subagent
        self._task = task
        self._final_schema = final_schema
        self._history = history
        self._deadline = deadline
        self._parent = parent
        # The run it reports usage for; None for a context built to test a
        # runner alone, whose reports are checked and dropped.
        self._run: Run | None = None

    def __repr__(self) -> str:
        return (
            f"ChildContext(run_id={self._run_id!r}, subagent={self._subagent!r}, "
            f"task={self._task!r}, final_schema={self._final_schema!r}, "
            f"history={self._history!r}, deadline={self._deadline!r}, parent={self._parent!r})"
        )

    @property
    def run_id(self) -> str:
        return self._run_id

    @property
    def subagent(self) -> str:
        return self._subagent

    @property
    def task(self) -> str:
        return self._task

    @property
    def final_schema(self) -> Mapping[str, Any] | None:
        return self._final_schema

    @property
    def history(self) -> tuple[Any, ...]:
        return self._history

    @property
    def deadline(self) -> float:
        return self._deadline

    @property
    def parent(self) -> Parent | None:
        return self._parent

    @property
    def asks(self) -> bool:
        run = self._run
        return run is not None and run.subagent.asks

    def add_usage(self, usage: Usage) -> None:
        """Report what the runner spent (contract §20): it counts for this run and
        every scope above it (its parent, the runs and parents above, the runtime).

        A report that takes a scope past its budget stops that scope: this run
        is cancelled with it when it is in it. A report after the run settled,
        or once a scope of the run was stopped (the overrun is at most the
        report that crossed the limit), is dropped.

        Args:
            usage: what was spent since the last report.

        Raises:
            InvalidArgumentsError: *usage* is not a :class:`Usage`.
        """
        check_usage("usage", usage)
        run = self._run
        if run is not None:
            report(run, usage)
        else:
            tally = getattr(self, "_tally", None)  # set only by worker_context
            if tally is not None:
                tally.add(usage)

    def remaining(self) -> Budget | None:
        """The tightest remaining limits over every budgeted scope that contains
        this run, clamped at 0, or ``None`` when no scope has a budget."""
        run = self._run
        return None if run is None else remaining(run)

    def progress(
        self,
        message: str | None = None,
        *,
        progress: float | None = None,
        total: float | None = None,
    ) -> None:
        """Report how far the run is (contract §19). Synchronous, O(1), never blocks.

        The run keeps only the latest report; ``status`` and a timed-out
        ``wait`` carry it. A call after the run settled does nothing.

        Args:
            message: what to tell the parent; trimmed, whitespace collapsed and
                cut to 1,000 characters.
            progress: how far it is, a finite number >= 0 that never goes down.
            total: how far it will go, a finite number >= 0 (it may change).

        Raises:
            InvalidArgumentsError: a malformed argument, or *progress* below
                a number reported before.
        """
        run = self._run
        if run is not None and not run.state.live:
            return  # settled: nothing is kept and nothing checked
        text, number, of = check_progress(message, progress, total)
        if run is not None:
            talk_of(run).report(run, text, number, of)

    async def ask(self, question: str, *, schema: Any = None, timeout: float | None = None) -> Any:
        """Ask the parent a question and wait for its answer (contract §19).

        The run reads ``input_required`` while a question is open; its slot and
        deadline are unchanged. The question is withdrawn when this call ends,
        however it ends.

        Args:
            question: the question, at most ``Config.max_task_chars`` characters.
            schema: what the answer must satisfy: a JSON Schema, or an attrs
                class / dataclass (the answer is structured into it); ``None``
                means a string.
            timeout: seconds on the Trio clock to wait at most (``None``: no limit).

        Returns:
            the parent's answer, checked against *schema*.

        Raises:
            InvalidArgumentsError: the subagent does not declare ``asks=True``,
                or a malformed question, schema or timeout.
            InputUnavailableError: nobody can answer (a foreground ``delegate``
                without ``on_input``, a run whose cancellation was delivered).
            QuestionDeclinedError: the parent declined; its ``reason`` says why.
            AskTimeoutError: *timeout* passed first; the run goes on.
        """
        return await ask(self._run, self._subagent, question, schema, timeout)


class _Tally:
    """What the runner of a :func:`worker_context` reported, summed."""

    __slots__ = ("usage",)

    def __init__(self) -> None:
        self.usage: Usage | None = None

    def add(self, usage: Usage) -> None:
        self.usage = usage if self.usage is None else self.usage + usage


def worker_context(
    run_id: str,
    subagent: str,
    task: str,
    final_schema: Mapping[str, Any] | None = None,
    history: tuple[Any, ...] = (),
    deadline: float = math.inf,
) -> tuple[ChildContext, Callable[[], Usage | None]]:
    """A context for a runner that runs a run on behalf of a runtime elsewhere
    (a worker process), whose usage reports are kept for the reply.

    As a context built directly, it belongs to no run here: ``progress`` is
    checked and dropped, ``ask`` raises ``InputUnavailableError`` and
    ``remaining`` is ``None``. Its ``add_usage`` reports are checked and
    summed: the worker sends the sum back with the result, and the runtime
    that owns the run counts it (contract §20).

    Args:
        run_id, subagent, task, final_schema, history, deadline: as for
            :class:`ChildContext`.

    Returns:
        the context, and a function that gives what its runner reported so
        far (``None`` when nothing).
    """
    ctx = ChildContext(run_id, subagent, task, final_schema, history, deadline)
    tally = _Tally()
    ctx._tally = tally

    def reported() -> Usage | None:
        return tally.usage

    return ctx, reported


def context_of(run: Run, nested: Parent | None = None) -> ChildContext:
    """The context *run*'s runner is called with: its usage, progress and
    questions are *run*'s; *nested* is its ``parent``, if it may delegate."""
    schema = run.schema
    history = run.history
    ctx = ChildContext(
        run.run_id,
        run.subagent.name,
        run.task,
        schema.schema_copy() if schema is not None else None,
        # Each run reads its own copy: nothing it does reaches another run.
        tuple(history.copy()) if history is not None else (),
        run.deadline,
        nested,
    )
    ctx._run = run
    return ctx
