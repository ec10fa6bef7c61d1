"""The MCP Tasks extension and the 2026-07-28 wire, line by line against ``trio-delegate serve``.

Every request here is a raw JSON-RPC line written to a real server process:
2026-07-28 requests carry their own ``_meta`` envelope (no initialize
handshake), and declare the ``io.modelcontextprotocol/tasks`` extension in
their own client capabilities, or do not. A legacy connection (the
``initialize`` handshake) must behave exactly as it did before the extension.

A 2026-07-28 connection keeps no state between requests, so most tests share
one modern server process (module-scoped): each speaks its own request ids,
its own runs and its own listen streams over it. The legacy tests share one
process that did the handshake; the restart tests start their own.

Runs of ``gated`` are held by a gate file named after their task, which the
test creates to release them, and a test waits for a run's end on the
server's own ``notifications/tasks`` stream or with ``wait_subagent``, never
on the clock.
"""

from __future__ import annotations

import json
import re
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

pytest.importorskip("mcp")

from mcp.shared.exceptions import MCPError

import trio_delegate as td
from trio_delegate._cli._main import main
from trio_delegate.mcp._tasks import TASKS_EXTENSION, TaskBook

from . import mcp_lines as lines
from .helpers import forever, returning, sub
from .mcp_lines import ANSWER_SECONDS, Wire

PY = sys.executable

#: A subagent that waits until the gate file named by its task exists, then shouts its task
#: (it marks its start with a file named by its task and ``.started``).
GATED = (
    "import os, sys, time\n"
    "task = sys.stdin.read()\n"
    "gate = os.path.join(os.environ['GATES'], task.strip())\n"
    "open(gate + '.started', 'w').close()\n"
    "while not os.path.exists(gate):\n"
    "    time.sleep(0.01)\n"
    "print(task.upper())\n"
)

#: The shared server's foreground limit: a gated run is never done by then.
FOREGROUND_LIMIT = "foreground_limit_seconds = 0.2"


def config_text(folder: Path, server: str = "", runtime: str = "") -> str:
    gates = folder / "gates"
    gates.mkdir(exist_ok=True)
    return f"""
[runtime]
{runtime}

[server]
{server}

[[subagents]]
name = "gated"
description = "Waits for the gate named by its task, then shouts the task."
command = [{json.dumps(PY)}, "-c", {json.dumps(GATED)}]
env = {{ GATES = {json.dumps(str(gates))} }}

[[subagents]]
name = "echo"
description = "Echoes the task."
command = [{json.dumps(PY)}, "-c", "import sys; print(sys.stdin.read())"]

[[subagents]]
name = "broken"
description = "Always fails."
command = [{json.dumps(PY)}, "-c", "import sys; sys.exit('broken on purpose')"]
"""


def start_server(config: Path, *arguments: str, errlog: Any = subprocess.DEVNULL) -> Wire:
    return lines.start(
        [PY, "-m", "trio_delegate", "serve", "--config", str(config), *arguments],
        config.parent / "gates",
        errlog=errlog,
    )


def stop_server(wire: Wire) -> None:
    """SIGTERM (the server cancels its live runs and exits), then reap it."""
    lines.stop(wire, terminate=True)


@contextmanager
def server_process(config: Path, *arguments: str) -> Iterator[Wire]:
    wire = start_server(config, *arguments)
    try:
        yield wire
    finally:
        stop_server(wire)


@asynccontextmanager
async def serving(config: Path, *arguments: str) -> AsyncIterator[Wire]:
    """A server process of one's own, for one test."""
    with server_process(config, *arguments) as wire:
        async with wire.attached():
            yield wire


@pytest.fixture(scope="module")
def modern_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Wire]:
    """One server process for the 2026-07-28 tests: no handshake, nothing shared but runs."""
    folder = tmp_path_factory.mktemp("modern")
    config = folder / "server.toml"
    config.write_text(config_text(folder, server=FOREGROUND_LIMIT))
    with server_process(config) as wire:
        yield wire


@pytest.fixture
async def wire(modern_process: Wire) -> AsyncIterator[Wire]:
    async with modern_process.attached() as attached:
        yield attached


