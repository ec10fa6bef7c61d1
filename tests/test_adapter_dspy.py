"""trio_delegate.adapters.dspy: blocking delegation tools in a DSPy ReAct module, and a
module as a subagent, driven offline by a scripted DSPy engine (DSPy's ``DummyLM``
is built the same way; overriding an LM's ``forward`` is deprecated in DSPy 3.4)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Any

import dspy  # type: ignore[import-untyped]
import pytest
import trio
import trio.testing
from dspy.lm15 import (  # type: ignore[import-untyped]
    Message,
    Request,
    Response,
    TextPart,
    Usage,
)

import trio_delegate as td
from trio_delegate.adapters import dspy as td_dspy
from trio_delegate.adapters import run_asyncio
from trio_delegate.testing import ToolCall

from . import adapters_support as support
from .adapters_support import ModelProbe, Seen

Messages = list[dict[str, Any]]


class ScriptedEngine:
    """A DSPy engine (``complete(Request) -> Response``) answering from a script: the
    script gets the prompt's messages and returns the output fields."""

    def __init__(
        self, script: Callable[[Messages], dict[str, Any]], usage: Usage | None = None
    ) -> None:
        self.script = script
        self.usage = usage or Usage(input_tokens=0, output_tokens=0, total_tokens=0)

    def complete(self, request: Request) -> Response:
        messages: Messages = []
        if request.system is not None:
            system = request.system
            text = system if isinstance(system, str) else "".join(p.text for p in system)
            messages.append({"role": "system", "content": text})
        messages.extend({"role": m.role, "content": m.text or ""} for m in request.messages)
        fields = self.script(messages)
        # The reply in the chat adapter's format, as a model following it writes it.
        text = "".join(
            f"[[ ## {name} ## ]]\n{value if isinstance(value, str) else json.dumps(value)}\n\n"
            for name, value in fields.items()
        )
        return Response(
            id=None,
            model="scripted",
            message=Message.assistant([TextPart(text + "[[ ## completed ## ]]")]),
            finish_reason="stop",
            usage=self.usage,
        )

    def stream(self, request: Request) -> Iterator[Any]:
        raise NotImplementedError("the tests never stream")

    def close(self) -> None:
        pass


