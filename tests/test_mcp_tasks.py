"""The MCP Tasks extension and the 2026-07-28 wire, line by line against ``trio-delegate serve``.

Every request here is a raw JSON-RPC line written to a real server process:
2026-07-28 requests carry their own ``_meta`` envelope (no initialize
handshake), and declare the ``io.modelcontextprotocol/tasks`` extension in
their own client capabilities, or do not. A legacy connection (the
``initialize`` handshake) must behave exactly as it did before the extension.

Runs are held by a gate file the test creates to release them, and the test
waits for a run's end on the server's own ``notifications/tasks`` stream or
with ``wait_subagent``, never on the clock.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

pytest.importorskip("mcp")

from trio_delegate.mcp._tasks import TASKS_EXTENSION

PY = sys.executable

#: Outer hang guard for one answer (the server answers in milliseconds).
ANSWER_SECONDS = 30

#: A subagent that waits until its gate file exists, then echoes its task.
GATED = (
    "import os, sys, time\n"
    "task = sys.stdin.read()\n"
    "gate = os.environ['GATE']\n"
    "while not os.path.exists(gate):\n"
    "    time.sleep(0.01)\n"
    "print(task.upper())\n"
)


def config_text(tmp_path: Path, server: str = "", runtime: str = "") -> str:
    gate = tmp_path / "gate"
    return f"""
[runtime]
{runtime}

[server]
{server}

[[subagents]]
name = "gated"
description = "Waits for its gate, then shouts the task."
command = [{json.dumps(PY)}, "-c", {json.dumps(GATED)}]
env = {{ GATE = {json.dumps(str(gate))} }}

[[subagents]]
name = "echo"
description = "Echoes the task."
command = [{json.dumps(PY)}, "-c", "import sys; print(sys.stdin.read())"]

[[subagents]]
name = "broken"
description = "Always fails."
command = [{json.dumps(PY)}, "-c", "import sys; sys.exit('broken on purpose')"]
"""


def envelope(*, tasks: bool = True) -> dict[str, Any]:
    """The 2026-07-28 ``_meta`` envelope of one request."""
    capabilities: dict[str, Any] = {"extensions": {TASKS_EXTENSION: {}}} if tasks else {}
    return {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "raw-test", "version": "0"},
    }


class Wire:
    """Raw lines to a server process; its answers by id, its notifications in order."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.buffer = b""
        self.answers: dict[Any, dict[str, Any]] = {}
        self.notifications: list[dict[str, Any]] = []
        self.next_id = 100

    async def send_line(self, line: bytes) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send_all(line + b"\n")

    async def send(self, message: dict[str, Any]) -> None:
        await self.send_line(json.dumps(message).encode())

    async def _read_one(self) -> None:
        assert self.process.stdout is not None
        while b"\n" not in self.buffer:
            chunk = await self.process.stdout.receive_some()
            assert chunk, f"the server closed its stdout; it had sent {self.buffer!r}"
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        message: dict[str, Any] = json.loads(line)
        if "id" in message and "method" not in message:
            self.answers[message["id"]] = message
        else:
            self.notifications.append(message)

    async def answer(self, request_id: Any) -> dict[str, Any]:
        with trio.fail_after(ANSWER_SECONDS):
            while request_id not in self.answers:
                await self._read_one()
        return self.answers.pop(request_id)

    async def notification(self, method: str) -> dict[str, Any]:
        """The first notification of *method* not yet taken."""
        with trio.fail_after(ANSWER_SECONDS):
            while True:
                for i, message in enumerate(self.notifications):
                    if message.get("method") == method:
                        return self.notifications.pop(i)
                await self._read_one()

    async def request(
        self, method: str, params: dict[str, Any] | None = None, *, tasks: bool | None = True
    ) -> dict[str, Any]:
        """Send a request (2026-07-28 unless *tasks* is None: legacy) and read its answer."""
        self.next_id += 1
        body = dict(params or {})
        if tasks is not None:
            body["_meta"] = {**envelope(tasks=tasks), **body.get("_meta", {})}
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if body:
            message["params"] = body
        await self.send(message)
        return await self.answer(self.next_id)

    async def call(
        self, tool: str, arguments: dict[str, Any], *, tasks: bool | None = True
    ) -> dict[str, Any]:
        answer = await self.request(
            "tools/call", {"name": tool, "arguments": arguments}, tasks=tasks
        )
        assert "result" in answer, answer
        result: dict[str, Any] = answer["result"]
        return result

    async def initialize(self) -> dict[str, Any]:
        """The legacy handshake."""
        answer = await self.request(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "raw-test", "version": "0"},
            },
            tasks=None,
        )
        await self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return answer


