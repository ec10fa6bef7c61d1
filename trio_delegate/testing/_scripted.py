"""Scripted runners: subagents built from steps, every step recorded in a trace.

A :class:`Script` is a sequence of steps that a :class:`ScriptedRunner` plays
on the Trio clock. The same script is what :class:`LifecycleModel` reads to
predict the run, so a test describes a child's behaviour once.

What each step does, and whether it is a Trio checkpoint (the place a pending
cancellation is delivered):

========================  ==================================================
step                      behaviour
========================  ==================================================
``Sleep(s)``              ``trio.sleep(s)``: a checkpoint, cancellable
``Checkpoint()``          ``trio.lowlevel.checkpoint()``
``Shielded(s)``           sleep *s* seconds ignoring cancellation (no checkpoint
                          after it: a cancellation shows at the next step)
``Return(value)``         return *value* (no checkpoint)
``Raise(error, message)`` raise ``error(message)``
``Hang()``                ``trio.sleep_forever()``: ends only by cancellation
``Start(name, task)``     ``ctx.parent.start(name, task)``: a nested run in the
                          background
``Delegate(name, task)``  ``ctx.parent.delegate(name, task)``: a nested run in
                          the foreground; its failure is raised
``WaitStarted()``         ``ctx.parent.wait`` on every run started so far, in
                          order; the first failure is raised
``Spend(tokens)``         ``ctx.add_usage(Usage(requests=1, input_tokens=tokens))``
                          (no checkpoint)
========================  ==================================================

A script that runs out of steps returns ``None``. ``Script.cleanup`` seconds
are spent in a shielded cleanup when the runner is cancelled, before the
cancellation goes on: the run reads ``running`` meanwhile (contract §5).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, final

import attrs
import trio

from .._usage import Usage
from ._trace import Trace

if TYPE_CHECKING:
    from .._core import ChildContext, Parent

__all__ = [
    "Checkpoint",
    "Delegate",
    "Hang",
    "Raise",
    "Return",
    "Script",
    "ScriptedRunner",
    "Shielded",
    "Sleep",
    "Spend",
    "Start",
    "ScriptStep",
    "WaitStarted",
]


def _check_seconds(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TypeError(f"{attribute.name} must be a finite number of seconds, got {value!r}")
    if value < 0:
        raise ValueError(f"{attribute.name} must be >= 0, got {value!r}")


def _check_error(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not (isinstance(value, type) and issubclass(value, BaseException)):
        raise TypeError(f"error must be an exception class, got {value!r}")


@final
@attrs.frozen
class Sleep:
    """Sleep *seconds* on the Trio clock (cancellable; ``0`` is a checkpoint)."""

    seconds: float = attrs.field(validator=_check_seconds)

    def describe(self) -> str:
        return f"sleep {self.seconds:g}"


def _check_tokens(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TypeError(f"tokens must be an int >= 0, got {value!r}")


@final
@attrs.frozen
class Spend:
    """Report one request of *tokens* input tokens (``ctx.add_usage``; no checkpoint)."""

    tokens: int = attrs.field(validator=_check_tokens)

    def describe(self) -> str:
        return f"spend {self.tokens}"


@final
@attrs.frozen
class Checkpoint:
    """A Trio checkpoint: where a pending cancellation is delivered."""

    def describe(self) -> str:
        return "checkpoint"


@final
@attrs.frozen
class Shielded:
    """Sleep *seconds* inside a shielded cancel scope: cancellation waits."""

    seconds: float = attrs.field(validator=_check_seconds)

    def describe(self) -> str:
        return f"shielded {self.seconds:g}"


@final
@attrs.frozen
class Return:
    """Return *value* as the final result (no checkpoint)."""

    value: Any = None

    def describe(self) -> str:
        return f"return {self.value!r}"


@final
@attrs.frozen
class Raise:
    """Raise ``error(message)``."""

    error: type[BaseException] = attrs.field(default=RuntimeError, validator=_check_error)
    message: str = "scripted failure"

    def describe(self) -> str:
        return f"raise {self.error.__name__}"


@final
@attrs.frozen
class Hang:
    """Sleep forever: the run ends only when it is cancelled or times out."""

    def describe(self) -> str:
        return "hang"


@final
@attrs.frozen
class Start:
    """Start a nested run of *subagent* on *task* in the background (``ctx.parent.start``)."""

    subagent: str
    task: str

    def describe(self) -> str:
        return f"start {self.subagent} {self.task!r}"


@final
@attrs.frozen
class Delegate:
    """Delegate *task* to *subagent* in the foreground (``ctx.parent.delegate``)."""

    subagent: str
    task: str

    def describe(self) -> str:
        return f"delegate {self.subagent} {self.task!r}"


@final
@attrs.frozen
class WaitStarted:
    """Wait for every run started by earlier ``Start`` steps, in order."""

    def describe(self) -> str:
        return "wait started"


#: One step of a :class:`Script`.
ScriptStep = (
    Sleep | Checkpoint | Shielded | Return | Raise | Hang | Start | Delegate | WaitStarted | Spend
)

_STEP_TYPES = (
    Sleep,
    Checkpoint,
    Shielded,
    Return,
    Raise,
    Hang,
    Start,
    Delegate,
    WaitStarted,
    Spend,
)
_FINAL_STEPS = (Return, Raise, Hang)


def _to_steps(value: Iterable[ScriptStep]) -> tuple[ScriptStep, ...]:
    return tuple(value)


def _check_steps(instance: object, attribute: attrs.Attribute[Any], value: tuple[Any, ...]) -> None:
    for index, step in enumerate(value):
        if not isinstance(step, _STEP_TYPES):
            raise TypeError(f"steps[{index}] is not a step: {step!r}")
        if isinstance(step, _FINAL_STEPS) and index != len(value) - 1:
            raise ValueError(
                f"steps[{index}] ({step.describe()}) ends the script, so the steps after it "
                "could never run; remove them"
            )


@final
@attrs.frozen
class Script:
    """What a scripted runner does for one run.

    Args:
        steps: the steps, in order; ``Return``, ``Raise`` and ``Hang`` may
            only come last. A script that runs out of steps returns ``None``.
        cleanup: seconds of shielded cleanup when the runner is cancelled.

    Raises:
        TypeError, ValueError: a malformed step or cleanup.
    """

    steps: tuple[ScriptStep, ...] = attrs.field(converter=_to_steps, validator=_check_steps)
    cleanup: float = attrs.field(default=0.0, kw_only=True, validator=_check_seconds)

    @classmethod
    def of(cls, *steps: ScriptStep, cleanup: float = 0.0) -> Script:
        """``Script.of(Sleep(1), Return("ok"))``: the steps as arguments."""
        return cls(steps, cleanup=cleanup)


@final
@attrs.define(eq=False)
class ScriptedRunner:
    """A runner (``Subagent(name, runner)``) that plays a :class:`Script` per task.

    Args:
        default: the script for every task without one of its own.
        trace: where every step is recorded; a fresh :class:`Trace` when omitted.

    The trace gets, per run: ``start`` (detail: the subagent), one ``step``
    per step begun (``"<index> <step>"``), ``cancelled`` when a cancellation
    reached the runner (``"at step <index>"``), ``cleanup`` when a shielded
    cleanup begins, and ``finally`` when the runner ends (``returned``,
    ``cancelled`` or ``raised <ExceptionType>``).
    """

    default: Script | None = None
    trace: Trace = attrs.field(factory=Trace)
    _by_task: dict[str, Script] = attrs.field(factory=dict, init=False)

    def assign(self, task: str, script: Script) -> None:
        """Play *script* for runs whose task is exactly *task*."""
        if not isinstance(script, Script):
            raise TypeError(f"script must be a Script, got {script!r}")
        self._by_task[task] = script

    def assign_many(self, scripts: Mapping[str, Script]) -> None:
        """:meth:`assign` every ``task: script`` pair of *scripts*."""
        for task, script in scripts.items():
            self.assign(task, script)

    def script_for(self, task: str) -> Script:
        """The script played for *task*.

        Raises:
            LookupError: no script was assigned to *task* and there is no default.
        """
        script = self._by_task.get(task, self.default)
        if script is None:
            raise LookupError(f"no script for task {task!r} and no default script")
        return script

    async def __call__(self, ctx: ChildContext) -> Any:
        trace = self.trace
        run_id = ctx.run_id
        trace.record(run_id, "start", ctx.subagent, task=ctx.task)
        outcome = "returned"
        player = _Player(ctx, trace)
        try:
            script = self.script_for(ctx.task)
            try:
                return await player.play(script)
            except trio.Cancelled:
                trace.record(run_id, "cancelled", f"at step {player.index}")
                if script.cleanup:
                    with trio.CancelScope(shield=True):
                        trace.record(run_id, "cleanup", f"{script.cleanup:g}")
                        await trio.sleep(script.cleanup)
                raise
        except trio.Cancelled:
            outcome = "cancelled"
            raise
        except BaseException as exc:
            outcome = f"raised {type(exc).__name__}"
            raise
        finally:
            trace.record(run_id, "finally", outcome)


@attrs.define(eq=False)
class _Player:
    """The progress of one run through its script."""

    ctx: ChildContext
    trace: Trace
    index: int = 0
    started: list[str] = attrs.Factory(list)

    def _parent(self, step: ScriptStep) -> Parent:
        parent = self.ctx.parent
        if parent is None:
            raise RuntimeError(
                f"step {self.index} ({step.describe()}) needs ctx.parent: declare the "
                f"children of subagent {self.ctx.subagent!r}"
            )
        return parent

    async def play(self, script: Script) -> Any:
        ctx = self.ctx
        for index, step in enumerate(script.steps):
            self.index = index
            self.trace.record(ctx.run_id, "step", f"{index} {step.describe()}")
            match step:
                case Sleep(seconds=seconds):
                    await trio.sleep(seconds)
                case Checkpoint():
                    await trio.lowlevel.checkpoint()
                case Shielded(seconds=seconds):
                    with trio.CancelScope(shield=True):
                        await trio.sleep(seconds)
                case Return(value=value):
                    return value
                case Raise(error=error, message=message):
                    raise error(message)
                case Hang():
                    await trio.sleep_forever()
                case Start(subagent=name, task=task):
                    handle = await self._parent(step).start(name, task)
                    self.started.append(handle.run_id)
                case Delegate(subagent=name, task=task):
                    await self._parent(step).delegate(name, task)
                case WaitStarted():
                    parent = self._parent(step)
                    for run_id in self.started:
                        await parent.wait(run_id)
                case Spend(tokens=tokens):
                    ctx.add_usage(Usage(requests=1, input_tokens=tokens))
        self.index = len(script.steps)
        return None
