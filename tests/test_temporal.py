"""Runs on Temporal, against a real dev server and real worker processes.

The dev server and a pool of two workers start once (tests/temporal_support.py);
the tests judge outcomes, never durations: their waits are hang guards only.
Losing processes (a worker, a parent) is in tests/test_temporal_processes.py.
"""

from __future__ import annotations

import socket
from pathlib import Path

import attrs
import pytest
import trio

import trio_delegate as td
from trio_delegate._cli._main import main
from trio_delegate._server_config import ConfigError, load_server_config
from trio_delegate.adapters.temporal import TemporalRunner, temporal_runner

from .temporal_runners import marks
from .temporal_support import (
    GUARD,
    HEARTBEAT,
    LEASE,
    Pool,
    cli,
    open_on,
    started,
    status,
    until,
)

# -- results and context -----------------------------------------------------------


async def test_cap_temporal_foreground_result_carries_the_context(pool: Pool) -> None:
    schema = {"type": "object", "required": ["task"]}
    async with open_on(pool) as rt, rt.open_parent() as parent:
        result = await parent.delegate("echo", "find <b>things</b>", final_schema=schema)
    got = result.final_result
    assert got["run_id"] == result.run_id
    assert got["subagent"] == "echo"
    assert got["task"] == "find <b>things</b>"
    assert got["final_schema"] == schema
    assert got["history"] == []
    assert got["has_deadline"] is True
    assert got["pid"] in {worker.pid for worker in pool.workers}
    assert status(pool.address, result.run_id) == "COMPLETED"


async def test_what_a_runner_spent_on_the_worker_counts_for_its_run(pool: Pool) -> None:
    async with open_on(pool) as rt, rt.open_parent() as parent:
        result = await parent.delegate("spender", "spend")
        spent = parent.usage(result.run_id)
    assert result.final_result == "spent"
    # Two ctx.add_usage reports on the worker, and the Output's usage.
    assert spent == td.Usage(requests=2, input_tokens=150, output_tokens=26, cost_usd=0.875)
    assert rt.usage == spent


async def test_cap_temporal_background_results(pool: Pool) -> None:
    async with open_on(pool) as rt, rt.open_parent() as parent:
        handles = [await parent.start("echo", f"task {i}") for i in range(3)]
        results = [await parent.wait(handle.run_id) for handle in handles]
    assert [r.final_result["task"] for r in results] == ["task 0", "task 1", "task 2"]
    for handle in handles:
        assert status(pool.address, handle.run_id) == "COMPLETED"


async def test_cap_temporal_continuation_history_reaches_the_worker(pool: Pool) -> None:
    async with open_on(pool) as rt, rt.open_parent() as parent:
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


async def test_cap_temporal_cancel_settles_after_the_remote_cleanup(pool: Pool) -> None:
    async with open_on(pool) as rt, rt.open_parent() as parent:
        handle = await parent.start("slow", "wait")
        await started(handle.run_id)
        ack = parent.cancel(handle.run_id)
        assert ack.cancel_requested
        with pytest.raises(td.RunCancelledError):
            await parent.wait(handle.run_id)
        # The runner's shielded cleanup on the worker had finished by then.
        assert len(marks("cleaned", handle.run_id)) == 1
    assert status(pool.address, handle.run_id) == "CANCELED"


async def test_cap_temporal_child_runner_deadline_times_out_and_closes_the_workflow(
    pool: Pool,
) -> None:
    async with open_on(pool, timeout_seconds=1.0) as rt, rt.open_parent() as parent:
        with pytest.raises(td.RunTimedOutError) as caught:
            await parent.delegate("slow", "too long")
    run_id = caught.value.run_id
    assert run_id is not None
    assert len(marks("cleaned", run_id)) == 1
    assert status(pool.address, run_id) == "CANCELED"


