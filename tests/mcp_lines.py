"""Raw JSON-RPC lines to an MCP server process, for the tests that speak the wire itself.

A :class:`Wire` writes request lines to a server's stdin and keeps every
message the server writes, in order; a test takes the one it waits for
(an answer by id, a notification by method and stream). The process may
outlive one test's Trio run: each test attaches fresh Trio streams over its
pipes, and what was read and not yet taken stays for the next test.

The waits are for the server's own lines, bounded only by the outer hang
guard :data:`ANSWER_SECONDS`; the clock is never slept on.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from trio_delegate.mcp._tasks import TASKS_EXTENSION

#: Outer hang guard for one answer (the server answers in milliseconds).
ANSWER_SECONDS = 30

#: What a 2026-07-28 request declares to be asked questions as forms, by name.
FORM: dict[str, Any] = {"elicitation": {"form": {}}}

#: The ``_meta`` key naming the listen stream a notification belongs to.
SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"


def envelope(*, tasks: bool = True, elicit: bool = False) -> dict[str, Any]:
    """The 2026-07-28 ``_meta`` envelope of one request.

    Args:
        tasks: declare the Tasks extension.
        elicit: declare form elicitation.
    """
    capabilities: dict[str, Any] = {}
    if tasks:
        capabilities["extensions"] = {TASKS_EXTENSION: {}}
    if elicit:
        capabilities.update(FORM)
    return {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "raw-test", "version": "0"},
    }


def subscription_of(message: dict[str, Any]) -> Any:
    """The listen stream a notification belongs to (its subscription id), or None."""
    return message.get("params", {}).get("_meta", {}).get(SUBSCRIPTION_ID)


class Wire:
    """Raw lines to a server process; every message it writes, in order.

    Args:
        process: the server, with piped stdin and stdout.
        gates: the folder of gate files the server's runs wait for.
        elicit: whether requests declare form elicitation unless told otherwise.
    """

    def __init__(
        self, process: subprocess.Popen[bytes], gates: Path, *, elicit: bool = False
    ) -> None:
        self.process = process
        self.gates = gates
        self.elicit = elicit
        self.buffer = b""
        #: Every message read, in the order the server wrote them.
        self.lines: list[dict[str, Any]] = []
        #: The messages read and not yet taken by a wait.
        self._untaken: list[dict[str, Any]] = []
        self.next_id = 1000
        #: The answer to ``initialize``, on a legacy connection.
        self.handshake: dict[str, Any] = {}
        self._stdin: trio.lowlevel.FdStream | None = None
        self._stdout: trio.lowlevel.FdStream | None = None

    @asynccontextmanager
    async def attached(self) -> AsyncIterator[Wire]:
        """Trio streams over the process's pipes, for one test's Trio run."""
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        stdin = trio.lowlevel.FdStream(os.dup(self.process.stdin.fileno()))
        stdout = trio.lowlevel.FdStream(os.dup(self.process.stdout.fileno()))
        self._stdin, self._stdout = stdin, stdout
        try:
            yield self
        finally:
            self._stdin = self._stdout = None
            await stdin.aclose()
            await stdout.aclose()

    def fresh_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def release(self, name: str) -> None:
        """Open the gate *name* a run of the server waits for."""
        (self.gates / name).write_text("open")

    def envelope(self, *, tasks: bool = True) -> dict[str, Any]:
        """The envelope this wire's requests carry unless told otherwise."""
        return envelope(tasks=tasks, elicit=self.elicit)

    # -- lines ------------------------------------------------------------------------

    async def send_line(self, line: bytes) -> None:
        assert self._stdin is not None
        await self._stdin.send_all(line + b"\n")

    async def send(self, message: dict[str, Any]) -> None:
        await self.send_line(json.dumps(message).encode())

    async def _read_one(self) -> None:
        assert self._stdout is not None
        while b"\n" not in self.buffer:
            chunk = await self._stdout.receive_some()
            assert chunk, f"the server closed its stdout; it had sent {self.buffer!r}"
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        message: dict[str, Any] = json.loads(line)
        self.lines.append(message)
        self._untaken.append(message)

    async def first(self, match: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """The first message not yet taken that *match* accepts (waiting for it); it is taken."""
        with trio.fail_after(ANSWER_SECONDS):
            index = 0
            while True:
                while index < len(self._untaken):
                    if match(self._untaken[index]):
                        return self._untaken.pop(index)
                    index += 1
                await self._read_one()

    async def answer(self, request_id: Any) -> dict[str, Any]:
        """The answer to the request *request_id*."""
        return await self.first(lambda m: m.get("id") == request_id and "method" not in m)

    async def notification(
        self, method: str, match: Callable[[dict[str, Any]], bool] = lambda _: True
    ) -> dict[str, Any]:
        """The first notification of *method* (that *match* accepts) not yet taken."""
        return await self.first(lambda m: m.get("method") == method and match(m))

    async def on_stream(self, method: str, subscription: Any) -> dict[str, Any]:
        """The next notification of *method* on the listen stream *subscription*: its params."""
        message = await self.notification(method, lambda m: subscription_of(m) == subscription)
        params: dict[str, Any] = message["params"]
        return params

    # -- requests ---------------------------------------------------------------------

    def message(
        self,
        request_id: Any,
        method: str,
        params: dict[str, Any] | None,
        *,
        tasks: bool | None = True,
        meta: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A request line: 2026-07-28 with this wire's envelope (or *meta*), legacy when
        *tasks* is None."""
        body = dict(params or {})
        if tasks is not None:
            given = meta if meta is not None else self.envelope(tasks=tasks)
            body["_meta"] = {**given, **body.get("_meta", {})}
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if body:
            message["params"] = body
        return message

    async def request(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        tasks: bool | None = True,
        meta: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Send a request and read its answer (see :meth:`message`)."""
        request_id = self.fresh_id()
        await self.send(self.message(request_id, method, params, tasks=tasks, meta=meta))
        return await self.answer(request_id)

    async def call(self, tool: str, arguments: dict[str, Any], **options: Any) -> dict[str, Any]:
        """A ``tools/call`` that must be answered with a result: the result."""
        answer = await self.request("tools/call", {"name": tool, "arguments": arguments}, **options)
        assert "result" in answer, answer
        result: dict[str, Any] = answer["result"]
        return result

    async def get(self, task_id: str, **options: Any) -> dict[str, Any]:
        """``tasks/get``: the task."""
        answer = await self.request("tasks/get", {"taskId": task_id}, **options)
        assert "result" in answer, answer
        task: dict[str, Any] = answer["result"]
        return task

    async def update(self, task_id: str, responses: Any, **options: Any) -> dict[str, Any]:
        """``tasks/update`` with *responses* as its ``inputResponses``: the answer."""
        return await self.request(
            "tasks/update", {"taskId": task_id, "inputResponses": responses}, **options
        )

    async def listen(self, task_ids: list[str]) -> int:
        """Open a ``subscriptions/listen`` stream for *task_ids*; its subscription id."""
        request_id = self.fresh_id()
        await self.send(
            self.message(
                request_id, "subscriptions/listen", {"notifications": {"taskIds": task_ids}}
            )
        )
        return request_id

    async def unlisten(self, subscription: int) -> None:
        """Close a listen stream, as a client does: cancel its request."""
        await self.send(
            {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": subscription, "_meta": envelope()},
            }
        )

    async def until(self, task_id: str, status: str, **options: Any) -> dict[str, Any]:
        """Poll ``tasks/get`` until the task reads *status*, waiting on a listen stream."""
        subscription = await self.listen([task_id])
        try:
            while True:
                task = await self.get(task_id, **options)
                if task["status"] == status:
                    return task
                await self.on_stream("notifications/tasks", subscription)
        finally:
            await self.unlisten(subscription)

    async def initialize(self) -> dict[str, Any]:
        """The legacy handshake: the answer to ``initialize``."""
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


def start(
    command: list[str],
    gates: Path,
    *,
    cwd: Path | None = None,
    errlog: Any = subprocess.DEVNULL,
    elicit: bool = False,
) -> Wire:
    """A server process running *command*, with raw lines to it."""
    gates.mkdir(exist_ok=True)
    process = subprocess.Popen(
        command, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errlog
    )
    return Wire(process, gates, elicit=elicit)


def stop(wire: Wire, *, terminate: bool = False) -> None:
    """End the server and reap it.

    Args:
        terminate: SIGTERM it (a server cancels its live runs and exits); by
            default its input ends, which ends its one connection.
    """
    process = wire.process
    if terminate and process.poll() is None:
        process.send_signal(signal.SIGTERM)
    elif process.stdin is not None:
        process.stdin.close()
    try:
        process.wait(ANSWER_SECONDS)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for pipe in (process.stdin, process.stdout):
            if pipe is not None:
                pipe.close()
