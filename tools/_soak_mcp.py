"""An MCP connection in the soak (used by ``tools/soak.py mcp``).

One more process starts ``trio-delegate serve`` over stdio on the soak's
store, with a fixed owner (:data:`OWNER`), and drives it with raw JSON-RPC
lines on the Tasks path (2026-07-28 requests declaring the Tasks extension
and form elicitation): background ``delegate_task`` calls that answer with a
task, ``tasks/get`` polls, ``tasks/update`` answers to a run's questions
(``input_required``), and ``tasks/cancel``. The server's subagents are the
soak's own runners (``soak:work``, ``soak:asker``).

Every request goes into this process's history before it is sent, and its
answer once read, in the recorder's vocabulary (``Parent`` calls), so the
checker reads it with the workers' histories:

=====================  =========  ==========================================================
JSON-RPC               op         answer recorded
=====================  =========  ==========================================================
``tools/call``         ``start``  ``{"type": "handle", run_id: taskId, status: "pending"}``;
``delegate_task``                 a JSON-RPC error or an error result: raised ``MCPError``
``tasks/get``          ``wait``   (``timeout=0``: what the server does for an ended task)
                                  working: a handle ``running``; input_required: a handle
                                  ``input_required``; completed: a ``result`` with the
                                  ``final_result`` of ``structuredContent``, or, when the
                                  status message says the run ended failed or timed out,
                                  raised ``RunFailedError``/``RunTimedOutError``;
                                  cancelled: raised ``RunCancelledError``
``tasks/update``       ``answer`` ``{"type": "update_ack", run_id}``: the empty ack says
                       or                 nothing of whether the answer was taken, so it
                       ``decline``        is not an acceptance the checker counts
``tasks/cancel``       ``cancel`` ``{"type": "cancel_sent", run_id}``: no status claimed
(end of stdin)         note       ``runtime_closed`` once the server has exited
=====================  =========  ==========================================================

The connection's runs are checked like the workers' (one ending, the result
the store holds, admission durable, statuses monotonic, nothing live at the
end, observed only through a result handed out), and a killed server's runs
end failed (interrupted). With ``--serve-kills`` the schedule kills the
server between two calls (the driver keeps that schedule itself); it starts
a new one with a new history. A PostgreSQL restart reaches it through the store.
The server samples its own memory and event-loop steps as a worker does
(``tools/_soak_serve.py``); this process samples its own.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import trio

import trio_delegate.testing as tdt

#: The connection's fixed owner (``[server] owner``): its runs are its own.
OWNER = "dora"
PARENT = "mcp"
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
#: The longest a single answer may take before the driver gives up on the server.
ANSWER_SECONDS = 60.0
_ENDED = re.compile(r"ended (completed|failed|timed_out|cancelled)")
_ERROR_OF = {
    "failed": "RunFailedError",
    "timed_out": "RunTimedOutError",
    "cancelled": "RunCancelledError",
}

CONFIG = """\
[runtime]
store = {store}
# Every run stays in the store for the check (see soak.open_store).
store_max_rows = "none"
store_retention_seconds = "none"

[server]
owner = "{owner}"

[[subagents]]
name = "work"
description = "The soak's runner: the task's first word says ok, fail, hang, shield or swallow."
python = "soak:work"
timeout_seconds = 2

