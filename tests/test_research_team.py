"""examples/research_team.py runs offline against the fake Anthropic and OpenAI APIs.

One fake serves the whole team: each request is answered from the script of
the subagent that sent it, told by its task (the first user message), since
the investigator runs in the background beside the lead.
"""

from __future__ import annotations

import runpy
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import trio_delegate as td

from .fakes import FakeAnthropic, FakeModelServer, FakeResponses, Reply, Turn, call, text

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "research_team.py"

QUESTION = "Why did logins fail on 3 March?"
FACTS = "deploy 412 rotated the key (n1); the auth cache kept the old one (n3)"


def _task(body: dict[str, Any]) -> str:
    """The first user message of a model request: the run's task."""
    for message in body.get("messages", body.get("input", [])):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message["content"]
            return content if isinstance(content, str) else str(content)
    raise AssertionError(body)


Script = list[Callable[[Turn], Reply]]


def scripts(seen: dict[str, list[Any]]) -> dict[str, Script]:
    """Each subagent's turns, by the start of its task."""

    def investigate(turn: Turn) -> Reply:
        return call(
            "delegate_task",
            subagent="investigator",
            task=f"investigate: {QUESTION}",
            background=True,
        )

    def wait(turn: Turn) -> Reply:
        handle = turn.last.json()
        seen["lead"].append(handle)
        return call("wait_subagent", run_id=handle["run_id"])

    def write(turn: Turn) -> Reply:
        notes = turn.last.json()
        seen["lead"].append(notes)
        return call("delegate_task", subagent="writer", task=f"write: {notes['final_result']}")

    def answer(turn: Turn) -> Reply:
        written = turn.last.json()
        seen["lead"].append(written)
        return text(written["final_result"])

    def search(turn: Turn) -> Reply:
        return call("search_notes", query="login signing key cache")

    def facts(turn: Turn) -> Reply:
        seen["investigator"].append(turn.last.json())
        return text(FACTS)

    def report(turn: Turn) -> Reply:
        seen["writer"].append(_task(turn.request.body))
        return text("REPORT: a key rotation met a stale cache.")

    return {
        QUESTION: [investigate, wait, write, answer],
        "investigate:": [search, facts],
        "write:": [report],
    }


def dispatcher(seen: dict[str, list[Any]]) -> list[Callable[[Turn], Reply]]:
    by_task = scripts(seen)
    count = sum(len(steps) for steps in by_task.values())

    def step(turn: Turn) -> Reply:
        task = _task(turn.request.body)
        for start, steps in by_task.items():
            if task.startswith(start):
                return steps.pop(0)(turn)
        raise AssertionError(f"no script for the task {task!r}")

    return [step] * count


def _module() -> dict[str, Any]:
    return runpy.run_path(str(EXAMPLE), run_name="research_team")


@pytest.mark.parametrize(
    ("provider", "fake", "path"),
    [("anthropic", FakeAnthropic, ""), ("openai", FakeResponses, "/v1")],
)
async def test_the_team_researches_writes_and_reports_what_it_spent(
    provider: str,
    fake: type[FakeModelServer],
    path: str,
    mock_clock: trio.testing.MockClock,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-not-a-key")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-key")
    example = _module()
    seen: dict[str, list[Any]] = {"lead": [], "investigator": [], "writer": []}
    with fake(dispatcher(seen)) as server:
        subagents = example["team"](
            provider, base_url=server.url + path, prices=td.Prices(input=1.0, output=2.0)
        )
        report, spent = await example["research"](
            QUESTION, subagents, td.Budget(max_total_tokens=10_000)
        )
    assert server.problems == []
    assert server.remaining == 0
    assert report == "REPORT: a key rotation met a stale cache."
    # The investigator's tool searched the notes; the writer got its facts.
    assert [note["id"] for note in seen["investigator"][0]] == ["n3", "n1", "n5"]
    assert seen["writer"] == [f"write: {FACTS}"]
    assert seen["lead"][0]["status"] in ("pending", "running")
    # Seven model calls in the tree: the lead's 4, the investigator's 2, the writer's 1.
    per_call = 20 if provider == "anthropic" else 15
    assert spent.requests == 7
    assert spent.total_tokens == 7 * per_call
    assert spent.cost_usd > 0
    out = capsys.readouterr().out
    assert "[lead] turn 4: answered" in out


async def test_a_budget_too_small_stops_the_team_and_the_bill_is_still_printed(
    mock_clock: trio.testing.MockClock,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-not-a-key")
    example = _module()
    seen: dict[str, list[Any]] = {"lead": [], "investigator": [], "writer": []}
    with FakeAnthropic(dispatcher(seen)) as server:
        subagents = example["team"]("anthropic", base_url=server.url)
        # 20 tokens a call: the lead's first call leaves nothing for a second.
        report, spent = await example["research"](
            QUESTION, subagents, td.Budget(max_total_tokens=20)
        )
    assert report is None
    assert spent.total_tokens >= 20
    assert "the team stopped" in capsys.readouterr().err


def test_the_example_runs_as_a_script(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: dict[str, list[Any]] = {"lead": [], "investigator": [], "writer": []}
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-not-a-key")
    with FakeAnthropic(dispatcher(seen)) as server:
        monkeypatch.setenv("RESEARCH_TEAM_BASE_URL", server.url)
        monkeypatch.setattr(sys, "argv", ["research_team.py", "--prices", "3,15", QUESTION])
        with pytest.raises(SystemExit) as ended:
            runpy.run_path(str(EXAMPLE), run_name="__main__")
    assert ended.value.code == 0
    out = capsys.readouterr().out
    assert "REPORT: a key rotation met a stale cache." in out
    assert "(investigator) turn 1: tools ['search_notes']" in out
    assert "the team spent 7 model calls, 105 input and 35 output tokens, $0.0008" in out
