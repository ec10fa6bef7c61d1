"""The Claude Agent SDK and Codex SDK child runners report what their agent spent (and
the Claude Agent SDK runner its agent's progress).

Each drives the bundled CLI (``claude``, ``codex app-server``) through its
SDK against a fake model API on 127.0.0.1 that reports the usage numbers
given here, and checks the run's usage is exactly those numbers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

import trio_delegate as td

claude_agent_sdk = pytest.importorskip("claude_agent_sdk")
openai_codex = pytest.importorskip("openai_codex")

from claude_agent_sdk import ClaudeAgentOptions  # noqa: E402

from trio_delegate.adapters import claude, codex  # noqa: E402

from .fakes import FakeAnthropic, FakeResponses, Hold, Reply, Step, Usage, call  # noqa: E402
from .fakes.clients import claude_env, claude_program, codex_env, codex_program  # noqa: E402


def claude_options(tmp_path: Path, fake: FakeAnthropic, **more: Any) -> ClaudeAgentOptions:
    env = claude_env(tmp_path / "home", fake)
    return ClaudeAgentOptions(cli_path=claude_program(), env=env, cwd=str(tmp_path), **more)


def codex_config(tmp_path: Path, fake: FakeResponses) -> Any:
    env = codex_env(tmp_path / "home", fake)
    return openai_codex.CodexConfig(codex_bin=codex_program(), env=env, cwd=str(tmp_path))


async def test_a_claude_sdk_run_reports_the_tokens_the_model_reported(tmp_path: Path) -> None:
    sent = Usage(
        input_tokens=100,
        output_tokens=20,
        cache_read_input_tokens=30,
        cache_creation_input_tokens=7,
        reasoning_output_tokens=0,
    )
    with FakeAnthropic([Reply(text="done", usage=sent)]) as fake:
        subagent = td.Subagent("claude", claude.runner(claude_options(tmp_path, fake)))
        async with td.open_runtime([subagent]) as rt, rt.open_parent("host") as parent:
            with trio.fail_after(60):
                result = await parent.delegate("claude", "anything")
            spent = parent.usage(result.run_id)
    assert fake.problems == []
    assert result.final_result == "done"
    # Anthropic counts cached input apart; td.Usage counts it in input_tokens.
    assert spent.input_tokens == 100 + 30 + 7
    assert spent.output_tokens == 20
    assert spent.cache_read_input_tokens == 30
    assert spent.cache_creation_input_tokens == 7
    assert spent.requests == 1
    assert spent.cost_usd > 0  # Claude Code prices the tokens itself


async def test_what_a_failed_claude_sdk_run_spent_counts_all_the_same(tmp_path: Path) -> None:
    # One turn allowed, and the model wants a second: the query ends with
    # error_max_turns, after the first call's tokens were spent.
    sent = Usage(
        input_tokens=50,
        output_tokens=9,
        cache_read_input_tokens=4,
        cache_creation_input_tokens=2,
        reasoning_output_tokens=0,
    )
    script: list[Step] = [
        Reply(calls=call("Read", file_path=str(tmp_path / "x.txt")).calls, usage=sent)
    ]
    with FakeAnthropic(script) as fake:
        runner = claude.runner(claude_options(tmp_path, fake, max_turns=1))
        subagent = td.Subagent("claude", runner)
        config = td.Config(fail_closed=False)
        async with td.open_runtime([subagent], config=config) as rt, rt.open_parent() as parent:
            with trio.fail_after(60), pytest.raises(td.RunFailedError) as info:
                await parent.delegate("claude", "read x.txt")
            spent = parent.usage(info.value.run_id)
    assert "error_max_turns" in str(info.value) or "error result" in str(info.value)
    assert fake.problems == []
    assert spent.input_tokens == 50 + 4 + 2
    assert spent.output_tokens == 9
    assert spent.cache_read_input_tokens == 4
    assert spent.cache_creation_input_tokens == 2
    # num_turns as Claude Code counts them: the turn it refused counts too.
    assert spent.requests == 2


async def test_a_codex_sdk_run_reports_the_tokens_the_model_reported(tmp_path: Path) -> None:
    sent = Usage(
        input_tokens=100,
        output_tokens=20,
        cache_read_input_tokens=30,
        cache_creation_input_tokens=0,
        reasoning_output_tokens=4,
    )
    with FakeResponses([Reply(text="done", usage=sent)]) as fake:
        subagent = td.Subagent("codex", codex.runner(codex_config(tmp_path, fake)))
        async with td.open_runtime([subagent]) as rt, rt.open_parent("host") as parent:
            with trio.fail_after(60):
                result = await parent.delegate("codex", "anything")
            spent = parent.usage(result.run_id)
    assert fake.problems == []
    assert result.final_result == "done"
    # Codex counts cached input in input_tokens and reasoning in output_tokens.
    assert spent == td.Usage(
        input_tokens=100, output_tokens=20, cache_read_input_tokens=30, reasoning_output_tokens=4
    )


async def test_a_claude_sdk_runs_tool_calls_and_text_are_progress(tmp_path: Path) -> None:
    script: list[Step] = [call("Read", file_path=str(tmp_path / "notes.txt")), Hold()]
    with FakeAnthropic(script) as fake:
        subagent = td.Subagent("claude", claude.runner(claude_options(tmp_path, fake)))
        async with td.open_runtime([subagent]) as rt, rt.open_parent("host") as parent:
            handle = await parent.start("claude", "read the notes")
            with trio.fail_after(60):
                # The agent runs in another process: nothing here can signal its report.
                while parent.status(handle.run_id).progress is None:  # noqa: ASYNC110
                    await trio.sleep(0.02)
            # While the model still thinks about its second turn, the first
            # turn's tool call is already there.
            assert parent.status(handle.run_id).progress == td.Progress(
                "tool call: Read", 1.0, None, 1
            )
            fake.release()
            with trio.fail_after(60):
                done = await parent.wait(handle.run_id)
            assert isinstance(done, td.RunResult)
            last = parent.status(handle.run_id).progress
    assert done.final_result == "(released)"
    assert last == td.Progress("(released)", 2.0, None, 2)
