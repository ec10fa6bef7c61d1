"""The Codex adapter: ``config_toml`` (parent side) and ``runner`` (Codex threads as subagents).

The runner drives the bundled ``codex app-server`` through the
``openai-codex`` SDK against a fake Responses API on 127.0.0.1; the parent
side's capability cells are backed by ``tests/test_cli_agents_clients.py``,
where the real ``codex`` calls every tool of ``trio-delegate serve``.
"""

from __future__ import annotations

import tomllib
import uuid
from pathlib import Path
from typing import Any

import pytest
import trio

import trio_delegate as td
from trio_delegate.adapters import CAPABILITIES, codex

openai_codex = pytest.importorskip("openai_codex")

from .fakes import FakeResponses, Hold, Step, Turn, text  # noqa: E402
from .fakes.clients import codex_env, codex_program, processes_with  # noqa: E402

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SCHEMA = {
    "type": "object",
    "properties": {"n": {"type": "integer"}},
    "required": ["n"],
    "additionalProperties": False,
}


def config_for(tmp_path: Path, fake: FakeResponses, marker: str = "") -> Any:
    env = codex_env(tmp_path / "home", fake)
    if marker:
        name, value = marker.split("=")
        env[name] = value
    return openai_codex.CodexConfig(codex_bin=codex_program(), env=env, cwd=str(tmp_path))


def test_config_toml_is_the_entry_mcp_config_prints() -> None:
    entry = tomllib.loads(codex.config_toml(EXAMPLES / "subagents.toml"))["mcp_servers"]
    assert entry["delegate"]["args"][-1] == str((EXAMPLES / "subagents.toml").resolve())
    assert entry["delegate"]["default_tools_approval_mode"] == "approve"
    with pytest.raises(ValueError, match="does not exist"):
        codex.config_toml("no/such/file.toml")


async def test_cap_codex_child_runner(tmp_path: Path) -> None:
    def second(turn: Turn) -> Any:
        assert "the first task" in str(turn.request.body)
        return text("second answer")

    script: list[Step] = [text("first answer"), second, text('{"n": 2}')]
    with FakeResponses(script) as fake:
        subagent = td.Subagent("codex", codex.runner(config_for(tmp_path, fake)))
        async with td.open_runtime([subagent]) as rt, rt.open_parent("host") as parent:
            with trio.fail_after(60):
                first = await parent.delegate("codex", "the first task")
                assert first.final_result == "first answer"
                again = await parent.continue_run(first.run_id, "and then")
                assert isinstance(again, td.RunResult)
                assert again.final_result == "second answer"
                structured = await parent.delegate("codex", "count", final_schema=SCHEMA)
                assert structured.final_result == {"n": 2}
    assert fake.problems == []
    assert fake.turns[2].request.body["text"]["format"]["schema"] == SCHEMA


async def test_cancellation_interrupts_the_turn_and_ends_the_app_server(tmp_path: Path) -> None:
    marker = f"TRIO_DELEGATE_TEST_RUN={uuid.uuid4().hex}"
    with FakeResponses([Hold()]) as fake:
        subagent = td.Subagent("codex", codex.runner(config_for(tmp_path, fake, marker)))
        config = td.Config(fail_closed=False)
        async with td.open_runtime([subagent], config=config) as rt, rt.open_parent() as parent:
            with trio.fail_after(60):
                handle = await parent.start("codex", "think")
                while not fake.holding.is_set():  # noqa: ASYNC110 - another thread
                    await trio.sleep(0.02)
                parent.cancel(handle.run_id)
                with pytest.raises(td.RunCancelledError):
                    await parent.wait(handle.run_id)
    with trio.fail_after(10):
        while processes_with(marker):  # noqa: ASYNC110 - other processes
            await trio.sleep(0.02)


def test_the_matrix_rows_are_all_supported() -> None:
    assert all(cell.supported for cell in CAPABILITIES["codex"].values())
