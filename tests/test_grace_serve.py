"""Contract §18: ``trio-delegate serve`` exits on its signals and at the end of its
input whatever its runners do, and a client that stops reading ends the
connection as the end of its input does.

A real server process serves a Python runner that shields itself from every
cancellation, or one that holds the event loop. The only bound on time is the
outer hang guard; the exit is judged by the exit status and by what the
server wrote on stderr.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from .helpers import mcp_initialize

pytest.importorskip("mcp")

PY = sys.executable
GUARD_SECONDS = 60

RUNNER = """
    import pathlib
    import time
    import trio

    def started(ctx, name):
        pathlib.Path(__file__).with_name(f"started-{name}").write_text(ctx.run_id)

    async def run(ctx):
        started(ctx, "stubborn")
        # Never stops: every cancellation is shielded away.
        with trio.CancelScope(shield=True):
            await trio.sleep(3600)
        return "never"

    async def hold(ctx):
        started(ctx, "holder")
        # Holds the event loop itself: no task of the server runs again.
        time.sleep(3600)
        return "never"

    async def patient(ctx):
        started(ctx, "patient")
        await trio.sleep_forever()

    async def waiter(ctx):
        started(ctx, "waiter")
        go = pathlib.Path(__file__).with_name("go")
        while not go.exists():
            await trio.sleep(0.01)
        return "done"
    """

CONFIG = """
[runtime]
cancel_grace_seconds = {grace}

[[subagents]]
name = "stubborn"
description = "Ignores cancellation."
python = "stubborn:run"

[[subagents]]
name = "holder"
description = "Blocks the event loop."
python = "stubborn:hold"

[[subagents]]
name = "patient"
description = "Runs until cancelled."
python = "stubborn:patient"

