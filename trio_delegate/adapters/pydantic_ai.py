"""Pydantic AI: the delegation tools for an agent, and an agent as a subagent.

Parent side — a Trio-owned parent's delegation tools as a toolset::

    import trio_delegate as td
    from pydantic_ai import Agent
    from trio_delegate.adapters import asyncio_loop, run_asyncio
    from trio_delegate.adapters import pydantic_ai as td_pydantic_ai

    async with asyncio_loop(), td.open_runtime(subagents) as rt, rt.open_parent("agent") as parent:
        agent = Agent(model, toolsets=[td_pydantic_ai.toolset(parent)])
        result = await run_asyncio(agent.run, "Research the login bug.")

A :class:`trio_delegate.DelegationError` in a tool is a failed tool call
(``ToolFailed``: a tool return with ``outcome="failed"`` the model sees as an
error) whose text is the error's ``to_payload()`` as JSON.

Child side — an agent as a subagent's runner::

    td.Subagent("researcher", td_pydantic_ai.runner(research_agent), timeout_seconds=120)

``ctx.task`` is the prompt, ``ctx.history`` the message history and
``ctx.final_schema`` the output type; the run's transcript is the agent's
whole message history (JSON), so a continuation picks up where it left off.

Needs the ``pydantic-ai`` extra (``pip install 'trio-delegate[pydantic-ai]'``).
"""

from __future__ import annotations

try:  # isort: skip  (trio_asyncio before the framework)
    from . import _bridge  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    # The bridge's own hint cannot know which adapter is being imported.
    raise ImportError(
        "trio_delegate.adapters.pydantic_ai needs Pydantic AI and trio-asyncio: "
        "pip install 'trio-delegate[pydantic-ai]'"
    ) from exc

from collections.abc import Sequence
from typing import Any

try:
    from pydantic_ai import (
        ModelMessagesTypeAdapter,
        StructuredDict,
        Tool,
        ToolFailed,
    )
    from pydantic_ai.agent import AbstractAgent
    from pydantic_ai.capabilities import ProcessHistory
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelResponse,
        SystemPromptPart,
        TextPart,
        UserPromptPart,
    )
    from pydantic_ai.toolsets import FunctionToolset
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "trio_delegate.adapters.pydantic_ai needs Pydantic AI: "
        "pip install 'trio-delegate[pydantic-ai]'"
    ) from exc

from pydantic import ValidationError

from .. import ChildContext, DelegationError, DelegationTools, Output, Parent
from ._bridge import run_asyncio
from ._common import (
    ChildRunner,
    call_tool,
    error_payload_text,
    history_error,
    plain_entry,
    settled_notice,
    structured,
)

__all__ = ["history_messages", "runner", "settled_notices", "toolset"]


def toolset(parent: Parent, *, id: str | None = None) -> FunctionToolset[Any]:
    """The parent's delegation tools as a Pydantic AI toolset.

    Pass it as ``Agent(..., toolsets=[toolset(parent)])`` (or to one run's
    ``toolsets=``). Each tool takes the JSON Schema of contract §10 and runs
    on the parent through the asyncio bridge; run the agent from Trio with
    :func:`trio_delegate.adapters.run_asyncio`.

    Args:
        parent: an open parent; the host owns it and its runs.
        id: the toolset's id (durable execution needs one).

    Returns:
        a toolset holding ``delegate_task``, ``subagent_status``,
        ``wait_subagent``, ``cancel_subagent``, ``continue_subagent`` and
        ``list_subagent_runs``.

    Raises:
        RuntimeClosedError: *parent* is closed.
    """
    tools = parent.tools()
    return FunctionToolset(
        [
            Tool.from_schema(
                _tool_function(tools, definition.name),
                name=definition.name,
                description=definition.description,
                json_schema=definition.parameters,
            )
            for definition in tools.definitions()
        ],
        id=id,
    )