[[subagents]]
name = "asker"
description = "Asks its parent whether to go on, and returns the answer."
python = "soak:asker"
asks = true
timeout_seconds = 5
"""


def meta() -> dict[str, Any]:
    """What each request declares: the 2026-07-28 protocol, Tasks and form elicitation."""
    return {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {
            "extensions": {TASKS_EXTENSION: {}},
            "elicitation": {"form": {}},
        },
        "io.modelcontextprotocol/clientInfo": {"name": "soak", "version": "0"},
    }


class Wire:
    """Raw JSON-RPC lines to a server process over its stdin and stdout."""

    def __init__(self, process: trio.Process) -> None:
        assert process.stdin is not None
        assert process.stdout is not None
        self.stdin = process.stdin
        self.stdout = process.stdout
        self.buffer = b""
        self.next_id = 0

    async def request(self, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """Send one request; its answer (notifications and other lines are skipped)."""
        self.next_id += 1
        request_id = self.next_id
        message = {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": method,
            "params": {**params, "_meta": meta()},
        }
        await self.stdin.send_all(json.dumps(message).encode() + b"\n")
        with trio.fail_after(ANSWER_SECONDS):
            while True:
                while b"\n" not in self.buffer:
                    chunk = await self.stdout.receive_some()
                    if not chunk:
                        raise EOFError(f"the server closed its stdout during {method}")
                    self.buffer += chunk
                line, self.buffer = self.buffer.split(b"\n", 1)
                answer: dict[str, Any] = json.loads(line)
                if answer.get("id") == request_id and "method" not in answer:
                    return answer


class Connection:
    """One MCP connection's seeded play, every call recorded."""

    def __init__(self, wire: Wire, recorder: tdt.HistoryRecorder, rng: random.Random) -> None:
        self.wire = wire
        self.recorder = recorder
        self.rng = rng
        self.live: list[str] = []  # task ids not yet seen ended
        self.asking: dict[str, list[str]] = {}  # task id -> open input request keys

    def _call(self, op: str, **args: Any) -> int:
        return self.recorder.call(op, parent=PARENT, owner=OWNER, **args)

    def _returned(self, call: int, op: str, value: Mapping[str, Any]) -> None:
        self.recorder.returned(call, op, value, parent=PARENT, owner=OWNER)

    def _raised(self, call: int, op: str, error: Mapping[str, Any]) -> None:
        self.recorder.raised(call, op, error, parent=PARENT, owner=OWNER)

    async def delegate(self) -> None:
        subagent = "asker" if self.rng.random() < 0.3 else "work"
        kind = self.rng.choice(("ok", "ok", "ok", "fail", "hang", "shield", "swallow"))
        task = f"{kind} {self.rng.randrange(1, 200)} {self.rng.randrange(10**6)}"
        arguments = {"subagent": subagent, "task": task, "background": True}
        call = self._call("start", name=subagent, task=task, background=True, via="tools/call")
        answer = await self.wire.request(
            "tools/call", {"name": "delegate_task", "arguments": arguments}
        )
        result = answer.get("result") or {}
        if "error" in answer or result.get("resultType") != "task":
            message = json.dumps(answer.get("error") or result)[:500]
            self._raised(call, "start", {"type": "MCPError", "message": message})
            return
        task_id = str(result["taskId"])
        self.live.append(task_id)
        self._returned(call, "start", {"type": "handle", "run_id": task_id, "status": "pending"})

    async def get(self, task_id: str) -> str:
        """Poll the task once; the status it read."""
        call = self._call("wait", run_id=task_id, timeout=0, via="tasks/get")
        answer = await self.wire.request("tasks/get", {"taskId": task_id})
        if "error" in answer:
            self._raised(call, "wait", {"type": "MCPError", "message": json.dumps(answer)[:500]})
            return "error"
        task = answer["result"]
        status = task["status"]
        if status in ("working", "input_required"):
            self.asking[task_id] = list(task.get("inputRequests") or ())
            state = "running" if status == "working" else "input_required"
            self._returned(call, "wait", {"type": "handle", "run_id": task_id, "status": state})
            return state
        self.asking.pop(task_id, None)
        if task_id in self.live:
            self.live.remove(task_id)
        found = _ENDED.search(str(task.get("statusMessage", "")))
        ended = found.group(1) if found else ("cancelled" if status == "cancelled" else "?")
        if ended == "completed":
            content = (task.get("result") or {}).get("structuredContent") or {}
            value = {
                "type": "result",
                "run_id": task_id,
                "final_result": content.get("final_result"),
            }
            self._returned(call, "wait", value)
        else:
            error = {
                "type": _ERROR_OF.get(ended, "MCPError"),
                "run_id": task_id,
                "status": ended,
                "message": str(task.get("statusMessage", ""))[:500],
            }
            self._raised(call, "wait", error)
        return ended

    async def update(self, task_id: str, key: str) -> None:
        accept = self.rng.random() < 0.7
        op = "answer" if accept else "decline"
        response: dict[str, Any] = (
            {"action": "accept", "content": {"answer": "yes"}} if accept else {"action": "decline"}
        )
        call = self._call(op, run_id=task_id, question_id=key, via="tasks/update")
        answer = await self.wire.request(
            "tasks/update", {"taskId": task_id, "inputResponses": {key: response}}
        )
        if "error" in answer:
            self._raised(call, op, {"type": "MCPError", "message": json.dumps(answer)[:500]})
        else:
            self._returned(call, op, {"type": "update_ack", "run_id": task_id})

    async def cancel(self, task_id: str) -> None:
        call = self._call("cancel", run_id=task_id, via="tasks/cancel")
        answer = await self.wire.request("tasks/cancel", {"taskId": task_id})
        if "error" in answer:
            self._raised(call, "cancel", {"type": "MCPError", "message": json.dumps(answer)[:500]})
        else:
            self._returned(call, "cancel", {"type": "cancel_sent", "run_id": task_id})

    async def step(self) -> None:
        op = self.rng.choices(["delegate", "get", "update", "cancel"], weights=[35, 45, 12, 8])[0]
        if op == "delegate" or not self.live:
            await self.delegate()
            return
        task_id = self.rng.choice(self.live)
        if op == "update" and self.asking.get(task_id):
            await self.update(task_id, self.asking[task_id][0])
        elif op == "cancel":
            await self.cancel(task_id)
        else:
            await self.get(task_id)

    async def resolve(self) -> None:
        """Poll every task until it ends, answering its questions."""
        for task_id in list(self.live):
            while await self.get(task_id) in ("running", "input_required"):
                if self.asking.get(task_id):
                    await self.update(task_id, self.asking[task_id][0])
                await trio.sleep(0.05)


