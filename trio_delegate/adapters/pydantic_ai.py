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
What the agent spent (its ``RunUsage``) counts for the run, and what its
budgets leave (``ctx.remaining()``) becomes the agent's ``UsageLimits``.

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

import decimal
from collections.abc import Sequence
from typing import Any

try:
    from pydantic_ai import (
        ModelMessagesTypeAdapter,
        StructuredDict,
        Tool,
        ToolFailed,
    )
    from pydantic_ai.agent import AbstractAgent, AgentRunResult
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
    from pydantic_ai.usage import RunUsage, UsageLimits
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "trio_delegate.adapters.pydantic_ai needs Pydantic AI: "
        "pip install 'trio-delegate[pydantic-ai]'"
    ) from exc

from pydantic import ValidationError

from .. import Budget, ChildContext, DelegationError, DelegationTools, Output, Parent, Usage
from .._usage import reported_usage
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
    * the result is ``Output(output, transcript=<all messages as JSON>,
      usage=<the run's RunUsage>)``; what a run that fails or is cancelled
      spent is reported all the same (``ctx.add_usage``);
    * when a budget holds the run, what is left of it (``ctx.remaining()``)
      is the run's ``UsageLimits`` (:func:`_usage_limits`), so Pydantic AI
      stops the agent before its next request would pass it.

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
        options: dict[str, Any] = {"message_history": history_messages(ctx.history), "deps": deps}
        if ctx.final_schema is not None and ctx.final_schema.get("type") == "object":
            options["output_type"] = StructuredDict(dict(ctx.final_schema))
        limits = _usage_limits(ctx.remaining())
        if limits is not None:
            options["usage_limits"] = limits
        # Pydantic AI adds to this as it goes: what was spent is known
        # however the run ends (a UsageLimitExceeded, a cancel, an error).
        spent = options["usage"] = RunUsage()
        try:
            result: AgentRunResult[Any] = await run_asyncio(_run, agent, ctx.task, options)
        except BaseException:
            if spent.requests or spent.total_tokens:
                ctx.add_usage(_run_usage(spent))
            raise
        transcript = ModelMessagesTypeAdapter.dump_python(result.all_messages(), mode="json")
        return Output(
            structured(result.output, ctx.final_schema),
            transcript=transcript,
            usage=_run_usage(spent),
        )

    return run_agent


async def _run(
    agent: AbstractAgent[Any, Any], task: str, options: dict[str, Any]
) -> AgentRunResult[Any]:
    return await agent.run(task, **options)


def _run_usage(spent: RunUsage) -> Usage:
    """Pydantic AI's ``RunUsage`` as a :class:`trio_delegate.Usage`.

    Pydantic AI counts cache reads and writes in ``input_tokens`` and
    reasoning in ``output_tokens``, as ``Usage`` does; a cost it knows
    (``cost``, when the model priced it) is carried over.
    """
    details = spent.details or {}
    reasoning = getattr(spent, "output_reasoning_tokens", 0) or details.get("reasoning_tokens", 0)
    cost = getattr(spent, "cost", None)
    return reported_usage(
        requests=spent.requests,
        input_tokens=spent.input_tokens,
        output_tokens=spent.output_tokens,
        cache_read_input_tokens=spent.cache_read_tokens,
        cache_creation_input_tokens=spent.cache_write_tokens,
        reasoning_output_tokens=reasoning,
        cost_usd=float(cost) if isinstance(cost, decimal.Decimal) else cost,
    )


def _usage_limits(left: Budget | None) -> UsageLimits | None:
    """What a run's budgets leave (``ctx.remaining()``) as Pydantic AI ``UsageLimits``.

    Args:
        left: ``ctx.remaining()``.

    Returns:
        ``None`` when no budget holds the run; otherwise limits with each
        one the budgets set (Pydantic AI's own request limit, 50, holds
        when they set none).
    """
    if left is None:
        return None
    limits: dict[str, Any] = {
        "input_tokens_limit": left.max_input_tokens,
        "output_tokens_limit": left.max_output_tokens,
        "total_tokens_limit": left.max_total_tokens,
    }
    if left.max_requests is not None:
        limits["request_limit"] = left.max_requests
    if left.max_cost_usd is not None:
        limits["cost_limit"] = decimal.Decimal(repr(left.max_cost_usd))
    return UsageLimits(**limits)


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