@pytest.fixture(scope="module")
def legacy_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Wire]:
    """One server process whose connection did the ``initialize`` handshake (first test)."""
    folder = tmp_path_factory.mktemp("legacy")
    config = folder / "server.toml"
    config.write_text(config_text(folder))
    with server_process(config) as wire:
        trio.run(handshake, wire)
        yield wire


async def handshake(wire: Wire) -> None:
    async with wire.attached():
        wire.handshake = (await wire.initialize())["result"]


@pytest.fixture
async def legacy(legacy_process: Wire) -> AsyncIterator[Wire]:
    async with legacy_process.attached() as attached:
        yield attached


ISO = re.compile(r"\A\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z\Z")


def tool_result(result: dict[str, Any]) -> dict[str, Any]:
    """A tools/call result without the ``serverInfo`` stamp the server puts on answers."""
    return {k: v for k, v in result.items() if k != "_meta"}


def without_meta(value: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in value.items() if k != "_meta"}


# -- discovery and the capability gate -------------------------------------------------


async def test_discovery_advertises_the_tasks_extension(wire: Wire) -> None:
    answer = await wire.request("server/discover", tasks=False)
    capabilities = answer["result"]["capabilities"]
    assert capabilities["extensions"] == {TASKS_EXTENSION: {}}
    assert "logging" not in capabilities
    assert not capabilities["tools"].get("listChanged")


async def test_requests_that_do_not_declare_the_extension_get_no_tasks(wire: Wire) -> None:
    # A background call is answered as it always was: the handle.
    handle = await wire.call(
        "delegate_task", {"subagent": "echo", "task": "hi", "background": True}, tasks=False
    )
    assert handle.get("resultType", "complete") == "complete"
    run_id = handle["structuredContent"]["run_id"]
    for method in ("tasks/get", "tasks/cancel", "tasks/update"):
        answer = await wire.request(method, {"taskId": run_id}, tasks=False)
        error = answer["error"]
        assert error["code"] == -32021, (method, error)
        assert TASKS_EXTENSION in error["message"]
        assert error["data"] == {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}}
    listen = await wire.request(
        "subscriptions/listen", {"notifications": {"taskIds": [run_id]}}, tasks=False
    )
    assert listen["error"]["code"] == -32021
    # The run is waited for as before.
    done = await wire.call("wait_subagent", {"run_id": run_id}, tasks=False)
    assert done["structuredContent"]["final_result"] == "hi"


async def test_task_methods_outside_the_extension_stay_unknown(wire: Wire) -> None:
    for method in ("tasks/result", "tasks/list"):
        answer = await wire.request(method, {"taskId": "x"})
        assert answer["error"]["code"] == -32601, method
    # A listen for anything but tasks is not served, as before.
    listen = await wire.request("subscriptions/listen", {"notifications": {}})
    assert listen["error"]["code"] == -32601


async def test_an_unknown_or_malformed_task_id_is_invalid_params(wire: Wire) -> None:
    for method in ("tasks/get", "tasks/cancel", "tasks/update"):
        for task_id in ("run_made_up", 5, None):
            answer = await wire.request(method, {"taskId": task_id})
            assert answer["error"]["code"] == -32602, (method, task_id, answer)
    answer = await wire.request("tasks/get", {"taskId": "run_made_up"})
    assert "run_made_up" in answer["error"]["message"]


# -- a task's life ---------------------------------------------------------------------


