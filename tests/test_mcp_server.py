"""The MCP server, driven in memory by the ``mcp`` SDK's own client."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

import trio_delegate as td

mcp = pytest.importorskip("mcp")

from mcp import Client  # noqa: E402
from mcp.types import CallToolResult, TextContent  # noqa: E402

from trio_delegate.mcp import build_parent_server, build_server  # noqa: E402
from trio_delegate.mcp._connection_end import ClientEnds  # noqa: E402

TOOLS = (
    "delegate_task",
    "subagent_status",
    "wait_subagent",
    "cancel_subagent",
    "continue_subagent",
    "list_subagent_runs",
)


async def shout(ctx: td.ChildContext) -> str:
    await trio.lowlevel.checkpoint()
    return ctx.task.upper()


async def broken(ctx: td.ChildContext) -> str:
    await trio.lowlevel.checkpoint()
    raise ValueError("disk on fire")


class Gate:
    """A runner that waits until released, and records that it was cancelled."""

    def __init__(self) -> None:
        self.release = trio.Event()
        self.started = trio.Event()
        self.cancelled = False

    async def __call__(self, ctx: td.ChildContext) -> str:
        self.started.set()
        try:
            await self.release.wait()
        except trio.Cancelled:
            self.cancelled = True
            raise
        return "released"


def subagents(gate: Gate) -> list[td.Subagent]:
    return [
        td.Subagent("shout", shout, description="Shouts the task."),
        td.Subagent("broken", broken, description="Always fails."),
        td.Subagent("gate", gate, description="Waits to be released."),
    ]


@asynccontextmanager
async def open_client(
    server: Any, mode: str = "legacy", *, timeout: float = 10
) -> AsyncIterator[Client]:
    # Virtual-time tests pass a timeout beyond their scenario's clock.
    with trio.fail_after(timeout):
        async with Client(server, mode=mode) as client:
            yield client


def payload(result: CallToolResult) -> dict[str, Any]:
    """The structured content, checked against the text rendering."""
    assert isinstance(result.structured_content, dict)
    [content] = result.content
    assert isinstance(content, TextContent)
    if result.is_error:
        message, _, rendered = content.text.partition("\n\n")
        assert message == result.structured_content["error"]["message"]
    else:
        rendered = content.text
    assert json.loads(rendered) == result.structured_content
    return result.structured_content


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_tools_are_the_parents_delegation_tools(mode: str) -> None:
    gate = Gate()
    async with td.open_runtime(subagents(gate)) as rt:
        async with rt.open_parent("reference") as reference:
            expected = {d.name: d for d in reference.tools().definitions()}
        async with open_client(build_server(rt), mode) as client:
            listed = (await client.list_tools()).tools
    assert tuple(tool.name for tool in listed) == TOOLS
    for tool in listed:
        # The foreground tools say what happens at the foreground limit; the
        # rest of each description is the parent's own.
        assert tool.description is not None
        assert tool.description.startswith(expected[tool.name].description)
        limit_note = "still running after 45 s returns {run_id, subagent, status}"
        assert (limit_note in tool.description) == (
            tool.name in ("delegate_task", "continue_subagent")
        )
        assert tool.input_schema == expected[tool.name].parameters
        assert tool.annotations is not None
    read_only = {tool.name: tool.annotations.read_only_hint for tool in listed if tool.annotations}
    # status, waits and the listing need no approval; delegating runs whatever a
    # subagent does
    assert read_only == {
        "delegate_task": None,
        "subagent_status": True,
        "wait_subagent": True,
        "cancel_subagent": False,
        "continue_subagent": None,
        "list_subagent_runs": True,
    }


async def test_results_are_structured_and_rendered_as_json() -> None:
    gate = Gate()
    async with td.open_runtime(subagents(gate)) as rt, open_client(build_server(rt)) as client:
        done = await client.call_tool("delegate_task", {"subagent": "shout", "task": "hi"})
        assert not done.is_error
        result = payload(done)
        assert result["final_result"] == "HI"
        assert result["subagent"] == "shout"
        waited = payload(await client.call_tool("wait_subagent", {"run_id": result["run_id"]}))
        assert waited == result


async def test_every_delegation_error_is_an_error_result_with_its_payload() -> None:
    gate = Gate()
    async with td.open_runtime(subagents(gate)) as rt, open_client(build_server(rt)) as client:
        failed = await client.call_tool("delegate_task", {"subagent": "broken", "task": "go"})
        assert failed.is_error
        error = payload(failed)["error"]
        assert error["type"] == "run_failed"
        assert error["error_type"] == "ValueError"
        assert "disk on fire" in error["message"]

        unknown = await client.call_tool("delegate_task", {"subagent": "nobody", "task": "go"})
        assert unknown.is_error
        assert payload(unknown)["error"]["allowed"] == ["shout", "broken", "gate"]

        bad: list[tuple[str, dict[str, Any], str]] = [
            ("delegate_task", {"subagent": "shout"}, "invalid_arguments"),
            ("delegate_task", {"subagent": "shout", "task": 3}, "invalid_arguments"),
            ("wait_subagent", {"run_id": "run_0", "timeout": -1}, "invalid_arguments"),
            ("wait_subagent", {"run_id": "run_made_up"}, "unknown_run"),
            ("no_such_tool", {}, "invalid_arguments"),
        ]
        for name, arguments, kind in bad:
            result = await client.call_tool(name, arguments)
            assert result.is_error, (name, arguments)
            assert payload(result)["error"]["type"] == kind


async def test_each_connection_is_a_parent_of_its_own() -> None:
    gate = Gate()
    async with td.open_runtime(subagents(gate)) as rt:
        server = build_server(rt)
        async with open_client(server) as first, open_client(server) as second:
            started = payload(
                await first.call_tool(
                    "delegate_task", {"subagent": "gate", "task": "wait", "background": True}
                )
            )
            run_id = started["run_id"]
            # the other connection's parent does not know the run
            foreign = await second.call_tool("subagent_status", {"run_id": run_id})
            assert payload(foreign)["error"]["type"] == "unknown_run"
            status = payload(await first.call_tool("subagent_status", {"run_id": run_id}))
            assert status["status"] == "running"
            gate.release.set()
            waited = payload(await first.call_tool("wait_subagent", {"run_id": run_id}))
            assert waited["final_result"] == "released"
        assert rt.live_runs == 0


async def test_a_timed_wait_answers_running_then_cancel_ends_the_run() -> None:
    gate = Gate()
    async with td.open_runtime(subagents(gate)) as rt, open_client(build_server(rt)) as client:
        started = payload(
            await client.call_tool(
                "delegate_task", {"subagent": "gate", "task": "x", "background": True}
            )
        )
        run_id = started["run_id"]
        timed = await client.call_tool("wait_subagent", {"run_id": run_id, "timeout": 0.01})
        assert not timed.is_error
        assert payload(timed) == {"run_id": run_id, "subagent": "gate", "status": "running"}
        ack = payload(await client.call_tool("cancel_subagent", {"run_id": run_id}))
        assert ack["cancel_requested"] is True
        ended = await client.call_tool("wait_subagent", {"run_id": run_id})
        assert ended.is_error
        assert payload(ended)["error"]["type"] == "run_cancelled"
        assert gate.cancelled
        replaced = await client.call_tool(
            "delegate_task", {"subagent": "shout", "task": "again", "replaces": run_id}
        )
        assert payload(replaced)["final_result"] == "AGAIN"


async def test_a_connection_ending_cancels_and_joins_its_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gate = Gate()
    async with td.open_runtime(subagents(gate)) as rt:
        async with open_client(build_server(rt)) as client:
            started = await client.call_tool(
                "delegate_task", {"subagent": "gate", "task": "x", "background": True}
            )
            await gate.started.wait()
            assert rt.live_runs == 1
        # joined by the time the connection is closed
        assert gate.cancelled
        assert rt.live_runs == 0
    [record] = [r for r in caplog.records if "ended" in r.getMessage()]
    assert record.name == "trio_delegate.mcp"
    assert record.levelno == logging.WARNING
    owner, run_id = record.getMessage().split()[1], payload(started)["run_id"]
    assert record.getMessage() == (
        f"connection {owner} ended and left 1 run behind:\n"
        f"  - {run_id} (gate): still running when the connection ended, so it was cancelled\n"
        "A client sees a background run through by waiting for it (wait_subagent, or "
        "tasks/get for a task) or cancelling it before it disconnects."
    )


async def test_a_connection_ending_names_what_it_left_behind_in_an_mcp_users_terms(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trio_delegate.mcp")
    gate = Gate()
    ended = trio.Event()
    notices: list[Any] = []

    async def on_log(params: Any) -> None:
        notices.append(params.data)
        if len(notices) == 2:
            ended.set()

    def start(subagent: str) -> dict[str, Any]:
        return {"subagent": subagent, "task": "x", "background": True}

    store = td.SQLiteStore(tmp_path / "runs.db")
    async with td.open_runtime(subagents(gate), store=store) as rt:
        with trio.fail_after(30):
            async with Client(build_server(rt), mode="legacy", logging_callback=on_log) as client:
                unread = payload(await client.call_tool("delegate_task", start("shout")))
                failed = payload(await client.call_tool("delegate_task", start("broken")))
                # Both end; neither is waited for (an announcement is not a read).
                await ended.wait()
                running = payload(await client.call_tool("delegate_task", start("gate")))
                cancelled = payload(await client.call_tool("delegate_task", start("gate")))
                await client.call_tool("cancel_subagent", {"run_id": cancelled["run_id"]})
    [record] = [r for r in caplog.records if " ended" in r.getMessage()]
    assert record.levelno == logging.WARNING
    lines = record.getMessage().splitlines()
    assert lines[0].endswith(" ended and left 3 runs behind:")
    assert lines[1:4] == [
        f"  - {unread['run_id']} (shout): completed, but the client never read its result",
        f"  - {failed['run_id']} (broken): ended failed, and the client neither read that "
        "nor started a replacement",
        f"  - {running['run_id']} (gate): still running when the connection ended, so it "
        "was cancelled",
    ]
    # What the client cancelled itself is not left behind; no advice for a Python parent.
    assert cancelled["run_id"] not in record.getMessage()
    assert "parent.wait" not in record.getMessage()
    assert "'trio-delegate runs show RUN_ID --config FILE'" in lines[-1]


async def test_a_connection_that_saw_its_runs_through_left_nothing_behind(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="trio_delegate.mcp")
    gate = Gate()
    async with td.open_runtime(subagents(gate)) as rt, open_client(build_server(rt)) as client:
        started = payload(
            await client.call_tool(
                "delegate_task", {"subagent": "gate", "task": "x", "background": True}
            )
        )
        await client.call_tool("cancel_subagent", {"run_id": started["run_id"]})
        await client.call_tool("delegate_task", {"subagent": "shout", "task": "y"})
    [record] = [r for r in caplog.records if " ended" in r.getMessage()]
    assert record.levelno == logging.INFO
    assert record.getMessage().endswith(" ended")


def test_what_a_connection_remembers_of_its_clients_ends_is_bounded() -> None:
    ends = ClientEnds(2)
    for run_id in ("a", "b", "c", "b"):
        ends.cancelled(run_id)
    assert not ends.saw_through("a")
    assert ends.saw_through("b")
    assert ends.saw_through("c")
    ends.cancelled("d")
    # "b" was cancelled again after "c": "c" is the oldest.
    assert not ends.saw_through("c")
    assert ends.saw_through("b")
    # A foreground call left unanswered is the client's end only once it asked for it.
    ends.unanswered("e", 7)
    assert ends.left("e")
    assert not ends.saw_through("e")
    ends.request_cancelled("7")
    assert ends.left("e")  # another request: ids 7 and "7" differ
    ends.request_cancelled(7)
    assert ends.saw_through("e")
    assert not ends.left("e")
    for request_id in range(10):
        ends.request_cancelled(request_id)
        ends.unanswered(f"run-{request_id}", request_id)
    assert len(ends) == 6


async def test_a_cancelled_foreground_call_cancels_its_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="trio_delegate.mcp")
    gate = Gate()
    async with td.open_runtime(subagents(gate)) as rt, open_client(build_server(rt)) as client:
        with trio.CancelScope() as scope:

            async def cancel_once_running() -> None:
                # Cancelled once the run is live, not after some real time
                # (a busy machine may not have admitted it yet).
                while not rt.live_runs:  # noqa: ASYNC110 - the server admits it on its side
                    await trio.sleep(0.01)
                scope.cancel()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(cancel_once_running)
                await client.call_tool("delegate_task", {"subagent": "gate", "task": "x"})
        with trio.fail_after(30):
            while rt.live_runs:  # noqa: ASYNC110 - the server settles it on its side
                await trio.sleep(0.01)
        assert gate.cancelled
    # The client cancelled it (notifications/cancelled): nothing was left behind.
    [record] = [r for r in caplog.records if " ended" in r.getMessage()]
    assert record.levelno == logging.INFO


async def test_continue_subagent_carries_the_conversation() -> None:
    async def recall(ctx: td.ChildContext) -> Any:
        await trio.lowlevel.checkpoint()
        return {"task": ctx.task, "history": list(ctx.history)}

    async with (
        td.open_runtime([td.Subagent("recall", recall)]) as rt,
        open_client(build_server(rt)) as client,
    ):
        first = payload(
            await client.call_tool("delegate_task", {"subagent": "recall", "task": "a"})
        )
        later = payload(
            await client.call_tool("continue_subagent", {"run_id": first["run_id"], "message": "b"})
        )
    assert later["final_result"]["task"] == "b"
    assert later["final_result"]["history"][0] == {"role": "user", "content": "a"}


async def test_a_parent_server_works_for_the_hosts_parent() -> None:
    gate = Gate()
    async with td.open_runtime(subagents(gate)) as rt, rt.open_parent("host") as parent:
        server = build_parent_server(parent, name="delegate", instructions=None)
        async with open_client(server, timeout=3600) as client:
            started = payload(
                await client.call_tool(
                    "delegate_task", {"subagent": "gate", "task": "x", "background": True}
                )
            )
        # the host's parent owns the run: it outlives the connection
        assert parent.status(started["run_id"]).status is td.RunStatus.RUNNING
        gate.release.set()
        result = await parent.wait(started["run_id"])
        assert isinstance(result, td.RunResult)
        assert result.final_result == "released"


async def test_a_foreground_call_past_the_limit_answers_with_the_running_handle(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    gate = Gate()
    async with td.open_runtime(subagents(gate)) as rt:
        server = build_server(rt, foreground_limit_seconds=30)
        async with open_client(server, timeout=3600) as client:
            started = trio.current_time()
            answer = payload(
                await client.call_tool("delegate_task", {"subagent": "gate", "task": "x"})
            )
            assert trio.current_time() - started == pytest.approx(30)
            assert answer["status"] == "running"
            assert answer["subagent"] == "gate"
            assert "final_result" not in answer
            assert f"wait_subagent with run_id {answer['run_id']!r}" in answer["message"]
            # The run goes on untouched, as background work.
            assert gate.started.is_set()
            assert not gate.cancelled
            gate.release.set()
            done = payload(await client.call_tool("wait_subagent", {"run_id": answer["run_id"]}))
            assert done["final_result"] == "released"
    # Observed by that wait: the connection ended resolved.
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_a_handle_past_the_limit_is_background_work_that_must_be_observed(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    gate = Gate()
    async with (
        td.open_runtime(subagents(gate)) as rt,
        open_client(build_server(rt, foreground_limit_seconds=5), timeout=3600) as client,
    ):
        answer = payload(await client.call_tool("delegate_task", {"subagent": "gate", "task": "x"}))
        assert answer["status"] == "running"
    [record] = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert answer["run_id"] in record.getMessage()
    assert gate.cancelled


async def test_a_foreground_call_within_the_limit_answers_as_delegate_does(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def slowly(ctx: td.ChildContext) -> str:
        await trio.sleep(20)
        return "late but in time"

    subs = [td.Subagent("slowly", slowly), td.Subagent("broken", broken)]
    async with (
        td.open_runtime(subs) as rt,
        open_client(build_server(rt, foreground_limit_seconds=21), timeout=3600) as client,
    ):
        answer = payload(
            await client.call_tool("delegate_task", {"subagent": "slowly", "task": "x"})
        )
        assert answer["final_result"] == "late but in time"
        assert set(answer) == {"run_id", "subagent", "task_summary", "final_result"}
        continued = payload(
            await client.call_tool(
                "continue_subagent", {"run_id": answer["run_id"], "message": "again"}
            )
        )
        assert continued["final_result"] == "late but in time"
        failed = await client.call_tool("delegate_task", {"subagent": "broken", "task": "x"})
        assert failed.is_error
        assert payload(failed)["error"]["type"] == "run_failed"


async def test_no_limit_waits_as_long_as_the_run_takes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def slowly(ctx: td.ChildContext) -> str:
        await trio.sleep(3600)
        return "an hour later"

    subagent = td.Subagent("slowly", slowly, timeout_seconds=None)
    async with (
        td.open_runtime([subagent]) as rt,
        open_client(build_server(rt, foreground_limit_seconds=None), timeout=7200) as client,
    ):
        answer = await client.call_tool("delegate_task", {"subagent": "slowly", "task": "x"})
        assert payload(answer)["final_result"] == "an hour later"


async def test_a_running_foreground_call_reports_progress(
    autojump_clock: trio.testing.MockClock,
) -> None:
    gate = Gate()
    reports: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reports.append((progress, total, message))

    async with td.open_runtime(subagents(gate)) as rt:
        server = build_server(rt, foreground_limit_seconds=12, progress_interval_seconds=5)
        async with open_client(server, timeout=3600) as client:
            answer = await client.call_tool(
                "delegate_task", {"subagent": "gate", "task": "x"}, progress_callback=on_progress
            )
            run_id = payload(answer)["run_id"]
            gate.release.set()
            await client.call_tool("wait_subagent", {"run_id": run_id})
    # Before any report of the child's, a keepalive every interval: a counter.
    assert [value for value, _, _ in reports] == [1, 2]
    assert all(total is None for _, total, _ in reports)
    assert [message for _, _, message in reports] == [
        f"run {run_id} of gate still running after 5 s",
        f"run {run_id} of gate still running after 10 s",
    ]


async def test_a_connection_cut_short_logs_its_unresolved_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gate = Gate()
    async with td.open_runtime(subagents(gate)) as rt:
        with trio.CancelScope() as scope:
            async with open_client(build_server(rt)) as client:
                answer = await client.call_tool(
                    "delegate_task", {"subagent": "gate", "task": "x", "background": True}
                )
                await gate.started.wait()
                scope.cancel()  # as the signal handler of `serve` does
        assert rt.live_runs == 0
    run_id = payload(answer)["run_id"]
    [record] = [r for r in caplog.records if "cut short" in r.getMessage()]
    assert record.levelno == logging.WARNING
    assert run_id in record.getMessage()
    assert "running" in record.getMessage()


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"foreground_limit_seconds": 0}, "foreground_limit_seconds must be"),
        ({"foreground_limit_seconds": float("inf")}, "foreground_limit_seconds must be"),
        ({"foreground_limit_seconds": True}, "foreground_limit_seconds must be"),
        ({"progress_interval_seconds": None}, "progress_interval_seconds must be"),
        ({"progress_interval_seconds": -1}, "progress_interval_seconds must be"),
    ],
)
async def test_limits_are_checked(kwargs: dict[str, Any], fragment: str) -> None:
    async with td.open_runtime([td.Subagent("shout", shout)]) as rt:
        with pytest.raises(td.InvalidArgumentsError, match=fragment):
            build_server(rt, **kwargs)
        async with rt.open_parent() as parent:
            with pytest.raises(td.InvalidArgumentsError, match=fragment):
                build_parent_server(parent, **kwargs)


async def test_a_background_run_that_ends_is_announced_as_a_log_message(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def slowly(ctx: td.ChildContext) -> str:
        await trio.sleep(10)
        return "done"

    notices: list[Any] = []

    async def on_log(params: Any) -> None:
        notices.append(params)

    subs = [td.Subagent("slowly", slowly), td.Subagent("shout", shout)]
    async with td.open_runtime(subs) as rt:
        server = build_server(rt, foreground_limit_seconds=5)
        with trio.fail_after(3600):
            async with Client(server, mode="legacy", logging_callback=on_log) as client:
                # In the foreground within the limit: its answer is the news, no notice.
                payload(await client.call_tool("delegate_task", {"subagent": "shout", "task": "a"}))
                background = payload(
                    await client.call_tool(
                        "delegate_task", {"subagent": "slowly", "task": "b", "background": True}
                    )
                )
                # In the foreground past the limit: background work from then on.
                late = payload(
                    await client.call_tool("delegate_task", {"subagent": "slowly", "task": "c"})
                )
                assert late["status"] == "running"
                await trio.sleep(20)
                announced = [notice.data for notice in notices]
                assert {notice["run_id"] for notice in announced} == {
                    background["run_id"],
                    late["run_id"],
                }
                assert all(notice["status"] == "completed" for notice in announced)
                assert all("wait_subagent" in notice["message"] for notice in announced)
                assert {notice.logger for notice in notices} == {"trio_delegate.settled"}
                # A notice is not observation: both still have to be waited for.
                for run_id in (background["run_id"], late["run_id"]):
                    answer = await client.call_tool("wait_subagent", {"run_id": run_id})
                    assert payload(answer)["final_result"] == "done"


async def test_progress_notices_carry_the_childs_latest_report_at_most_once_an_interval(
    autojump_clock: trio.testing.MockClock,
) -> None:
    release = trio.Event()

    async def busy(ctx: td.ChildContext) -> str:
        # A hot loop of reports: 10 a second for 12 s (off the notices' beat), then
        # one more after the release.
        await trio.sleep(0.05)
        for step in range(1, 121):
            ctx.progress(f"item {step}", progress=step, total=121)
            await trio.sleep(0.1)
        await release.wait()
        ctx.progress("last", progress=121, total=121)
        return "done"

    reports: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reports.append((progress, total, message))
        if len(reports) == 3:
            release.set()

    async with td.open_runtime([td.Subagent("busy", busy)]) as rt:
        server = build_server(rt, foreground_limit_seconds=None, progress_interval_seconds=5)
        async with open_client(server, timeout=3600) as client:
            answer = await client.call_tool(
                "delegate_task", {"subagent": "busy", "task": "x"}, progress_callback=on_progress
            )
            assert payload(answer)["final_result"] == "done"
            count = len(reports)
            await trio.sleep(60)  # a minute more: nothing once the call has answered
            assert len(reports) == count
    run_id = payload(answer)["run_id"]
    # One notice per 5 s at most, each the latest report: seq 50 at 5 s, 100 at 10 s ...
    values = [value for value, _, _ in reports]
    assert values == sorted(set(values))  # strictly increasing
    assert values[:2] == [50, 100]
    assert [message for _, _, message in reports][:2] == [
        f"run {run_id} of busy: item 50 (50/121)",
        f"run {run_id} of busy: item 100 (100/121)",
    ]
    assert reports[2][0] == 120  # the loop's last report (120 of them by 15 s)
    assert all(total is None for _, total, _ in reports)


async def _spends_then_waits(ctx: td.ChildContext) -> str:
    ctx.add_usage(td.Usage(requests=1, input_tokens=400, output_tokens=200))
    await trio.sleep_forever()
    return "never"


async def test_a_parent_budget_bounds_each_connection_alone(
    autojump_clock: trio.testing.MockClock,
) -> None:
    spender = td.Subagent("spender", _spends_then_waits, description="Spends 600 tokens.")
    config = td.Config(fail_closed=False)
    budget = td.Budget(max_total_tokens=1000)
    async with td.open_runtime([spender], config=config) as rt:
        server = build_server(rt, parent_budget=budget)
        async with (
            open_client(server, timeout=1e6) as first,
            open_client(server, timeout=1e6) as second,
        ):
            start = {"subagent": "spender", "task": "spend", "background": True}
            one = payload(await first.call_tool("delegate_task", start))["run_id"]
            other = payload(await second.call_tool("delegate_task", start))["run_id"]
            # The connection's second run takes its parent past 1,000 tokens.
            two = payload(await first.call_tool("delegate_task", start))["run_id"]
            for run_id in (one, two):
                waited = await first.call_tool("wait_subagent", {"run_id": run_id})
                assert waited.is_error
                assert "max_total_tokens" in payload(waited)["error"]["message"]
            refused = await first.call_tool("delegate_task", start)
            assert refused.is_error
            assert payload(refused)["error"]["type"] == "budget_exceeded"
            # The other connection's parent has its own budget, untouched.
            status = payload(await second.call_tool("subagent_status", {"run_id": other}))
            assert status["status"] == "running"
            await second.call_tool("cancel_subagent", {"run_id": other})
    with pytest.raises(td.InvalidArgumentsError, match="parent_budget"):
        build_server(rt, parent_budget={"max_total_tokens": 1})  # type: ignore[arg-type]
