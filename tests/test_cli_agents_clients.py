"""Claude Code and Codex as MCP clients of ``trio-delegate serve``, with the real binaries.

The bundled ``claude`` and ``codex`` start the server from the snippet
``trio-delegate mcp-config`` prints, and a fake model API on 127.0.0.1
scripts their model: every tool is called, each step reads the result the
client fed back to the model and checks it against what the server answers,
and the subagents' processes are watched through the pid files they write.
Real processes and real time, every wait bounded.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from trio_delegate._mcp_config import (
    claude_mcp_json,
    codex_config_toml,
    serve_command,
)

from .fakes import (
    FakeAnthropic,
    FakeModelServer,
    FakeResponses,
    Reply,
    Step,
    ToolResult,
    Turn,
    call,
    text,
)
from .fakes.clients import (
    claude_env,
    claude_program,
    codex_env,
    codex_program,
)
from .processes import WRITE_PID, alive

PY = sys.executable
FOREGROUND_LIMIT = 1.5
#: How many tool calls the scenario makes.
CALLS = 13

SCRIPTS = {
    "echo.py": """
        import sys
        print("echo:", sys.stdin.read())
        """,
    # Publishes its pid (and the server's, its parent) under its task, then works.
    "sleeper.py": WRITE_PID
    + """
import time
task = sys.stdin.read().strip()
write_pid(os.path.join("pids", task + ".server"), os.getppid())
write_pid(os.path.join("pids", task))
time.sleep(60)
""",
    "measure.py": """
        import json, sys
        print(json.dumps({"length": len(sys.stdin.read())}))
        """,
    "failing.py": """
        import sys
        sys.stdin.read()
        print("error: the model is unavailable", file=sys.stderr)
        sys.exit(5)
        """,
}

CONFIG = f"""
[runtime]
subagent_timeout_seconds = 30

[server]
foreground_limit_seconds = {FOREGROUND_LIMIT}

[[subagents]]
name = "echo"
description = "Echoes the task."
command = ['{PY}', "echo.py"]

[[subagents]]
name = "sleeper"
description = "Works for a minute."
command = ['{PY}', "sleeper.py"]
kill_grace_seconds = 1

[[subagents]]
name = "measure"
description = "Measures the task."
command = ['{PY}', "measure.py"]