@asynccontextmanager
async def serving(config: Path) -> AsyncIterator[Wire]:
    process = await trio.lowlevel.open_process(
        [PY, "-m", "trio_delegate", "serve", "--config", str(config)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield Wire(process)
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        with trio.fail_after(ANSWER_SECONDS):
            await process.wait()


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "server.toml"
    path.write_text(config_text(tmp_path))
    return path


def release(config: Path) -> None:
    (config.parent / "gate").write_text("open")


ISO = re.compile(r"\A\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z\Z")


def tool_result(result: dict[str, Any]) -> dict[str, Any]:
    """A tools/call result without the ``serverInfo`` stamp the server puts on answers."""
    return {k: v for k, v in result.items() if k != "_meta"}


# -- discovery and the capability gate -------------------------------------------------


async def test_discovery_advertises_the_tasks_extension(config: Path) -> None:
    async with serving(config) as wire:
        answer = await wire.request("server/discover", tasks=False)
        capabilities = answer["result"]["capabilities"]
        assert capabilities["extensions"] == {TASKS_EXTENSION: {}}
        assert "logging" not in capabilities
        assert not capabilities["tools"].get("listChanged")


async def test_requests_that_do_not_declare_the_extension_get_no_tasks(config: Path) -> None:
    async with serving(config) as wire:
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


async def test_task_methods_outside_the_extension_stay_unknown(config: Path) -> None:
    async with serving(config) as wire:
        for method in ("tasks/result", "tasks/list"):
            answer = await wire.request(method, {"taskId": "x"})
            assert answer["error"]["code"] == -32601, method
        # A listen for anything but tasks is not served, as before.
        listen = await wire.request("subscriptions/listen", {"notifications": {}})
        assert listen["error"]["code"] == -32601


async def test_an_unknown_or_malformed_task_id_is_invalid_params(config: Path) -> None:
    async with serving(config) as wire:
        for method in ("tasks/get", "tasks/cancel", "tasks/update"):
            for task_id in ("run_made_up", 5, None):
                answer = await wire.request(method, {"taskId": task_id})
                assert answer["error"]["code"] == -32602, (method, task_id, answer)
        answer = await wire.request("tasks/get", {"taskId": "run_made_up"})
        assert "run_made_up" in answer["error"]["message"]


# -- a task's life ---------------------------------------------------------------------


async def test_a_background_delegation_is_a_task_polled_to_its_result(config: Path) -> None:
    async with serving(config) as wire:
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

        listen_id = wire.next_id + 1
        await wire.send(
            {
                "jsonrpc": "2.0",
                "id": listen_id,
                "method": "subscriptions/listen",
                "params": {"notifications": {"taskIds": [task_id]}, "_meta": envelope()},
            }
        )
        await wire.notification("notifications/subscriptions/acknowledged")
        release(config)
        ended = (await wire.notification("notifications/tasks"))["params"]
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
        assert {k: v for k, v in ended.items() if k != "_meta"} == {
            k: v for k, v in done.items() if k not in ("_meta", "resultType")
        }


async def test_a_failed_run_is_a_completed_task_with_the_error_result(config: Path) -> None:
    async with serving(config) as wire:
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
    config: Path,
) -> None:
    async with serving(config) as wire:
        created = await wire.call(
            "delegate_task", {"subagent": "gated", "task": "never", "background": True}
        )
        task_id = created["taskId"]
        # Two at once, as Claude Code sends them.
        first, second = wire.next_id + 1, wire.next_id + 2
        wire.next_id += 2
        for request_id in (first, second):
            await wire.send(
                {
                    "jsonrpc": "2.0",
                    "id": request_id,
                    "method": "tasks/cancel",
                    "params": {"taskId": task_id, "_meta": envelope()},
                }
            )
        for request_id in (first, second):
            ack = (await wire.answer(request_id))["result"]
            assert {k: v for k, v in ack.items() if k != "_meta"} == {"resultType": "complete"}
        waited = await wire.call("wait_subagent", {"run_id": task_id}, tasks=False)
        assert waited["isError"] is True
        task = (await wire.request("tasks/get", {"taskId": task_id}))["result"]
        assert task["status"] == "cancelled"
        assert "result" not in task
        again = await wire.request("tasks/cancel", {"taskId": task_id})
        assert "result" in again
        update = await wire.request("tasks/update", {"taskId": task_id, "inputResponses": {}})
        assert {k: v for k, v in update["result"].items() if k != "_meta"} == {
            "resultType": "complete"
        }


async def test_a_background_continuation_is_a_task(config: Path) -> None:
    async with serving(config) as wire:
        first = await wire.call("delegate_task", {"subagent": "echo", "task": "one"}, tasks=False)
        run_id = first["structuredContent"]["run_id"]
        created = await wire.call(
            "continue_subagent", {"run_id": run_id, "message": "two", "background": True}
        )
        assert created["resultType"] == "task"
        waited = await wire.call("wait_subagent", {"run_id": created["taskId"]}, tasks=False)
        task = (await wire.request("tasks/get", {"taskId": created["taskId"]}))["result"]
        assert task["status"] == "completed"
        assert task["result"] == tool_result(waited)


async def test_a_foreground_call_past_the_limit_becomes_a_task(tmp_path: Path) -> None:
    config = tmp_path / "server.toml"
    config.write_text(config_text(tmp_path, server="foreground_limit_seconds = 0.2"))
    async with serving(config) as wire:
        created = await wire.call("delegate_task", {"subagent": "gated", "task": "slow"})
        assert created["resultType"] == "task"
        assert created["status"] == "working"
        # Without the extension the same call answers with the handle, as before.
        handle = await wire.call("delegate_task", {"subagent": "gated", "task": "b"}, tasks=False)
        assert handle["structuredContent"]["status"] in ("pending", "running")
        release(tmp_path / "server.toml")
        waited = await wire.call("wait_subagent", {"run_id": created["taskId"]}, tasks=False)
        assert waited["structuredContent"]["final_result"] == "SLOW"


async def test_a_listen_acknowledges_only_this_connections_tasks(config: Path) -> None:
    async with serving(config) as wire:
        created = await wire.call(
            "delegate_task", {"subagent": "echo", "task": "quick", "background": True}
        )
        await wire.call("wait_subagent", {"run_id": created["taskId"]}, tasks=False)
        await wire.send(
            {
                "jsonrpc": "2.0",
                "id": 7,
                "method": "subscriptions/listen",
                "params": {
                    "notifications": {"taskIds": [created["taskId"], "run_someone_else"]},
                    "_meta": envelope(),
                },
            }
        )
        ack = (await wire.notification("notifications/subscriptions/acknowledged"))["params"]
        assert ack["notifications"]["taskIds"] == [created["taskId"]]
        assert ack["_meta"]["io.modelcontextprotocol/subscriptionId"] == 7
        # It had ended already: its notice comes at once.
        notice = (await wire.notification("notifications/tasks"))["params"]
        assert notice["taskId"] == created["taskId"]
        assert notice["status"] == "completed"
        assert notice["_meta"]["io.modelcontextprotocol/subscriptionId"] == 7


# -- legacy connections --------------------------------------------------------------


async def test_the_legacy_handshake_declares_logging_and_honours_set_level(
    config: Path,
) -> None:
    async with serving(config) as wire:
        init = (await wire.initialize())["result"]
        assert "logging" in init["capabilities"]
        assert "extensions" not in init["capabilities"]
        # The tasks methods do not exist on this connection, as before.
        answer = await wire.request("tasks/get", {"taskId": "x"}, tasks=None)
        assert answer["error"]["code"] == -32601

        quiet = await wire.request("logging/setLevel", {"level": "warning"}, tasks=None)
        assert quiet["result"] == {}
        hushed = await wire.call(
            "delegate_task", {"subagent": "echo", "task": "a", "background": True}, tasks=None
        )
        hushed_id = hushed["structuredContent"]["run_id"]
        await wire.call("wait_subagent", {"run_id": hushed_id}, tasks=None)

        await wire.request("logging/setLevel", {"level": "info"}, tasks=None)
        heard = await wire.call(
            "delegate_task", {"subagent": "echo", "task": "b", "background": True}, tasks=None
        )
        heard_id = heard["structuredContent"]["run_id"]
        notice = (await wire.notification("notifications/message"))["params"]
        assert notice["logger"] == "trio_delegate.settled"
        assert notice["data"]["run_id"] == heard_id  # the hushed run's notice never came
        assert "resultType" not in heard


# -- lines that are JSON but no JSON-RPC message ---------------------------------------


@pytest.mark.parametrize("era", ["legacy", "modern"])
async def test_json_that_is_no_json_rpc_message_is_answered(config: Path, era: str) -> None:
    async with serving(config) as wire:
        if era == "legacy":
            await wire.initialize()
        else:
            assert "result" in await wire.request("server/discover")
        cases: list[tuple[bytes, Any]] = [
            (b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]', None),
            (b'{"jsonrpc":"1.0","id":2,"method":"ping"}', 2),
            (b'{"id":"three","method":"ping"}', "three"),
            (b'{"jsonrpc":"2.0","id":4,"method":"tools/list","params":[1,2]}', 4),
            (b"17", None),
        ]
        for line, request_id in cases:
            await wire.send_line(line)
            answer = await wire.answer(request_id)
            assert answer["error"]["code"] == -32600, (line, answer)
            assert "not a JSON-RPC 2.0 message" in answer["error"]["message"]
        # And the connection still works.
        tools = await wire.request("tools/list", tasks=None if era == "legacy" else False)
        assert any(tool["name"] == "delegate_task" for tool in tools["result"]["tools"])


# -- owners across restarts ----------------------------------------------------------


async def test_a_stable_owner_reads_its_tasks_after_a_restart(tmp_path: Path) -> None:
    config = tmp_path / "server.toml"
    config.write_text(config_text(tmp_path, server='owner = "desk"', runtime='store = "runs.db"'))
    async with serving(config) as wire:
        done = await wire.call(
            "delegate_task", {"subagent": "echo", "task": "kept", "background": True}
        )
        live = await wire.call(
            "delegate_task", {"subagent": "gated", "task": "cut", "background": True}
        )
        # Known to have ended from the server's own notice (which observes nothing new).
        await wire.send(
            {
                "jsonrpc": "2.0",
                "id": 9,
                "method": "subscriptions/listen",
                "params": {"notifications": {"taskIds": [done["taskId"]]}, "_meta": envelope()},
            }
        )
        notice = (await wire.notification("notifications/tasks"))["params"]
        assert notice["status"] == "completed"
    # The server ended on SIGTERM, cancelling the live run; a new one of the same owner:
    async with serving(config) as wire:
        kept = (await wire.request("tasks/get", {"taskId": done["taskId"]}))["result"]
        assert kept["status"] == "completed"
        assert kept["result"]["structuredContent"]["final_result"] == "kept"
        assert ISO.match(kept["createdAt"])
        cut = (await wire.request("tasks/get", {"taskId": live["taskId"]}))["result"]
        assert cut["status"] in ("cancelled", "completed")
        assert cut["status"] == "cancelled" or cut["result"]["isError"] is True

    # Without an owner, each process has its own: the ids mean nothing to the next.
    config.write_text(config_text(tmp_path, runtime='store = "runs.db"'))
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


def test_a_server_owner_is_read(tmp_path: Path) -> None:
    from trio_delegate.mcp import load_server_config

    config = tmp_path / "server.toml"
    config.write_text(config_text(tmp_path, server='owner = "desk"'))
    assert load_server_config(config).owner == "desk"
    config.write_text(config_text(tmp_path))
    assert load_server_config(config).owner is None
