"""The real interactive Claude Code drives a run through the MCP Tasks extension.

Run with ``make test-claude-interactive`` (not part of ``make test``: a
terminal session of Claude Code takes some 20 s on a busy machine, see
``docs/testing.md``). The bundled ``claude`` runs without ``-p`` in a
pseudo-terminal, against the fake Anthropic server on 127.0.0.1, with
``trio-delegate serve`` as its MCP server behind ``tee``, so that the test
reads every line the client sent. The fake model delegates in the
background; the test checks that Claude Code took the answer as a task,
holds the run until Claude Code has polled ``tasks/get``, releases it, and
checks that the model's next request carries the run's result.

With ``tests/fakes/talking.py`` as the server (subagents that ask and
report, contract §19), three more sessions check what Claude Code does with
a child that talks back: a question polled as ``input_required`` is shown to
the user as a form, whose Accept sends ``tasks/update``; the model, which
does not see ``inputRequests``, sees the question in its own
``wait_subagent`` and its ``answer_subagent`` reaches the child; and the
model's poll shows the child's progress.

Real processes and real time; every wait is bounded, and every process the
session started is gone when the test ends.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import struct
import sys
import termios
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from pathlib import Path
from typing import Any

import trio

from trio_delegate._mcp_config import serve_command
from trio_delegate.mcp._tasks import TASKS_EXTENSION

from .fakes import FakeAnthropic, Reply, Turn, call, text
from .fakes.clients import claude_env, claude_program, processes_with

PY = sys.executable

#: Outer hang guard for each stage of the session (it takes seconds).
STAGE_SECONDS = 60

#: How often the model calls again when Claude Code still has no such tool
#: (its MCP server is still connecting when the first reply comes).
RETRIES = 5

#: The subagent: waits for its gate file, then shouts its task.
GATED = (
    "import os, sys, time\n"
    "task = sys.stdin.read()\n"
    "while not os.path.exists(os.environ['GATE']):\n"
    "    time.sleep(0.01)\n"
    "print(task.strip().upper())\n"
)

TOOL = "mcp__delegate__delegate_task"


class Model:
    """The fake model: one background delegation, then it waits to be woken.

    Steps run in the fake server's thread; the test reads what they saw.
    """

    def __init__(self) -> None:
        #: Set by the test once the MCP server has been asked for its tools.
        self.connected = threading.Event()
        self.calls = 0
        #: The tool result Claude Code fed back for the delegation.
        self.handed: str | None = None
        #: The text of the model request after that (the wake-up).
        self.woken: str | None = None
        self.woke = threading.Event()

    def step(self, turn: Turn) -> Reply:
        body = turn.request.body
        if not body.get("tools"):
            return text("ok")  # a request of Claude Code's own, not the session's
        if self.handed is None:
            if self.calls == 0:
                self.connected.wait(STAGE_SECONDS)
            elif "No such tool available" not in turn.last.text or self.calls > RETRIES:
                self.handed = turn.last.text
                return text("The delegated run is going; I will wait for it.")
            self.calls += 1
            return call(TOOL, subagent="gated", task="ping", background=True)
        if self.woken is None:
            self.woken = json.dumps(body["messages"][-1])
            self.woke.set()
            return text("The run is done.")
        return text("Nothing more to do.")


def wire_lines(log: Path) -> list[dict[str, Any]]:
    """The JSON-RPC messages Claude Code sent to the server, as ``tee`` wrote them."""
    messages = []
    written = log.read_text(errors="replace") if log.exists() else ""
    for line in written.splitlines():
        with suppress(ValueError):  # the last line may be half written
            messages.append(json.loads(line))
    return messages


def declares_tasks(message: dict[str, Any]) -> bool:
    meta = message.get("params", {}).get("_meta", {})
    capabilities = meta.get("io.modelcontextprotocol/clientCapabilities", {})
    return TASKS_EXTENSION in capabilities.get("extensions", {})


async def until(condition: Callable[[], bool], what: str, screen: bytearray) -> None:
    """Wait until *condition()* holds, reading the other processes' files."""
    with trio.move_on_after(STAGE_SECONDS) as scope:
        while not condition():  # noqa: ASYNC110 - other processes write what is read
            await trio.sleep(0.05)
    if scope.cancelled_caught:
        raise AssertionError(
            f"{what}: not within {STAGE_SECONDS} s; the terminal:\n{plain(screen)}"
        )


