"""A new user's first hour: each message says what happened and what to do next."""

from __future__ import annotations

import datetime
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import trio
import trio.testing
from rich.console import Console

import trio_delegate as td
from trio_delegate._cli import _demo as demo
from trio_delegate._cli._demo_view import Event, LiveReporter
from trio_delegate._cli._main import main
from trio_delegate._server_config import ConfigError, load_server_config

from .test_runs_command import fill, quick

ROOT = Path(__file__).resolve().parent.parent


def synchronous_summarizer(ctx: td.ChildContext) -> str:
    return ctx.task


def test_a_plain_function_as_runner_is_named_whole() -> None:
    with pytest.raises(td.InvalidArgumentsError) as info:
        td.Subagent("summarizer", synchronous_summarizer, description="d")  # type: ignore[arg-type]
    message = info.value.message
    # Not reprlib's cut "<function syn...x7f…>".
    assert message.endswith("got <function synchronous_summarizer>: define it with async def")


def test_a_mistyped_subagent_key_reads_as_sentences(tmp_path: Path) -> None:
    config = tmp_path / "subagents.toml"
    config.write_text(
        '[[subagents]]\nname = "x"\ndescriptoin = "d"\ncommand = ["true"]\n', encoding="utf-8"
    )
    with pytest.raises(ConfigError) as info:
        load_server_config(config)
    assert str(info.value).endswith(
        "fix: did you mean 'description'? Otherwise remove it: a command subagent takes "
        "these keys: name, description, timeout_seconds, budget, asks, final_schema, command, cwd, "
        "env, kill_grace_seconds"
    )


def _import_without(blocked: list[str], module: str) -> str:
    # A module set to None in sys.modules cannot be imported: as if never installed.
    code = "import sys\n" + "".join(f"sys.modules[{name!r}] = None\n" for name in blocked)
    code += f"import {module}\n"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode != 0
    return done.stderr.strip().splitlines()[-1]


def test_the_mcp_package_without_its_extra_names_the_extra() -> None:
    last = _import_without(["mcp"], "trio_delegate.mcp")
    assert last == (
        "ImportError: trio_delegate.mcp needs the MCP SDK: pip install 'trio-delegate[mcp]'"
    )


@pytest.mark.parametrize(
    ("adapter", "extra"),
    [
        ("langchain", "langchain"),
        ("pydantic_ai", "pydantic-ai"),
        ("openai_agents", "openai-agents"),
        ("dspy", "dspy"),
    ],
)
def test_an_adapter_without_trio_asyncio_names_its_own_extra(adapter: str, extra: str) -> None:
    last = _import_without(["trio_asyncio"], f"trio_delegate.adapters.{adapter}")
    assert f"pip install 'trio-delegate[{extra}]'" in last
    assert last.startswith(f"ImportError: trio_delegate.adapters.{adapter} needs ")