class AsyncScriptedEngine:
    """The async engine: *before* runs first (a model call that may hang)."""

    def __init__(
        self, engine: ScriptedEngine, before: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        self.engine = engine
        self.before = before

    async def complete(self, request: Request) -> Response:
        if self.before is not None:
            await self.before()
        return self.engine.complete(request)

    def stream(self, request: Request) -> AsyncIterator[Any]:
        raise NotImplementedError("the tests never stream")

    async def aclose(self) -> None:
        pass


def scripted_lm(
    script: Callable[[Messages], dict[str, Any]],
    before: Callable[[], Awaitable[None]] | None = None,
    usage: Usage | None = None,
) -> Any:
    engine = ScriptedEngine(script, usage)
    return dspy.LM(
        "scripted/model",
        engine=engine,
        async_engine=AsyncScriptedEngine(engine, before),
        cache=False,
        num_retries=0,
    )


# -- the parent side --------------------------------------------------------------

_OBSERVATION = re.compile(
    r"\[\[ ## observation_(\d+) ## \]\]\n(.*?)(?=\n\n\[\[ ## |\n\nRespond with|\Z)", re.S
)
_PAYLOAD = re.compile(r"DelegationToolError: (\{.*\})$", re.M)


def _observations(steps: Sequence[ToolCall], messages: Messages) -> list[Seen]:
    """What ReAct showed the model of its tool calls so far."""
    prompt = messages[-1]["content"] if messages else ""
    seen = []
    for index, text in _OBSERVATION.findall(prompt):
        name = steps[int(index)].name
        if text.startswith("Execution error in"):
            # ReAct reports a raising tool as text; ours carries the payload.
            found = _PAYLOAD.search(text)
            payload = support.failure_payload(found.group(1) if found else text, "execution")
            seen.append(Seen(name, payload, True))
        else:
            seen.append(Seen(name, support.parse_payload(text), False))
    return seen


def _react(parent: td.Parent, steps: Sequence[ToolCall], seen: list[Seen]) -> Any:
    def script(messages: Messages) -> dict[str, Any]:
        if "`[[ ## next_thought ## ]]`" not in messages[-1]["content"]:
            return {"reasoning": "all delegated", "answer": "done"}  # the final extraction
        seen[:] = _observations(steps, messages)
        call = support.next_call(steps, seen)
        if call is None:
            return {"next_thought": "finished", "next_tool_name": "finish", "next_tool_args": {}}
        name, arguments = call
        return {"next_thought": "delegate", "next_tool_name": name, "next_tool_args": arguments}

    react = dspy.ReAct("question -> answer", tools=td_dspy.tools(parent), max_iters=len(steps) + 2)
    react.set_lm(scripted_lm(script))
    return react


async def drive(parent: td.Parent, steps: Sequence[ToolCall]) -> Sequence[Seen]:
    """A ReAct module with the parent's tools, run in a worker thread; its LM makes *steps*."""
    seen: list[Seen] = []
    prediction = await td_dspy.run_module(_react(parent, steps, seen), question="Delegate.")
    assert prediction.answer == "done"
    return seen


async def drive_async(parent: td.Parent, steps: Sequence[ToolCall]) -> Sequence[Seen]:
    """The same on DSPy's async path (``acall``), on the asyncio bridge."""
    seen: list[Seen] = []
    prediction = await run_asyncio(_react(parent, steps, seen).acall, question="Delegate.")
    assert prediction.answer == "done"
    return seen


async def test_cap_dspy_foreground(autojump_clock: trio.testing.MockClock) -> None:
    await support.check_foreground(drive)


async def test_cap_dspy_foreground_on_the_async_path(
    autojump_clock: trio.testing.MockClock,
) -> None:
    await support.check_foreground(drive_async)


async def test_cap_dspy_continuation(autojump_clock: trio.testing.MockClock) -> None:
    await support.check_continuation(drive)


async def test_cap_dspy_structured_results(autojump_clock: trio.testing.MockClock) -> None:
    await support.check_structured(drive)


async def test_cap_dspy_cancellation_reaches_child() -> None:
    await support.check_cancellation_reaches_child(drive)


async def test_hostile_arguments_are_failed_tool_calls() -> None:
    # DSPy refuses to put a lone surrogate in a prompt at all.
    await support.check_hostile_arguments(drive, surrogates=False)


async def test_delegation_is_blocking_only() -> None:
    """No background lifecycle: two tools, and background is refused by name."""
    subagents = support.Subagents()
    async with (
        td.open_runtime(subagents.definitions()) as rt,
        rt.open_parent("lead") as parent,
    ):
        tools = td_dspy.tools(parent)
        assert [tool.name for tool in tools] == ["delegate_task", "continue_subagent"]
        assert "background" not in tools[0].args
        assert "worker: Counts a task's characters." in tools[0].desc
        seen = await drive(
            parent,
            [ToolCall("delegate_task", {"subagent": "worker", "task": "x", "background": True})],
        )
    (refused,) = seen
    assert refused.payload["error"]["type"] == "invalid_arguments"
    assert "no background" in refused.payload["error"]["message"]
    assert subagents.log == []


async def test_the_tools_work_from_threads_dspy_starts_itself(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``module.batch`` runs the module in DSPy's own threads, which Trio did not
    start: the tools reach the Trio run by its token."""
    subagents = support.Subagents()

    def script(messages: Messages) -> dict[str, Any]:
        prompt = messages[-1]["content"]
        if "`[[ ## next_thought ## ]]`" not in prompt:
            return {"reasoning": "delegated", "answer": "done"}
        if "[[ ## observation_0 ## ]]" in prompt:
            return {"next_thought": "done", "next_tool_name": "finish", "next_tool_args": {}}
        task = support.user_texts([prompt], r"\[\[ ## question ## \]\]\n(.*?)\n")[0]
        arguments = {"subagent": "echo", "task": task}
        return {
            "next_thought": "go",
            "next_tool_name": "delegate_task",
            "next_tool_args": arguments,
        }

    async with (
        td.open_runtime(subagents.definitions()) as rt,
        rt.open_parent("lead") as parent,
    ):
        react = dspy.ReAct("question -> answer", tools=td_dspy.tools(parent))
        react.set_lm(scripted_lm(script))
        examples = [dspy.Example(question=q).with_inputs("question") for q in ("one", "two")]
        predictions = await trio.to_thread.run_sync(
            lambda: react.batch(examples, num_threads=2, disable_progress_bar=True)
        )
        assert [p.answer for p in predictions] == ["done", "done"]
        observations = sorted(
            p.trajectory["observation_0"]["final_result"]["task"] for p in predictions
        )
        assert observations == ["one", "two"]
        parent.check_resolved()


# -- the child side -----------------------------------------------------------------


class QA(dspy.Signature):  # type: ignore[misc]
    """Answer the question."""

    question: str = dspy.InputField()
    history: dspy.History = dspy.InputField()
    answer: str = dspy.OutputField()


_QUESTION = r"\[\[ ## question ## \]\]\n(.*?)(?:\n\n|\Z)"


def child(behaviour: support.Behaviour, probe: ModelProbe) -> support.ChildRunner:
    """A runner around ``dspy.Predict(QA)`` whose LM behaves as asked."""

    def script(messages: Messages) -> dict[str, Any]:
        texts = [m["content"] for m in messages if m["role"] == "user"]
        reply = support.model_reply(behaviour, support.user_texts(texts, _QUESTION))
        # The signature's one output field; a structured answer is JSON text in it.
        return {"answer": reply if isinstance(reply, str) else json.dumps(reply)}

    async def model_call() -> None:
        await support.model_call(behaviour, probe)

    module = dspy.Predict(QA)
    module.set_lm(scripted_lm(script, model_call))
    return td_dspy.runner(module)


async def test_cap_dspy_child_runner_history() -> None:
    await support.check_child_history(child)


async def test_cap_dspy_child_runner_structured() -> None:
    await support.check_child_structured(child)


async def test_cap_dspy_child_runner_deadline(mock_clock: trio.testing.MockClock) -> None:
    await support.check_child_deadline(child, mock_clock)


async def test_cap_dspy_child_runner_cancel() -> None:
    await support.check_child_cancel(child)


async def test_cap_dspy_child_runner_failure() -> None:
    await support.check_child_failure(child)


def test_the_runner_needs_to_know_where_the_task_goes() -> None:
    with pytest.raises(td.InvalidArgumentsError, match="task_field"):
        td_dspy.runner(dspy.Predict("question, context -> answer"))
    with pytest.raises(td.InvalidArgumentsError, match="'query' is not an input field"):
        td_dspy.runner(dspy.Predict("question -> answer"), task_field="query")
    td_dspy.runner(dspy.Predict("question, context -> answer"), task_field="question")


async def test_a_continuation_needs_a_history_field() -> None:
    module = dspy.Predict("question -> answer")
    module.set_lm(scripted_lm(lambda messages: {"answer": "yes"}))
    sub = td.Subagent("plain", td_dspy.runner(module))
    async with (
        td.open_runtime([sub], config=td.Config(fail_closed=False)) as rt,
        rt.open_parent("lead") as parent,
    ):
        first = await parent.delegate("plain", "first")
        assert first.final_result == "yes"
        with pytest.raises(td.RunFailedError, match=r"no dspy\.History input field"):
            await parent.continue_run(first.run_id, "second")


# -- what the module spent ------------------------------------------------------------

#: What each LM call says it spent (the scripted provider's counts are taken
#: verbatim: the cache in input_tokens and reasoning in output_tokens).
SPENT = Usage(
    input_tokens=100,
    output_tokens=20,
    total_tokens=120,
    cache_read_tokens=30,
    cache_write_tokens=7,
    reasoning_tokens=4,
)


class Twice(dspy.Module):  # type: ignore[misc]
    """Two LM calls a run: the second answers the first's answer."""

    def __init__(self, script: Callable[[Messages], dict[str, Any]]) -> None:
        super().__init__()
        self.first = dspy.Predict("question -> answer")
        self.second = dspy.Predict("question -> answer")
        self.set_lm(scripted_lm(script, usage=SPENT))

    async def aforward(self, question: str) -> Any:
        first = await self.first.acall(question=question)
        return await self.second.acall(question=first.answer)


async def test_every_lm_calls_usage_counts_for_the_run() -> None:
    sub = td.Subagent(
        "qa", td_dspy.runner(Twice(lambda messages: {"answer": "yes"}), task_field="question")
    )
    async with td.open_runtime([sub]) as rt, rt.open_parent() as parent:
        done = await parent.delegate("qa", "Is it?")
        assert done.final_result == "yes"
        assert parent.usage(done.run_id) == td.Usage(
            requests=2,
            input_tokens=200,
            output_tokens=40,
            cache_read_input_tokens=60,
            cache_creation_input_tokens=14,
            reasoning_output_tokens=8,
        )


async def test_what_the_lm_calls_before_a_failure_spent_counts() -> None:
    calls = 0

    def script(messages: Messages) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise ValueError("model broke")
        return {"answer": "yes"}

    sub = td.Subagent("qa", td_dspy.runner(Twice(script), task_field="question"))
    async with (
        td.open_runtime([sub], config=td.Config(fail_closed=False)) as rt,
        rt.open_parent() as parent,
    ):
        handle = await parent.start("qa", "Is it?")
        with pytest.raises(td.RunFailedError):
            await parent.wait(handle.run_id)
        # The first call; the one that broke reported nothing.
        assert parent.usage(handle.run_id) == td.Usage(
            requests=1,
            input_tokens=100,
            output_tokens=20,
            cache_read_input_tokens=30,
            cache_creation_input_tokens=7,
            reasoning_output_tokens=4,
        )
