"""What the framework adapter tests share: subagents, scripts and checks.

Each framework's test module supplies two things built on the framework's
own test double:

* a **driver** (:data:`Driver`): runs the framework's agent on a parent's
  tools, its scripted model making the given tool calls one per turn (a
  :class:`trio_delegate.testing.ToolCall` whose :class:`~trio_delegate.testing.Ref`
  arguments name what earlier calls returned), and reports what the model
  got back for each call through the framework (:class:`Seen`);
* a **child factory** (:data:`ChildFactory`): a runner made by the adapter's
  ``runner(...)`` around the framework's agent, whose model behaves as asked
  (:data:`Behaviour`) and reports to a :class:`ModelProbe`.

The ``check_*`` functions here are the scenarios every framework must pass;
the test modules name them after the capability matrix's cells.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Literal

import attrs
import pytest
import trio
import trio.testing

import trio_delegate as td
from trio_delegate.testing import Ref, ToolCall

__all__ = [
    "ANSWER_SCHEMA",
    "LENGTH_SCHEMA",
    "Answer",
    "Behaviour",
    "ChildFactory",
    "ChildRunner",
    "Driver",
    "ModelProbe",
    "Seen",
    "Subagents",
    "check_background_session",
    "check_cancel",
    "check_cancellation_reaches_child",
    "check_child_cancel",
    "check_child_deadline",
    "check_child_failure",
    "check_child_history",
    "check_child_structured",
    "check_continuation",
    "check_fail_closed",
    "check_foreground",
    "check_hostile_arguments",
    "check_status",
    "check_structured",
    "check_timed_wait",
    "failure_payload",
    "model_answer",
    "model_call",
    "model_reply",
    "next_call",
    "parse_payload",
]

#: The worker's results satisfy this; the liar's do not.
LENGTH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"length": {"type": "integer"}},
    "required": ["length"],
    "additionalProperties": False,
}

#: What a child agent's structured answer satisfies.
ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
    "additionalProperties": False,
}

#: The worker sleeps this long on the Trio clock.
WORK_SECONDS = 5.0


@attrs.frozen
class Seen:
    """What the model got back for one tool call, through the framework.

    Attributes:
        tool: the tool it called.
        payload: the tool's answer, parsed from what the framework handed back.
        is_error: whether the framework marked the call as failed (where it has
            no such mark: whether the answer is an error payload).
    """

    tool: str
    payload: dict[str, Any]
    is_error: bool

    def value(self, key: str) -> Any:
        body = self.payload["error"] if self.is_error else self.payload
        return body[key]


#: Runs the framework's agent on the parent's tools, making these calls in order.
Driver = Callable[[td.Parent, Sequence[ToolCall]], Awaitable[Sequence[Seen]]]


def next_call(steps: Sequence[ToolCall], seen: Sequence[Seen]) -> tuple[str, dict[str, Any]] | None:
    """The scripted model's next tool call, its :class:`Ref` arguments resolved.

    Returns:
        ``(name, arguments)``, or ``None`` once every step has been made.
    """
    if len(seen) >= len(steps):
        return None
    step = steps[len(seen)]
    assert isinstance(step.arguments, Mapping)
    arguments = {
        key: seen[value.step].value(value.key) if isinstance(value, Ref) else value
        for key, value in step.arguments.items()
    }
    return step.name, arguments


def parse_payload(text: Any) -> dict[str, Any]:
    """A tool answer the framework handed back as text (or as data) as a dict."""
    payload = json.loads(text) if isinstance(text, str) else text
    assert isinstance(payload, dict), payload
    return payload


def failure_payload(content: Any, framework_kind: str) -> dict[str, Any]:
    """A failed call's answer: our error payload, or the framework's own rejection
    (arguments it refused before calling the tool) as ``framework:<kind>``."""
    try:
        payload = parse_payload(content)
    except (ValueError, AssertionError):
        payload = {}
    if isinstance(payload.get("error"), dict):
        return payload
    return {"error": {"type": f"framework:{framework_kind}", "message": str(content)}}


# -- the subagents every parent-side scenario delegates to --------------------------


@attrs.define
class Subagents:
    """The subagents of the parent-side scenarios, and what they did."""

    log: list[str] = attrs.field(factory=list)
    hanger_started: trio.Event = attrs.field(factory=trio.Event)
    hanger_run_ids: list[str] = attrs.field(factory=list)

    def definitions(self) -> list[td.Subagent]:
        return [
            td.Subagent("worker", self._worker, description="Counts a task's characters."),
            td.Subagent("hanger", self._hanger, description="Never finishes on its own."),
            td.Subagent("flaky", self._flaky, description="Always breaks."),
            td.Subagent("liar", self._liar, description="Answers in the wrong shape."),
            td.Subagent("echo", self._echo, description="Repeats its task and history size."),
        ]

    async def _worker(self, ctx: td.ChildContext) -> dict[str, int]:
        await trio.sleep(WORK_SECONDS)
        return {"length": len(ctx.task)}

    async def _hanger(self, ctx: td.ChildContext) -> None:
        self.hanger_run_ids.append(ctx.run_id)
        self.log.append("hanger started")
        self.hanger_started.set()
        try:
            await trio.sleep_forever()
        finally:
            self.log.append("hanger finally")

    async def _flaky(self, ctx: td.ChildContext) -> None:
        await trio.lowlevel.checkpoint()
        raise RuntimeError("the flaky subagent broke")

    async def _liar(self, ctx: td.ChildContext) -> dict[str, bool]:
        await trio.lowlevel.checkpoint()
        return {"wrong": True}

    async def _echo(self, ctx: td.ChildContext) -> dict[str, Any]:
        await trio.lowlevel.checkpoint()
        return {"task": ctx.task, "history": len(ctx.history)}


def _background(subagent: str, task: str) -> ToolCall:
    return ToolCall("delegate_task", {"subagent": subagent, "task": task, "background": True})


def _error_type(seen: Seen) -> str:
    assert seen.is_error, seen
    kind = seen.payload["error"]["type"]
    assert isinstance(kind, str)
    return kind


def _assert_success(seen: Seen) -> None:
    assert not seen.is_error, seen
    assert "error" not in seen.payload, seen


# -- parent side: one check per capability -------------------------------------------


async def check_foreground(drive: Driver) -> None:
    """Foreground delegation answers with the result; a failure is an error the
    model sees, and a replacement resolves it."""
    subagents = Subagents()
    async with td.open_runtime(subagents.definitions()) as rt, rt.open_parent("lead") as parent:
        seen = await drive(
            parent,
            [
                ToolCall("delegate_task", {"subagent": "worker", "task": "count me"}),
                ToolCall("delegate_task", {"subagent": "flaky", "task": "try"}),
                ToolCall(
                    "delegate_task",
                    {"subagent": "worker", "task": "instead", "replaces": Ref(1, "run_id")},
                ),
            ],
        )
        assert [s.tool for s in seen] == ["delegate_task"] * 3
        _assert_success(seen[0])
        assert seen[0].payload["final_result"] == {"length": 8}
        assert seen[0].payload["task_summary"] == "count me"
        assert _error_type(seen[1]) == "run_failed"
        assert seen[1].payload["error"]["error_type"] == "RuntimeError"
        assert "the flaky subagent broke" in seen[1].payload["error"]["message"]
        _assert_success(seen[2])
        assert seen[2].payload["final_result"] == {"length": 7}
        parent.check_resolved()


async def check_background_session(drive: Driver) -> None:
    """The whole background lifecycle as one session: delegate in the background →
    status → a timed wait that answers "running" → wait → result; a cancel; a failed
    child and its replacement; an invalid structured result as an error; and the
    parent's fail-closed check passes at the end."""
    subagents = Subagents()
    async with td.open_runtime(subagents.definitions()) as rt, rt.open_parent("lead") as parent:
        seen = await drive(
            parent,
            [
                ToolCall(
                    "delegate_task", {"subagent": "worker", "task": "slow job", "background": True}
                ),
                ToolCall("subagent_status", {"run_id": Ref(0, "run_id")}),
                ToolCall("wait_subagent", {"run_id": Ref(0, "run_id"), "timeout": 1}),
                ToolCall("wait_subagent", {"run_id": Ref(0, "run_id")}),
                ToolCall(
                    "delegate_task", {"subagent": "hanger", "task": "stuck", "background": True}
                ),
                ToolCall("cancel_subagent", {"run_id": Ref(4, "run_id")}),
                ToolCall("wait_subagent", {"run_id": Ref(4, "run_id")}),
                ToolCall("delegate_task", {"subagent": "flaky", "task": "try"}),
                ToolCall(
                    "delegate_task",
                    {"subagent": "worker", "task": "retry", "replaces": Ref(7, "run_id")},
                ),
                ToolCall(
                    "delegate_task",
                    {"subagent": "liar", "task": "shape", "final_schema": LENGTH_SCHEMA},
                ),
                ToolCall(
                    "delegate_task",
                    {
                        "subagent": "worker",
                        "task": "shaped",
                        "final_schema": LENGTH_SCHEMA,
                        "replaces": Ref(9, "run_id"),
                    },
                ),
                ToolCall(
                    "delegate_task",
                    {"subagent": "worker", "task": "unstuck", "replaces": Ref(4, "run_id")},
                ),
            ],
        )
        run_id = seen[0].payload["run_id"]
        assert seen[0].payload == {"run_id": run_id, "subagent": "worker", "status": "running"}
        assert seen[1].payload == seen[0].payload
        assert seen[2].payload == seen[0].payload  # the timed wait's running handle
        assert seen[3].payload["final_result"] == {"length": 8}
        assert seen[4].payload["status"] == "running"
        assert seen[5].payload == {
            "run_id": seen[4].payload["run_id"],
            "cancel_requested": True,
            "status": "running",
        }
        assert _error_type(seen[6]) == "run_cancelled"
        assert _error_type(seen[7]) == "run_failed"
        assert seen[8].payload["final_result"] == {"length": 5}
        assert _error_type(seen[9]) == "invalid_result"
        assert seen[10].payload["final_result"] == {"length": 6}
        assert seen[11].payload["final_result"] == {"length": 7}
        for index in (0, 1, 2, 3, 4, 5, 8, 10, 11):
            _assert_success(seen[index])
        assert subagents.log == ["hanger started", "hanger finally"]
        assert parent.status(seen[4].payload["run_id"]).status is td.RunStatus.CANCELLED
        parent.check_resolved()
    # Leaving the parent claimed completion, and the fail-closed check passed.


