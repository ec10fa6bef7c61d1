"""LangChain: the delegation tools for an agent, and an agent as a subagent.

Parent side — a Trio-owned parent's delegation tools as LangChain tools::

    import trio_delegate as td
    from langchain.agents import create_agent
    from trio_delegate.adapters import asyncio_loop, run_asyncio
    from trio_delegate.adapters import langchain as td_langchain

    async with asyncio_loop(), td.open_runtime(subagents) as rt, rt.open_parent("agent") as parent:
        agent = create_agent(model, td_langchain.tools(parent))
        state = await run_asyncio(agent.ainvoke, {"messages": [("user", "Research the bug.")]})

The tools are async only (``ainvoke``). A :class:`trio_delegate.DelegationError`
in a tool is a ``ToolException`` the tool handles (``handle_tool_error``), so
the model gets a ``ToolMessage`` with ``status="error"`` whose content is the
error's ``to_payload()`` as JSON. A successful call's content is its result as
JSON; the result itself is the message's ``artifact``.

Child side — a ``create_agent`` graph (or any Runnable over messages) as a
subagent's runner::

    td.Subagent("researcher", td_langchain.runner(research_agent), timeout_seconds=120)

Needs the ``langchain`` extra (``pip install 'trio-delegate[langchain]'``).
"""

from __future__ import annotations

try:  # isort: skip  (trio_asyncio before the framework)
    from . import _bridge  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    # The bridge's own hint cannot know which adapter is being imported.
    raise ImportError(
        "trio_delegate.adapters.langchain needs LangChain and trio-asyncio: "
        "pip install 'trio-delegate[langchain]'"
    ) from exc

from collections.abc import Mapping, Sequence
from typing import Any

try:
    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_core.messages import (
        AIMessage,
        BaseMessage,
        HumanMessage,
        convert_to_messages,
        convert_to_openai_messages,
    )
    from langchain_core.outputs import ChatGeneration, LLMResult
    from langchain_core.runnables import Runnable
    from langchain_core.tools import BaseTool, StructuredTool, ToolException
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "trio_delegate.adapters.langchain needs LangChain: pip install 'trio-delegate[langchain]'"
    ) from exc

from .. import ChildContext, DelegationError, DelegationTools, Output, Parent, Usage
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

__all__ = ["history_messages", "runner", "tools"]


def tools(parent: Parent) -> list[BaseTool]:
    """The parent's delegation tools as LangChain tools.

    Hand them to ``create_agent(model, tools(parent))`` or ``model.bind_tools``.
    They run on the parent through the asyncio bridge; run the agent from
    Trio with :func:`trio_delegate.adapters.run_asyncio`.

    Args:
        parent: an open parent; the host owns it and its runs.

    Returns:
        ``delegate_task``, ``subagent_status``, ``wait_subagent``,
        ``cancel_subagent``, ``continue_subagent`` and ``list_subagent_runs``,
        each with the JSON Schema of contract §10 as its ``args_schema``.

    Raises:
        RuntimeClosedError: *parent* is closed.
    """
    delegation = parent.tools()
    return [
        StructuredTool(
            name=definition.name,
            description=definition.description,
            args_schema=definition.parameters,
            coroutine=_tool_coroutine(delegation, definition.name),
            response_format="content_and_artifact",
            # ToolException -> a ToolMessage with status="error" and the
            # exception's text (the error payload) as its content.
            handle_tool_error=True,
        )
        for definition in delegation.definitions()
    ]


def _tool_coroutine(delegation: DelegationTools, name: str) -> Any:
    async def call(**arguments: Any) -> tuple[str, dict[str, Any]]:
        try:
            result = await call_tool(delegation, name, arguments)
        except DelegationError as exc:
            raise ToolException(error_payload_text(exc)) from exc
        return json_text(result), result

    call.__name__ = name
    return call


