"""A continuation counts what it spent, not what its forked session had spent before.

Claude Code and Codex fork the earlier run's session, and report tokens
(and Claude Code its cost) summed over the whole session, the earlier
runs' included. Each run keeps its session's sum in its transcript, and a
continuation takes it off. Real binaries against fake model APIs that
report the numbers given here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

import trio_delegate as td
from trio_delegate._runners._agents import SESSION_USAGE, this_run

from .fakes import FakeAnthropic, FakeResponses, Reply, Usage
from .test_cli_agents_subagents import agent, parent_for

claude_agent_sdk = pytest.importorskip("claude_agent_sdk")
openai_codex = pytest.importorskip("openai_codex")

from trio_delegate.adapters import claude, codex  # noqa: E402

from .test_adapter_sdk_usage import claude_options, codex_config  # noqa: E402


def spent(input_tokens: int, output_tokens: int) -> Usage:
    return Usage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cache_read_input_tokens=0,
        cache_creation_input_tokens=0,
        reasoning_output_tokens=0,
    )


SCRIPT = [
    Reply(text="one", usage=spent(100, 20)),
    Reply(text="two", usage=spent(7, 3)),
    Reply(text="three", usage=spent(40, 1)),
]


async def three_runs(parent: td.Parent, name: str) -> list[td.Usage]:
    """A run and two continuations of it, each of the one before; their usages."""
    with trio.fail_after(90):
        first = await parent.delegate(name, "one")
        second = await parent.continue_run(first.run_id, "two")
        assert isinstance(second, td.RunResult)
        third = await parent.continue_run(second.run_id, "three")
        assert isinstance(third, td.RunResult)
    assert third.final_result == "three"
    return [parent.usage(run.run_id) for run in (first, second, third)]


def tokens(usages: list[td.Usage]) -> list[tuple[int, int]]:
    return [(usage.input_tokens, usage.output_tokens) for usage in usages]


@pytest.mark.parametrize("kind", ["claude", "codex"])
async def test_a_cli_continuation_counts_only_its_own_tokens(kind: str, tmp_path: Path) -> None:
    with agent(kind, tmp_path, list(SCRIPT)) as cli:
        async with parent_for(cli.subagent()) as parent:
            usages = await three_runs(parent, "agent")
    assert tokens(usages) == [(100, 20), (7, 3), (40, 1)]
    if kind == "claude":
        # Claude Code's own count of turns is per invocation already.
        assert [usage.requests for usage in usages] == [1, 1, 1]
        # Its cost goes on from the session's too: each run's is its own.
        assert usages[1].cost_usd < usages[0].cost_usd


async def test_a_claude_sdk_continuation_counts_only_its_own_tokens(tmp_path: Path) -> None:
    with FakeAnthropic(list(SCRIPT)) as fake:
        subagent = td.Subagent("claude", claude.runner(claude_options(tmp_path, fake)))
        async with td.open_runtime([subagent]) as rt, rt.open_parent("host") as parent:
            usages = await three_runs(parent, "claude")
    assert tokens(usages) == [(100, 20), (7, 3), (40, 1)]


async def test_a_codex_sdk_continuation_counts_only_its_own_tokens(tmp_path: Path) -> None:
    with FakeResponses(list(SCRIPT)) as fake:
        subagent = td.Subagent("codex", codex.runner(codex_config(tmp_path, fake)))
        async with td.open_runtime([subagent]) as rt, rt.open_parent("host") as parent:
            usages = await three_runs(parent, "codex")
    assert tokens(usages) == [(100, 20), (7, 3), (40, 1)]


def context(history: list[Any]) -> td.ChildContext:
    return td.ChildContext("run_1", "agent", "next", history=tuple(history))


def entry(session_usage: Any, *, agent_name: str = "codex", session: str = "s-1") -> Any:
    return {
        "role": "assistant",
        "content": "x",
        "agent": agent_name,
        "session_id": session,
        SESSION_USAGE: session_usage,
    }


TOTAL = td.Usage(requests=2, input_tokens=150, output_tokens=30, cost_usd=0.3)
LESS_100 = td.Usage(requests=2, input_tokens=50, output_tokens=30, cost_usd=0.3)


@pytest.mark.parametrize(
    ("history", "expected"),
    [
        # nothing to take off: a new session, or an entry without a sum
        ([], TOTAL),
        ([entry(None)], TOTAL),
        ([entry("lots")], TOTAL),
        (
            [entry({"input_tokens": 100})],
            LESS_100,
        ),
        # the sum of the entry that is forked: the last of this agent with a session
        (
            [entry({"input_tokens": 100}), entry({"input_tokens": 10}, agent_name="claude")],
            LESS_100,
        ),
        (
            [entry({"input_tokens": 100}), entry({"input_tokens": 10}, session="--flag")],
            LESS_100,
        ),
        # costs subtract exactly; too much taken off is 0, never negative
        (
            [entry({"output_tokens": 10**30, "cost_usd": 0.1, "requests": 5})],
            td.Usage(requests=0, input_tokens=150, output_tokens=0, cost_usd=0.2),
        ),
        # what is not a count takes nothing off
        (
            [entry({"input_tokens": -5, "output_tokens": "9", "cost_usd": float("nan")})],
            TOTAL,
        ),
    ],
)
def test_this_run_takes_off_what_the_forked_session_had_spent(
    history: list[Any], expected: td.Usage
) -> None:
    assert this_run("codex", context(history), TOTAL) == expected
