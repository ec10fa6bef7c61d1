"""td.model_runner's arguments: each malformed one is InvalidArgumentsError naming it."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

import trio_delegate as td

from .fakes import Reply, Step, Turn, call, text
from .helpers import open_parent_lenient
from .model_support import ANTHROPIC, RESPONSES


def tool(x: int) -> int:
    """Echo."""
    return x


class Unschemable:
    pass


def takes_object(value: Unschemable) -> str:
    """Cannot be described."""
    return "no"


@pytest.mark.parametrize(
    ("kwargs", "names"),
    [
        ({"model": "claude-sonnet"}, "'<provider>:<model id>'"),
        ({"model": 42}, "'<provider>:<model id>'"),
        ({"model": "gemini:pro"}, "the provider 'gemini'"),
        ({"model": "openai:  "}, "names no model id"),
        ({"model": "openai:\ud800"}, "names no model id"),
        ({"instructions": 3}, "instructions"),
        ({"instructions": "\udc00"}, "valid Unicode"),
        ({"api": "completions"}, "'responses' or 'chat'"),
        ({"model": "anthropic:x", "api": "chat"}, "for the openai provider"),
        ({"base_url": "ftp://host"}, "base_url"),
        ({"api_key_env": "NOT A NAME"}, "api_key_env"),
        ({"max_turns": 0}, "max_turns"),
        ({"max_turns": True}, "max_turns"),
        ({"max_turns": 10**400}, "max_turns"),
        ({"max_tokens": -1}, "max_tokens"),
        ({"max_retries": 1000}, "max_retries"),
        ({"request_timeout_seconds": float("nan")}, "request_timeout_seconds"),
        ({"options": ["temperature"]}, "options"),
        ({"tools": "tool"}, "sequence of functions"),
        ({"tools": [42]}, "tools=...)[0] must be a function"),
        ({"tools": [tool, tool]}, "two tools named 'tool'"),
        ({"tools": [lambda x: x]}, "'<lambda>', which is no tool name"),
        ({"tools": [takes_object]}, "cannot be described as a JSON Schema"),
        ({"tools": [tool] * 200}, "at most 128"),
    ],
)
def test_a_malformed_argument_is_named(kwargs: dict[str, Any], names: str) -> None:
    kwargs.setdefault("model", "openai:gpt-test")
    with pytest.raises(td.InvalidArgumentsError) as raised:
        td.model_runner(**kwargs)
    assert names in str(raised.value)


def test_a_model_runner_is_a_subagent_s_runner() -> None:
    runner = td.model_runner("anthropic:claude-test", tools=[tool])
    subagent = td.Subagent("m", runner)
    assert subagent.runner is runner
    assert runner.provider == "anthropic"
    assert runner.model == "claude-test"
    assert runner.api_key_env == "ANTHROPIC_API_KEY"
    assert [t.name for t in runner.tools] == ["tool"]


async def test_a_tool_named_like_a_delegation_tool_fails_the_run_naming_it(
    mock_clock: trio.testing.MockClock,
) -> None:
    def delegate_task(task: str) -> str:
        """Clash."""
        return task

    with ANTHROPIC.fake([]) as fake:
        runner = ANTHROPIC.runner(fake, tools=[delegate_task])
        subagents = [td.Subagent("lead", runner, children=("leaf",)), td.Subagent("leaf", runner)]
        async with open_parent_lenient(*subagents) as parent:
            with pytest.raises(td.RunFailedError) as raised:
                await parent.delegate("lead", "go")
    assert "delegate_task" in str(raised.value)
    assert "rename the functions" in str(raised.value)
    assert fake.turns == []


async def test_a_tool_result_that_is_not_json_reaches_the_model_as_an_error(
    mock_clock: trio.testing.MockClock,
) -> None:
    def opaque() -> object:
        """Returns something that is not JSON."""
        return Unschemable()

    def lone() -> str:
        """Returns text that is not valid Unicode."""
        return "half \ud800"

    seen: list[str] = []

    def then(reply: Reply) -> Step:
        def step(turn: Turn) -> Reply:
            seen.append(turn.last.text)
            return reply

        return step

    script = [call("opaque"), then(call("lone")), then(text("ok"))]
    with RESPONSES.fake(script) as fake:
        async with open_parent_lenient(
            td.Subagent("o", RESPONSES.runner(fake, tools=[opaque, lone]))
        ) as parent:
            result = await parent.delegate("o", "go")
    assert result.final_result == "ok"
    assert "invalid_result" in seen[0]
    # The lone surrogate is sent escaped: the request could not be encoded otherwise.
    assert seen[1] == "half \\ud800"
