"""Regression tests: the surfaces that hostile values, schemas, stores and
processes reach (contract §5, §8, §11, §13, §15).

Each test is named after the rule it protects. Bounded work is judged by
what the code controls (calls counted, output size, the event loop thread's
CPU time), never by wall-clock time.
"""

from __future__ import annotations

import dataclasses
import gc
import math
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
import trio

import trio_delegate as td

from .helpers import returning, sub

LENIENT = td.Config(fail_closed=False)


# -- 1. JSON checks and copies never call a value's own methods ---------------------


class _Calls:
    """Counts calls of a hostile container's own methods."""

    count = 0


class EndlessList(list[Any]):
    """A list whose own iteration never ends (and that grows while iterated)."""

    def __iter__(self) -> Iterator[Any]:
        while True:
            _Calls.count += 1
            self.append(1)
            yield 1

    def __len__(self) -> int:
        _Calls.count += 1
        return 10**9


class EndlessDict(dict[Any, Any]):
    """A dict whose own views never end."""

    def _endless(self) -> Iterator[Any]:
        while True:
            _Calls.count += 1
            yield 1

    def values(self) -> Any:
        return self._endless()

    def items(self) -> Any:
        return ((str(n), n) for n in self._endless())

    def keys(self) -> Any:
        return self._endless()

    def __iter__(self) -> Iterator[Any]:
        return self._endless()

    def __len__(self) -> int:
        _Calls.count += 1
        return 10**9


class EndlessTuple(tuple[Any, ...]):
    def __iter__(self) -> Iterator[Any]:
        while True:
            _Calls.count += 1
            yield 1


def _hostile_results() -> list[tuple[str, Any, Any]]:
    return [
        ("a list subclass", EndlessList([1, "a"]), [1, "a"]),
        ("a dict subclass", EndlessDict(a=1, b=[2]), {"a": 1, "b": [2]}),
        ("a tuple subclass", EndlessTuple((1, 2)), [1, 2]),
        ("nested", {"k": [EndlessList([EndlessDict(x=None)])]}, {"k": [[{"x": None}]]}),
        ("a large one", EndlessList(range(5000)), list(range(5000))),
    ]


@pytest.mark.parametrize(
    ("value", "expected"),
    [(value, expected) for _, value, expected in _hostile_results()],
    ids=[name for name, _, _ in _hostile_results()],
)
async def test_json_checks_read_builtin_containers_through_the_builtin_types(
    value: Any, expected: Any
) -> None:
    _Calls.count = 0
    async with (
        td.open_runtime([sub("odd", returning(value))], config=LENIENT) as rt,
        rt.open_parent() as parent,
    ):
        with trio.fail_after(30):  # a hang guard only: the work is judged by _Calls
            result = await parent.delegate("odd", "go")
            answer = await parent.tools().call("wait_subagent", {"run_id": result.run_id})
    assert result.final_result == expected
    assert answer["final_result"] == expected
    assert _Calls.count == 0, "a method of the value itself was called"


async def test_a_schema_given_as_a_dict_subclass_is_read_through_the_builtin_type() -> None:
    _Calls.count = 0
    schema = EndlessDict(type="object", properties=EndlessDict(a=EndlessDict(type="integer")))
    async with (
        td.open_runtime([sub("echo", returning({"a": 1}))], config=LENIENT) as rt,
        rt.open_parent() as parent,
    ):
        with trio.fail_after(30):
            result = await parent.delegate("echo", "go", final_schema=schema)
    assert result.final_result == {"a": 1}
    assert _Calls.count == 0


async def test_a_transcript_subclass_is_read_through_the_builtin_type() -> None:
    _Calls.count = 0

    async def runner(ctx: td.ChildContext) -> Any:
        return td.Output("done", transcript=EndlessList([{"role": "user", "content": "go"}]))

    async with (
        td.open_runtime([sub("talk", runner)], config=LENIENT) as rt,
        rt.open_parent() as parent,
    ):
        with trio.fail_after(30):
            first = await parent.delegate("talk", "go")
            assert first.final_result == "done"
    assert _Calls.count == 0


