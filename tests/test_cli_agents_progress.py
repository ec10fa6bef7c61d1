"""Agent CLIs report progress from their streamed events: each turn and tool call.

The first tests run the bundled ``claude`` and ``codex`` against a fake model
API (see ``tests/fakes``); the others run a stand-in CLI that prints given
events, to pin each event down. Real processes and real time: every wait is
bounded.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

import trio_delegate as td
from trio_delegate._runners._agents import AgentCLIRunner
from trio_delegate._runners._command import LINE_BYTES

from .fakes import Hold, Reply, Step, Usage, call
from .test_cli_agents_subagents import agent, no_process_left, parent_for


async def progress_reaching(parent: td.Parent, run_id: str, seq: int) -> td.Progress:
    """The run's progress once it has *seq* reports."""
    with trio.fail_after(30):
        # The CLI is another process: nothing here can signal its report.
        while (progress := parent.status(run_id).progress) is None or progress.seq < seq:  # noqa: ASYNC110
            await trio.sleep(0.02)
    return progress


async def test_claude_codes_tool_calls_and_text_are_progress_as_they_happen(
    tmp_path: Path,
) -> None:
    script: list[Step] = [call("Read", file_path=str(tmp_path / "work" / "notes.txt")), Hold()]
    with agent("claude", tmp_path, script) as cli:
        (cli.work / "notes.txt").write_text("the notes")
        subagent = cli.subagent()
        async with parent_for(subagent) as parent:
            handle = await parent.start("agent", "read the notes")
            # While the model still thinks about its second turn, the first
            # turn's tool call is already there.
            first = await progress_reaching(parent, handle.run_id, 1)
            assert first == td.Progress("tool call: Read", 1.0, None, 1)
            cli.fake.release()
            with trio.fail_after(30):
                done = await parent.wait(handle.run_id)
            assert isinstance(done, td.RunResult)
            last = parent.status(handle.run_id).progress
        await no_process_left(cli)
    # Released, the held turn answers "(released)", which ends the run.
    assert done.final_result == "(released)"
    assert last == td.Progress("(released)", 2.0, None, 2)


async def test_codexs_messages_and_turns_are_progress(tmp_path: Path) -> None:
    sent = Usage(
        input_tokens=100, output_tokens=20, cache_read_input_tokens=30, reasoning_output_tokens=4
    )
    with agent("codex", tmp_path, [Reply(text="the answer", usage=sent)]) as cli:
        subagent = cli.subagent()
        async with parent_for(subagent) as parent:
            with trio.fail_after(30):
                done = await parent.delegate("agent", "anything")
            handle = parent.status(done.run_id)
        await no_process_left(cli)
    assert done.final_result == "the answer"
    assert handle.progress == td.Progress("turn 1 completed", 2.0, None, 2)
    # The usage is read as before, exactly.
    assert handle.usage == td.Usage(
        input_tokens=100, output_tokens=20, cache_read_input_tokens=30, reasoning_output_tokens=4
    )


def stand_in(tmp_path: Path, lines: list[str]) -> str:
    """A CLI that prints *lines*, then waits for the file ``go`` before it ends."""
    script = tmp_path / "stand-in"
    script.write_text(
        f"#!{sys.executable}\n"
        "import os, sys, time\n"
        "sys.stdin.read()\n"
        f"for line in {lines!r}:\n    print(line, flush=True)\n"
        f"while not os.path.exists({str(tmp_path / 'go')!r}):\n    time.sleep(0.01)\n"
        'print(\'{"type": "result", "subtype": "success", "result": "ok"}\')\n'
    )
    script.chmod(0o755)
    return str(script)


CLAUDE_EVENTS: list[Any] = [
    {"type": "system", "subtype": "init", "session_id": "s-1"},
    {"type": "assistant", "message": {"content": [{"type": "text", "text": " Looking\n now "}]}},
    {
        "type": "assistant",
        "message": {
            "content": [
                {"type": "tool_use", "name": "Bash", "input": {"command": "ls"}},
                {"type": "tool_use", "name": "Grep", "input": {}},
            ]
        },
    },
    {"type": "user", "message": {"content": [{"type": "tool_result", "content": "a b"}]}},
    # Not steps: malformed or empty.
    {"type": "assistant", "message": "hello"},
    {"type": "assistant", "message": {"content": [{"type": "tool_use", "name": 3}, "x"]}},
    {"type": "assistant", "message": {"content": [{"type": "text", "text": "   "}]}},
]
CLAUDE_STEPS = ["Looking now", "tool call: Bash", "tool call: Grep"]

CODEX_EVENTS: list[Any] = [
    {"type": "thread.started", "thread_id": "t-1"},
    {"type": "turn.started"},
    {"type": "item.started", "item": {"type": "command_execution", "command": "ls"}},
    {"type": "item.completed", "item": {"type": "command_execution", "command": "ls  -la"}},
    {"type": "item.completed", "item": {"type": "reasoning", "text": "hmm"}},
    {"type": "item.completed", "item": {"type": "mcp_tool_call", "server": "s", "tool": "t"}},
    {"type": "item.completed", "item": {"type": "web_search", "query": "trio"}},
    {
        "type": "item.completed",
        "item": {"type": "file_change", "changes": [{"path": "a.py"}, {"path": "b.py"}, 3]},
    },
    {"type": "item.completed", "item": {"type": "agent_message", "text": "done"}},
    {"type": "turn.completed", "usage": {"input_tokens": 1, "output_tokens": 1}},
    {"type": "item.completed", "item": "nothing"},
    {"type": "item.completed", "item": {"type": "command_execution", "command": ["ls"]}},
    {"type": "turn.completed"},
]
CODEX_STEPS = [
    "ran: ls -la",
    "tool call: s/t",
    "web search: trio",
    "changed: a.py, b.py",
    "done",
    "turn 1 completed",
    "turn 2 completed",
]


@pytest.mark.parametrize(
    ("kind", "events", "steps"),
    [("claude", CLAUDE_EVENTS, CLAUDE_STEPS), ("codex", CODEX_EVENTS, CODEX_STEPS)],
)
async def test_each_step_of_the_events_is_one_report_as_it_comes(
    tmp_path: Path, kind: str, events: list[Any], steps: list[str]
) -> None:
    # None of these is a step: not JSON, not an object, too deep, too long.
    deep = '{"type": "assistant", "message": ' + "[" * 10_000 + "]" * 10_000 + "}"
    # A step on a line too long to read as it comes is not reported.
    long = (events[1] if kind == "claude" else events[-1]) | {"pad": "x" * LINE_BYTES}
    hostile = ["not json", "[1]", "{broken", deep, json.dumps(long)]
    lines = [json.dumps(event) for event in events] + hostile
    program = stand_in(tmp_path, lines)
    subagent = td.Subagent("agent", AgentCLIRunner(kind, program))  # type: ignore[arg-type]
    async with parent_for(subagent, failing=True) as parent:
        handle = await parent.start("agent", "go")
        # Every step is reported while the CLI still runs.
        seen = await progress_reaching(parent, handle.run_id, len(steps))
        assert seen == td.Progress(steps[-1], float(len(steps)), None, len(steps))
        (tmp_path / "go").touch()
        with trio.fail_after(30):
            while parent.status(handle.run_id).status.is_terminal is False:  # noqa: ASYNC110
                await trio.sleep(0.02)
        # Nothing after the steps was one: the count stays.
        assert parent.status(handle.run_id).progress == seen