[[subagents]]
name = "waiter"
description = "Returns once the file go exists."
python = "stubborn:waiter"
"""


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"


async def _serve(
    tmp_path: Path, grace: float, runs: list[tuple[str, bool]], stdout: int = subprocess.DEVNULL
) -> tuple[trio.Process, list[str]]:
    """A server with *runs* (subagent, background) started; their run ids."""
    (tmp_path / "stubborn.py").write_text(textwrap.dedent(RUNNER))
    config = tmp_path / "server.toml"
    config.write_text(CONFIG.format(grace=grace))
    stderr = (tmp_path / "stderr.log").open("wb")
    process = await trio.lowlevel.open_process(
        [PY, "-m", "trio_delegate", "serve", "--config", str(config)],
        stdin=subprocess.PIPE,
        stdout=stdout,
        stderr=stderr,
        cwd=tmp_path,
    )
    stderr.close()
    assert process.stdin is not None
    requests = _line(mcp_initialize()) + _line(
        {"jsonrpc": "2.0", "method": "notifications/initialized"}
    )
    for request_id, (subagent, background) in enumerate(runs, start=2):
        arguments = {"subagent": subagent, "task": "x", "background": background}
        requests += _line(
            {
                "jsonrpc": "2.0",
                "id": request_id,
                "method": "tools/call",
                "params": {"name": "delegate_task", "arguments": arguments},
            }
        )
    await process.stdin.send_all(requests)
    run_ids = []
    for subagent, _ in runs:
        started = tmp_path / f"started-{subagent}"
        while not started.exists():  # noqa: ASYNC110 - written by the server's runner
            await trio.sleep(0.01)
        run_ids.append(started.read_text())
    return process, run_ids


async def _serve_a_stubborn_run(
    tmp_path: Path, grace: float, subagent: str = "stubborn"
) -> tuple[trio.Process, str]:
    process, [run_id] = await _serve(tmp_path, grace, [(subagent, True)])
    return process, run_id


@contextlib.asynccontextmanager
async def _reaped(process: trio.Process) -> AsyncIterator[None]:
    """Kill *process* on the way out, should the hang guard fire before it ended."""
    try:
        yield
    finally:
        if process.returncode is None:  # only when the guard fired
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()


@pytest.mark.parametrize(
    ("subagent", "stop", "status", "named"),
    [
        # The connection's runs are decided within the grace: it ends by the signal.
        pytest.param("stubborn", "SIGTERM", -signal.SIGTERM, "stubborn'", id="sigterm"),
        # A second signal does not wait out the grace.
        # (With a grace of 20 s: an exit after the grace would end by the signal.)
        pytest.param(
            "stubborn", "SIGTERM SIGTERM", 128 + signal.SIGTERM, "stubborn'", id="second-sigterm"
        ),
        pytest.param("stubborn", "SIGINT", -signal.SIGINT, "stubborn'", id="sigint"),
        # The runtime's close outlasts the grace: the server exits anyway.
        pytest.param("stubborn", "EOF", 1, "stubborn'", id="end-of-stdin"),
        # A runner holds the event loop, Trio's signal watcher and the
        # transport's reader with it: the grace runs out all the same. The run
        # never heard its cancellation (the loop that would deliver it is held).
        pytest.param(
            "holder", "SIGTERM", 128 + signal.SIGTERM, "holder', running)", id="held-loop-sigterm"
        ),
        pytest.param(
            "holder", "SIGINT", 128 + signal.SIGINT, "holder', running)", id="held-loop-sigint"
        ),
        pytest.param("holder", "EOF", 1, "holder', running)", id="held-loop-end-of-stdin"),
    ],
)
async def test_serve_exits_within_the_grace_whatever_its_runners_do(
    tmp_path: Path, subagent: str, stop: str, status: int, named: str
) -> None:
    steps = stop.split()
    grace = 20 if len(steps) > 1 else 1
    log_path = tmp_path / "stderr.log"
    with trio.fail_after(GUARD_SECONDS):
        process, run_id = await _serve_a_stubborn_run(tmp_path, grace, subagent)
        async with _reaped(process):
            for step in steps[:-1]:
                process.send_signal(getattr(signal, step))
                # Signals sent together may arrive as one: wait until it was heard.
                while "cut short" not in log_path.read_text():  # noqa: ASYNC110
                    await trio.sleep(0.01)
            if steps[-1] == "EOF":
                assert process.stdin is not None
                await process.stdin.aclose()
            else:
                process.send_signal(getattr(signal, steps[-1]))
            assert await process.wait() == status
    log = log_path.read_text()
    [abandoned] = [line for line in log.splitlines() if "abandoning the runs" in line]
    assert f"{run_id} (subagent '{named}" in abandoned


@pytest.mark.parametrize(
    ("background", "other", "status"),
    [
        # A foreground call's answer meets the closed pipe. The other run is
        # cancelled and joined: the runtime closes cleanly.
        pytest.param(False, "patient", 0, id="answer"),
        # The notice of a background run's end does.
        pytest.param(True, "patient", 0, id="notice"),
        # The other run does not stop: the server exits after the grace, as
        # at the end of stdin.
        pytest.param(False, "stubborn", 1, id="stubborn-run"),
    ],
)
async def test_a_client_that_stops_reading_ends_the_connection(
    tmp_path: Path, background: bool, other: str, status: int
) -> None:
    log_path = tmp_path / "stderr.log"
    grace = 1 if status else 30
    with trio.fail_after(GUARD_SECONDS):
        process, [other_id, _] = await _serve(
            tmp_path, grace, [(other, True), ("waiter", background)], stdout=subprocess.PIPE
        )
        async with _reaped(process):
            assert process.stdout is not None
            await process.stdout.aclose()
            (tmp_path / "go").write_text("")
            # stdin stays open: the server does not wait for its end.
            assert await process.wait() == status
    log = log_path.read_text()
    assert "Traceback" not in log
    [ended] = [line for line in log.splitlines() if "stopped reading" in line]
    assert ended == (
        "trio-delegate: the client stopped reading (its end of stdout is closed); "
        "the connection ended and its runs were cancelled"
    )
    abandoned = [line for line in log.splitlines() if "abandoning the runs" in line]
    assert [other_id in line for line in abandoned] == ([True] if status else [])