async def test_a_result_sharing_its_containers_is_bounded_by_max_result_bytes() -> None:
    # Sixty levels of [x, x]: 2**60 values to walk, and a few bytes to hold.
    value: Any = 0
    for _ in range(60):
        value = [value, value]
    async with (
        td.open_runtime([sub("dag", returning(value))], config=LENIENT) as rt,
        rt.open_parent() as parent,
    ):
        with trio.fail_after(30):
            with pytest.raises(td.RunFailedError, match="more than 500001 values"):
                await parent.delegate("dag", "go")


async def test_a_returned_coroutine_fails_the_run_and_is_closed() -> None:
    made: list[Any] = []

    async def inner() -> str:
        return "never"

    async def forgetful(ctx: td.ChildContext) -> Any:
        coroutine = inner()
        made.append(coroutine)
        return coroutine if ctx.task == "bare" else {"nested": [coroutine]}

    async with (
        td.open_runtime([sub("forgetful", forgetful)], config=LENIENT) as rt,
        rt.open_parent() as parent,
    ):
        for task in ("bare", "nested"):
            with pytest.raises(td.RunFailedError, match="without awaiting it"):
                await parent.delegate("forgetful", task)
    assert [coroutine.cr_frame for coroutine in made] == [None, None]
    # Closed: collecting it warns of nothing (warnings are errors in this suite).
    made.clear()
    gc.collect()


# -- 2. a final_schema's references point at schemas inside it --------------------


@pytest.mark.parametrize(
    ("schema", "says"),
    [
        ({"x": {"y": 5}, "$ref": "#/x/y"}, "points at 5"),
        ({"x": {"y": [1]}, "$ref": "#/x/y"}, "points at"),
        ({"x": {"y": "s"}, "$ref": "#/x/y"}, "points at"),
        ({"x": {"y": None}, "$ref": "#/x/y"}, "points at None"),
        ({"properties": {"type": {"type": "string"}}, "$ref": "#/properties"}, "not a valid"),
        ({"enum": [{"type": 7}], "$ref": "#/enum/0"}, "not a valid"),
        ({"$defs": {"a": {"$ref": "#/x/y"}}, "x": {"y": 5}, "$ref": "#/$defs/a"}, "points at 5"),
        ({"$defs": {"a": {"$id": "b", "$ref": "#/x"}}, "$ref": "#/$defs/a"}, "re-base"),
        (
            {
                "$defs": {"a": {"$id": "http://o.example/", "x": {}, "$ref": "#/x"}},
                "$ref": "#/$defs/a",
            },
            "re-base",
        ),
    ],
)
async def test_a_reference_to_something_that_is_not_a_schema_is_refused_at_admission(
    schema: dict[str, Any], says: str
) -> None:
    ran: list[str] = []

    async def runner(ctx: td.ChildContext) -> int:
        ran.append(ctx.task)
        return 1

    async with (
        td.open_runtime([sub("checked", runner)], config=LENIENT) as rt,
        rt.open_parent() as parent,
    ):
        with pytest.raises(td.InvalidArgumentsError, match=f"final_schema .*{says}"):
            await parent.delegate("checked", "t", final_schema=schema)
        with pytest.raises(td.InvalidArgumentsError, match=says):
            await parent.tools().call(
                "delegate_task", {"subagent": "checked", "task": "t", "final_schema": schema}
            )
    assert ran == [], "the runner ran for a schema that is refused"


async def test_a_percent_encoded_reference_is_resolved_as_the_validator_does() -> None:
    schema = {"$defs": {"a b": {"type": "integer"}}, "$ref": "#/$defs/a%20b"}
    async with (
        td.open_runtime([sub("one", returning(1))], config=LENIENT) as rt,
        rt.open_parent() as parent,
    ):
        assert (await parent.delegate("one", "t", final_schema=schema)).final_result == 1


# -- 4. Config.max_nesting_depth is bounded (contract §13, §15) -------------------