[[subagents]]
name = "failing"
description = "Always fails."
command = ['{PY}', "failing.py"]
"""


def serve_config(tmp_path: Path) -> Path:
    work = tmp_path / "subagents"
    work.mkdir()
    for name, body in SCRIPTS.items():
        (work / name).write_text(textwrap.dedent(body))
    (work / "pids").mkdir()
    path = work / "subagents.toml"
    path.write_text(CONFIG)
    return path


def pid(pids: Path, name: str) -> int:
    """A pid a sleeper wrote, waited for (in the fake's thread, so on the real clock)."""
    deadline = time.monotonic() + 5
    while not (pids / name).exists():
        assert time.monotonic() < deadline, f"no pid file {name}"
        time.sleep(0.01)
    return int((pids / name).read_text())


def wait_gone(pid: int) -> None:
    deadline = time.monotonic() + 5
    while alive(pid):
        assert time.monotonic() < deadline, f"process {pid} is still alive"
        time.sleep(0.01)


class Scenario:
    """The model's side of one session: every tool, in order, each result checked.

    Each step checks the result the client fed back for the previous call
    (``check``), then makes the next call. ``seen`` collects, per call, the
    payload the model was shown.
    """

    def __init__(self, tool: Callable[[str], str], pids: Path) -> None:
        self.tool = tool
        self.pids = pids
        self.seen: list[tuple[str, Any]] = []
        self.ids: dict[str, str] = {}
        self.workers: dict[str, int] = {}

    def result(self, turn: Turn) -> Any:
        """The payload of the last tool result; an error's is after its message."""
        last: ToolResult = turn.last
        body = last.text
        if not body.startswith("{"):
            # An error: its message, a blank line, then its payload as JSON
            # (Claude Code may add a note of its own after that).
            cut = body.find("\n\n{")
            assert cut >= 0, f"the client fed back neither a result nor an error: {body!r}"
            payload, _ = json.JSONDecoder().raw_decode(body, cut + 2)
            assert payload["error"]["message"] == body[:cut]
        else:
            payload = json.loads(body)
        self.seen.append((last.call_id, payload))
        return payload

    def steps(self) -> list[Step]:
        tool = self.tool

        def after(check: Callable[[Any], None], reply: Callable[[], Reply]) -> Step:
            def step(turn: Turn) -> Reply:
                check(self.result(turn))
                return reply()

            return step

        def echoed(payload: Any) -> None:
            self.ids["echo"] = payload["run_id"]
            assert payload == {
                "run_id": payload["run_id"],
                "subagent": "echo",
                "task_summary": "hi",
                "final_result": "echo: hi",
            }

        def started(payload: Any) -> None:
            assert payload["status"] == "running"
            self.ids["sleeper"] = payload["run_id"]
            self.workers["sleeper"] = pid(self.pids, "background")
            assert alive(self.workers["sleeper"])

        def background_echo(payload: Any) -> None:
            assert payload["subagent"] == "echo"
            self.ids["later"] = payload["run_id"]

        def status(payload: Any) -> None:
            assert payload == {
                "run_id": self.ids["sleeper"],
                "subagent": "sleeper",
                "status": "running",
            }

        def timed(payload: Any) -> None:
            assert payload["status"] == "running"

        def acked(payload: Any) -> None:
            assert payload == {
                "run_id": self.ids["sleeper"],
                "cancel_requested": True,
                "status": "running",
            }

        def cancelled(payload: Any) -> None:
            assert payload["error"]["type"] == "run_cancelled"
            assert payload["error"]["run_id"] == self.ids["sleeper"]
            wait_gone(self.workers["sleeper"])

        def observed(payload: Any) -> None:
            assert payload["run_id"] == self.ids["later"]
            assert payload["final_result"] == "echo: later"

        def failed(payload: Any) -> None:
            assert payload["error"]["type"] == "run_failed"
            assert "exited with code 5" in payload["error"]["message"]
            assert "error: the model is unavailable" in payload["error"]["message"]
            self.ids["failed"] = payload["error"]["run_id"]

        def replaced(payload: Any) -> None:
            assert payload["final_result"] == "echo: again"

        def continued(payload: Any) -> None:
            assert payload["final_result"] == "echo: more"
            assert payload["run_id"] != self.ids["echo"]

        def measured(payload: Any) -> None:
            assert payload["final_result"] == {"length": 4}

        def handle(payload: Any) -> None:
            # Past the foreground limit: the running handle, and what to do.
            assert payload["status"] == "running"
            assert f"wait_subagent with run_id {payload['run_id']!r}" in payload["message"]
            self.ids["long"] = payload["run_id"]
            self.workers["long"] = pid(self.pids, "foreground")
            self.workers["server"] = pid(self.pids, "foreground.server")
            assert alive(self.workers["long"])

        return [
            call(tool("delegate_task"), subagent="echo", task="hi"),
            after(
                echoed,
                lambda: call(
                    tool("delegate_task"), subagent="sleeper", task="background", background=True
                ),
            ),
            after(
                started,
                lambda: call(tool("delegate_task"), subagent="echo", task="later", background=True),
            ),
            after(
                background_echo,
                lambda: call(tool("subagent_status"), run_id=self.ids["sleeper"]),
            ),
            after(
                status,
                lambda: call(tool("wait_subagent"), run_id=self.ids["sleeper"], timeout=0.1),
            ),
            after(timed, lambda: call(tool("cancel_subagent"), run_id=self.ids["sleeper"])),
            after(acked, lambda: call(tool("wait_subagent"), run_id=self.ids["sleeper"])),
            after(cancelled, lambda: call(tool("wait_subagent"), run_id=self.ids["later"])),
            after(observed, lambda: call(tool("delegate_task"), subagent="failing", task="x")),
            after(
                failed,
                lambda: call(
                    tool("delegate_task"),
                    subagent="echo",
                    task="again",
                    replaces=self.ids["failed"],
                ),
            ),
            after(
                replaced,
                lambda: call(tool("continue_subagent"), run_id=self.ids["echo"], message="more"),
            ),
            after(
                continued,
                lambda: call(
                    tool("delegate_task"),
                    subagent="measure",
                    task="four",
                    final_schema={"type": "object", "required": ["length"]},
                ),
            ),
            after(
                measured,
                lambda: call(tool("delegate_task"), subagent="sleeper", task="foreground"),
            ),
            # The client quits with that run still live.
            after(handle, lambda: text("Done; one run is still working.")),
        ]


async def run_client(
    fake: FakeModelServer, argv: list[str], env: dict[str, str], cwd: Path, prompt: bytes
) -> str:
    with trio.fail_after(60):
        done = await trio.run_process(
            argv,
            stdin=prompt,
            capture_stdout=True,
            capture_stderr=True,
            env=env,
            cwd=cwd,
            check=False,
        )
    # The fake's problems say first what the model was shown that it did not expect.
    assert fake.problems == []
    assert done.returncode == 0, (done.stdout + done.stderr).decode(errors="replace")[-3000:]
    return done.stdout.decode()


def check_session(fake: FakeModelServer, scenario: Scenario) -> None:
    assert fake.problems == []
    assert fake.remaining == 0
    # Every call's result reached the model, once, in order.
    assert len(scenario.seen) == CALLS
    assert len({call_id for call_id, _ in scenario.seen}) == CALLS


async def claude_session(tmp_path: Path) -> Scenario:
    """Claude Code, configured with ``mcp-config claude``, through every tool."""
    config = serve_config(tmp_path)
    work = tmp_path / "project"
    work.mkdir()
    command = serve_command(config)
    assert os.path.isabs(command[0])
    program = claude_program()
    scenario = Scenario(lambda name: f"mcp__delegate__{name}", config.parent / "pids")
    with FakeAnthropic(scenario.steps()) as fake:
        (work / ".mcp.json").write_text(claude_mcp_json(command))
        out = await run_client(
            fake,
            [
                program,
                "-p",
                "--output-format",
                "json",
                "--mcp-config",
                ".mcp.json",
                "--allowedTools",
                "mcp__delegate",
            ],
            claude_env(tmp_path / "home", fake),
            work,
            b"Use the delegation tools.",
        )
    result = json.loads(out.strip().splitlines()[-1])
    assert result["is_error"] is False
    assert result["permission_denials"] == []
    check_session(fake, scenario)
    return scenario


async def codex_session(tmp_path: Path) -> Scenario:
    """Codex, configured with ``mcp-config codex``, through every tool."""
    config = serve_config(tmp_path)
    work = tmp_path / "project"
    work.mkdir()
    command = serve_command(config)
    program = codex_program()
    scenario = Scenario(lambda name: f"mcp__delegate.{name}", config.parent / "pids")
    with FakeResponses(scenario.steps()) as fake:
        env = codex_env(tmp_path / "home", fake, config=codex_config_toml(command))
        out = await run_client(
            fake,
            [program, "exec", "--json", "--skip-git-repo-check", "-"],
            env,
            work,
            b"Use the delegation tools.",
        )
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert events[-1]["type"] == "turn.completed"
    check_offered(fake)
    check_session(fake, scenario)
    return scenario


def check_offered(fake: FakeResponses) -> None:
    """The first model request offered every tool (Codex 0.163: as one namespace tool)."""
    offered = [tool.get("name") for tool in fake.turns[0].request.body["tools"]]
    assert "mcp__delegate" in offered, f"the first request offered only {offered}"
    [namespace] = [
        tool for tool in fake.turns[0].request.body["tools"] if tool.get("name") == "mcp__delegate"
    ]
    assert namespace["type"] == "namespace"
    assert sorted(tool["name"] for tool in namespace["tools"]) == sorted(
        [
            "delegate_task",
            "subagent_status",
            "wait_subagent",
            "cancel_subagent",
            "continue_subagent",
            "list_subagent_runs",
        ]
    )


async def client_gone(scenario: Scenario) -> None:
    """The client quit with a run live: the server cancelled it and exited."""
    # Generous: a loaded machine may take a while to reap both processes, and
    # the server may take its runs' cancel grace (30 s, contract §18) plus a
    # few seconds to exit: the hang guard sits well past that.
    with trio.fail_after(60):
        for process in (scenario.workers["long"], scenario.workers["server"]):
            while alive(process):  # noqa: ASYNC110 - other processes
                await trio.sleep(0.02)


async def test_claude_code_through_every_tool(tmp_path: Path) -> None:
    scenario = await claude_session(tmp_path)
    await client_gone(scenario)


@pytest.fixture(scope="module")
def codex(tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    """One Codex session through every tool; each ``test_cap_codex_*`` checks its part."""
    return trio.run(codex_session, tmp_path_factory.mktemp("codex"))


def payload(scenario: Scenario, index: int) -> Any:
    return scenario.seen[index][1]


def test_cap_codex_foreground(codex: Scenario) -> None:
    assert payload(codex, 0)["final_result"] == "echo: hi"
    # Past the foreground limit: the running handle, before Codex gives up.
    assert payload(codex, 12)["status"] == "running"


def test_cap_codex_background(codex: Scenario) -> None:
    assert payload(codex, 2)["status"] in ("running", "pending")
    assert payload(codex, 7)["final_result"] == "echo: later"


def test_cap_codex_status(codex: Scenario) -> None:
    assert payload(codex, 3)["status"] == "running"


def test_cap_codex_timed_wait(codex: Scenario) -> None:
    assert payload(codex, 4)["status"] == "running"


def test_cap_codex_cancel(codex: Scenario) -> None:
    assert payload(codex, 5)["cancel_requested"] is True
    assert payload(codex, 6)["error"]["type"] == "run_cancelled"
    assert not alive(codex.workers["sleeper"])


def test_cap_codex_continuation(codex: Scenario) -> None:
    assert payload(codex, 10)["final_result"] == "echo: more"


def test_cap_codex_structured_results(codex: Scenario) -> None:
    assert payload(codex, 11)["final_result"] == {"length": 4}


async def test_cap_codex_cancellation_reaches_child(codex: Scenario) -> None:
    await client_gone(codex)


#: Well past the second Codex gives a server that is not ``required``
#: (``mcp_optional_startup_grace_ms``), well within ``startup_timeout_sec``.
START_DELAY = 4
#: Starts the command after it (``argv[1:]``) late: a server that is slow to
#: start. (Codex passes its servers a few variables only: the delay is written in.)
SLOW_START = f"""
import os, sys, time
time.sleep({START_DELAY})
os.execv(sys.argv[1], sys.argv[1:])
"""


async def test_codex_waits_for_a_server_that_starts_slowly(tmp_path: Path) -> None:
    """Configured by ``mcp-config codex``, Codex offers the tools of a server slower than 1 s.

    The delay is a lower bound (the server is held back that long), never a
    deadline: with the server ``required``, Codex waits for it however slow
    the machine; without, Codex sends its first model request after one
    second, without the tools, and reports the model's call as
    ``unsupported call: mcp__delegatedelegate_task``.
    """
    config = serve_config(tmp_path)
    work = tmp_path / "project"
    work.mkdir()
    slow = tmp_path / "slow_start.py"
    slow.write_text(SLOW_START)
    command = [PY, str(slow), *serve_command(config)]
    seen: list[Any] = []

    def echoed(turn: Turn) -> Reply:
        seen.append(turn.last.text)
        return text("Done.")

    steps: list[Step] = [call("mcp__delegate.delegate_task", subagent="echo", task="hi"), echoed]
    with FakeResponses(steps) as fake:
        env = codex_env(tmp_path / "home", fake, config=codex_config_toml(command))
        await run_client(
            fake,
            [codex_program(), "exec", "--json", "--skip-git-repo-check", "-"],
            env,
            work,
            b"Use the delegation tools.",
        )
    check_offered(fake)
    assert fake.remaining == 0
    [result] = seen
    assert json.loads(result)["final_result"] == "echo: hi"
