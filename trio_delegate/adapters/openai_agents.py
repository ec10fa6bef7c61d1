"""OpenAI Agents: the delegation tools for an agent, and an agent as a subagent.

Parent side — a Trio-owned parent's delegation tools as function tools::

    import trio_delegate as td
    from agents import Agent, Runner
    from trio_delegate.adapters import asyncio_loop, run_asyncio
    from trio_delegate.adapters import openai_agents as td_openai_agents

    async with asyncio_loop(), td.open_runtime(subagents) as rt, rt.open_parent("agent") as parent:
        agent = Agent(name="lead", tools=td_openai_agents.tools(parent))
        result = await run_asyncio(Runner.run, agent, "Research the login bug.")

The tools use strict JSON schemas (contract §10's OpenAI strict form: every
parameter is required, optional ones take ``null``, ``final_schema`` travels
as JSON text). A :class:`trio_delegate.DelegationError` in a tool goes through
a failure error function, as the SDK's own function tools do: the model gets
its text as the tool output — by default, the error's ``to_payload()`` as JSON
(:func:`delegation_error_text`). Any other exception fails the agent run.

Child side — an agent as a subagent's runner::

    td.Subagent("researcher", td_openai_agents.runner(research_agent), timeout_seconds=120)

Needs the ``openai-agents`` extra (``pip install 'trio-delegate[openai-agents]'``).
"""

from __future__ import annotations

try:  # isort: skip  (trio_asyncio before the framework)
    from . import _bridge  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    # The bridge's own hint cannot know which adapter is being imported.
    raise ImportError(
        "trio_delegate.adapters.openai_agents needs the OpenAI Agents SDK and trio-asyncio: "
        "pip install 'trio-delegate[openai-agents]'"
    ) from exc

import inspect
import json
from collections.abc import Mapping, Sequence
from typing import Any, final

try:
    from agents import (
        Agent,
        AgentOutputSchemaBase,
        FunctionTool,
        ModelBehaviorError,
        RunConfig,
        RunContextWrapper,
        Runner,
        Tool,
        TResponseInputItem,
    )
    from agents.exceptions import AgentsException
    from agents.tool import ToolErrorFunction
    from agents.tool_context import ToolContext
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "trio_delegate.adapters.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'trio-delegate[openai-agents]'"
    ) from exc

from .. import ChildContext, DelegationError, DelegationTools, Output, Parent, Usage
from .._json import parse
from .._usage import reported_usage
from ._bridge import run_asyncio
from ._common import (
    ChildRunner,
    call_tool,
    error_payload_text,
    history_error,
    json_text,
    plain_entry,
    structured,
)

__all__ = ["delegation_error_text", "history_items", "runner", "tools"]


def delegation_error_text(ctx: RunContextWrapper[Any], error: Exception) -> str:
    """The default failure error function: the error's ``to_payload()`` as JSON.

    Args:
        ctx: the tool call's context (unused).
        error: the :class:`trio_delegate.DelegationError` the tool raised.

    Returns:
        the text the model gets as the tool's output.
    """
    if isinstance(error, DelegationError):
        return error_payload_text(error)
    return json.dumps({"error": {"type": type(error).__name__, "message": str(error)}})


def tools(
    parent: Parent, *, failure_error_function: ToolErrorFunction = delegation_error_text
) -> list[Tool]:
    """The parent's delegation tools as OpenAI Agents function tools.

    Hand them to ``Agent(tools=tools(parent))``. They run on the parent
    through the asyncio bridge; run the agent from Trio with
    :func:`trio_delegate.adapters.run_asyncio` (``run_asyncio(Runner.run,
    agent, input)``).

    Args:
        parent: an open parent; the host owns it and its runs.
        failure_error_function: turns a ``DelegationError`` into the text the
            model gets (the SDK's ``ToolErrorFunction``: sync or async).

    Returns:
        ``delegate_task``, ``subagent_status``, ``wait_subagent``,
        ``cancel_subagent``, ``continue_subagent`` and ``list_subagent_runs`` as
        ``FunctionTool``s (typed as the SDK's ``Tool``, what ``Agent(tools=...)``
        takes); each returns its result as JSON text.

    Raises:
        RuntimeClosedError: *parent* is closed.
    """
    delegation = parent.tools()
    return [
        FunctionTool(
            name=spec["name"],
            description=spec["description"],
            params_json_schema=spec["parameters"],
            on_invoke_tool=_invoker(delegation, spec["name"], failure_error_function),
            strict_json_schema=True,
        )
        for spec in delegation.openai_responses_tools(strict=True)
    ]


def _invoker(delegation: DelegationTools, name: str, on_error: ToolErrorFunction) -> Any:
    async def invoke(ctx: ToolContext[Any], arguments: str) -> str:
        try:
            result = await call_tool(delegation, name, arguments)
        except DelegationError as exc:
            text = on_error(ctx, exc)
            return await text if inspect.isawaitable(text) else text
        return json_text(result)

    return invoke