async def check_fail_closed(drive: Driver) -> None:
    """A background run the model never waited for stops the parent from claiming
    completion."""
    subagents = Subagents()
    with pytest.raises(td.UnresolvedDelegationError) as caught:
        async with (
            td.open_runtime(subagents.definitions()) as rt,
            rt.open_parent("lead") as parent,
        ):
            seen = await drive(
                parent,
                [
                    ToolCall(
                        "delegate_task", {"subagent": "worker", "task": "x", "background": True}
                    )
                ],
            )
    assert [entry.run_id for entry in caught.value.unresolved] == [seen[0].payload["run_id"]]


async def check_status(drive: Driver) -> None:
    """A status call answers with the run's live status and observes nothing."""
    subagents = Subagents()
    async with td.open_runtime(subagents.definitions()) as rt, rt.open_parent("lead") as parent:
        seen = await drive(
            parent,
            [
                ToolCall("delegate_task", {"subagent": "worker", "task": "x", "background": True}),
                ToolCall("subagent_status", {"run_id": Ref(0, "run_id")}),
                ToolCall("subagent_status", {"run_id": "run_made_up"}),
            ],
        )
        run_id = seen[0].payload["run_id"]
        assert seen[1].payload == {"run_id": run_id, "subagent": "worker", "status": "running"}
        assert _error_type(seen[2]) == "unknown_run"
        with pytest.raises(td.UnresolvedDelegationError):
            parent.check_resolved()  # a status is not an observation
        await parent.wait(run_id)


