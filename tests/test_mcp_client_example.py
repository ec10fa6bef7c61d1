"""``examples/mcp_client.py``: background, wait and cancel over one real MCP connection.

The example spawns ``trio-delegate serve`` on ``examples/subagents.toml``
with the ``mcp`` SDK's stdio client, as the MCP page shows for trying the
server by hand; run here as a user runs it, a process of its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp")

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "mcp_client.py"


def test_the_mcp_client_example_starts_waits_and_cancels() -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "1"],
        capture_output=True,
        text=True,
        timeout=90,  # a hang guard: the example's runs take about a second
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    calls = [line.split("(", 1)[0] for line in lines[0::2]]
    answers = [json.loads(line.removeprefix("  -> ")) for line in lines[1::2]]
    assert calls == [
        "delegate_task",
        "delegate_task",
        "wait_subagent",
        "subagent_status",
        "cancel_subagent",
        "wait_subagent",
        "wait_subagent",
    ]
    first, second, timed_wait, status, cancel, cancelled, finished = answers
    # Admission acks: the number of seconds of the slow subagent's task is text.
    assert first["status"] == second["status"] == "running"
    assert timed_wait == second  # the wait gave up; the run went on
    assert status["status"] == "running"
    assert cancel["cancel_requested"] is True
    assert cancelled["error"]["type"] == "run_cancelled"
    assert cancelled["error"]["run_id"] == second["run_id"]
    assert finished["final_result"] == "worked for 1 s"
