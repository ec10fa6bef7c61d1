"""Agent CLIs as subagents: Claude Code (``claude -p``) and Codex (``codex exec``).

Each run starts the CLI headless, in a process group of its own (through
:func:`run_process`, as command subagents do), with the task on stdin, and
reads its JSON output:

* Claude Code: ``claude -p --output-format stream-json --verbose``; the
  result is the last ``result`` event's ``result`` text, or its
  ``structured_output`` when the run has a ``final_schema`` (passed with
  ``--json-schema``).
* Codex: ``codex exec --json --skip-git-repo-check -``; the result is the
  last ``agent_message``, parsed as JSON when the run has a ``final_schema``
  (passed with ``--output-schema FILE``).

The CLI's session id goes into the run's transcript (``td.Output``), so a
``continue_run`` finds it in ``ctx.history`` and forks that session (``claude
--resume=<id> --fork-session``, ``codex exec fork -- <id>``): the earlier run's
session is never changed. Only an id of :data:`SESSION_ID`'s form is kept
or passed on, and every value goes on the command line joined to its option
or after ``--``, so none can be read as an option. Large output is parsed
on a worker thread. Cancellation and the deadline end the whole
process group. A CLI that reports an error (a bad API key, a usage limit, a
refused request) fails the run with the CLI's own message.

While the CLI works, each turn and tool call its events show is reported
as the run's progress (see :mod:`._agent_events`).

What the CLI says it spent counts for the run (contract §20), whether the
run then succeeds or fails: Claude Code's result gives tokens per model
(``modelUsage``), its turns and ``total_cost_usd``; Codex gives tokens per
turn (``turn.completed``), no cost and no request count. A number there that
is not a count (negative, fractional, a string) counts as 0.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Mapping
from typing import Any, Final, Literal, final

import attrs

from .._core import ChildContext
from .._json import parse
from .._results import Output
from .._threads import run_sync
from .._usage import (
    COUNTS,
    EXACT,
    MAX_COUNT,
    Usage,
    cost_decimal,
    cost_float,
    reported_count,
    reported_usage,
)
from ._agent_events import Steps
from ._command import (
    INLINE_OUTPUT_BYTES,
    CommandFailedError,
    Finished,
    json_file,
    quote,
    run_process,
)

__all__ = [
    "AGENT_KINDS",
    "SESSION_ID",
    "SESSION_USAGE",
    "AgentCLIRunner",
    "AgentKind",
    "claude_result_usage",
    "codex_token_usage",
    "is_session_id",
    "session_and_prompt",
    "session_total",
    "this_run",
    "transcript",
]

AgentKind = Literal["claude", "codex"]

#: The agent CLIs a subagent can be.
AGENT_KINDS: Final[tuple[AgentKind, ...]] = ("claude", "codex")

#: The most stdout read from a CLI: its JSON events carry the whole session
#: (tool outputs included), far more than the result; the result itself is
#: bounded by ``max_result_bytes`` like every other.
DEFAULT_OUTPUT_BYTES: Final = 64 * 1024 * 1024

#: What a session or thread id may be to go on a command line (the CLIs
#: write UUIDs): letters, digits, ``-`` and ``_``, never first a ``-``. An
#: id read from a CLI's output or from a history is data: one such as
#: ``--dangerously-skip-permissions`` would otherwise become a flag.
SESSION_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")


def is_session_id(value: object) -> bool:
    """Whether *value* is a session id that may be passed to an agent CLI."""
    return isinstance(value, str) and SESSION_ID.fullmatch(value) is not None


@final
@attrs.frozen(eq=False)
class AgentCLIRunner:
    """A runner that runs an agent CLI headless for each run.

    Args:
        kind: ``"claude"`` (Claude Code) or ``"codex"`` (Codex).
        program: the CLI's executable.
        args: more arguments for every run (permissions, sandbox, tools);
            for Codex they must suit both ``codex exec`` and ``codex exec
            fork``: prefer ``-c key=value``.
        model: the model, passed as ``--model``; ``None`` for the CLI's default.
        cwd: the working directory (default: the current one).
        env: variables added to the inherited environment.
        max_output_bytes: the most the CLI may write to stdout.
        kill_grace_seconds: how long the process group has to exit after
            SIGTERM before it gets SIGKILL.
    """

    kind: AgentKind
    program: str
    args: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    model: str | None = None
    cwd: str | None = None
    env: Mapping[str, str] = attrs.field(factory=dict)
    max_output_bytes: int = DEFAULT_OUTPUT_BYTES
    kill_grace_seconds: float = 2.0

    async def __call__(self, ctx: ChildContext) -> Output:
        """Run the CLI for one run: its result, with the session id in the transcript.

        Raises:
            CommandFailedError: the CLI failed or reported an error; its message says why.
            LimitExceededError: the CLI wrote more than ``max_output_bytes``.
        """
        session, task = session_and_prompt(self.kind, ctx)
        async with _schema_file(self.kind, ctx.final_schema) as schema_path:
            argv = self._argv(ctx, session, schema_path)
            finished = await run_process(
                ctx,
                argv,
                task.encode(errors="replace"),
                cwd=self.cwd,
                env={**os.environ, **self.env},
                max_output_bytes=self.max_output_bytes,
                kill_grace_seconds=self.kill_grace_seconds,
                on_line=Steps(ctx, self.kind).line,
            )
        claude = self.kind == "claude"
        read = _claude_result if claude else _codex_result
        inline = len(finished.stdout) <= INLINE_OUTPUT_BYTES
        # Megabytes of JSON events are decoded and parsed on a worker thread,
        # so that the event loop (every other run) is never held by them.
        events = _json_lines(finished) if inline else await run_sync(_json_lines, finished)
        spent = _claude_usage(events) if claude else _codex_usage(events)
        # A fork reports its session's spending in all: this run's is the rest.
        usage = None if spent is None else this_run(self.kind, ctx, spent)
        try:
            if inline:
                result, session_id = read(ctx, finished, events)
            else:
                result, session_id = await run_sync(read, ctx, finished, events)
        except BaseException:
            # What a failed run spent counts all the same (contract §20).
            if usage is not None:
                ctx.add_usage(usage)
            raise
        return Output(
            result,
            transcript=transcript(self.kind, ctx, result, session_id, session_total(spent)),
            usage=usage,
        )

    def _argv(self, ctx: ChildContext, session: str | None, schema_path: str | None) -> list[str]:
        # Every value is joined to its option (--option=value): whatever it
        # holds, it can never be read as an option of its own.
        model = [f"--model={self.model}"] if self.model is not None else []
        if self.kind == "claude":
            # Streamed events (stream-json needs --verbose in print mode): each
            # turn and tool call is progress as it happens; the last event is
            # the same result that --output-format=json writes alone.
            argv = [
                self.program,
                "-p",
                "--output-format=stream-json",
                "--verbose",
                *model,
                *self.args,
            ]
            if ctx.final_schema is not None:
                argv.append(f"--json-schema={json.dumps(ctx.final_schema)}")
            if session is not None:
                argv += [f"--resume={session}", "--fork-session"]
            return argv
        argv = [self.program, "exec"]
        if session is not None:
            argv.append("fork")
        argv += ["--json", "--skip-git-repo-check", *model, *self.args]
        if schema_path is not None:
            argv.append(f"--output-schema={schema_path}")
        # Positional arguments after "--": the session to fork, and the
        # prompt, which is on stdin.
        argv.append("--")
        if session is not None:
            argv.append(session)
        argv.append("-")
        return argv


def session_and_prompt(agent: str, ctx: ChildContext) -> tuple[str | None, str]:
    """The session a continuation forks (from *ctx*'s history), and the prompt to send.

    An ordinary run starts a new session. A continuation forks the session
    of the last reply of *agent* in its history (see :func:`transcript`); a
    history without one (a transcript from elsewhere) is written out ahead
    of the message instead.
    """
    for entry in reversed(ctx.history):
        if isinstance(entry, dict) and entry.get("agent") == agent:
            session = entry.get("session_id")
            # An id that is not one (a history is data from anywhere) is
            # never passed on: the conversation goes into the prompt instead.
            if is_session_id(session):
                assert isinstance(session, str)
                return session, ctx.task
    if not ctx.history:
        return None, ctx.task
    earlier = json.dumps(list(ctx.history), ensure_ascii=False, indent=1)
    return None, f"The conversation so far (JSON):\n{earlier}\n\nThe next message:\n{ctx.task}"


def transcript(
    agent: str,
    ctx: ChildContext,
    answer: Any,
    session: str | None,
    session_usage: Usage | None = None,
) -> list[Any]:
    """A run's whole conversation: its history, the task, and the answer with its session.

    The answer's entry names the *agent* and its ``session_id``, which is how
    :func:`session_and_prompt` finds the session to fork, and what the
    session had spent in all by then (*session_usage*, under
    :data:`SESSION_USAGE`), which is how :func:`this_run` tells a fork's
    spending from its session's.
    """
    reply: dict[str, Any] = {"role": "assistant", "content": answer}
    if is_session_id(session):
        # Only an id that can go on a command line is kept to be forked.
        reply |= {"agent": agent, "session_id": session}
        if session_usage is not None:
            reply[SESSION_USAGE] = {
                **{field: getattr(session_usage, field) for field in COUNTS},
                "cost_usd": session_usage.cost_usd,
            }
    return [*ctx.history, {"role": "user", "content": ctx.task}, reply]


#: The key of a transcript's reply entry that holds what its session had
#: spent in all: a forked session reports its earlier spending again.
SESSION_USAGE: Final = "session_usage"


def session_total(spent: Usage | None) -> Usage | None:
    """What a session spent in all, as its transcript entry keeps it.

    Requests are left out: Claude Code counts the turns of each invocation
    alone (``num_turns``), while tokens and cost go on from the forked
    session's; Codex counts no requests.
    """
    return None if spent is None else attrs.evolve(spent, requests=0)


def _forked_entry(agent: str, ctx: ChildContext) -> dict[str, Any] | None:
    """The history entry whose session a continuation forks (as :func:`session_and_prompt`)."""
    for entry in reversed(ctx.history):
        if (
            isinstance(entry, dict)
            and entry.get("agent") == agent
            and is_session_id(entry.get("session_id"))
        ):
            return entry
    return None


def this_run(agent: str, ctx: ChildContext, session_usage: Usage) -> Usage:
    """What this run spent, of what its session says it spent in all.

    A continuation forks an earlier session, and the CLIs count the fork's
    spending on from that session's: the earlier entry's
    :data:`SESSION_USAGE` is taken off, each field clamped at 0 (a history
    is data: one that says too much never makes a count negative).
    """
    entry = _forked_entry(agent, ctx)
    before = entry.get(SESSION_USAGE) if entry is not None else None
    if not isinstance(before, dict):
        return session_usage
    earlier = reported_usage(**{key: before.get(key) for key in (*COUNTS, "cost_usd")})
    counts = {
        field: max(getattr(session_usage, field) - getattr(earlier, field), 0) for field in COUNTS
    }
    cost = EXACT.subtract(cost_decimal(session_usage.cost_usd), cost_decimal(earlier.cost_usd))
    return reported_usage(**counts, cost_usd=max(cost_float(cost), 0.0))


def _schema_file(
    kind: AgentKind, schema: Any
) -> contextlib.AbstractAsyncContextManager[str | None]:
    """Codex reads ``--output-schema`` from a file: one, removed afterwards."""
    return json_file("schema", schema if kind == "codex" else None)


# -- reading the output ----------------------------------------------------------------


def _json_lines(finished: Finished) -> list[dict[str, Any]]:
    """The JSON objects of stdout, one a line; other lines are skipped."""
    try:
        text = finished.text()
    except CommandFailedError:
        return []
    events = []
    for line in text.splitlines():
        try:
            value = parse(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            events.append(value)
    return events


def _claude_result(
    ctx: ChildContext, finished: Finished, events: list[dict[str, Any]]
) -> tuple[Any, str | None]:
    results = [event for event in events if event.get("type") == "result"]
    if not results:
        raise finished.failure(
            ctx,
            "wrote no JSON result (is it Claude Code, run with -p --output-format stream-json?)"
            if finished.returncode == 0
            else None,
        )
    result = results[-1]
    session = result.get("session_id") if isinstance(result.get("session_id"), str) else None
    if result.get("is_error") or result.get("subtype") != "success" or finished.returncode:
        message = result.get("result") or result.get("subtype") or "an unnamed error"
        raise finished.failure(
            ctx, f"reported an error (exit code {finished.returncode}): {quote(str(message))}"
        )
    if ctx.final_schema is not None:
        if "structured_output" not in result:
            raise finished.failure(
                ctx,
                "returned no structured_output although the run has a final_schema; "
                f"its answer began {quote(str(result.get('result')))!r}",
            )
        return result["structured_output"], session
    return result.get("result", ""), session


def _codex_result(
    ctx: ChildContext, finished: Finished, events: list[dict[str, Any]]
) -> tuple[Any, str | None]:
    session: str | None = None
    answer: str | None = None
    errors: list[str] = []
    for event in events:
        kind = event.get("type")
        if kind == "thread.started" and isinstance(event.get("thread_id"), str):
            session = event["thread_id"]
        elif kind == "item.completed":
            item = event.get("item")
            if isinstance(item, dict) and item.get("type") == "agent_message":
                answer = str(item.get("text", ""))
        elif kind == "turn.failed":
            error = event.get("error")
            errors.append(str(error.get("message") if isinstance(error, dict) else error))
        elif kind == "error":
            errors.append(str(event.get("message")))
    if errors or finished.returncode:
        if errors:
            # The same error is often sent as an event and again as the turn's failure.
            message = "; ".join(dict.fromkeys(errors))
            raise finished.failure(
                ctx, f"reported an error (exit code {finished.returncode}): {quote(message)}"
            )
        raise finished.failure(ctx)
    if answer is None:
        raise finished.failure(ctx, "ended its turn without an answer (no agent_message)")
    if ctx.final_schema is None:
        return answer, session
    try:
        return parse(answer), session
    except ValueError as exc:
        raise finished.failure(
            ctx,
            f"answered with text that is not JSON ({exc}), but the run has a final_schema; "
            f"its answer began {quote(answer)!r}",
        ) from None


# -- reading what the CLI spent ---------------------------------------------------------


def _claude_usage(events: list[dict[str, Any]]) -> Usage | None:
    """What Claude Code's last ``result`` says it spent, or ``None`` without one."""
    results = [event for event in events if event.get("type") == "result"]
    if not results:
        return None
    return claude_result_usage(results[-1])


def claude_result_usage(result: Mapping[str, Any]) -> Usage:
    """What one Claude Code result (the CLI's ``result`` event, or the fields of
    the Agent SDK's ``ResultMessage`` under the CLI's names) says was spent.

    ``modelUsage`` counts every model the CLI called (a small model too);
    plain ``usage``, the main model's, is read only when it is missing.
    Anthropic counts cached input apart from ``input_tokens``; here it is in.
    """
    usage = reported_usage(requests=result.get("num_turns"), cost_usd=result.get("total_cost_usd"))
    models = result.get("modelUsage")
    if isinstance(models, dict) and models:
        for spent in models.values():
            if isinstance(spent, dict):
                usage += _anthropic_counts(
                    spent.get("inputTokens"),
                    spent.get("outputTokens"),
                    spent.get("cacheReadInputTokens"),
                    spent.get("cacheCreationInputTokens"),
                )
        return usage
    spent = result.get("usage")
    if isinstance(spent, dict):
        usage += _anthropic_counts(
            spent.get("input_tokens"),
            spent.get("output_tokens"),
            spent.get("cache_read_input_tokens"),
            spent.get("cache_creation_input_tokens"),
        )
    return usage


def _anthropic_counts(inputs: Any, outputs: Any, cache_read: Any, cache_creation: Any) -> Usage:
    """Token counts as Anthropic gives them (input without the cache), as a Usage."""
    read, created = reported_count(cache_read), reported_count(cache_creation)
    return reported_usage(
        input_tokens=min(reported_count(inputs) + read + created, MAX_COUNT),
        output_tokens=outputs,
        cache_read_input_tokens=read,
        cache_creation_input_tokens=created,
    )


def _codex_usage(events: list[dict[str, Any]]) -> Usage | None:
    """What Codex's ``turn.completed`` events say it spent, or ``None`` without one.

    Codex counts cached input in ``input_tokens`` and reasoning in
    ``output_tokens``, as :class:`Usage` does; it says nothing of requests
    or cost.
    """
    usage: Usage | None = None
    for event in events:
        spent = event.get("usage")
        if event.get("type") != "turn.completed" or not isinstance(spent, dict):
            continue
        turn = codex_token_usage(spent)
        usage = turn if usage is None else usage + turn
    return usage


def codex_token_usage(spent: Mapping[str, Any]) -> Usage:
    """Codex's token counts (``exec --json``'s names) as a :class:`Usage`.

    Codex counts cached input in ``input_tokens`` and reasoning in
    ``output_tokens``, as :class:`Usage` does; it says nothing of requests
    or cost.
    """
    return reported_usage(
        input_tokens=spent.get("input_tokens"),
        output_tokens=spent.get("output_tokens"),
        cache_read_input_tokens=spent.get("cached_input_tokens"),
        cache_creation_input_tokens=spent.get("cache_write_input_tokens"),
        reasoning_output_tokens=spent.get("reasoning_output_tokens"),
    )