async def check_timed_wait(drive: Driver) -> None:
    """A wait with a timeout answers "running" when it runs out, on the Trio clock,
    without touching the child; a plain wait then returns the result."""
    subagents = Subagents()
    async with td.open_runtime(subagents.definitions()) as rt, rt.open_parent("lead") as parent:
        start = trio.current_time()
        seen = await drive(
            parent,
            [
                ToolCall(
                    "delegate_task", {"subagent": "worker", "task": "abc", "background": True}
                ),
                ToolCall("wait_subagent", {"run_id": Ref(0, "run_id"), "timeout": 1.5}),
                ToolCall("wait_subagent", {"run_id": Ref(0, "run_id"), "timeout": 0}),
                ToolCall("wait_subagent", {"run_id": Ref(0, "run_id")}),
            ],
        )
        elapsed = trio.current_time() - start
        running = {"run_id": seen[0].payload["run_id"], "subagent": "worker", "status": "running"}
        assert seen[1].payload == running
        assert seen[2].payload == running
        assert seen[3].payload["final_result"] == {"length": 3}
        # The timed waits neither moved nor held up the child's work.
        assert elapsed == pytest.approx(WORK_SECONDS, abs=0.5)
        parent.check_resolved()


async def check_cancel(drive: Driver) -> None:
    """A cancel is a request: the model gets the acknowledgment, the child's cleanup
    runs, a wait then reports the cancellation as an error, and a replacement
    resolves it."""
    subagents = Subagents()
    async with td.open_runtime(subagents.definitions()) as rt, rt.open_parent("lead") as parent:
        seen = await drive(
            parent,
            [
                ToolCall("delegate_task", {"subagent": "hanger", "task": "x", "background": True}),
                ToolCall("cancel_subagent", {"run_id": Ref(0, "run_id")}),
                ToolCall("wait_subagent", {"run_id": Ref(0, "run_id")}),
                ToolCall("cancel_subagent", {"run_id": Ref(0, "run_id")}),
                ToolCall(
                    "delegate_task",
                    {"subagent": "worker", "task": "y", "replaces": Ref(0, "run_id")},
                ),
            ],
        )
        run_id = seen[0].payload["run_id"]
        assert seen[1].payload == {"run_id": run_id, "cancel_requested": True, "status": "running"}
        assert _error_type(seen[2]) == "run_cancelled"
        assert seen[2].payload["error"]["run_id"] == run_id
        assert seen[3].payload == {
            "run_id": run_id,
            "cancel_requested": False,
            "status": "cancelled",
        }
        assert seen[4].payload["final_result"] == {"length": 1}
        assert subagents.log == ["hanger started", "hanger finally"]
        parent.check_resolved()