async def test_cap_temporal_cancellation_reaches_child_from_a_cancelled_caller(pool: Pool) -> None:
    before = set(pool.markers.glob("started-*"))

    def new_run() -> str | None:
        fresh = [p for p in pool.markers.glob("started-*") if p not in before]
        return fresh[0].name.split("-")[1] if fresh else None

    async with open_on(pool) as rt, rt.open_parent() as parent:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(parent.delegate, "slow", "foreground")
            await until(lambda: new_run() is not None, "started")
            nursery.cancel_scope.cancel()
        run_id = new_run()
        assert run_id is not None
        # The caller's cancellation waited for the child's end, cleanup included.
        assert len(marks("cleaned", run_id)) == 1
        with pytest.raises(td.RunCancelledError):
            await parent.wait(run_id)
    assert status(pool.address, run_id) == "CANCELED"


async def test_cap_temporal_status_reads_the_run(pool: Pool) -> None:
    async with open_on(pool) as rt, rt.open_parent() as parent:
        handle = await parent.start("slow", "look")
        await started(handle.run_id)
        assert parent.status(handle.run_id).status is td.RunStatus.RUNNING
        parent.cancel(handle.run_id)
        with pytest.raises(td.RunCancelledError):
            await parent.wait(handle.run_id)
        assert parent.status(handle.run_id).status is td.RunStatus.CANCELLED


async def test_cap_temporal_timed_wait_leaves_the_run_going(pool: Pool) -> None:
    async with open_on(pool) as rt, rt.open_parent() as parent:
        handle = await parent.start("slow", "wait a bit")
        await started(handle.run_id)
        answer = await parent.wait(handle.run_id, timeout=0.2)
        assert answer == td.RunHandle(handle.run_id, "slow", td.RunStatus.RUNNING)
        assert status(pool.address, handle.run_id) == "RUNNING"
        assert marks("cleaned", handle.run_id) == []
        parent.cancel(handle.run_id)
        with pytest.raises(td.RunCancelledError):
            await parent.wait(handle.run_id)


@attrs.frozen
class Found:
    task: str
    subagent: str


async def test_cap_temporal_structured_results(pool: Pool) -> None:
    async with open_on(pool) as rt, rt.open_parent() as parent:
        result = await parent.delegate("typed", "a task", final_schema=Found)
        assert isinstance(result.final_result, Found)
        assert result.final_result == Found("a task", "typed")
        # A result that does not satisfy the schema fails the run.
        schema = {"type": "object", "required": ["missing"]}
        with pytest.raises(td.InvalidResultError, match="missing"):
            await parent.delegate("typed", "untyped", final_schema=schema)


@pytest.mark.parametrize("ending", ["exit", "cancelled"])
async def test_runtime_close_leaves_no_workflow_running(pool: Pool, ending: str) -> None:
    run_ids: list[str] = []
    with trio.CancelScope() as outer:
        async with open_on(pool) as rt, rt.open_parent() as parent:
            for _ in range(2):
                run_ids.append((await parent.start("slow", "background")).run_id)
            for run_id in run_ids:
                await started(run_id)
            if ending == "cancelled":
                outer.cancel()
                await trio.sleep_forever()
    assert outer.cancelled_caught == (ending == "cancelled")
    for run_id in run_ids:
        assert len(marks("cleaned", run_id)) == 1
        assert status(pool.address, run_id) == "CANCELED"


# -- failures -----------------------------------------------------------------------


async def test_runner_error_fails_the_run_once(pool: Pool) -> None:
    async with open_on(pool) as rt, rt.open_parent() as parent:
        with pytest.raises(td.RunFailedError) as caught:
            await parent.delegate("boom", "x <y>")
    error = caught.value
    assert error.run_id is not None
    assert "ValueError" in str(error)
    assert "boom: x <y>" in str(error)
    assert error.error_type == "TemporalRunError"
    assert error.error_message == "ValueError: boom: x <y>"
    assert status(pool.address, error.run_id) == "FAILED"
    # The workflow is closed: no attempt comes after the one that failed.
    assert len(marks("started", error.run_id)) == 1