@final
class _SchemaOutput(AgentOutputSchemaBase):
    """A run's ``final_schema`` as the agent's output type (JSON parsed, not checked:
    the runtime checks it, so a mismatch is the run's ``InvalidResultError``)."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self._schema = dict(schema)

    def is_plain_text(self) -> bool:
        return False

    def name(self) -> str:
        title = self._schema.get("title")
        return title if isinstance(title, str) and title else "final_result"

    def json_schema(self) -> dict[str, Any]:
        return self._schema

    def is_strict_json_schema(self) -> bool:
        # A model-supplied schema rarely meets strict mode's rules.
        return False

    def validate_json(self, json_str: str) -> Any:
        try:
            return parse(json_str)
        except ValueError as exc:
            raise ModelBehaviorError(f"the final output is not JSON: {exc}") from exc


def runner(
    agent: Agent[Any],
    *,
    context: Any = None,
    max_turns: int = 10,
    run_config: RunConfig | None = None,
) -> ChildRunner:
    """A subagent runner that runs an OpenAI Agents agent.

    Each run calls ``Runner.run(agent, input)`` on the asyncio bridge, where
    the input is the conversation so far (``ctx.history``,
    :func:`history_items`) followed by ``ctx.task`` as a user message. With
    ``ctx.final_schema`` (a JSON Schema object) the agent's output type is
    that schema for the run. The result is the final output, JSON-ready, and
    the transcript ``result.to_input_list()``, which a continuation feeds
    back. What the SDK counted (``result.context_wrapper.usage``) is the
    run's usage; a run that fails with an SDK error (``MaxTurnsExceeded``...)
    reports what the error's ``run_data`` counted. Cancelling the run (or its
    deadline) cancels the agent run; an exception from it
    (``MaxTurnsExceeded``, a model error...) fails the run, with it as the
    cause.

    Args:
        agent: the agent to run.
        context: the run context object passed to every run.
        max_turns: the SDK's turn limit per run.
        run_config: the SDK's run configuration (model provider, tracing...).

    Returns:
        ``async def runner(ctx) -> Output`` for ``trio_delegate.Subagent``.
    """

    async def run_agent(ctx: ChildContext) -> Output:
        items = history_items(ctx.history)
        items.append({"role": "user", "content": ctx.task})
        chosen = agent
        if ctx.final_schema is not None and ctx.final_schema.get("type") == "object":
            chosen = agent.clone(output_type=_SchemaOutput(ctx.final_schema))
        try:
            result = await run_asyncio(
                Runner.run,
                chosen,
                items,
                context=context,
                max_turns=max_turns,
                run_config=run_config,
            )
        except AgentsException as exc:
            # What the run spent before the SDK gave up counts all the same.
            data = exc.run_data
            if data is not None:
                ctx.add_usage(_usage(data.context_wrapper.usage))
            raise
        transcript = result.to_input_list()
        return Output(
            structured(result.final_output, ctx.final_schema),
            transcript=transcript,
            usage=_usage(result.context_wrapper.usage),
        )

    return run_agent


def _usage(spent: Any) -> Usage:
    """The SDK's ``Usage`` as a :class:`trio_delegate.Usage` (it gives no cost).

    The SDK counts cache reads and writes in ``input_tokens`` and reasoning
    in ``output_tokens``, as ``Usage`` does.
    """
    inputs = getattr(spent, "input_tokens_details", None)
    outputs = getattr(spent, "output_tokens_details", None)
    return reported_usage(
        requests=getattr(spent, "requests", 0),
        input_tokens=getattr(spent, "input_tokens", 0),
        output_tokens=getattr(spent, "output_tokens", 0),
        cache_read_input_tokens=getattr(inputs, "cached_tokens", 0),
        cache_creation_input_tokens=getattr(inputs, "cache_write_tokens", 0),
        reasoning_output_tokens=getattr(outputs, "reasoning_tokens", 0),
    )


def history_items(history: Sequence[Any]) -> list[TResponseInputItem]:
    """``ctx.history`` as Responses input items.

    Entries are input items as dicts (what this adapter writes as a
    transcript: ``result.to_input_list()``) or plain ``{"role", "content"}``
    entries (what the runtime writes for a runner that gave no transcript);
    content that is not text becomes its JSON text.

    Args:
        history: ``ctx.history`` of a run.

    Returns:
        the input items, in order, for ``Runner.run``.

    Raises:
        InvalidArgumentsError: an entry is not a mapping with a ``type`` or a
            ``role`` (the run fails with it).
    """
    items: list[TResponseInputItem] = []
    for index, entry in enumerate(history):
        plain = plain_entry(entry)
        if plain is not None:
            items.append({"role": plain[0], "content": plain[1]})
        elif isinstance(entry, Mapping) and ("type" in entry or "role" in entry):
            items.append(dict(entry))  # type: ignore[arg-type]
        else:
            raise history_error("OpenAI Agents", index, entry, "Responses input items")
    return items
