"""Command subagents: one process per run (CommandRunner).

These run real processes, so they use real time; every wait is short and
bounded by ``trio.fail_after`` so a hang fails instead of stalling.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import trio

import trio_delegate as td

from .helpers import open_parent, open_parent_lenient
from .processes import WRITE_PID, alive, gone, read_pid

PY = sys.executable


def script(tmp_path: Path, name: str, body: str) -> list[str]:
    """Write a Python script into *tmp_path*; return the command that runs it."""
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(body))
    return [PY, str(path)]


def exists(path: str) -> bool:
    return Path(path).exists()


def cause(exc: BaseException) -> BaseException:
    assert exc.__cause__ is not None
    return exc.__cause__


async def test_task_on_stdin_result_on_stdout_with_run_variables(tmp_path: Path) -> None:
    command = script(
        tmp_path,
        "echo",
        """
        import json, os, sys
        task = sys.stdin.read()
        env = {k: v for k, v in os.environ.items() if k.startswith(("TRIO_DELEGATE", "EXTRA"))}
        print("  ", json.dumps({"task": task, "env": env, "cwd": os.getcwd()}), "\\n\\n")
        """,
    )
    runner = td.CommandRunner(command, cwd=tmp_path, env={"EXTRA": "yes"})
    async with open_parent(td.Subagent("echo", runner)) as parent:
        result = await parent.delegate("echo", "héllo\nworld")
    # stdout is the result, decoded and trimmed; without a schema it is text
    assert isinstance(result.final_result, str)
    seen = json.loads(result.final_result)
    assert seen["task"] == "héllo\nworld"
    fd = seen["env"].pop("TRIO_DELEGATE_FD")
    assert fd.isdigit()
    assert int(fd) > 2  # the talk channel, never stdin, stdout or stderr
    assert seen["env"] == {
        "TRIO_DELEGATE_RUN_ID": result.run_id,
        "TRIO_DELEGATE_SUBAGENT": "echo",
        "EXTRA": "yes",
    }
    assert Path(seen["cwd"]) == tmp_path


async def test_final_schema_parses_stdout_as_json_and_passes_the_schema(tmp_path: Path) -> None:
    command = script(
        tmp_path,
        "json_out",
        """
        import json, os, sys
        schema = json.loads(os.environ["TRIO_DELEGATE_FINAL_SCHEMA"])
        print(json.dumps({"summary": sys.stdin.read(), "schema_type": schema["type"]}))
        """,
    )
    schema = {"type": "object", "required": ["summary"]}
    sub = td.Subagent("json", td.CommandRunner(command), final_schema=schema)
    async with open_parent(sub) as parent:
        result = await parent.delegate("json", "short")
        assert result.final_result == {"summary": "short", "schema_type": "object"}
        # a schema the output does not satisfy fails the run as an invalid result
        with pytest.raises(td.InvalidResultError) as info:
            await parent.delegate("json", "x", final_schema={"type": "array"})
        await parent.delegate("json", "again", replaces=info.value.run_id)


async def test_output_that_is_not_json_when_json_is_due_fails(tmp_path: Path) -> None:
    command = script(tmp_path, "text", "print('plain words')")
    sub = td.Subagent("text", td.CommandRunner(command), final_schema={"type": "string"})
    async with open_parent_lenient(sub) as parent:
        with pytest.raises(td.RunFailedError) as info:
            await parent.delegate("text", "go")
        assert info.value.error_type == "CommandFailedError"
        assert "not JSON" in str(info.value)
        assert "'plain words'" in str(info.value)


async def test_output_nested_too_deeply_to_read_fails_by_name(tmp_path: Path) -> None:
    command = script(tmp_path, "deep", "print('[' * 100_000 + ']' * 100_000)")
    sub = td.Subagent("deep", td.CommandRunner(command), final_schema={"type": "array"})
    async with open_parent_lenient(sub) as parent:
        with pytest.raises(td.RunFailedError) as info:
            await parent.delegate("deep", "go")
        assert info.value.error_type == "CommandFailedError"
        assert "not JSON (it nests too deeply to read)" in str(info.value)


async def test_nonzero_exit_fails_with_exit_code_and_the_end_of_stderr(tmp_path: Path) -> None:
    command = script(
        tmp_path,
        "failing",
        """
        import sys
        sys.stdin.read()
        for i in range(50):
            print(f"log line {i}", file=sys.stderr)
        print("partial output")
        sys.exit(4)
        """,
    )
    async with open_parent_lenient(td.Subagent("failing", td.CommandRunner(command))) as parent:
        with pytest.raises(td.RunFailedError) as info:
            await parent.delegate("failing", "go")
    message = str(info.value)
    assert "exited with code 4" in message
    assert "log line 49" in message
    assert "log line 29" not in message  # only the last lines
    error = cause(info.value)
    assert isinstance(error, td.CommandFailedError)
    assert error.returncode == 4
    assert error.stderr_tail.splitlines() == [f"log line {i}" for i in range(30, 50)]


async def test_killed_by_a_signal_is_a_failure_naming_it(tmp_path: Path) -> None:
    command = script(tmp_path, "suicide", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    async with open_parent_lenient(td.Subagent("suicide", td.CommandRunner(command))) as parent:
        with pytest.raises(td.RunFailedError, match="killed by signal SIGKILL"):
            await parent.delegate("suicide", "go")


async def test_output_over_the_limit_fails_at_once_without_reading_it_all(tmp_path: Path) -> None:
    # It would write forever: the run must fail as soon as the limit is passed.
    command = script(
        tmp_path,
        "flood",
        """
        import sys
        while True:
            sys.stdout.write("x" * 65536)
        """,
    )
    runner = td.CommandRunner(command, max_output_bytes=100_000)
    async with open_parent_lenient(td.Subagent("flood", runner)) as parent:
        with trio.fail_after(30), pytest.raises(td.RunFailedError) as info:
            await parent.delegate("flood", "go")
    assert isinstance(cause(info.value), td.LimitExceededError)
    assert "more than 100000 bytes" in str(info.value)


async def test_all_output_is_read_after_the_command_exits(tmp_path: Path) -> None:
    # More than a pipe holds: most of it is read after the process has exited.
    command = script(tmp_path, "burst", "import sys; sys.stdout.write('y' * 300_000)")
    runner = td.CommandRunner(command, kill_grace_seconds=0)
    async with open_parent(td.Subagent("burst", runner)) as parent:
        result = await parent.delegate("burst", "go")
    assert result.final_result == "y" * 300_000


async def test_output_that_is_not_utf8_fails(tmp_path: Path) -> None:
    command = script(tmp_path, "latin", "import sys; sys.stdout.buffer.write(b'caf\\xe9')")
    async with open_parent_lenient(td.Subagent("latin", td.CommandRunner(command))) as parent:
        with pytest.raises(td.RunFailedError, match="not UTF-8"):
            await parent.delegate("latin", "go")


async def test_a_program_that_cannot_start_fails_the_run(tmp_path: Path) -> None:
    runner = td.CommandRunner([str(tmp_path / "missing-program")])
    async with open_parent_lenient(td.Subagent("missing", runner)) as parent:
        with pytest.raises(td.RunFailedError, match="could not start") as info:
            await parent.delegate("missing", "go")
    assert isinstance(cause(info.value), td.CommandFailedError)


async def test_cancel_kills_the_whole_process_group(tmp_path: Path) -> None:
    command = script(
        tmp_path,
        "parent_and_child",
        WRITE_PID
        + """