async def test_no_deadline_and_no_lease_is_refused(pool: Pool) -> None:
    runtime = open_on(pool, timeout_seconds=None, lease_seconds=None)
    async with runtime as rt, rt.open_parent() as parent:
        with pytest.raises(td.RunFailedError, match="neither a deadline nor a lease") as caught:
            await parent.delegate("echo", "for ever")
    run_id = caught.value.run_id
    assert run_id is not None
    described = cli(pool.address, "workflow", "describe", "-w", run_id)
    assert described.returncode != 0  # no workflow was started


async def test_hostile_strings(pool: Pool) -> None:
    task = "<script>alert('x')</script> &amp; \u202e\u0000 ❤ \U0001f600 \\u0000 \"q\""
    async with open_on(pool) as rt, rt.open_parent() as parent:
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


# -- configuration ----------------------------------------------------------------------


async def test_unreachable_server_fails_the_run_naming_it() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{unused.getsockname()[1]}"
    subagent = td.Subagent("echo", temporal_runner(address), timeout_seconds=60)
    config = td.Config(fail_closed=False)
    async with td.open_runtime([subagent], config=config) as rt, rt.open_parent() as parent:
        with pytest.raises(td.RunFailedError) as caught:
            await parent.delegate("echo", "anyone?")
    assert caught.value.error_type == "TemporalRunError"
    assert f"Temporal at {address}" in caught.value.error_message


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


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('[[subagents]]\nname = "r"\ncommand = ["true"]\n', "has no [temporal] table"),
        (
            '[temporal]\naddress = "h:1"\n[[subagents]]\nname = "r"\nkind = "temporal"\n',
            "nothing to run",
        ),
        (
            '[temporal]\naddress = "h:1"\n[[subagents]]\nname = "a"\ncommand = ["true"]\n'
            '[[subagents]]\nname = "b"\npython = "temporal_runners:echo"\nchildren = ["a"]\n',
            "nested delegation does not run on Temporal workers",
        ),
        ("[temporal]\naddress = 7233\n", "temporal.address"),
    ],
)
def test_temporal_worker_refuses_a_bad_configuration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, says: str
) -> None:
    path = tmp_path / "worker.toml"
    path.write_text(text)
    (tmp_path / "temporal_runners.py").write_text("async def echo(ctx):\n    return 1\n")
    assert main(["temporal-worker", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("trio-delegate temporal-worker: ")
    assert says in err
    assert "fix:" in err


def test_temporal_worker_shows_what_the_file_holds_literally(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "worker.toml"
    path.write_text(
        '[temporal]\naddress = "h:1"\n[[subagents]]\nname = "r"\ncommand = ["true"]\n'
        '"color\\u001b[2J" = 1\n'
    )
    assert main(["temporal-worker", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err
    assert "color\\x1b[2J" in err


async def test_an_mcp_client_reaches_the_pool_through_serve(pool: Pool, tmp_path: Path) -> None:
    """``serve`` hands a ``kind = "temporal"`` subagent's runs to the workers:
    an MCP client's call runs on a worker, and its result comes back to the client."""
    from .test_mcp_stdio import call, serve

    config = tmp_path / "serve.toml"
    config.write_text(
        f'[temporal]\naddress = "{pool.address}"\ntask_queue = "{pool.task_queue}"\n\n'
        '[[subagents]]\nname = "echo"\nkind = "temporal"\n'
        f"lease_seconds = {LEASE}\nheartbeat_timeout_seconds = {HEARTBEAT}\n"
        "timeout_seconds = 60\n"
    )
    with trio.fail_after(GUARD):
        async with serve(config) as client:
            answer = await call(client, "delegate_task", subagent="echo", task="from a client")
            result = answer["final_result"]
            assert result["task"] == "from a client"
            assert result["subagent"] == "echo"
            assert result["run_id"] == answer["run_id"]
            # Executed by a worker (another process), as a workflow of that id.
            assert result["pid"] in {worker.pid for worker in pool.workers}
            assert status(pool.address, answer["run_id"]) == "COMPLETED"