def _nested(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth - 1):
        value = [value]
    return [value] if depth else value


def test_max_nesting_depth_is_refused_past_what_can_be_walked() -> None:
    with pytest.raises(td.InvalidArgumentsError, match=r"max_nesting_depth .* from 1 to 200"):
        td.Config(max_nesting_depth=10**6)
    with pytest.raises(td.InvalidArgumentsError, match="max_nesting_depth"):
        td.Config(max_nesting_depth=201)
    assert td.Config(max_nesting_depth=200).max_nesting_depth == 200


async def test_the_deepest_nesting_allowed_is_walked_everywhere_without_recursion() -> None:
    limit = 200
    config = td.Config(fail_closed=False, max_nesting_depth=limit)
    deepest, deeper = _nested(limit), _nested(500)
    outputs = {"deepest": deepest, "deeper": deeper}

    async def runner(ctx: td.ChildContext) -> Any:
        value = outputs.get(ctx.task, "next")
        # The transcript's list and entry take two levels of the limit.
        entry = {"role": "user", "content": _nested(limit - 2)}
        return td.Output(value, transcript=[entry])

    unique = {"type": "array", "uniqueItems": True}
    async with (
        td.open_runtime([sub("deep", runner)], config=config) as rt,
        rt.open_parent() as parent,
    ):
        tools = parent.tools()
        result = await parent.delegate("deep", "deepest", final_schema=unique)
        assert result.final_result == deepest
        handle = await tools.call(
            "delegate_task", {"subagent": "deep", "task": "deepest", "background": True}
        )
        answer = await tools.call("wait_subagent", {"run_id": handle["run_id"]})
        assert answer["final_result"] == deepest
        carried = await parent.continue_run(result.run_id, "more")
        assert isinstance(carried, td.RunResult)
        assert carried.final_result == "next"
        # Deeper than allowed: the run fails, as a DelegationError, wherever it is read.
        with pytest.raises(td.RunFailedError, match="nests more than 200"):
            await parent.delegate("deep", "deeper")
        handle = await tools.call(
            "delegate_task", {"subagent": "deep", "task": "deeper", "background": True}
        )
        with pytest.raises(td.RunFailedError, match="nests more than 200"):
            await tools.call("wait_subagent", {"run_id": handle["run_id"]})


# -- 5. tools after the runtime closed (contract §8) --------------------------------


def _every_tools_call(tools: td.DelegationTools) -> dict[str, Any]:
    return {
        "names": lambda: tools.names,
        "definitions": tools.definitions,
        "openai_chat_tools": tools.openai_chat_tools,
        "openai_responses_tools": tools.openai_responses_tools,
        "anthropic_tools": tools.anthropic_tools,
    }


async def _all_raise_closed(tools: td.DelegationTools) -> None:
    for method in _every_tools_call(tools).values():
        with pytest.raises(td.RuntimeClosedError):
            method()
    with pytest.raises(td.RuntimeClosedError):
        await tools.call("subagent_status", {"run_id": "run_x"})
    with pytest.raises(td.RuntimeClosedError):
        await tools.call("no such tool", "not json")
    assert "DelegationTools" in repr(tools)


async def test_every_tools_method_raises_runtime_closed_after_close() -> None:
    async with td.open_runtime([sub("echo", returning("ok"))], config=LENIENT) as rt:
        async with rt.open_parent() as parent:
            tools = parent.tools()
            assert tools.definitions()
        await _all_raise_closed(tools)  # its parent closed
        async with rt.open_parent() as parent:
            tools = parent.tools()
    await _all_raise_closed(tools)  # its runtime closed


# -- 8. the testing kit answers in bounded time ----------------------------------