import subprocess, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
write_pid(sys.argv[1] + ".child", child.pid)
write_pid(sys.argv[1])
time.sleep(60)
""",
    )
    pid_file = tmp_path / "run.pid"
    runner = td.CommandRunner([*command, str(pid_file)])
    async with open_parent_lenient(td.Subagent("worker", runner)) as parent:
        handle = await parent.start("worker", "go")
        pid = await read_pid(pid_file)
        child = await read_pid(Path(f"{pid_file}.child"))
        assert alive(pid)
        assert alive(child)
        assert parent.cancel(handle.run_id).cancel_requested
        with trio.fail_after(30), pytest.raises(td.RunCancelledError):
            await parent.wait(handle.run_id)
        # The command itself is reaped by the time the run settles.
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
        await gone(child)


async def test_deadline_kills_the_process_and_times_the_run_out(tmp_path: Path) -> None:
    command = script(
        tmp_path,
        "sleeper",
        WRITE_PID + "write_pid(sys.argv[1])\nimport time\ntime.sleep(60)\n",
    )
    pid_file = tmp_path / "sleeper.pid"
    sub = td.Subagent("sleeper", td.CommandRunner([*command, str(pid_file)]), timeout_seconds=0.2)
    async with open_parent_lenient(sub) as parent:
        with trio.fail_after(30), pytest.raises(td.RunTimedOutError):
            await parent.delegate("sleeper", "go")
    with pytest.raises(ProcessLookupError):
        os.kill(await read_pid(pid_file), 0)


async def test_sigterm_ignored_gets_sigkill_after_the_grace(tmp_path: Path) -> None:
    command = script(
        tmp_path,
        "stubborn",
        WRITE_PID
        + """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