async def check_continuation(drive: Driver) -> None:
    """continue_subagent starts a new run that sees the earlier conversation."""
    subagents = Subagents()
    async with td.open_runtime(subagents.definitions()) as rt, rt.open_parent("lead") as parent:
        seen = await drive(
            parent,
            [
                ToolCall("delegate_task", {"subagent": "echo", "task": "first"}),
                ToolCall("continue_subagent", {"run_id": Ref(0, "run_id"), "message": "second"}),
                ToolCall("continue_subagent", {"run_id": Ref(1, "run_id"), "message": "third"}),
            ],
        )
        assert [s.payload["final_result"] for s in seen] == [
            {"task": "first", "history": 0},
            {"task": "second", "history": 2},
            {"task": "third", "history": 4},
        ]
        assert len({s.payload["run_id"] for s in seen}) == 3
        parent.check_resolved()


async def check_structured(drive: Driver) -> None:
    """A final_schema from the model shapes the result; a result that breaks it is an
    error naming the problem, never a result; a replacement resolves it."""
    subagents = Subagents()
    async with td.open_runtime(subagents.definitions()) as rt, rt.open_parent("lead") as parent:
        seen = await drive(
            parent,
            [
                ToolCall(
                    "delegate_task",
                    {"subagent": "worker", "task": "four", "final_schema": LENGTH_SCHEMA},
                ),
                ToolCall(
                    "delegate_task",
                    {"subagent": "liar", "task": "four", "final_schema": LENGTH_SCHEMA},
                ),
                ToolCall(
                    "delegate_task",
                    {
                        "subagent": "worker",
                        "task": "four",
                        "final_schema": LENGTH_SCHEMA,
                        "replaces": Ref(1, "run_id"),
                    },
                ),
            ],
        )
        assert seen[0].payload["final_result"] == {"length": 4}
        assert _error_type(seen[1]) == "invalid_result"
        assert "length" in seen[1].payload["error"]["message"]
        assert seen[2].payload["final_result"] == {"length": 4}
        parent.check_resolved()


def _deep(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"x": schema}}
    return schema