def test_the_checkout_ignores_the_mcp_json_the_readme_writes() -> None:
    assert "mcp-config claude --config examples/subagents.toml > .mcp.json" in (
        ROOT / "README.md"
    ).read_text(encoding="utf-8")
    done = subprocess.run(
        ["git", "check-ignore", "--no-index", "-q", ".mcp.json"],
        cwd=ROOT,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, ".mcp.json holds machine paths: .gitignore must cover it"


def test_runs_show_takes_a_unique_id_prefix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.db"
    ids = trio.run(fill, db)
    # The demo's table shows an id's start (8 characters); 12 are unique here for sure.
    short = ids[1][:12]
    assert main(["runs", "show", short, "--db", str(db), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["run_id"].startswith(short)
    # "run_" starts every id: which one is meant cannot be told.
    assert main(["runs", "show", "run_", "--db", str(db)]) == 1
    err = capsys.readouterr().err
    assert "is the start of 3 run ids" in err
    assert "give more of the id" in err


def test_runs_show_prints_every_time_in_iso_8601(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.db"

    async def one_with_a_deadline() -> str:
        subagent = td.Subagent("quick", quick, timeout_seconds=30)
        async with (
            td.open_runtime([subagent], store=td.SQLiteStore(db)) as rt,
            rt.open_parent("alice") as parent,
        ):
            return (await parent.delegate("quick", "one")).run_id

    run_id = trio.run(one_with_a_deadline)
    assert main(["runs", "show", run_id, "--db", str(db), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    times = {key: shown[key] for key in ("admitted_at", "started_at", "ended_at", "deadline_at")}
    for key, value in times.items():
        assert isinstance(value, str), f"{key} is {value!r}"
        parsed = datetime.datetime.fromisoformat(value)
        assert parsed.utcoffset() == datetime.timedelta(0), key
    started = datetime.datetime.fromisoformat(times["started_at"])
    deadline = datetime.datetime.fromisoformat(times["deadline_at"])
    assert datetime.timedelta(seconds=29) < deadline - started < datetime.timedelta(seconds=31)


async def test_leaving_the_parent_with_a_live_background_run_says_to_wait() -> None:
    async def slow(ctx: td.ChildContext) -> str:
        await trio.sleep(60)
        return "done"

    async with td.open_runtime([td.Subagent("slow", slow, description="d")]) as rt:
        with pytest.raises(td.UnresolvedDelegationError) as info:
            async with rt.open_parent("p") as parent:
                run_id = (await parent.start("slow", "x")).run_id
    (entry,) = info.value.unresolved
    assert entry.status == "cancelled"
    assert entry.why == (
        "it had not ended when the parent closed, and closing the parent cancelled it: "
        f"await parent.wait({run_id!r}) before leaving the parent's async with block"
    )
    assert "replaces=" not in entry.why


async def test_a_run_cancelled_by_request_still_asks_for_a_replacement() -> None:
    async def slow(ctx: td.ChildContext) -> str:
        await trio.sleep(60)
        return "done"

    started: list[str] = []

    async def cancel_then_leave(rt: td.Runtime) -> None:
        async with rt.open_parent("p") as parent:
            started.append((await parent.start("slow", "x")).run_id)
            parent.cancel(started[0])
            with pytest.raises(td.RunCancelledError):
                await parent.wait(started[0])

    async with td.open_runtime([td.Subagent("slow", slow, description="d")]) as rt:
        with pytest.raises(td.UnresolvedDelegationError) as info:
            await cancel_then_leave(rt)
    (entry,) = info.value.unresolved
    assert f"replaces={started[0]!r}" in entry.why


async def test_a_result_that_is_not_json_says_what_a_result_may_be() -> None:
    async def when(ctx: td.ChildContext) -> dict[str, object]:
        await trio.lowlevel.checkpoint()
        return {"at": datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)}

    config = td.Config(fail_closed=False)
    subagents = [td.Subagent("when", when, description="d")]
    async with td.open_runtime(subagents, config=config) as rt, rt.open_parent("p") as parent:
        with pytest.raises(td.RunFailedError) as info:
            await parent.delegate("when", "x")
    message = info.value.message
    assert "the result is not JSON-ready (Object of type datetime is not JSON serializable)" in (
        message
    )
    assert "None, bool, int, float, str, and lists and str-keyed dicts of those" in message
    assert "a datetime with .isoformat()" in message
    assert "a replacement, which would fail the same way" in message


async def test_the_demo_at_80_columns_shows_every_explanation_whole(
    autojump_clock: trio.testing.MockClock,
) -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=80, color_system=None)
    notes: list[str] = []

    class Recording(LiveReporter):
        def event(self, event: Event) -> None:
            if event.note:
                notes.append(event.note)
            super().event(event)

    summary = await demo.play(Recording(console))
    assert summary.resolved
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    # A wrapped note reads whole once its line breaks are spaces again.
    joined = re.sub(r"\s*\n\s*", " ", text)
    assert "admission ack, not a result" in notes
    missing = [note for note in set(notes) if f"({note})" not in joined]
    assert not missing, f"cut at 80 columns: {missing}"


def test_the_first_tracing_snippet_prints_spans_with_nothing_else_running(
    tmp_path: Path,
) -> None:
    page = (ROOT / "docs" / "observability.md").read_text(encoding="utf-8")
    turning_on = page.split("## Turning it on", 1)[1]
    first = re.search(r"```python\n(.*?)```", turning_on, re.S)
    assert first is not None
    snippet = first.group(1)
    assert "ConsoleSpanExporter" in snippet
    assert "OTLP" not in snippet
    # In a process of its own: the snippet sets the global tracer provider.
    script = tmp_path / "console_otel.py"
    script.write_text(snippet, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert '"name": "invoke_agent investigator"' in done.stdout
    assert "retry" not in (done.stdout + done.stderr).lower()