def plain(screen: bytearray) -> str:
    """The terminal's output without its escape sequences (the last part), for messages."""
    stripped = re.sub(rb"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b\][^\x07]*\x07|\x1b.", b"", screen)
    return stripped.decode("utf-8", "replace")[-3000:]


@contextmanager
def terminal(rows: int = 40, columns: int = 120) -> Iterator[tuple[int, int]]:
    """A pseudo-terminal: (controller, terminal) file descriptors."""
    controller, child = os.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    try:
        yield controller, child
    finally:
        for fd in (controller, child):
            with suppress(OSError):
                os.close(fd)


async def drain(controller: int, into: bytearray) -> None:
    """Read the terminal's output as it comes, so that the TUI never blocks on it."""
    stream = trio.lowlevel.FdStream(os.dup(controller))
    async with stream:
        while True:
            try:
                data = await stream.receive_some()
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
                return
            if not data:
                return
            into.extend(data)


def claude_home(home: Path, env: dict[str, str], project: Path) -> None:
    """A fresh Claude Code state with the first-run screens behind it.

    Without it the interactive TUI opens on onboarding (theme, login), asks
    whether to use the custom API key, and whether to trust the folder.
    """
    config_dir = Path(env["CLAUDE_CONFIG_DIR"])
    config_dir.mkdir(parents=True, exist_ok=True)
    key = env["ANTHROPIC_API_KEY"]
    state = {
        "hasCompletedOnboarding": True,
        "theme": "dark",
        "customApiKeyResponses": {"approved": [key[-20:]], "rejected": []},
        "projects": {
            str(project): {"hasTrustDialogAccepted": True, "hasCompletedProjectOnboarding": True}
        },
    }
    (config_dir / ".claude.json").write_text(json.dumps(state))