def test_advance_goes_on_past_a_task_that_never_blocks() -> None:
    import trio_delegate.testing as tdt

    steps = 0

    async def spinning(ctx: td.ChildContext) -> Any:
        nonlocal steps
        while True:
            steps += 1
            await trio.sleep(0)  # noqa: ASYNC115 - the loop as users write it

    async def main() -> None:
        spinner = td.Subagent("spin", spinning, timeout_seconds=5)
        async with (
            td.open_runtime([spinner], config=LENIENT) as rt,
            rt.open_parent() as parent,
        ):
            handle = await parent.start("spin", "go")
            await tdt.advance(10)
            assert trio.current_time() == 10
            # Its own deadline, at 5 s, was reached and ended it.
            assert parent.status(handle.run_id).status is td.RunStatus.TIMED_OUT
            with pytest.raises(td.RunTimedOutError):
                await parent.wait(handle.run_id)

    tdt.run(main, autojump=False)
    # Bounded work: a few settles' worth of the loop, not an endless one.
    assert 0 < steps < 100_000


def test_trio_thread_call_from_its_own_trio_thread_fails_at_once() -> None:
    import trio_delegate.testing as tdt

    # call_timeout is only a hang guard: the call must fail at once.
    with tdt.TrioThread(clock=tdt.mock_clock(), call_timeout=30) as host:
        inner: list[BaseException] = []

        async def reenter() -> None:
            try:
                host.call(trio.sleep, 0)
            except RuntimeError as exc:
                inner.append(exc)
            try:
                host.call_sync(trio.current_time)
            except RuntimeError as exc:
                inner.append(exc)

        host.call(reenter)
        assert len(inner) == 2
        assert all("own Trio run" in str(exc) for exc in inner)
        assert host.call_sync(trio.current_time) == 0


# -- 7. every runs view answers in bounded time, whatever the store holds ----------


def _store_with(db: Any, results: dict[str, Any]) -> dict[str, str]:
    """Runs of subagent "r" on an SQLite store at *db*, one per task in *results*."""

    async def runner(ctx: td.ChildContext) -> Any:
        await trio.lowlevel.checkpoint()
        return results[ctx.task]

    async def fill() -> dict[str, str]:
        ids = {}
        async with (
            td.open_runtime([sub("r", runner)], store=td.SQLiteStore(db), config=LENIENT) as rt,
            rt.open_parent("p") as parent,
        ):
            for task in results:
                ids[task] = (await parent.delegate("r", task)).run_id
        return ids

    return trio.run(fill)


def _run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    from trio_delegate._cli._main import main

    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(
    "result",
    [
        pytest.param("x\n" * 300_000, id="many lines"),
        pytest.param([{"a": 1}] * 80_000, id="many values"),
    ],
)
def test_runs_show_cuts_a_large_value_and_field_prints_all_of_it(
    tmp_path: Any, capsys: pytest.CaptureFixture[str], result: Any
) -> None:
    import json

    db = tmp_path / "runs.db"
    ids = _store_with(db, {"big": result})
    code, out, _ = _run_cli(["runs", "show", ids["big"], "--db", str(db)], capsys)
    assert code == 0
    # Bounded output: a screenful, not the 600 KB-1 MB value (19.5 MB as a table).
    assert len(out) < 40_000, len(out)
    assert out.count("\n") < 400
    flat = " ".join(out.replace("│", "").split())
    assert "more characters; --field final_result prints all of it" in flat
    code, out, _ = _run_cli(["runs", "show", ids["big"], "--db", str(db), "--json"], capsys)
    assert code == 0
    assert len(out) < 40_000, len(out)
    assert json.loads(out)["truncated"] == ["final_result"]
    argv = ["runs", "show", ids["big"], "--db", str(db), "--json", "--field", "final_result"]
    code, out, _ = _run_cli(argv, capsys)
    assert code == 0
    assert json.loads(out) == result


def _tamper(db: Any, sql: str, *params: Any) -> None:
    import sqlite3

    conn = sqlite3.connect(db)
    with conn:
        conn.execute(sql, params)
    conn.close()


