"""The Claude Agent SDK both ways: the delegation tools for its agent, and its agent as a subagent.

**Parent side.** The SDK serves an ``mcp.server.Server`` instance to Claude Code over an
in-memory transport, and it is anyio-based, so it runs under Trio: a parent
opened by the host delegates for the agent, and the host's ``async with``
block stays where the fail-closed completion check happens::

    import trio_delegate as td
    from claude_agent_sdk import ClaudeAgentOptions, query
    from trio_delegate.adapters import claude

    async with td.open_runtime(subagents) as rt, rt.open_parent("agent") as parent:
        options = ClaudeAgentOptions(
            mcp_servers={"delegate": claude.mcp_server(parent)},
            allowed_tools=claude.allowed_tools(parent),
        )
        async for message in query(prompt="...", options=options):
            ...

Claude Code names the tools ``mcp__<server>__<tool>``; the server's key in
``mcp_servers`` must be the *name* given here.

**Child side.** :func:`runner` makes a Claude Agent SDK ``query()`` a
subagent: the task is the prompt, ``final_schema`` becomes the structured
output format, a continuation resumes a fork of the earlier run's session
(its id is kept in the run's transcript), and cancellation or the deadline
closes the query, which ends the Claude Code process::

    td.Subagent("claude", claude.runner(ClaudeAgentOptions(model="sonnet")))

Needs the ``claude`` extra (``pip install 'trio-delegate[claude]'``).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncGenerator
from typing import Any, Final, cast

try:
    from claude_agent_sdk import (
        AssistantMessage,
        ClaudeAgentOptions,
        McpSdkServerConfig,
        ResultMessage,
        TextBlock,
        ToolUseBlock,
        query,
    )
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "trio_delegate.adapters.claude needs the Claude Agent SDK: "
        "pip install 'trio-delegate[claude]'"
    ) from exc

from .. import ChildContext, DelegationError, Output, Parent
from .._runners._agent_events import Steps
from .._runners._agents import (
    claude_result_usage,
    session_and_prompt,
    session_total,
    this_run,
    transcript,
)
from .._usage import Usage
from ..mcp import DEFAULT_INSTRUCTIONS, build_parent_server

__all__ = ["DEFAULT_SERVER_NAME", "ClaudeRunError", "allowed_tools", "mcp_server", "runner"]

#: The server name (and ``mcp_servers`` key) used when none is given.
DEFAULT_SERVER_NAME: Final = "delegate"


def mcp_server(
    parent: Parent,
    *,
    name: str = DEFAULT_SERVER_NAME,
    instructions: str | None = DEFAULT_INSTRUCTIONS,
) -> McpSdkServerConfig:
    """An in-process MCP server config for ``ClaudeAgentOptions(mcp_servers=...)``.

    Every tool call goes to *parent*'s delegation tools (see
    :func:`trio_delegate.mcp.build_parent_server`); errors come back as
    ``is_error`` results the model can act on.

    Args:
        parent: an open parent; the host owns it and its runs.
        name: the server's name; use it as its key in ``mcp_servers``.
        instructions: what the server tells the model; ``None`` for nothing.

    Raises:
        RuntimeClosedError: *parent* is closed.
    """
    server = build_parent_server(parent, name=name, instructions=instructions)
    return McpSdkServerConfig(type="sdk", name=name, instance=server)


def allowed_tools(parent: Parent, *, name: str = DEFAULT_SERVER_NAME) -> list[str]:
    """The tools' names as Claude Code sees them, for ``allowed_tools=``.

    Args:
        parent: the parent given to :func:`mcp_server`.
        name: the server's name given to :func:`mcp_server`.

    Raises:
        RuntimeClosedError: *parent* is closed.
    """
    return [f"mcp__{name}__{tool}" for tool in parent.tools().names]


#: How a run's transcript marks the reply whose session a continuation forks.
_AGENT: Final = "claude"


class ClaudeRunError(DelegationError, RuntimeError):
    """A Claude Agent SDK query ended with an error (its ``ResultMessage`` says which).

    Raised inside the run, so it is the ``__cause__`` of the ``RunFailedError``
    a parent sees.
    """


def runner(options: ClaudeAgentOptions | None = None) -> Any:
    """A subagent runner that runs one Claude Agent SDK ``query()`` per run.

    * The prompt is ``ctx.task``; the answer is the query's ``result`` text,
      or its ``structured_output`` when the run has a ``final_schema``
      (passed as ``output_format``).
    * The run's transcript (``td.Output``) ends with the answer and the
      session id; a continuation resumes a fork of that session
      (``resume=`` and ``fork_session=True``), so the earlier run's session
      never changes. A history without such a session is written out ahead
      of the message.
    * Cancellation and the child deadline close the query, which ends the
      Claude Code process.
    * A query that ends with an error fails the run with
      :class:`ClaudeRunError` (the SDK's own errors propagate as they are).
    * Each tool call and text of the agent's messages is reported as the
      run's progress (``"tool call: Read"``, or the text), as for the
      ``kind = "claude"`` CLI subagent.
    * What the result message says was spent (``model_usage`` summed over
      every model, else ``usage``; ``num_turns`` as requests;
      ``total_cost_usd``) is the run's usage, whether the run then succeeds
      or fails.

    Args:
        options: the options of every query (model, tools, permissions,
            ``cwd``, ``env``, ``cli_path`` ...); ``None`` for the defaults.
            ``resume``, ``fork_session`` and ``output_format`` are set per run.

    Returns:
        an async runner for :class:`trio_delegate.Subagent`.
    """
    base = options if options is not None else ClaudeAgentOptions()

    async def run_claude(ctx: ChildContext) -> Output:
        session, prompt = session_and_prompt(_AGENT, ctx)
        changes: dict[str, Any] = {}
        if session is not None:
            changes |= {"resume": session, "fork_session": True}
        if ctx.final_schema is not None:
            changes["output_format"] = {"type": "json_schema", "schema": ctx.final_schema}
        run_options = dataclasses.replace(base, **changes)
        result: ResultMessage | None = None
        # Each tool call and text of the agent is progress, as for Claude Code's CLI.
        steps = Steps(ctx, _AGENT)
        # Closed on every way out: cancellation ends the query's process.
        messages = cast(AsyncGenerator[Any, None], query(prompt=prompt, options=run_options))
        try:
            async with contextlib.aclosing(messages):
                async for message in messages:
                    if isinstance(message, ResultMessage):
                        result = message
                    elif isinstance(message, AssistantMessage):
                        steps.event(_assistant_event(message))
        except BaseException:
            # The SDK may raise after the result (the CLI exited with an
            # error): what that result says was spent counts all the same.
            if result is not None:
                ctx.add_usage(this_run(_AGENT, ctx, _usage(result)))
            raise
        if result is None:
            raise ClaudeRunError(
                "the query ended without a result message",
                run_id=ctx.run_id,
                subagent=ctx.subagent,
            )
        spent = _usage(result)
        # A resumed fork reports its session's spending in all: this run's is the rest.
        usage = this_run(_AGENT, ctx, spent)
        try:
            answer = _answer(ctx, result)
        except BaseException:
            # What a failed query spent counts all the same (contract §20).
            ctx.add_usage(usage)
            raise
        return Output(
            answer,
            transcript=transcript(_AGENT, ctx, answer, result.session_id, session_total(spent)),
            usage=usage,
        )

    return run_claude


def _assistant_event(message: AssistantMessage) -> dict[str, Any]:
    """*message* as the CLI's ``assistant`` event, for :class:`Steps`."""
    blocks: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, ToolUseBlock):
            blocks.append({"type": "tool_use", "name": block.name})
        elif isinstance(block, TextBlock):
            blocks.append({"type": "text", "text": block.text})
    return {"type": "assistant", "message": {"content": blocks}}


def _usage(result: ResultMessage) -> Usage:
    """What the query's result says it spent, read as Claude Code's own result is."""
    return claude_result_usage(
        {
            "num_turns": result.num_turns,
            "total_cost_usd": result.total_cost_usd,
            "usage": result.usage,
            "modelUsage": getattr(result, "model_usage", None),
        }
    )


def _answer(ctx: ChildContext, result: ResultMessage) -> Any:
    """The query's answer: its text, or its structured output for a ``final_schema``.

    Raises:
        ClaudeRunError: the query ended with an error, or without the
            structured output the run needs.
    """
    if result.is_error or result.subtype != "success":
        detail = result.result or "; ".join(result.errors or ()) or result.subtype
        raise ClaudeRunError(
            f"the query ended with an error ({result.subtype}): {detail}",
            run_id=ctx.run_id,
            subagent=ctx.subagent,
        )
    answer: Any = result.result or ""
    if ctx.final_schema is not None:
        if result.structured_output is None:
            raise ClaudeRunError(
                "the query returned no structured output although the run has a "
                f"final_schema; it answered {answer[:200]!r}",
                run_id=ctx.run_id,
                subagent=ctx.subagent,
            )
        answer = result.structured_output
    return answer