def settled_notices(parent: Parent) -> ProcessHistory[Any]:
    """A capability that tells the agent, at its next model request, which runs ended.

    Give it to the agent beside the toolset (``Agent(...,
    capabilities=[settled_notices(parent)])``): before each model request,
    every background run of *parent* that ended since the last notice and
    that no ``wait`` has told about (``parent.unobserved()``) is named in one
    user message ("Background run … ended completed: call wait_subagent …").
    The agent keeps working meanwhile instead of polling; it still reads
    each run with ``wait_subagent``, which is what resolves it (contract §17).

    Args:
        parent: the parent whose toolset the agent uses.
    """
    announced: set[str] = set()

    async def add_notices(messages: list[ModelMessage]) -> list[ModelMessage]:
        # Async on purpose: a plain function would run on a worker thread,
        # and the parent is read on the Trio thread only.
        try:
            ended = parent.unobserved()
        except DelegationError:  # the parent closed: nothing more to tell
            return messages
        fresh = [handle for handle in ended if handle.run_id not in announced]
        if not fresh:
            return messages
        announced.update(handle.run_id for handle in fresh)
        notice = "\n".join(settled_notice(handle) for handle in fresh)
        return [*messages, ModelRequest(parts=[UserPromptPart(content=notice)])]

    return ProcessHistory(add_notices)


def _tool_function(tools: DelegationTools, name: str) -> Any:
    async def call(**arguments: Any) -> dict[str, Any]:
        try:
            return await call_tool(tools, name, arguments)
        except DelegationError as exc:
            # ToolFailed is Pydantic AI's failed tool call: the model sees an
            # error result and no retry budget is spent.
            raise ToolFailed(error_payload_text(exc)) from exc

    call.__name__ = name
    return call


def runner(agent: AbstractAgent[Any, Any], *, deps: Any = None) -> ChildRunner:
    """A subagent runner that runs a Pydantic AI agent.

    Each run calls ``agent.run(ctx.task, message_history=..., output_type=...)``
    on the asyncio bridge:

    * ``ctx.history`` becomes the message history (:func:`history_messages`);
    * ``ctx.final_schema`` (a JSON Schema object) becomes the run's output
      type (``StructuredDict``); without one, the agent's own output type
      holds, and its output is made JSON-ready (Pydantic models and
      dataclasses become objects);
    * the result is ``Output(output, transcript=<all messages as JSON>)``.

    When the run is cancelled or its deadline passes, the agent's asyncio
    task is cancelled and the run ends ``cancelled`` / ``timed_out``. An
    exception from the agent fails the run, with it as the cause.

    Args:
        agent: the agent to run.
        deps: the agent's dependencies, passed to every run.

    Returns:
        ``async def runner(ctx) -> Output`` for ``trio_delegate.Subagent``.
    """

    async def run_agent(ctx: ChildContext) -> Output:
        history = history_messages(ctx.history)
        if ctx.final_schema is not None and ctx.final_schema.get("type") == "object":
            result = await run_asyncio(
                agent.run,
                ctx.task,
                message_history=history,
                output_type=StructuredDict(dict(ctx.final_schema)),
                deps=deps,
            )
        else:
            result = await run_asyncio(agent.run, ctx.task, message_history=history, deps=deps)
        transcript = ModelMessagesTypeAdapter.dump_python(result.all_messages(), mode="json")
        return Output(structured(result.output, ctx.final_schema), transcript=transcript)

    return run_agent


def history_messages(history: Sequence[Any]) -> list[ModelMessage]:
    """``ctx.history`` as Pydantic AI messages.

    Entries are Pydantic AI messages in their JSON form (what this adapter
    writes as a transcript) or plain ``{"role", "content"}`` entries (what
    the runtime writes for a runner that gave no transcript, and what other
    frameworks' histories reduce to).

    Args:
        history: ``ctx.history`` of a run.

    Returns:
        the messages, in order, for ``agent.run(message_history=...)``.

    Raises:
        InvalidArgumentsError: an entry is neither (the run fails with it).
    """
    messages: list[ModelMessage] = []
    for index, entry in enumerate(history):
        plain = plain_entry(entry)
        if plain is not None:
            role, text = plain
            if role == "assistant":
                messages.append(ModelResponse(parts=[TextPart(text)]))
            elif role == "system":
                messages.append(ModelRequest(parts=[SystemPromptPart(text)]))
            else:
                messages.append(ModelRequest(parts=[UserPromptPart(text)]))
            continue
        try:
            messages.extend(ModelMessagesTypeAdapter.validate_python([entry]))
        except ValidationError:
            raise history_error(
                "Pydantic AI", index, entry, "Pydantic AI messages (ModelMessagesTypeAdapter)"
            ) from None
    return messages
