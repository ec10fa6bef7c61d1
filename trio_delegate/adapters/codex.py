"""Codex both ways: the delegation tools for Codex, and Codex threads as subagents.

**Parent side.** Codex takes tools through MCP: it starts ``trio-delegate
serve`` from its ``config.toml`` and offers the delegation tools to its model as
one namespace, ``mcp__<name>``. :func:`config_toml` renders that entry (what
``trio-delegate mcp-config codex`` prints), with absolute paths and the
settings ``codex exec`` needs to call the tools::

    from trio_delegate.adapters import codex
    print(codex.config_toml("subagents.toml"))

**Child side.** :func:`runner` makes a Codex thread a subagent, through the
``openai-codex`` Python SDK (which runs ``codex app-server``): the task is
one turn's input, ``final_schema`` its ``output_schema``, a continuation
forks the earlier run's thread (its id is kept in the run's transcript),
and cancellation or the deadline interrupts the turn, then closes the
app-server::

    td.Subagent("codex", codex.runner(model="gpt-5.4"))

The SDK is synchronous here and runs in a worker thread; Trio stays free.
The parent side needs the ``mcp`` extra, the child side the ``codex`` extra
(``pip install 'trio-delegate[codex]'``).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import outcome
import trio

from .. import ChildContext, DelegationError, Output
from .._json import parse
from .._mcp_config import DEFAULT_SERVER_NAME, codex_config_toml, serve_command
from .._runners._agents import (
    codex_token_usage,
    session_and_prompt,
    session_total,
    this_run,
    transcript,
)
from .._server_config import load_server_config
from .._usage import Usage

if TYPE_CHECKING:
    from openai_codex import CodexConfig, TurnHandle

__all__ = ["DEFAULT_SERVER_NAME", "CodexRunError", "config_toml", "runner"]

#: How a run's transcript marks the reply whose thread a continuation forks
#: (the same mark as the ``kind = "codex"`` CLI subagent's: both are threads).
_AGENT: Final = "codex"


def config_toml(config: str | os.PathLike[str], *, name: str = DEFAULT_SERVER_NAME) -> str:
    """The ``[mcp_servers.<name>]`` entry of Codex's ``config.toml`` for ``serve --config CONFIG``.

    The entry starts this installation's ``trio-delegate serve`` by absolute
    path, approves every tool (``codex exec`` never asks, so it would refuse
    them), and gives each call more time than the configuration's foreground
    limit.

    Args:
        config: the ``serve`` configuration file.
        name: the server's name; the model sees the tools as ``mcp__<name>``.

    Raises:
        ValueError: *config* does not exist or does not load, or the MCP SDK
            is missing (the message says what to fix).
    """
    from .._mcp_config import McpConfigError

    try:
        command = serve_command(config)
    except McpConfigError as exc:
        raise ValueError(str(exc)) from None
    limit = load_server_config(command[-1]).foreground_limit_seconds
    return codex_config_toml(command, name=name, foreground_limit_seconds=limit)


class CodexRunError(DelegationError, RuntimeError):
    """A Codex turn ended failed or interrupted (the turn's error says why).

    Raised inside the run, so it is the ``__cause__`` of the ``RunFailedError``
    a parent sees.
    """


def runner(
    config: CodexConfig | None = None,
    *,
    model: str | None = None,
    thread_options: dict[str, Any] | None = None,
) -> Callable[[ChildContext], Any]:
    """A subagent runner that runs one Codex turn per run, through the ``openai-codex`` SDK.

    Each run starts a ``codex app-server`` (``Codex(config)``) in a worker
    thread, starts a thread (or forks the earlier run's, for a
    continuation), runs one turn with ``ctx.task`` as input and
    ``final_schema`` as ``output_schema``, and closes the app-server.

    * The answer is the turn's final response, parsed as JSON when the run
      has a ``final_schema``; the transcript ends with it and the thread id.
    * Cancellation and the child deadline interrupt the turn, wait for the
      worker thread to finish, and close the app-server.
    * A turn that fails fails the run with :class:`CodexRunError`.
    * The tokens the turn's last usage update gives are the run's usage
      (Codex tells no requests and no cost), whether the run then succeeds
      or fails.

    Args:
        config: how to launch Codex (``codex_bin``, ``env``, ``cwd``,
            ``config_overrides``); ``None`` for the SDK's defaults (the
            bundled ``codex`` and ``~/.codex``).
        model: the model of new threads; ``None`` for Codex's default.
        thread_options: more keyword arguments for ``thread_start`` and
            ``thread_fork`` (``sandbox``, ``approval_mode``, ``cwd``,
            ``developer_instructions`` ...).

    Returns:
        an async runner for :class:`trio_delegate.Subagent`.

    Raises:
        ImportError: the ``openai-codex`` SDK is not installed.
    """
    try:
        import openai_codex
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "trio_delegate.adapters.codex.runner needs the Codex Python SDK: "
            "pip install 'trio-delegate[codex]'"
        ) from exc
    options = {**(thread_options or {})}
    if model is not None:
        options["model"] = model

    async def run_codex(ctx: ChildContext) -> Output:
        session, prompt = session_and_prompt(_AGENT, ctx)
        turn = _Turn()

        def work() -> tuple[str, Any]:
            codex = openai_codex.Codex(config)
            # The app-server's pipes: the SDK's close() leaves two of them open.
            process = getattr(getattr(codex, "_client", None), "_proc", None)
            try:
                if session is not None:
                    thread = codex.thread_fork(session, **options)
                else:
                    thread = codex.thread_start(**options)
                schema = None if ctx.final_schema is None else dict(ctx.final_schema)
                handle = thread.turn(prompt, output_schema=schema)
                turn.started(handle)
                return thread.id, handle.run()
            finally:
                codex.close()
                for name in ("stdout", "stderr"):
                    pipe = getattr(process, name, None)
                    if pipe is not None:
                        with contextlib.suppress(Exception):
                            pipe.close()

        async def interrupt_on_cancel() -> None:
            try:
                await trio.sleep_forever()
            finally:
                # Cancelled: by the run's scope (cancel, deadline), or by us
                # once the turn is over, when there is nothing to interrupt.
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(turn.interrupt)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(interrupt_on_cancel)
            # The worker thread always runs to its end (the interrupt ends
            # the turn), so no app-server outlives the run.
            with trio.CancelScope(shield=True):
                done = await outcome.acapture(trio.to_thread.run_sync, work)
            turn.finish()
            nursery.cancel_scope.cancel()
        await trio.lowlevel.checkpoint_if_cancelled()
        thread_id, result = done.unwrap()
        spent = _usage(result)
        # A forked thread reports its spending in all: this run's is the rest.
        usage = None if spent is None else this_run(_AGENT, ctx, spent)
        try:
            answer = _answer(ctx, result)
        except BaseException:
            # What a failed turn spent counts all the same (contract §20).
            if usage is not None:
                ctx.add_usage(usage)
            raise
        return Output(
            answer,
            transcript=transcript(_AGENT, ctx, answer, thread_id, session_total(spent)),
            usage=usage,
        )

    return run_codex


def _answer(ctx: ChildContext, result: Any) -> Any:
    """The turn's answer, parsed as JSON for a ``final_schema``.

    Raises:
        CodexRunError: the turn did not complete, or its answer is not the JSON due.
    """
    status = getattr(result.status, "value", result.status)
    if status != "completed":
        error = result.error.message if result.error is not None else "no error given"
        raise CodexRunError(
            f"the Codex turn ended {status}: {error}",
            run_id=ctx.run_id,
            subagent=ctx.subagent,
        )
    answer: Any = result.final_response or ""
    if ctx.final_schema is not None:
        answer = _json(ctx, answer)
    return answer


def _usage(result: Any) -> Usage | None:
    """What the turn spent: the token counts of its last usage update, or ``None``.

    The SDK hands back the thread's usage as the app-server last reported it
    during the turn (``total``: every model call of the thread so far, a
    forked thread's earlier ones too; :func:`this_run` takes those off).
    """
    spent = getattr(getattr(result, "usage", None), "total", None)
    if spent is None:
        return None
    return codex_token_usage(
        {
            "input_tokens": getattr(spent, "input_tokens", None),
            "output_tokens": getattr(spent, "output_tokens", None),
            "cached_input_tokens": getattr(spent, "cached_input_tokens", None),
            "cache_write_input_tokens": getattr(spent, "cache_write_input_tokens", None),
            "reasoning_output_tokens": getattr(spent, "reasoning_output_tokens", None),
        }
    )


def _json(ctx: ChildContext, text: str) -> Any:
    try:
        return parse(text)
    except ValueError as exc:
        raise CodexRunError(
            f"the Codex turn answered with text that is not JSON ({exc}), but the run has a "
            f"final_schema; it began {text[:200]!r}",
            run_id=ctx.run_id,
            subagent=ctx.subagent,
        ) from None


class _Turn:
    """The running turn, shared by the worker thread and Trio: interrupt it at most once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._handle: TurnHandle | None = None
        self._interrupted = False
        self._finished = False

    def started(self, handle: TurnHandle) -> None:
        with self._lock:
            self._handle = handle
            interrupt = self._interrupted
        if interrupt:  # cancelled before the turn existed
            handle.interrupt()

    def finish(self) -> None:
        with self._lock:
            self._finished = True

    def interrupt(self) -> None:
        with self._lock:
            if self._finished or self._interrupted:
                return
            self._interrupted = True
            handle = self._handle
        if handle is not None:
            handle.interrupt()
