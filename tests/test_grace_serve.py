"""Contract §18: ``trio-delegate serve`` exits on its signals and at the end of its
input whatever its runners do.

A real server process serves a Python runner that shields itself from every
cancellation. The only bound on time is the outer hang guard; the exit is
judged by the exit status and by what the server wrote on stderr.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import trio

from .helpers import mcp_initialize

pytest.importorskip("mcp")

PY = sys.executable
GUARD_SECONDS = 30

RUNNER = """
    import pathlib
    import trio

    async def run(ctx):
        pathlib.Path(__file__).with_name("started").write_text(ctx.run_id)
        # Never stops: every cancellation is shielded away.
        with trio.CancelScope(shield=True):
            await trio.sleep(3600)
        return "never"
    """

CONFIG = """
[runtime]
cancel_grace_seconds = {grace}

[[subagents]]
name = "stubborn"
description = "Ignores cancellation."
python = "stubborn:run"
"""


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"


async def _serve_a_stubborn_run(tmp_path: Path, grace: float) -> tuple[trio.Process, str]:
    (tmp_path / "stubborn.py").write_text(textwrap.dedent(RUNNER))
    config = tmp_path / "server.toml"
    config.write_text(CONFIG.format(grace=grace))
    stderr = (tmp_path / "stderr.log").open("wb")
    process = await trio.lowlevel.open_process(
        [PY, "-m", "trio_delegate", "serve", "--config", str(config)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        cwd=tmp_path,
    )
    stderr.close()
    assert process.stdin is not None
    await process.stdin.send_all(
        _line(mcp_initialize())
        + _line({"jsonrpc": "2.0", "method": "notifications/initialized"})
        + _line(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {
                    "name": "delegate_task",
                    "arguments": {"subagent": "stubborn", "task": "x", "background": True},
                },
            }
        )
    )
    started = tmp_path / "started"
    while not started.exists():  # noqa: ASYNC110 - written by the server's runner
        await trio.sleep(0.01)
    return process, started.read_text()


@pytest.mark.parametrize(
    ("stop", "status"),
    [
        # The connection's runs are decided within the grace: it ends by the signal.
        pytest.param("SIGTERM", -signal.SIGTERM, id="sigterm"),
        # A second signal does not wait out the grace.
        # (With a grace of 20 s: an exit after the grace would end by the signal.)
        pytest.param("SIGTERM SIGTERM", 128 + signal.SIGTERM, id="second-sigterm"),
        pytest.param("SIGINT", -signal.SIGINT, id="sigint"),
        # The runtime's close outlasts the grace: the server exits anyway.
        pytest.param("EOF", 1, id="end-of-stdin"),
    ],
)
async def test_serve_exits_within_the_grace_whatever_its_runners_do(
    tmp_path: Path, stop: str, status: int
) -> None:
    steps = stop.split()
    grace = 20 if len(steps) > 1 else 1
    log_path = tmp_path / "stderr.log"
    with trio.fail_after(GUARD_SECONDS):
        process, run_id = await _serve_a_stubborn_run(tmp_path, grace)
        try:
            for step in steps:
                if step == "EOF":
                    assert process.stdin is not None
                    await process.stdin.aclose()
                else:
                    process.send_signal(getattr(signal, step))
                    # Signals sent together may arrive as one: wait until it was heard.
                    while "cut short" not in log_path.read_text():  # noqa: ASYNC110
                        await trio.sleep(0.01)
            await process.wait()
        finally:
            if process.returncode is None:  # only when the guard fired
                process.kill()
                with trio.CancelScope(shield=True):
                    await process.wait()
    assert process.returncode == status
    log = log_path.read_text()
    [abandoned] = [line for line in log.splitlines() if "abandoning the runs" in line]
    assert run_id in abandoned
    assert "subagent 'stubborn'" in abandoned
