"""``trio-delegate serve`` driven by a real MCP client over stdio.

The ``mcp`` SDK's stdio client spawns the server as a process, as Claude
Code and Codex do, on a configuration whose subagents are small scripts.
These tests use real processes and real time: every wait is short and
bounded, so a hang fails instead of stalling.
"""

from __future__ import annotations

import os
import signal
import sys
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TextIO

import pytest
import trio

pytest.importorskip("mcp")

from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import CallToolResult, TextContent

import trio_delegate as td

from .processes import WRITE_PID, alive, gone, read_pid

PY = sys.executable
ROOT = Path(__file__).resolve().parent.parent

SCRIPTS = {
    "echo.py": """
        import os, sys
        print("echo:", sys.stdin.read(), "as", os.environ["TRIO_DELEGATE_SUBAGENT"])
        """,
    "measure.py": """
        import json, sys
        print(json.dumps({"length": len(sys.stdin.read())}))
        """,
    # Publishes its pid (and the server's, its parent) under its run id, then works.
    "sleeper.py": WRITE_PID
    + """
import time
run = os.environ["TRIO_DELEGATE_RUN_ID"]
write_pid(os.path.join("pids", run + ".server"), os.getppid())
write_pid(os.path.join("pids", run))
time.sleep(60)
""",
    "failing.py": """
        import sys
        sys.stdin.read()
        print("loading the model", file=sys.stderr)
        print("error: the model is unavailable", file=sys.stderr)
        sys.exit(5)
        """,
}

CONFIG = f"""
[runtime]
subagent_timeout_seconds = 20
max_concurrent_runs = 4

[[subagents]]
name = "echo"
description = "Echoes the task."
command = ['{PY}', "echo.py"]

[[subagents]]
name = "measure"
description = "Measures the task."
command = ['{PY}', "measure.py"]
final_schema = {{ type = "object", required = ["length"] }}

[[subagents]]
name = "sleeper"
description = "Works for a minute."
command = ['{PY}', "sleeper.py"]
kill_grace_seconds = 1

[[subagents]]
name = "failing"
description = "Always fails."
command = ['{PY}', "failing.py"]
"""


@pytest.fixture
def config(tmp_path: Path) -> Path:
    for name, body in SCRIPTS.items():
        (tmp_path / name).write_text(textwrap.dedent(body))
    (tmp_path / "pids").mkdir()
    path = tmp_path / "subagents.toml"
    path.write_text(CONFIG)
    return path


@asynccontextmanager
async def serve(
    config: Path, cwd: Path | None = None, *, errlog: TextIO | None = None
) -> AsyncIterator[Client]:
    """A client connected to ``trio-delegate serve --config CONFIG`` over stdio."""
    params = StdioServerParameters(
        command=PY,
        args=["-m", "trio_delegate", "serve", "--config", str(config)],
        cwd=cwd,
    )
    transport = stdio_client(params, errlog=errlog if errlog is not None else sys.stderr)
    async with Client(transport, mode="legacy") as client:
        yield client


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """A successful call's structured content (checked against its text)."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    return result.structured_content


async def fail(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """An error result's payload; its text is the message, then the payload."""
    result: CallToolResult = await client.call_tool(tool, arguments)
    assert result.is_error
    assert isinstance(result.structured_content, dict)
    error: dict[str, Any] = result.structured_content["error"]
    [content] = result.content
    assert isinstance(content, TextContent)
    assert content.text.startswith(error["message"] + "\n\n{")
    return error


async def test_every_tool_over_a_real_stdio_connection(config: Path) -> None:
    pids = config.parent / "pids"
    with trio.fail_after(15):
        async with serve(config) as client:
            listed = [tool.name for tool in (await client.list_tools()).tools]
            assert listed == [
                "delegate_task",
                "subagent_status",
                "wait_subagent",
                "cancel_subagent",
                "continue_subagent",
                "list_subagent_runs",
            ]

            # foreground, text and JSON results
            echoed = await call(client, "delegate_task", subagent="echo", task="hi")
            assert echoed["final_result"] == "echo: hi as echo"
            assert echoed["task_summary"] == "hi"
            measured = await call(client, "delegate_task", subagent="measure", task="four")
            assert measured["final_result"] == {"length": 4}

            # background: a timed wait answers "running"; cancel kills the process
            started = await call(
                client, "delegate_task", subagent="sleeper", task="work", background=True
            )
            run_id = started["run_id"]
            assert started["status"] == "running"
            pid = await read_pid(pids / run_id)
            assert alive(pid)
            status = await call(client, "subagent_status", run_id=run_id)
            assert status == {"run_id": run_id, "subagent": "sleeper", "status": "running"}
            timed = await call(client, "wait_subagent", run_id=run_id, timeout=0.2)
            assert timed["status"] == "running"
            ack = await call(client, "cancel_subagent", run_id=run_id)
            assert ack["cancel_requested"] is True
            cancelled = await fail(client, "wait_subagent", run_id=run_id)
            assert cancelled["type"] == "run_cancelled"
            assert cancelled["run_id"] == run_id
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)

            # a failure carries the exit code and the end of stderr
            failed = await fail(client, "delegate_task", subagent="failing", task="go")
            assert failed["type"] == "run_failed"
            assert failed["error_type"] == "CommandFailedError"
            assert "exited with code 5" in failed["message"]
            assert "error: the model is unavailable" in failed["message"]
            replaced = await call(
                client, "delegate_task", subagent="echo", task="retry", replaces=failed["run_id"]
            )
            assert replaced["final_result"] == "echo: retry as echo"

            # a continuation is a new run of the same subagent
            continued = await call(
                client, "continue_subagent", run_id=echoed["run_id"], message="more"
            )
            assert continued["final_result"] == "echo: more as echo"
            assert continued["run_id"] != echoed["run_id"]

            # bad arguments are errors a model can act on
            missing = await fail(client, "delegate_task", subagent="echo")
            assert missing["type"] == "invalid_arguments"
            assert "task" in missing["message"]
            unknown = await fail(client, "delegate_task", subagent="ghost", task="x")
            assert unknown["type"] == "unknown_subagent"
            assert unknown["allowed"] == ["echo", "measure", "sleeper", "failing"]
            typed = await fail(client, "wait_subagent", run_id=run_id, timeout="soon")
            assert typed["type"] == "invalid_arguments"
            assert (await fail(client, "subagent_status", run_id="run_x"))["type"] == "unknown_run"
            assert (await fail(client, "no_such_tool"))["type"] == "invalid_arguments"