write_pid(sys.argv[1])
time.sleep(60)
""",
    )
    pid_file = tmp_path / "stubborn.pid"
    runner = td.CommandRunner([*command, str(pid_file)], kill_grace_seconds=0.2)
    async with open_parent_lenient(td.Subagent("stubborn", runner)) as parent:
        handle = await parent.start("stubborn", "go")
        pid = await read_pid(pid_file)
        parent.cancel(handle.run_id)
        with trio.fail_after(30), pytest.raises(td.RunCancelledError):
            await parent.wait(handle.run_id)
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


async def test_continuation_gets_the_history_in_a_file_and_the_message_on_stdin(
    tmp_path: Path,
) -> None:
    command = script(
        tmp_path,
        "chat",
        """
        import json, os, sys
        path = os.environ.get("TRIO_DELEGATE_HISTORY_FILE")
        history = json.load(open(path)) if path else []
        print(json.dumps({"message": sys.stdin.read(), "history": history, "path": path}))
        """,
    )
    async with open_parent(td.Subagent("chat", td.CommandRunner(command))) as parent:
        first = await parent.delegate("chat", "hello")
        assert json.loads(first.final_result)["history"] == []
        second = await parent.continue_run(first.run_id, "and then?")
    assert isinstance(second, td.RunResult)
    seen: dict[str, Any] = json.loads(second.final_result)
    assert seen["message"] == "and then?"
    assert seen["history"] == [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": first.final_result},
    ]
    assert not exists(seen["path"])  # the file is removed when the run ends


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"command": "python3 x.py"}, "sequence of strings"),
        ({"command": []}, "empty"),
        ({"command": [""]}, "must not be empty"),
        ({"command": ["ok", 3]}, "command[1]"),
        ({"command": ["ok"], "env": {"A": 1}}, "env['A']"),
        ({"command": ["ok"], "env": {"A=B": "x"}}, "variable name"),
        ({"command": ["ok"], "max_output_bytes": 0}, "max_output_bytes"),
        ({"command": ["ok"], "kill_grace_seconds": -1}, "kill_grace_seconds"),
        ({"command": ["ok"], "cwd": 3}, "cwd"),
    ],
)
def test_malformed_runner_arguments_are_rejected(kwargs: dict[str, Any], fragment: str) -> None:
    command = kwargs.pop("command")
    with pytest.raises(td.InvalidArgumentsError) as info:
        td.CommandRunner(command, **kwargs)
    assert fragment in str(info.value)