async def test_a_background_delegation_is_a_task_polled_to_its_result(wire: Wire) -> None:
    created = await wire.call(
        "delegate_task", {"subagent": "gated", "task": "hello", "background": True}
    )
    assert created["resultType"] == "task"
    task_id = created["taskId"]
    assert task_id.startswith("run_")
    assert created["status"] == "working"
    assert created["ttlMs"] is None  # live runs are never evicted
    assert isinstance(created["pollIntervalMs"], int)
    assert ISO.match(created["createdAt"])
    assert ISO.match(created["lastUpdatedAt"])

    # Admission is durable: tasks/get resolves at once, a live snapshot.
    working = (await wire.request("tasks/get", {"taskId": task_id}))["result"]
    assert working["status"] == "working"
    assert working["resultType"] == "complete"
    assert re.search(r"\b(pending|running)\b", working["statusMessage"])
    assert "result" not in working
    assert working["ttlMs"] is None

    stream = await wire.listen([task_id])
    await wire.on_stream("notifications/subscriptions/acknowledged", stream)
    wire.release("hello")
    ended = await wire.on_stream("notifications/tasks", stream)
    await wire.unlisten(stream)
    assert ended["taskId"] == task_id
    assert ended["status"] == "completed"

    done = (await wire.request("tasks/get", {"taskId": task_id}))["result"]
    assert done["status"] == "completed"
    assert done["createdAt"] == created["createdAt"]
    assert isinstance(done["ttlMs"], int)
    assert done["ttlMs"] > 0
    # Exactly what wait_subagent answers for the run.
    waited = await wire.call("wait_subagent", {"run_id": task_id}, tasks=False)
    assert done["result"] == tool_result(waited)
    assert done["result"]["structuredContent"]["final_result"] == "HELLO"
    assert without_meta(ended) == {
        k: v for k, v in done.items() if k not in ("_meta", "resultType")
    }


async def test_a_failed_run_is_a_completed_task_with_the_error_result(wire: Wire) -> None:
    created = await wire.call(
        "delegate_task", {"subagent": "broken", "task": "x", "background": True}
    )
    task_id = created["taskId"]
    # wait_subagent raises the run's error: waiting on it is the way to its end.
    waited = await wire.call("wait_subagent", {"run_id": task_id}, tasks=False)
    assert waited["isError"] is True
    task = (await wire.request("tasks/get", {"taskId": task_id}))["result"]
    assert task["status"] == "completed"
    assert "failed" in task["statusMessage"]
    assert task["result"]["isError"] is True
    assert task["result"] == tool_result(waited)


async def test_tasks_cancel_acknowledges_every_time_and_the_task_reads_cancelled(
    wire: Wire,
) -> None:
    created = await wire.call(
        "delegate_task", {"subagent": "gated", "task": "never", "background": True}
    )
    task_id = created["taskId"]
    # Two at once, as Claude Code sends them.
    first, second = wire.fresh_id(), wire.fresh_id()
    for request_id in (first, second):
        await wire.send(wire.message(request_id, "tasks/cancel", {"taskId": task_id}))
    for request_id in (first, second):
        ack = (await wire.answer(request_id))["result"]
        assert without_meta(ack) == {"resultType": "complete"}
    waited = await wire.call("wait_subagent", {"run_id": task_id}, tasks=False)
    assert waited["isError"] is True
    assert waited["structuredContent"]["error"]["status"] == "cancelled"
    task = (await wire.request("tasks/get", {"taskId": task_id}))["result"]
    assert task["status"] == "cancelled"
    assert "result" not in task
    # The reason is the one wait_subagent's error gives (a cancelled task carries no result).
    reason = waited["structuredContent"]["error"]["message"]
    assert task["statusMessage"] == f"the run of gated ended cancelled: {reason}"
    again = await wire.request("tasks/cancel", {"taskId": task_id})
    assert "result" in again
    update = await wire.request("tasks/update", {"taskId": task_id, "inputResponses": {}})
    assert without_meta(update["result"]) == {"resultType": "complete"}