async def test_a_client_disconnect_kills_that_sessions_processes(config: Path) -> None:
    pids = config.parent / "pids"
    with trio.fail_after(15):
        async with serve(config) as client:
            runs = [
                (
                    await call(
                        client, "delegate_task", subagent="sleeper", task=str(n), background=True
                    )
                )["run_id"]
                for n in range(2)
            ]
            workers = [await read_pid(pids / run) for run in runs]
            server = await read_pid(pids / f"{runs[0]}.server")
            assert all(alive(pid) for pid in workers)
        # The client closed stdin and waited for the server to exit; the
        # server cancelled its runs and reaped their processes first.
        for pid in [*workers, server]:
            await gone(pid)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_a_signal_to_the_server_kills_its_runs_and_logs_them_before_it_exits(
    config: Path, signum: signal.Signals
) -> None:
    pids = config.parent / "pids"
    log = config.parent / "stderr.log"
    with log.open("w") as errlog, trio.fail_after(15):
        async with serve(config, errlog=errlog) as client:
            run = (
                await call(client, "delegate_task", subagent="sleeper", task="x", background=True)
            )["run_id"]
            worker = await read_pid(pids / run)
            server = await read_pid(pids / f"{run}.server")
            os.kill(server, signum)
            await gone(worker)
            await gone(server)
    lines = log.read_text().splitlines()
    [ready] = [line for line in lines if "ready:" in line]
    assert "subagents echo, measure, sleeper, failing" in ready
    assert "store none" in ready
    assert "foreground limit 45 s" in ready
    assert "default deadline 20 s" in ready
    assert "4 concurrent runs per connection" in ready
    # The run the client left behind is named, as it was, before it is cancelled.
    [cut] = [line for line in lines if "was cut short and" in line]
    assert cut.endswith(" was cut short and left 1 run behind:")
    assert (
        f"  - {run} (sleeper): still running when the connection was cut short, "
        "so it is being cancelled"
    ) in lines
    assert any(f"stopped by {signum.name}" in line for line in lines)


async def test_the_example_configuration_serves_from_the_repository_root() -> None:
    with trio.fail_after(15):
        async with serve(Path("examples/subagents.toml"), cwd=ROOT) as client:
            summary = await call(
                client,
                "delegate_task",
                subagent="summarizer",
                task="Trio runs tasks in nurseries. Nothing leaks.",
            )
            assert summary["final_result"] == {
                "summary": "Trio runs tasks in nurseries.",
                "words": 7,
            }
            outline = await call(client, "delegate_task", subagent="outliner", task="One. Two.")
            assert outline["final_result"] == "- One.\n- Two."
            checked = await call(client, "delegate_task", subagent="flaky", task="[ok] 2+2=4")
            assert checked["final_result"] == "checked: [ok] 2+2=4"
            failed = await fail(client, "delegate_task", subagent="flaky", task="[fail] x")
            assert "exited with code 3" in failed["message"]


async def test_a_configured_store_records_every_run(config: Path) -> None:
    text = CONFIG.replace("[runtime]\n", '[runtime]\nstore = "state/runs.db"\n')
    await trio.Path(config).write_text(text)
    with trio.fail_after(30):
        async with serve(config) as client:
            done = await call(client, "delegate_task", subagent="echo", task="keep")
            failed = await fail(client, "delegate_task", subagent="failing", task="x")
    store = td.SQLiteStore(config.parent / "state" / "runs.db")
    record = await store.get(done["run_id"])
    assert record is not None
    assert record.status is td.RunStatus.COMPLETED
    assert record.final_result == done["final_result"]
    broken = await store.get(failed["run_id"])
    assert broken is not None
    assert broken.status is td.RunStatus.FAILED
