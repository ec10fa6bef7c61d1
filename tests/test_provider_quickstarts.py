"""The real-provider quickstarts run, offline, against the fake Anthropic and OpenAI APIs.

Each example is run as a script with only its environment changed: the key,
and the base URL pointing the official SDK at a fake on 127.0.0.1.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

import trio_delegate as td

from .fakes import FakeAnthropic, FakeModelServer, FakeResponses, Reply, Turn, Usage, call, text

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TOOLS = {
    "delegate_task",
    "subagent_status",
    "wait_subagent",
    "cancel_subagent",
    "continue_subagent",
    "list_subagent_runs",
}


#: What each response of the fake model says it spent.
SENT = Usage(
    input_tokens=100,
    output_tokens=20,
    cache_read_input_tokens=30,
    cache_creation_input_tokens=7,
    reasoning_output_tokens=4,
)


def answer_with_the_finding(turn: Turn) -> Reply:
    result = turn.last.json()
    assert not turn.last.is_error
    assert result["subagent"] == "researcher"
    return attrs.evolve(text(f"The team found: {result['final_result']['finding']}"), usage=SENT)


def run_example(
    name: str,
    fake: FakeModelServer,
    environment: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> str:
    for key, value in environment.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(sys, "argv", [name, "Why did the login fail?"])
    threads: list[object] = []
    run_sync = trio.to_thread.run_sync

    async def counted(function: Any, *args: Any, **kwargs: Any) -> Any:
        threads.append(function)
        return await run_sync(function, *args, **kwargs)

    # The provider SDKs' async clients run natively under Trio: a request to
    # the model takes no worker thread (the fake listens on a numeric address,
    # so not even a name lookup does).
    monkeypatch.setattr(trio.to_thread, "run_sync", counted)
    runpy.run_path(str(EXAMPLES / name), run_name="__main__")
    assert fake.problems == []
    assert threads == []
    out, err = capsys.readouterr()
    # The stand-in researcher reports nothing.
    assert f"subagents spent: {td.Usage()}" in err
    return out + err


def script() -> list[object]:
    return [
        attrs.evolve(
            call("delegate_task", subagent="researcher", task="the login bug"), usage=SENT
        ),
        answer_with_the_finding,
    ]


def test_the_anthropic_quickstart(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with FakeAnthropic(script()) as fake:  # type: ignore[arg-type]
        out = run_example(
            "anthropic_quickstart.py",
            fake,
            {"ANTHROPIC_API_KEY": "sk-ant-test", "ANTHROPIC_BASE_URL": fake.url},
            monkeypatch,
            capsys,
        )
    assert "The team found: looked into 'the login bug'" in out
    first, second = (request.body for request in fake.requests)
    assert {tool["name"] for tool in first["tools"]} == TOOLS
    # The key from the environment was sent (newer SDKs send it as a bearer token).
    headers = fake.requests[0].headers
    sent = {headers.get("x-api-key"), headers.get("authorization", "").removeprefix("Bearer ")}
    assert "sk-ant-test" in sent
    # The tool's answer went back as a tool_result after the model's tool_use.
    assert [message["role"] for message in second["messages"]] == ["user", "assistant", "user"]
    # Anthropic counts the cache apart from input_tokens; td.Usage counts it in.
    lead = td.Usage(
        requests=2,
        input_tokens=2 * (100 + 30 + 7),
        output_tokens=40,
        cache_read_input_tokens=60,
        cache_creation_input_tokens=14,
    )
    assert f"lead model spent: {lead}" in out


def test_the_openai_quickstart(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with FakeResponses(script()) as fake:  # type: ignore[arg-type]
        out = run_example(
            "openai_quickstart.py",
            fake,
            {"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": f"{fake.url}/v1"},
            monkeypatch,
            capsys,
        )
    assert "The team found: looked into 'the login bug'" in out
    first, second = (request.body for request in fake.requests)
    assert {tool["name"] for tool in first["tools"]} == TOOLS
    assert all(tool["strict"] for tool in first["tools"])
    assert fake.requests[0].headers["authorization"] == "Bearer sk-test"
    types = [item.get("type", "message") for item in second["input"]]
    assert types == ["message", "function_call", "function_call_output"]
    lead = td.Usage(
        requests=2,
        input_tokens=200,
        output_tokens=40,
        cache_read_input_tokens=60,
        reasoning_output_tokens=8,
    )
    assert f"lead model spent: {lead}" in out


@pytest.mark.parametrize(
    ("name", "variable"),
    [("anthropic_quickstart.py", "ANTHROPIC_API_KEY"), ("openai_quickstart.py", "OPENAI_API_KEY")],
)
def test_without_a_key_it_says_which_variable_to_set(
    name: str, variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(sys, "argv", [name])
    with pytest.raises(SystemExit) as info:
        runpy.run_path(str(EXAMPLES / name), run_name="__main__")
    assert variable in str(info.value.code)
