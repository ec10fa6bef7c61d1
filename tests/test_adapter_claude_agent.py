"""The Claude Agent SDK adapter both ways, with the real Claude Code binary.

Parent side: ``claude.mcp_server(parent)`` serves a host's parent to the
bundled ``claude``, whose model is a scripted fake on 127.0.0.1 that calls
every tool. Child side: ``claude.runner(options)`` runs a ``query()`` per
run. Each ``test_cap_claude_*`` test backs one cell of the capability
matrix. Real processes and real time, every wait bounded.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

import trio_delegate as td
from trio_delegate.adapters import CAPABILITIES

claude_agent_sdk = pytest.importorskip("claude_agent_sdk")

from claude_agent_sdk import ClaudeAgentOptions  # noqa: E402

from trio_delegate.adapters import claude  # noqa: E402

from .fakes import FakeAnthropic, Hold, Step, Turn, call, text  # noqa: E402
from .fakes.clients import claude_env, claude_program, processes_with  # noqa: E402

T = "mcp__delegate__"
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def options(tmp_path: Path, fake: FakeAnthropic, **more: Any) -> ClaudeAgentOptions:
    env = claude_env(tmp_path / "home", fake)
    return ClaudeAgentOptions(cli_path=claude_program(), env=env, cwd=str(tmp_path), **more)


class Gate:
    """A runner that waits to be released (from any thread) and records a cancellation."""

    def __init__(self) -> None:
        self.started = trio.Event()
        # Released from the fake model's thread, so not a Trio event.
        self.release = threading.Event()
        self.cancelled = False

    async def __call__(self, ctx: td.ChildContext) -> str:
        self.started.set()
        try:
            while not self.release.is_set():  # noqa: ASYNC110 - set by another thread
                await trio.sleep(0.01)
        except trio.Cancelled:
            self.cancelled = True
            raise
        return "released"


async def shout(ctx: td.ChildContext) -> Any:
    await trio.lowlevel.checkpoint()
    if ctx.final_schema is not None:
        return {"n": len(ctx.task)}
    return ctx.task.upper() + (f" after {len(ctx.history)}" if ctx.history else "")


async def drive(tmp_path: Path, script: list[Step], gate: Gate) -> dict[str, Any]:
    """Run one query whose model follows *script*; what the model was shown, by step."""
    seen: dict[str, Any] = {}
    subagents = [
        td.Subagent("shout", shout),
        td.Subagent("gate", gate),
        td.Subagent("held", Gate()),
    ]
    with FakeAnthropic(script) as fake:
        async with td.open_runtime(subagents) as rt, rt.open_parent("agent") as parent:
            run_options = options(
                tmp_path,
                fake,
                mcp_servers={"delegate": claude.mcp_server(parent)},
                allowed_tools=claude.allowed_tools(parent),
            )
            with trio.fail_after(30):
                async for message in claude_agent_sdk.query(
                    prompt="Use the tools.", options=run_options
                ):
                    if isinstance(message, claude_agent_sdk.ResultMessage):
                        seen["result"] = message
    assert fake.problems == []
    assert fake.remaining == 0
    seen["turns"] = fake.turns
    return seen


def step(check: Callable[[Any], None], then: Callable[[], Any]) -> Step:
    def run(turn: Turn) -> Any:
        last = turn.last
        check((last.is_error, last.text if last.is_error else last.json()))
        return then()

    return run


@pytest.fixture(scope="module")
def lifecycle(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One session that uses every tool; each test checks its part."""
    tmp_path = tmp_path_factory.mktemp("claude-parent")
    seen: dict[str, Any] = {}
    gate = Gate()

    def keep(name: str) -> Callable[[Any], None]:
        def check(answer: Any) -> None:
            seen[name] = answer

        return check

    def release() -> Any:
        gate.release.set()
        return call(f"{T}wait_subagent", run_id=seen["background"][1]["run_id"])

    script: list[Step] = [
        call(f"{T}delegate_task", subagent="shout", task="hi"),
        step(
            keep("foreground"),
            lambda: call(f"{T}delegate_task", subagent="gate", task="x", background=True),
        ),
        step(
            keep("background"),
            lambda: call(f"{T}subagent_status", run_id=seen["background"][1]["run_id"]),
        ),
        step(
            keep("status"),
            lambda: call(f"{T}wait_subagent", run_id=seen["background"][1]["run_id"], timeout=0.05),
        ),
        step(keep("timed_wait"), release),
        step(
            keep("waited"),
            lambda: call(
                f"{T}continue_subagent", run_id=seen["foreground"][1]["run_id"], message="more"
            ),
        ),
        step(
            keep("continuation"),
            lambda: call(f"{T}delegate_task", subagent="shout", task="four", final_schema=SCHEMA),
        ),
        step(
            keep("structured"),
            lambda: call(f"{T}delegate_task", subagent="held", task="y", background=True),
        ),
        step(
            keep("second"), lambda: call(f"{T}cancel_subagent", run_id=seen["second"][1]["run_id"])
        ),
        step(keep("cancel"), lambda: call(f"{T}wait_subagent", run_id=seen["second"][1]["run_id"])),
        step(
            keep("cancelled"),
            lambda: call(
                f"{T}delegate_task",
                subagent="shout",
                task="again",
                replaces=seen["second"][1]["run_id"],
            ),
        ),
        step(keep("replaced"), lambda: text("all done")),
    ]
    result = trio.run(drive, tmp_path, script, gate)["result"]
    assert result.is_error is False
    assert result.result == "all done"
    return seen