def config_text(location: str) -> str:
    """The server's configuration for the soak's store (a PostgreSQL URI without its password)."""
    if location.startswith("postgresql://"):
        store = json.dumps(re.sub(r"(postgresql://[^:@/]+):[^@]*@", r"\1@", location))
    else:
        store = json.dumps(str(Path(location).resolve()))
    return CONFIG.format(store=store, owner=OWNER)


#: What :func:`prepare` makes: the ``trio-delegate`` arguments, the environment, the log.
Launch = tuple[list[str], dict[str, str], Path]


def prepare(args: Any) -> Launch:
    """The ``trio-delegate`` arguments that serve the soak's store, the server's
    environment, and its stderr log."""
    directory = Path(args.dir)
    folder = directory / "mcp"
    folder.mkdir(exist_ok=True)
    config = folder / "serve.toml"
    config.write_text(config_text(args.store), encoding="utf-8")
    env = dict(os.environ)
    # The subagents are this folder's soak:work and soak:asker.
    tools = str(Path(__file__).resolve().parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (tools, env.get("PYTHONPATH")) if p)
    password = re.match(r"postgresql://[^:@/]+:([^@]*)@", args.store)
    if password:
        env["PGPASSWORD"] = password.group(1)  # a configuration file holds no password
    return ["serve", "--config", str(config)], env, folder / "serve.stderr"


class Served:
    """One incarnation of the server and the connection's history with it."""

    def __init__(
        self, process: trio.Process, recorder: tdt.HistoryRecorder, rng: random.Random
    ) -> None:
        self.process = process
        self.recorder = recorder
        self.connection = Connection(Wire(process), recorder, rng)

    @classmethod
    async def start(
        cls,
        args: Any,
        name: str,
        rng: random.Random,
        served: tuple[list[str], dict[str, str], Path],
    ) -> Served:
        """A server process (*served*: what :func:`prepare` made), and the history
        *name* of the calls to it."""
        argv, env, log_path = served
        # The real command line, its event loop timed as the workers' are (_soak_serve.py).
        samples = Path(args.dir) / "samples" / f"{name}.serve.jsonl"
        command = [sys.executable, "-m", "_soak_serve", str(samples), *argv]
        recorder = tdt.HistoryRecorder(name, Path(args.dir) / f"{name}.jsonl", keep_events=False)
        with log_path.open("ab") as log:
            process = await trio.lowlevel.open_process(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=env
            )
        return cls(process, recorder, rng)

    async def kill(self) -> None:
        """SIGKILL the server; its history ends with the kill."""
        self.process.kill()
        await self.process.wait()
        self.recorder.note("killed", signal="SIGKILL")
        self.recorder.close()
        await self._close_pipes()

    async def close(self) -> None:
        """End the connection (the end of stdin), and the server with it."""
        try:
            assert self.process.stdin is not None
            await self.process.stdin.aclose()
            with trio.move_on_after(30):
                await self.process.wait()
            if self.process.returncode is None:
                self.process.kill()
                await self.process.wait()
            self.recorder.note("runtime_closed", exit_code=self.process.returncode)
        finally:
            self.recorder.close()
            await self._close_pipes()

    async def _close_pipes(self) -> None:
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                await pipe.aclose()


async def run_connection(args: Any, sampler_of: Any) -> None:
    """Start the server, play ``args.ops`` calls (or until ``args.seconds``), resolve, close.

    *sampler_of* makes this process's sampler (the soak's ``Sampler``) from the
    first history's recorder; the server samples itself
    (``samples/<process>.serve.jsonl``). At each of ``args.kill_at`` (events
    recorded by the connection, or with ``args.seconds`` seconds since it
    began) the server is killed between two calls and a new one started, with
    a new history (``m1.1``, ``m1.2``, ...): the schedule is the driver's own,
    so a seed replays it call for call.
    """
    rng = random.Random(f"{args.seed}/{args.process}")
    began = time.monotonic()
    deadline = float("inf") if args.seconds is None else began + args.seconds
    kills: list[float] = sorted(args.kill_at)
    base, number = args.process.rsplit(".", 1)
    incarnation = int(number)
    launch = prepare(args)
    served = await Served.start(args, args.process, rng, launch)
    sampler = sampler_of(served.recorder)

    def due() -> bool:
        if args.seconds is None:
            return bool(sampler.recorded >= kills[0])
        return bool(time.monotonic() - began >= kills[0])

    try:
        async with trio.open_nursery() as sampling:
            sampling.start_soon(sampler.run)
            for _ in range(args.ops):
                if time.monotonic() > deadline:
                    break
                if kills and due():
                    when = kills.pop(0)
                    killed = served.recorder.process
                    await served.kill()
                    incarnation += 1
                    served = await Served.start(args, f"{base}.{incarnation}", rng, launch)
                    sampler.follow(served.recorder)
                    print(
                        f"  fault servekill at {when:g}: killed the MCP server of {killed}; "
                        f"{served.recorder.process} serves the connection",
                        flush=True,
                    )
                await served.connection.step()
                await trio.sleep(rng.random() * 0.05)
            await served.connection.resolve()
            sampling.cancel_scope.cancel()
        sampler.sample()
    finally:
        await served.close()