def runner(agent: Runnable[Any, Any], *, messages_key: str | None = "messages") -> ChildRunner:
    """A subagent runner that runs a LangChain agent.

    Each run calls ``agent.ainvoke`` on the asyncio bridge with the
    conversation so far (``ctx.history``, :func:`history_messages`) followed
    by ``ctx.task`` as a human message:

    * with *messages_key* (default ``"messages"``, a ``create_agent`` graph),
      the input is ``{messages_key: messages}`` and the output a state whose
      *messages_key* holds the conversation; its ``structured_response`` (an
      agent made with ``response_format=``) is the result, else the last
      message's text;
    * with ``messages_key=None`` (a chat model, or a chain over messages), the
      input is the message list and the output the reply.

    With ``ctx.final_schema``, a text answer that is JSON is parsed; the
    runtime validates the result against the schema. The transcript is the
    whole conversation as OpenAI-style message dicts, which this runner reads
    back on a continuation. Every chat model call in the run is a request,
    and its reply's ``usage_metadata`` what it spent: the run reports the
    sum (also when the agent fails or is cancelled). Cancelling the run (or
    its deadline) cancels the agent; an exception from it fails the run,
    with it as the cause.

    Args:
        agent: a compiled ``create_agent`` graph or another Runnable.
        messages_key: the state key of the conversation, or ``None``.

    Returns:
        ``async def runner(ctx) -> Output`` for ``trio_delegate.Subagent``.
    """

    async def run_agent(ctx: ChildContext) -> Output:
        messages = [*history_messages(ctx.history), HumanMessage(ctx.task)]
        meter = _UsageMeter()
        config: Any = {"callbacks": [meter]}
        try:
            if messages_key is None:
                reply = await run_asyncio(agent.ainvoke, messages, config)
                conversation = [*messages, *([reply] if isinstance(reply, BaseMessage) else [])]
                answer = reply.text if isinstance(reply, BaseMessage) else reply
            else:
                state = await run_asyncio(agent.ainvoke, {messages_key: messages}, config)
                conversation = (
                    list(state.get(messages_key, messages))
                    if isinstance(state, Mapping)
                    else messages
                )
                answer = _answer(state, conversation)
        except BaseException:
            # What the model calls before the failure spent counts all the same.
            if meter.spent is not None:
                ctx.add_usage(meter.spent)
            raise
        transcript = convert_to_openai_messages(conversation)
        return Output(
            structured(answer, ctx.final_schema), transcript=transcript, usage=meter.spent
        )

    return run_agent


class _UsageMeter(BaseCallbackHandler):
    """Adds up what every chat model call of one run spent (``usage_metadata``)."""

    # Called in the event loop as each call ends, never on a worker thread.
    run_inline = True

    def __init__(self) -> None:
        super().__init__()
        self.spent: Usage | None = None

    def on_llm_end(self, response: LLMResult, **kwargs: Any) -> None:
        """One model call ended: one request, and the tokens its reply reports."""
        spent = reported_usage(requests=1)
        for generations in response.generations:
            for generation in generations:
                if isinstance(generation, ChatGeneration):
                    spent += _message_usage(generation.message)
        self.spent = spent if self.spent is None else self.spent + spent


def _message_usage(message: BaseMessage) -> Usage:
    """A reply's ``usage_metadata`` as a :class:`trio_delegate.Usage` (no requests).

    LangChain counts the cache in ``input_tokens`` and reasoning in
    ``output_tokens``, as ``Usage`` does.
    """
    metadata = getattr(message, "usage_metadata", None)
    if not isinstance(metadata, Mapping):
        return Usage()
    inputs = metadata.get("input_token_details")
    outputs = metadata.get("output_token_details")
    inputs = inputs if isinstance(inputs, Mapping) else {}
    outputs = outputs if isinstance(outputs, Mapping) else {}
    return reported_usage(
        input_tokens=metadata.get("input_tokens"),
        output_tokens=metadata.get("output_tokens"),
        cache_read_input_tokens=inputs.get("cache_read"),
        cache_creation_input_tokens=inputs.get("cache_creation"),
        reasoning_output_tokens=outputs.get("reasoning"),
    )


def _answer(state: Any, conversation: Sequence[BaseMessage]) -> Any:
    if isinstance(state, Mapping) and state.get("structured_response") is not None:
        return state["structured_response"]
    for message in reversed(conversation):
        if isinstance(message, AIMessage):
            return message.text
    return state


def history_messages(history: Sequence[Any]) -> list[BaseMessage]:
    """``ctx.history`` as LangChain messages.

    Entries are OpenAI-style message dicts (what this adapter writes as a
    transcript) or plain ``{"role", "content"}`` entries (what the runtime
    writes for a runner that gave no transcript); content that is not text
    becomes its JSON text.

    Args:
        history: ``ctx.history`` of a run.

    Returns:
        the messages, in order.

    Raises:
        InvalidArgumentsError: an entry is neither (the run fails with it).
    """
    messages: list[BaseMessage] = []
    for index, entry in enumerate(history):
        plain = plain_entry(entry)
        try:
            if plain is not None:
                messages.extend(convert_to_messages([{"role": plain[0], "content": plain[1]}]))
            else:
                messages.extend(convert_to_messages([entry]))
        except (ValueError, TypeError, KeyError, NotImplementedError):
            raise history_error("LangChain", index, entry, "OpenAI-style message dicts") from None
    return messages