async def test_a_connection_ending_names_only_what_its_client_left_behind(
    tmp_path: Path,
) -> None:
    config = tmp_path / "server.toml"
    config.write_text(config_text(tmp_path))
    log = tmp_path / "stderr.log"
    with log.open("w") as errlog:
        wire = start_server(config, errlog=errlog)
        try:
            async with wire.attached():
                start = {"subagent": "gated", "background": True}
                cancelled = await wire.call("delegate_task", {**start, "task": "cancelled"})
                await wire.request("tasks/cancel", {"taskId": cancelled["taskId"]})
                left = await wire.call("delegate_task", {**start, "task": "left"})
                # A foreground call the client leaves unanswered: it ends its
                # input without a notifications/cancelled.
                foreground = {
                    "name": "delegate_task",
                    "arguments": {"subagent": "gated", "task": "foreground"},
                }
                await wire.send(wire.message(wire.fresh_id(), "tools/call", foreground))
                with trio.fail_after(ANSWER_SECONDS):
                    while not (tmp_path / "gates" / "foreground.started").exists():  # noqa: ASYNC110
                        await trio.sleep(0.01)
            assert wire.process.stdin is not None
            wire.process.stdin.close()
            with trio.fail_after(ANSWER_SECONDS):
                assert await trio.to_thread.run_sync(wire.process.wait) == 0
        finally:
            stop_server(wire)
    [ended] = [line for line in log.read_text().splitlines() if " ended and left " in line]
    assert ended.endswith(" ended and left 2 runs behind:")
    report = log.read_text()
    assert f"  - {left['taskId']} (gated): still running when the connection ended" in report
    assert "(gated): its foreground call ended unanswered (the client left" in report
    # The task the client cancelled is its own business, not left behind.
    assert cancelled["taskId"] not in report.split(ended)[1]


async def test_a_background_continuation_is_a_task(wire: Wire) -> None:
    first = await wire.call(
        "delegate_task", {"subagent": "echo", "task": "one", "background": True}, tasks=False
    )
    run_id = first["structuredContent"]["run_id"]
    await wire.call("wait_subagent", {"run_id": run_id}, tasks=False)
    created = await wire.call(
        "continue_subagent", {"run_id": run_id, "message": "two", "background": True}
    )
    assert created["resultType"] == "task"
    waited = await wire.call("wait_subagent", {"run_id": created["taskId"]}, tasks=False)
    task = (await wire.request("tasks/get", {"taskId": created["taskId"]}))["result"]
    assert task["status"] == "completed"
    assert task["result"] == tool_result(waited)


async def test_a_foreground_call_past_the_limit_becomes_a_task(wire: Wire) -> None:
    created = await wire.call("delegate_task", {"subagent": "gated", "task": "slow"})
    assert created["resultType"] == "task"
    assert created["status"] == "working"
    # Without the extension the same call answers with the handle, as before.
    handle = await wire.call("delegate_task", {"subagent": "gated", "task": "b"}, tasks=False)
    assert handle["structuredContent"]["status"] in ("pending", "running")
    wire.release("slow")
    wire.release("b")
    waited = await wire.call("wait_subagent", {"run_id": created["taskId"]}, tasks=False)
    assert waited["structuredContent"]["final_result"] == "SLOW"
    # Nothing left running in the shared server.
    await wire.call("wait_subagent", {"run_id": handle["structuredContent"]["run_id"]}, tasks=False)


async def test_a_listen_acknowledges_only_this_connections_tasks(wire: Wire) -> None:
    created = await wire.call(
        "delegate_task", {"subagent": "echo", "task": "quick", "background": True}
    )
    await wire.call("wait_subagent", {"run_id": created["taskId"]}, tasks=False)
    stream = await wire.listen([created["taskId"], "run_someone_else"])
    ack = await wire.on_stream("notifications/subscriptions/acknowledged", stream)
    assert ack["notifications"]["taskIds"] == [created["taskId"]]
    assert ack["_meta"]["io.modelcontextprotocol/subscriptionId"] == stream
    # It had ended already: its notice comes at once.
    notice = await wire.on_stream("notifications/tasks", stream)
    await wire.unlisten(stream)
    assert notice["taskId"] == created["taskId"]
    assert notice["status"] == "completed"
    assert notice["_meta"]["io.modelcontextprotocol/subscriptionId"] == stream


# -- the observation a cancelled task's outcome is --------------------------------------