async def check_hostile_arguments(drive: Driver, *, surrogates: bool = True) -> None:
    """Arguments no model should send are failed tool calls naming the problem, and
    start nothing. (*surrogates*: whether the framework carries a lone surrogate in
    a model's arguments to the tool at all.)"""
    subagents = Subagents()
    calls = [
        ToolCall("delegate_task", {"subagent": "worker", "task": "x" * 200_000}),
        ToolCall(
            "delegate_task", {"subagent": "worker", "task": "deep", "final_schema": _deep(80)}
        ),
    ]
    if surrogates:
        calls.append(ToolCall("delegate_task", {"subagent": "worker", "task": "lone \ud800"}))
    async with td.open_runtime(subagents.definitions()) as rt, rt.open_parent("lead") as parent:
        seen = await drive(parent, calls)
        assert [_error_type(s) for s in seen] == ["invalid_arguments"] * len(calls)
        assert "200000 characters" in seen[0].payload["error"]["message"]
        assert "levels deep" in seen[1].payload["error"]["message"]
        assert all("surrogate" in s.payload["error"]["message"] for s in seen[2:])
        parent.check_resolved()  # nothing was started


async def check_cancellation_reaches_child(drive: Driver) -> None:
    """Cancelling the Trio scope around the framework's agent run cancels the tool's
    delegation and so the child run: it ends cancelled after its cleanup ran, and
    the model never gets an answer."""
    subagents = Subagents()
    finished: list[Sequence[Seen]] = []
    async with td.open_runtime(subagents.definitions()) as rt, rt.open_parent("lead") as parent:

        async def agent() -> None:
            call = ToolCall("delegate_task", {"subagent": "hanger", "task": "x"})
            finished.append(await drive(parent, [call]))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent)
            await subagents.hanger_started.wait()
            nursery.cancel_scope.cancel()
        assert finished == []
        assert subagents.log == ["hanger started", "hanger finally"]
        (run_id,) = subagents.hanger_run_ids
        assert parent.status(run_id).status is td.RunStatus.CANCELLED
        # Until it is replaced, the cancelled run keeps the parent from claiming completion.
        with pytest.raises(td.UnresolvedDelegationError):
            parent.check_resolved()
        await parent.delegate("echo", "instead", replaces=run_id)


# -- child side: the framework's agent as a subagent --------------------------------

#: How a child agent's scripted model behaves:
#: ``answer`` — answers with the user messages it was given, joined by "|";
#: ``structured`` — the same as {"answer": ...}, in the framework's structured form
#: when the run asks for one; ``bad`` — a structured answer in the wrong shape;
#: ``hang`` — never answers (until cancelled); ``fail`` — raises ValueError.
Behaviour = Literal["answer", "structured", "bad", "hang", "fail"]


@attrs.define
class ModelProbe:
    """What a child agent's scripted model saw and did."""

    log: list[str] = attrs.field(factory=list)
    started: trio.Event = attrs.field(factory=trio.Event)

    def start(self) -> None:
        self.log.append("model started")
        self.started.set()


#: A subagent runner.
ChildRunner = Callable[[td.ChildContext], Awaitable[Any]]

#: Makes a subagent runner around the framework's agent, its model behaving as asked.
ChildFactory = Callable[[Behaviour, ModelProbe], ChildRunner]


def model_answer(user_texts: Sequence[str]) -> str:
    """The ``answer`` behaviour's text for the user messages a model saw."""
    return "|".join(user_texts)


async def model_call(behaviour: Behaviour, probe: ModelProbe) -> None:
    """The model call itself: it never ends for ``hang`` (until cancelled, which the
    probe records); it is instant otherwise. Run on the asyncio side."""
    if behaviour != "hang":
        return
    probe.start()
    try:
        await asyncio.get_running_loop().create_future()
    except asyncio.CancelledError:
        probe.log.append("model cancelled")
        raise


def model_reply(behaviour: Behaviour, user_texts: Sequence[str]) -> str | dict[str, Any]:
    """What the model answers: text, or the object it means as a structured answer.

    Raises:
        ValueError: for ``fail``.
    """
    if behaviour == "fail":
        raise ValueError("model broke")
    answer = model_answer(user_texts)
    if behaviour == "structured":
        return {"answer": answer}
    if behaviour == "bad":
        return {"nope": 1}
    return answer


@attrs.frozen
class Answer:
    """A host's structured-result type (the runtime derives its schema)."""

    answer: str