async def test_interactive_claude_code_polls_a_background_run_and_is_woken_by_its_result(
    tmp_path: Path,
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    gate = tmp_path / "gate"
    config = tmp_path / "subagents.toml"
    config.write_text(
        f"""
[[subagents]]
name = "gated"
description = "Works until it is let go, then shouts its task."
command = [{json.dumps(PY)}, "-c", {json.dumps(GATED)}]
env = {{ GATE = {json.dumps(str(gate))} }}
"""
    )
    log = tmp_path / "client.jsonl"
    model = Model()
    async with claude_code(tmp_path, project, log, serve_command(config), model.step) as (
        screen,
        _,
    ):
        await session(model, log, gate, screen)


@asynccontextmanager
async def claude_code(
    tmp_path: Path,
    project: Path,
    log: Path,
    server: list[str],
    step: Callable[[Turn], Reply],
    prompt: str = "Delegate ping in the background.",
    server_env: dict[str, str] | None = None,
) -> AsyncIterator[tuple[bytearray, int]]:
    """Interactive Claude Code in a pseudo-terminal, its model *step*, its MCP server *server*.

    Yields the terminal's output as it comes, and the terminal's controller
    (to type into). Every process of the session is gone when the block ends.
    """
    # The server behind tee: every line the client sends is also in the log.
    command = ["/bin/sh", "-c", 'tee "$0" | "$@"', str(log), *server]
    # Not .mcp.json: a project's own file opens an approval screen first.
    entry: dict[str, Any] = {"command": command[0], "args": command[1:]}
    if server_env:
        entry["env"] = server_env
    (project / "delegate-mcp.json").write_text(json.dumps({"mcpServers": {"delegate": entry}}))

    with FakeAnthropic([step] * 30) as fake:
        env = claude_env(tmp_path / "home", fake)
        # Every process of the session inherits it: how the test finds them.
        env["TRIO_DELEGATE_SESSION"] = str(tmp_path)
        env["TERM"] = "xterm-256color"
        marker = f"TRIO_DELEGATE_SESSION={tmp_path}"
        claude_home(tmp_path / "home", env, project)
        screen = bytearray()
        argv = [
            claude_program(),
            prompt,  # before the options: none takes it as a value
            *("--mcp-config", "delegate-mcp.json", "--allowedTools", "mcp__delegate"),
        ]
        with terminal() as (controller, child):
            process = await trio.lowlevel.open_process(
                argv,
                stdin=child,
                stdout=child,
                stderr=child,
                cwd=project,
                env=env,
                start_new_session=True,
            )
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(drain, controller, screen)
                    yield screen, controller
                    nursery.cancel_scope.cancel()
            finally:
                await stop(process, marker)
        assert fake.problems == []


async def session(model: Model, log: Path, gate: Path, screen: bytearray) -> None:
    # The first reply waits for the server to be connected (its tools asked for).
    await until(
        lambda: any(m.get("method") == "tools/list" for m in wire_lines(log)),
        "Claude Code asked the server for its tools",
        screen,
    )
    model.connected.set()
    await until(lambda: model.handed is not None, "the delegation's result reached", screen)
    [delegation] = [m for m in wire_lines(log) if m.get("method") == "tools/call"][-1:]
    assert delegation["params"]["name"] == "delegate_task"
    assert declares_tasks(delegation)
    # Claude Code took the answer as a task and moved the call to the background.
    assert model.handed is not None
    assert "server-side task" in model.handed, model.handed
    [run_id] = set(re.findall(r"run_[0-9a-f]{16,}", model.handed))

    def polls() -> list[dict[str, Any]]:
        return [
            m
            for m in wire_lines(log)
            if m.get("method") == "tasks/get" and m["params"].get("taskId") == run_id
        ]

    # It polls the live run; only then does the run end.
    await until(lambda: len(polls()) >= 1, "Claude Code polled tasks/get", screen)
    assert not model.woke.is_set()
    seen = len(polls())
    await trio.Path(gate).write_text("go")
    await until(model.woke.is_set, "the model was woken", screen)
    assert len(polls()) > seen  # the poll that found the run ended
    assert all(declares_tasks(m) for m in polls())
    # The model's next request carries the run's result.
    woken = json.loads(model.woken or "null")
    content = woken["content"]
    words = content if isinstance(content, str) else "".join(b.get("text", "") for b in content)
    assert "<task-notification>" in words
    assert "<status>completed</status>" in words
    [result] = re.findall(r"<result>\s*(\{.*?\})\s*</result>", words, re.DOTALL)
    assert json.loads(result) == {
        "run_id": run_id,
        "subagent": "gated",
        "task_summary": "ping",
        "final_result": "PING",
    }


async def stop(process: trio.Process, marker: str) -> None:
    """End Claude Code, then see every process of the session gone (killing stragglers)."""
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with trio.move_on_after(STAGE_SECONDS):
        await process.wait()
        # Claude Code stops the server; tee and the server end on the closed pipe.
        while processes_with(marker):  # noqa: ASYNC110 - other processes
            await trio.sleep(0.05)
    left = processes_with(marker)
    for pid in left:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if process.returncode is None:
        process.kill()
        await process.wait()
    assert left == [], "processes of the session outlived it"


# -- the child talks back (contract §19) ---------------------------------------------------

WAIT = "mcp__delegate__wait_subagent"
ANSWER = "mcp__delegate__answer_subagent"
ROOT = Path(__file__).resolve().parent.parent


def talking_server(gates: Path) -> tuple[list[str], dict[str, str]]:
    """The server of ``tests/fakes/talking.py`` (subagents that ask and report), and its env."""
    gates.mkdir(exist_ok=True)
    return [PY, "-m", "tests.fakes.talking", str(gates), "0.2"], {"PYTHONPATH": str(ROOT)}


class Talker:
    """The fake model: delegates in the background, waits on the run, answers what it asks.

    Steps: the delegation (retried while Claude Code has no such tool yet);
    ``wait_subagent`` on the run (it answers as soon as the run asks, or with
    its progress when the wait's timeout passes); ``answer_subagent`` when
    the wait showed a question; then it waits to be woken by the task's end.
    Without *wait_seconds*, it ends its turn right after the delegation.
    """

    def __init__(self, subagent: str, task: str, wait_seconds: float | None) -> None:
        self.subagent = subagent
        self.task = task
        self.wait_seconds = wait_seconds
        self.connected = threading.Event()
        self.calls = 0
        self.run_id: str | None = None
        #: What the model was handed, in order: the delegation, the wait, the answer's ack.
        self.handed: list[str] = []
        self.woken: str | None = None
        self.woke = threading.Event()
        self.waited = threading.Event()

    def step(self, turn: Turn) -> Reply:
        body = turn.request.body
        if not body.get("tools"):
            return text("ok")  # a request of Claude Code's own, not the session's
        if self.run_id is None:
            if self.calls == 0:
                self.connected.wait(STAGE_SECONDS)
            elif "No such tool available" not in turn.last.text or self.calls > RETRIES:
                self.handed.append(turn.last.text)
                [self.run_id] = set(re.findall(r"run_[0-9a-f]{16,}", turn.last.text))
                if self.wait_seconds is None:
                    self.handed.append("")  # no wait: the model does not answer
                    self.handed.append("")
                    self.waited.set()
                    return text("The run is going; I will wait for it.")
                return call(WAIT, run_id=self.run_id, timeout=self.wait_seconds)
            self.calls += 1
            return call(TOOL, subagent=self.subagent, task=self.task, background=True)
        if len(self.handed) == 1:
            self.handed.append(turn.last.text)
            self.waited.set()
            asked = re.findall(r"q_[0-9a-f]{32}", turn.last.text)
            if asked:
                return call(ANSWER, run_id=self.run_id, question_id=asked[0], answer="red")
            return text("The run is going; I will wait for it.")
        if len(self.handed) == 2 and "<task-notification>" not in json.dumps(body["messages"][-1]):
            self.handed.append(turn.last.text)
            return text("Answered; I will wait for the run.")
        if self.woken is None:
            self.woken = json.dumps(body["messages"][-1])
            self.woke.set()
            return text("The run is done.")
        return text("Nothing more to do.")


def woken_result(woken: str | None) -> Any:
    """The run's result in the ``<task-notification>`` that woke the model."""
    message = json.loads(woken or "null")
    content = message["content"]
    words = content if isinstance(content, str) else "".join(b.get("text", "") for b in content)
    assert "<task-notification>" in words, words
    [result] = re.findall(r"<result>\s*(\{.*?\})\s*</result>", words, re.DOTALL)
    return json.loads(result)


async def type_into(controller: int, screen: bytearray, keys: bytes, echo: bytes) -> None:
    """Type *keys* until the terminal shows *echo* after them (input sent while the
    TUI is still mounting its form is dropped: type again)."""
    for _ in range(RETRIES):
        mark = len(screen)
        os.write(controller, keys)
        with trio.move_on_after(5):
            while echo not in plain_bytes(screen[mark:]).replace(b" ", b""):  # noqa: ASYNC110
                await trio.sleep(0.05)
            return
    raise AssertionError(f"typing {keys!r} never showed {echo!r}: the terminal:\n{plain(screen)}")


def plain_bytes(data: bytes | bytearray) -> bytes:
    """*data* without escape sequences."""
    return re.sub(rb"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b\][^\x07]*\x07|\x1b.", b"", bytes(data))


def updates(log: Path) -> list[dict[str, Any]]:
    """The ``tasks/update`` requests Claude Code sent."""
    return [m for m in wire_lines(log) if m.get("method") == "tasks/update"]


def asks_the_user(screen: bytearray) -> bool:
    """Whether Claude Code shows the server's elicitation (the question) to the user."""
    return "requests your input" in plain(screen)


async def test_interactive_claude_code_asks_the_user_and_answers_with_tasks_update(
    tmp_path: Path,
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    log = tmp_path / "client.jsonl"
    server, server_env = talking_server(tmp_path / "gates")
    model = Talker("ask_text", "the shed", wait_seconds=None)
    async with claude_code(
        tmp_path, project, log, server, model.step, "Delegate the shed.", server_env
    ) as (screen, controller):
        await until(
            lambda: any(m.get("method") == "tools/list" for m in wire_lines(log)),
            "Claude Code asked the server for its tools",
            screen,
        )
        model.connected.set()
        # Claude Code polls the task, finds it input_required, and asks the user.
        await until(lambda: asks_the_user(screen), "Claude Code showed the question", screen)
        # The TUI moves its cursor where spaces were: compare without spaces.
        await until(
            lambda: "answerlater" in plain(screen).replace(" ", ""), "the form is ready", screen
        )
        assert "Which colour for the shed?" in plain(screen)
        await type_into(controller, screen, b"red", b"red")
        # Enter moves on to the Accept button, and Enter again presses it.
        await type_into(controller, screen, b"\r", "\u276fAccept".encode())
        # An Enter that comes as the button is drawn is lost: press until it is heard.
        for _ in range(RETRIES):
            os.write(controller, b"\r")
            with trio.move_on_after(2):
                while not updates(log):  # noqa: ASYNC110 - other processes write the log
                    await trio.sleep(0.05)
            if updates(log):
                break
        await until(model.woke.is_set, "the model was woken by the run's end", screen)
    assert woken_result(model.woken)["final_result"] == "the shed: red"
    lines = wire_lines(log)
    [update] = updates(log)
    assert update["params"]["taskId"] == model.run_id
    [(key, response)] = update["params"]["inputResponses"].items()
    assert key.startswith("q_")
    assert response == {"action": "accept", "content": {"answer": "red"}}
    polls = [m for m in lines if m.get("method") == "tasks/get"]
    assert all(declares_tasks(m) for m in polls)


async def test_interactive_claude_code_model_sees_a_question_and_answer_subagent_reaches_it(
    tmp_path: Path,
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    log = tmp_path / "client.jsonl"
    server, server_env = talking_server(tmp_path / "gates")
    model = Talker("ask_text", "the shed", wait_seconds=30)
    async with claude_code(
        tmp_path, project, log, server, model.step, "Delegate the shed.", server_env
    ) as (screen, controller):
        await until(
            lambda: any(m.get("method") == "tools/list" for m in wire_lines(log)),
            "Claude Code asked the server for its tools",
            screen,
        )
        model.connected.set()
        await until(lambda: len(model.handed) >= 3, "the model answered the question", screen)
        # Claude Code asked the user too, and holds the task while its dialog is open:
        # put it off (Esc, "answer later"), and Claude Code polls on.
        await until(lambda: asks_the_user(screen), "Claude Code showed the question", screen)
        os.write(controller, b"\x1b")
        await until(model.woke.is_set, "the model was woken by the run's end", screen)
    delegation, waited, ack = model.handed
    assert "server-side task" in delegation, delegation
    # The model saw the question (the wait answered as soon as the run asked) ...
    assert "input_required" in waited, waited
    assert "Which colour for the shed?" in waited, waited
    # ... and its answer_subagent call reached the child.
    assert re.search(r'"accepted":\s*true', ack), ack
    assert woken_result(model.woken)["final_result"] == "the shed: red"
    lines = wire_lines(log)
    assert not [m for m in lines if m.get("method") == "tasks/update"]
    calls = [m["params"]["name"] for m in lines if m.get("method") == "tools/call"]
    assert "answer_subagent" in calls


async def test_interactive_claude_code_polls_a_run_and_sees_its_progress(
    tmp_path: Path,
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    log = tmp_path / "client.jsonl"
    gates = tmp_path / "gates"
    server, server_env = talking_server(gates)
    model = Talker("stepper", "walk", wait_seconds=1)
    async with claude_code(
        tmp_path, project, log, server, model.step, "Delegate the walk.", server_env
    ) as (screen, _):
        await until(
            lambda: any(m.get("method") == "tools/list" for m in wire_lines(log)),
            "Claude Code asked the server for its tools",
            screen,
        )
        model.connected.set()
        await until(model.waited.is_set, "the model's wait answered", screen)
        for step in (1, 2, 3):
            await trio.Path(gates / f"walk.{step}").write_text("go")
        await until(model.woke.is_set, "the model was woken by the run's end", screen)
    delegation, waited = model.handed
    assert "server-side task" in delegation, delegation
    # The model's poll shows the child's latest report.
    assert "step 1" in waited, waited
    assert woken_result(model.woken)["final_result"] == "stepped"
    polls = [m for m in wire_lines(log) if m.get("method") == "tasks/get"]
    assert polls