async def test_tasks_get_of_a_cancelled_run_observes_it_and_of_a_live_one_does_not() -> None:
    async def session(rt: td.Runtime) -> None:
        async with rt.open_parent() as parent:
            book = TaskBook(parent, None, rt.config, 1000)
            handle = await parent.start("idle", "t")
            async with parent.settled() as settlements:
                working = await book.get(handle.run_id)
                assert working["status"] == "working"
                book.cancel(handle.run_id)
                with trio.fail_after(ANSWER_SECONDS):
                    settled = await anext(settlements)
            assert settled.status is td.RunStatus.CANCELLED
            # Ended, and nobody told yet (the live snapshot told nothing) ...
            assert [h.run_id for h in parent.unobserved()] == [handle.run_id]
            task = await book.get(handle.run_id)
            assert task["status"] == "cancelled"
            assert "result" not in task
            # ... and told now: its outcome was handed over.
            assert parent.unobserved() == ()
            # The reason is the message of the error the wait raises.
            with pytest.raises(td.RunCancelledError) as cancelled:
                await parent.wait(handle.run_id)
            message = f"the run of idle ended cancelled: {cancelled.value.message}"
            assert task["statusMessage"] == message

    async with td.open_runtime([sub("idle", forever, timeout_seconds=None)]) as rt:
        # Observed or not, a cancelled run is resolved only by a replacement.
        with pytest.raises(td.UnresolvedDelegationError):
            await session(rt)


# -- what a connection keeps per task -------------------------------------------------


@pytest.mark.parametrize("with_store", [False, True], ids=["memory", "store"])
async def test_what_a_connection_keeps_per_task_is_bounded_by_retention(with_store: bool) -> None:
    retained = 4
    config = td.Config(retention_max_runs=retained)
    store = td.MemoryStore() if with_store else None
    subagents = [sub("quick", returning("done"))]
    async with (
        td.open_runtime(subagents, config=config, store=store) as rt,
        rt.open_parent() as parent,
        trio.open_nursery() as nursery,
    ):
        book = TaskBook(parent, rt.store, rt.config, 1000)

        async def settlements() -> None:
            # As the server tells its book of every end.
            async for handle in parent.settled():
                book.settled(handle)

        nursery.start_soon(settlements)
        task_ids: list[str] = []
        for i in range(10 * retained):
            started = await parent.tools().call(
                "delegate_task", {"subagent": "quick", "task": f"t{i}", "background": True}
            )
            created = await book.create(started)
            task_ids.append(created["taskId"])
            await parent.wait(created["taskId"])
            done = await book.get(created["taskId"])
            assert done["status"] == "completed"
            # Counted, not timed: the book holds no more than retention does.
            assert len(book) <= retained, (i, len(book))
        first = task_ids[0]
        if store is None:
            # Retention evicted its run: the task has expired (contract §8).
            with pytest.raises(MCPError) as expired:
                await book.get(first)
            assert expired.value.code == -32602
            assert "has expired" in expired.value.message
        else:
            # The store answers for an evicted run: the task reads as it ended.
            kept = await book.get(first)
            assert kept["status"] == "completed"
            assert kept["result"]["structuredContent"]["final_result"] == "done"
            assert ISO.match(kept["createdAt"])
        assert len(book) <= retained
        nursery.cancel_scope.cancel()