async def _model_started(parent: td.Parent, run_id: str, probe: ModelProbe) -> None:
    """Wait until the child's model is called; fail at once if the run ends first
    (no clock, mock or real, has to run out for a broken run to show)."""

    async def run_ended() -> None:
        answer = await parent.wait(run_id)
        raise AssertionError(f"the run ended before its model was called: {answer!r}")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_ended)
        await probe.started.wait()
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def _lenient_parent(sub: td.Subagent) -> AsyncIterator[td.Parent]:
    """A parent over *sub* without the fail-closed check (its runs end badly on purpose)."""
    async with (
        td.open_runtime([sub], config=td.Config(fail_closed=False)) as rt,
        rt.open_parent("lead") as parent,
    ):
        yield parent


async def check_child_history(make: ChildFactory) -> None:
    """The agent answers the task; a continuation hands it the earlier conversation
    (its transcript), and chained continuations accumulate."""
    probe = ModelProbe()
    sub = td.Subagent("agent", make("answer", probe))
    async with td.open_runtime([sub]) as rt, rt.open_parent("lead") as parent:
        first = await parent.delegate("agent", "first")
        assert first.final_result == "first"
        second = await parent.continue_run(first.run_id, "second")
        assert isinstance(second, td.RunResult)
        assert second.final_result == "first|second"
        third = await parent.continue_run(second.run_id, "third")
        assert isinstance(third, td.RunResult)
        assert third.final_result == "first|second|third"


async def check_child_structured(make: ChildFactory) -> None:
    """A run's final_schema reaches the agent as its output type; the answer comes
    back as JSON data (or structured into the host's class), and one in the wrong
    shape fails the run with InvalidResultError."""
    probe = ModelProbe()
    subagents = [
        td.Subagent("agent", make("structured", probe)),
        td.Subagent("liar", make("bad", probe)),
    ]
    async with td.open_runtime(subagents) as rt, rt.open_parent("lead") as parent:
        result = await parent.delegate("agent", "shape", final_schema=ANSWER_SCHEMA)
        assert result.final_result == {"answer": "shape"}
        typed = await parent.delegate("agent", "typed", final_schema=Answer)
        assert typed.final_result == Answer("typed")
        with pytest.raises(td.InvalidResultError, match="answer") as caught:
            await parent.delegate("liar", "shape", final_schema=ANSWER_SCHEMA)
        assert caught.value.run_id is not None
        await parent.delegate(
            "agent", "again", final_schema=ANSWER_SCHEMA, replaces=caught.value.run_id
        )


async def check_child_deadline(make: ChildFactory, clock: trio.testing.MockClock) -> None:
    """When the run's deadline passes, the agent is cancelled (its model call sees
    the cancellation) and the run ends timed_out."""
    probe = ModelProbe()
    sub = td.Subagent("agent", make("hang", probe), timeout_seconds=30)
    async with _lenient_parent(sub) as parent:
        handle = await parent.start("agent", "never done")
        await _model_started(parent, handle.run_id, probe)
        clock.jump(31)
        with pytest.raises(td.RunTimedOutError):
            await parent.wait(handle.run_id)
    assert probe.log == ["model started", "model cancelled"]


async def check_child_cancel(make: ChildFactory) -> None:
    """Cancelling the run cancels the agent; the run ends cancelled."""
    probe = ModelProbe()
    sub = td.Subagent("agent", make("hang", probe))
    async with _lenient_parent(sub) as parent:
        handle = await parent.start("agent", "never done")
        await _model_started(parent, handle.run_id, probe)
        assert parent.cancel(handle.run_id).cancel_requested
        with pytest.raises(td.RunCancelledError):
            await parent.wait(handle.run_id)
    assert probe.log == ["model started", "model cancelled"]


async def check_child_failure(make: ChildFactory) -> None:
    """An exception in the agent fails the run, with it in the cause chain."""
    probe = ModelProbe()
    sub = td.Subagent("agent", make("fail", probe))
    async with _lenient_parent(sub) as parent:
        with pytest.raises(td.RunFailedError) as caught:
            await parent.delegate("agent", "break")
    chain: list[BaseException] = []
    cause: BaseException | None = caught.value
    while cause is not None:
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    assert any(isinstance(exc, ValueError) and "model broke" in str(exc) for exc in chain), chain


def user_texts(texts: Sequence[str], pattern: str | None = None) -> list[str]:
    """The user messages' text, or what *pattern*'s first group finds in each."""
    if pattern is None:
        return list(texts)
    found = []
    for text in texts:
        match = re.search(pattern, text, re.S)
        if match:
            found.append(match.group(1).strip())
    return found