def test_cap_claude_foreground(lifecycle: dict[str, Any]) -> None:
    is_error, answer = lifecycle["foreground"]
    assert not is_error
    assert answer["final_result"] == "HI"


def test_cap_claude_background(lifecycle: dict[str, Any]) -> None:
    assert lifecycle["background"][1]["status"] in ("running", "pending")
    assert lifecycle["waited"][1]["final_result"] == "released"
    assert lifecycle["waited"][1]["run_id"] == lifecycle["background"][1]["run_id"]


def test_cap_claude_status(lifecycle: dict[str, Any]) -> None:
    assert lifecycle["status"][1] == {**lifecycle["background"][1], "status": "running"}


def test_cap_claude_timed_wait(lifecycle: dict[str, Any]) -> None:
    assert lifecycle["timed_wait"][1]["status"] == "running"


def test_cap_claude_cancel(lifecycle: dict[str, Any]) -> None:
    assert lifecycle["cancel"][1]["cancel_requested"] is True
    is_error, message = lifecycle["cancelled"]
    assert is_error
    assert "run_cancelled" in message
    assert lifecycle["replaced"][1]["final_result"] == "AGAIN"


def test_cap_claude_continuation(lifecycle: dict[str, Any]) -> None:
    assert lifecycle["continuation"][1]["final_result"] == "MORE after 2"


def test_cap_claude_structured_results(lifecycle: dict[str, Any]) -> None:
    assert lifecycle["structured"][1]["final_result"] == {"n": 4}


async def test_cap_claude_cancellation_reaches_child(tmp_path: Path) -> None:
    gate = Gate()
    script: list[Step] = [call(f"{T}delegate_task", subagent="gate", task="long"), Hold()]
    with FakeAnthropic(script) as fake:
        config = td.Config(fail_closed=False)
        async with (
            td.open_runtime([td.Subagent("gate", gate)], config=config) as rt,
            rt.open_parent("agent") as parent,
        ):
            run_options = options(
                tmp_path,
                fake,
                mcp_servers={"delegate": claude.mcp_server(parent)},
                allowed_tools=claude.allowed_tools(parent),
            )
            with trio.fail_after(30), trio.CancelScope() as scope:
                async with trio.open_nursery() as nursery:

                    async def cancel_once_started() -> None:
                        await gate.started.wait()
                        scope.cancel()
                        # The model answers in the end; Claude Code then exits
                        # at once on the closed input, instead of after the
                        # SDK's grace period.
                        fake.release()

                    nursery.start_soon(cancel_once_started)
                    async for _ in claude_agent_sdk.query(prompt="go", options=run_options):
                        pass
            assert scope.cancelled_caught
            # The tool call was cancelled, and its run with it.
            assert gate.cancelled
            assert rt.live_runs == 0


async def test_cap_claude_child_runner(tmp_path: Path) -> None:
    def second(turn: Turn) -> Any:
        assert "the first task" in str(turn.request.body)
        return text("second answer")

    script: list[Step] = [text("first answer"), second, call("StructuredOutput", n=2)]
    with FakeAnthropic(script) as fake:
        subagent = td.Subagent("claude", claude.runner(options(tmp_path, fake)))
        async with td.open_runtime([subagent]) as rt, rt.open_parent("host") as parent:
            with trio.fail_after(30):
                first = await parent.delegate("claude", "the first task")
                assert first.final_result == "first answer"
                again = await parent.continue_run(first.run_id, "and then")
                assert isinstance(again, td.RunResult)
                assert again.final_result == "second answer"
                structured = await parent.delegate("claude", "count", final_schema=SCHEMA)
                assert structured.final_result == {"n": 2}
    assert fake.problems == []


async def test_the_child_runner_ends_its_process_on_cancel(tmp_path: Path) -> None:
    marker = f"TRIO_DELEGATE_TEST_RUN={uuid.uuid4().hex}"
    with FakeAnthropic([Hold()]) as fake:
        run_options = options(tmp_path, fake)
        run_options.env[marker.split("=")[0]] = marker.split("=")[1]
        subagent = td.Subagent("claude", claude.runner(run_options))
        config = td.Config(fail_closed=False)
        async with td.open_runtime([subagent], config=config) as rt, rt.open_parent() as parent:
            with trio.fail_after(30):
                handle = await parent.start("claude", "think")
                while not fake.holding.is_set():  # noqa: ASYNC110 - another thread
                    await trio.sleep(0.02)
                parent.cancel(handle.run_id)
                fake.release()  # see test_cap_claude_cancellation_reaches_child
                with pytest.raises(td.RunCancelledError):
                    await parent.wait(handle.run_id)
    with trio.fail_after(30):
        while processes_with(marker):  # noqa: ASYNC110 - other processes
            await trio.sleep(0.02)


async def test_an_error_result_fails_the_run(tmp_path: Path) -> None:
    from .fakes import Failure

    refusal = Failure(400, "invalid_request_error", "Your credit balance is too low to access")
    with FakeAnthropic([refusal]) as fake:
        subagent = td.Subagent("claude", claude.runner(options(tmp_path, fake)))
        config = td.Config(fail_closed=False)
        async with td.open_runtime([subagent], config=config) as rt, rt.open_parent() as parent:
            with trio.fail_after(30), pytest.raises(td.RunFailedError) as info:
                await parent.delegate("claude", "x")
    # The SDK reports an error result itself; a run failed with its message.
    assert isinstance(info.value.__cause__, Exception)
    assert "Credit balance is too low" in str(info.value)


def test_the_matrix_rows_are_all_supported() -> None:
    assert all(cell.supported for cell in CAPABILITIES["claude"].values())