def test_runs_views_of_a_tampered_huge_task_are_bounded(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    db = tmp_path / "runs.db"
    ids = _store_with(db, {"t": "ok"})
    huge = "y" * 20_000_000
    head = json.loads(_read_head(db, ids["t"]))
    head["task"] = head["task_summary"] = huge
    _tamper(db, "UPDATE runs SET record = ? WHERE run_id = ?", json.dumps(head), ids["t"])
    for argv in (["runs", "show", ids["t"]], ["runs", "list"]):
        code, out, _ = _run_cli([*argv, "--db", str(db)], capsys)
        assert code == 0
        assert len(out) < 40_000, (argv, len(out))


def _read_head(db: Any, run_id: str) -> str:
    import sqlite3

    conn = sqlite3.connect(db)
    try:
        (head,) = conn.execute("SELECT record FROM runs WHERE run_id = ?", (run_id,)).fetchone()
    finally:
        conn.close()
    return str(head)


def test_one_corrupt_row_is_a_store_error_for_that_record_only(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from trio_delegate._stores._sqlite import SQLiteReader

    db = tmp_path / "runs.db"
    ids = _store_with(db, {"good": "fine", "bad": "lost", "also good": "fine too"})
    _tamper(db, "UPDATE runs SET record = '{not json' WHERE run_id = ?", ids["bad"])
    code, out, err = _run_cli(["runs", "list", "--db", str(db), "--json"], capsys)
    listed = json.loads(out)
    assert code == 0
    assert {run["run_id"] for run in listed if not run.get("damaged")} == {
        ids["good"],
        ids["also good"],
    }
    assert next(run for run in listed if run.get("damaged"))["error"]
    assert "not valid trio_delegate JSON" in err
    code, out, err = _run_cli(["runs", "list", "--db", str(db)], capsys)
    assert code == 0
    assert ids["good"] in out
    assert ids["also good"] in out
    assert "damaged" in out
    # The change feed that runs watch follows reads past it too.
    reader = SQLiteReader(db)
    reader.tolerant = True
    try:
        batch = reader.changes(0)
    finally:
        reader.close()
    assert {record.run_id for record in batch.records} == {ids["good"], ids["also good"]}
    assert len(reader.damaged) == 1
    # The damaged record itself is a StoreError where it is asked for.
    code, _, err = _run_cli(["runs", "show", ids["bad"], "--db", str(db)], capsys)
    assert code == 1
    assert "not valid trio_delegate JSON" in err
    code, out, _ = _run_cli(["runs", "show", ids["good"], "--db", str(db)], capsys)
    assert code == 0
    assert "fine" in out


def test_runs_watch_goes_on_past_a_corrupt_row(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.db"
    ids = _store_with(db, {"good": "fine", "bad": "lost"})
    _tamper(db, "UPDATE runs SET record = '{not json' WHERE run_id = ?", ids["bad"])
    argv = ["runs", "watch", "--db", str(db), "--interval", "0.01", "--duration", "0.02"]
    code, out, err = _run_cli(argv, capsys)
    assert code == 0, err
    assert ids["good"] in out
    assert "damaged" in out


# -- 6. serve --config: files that are not files, text that is not for a terminal ---

_PY = __import__("sys").executable
_ECHO = f"""
[[subagents]]
name = "echo"
command = ['{_PY}', "-c", "import sys; print(sys.stdin.read())"]
"""


def _serve(argv: list[str], cwd: Any) -> Any:
    import os
    import subprocess

    return subprocess.run(
        [_PY, "-m", "trio_delegate", *argv],
        capture_output=True,
        text=True,
        timeout=60,  # a hang guard only: it must answer at once
        stdin=subprocess.DEVNULL,
        cwd=cwd,
        env={**os.environ, "PYTHONWARNINGS": "error"},
        check=False,
    )


def test_serve_config_that_is_a_fifo_is_refused_without_blocking(tmp_path: Any) -> None:
    import os

    fifo = tmp_path / "subagents.toml"
    os.mkfifo(fifo)
    for argv in (["serve", "--config", str(fifo)], ["runs", "list", "--config", str(fifo)]):
        done = _serve(argv, tmp_path)
        assert done.returncode != 0, argv
        assert "is a FIFO (named pipe), not a regular file" in done.stderr, done.stderr
    assert _serve(["serve", "--config", str(fifo)], tmp_path).returncode == 2


def test_a_store_that_is_a_fifo_is_a_configuration_error_before_start(tmp_path: Any) -> None:
    import os

    os.mkfifo(tmp_path / "runs.db")
    config = tmp_path / "subagents.toml"
    config.write_text('[runtime]\nstore = "runs.db"\n' + _ECHO)
    done = _serve(["serve", "--config", str(config)], tmp_path)
    assert done.returncode == 2, done.stderr
    assert "runtime.store: 'runs.db' is a FIFO (named pipe), not a regular file" in done.stderr
    assert "serving over stdio" not in done.stderr


@pytest.mark.parametrize(
    "text",
    [
        pytest.param('"\\u001b[2J\\u001b]0;owned\\u0007" = 1\n' + _ECHO, id="a key"),
        pytest.param(
            '[[subagents]]\nname = "x"\npython = "evil_mod:runner"\n', id="an import error"
        ),
        pytest.param(
            '[[subagents]]\nname = "x\\u001b[31m"\ncommand = ["true"]\n', id="a subagent name"
        ),
    ],
)
def test_serve_never_writes_a_configurations_escape_sequences_raw(
    tmp_path: Any, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    from trio_delegate._cli._main import main

    (tmp_path / "evil_mod.py").write_text('raise ImportError("\\x1b[2J\\x1b]0;owned\\x07")\n')
    config = tmp_path / "subagents.toml"
    config.write_text(text)
    assert main(["serve", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err, err
    assert "\x07" not in err, err
    assert "\\x1b" in err


# -- 9. agent CLIs: their output parsed off the loop, their ids never flags --------

_FAKE_CLI = """\
import json, os, sys
with open(os.environ["FAKE_ARGV"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
sys.stdin.read()
session = os.environ["FAKE_SESSION"]
out = sys.stdout
for n in range(int(os.environ.get("FAKE_NOISE", "0"))):
    out.write('{"type":"assistant","n":%d,"text":"x"}\\n' % n)
if os.environ["FAKE_KIND"] == "claude":
    out.write(json.dumps({"type": "result", "subtype": "success", "result": "ok",
                          "session_id": session}) + "\\n")
else:
    out.write(json.dumps({"type": "thread.started", "thread_id": session}) + "\\n")
    out.write(json.dumps({"type": "item.completed",
                          "item": {"type": "agent_message", "text": "ok"}}) + "\\n")
"""


def _fake_agent(tmp_path: Any, kind: str, session: str, noise: int = 0) -> tuple[td.Subagent, Any]:
    from trio_delegate._runners._agents import AgentCLIRunner

    script = tmp_path / "fake_cli.py"
    script.write_text(_FAKE_CLI)
    program = tmp_path / "fake-cli"
    program.write_text(f'#!/bin/sh\nexec {_PY} {script} "$@"\n')
    program.chmod(0o755)
    argv_log = tmp_path / "argv.jsonl"
    env = {
        "FAKE_ARGV": str(argv_log),
        "FAKE_SESSION": session,
        "FAKE_KIND": kind,
        "FAKE_NOISE": str(noise),
    }
    runner = AgentCLIRunner(kind, str(program), env=env)  # type: ignore[arg-type]
    return td.Subagent("agent", runner, timeout_seconds=60), argv_log


def _argvs(log: Any) -> list[list[str]]:
    import json

    return [json.loads(line) for line in log.read_text().splitlines()]


@pytest.mark.parametrize("kind", ["claude", "codex"])
async def test_a_session_id_from_a_cli_never_becomes_a_flag(tmp_path: Any, kind: str) -> None:
    subagent, log = _fake_agent(tmp_path, kind, "--dangerously-skip-permissions")
    async with td.open_runtime([subagent], config=LENIENT) as rt, rt.open_parent() as parent:
        first = await parent.delegate("agent", "one")
        carried = await parent.continue_run(first.run_id, "two")
        assert isinstance(carried, td.RunResult)
    continuation = _argvs(log)[1]
    assert not any("dangerously" in part for part in continuation), continuation
    assert "--resume" not in " ".join(continuation)
    assert "fork" not in continuation


@pytest.mark.parametrize("kind", ["claude", "codex"])
async def test_a_session_id_goes_on_the_command_line_joined_or_after_double_dash(
    tmp_path: Any, kind: str
) -> None:
    subagent, log = _fake_agent(tmp_path, kind, "0199a213-81c0_7800")
    async with td.open_runtime([subagent], config=LENIENT) as rt, rt.open_parent() as parent:
        first = await parent.delegate("agent", "one")
        await parent.continue_run(first.run_id, "two")
    continuation = _argvs(log)[1]
    if kind == "claude":
        assert "--resume=0199a213-81c0_7800" in continuation
    else:
        assert continuation[-3:] == ["--", "0199a213-81c0_7800", "-"]
        assert continuation[:1] == ["exec"]


def test_a_history_whose_session_id_is_not_one_is_never_forked() -> None:
    from trio_delegate._runners._agents import session_and_prompt

    def context(session: Any) -> td.ChildContext:
        from trio_delegate._core._context import ChildContext

        history = (
            {"role": "user", "content": "one"},
            {"role": "assistant", "content": "ok", "agent": "claude", "session_id": session},
        )
        return ChildContext("run_" + "0" * 32, "agent", "two", None, history, math.inf, None)

    for bad in ("--dangerously-skip-permissions", "-x", "a b", "a\nb", "", 7, "a" * 129):
        session, prompt = session_and_prompt("claude", context(bad))
        assert session is None
        assert "The conversation so far" in prompt
    assert session_and_prompt("claude", context("abc-123"))[0] == "abc-123"


async def test_megabytes_of_cli_output_never_hold_the_event_loop(tmp_path: Any) -> None:
    from .helpers import timed_steps

    # About 12 MB of JSON events: parsed on the event loop, a step of a second.
    subagent, _ = _fake_agent(tmp_path, "claude", "abc", noise=300_000)
    async with (
        td.open_runtime([subagent], config=LENIENT) as rt,
        rt.open_parent() as parent,
        timed_steps() as timer,
    ):
        result = await parent.delegate("agent", "go")
    assert result.final_result == "ok"
    assert timer.longest < 0.1, f"a step held the loop for {timer.longest:.3f} s of CPU"


# -- 3. a result structured into a type comes back as that type, after a restart ---


@attrs.frozen
class Point:
    x: int
    y: int


@dataclasses.dataclass(frozen=True)
class Label:
    text: str


@pytest.mark.parametrize("target", [Point, Label])
@pytest.mark.parametrize("where", ["subagent", "call"])
async def test_a_structured_result_keeps_its_type_after_a_restart(
    tmp_path: Any, target: type, where: str
) -> None:
    value = {"x": 1, "y": 2} if target is Point else {"text": "hi"}
    db = tmp_path / "runs.db"
    default = target if where == "subagent" else None
    per_call = target if where == "call" else None
    subagent = td.Subagent("typed", returning(value), final_schema=default)
    async with (
        td.open_runtime([subagent], store=td.SQLiteStore(db), config=LENIENT) as rt,
        rt.open_parent("host") as parent,
    ):
        handle = await parent.start("typed", "go", final_schema=per_call)
        first = await parent.wait(handle.run_id)
        assert isinstance(first, td.RunResult)
        assert type(first.final_result) is target
    gc.collect()
    # A new runtime on the same store: the run is known only from the store.
    async with (
        td.open_runtime([subagent], store=td.SQLiteStore(db), config=LENIENT) as rt,
        rt.open_parent("host") as parent,
    ):
        if where == "call":
            # The host uses the type in this process (as it did before the restart).
            await parent.delegate("typed", "again", final_schema=target)
        again = await parent.wait(handle.run_id)
        assert isinstance(again, td.RunResult)
        assert type(again.final_result) is target
        assert again == first
