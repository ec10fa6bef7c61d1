"""Runs on Temporal when processes are lost: a worker killed or stopped, a parent killed.

Each test starts worker or parent processes of its own, which takes a few
seconds each on a busy machine: this module runs with ``make test-temporal``,
not in ``make test`` (see docs/testing.md).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio

import trio_delegate as td

from . import temporal_runners
from .temporal_runners import marks
from .temporal_support import (
    GUARD,
    LEASE,
    TESTS,
    Pool,
    open_on,
    pending_activities,
    started,
    status,
    until,
)

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
            await started(handle.run_id)
            [first] = marks("started", handle.run_id)
            victim = int(first.read_text())
            os.kill(victim, signal.SIGKILL)
            result = await parent.wait(handle.run_id)
        assert isinstance(result, td.RunResult)
        survivor = next(w for w in pool.workers if w.pid != victim)
        assert result.final_result == {"pid": survivor.pid, "attempts": 2}
        assert len(marks("started", handle.run_id)) == 2
        assert status(temporal_address, handle.run_id) == "COMPLETED"
    finally:
        codes = pool.stop()
        if previous is not None:
            os.environ["TD_TEMPORAL_MARKERS"] = previous
    assert sorted(codes) == [-signal.SIGKILL, 0]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_stopped_worker_cleans_up_and_hands_the_run_on(
    temporal_address: str, tmp_path: Path, signum: int
) -> None:
    pool = Pool(temporal_address, tmp_path, "tq-stopped-worker")
    previous = os.environ.get("TD_TEMPORAL_MARKERS")
    os.environ["TD_TEMPORAL_MARKERS"] = str(pool.markers)
    try:
        [first] = pool.start_workers(1)
        async with open_on(pool) as rt, rt.open_parent() as parent:
            handle = await parent.start("slow", "hand on")
            await started(handle.run_id)
            # The worker cancels its run, waits for the cleanup, exits 0.
            assert await trio.to_thread.run_sync(first.stop, signum) == 0
            assert [int(p.read_text()) for p in marks("cleaned", handle.run_id)] == [first.pid]
            [second] = pool.start_workers(1)
            await started(handle.run_id, 2)
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
        with trio.fail_after(GUARD):
            while b"started\n" not in output:
                chunk = await parent.stdout.receive_some()
                assert chunk, "the parent ended early"
                output += chunk
        run_ids = output.decode().split()[:-1]
        assert len(run_ids) == 2
        for run_id in run_ids:
            await started(run_id)
        parent.kill()
        await parent.wait()
        # Nobody renews the lease any more: the workflows cancel their runners.
        for run_id in run_ids:
            await until(lambda run_id=run_id: status(pool.address, run_id) != "RUNNING", "closed")
            assert status(pool.address, run_id) == "FAILED"
            assert len(marks("cleaned", run_id)) == 1
    finally:
        if parent.returncode is None:
            parent.kill()
            await parent.wait()


async def test_worker_takes_at_most_max_concurrent_runs(
    temporal_address: str, tmp_path: Path
) -> None:
    pool = Pool(temporal_address, tmp_path, "tq-one-slot", max_concurrent_runs=1)
    previous = os.environ.get("TD_TEMPORAL_MARKERS")
    os.environ["TD_TEMPORAL_MARKERS"] = str(pool.markers)
    try:
        pool.start_workers(1)
        async with open_on(pool) as rt, rt.open_parent() as parent:
            first = await parent.start("slow", "first")
            await started(first.run_id)
            second = await parent.start("slow", "second")
            # Its activity is scheduled: a worker with a free slot would take it now.
            await until(lambda: bool(pending_activities(pool.address, second.run_id)), "queued")
            parent.cancel(first.run_id)
            with pytest.raises(td.RunCancelledError):
                await parent.wait(first.run_id)
            await started(second.run_id)
            [cleaned] = marks("cleaned", first.run_id)
            [begun] = marks("started", second.run_id)
            # The second run began only once the first had ended, cleanup included.
            assert begun.stat().st_mtime_ns >= cleaned.stat().st_mtime_ns
    finally:
        codes = pool.stop()
        if previous is not None:
            os.environ["TD_TEMPORAL_MARKERS"] = previous
    assert codes == [0]