# -- one owner, two processes, one store -----------------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def shared_store(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The ``[runtime] store`` line of server processes that share one store."""
    if request.param == "sqlite":
        return 'store = "runs.db"'
    import psycopg

    server = request.getfixturevalue("pg_server")
    # A database of its own (the server's config names no schema); the
    # throwaway server goes with the session.
    database = "t_" + secrets.token_hex(8)
    with psycopg.connect(server.admin_dsn(), autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {database}")
    # A configuration file holds no password: the servers read it from the environment.
    monkeypatch.setenv("PGPASSWORD", server.password)
    return f"store = {json.dumps(server.dsn(password=False, database=database))}"


async def test_a_listen_hears_the_end_of_a_task_another_process_of_its_owner_runs(
    tmp_path: Path, shared_store: str
) -> None:
    config = tmp_path / "server.toml"
    config.write_text(config_text(tmp_path, server='owner = "desk"', runtime=shared_store))
    async with serving(config) as a, serving(config) as b:
        created = await a.call(
            "delegate_task", {"subagent": "gated", "task": "far", "background": True}
        )
        task_id = created["taskId"]
        # At once: B looks an id its view of the store does not know yet up in the store.
        stream = await b.listen([task_id])
        ack = await b.on_stream("notifications/subscriptions/acknowledged", stream)
        assert ack["notifications"]["taskIds"] == [task_id]
        a.release("far")
        # B hears the end A committed to the store (hang guard: ANSWER_SECONDS).
        ended = await b.on_stream("notifications/tasks", stream)
        await b.unlisten(stream)
        assert ended["taskId"] == task_id
        assert ended["status"] == "completed"
        assert ended["result"]["structuredContent"]["final_result"] == "FAR"
        read = (await b.request("tasks/get", {"taskId": task_id}))["result"]
        assert without_meta(ended) == {
            k: v for k, v in read.items() if k not in ("_meta", "resultType")
        }


# -- legacy connections --------------------------------------------------------------


async def test_the_legacy_handshake_declares_logging_and_honours_set_level(
    legacy: Wire,
) -> None:
    assert "logging" in legacy.handshake["capabilities"]
    assert "extensions" not in legacy.handshake["capabilities"]
    # The tasks methods do not exist on this connection, as before.
    answer = await legacy.request("tasks/get", {"taskId": "x"}, tasks=None)
    assert answer["error"]["code"] == -32601

    quiet = await legacy.request("logging/setLevel", {"level": "warning"}, tasks=None)
    assert quiet["result"] == {}
    hushed = await legacy.call(
        "delegate_task", {"subagent": "echo", "task": "a", "background": True}, tasks=None
    )
    hushed_id = hushed["structuredContent"]["run_id"]
    await legacy.call("wait_subagent", {"run_id": hushed_id}, tasks=None)

    await legacy.request("logging/setLevel", {"level": "info"}, tasks=None)
    heard = await legacy.call(
        "delegate_task", {"subagent": "echo", "task": "b", "background": True}, tasks=None
    )
    heard_id = heard["structuredContent"]["run_id"]
    assert "resultType" not in heard
    notices: list[dict[str, Any]] = []
    while not notices or notices[-1]["data"]["run_id"] != heard_id:
        notices.append((await legacy.notification("notifications/message"))["params"])
    assert {notice["logger"] for notice in notices} == {"trio_delegate.settled"}
    # The hushed run's notice never came.
    assert hushed_id not in [notice["data"]["run_id"] for notice in notices]


# -- lines that are JSON but no JSON-RPC message ---------------------------------------


JSON_NOT_JSON_RPC: list[tuple[bytes, Any]] = [
    # A batch (MCP has none): its request is answered for its own id.
    (b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]', 1),
    (b'{"jsonrpc":"1.0","id":2,"method":"ping"}', 2),
    (b'{"id":"three","method":"ping"}', "three"),
    (b'{"jsonrpc":"2.0","id":4,"method":"tools/list","params":[1,2]}', 4),
    (b"17", None),
]


async def json_that_is_no_json_rpc_message_is_answered(wire: Wire, *, legacy: bool) -> None:
    for line, request_id in JSON_NOT_JSON_RPC:
        await wire.send_line(line)
        answer = await wire.answer(request_id)
        assert answer["error"]["code"] == -32600, (line, answer)
        assert "not a JSON-RPC 2.0 message" in answer["error"]["message"]
    # And the connection still works.
    tools = await wire.request("tools/list", tasks=None if legacy else False)
    assert any(tool["name"] == "delegate_task" for tool in tools["result"]["tools"])


async def test_json_that_is_no_json_rpc_message_is_answered_modern(wire: Wire) -> None:
    assert "result" in await wire.request("server/discover")
    await json_that_is_no_json_rpc_message_is_answered(wire, legacy=False)


async def test_json_that_is_no_json_rpc_message_is_answered_legacy(legacy: Wire) -> None:
    await json_that_is_no_json_rpc_message_is_answered(legacy, legacy=True)


# -- owners across restarts ----------------------------------------------------------


async def test_a_stable_owner_reads_its_tasks_after_a_restart(tmp_path: Path) -> None:
    config = tmp_path / "server.toml"
    store = 'store = "runs.db"'
    config.write_text(config_text(tmp_path, server='owner = "desk"', runtime=store))
    async with serving(config) as wire:
        done = await wire.call(
            "delegate_task", {"subagent": "echo", "task": "kept", "background": True}
        )
        live = await wire.call(
            "delegate_task", {"subagent": "gated", "task": "cut", "background": True}
        )
        # Known to have ended from the server's own notice (which observes nothing new).
        stream = await wire.listen([done["taskId"]])
        notice = await wire.on_stream("notifications/tasks", stream)
        assert notice["status"] == "completed"
    # The server ended on SIGTERM, cancelling the live run. A new one of the same
    # owner, given by the flag, which wins over the file's:
    config.write_text(config_text(tmp_path, server='owner = "elsewhere"', runtime=store))
    async with serving(config, "--owner", "desk") as wire:
        kept = (await wire.request("tasks/get", {"taskId": done["taskId"]}))["result"]
        assert kept["status"] == "completed"
        assert kept["result"]["structuredContent"]["final_result"] == "kept"
        assert ISO.match(kept["createdAt"])
        cut = (await wire.request("tasks/get", {"taskId": live["taskId"]}))["result"]
        assert cut["status"] in ("cancelled", "completed")
        assert cut["status"] == "cancelled" or cut["result"]["isError"] is True

    # Without an owner, each process has its own: the ids mean nothing to the next.
    config.write_text(config_text(tmp_path, runtime=store))
    async with serving(config) as wire:
        answer = await wire.request("tasks/get", {"taskId": done["taskId"]})
        assert answer["error"]["code"] == -32602


@pytest.mark.parametrize("owner", ['""', '"a/b"', "5", '"tab\\there"'])
def test_a_bad_server_owner_is_a_config_error_naming_the_key(tmp_path: Path, owner: str) -> None:
    from trio_delegate.mcp import ConfigError, load_server_config

    config = tmp_path / "server.toml"
    config.write_text(config_text(tmp_path, server=f"owner = {owner}"))
    with pytest.raises(ConfigError, match=r"server\.owner"):
        load_server_config(config)


@pytest.mark.parametrize("owner", ["", "a/b", "tab\there", "x" * 129])
def test_a_bad_owner_flag_is_a_usage_error_naming_the_flag(
    tmp_path: Path, owner: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "server.toml"
    config.write_text(config_text(tmp_path))
    with pytest.raises(SystemExit) as exit_info:
        main(["serve", "--config", str(config), "--owner", owner])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "argument --owner: must be a name of 1 to 128 printable characters without '/'" in err
    assert f'got "{owner}"'.replace("\t", "\\x09") in err  # shown, never acted on


def test_a_server_owner_is_read(tmp_path: Path) -> None:
    from trio_delegate.mcp import load_server_config

    config = tmp_path / "server.toml"
    config.write_text(config_text(tmp_path, server='owner = "desk"'))
    assert load_server_config(config).owner == "desk"
    config.write_text(config_text(tmp_path))
    assert load_server_config(config).owner is None


async def test_a_listener_hears_the_end_of_a_task_that_asked_only_when_it_ends() -> None:
    # A wait answers early while a run waits for an answer (contract §19);
    # the end of the task is still its end.
    async def asks(ctx: td.ChildContext) -> Any:
        return await ctx.ask("which?")

    async with (
        td.open_runtime([sub("asker", asks, asks=True)]) as rt,
        rt.open_parent() as parent,
    ):
        book = TaskBook(parent, None, rt.config, 1000)
        handle = await parent.start("asker", "t")
        heard: list[bool] = []

        async def hear() -> None:
            heard.append(await book._await_end(handle.run_id))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(hear)
            await trio.testing.wait_all_tasks_blocked()
            assert parent.status(handle.run_id).status is td.RunStatus.INPUT_REQUIRED
            assert heard == []
            parent.answer(handle.run_id, "this one")
        assert heard == [True]
