"""``trio-delegate init`` and the clients of ``mcp-config``: a start for a wheel user."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

import trio_delegate as td
from trio_delegate._cli._init import CONFIG_NAME, RUNNERS_NAME
from trio_delegate._cli._main import main
from trio_delegate._server_config import load_server_config
from trio_delegate._urls import DOCS_URL

from .helpers import mcp_initialize


def test_init_writes_a_configuration_serve_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    # load_server_config imports the runner module from the file's directory.
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "starter_agents", raising=False)
    assert main(["init"]) == 0
    out = capsys.readouterr().out
    assert "trio-delegate serve " in out
    assert "--config" not in out.split("mcp-config")[0]  # serve reads ./subagents.toml
    assert DOCS_URL in out
    config = load_server_config(tmp_path / CONFIG_NAME)
    assert [subagent.name for subagent in config.subagents] == ["outliner", "counter"]

    async def use_them() -> tuple[object, object]:
        async with td.open_runtime(config.subagents) as rt, rt.open_parent("p") as parent:
            outline = await parent.delegate("outliner", "One. Two!")
            counted = await parent.delegate("counter", "Three words here. And four.")
            return outline.final_result, counted.final_result

    assert trio.run(use_them) == ("- One.\n- Two!", {"words": 5, "sentences": 2})
    monkeypatch.delitem(sys.modules, "starter_agents", raising=False)


def test_the_budgets_init_shows_load_once_uncommented(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "starter_agents", raising=False)
    assert main(["init"]) == 0
    capsys.readouterr()
    path = tmp_path / CONFIG_NAME
    lines = path.read_text().splitlines()
    budgets = [index for index, line in enumerate(lines) if "budget = {" in line]
    assert len(budgets) == 2  # the runtime's and the command subagent's
    # Uncomment the runtime's budget and the whole command subagent around the other.
    start = max(i for i in range(budgets[1]) if lines[i] == "# [[subagents]]")
    for index in [budgets[0], *range(start, budgets[1] + 1)]:
        lines[index] = lines[index].removeprefix("# ")
    path.write_text("\n".join(lines).replace('["python3", "summarize.py"]', "['cat']"))
    config = load_server_config(path)
    assert config.config.runtime_budget == td.Budget(max_cost_usd=20)
    assert config.subagents[-1].budget == td.Budget(max_total_tokens=100000, max_cost_usd=2.5)
    monkeypatch.delitem(sys.modules, "starter_agents", raising=False)


@pytest.mark.parametrize("existing", [CONFIG_NAME, RUNNERS_NAME])
def test_init_never_overwrites(
    existing: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / existing).write_text("mine\n")
    assert main(["init"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert f"{existing} already exists" in err
    assert "fix: " in err
    assert (tmp_path / existing).read_text() == "mine\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == [existing]


def test_plain_serve_after_init_serves_the_configuration_init_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["init"]) == 0
    request = json.dumps(mcp_initialize(1)) + "\n"
    # A real serve, as a client starts it: no --config, in the folder init wrote to.
    done = subprocess.run(
        [sys.executable, "-m", "trio_delegate", "serve"],
        input=request.encode(),
        capture_output=True,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    answer = json.loads(done.stdout.splitlines()[0])
    assert answer["id"] == 1
    assert answer["result"]["serverInfo"]["name"]
    assert str(tmp_path / CONFIG_NAME) in done.stderr.decode()  # the file it serves


def test_plain_serve_without_a_configuration_says_to_run_init(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["serve"]) == 2
    err = capsys.readouterr().err
    assert f"no --config given, and there is no {CONFIG_NAME} in this folder" in err
    assert "fix: run `trio-delegate init` here" in err
    assert "--config FILE" in err


HOSTILE_FOLDER = "proj\x1b]0;pwned\x07\x1b[2J\u202e\x9b31m"


def test_init_shows_a_hostile_folder_name_literally(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from trio_delegate._checks import terminal_safe
    from trio_delegate._cli._init import run_init

    folder = tmp_path / HOSTILE_FOLDER
    folder.mkdir()
    # Written elsewhere: what was written and the way there (cd FOLDER) name it.
    assert run_init(folder) == 0
    out = capsys.readouterr().out
    assert terminal_safe(out) == out
    assert "proj\\x1b]0;pwned\\x07" in out
    # Refused where the files are: the refusal names it.
    monkeypatch.chdir(folder)
    assert main(["init"]) == 2
    err = capsys.readouterr().err
    assert "already exist in" in err
    assert terminal_safe(err) == err
    assert "proj\\x1b]0;pwned\\x07\\x1b[2J\\u202e\\x9b31m" in err


def test_runs_and_demo_show_a_hostile_path_literally(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from trio_delegate._checks import terminal_safe

    folder = tmp_path / HOSTILE_FOLDER
    folder.mkdir()
    memory_only = folder / "memory.toml"
    memory_only.write_text("[runtime]\nsubagent_timeout_seconds = 60\n")
    broken = folder / "broken.toml"
    broken.write_text("[runtime\n")
    for argv in (
        ["runs", "list", "--config", str(memory_only)],
        ["runs", "list", "--config", str(broken)],
        ["runs", "list", "--config", str(folder / "missing.toml")],
        ["runs", "show", "run_1", "--db", str(folder / "missing.db")],
        ["demo", "--speed", "1000", "--no-live", "--db", str(memory_only / "runs.db")],
    ):
        assert main(argv) == 1, argv
        err = capsys.readouterr().err
        assert "proj\\x1b]0;pwned\\x07" in err, (argv, err)
        assert terminal_safe(err) == err, argv


def test_a_missing_configuration_names_init_and_the_site(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["mcp-config", "claude"]) == 2
    err = capsys.readouterr().err
    assert "trio-delegate init" in err
    assert f"{DOCS_URL}mcp/" in err
    assert "docs/" not in err.replace(DOCS_URL, "")


def _snippet(
    client: str, config: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[dict[str, Any], str]:
    assert main(["mcp-config", client, "--config", str(config), "--name", "team"]) == 0
    out, err = capsys.readouterr()
    return json.loads(out), err


@pytest.fixture
def starter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    assert main(["init"]) == 0
    yield tmp_path / CONFIG_NAME
    monkeypatch.delitem(sys.modules, "starter_agents", raising=False)


@pytest.mark.parametrize("client", ["claude-desktop", "cursor"])
def test_claude_desktop_and_cursor_get_their_mcp_servers_object(
    client: str, starter: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    # The documented stdio entry: {"mcpServers": {NAME: {"command", "args"}}}.
    snippet, err = _snippet(client, starter, capsys)
    assert list(snippet) == ["mcpServers"]
    entry = snippet["mcpServers"]["team"]
    assert sorted(entry) == ["args", "command"]
    assert os.path.isabs(entry["command"])
    assert os.access(entry["command"], os.X_OK)
    assert entry["args"][-3:] == ["serve", "--config", str(starter.resolve())]
    assert all(isinstance(arg, str) for arg in entry["args"])
    assert "keep it out of version control" in err.replace("\n# ", " ")


def test_vscode_gets_its_servers_object_with_a_stdio_type(
    starter: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    # VS Code's format: {"servers": {NAME: {"type": "stdio", "command", "args"}}}.
    snippet, err = _snippet("vscode", starter, capsys)
    assert list(snippet) == ["servers"]
    entry = snippet["servers"]["team"]
    assert entry["type"] == "stdio"
    assert sorted(entry) == ["args", "command", "type"]
    assert os.path.isabs(entry["command"])
    assert entry["args"][-3:] == ["serve", "--config", str(starter.resolve())]
    assert ".vscode/mcp.json" in err


@pytest.mark.parametrize("client", ["claude-desktop", "cursor", "vscode"])
def test_the_new_clients_refuse_a_missing_configuration(
    client: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["mcp-config", client, "--config", str(tmp_path / "missing.toml")]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "does not exist" in err


# -- the model subagent init shows ------------------------------------------------------------

KEY = "ANTHROPIC_API_KEY"


def _model_lines(path: Path) -> tuple[list[str], range]:
    """The lines of *path*, and where the commented model subagent is in them."""
    lines = path.read_text().splitlines()
    kind = lines.index('# kind = "model"')
    start = max(i for i in range(kind) if lines[i] == "# [[subagents]]")
    end = next(i for i in range(kind, len(lines)) if not lines[i].startswith("# "))
    return lines, range(start, end)


def _serve_once(folder: Path, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    request = json.dumps(mcp_initialize(1)) + "\n"
    return subprocess.run(
        [sys.executable, "-m", "trio_delegate", "serve"],
        input=request.encode(),
        capture_output=True,
        cwd=folder,
        env=env,
        timeout=60,
        check=False,
    )


def test_init_shows_a_model_subagent_that_serve_starts_without_its_sdk_or_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "starter_agents", raising=False)
    assert main(["init"]) == 0
    capsys.readouterr()
    path = tmp_path / CONFIG_NAME
    lines, block = _model_lines(path)
    shown = "\n".join(lines[i] for i in block)
    assert 'model = "anthropic:' in shown
    assert f'# api_key_env = "{KEY}"' in shown
    assert "max_turns = " in shown
    # A plain install has no anthropic SDK: the file as written loads all the same.
    monkeypatch.setitem(sys.modules, "anthropic", None)
    monkeypatch.delenv(KEY, raising=False)
    assert [s.name for s in load_server_config(path).subagents] == ["outliner", "counter"]
    # Without the key variable, serve starts on the file as written ...
    env = {name: value for name, value in os.environ.items() if name != KEY}
    done = _serve_once(tmp_path, env)
    assert done.returncode == 0, done.stderr.decode()
    assert json.loads(done.stdout.splitlines()[0])["id"] == 1
    # ... and, the SDK installed, with the model subagent uncommented: the key is
    # read when a run calls the model, not at start-up.
    for index in block:
        lines[index] = lines[index].removeprefix("# ")
    path.write_text("\n".join(lines) + "\n")
    done = _serve_once(tmp_path, env)
    assert done.returncode == 0, done.stderr.decode()
    assert "subagents outliner, counter, writer" in done.stderr.decode()
    monkeypatch.delitem(sys.modules, "starter_agents", raising=False)


async def test_the_model_subagent_init_shows_runs_once_uncommented_with_its_key_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mock_clock: trio.testing.MockClock
) -> None:
    from .fakes import FakeAnthropic, text

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "starter_agents", raising=False)
    assert main(["init"]) == 0
    path = tmp_path / CONFIG_NAME
    lines, block = _model_lines(path)
    for index in block:
        lines[index] = lines[index].removeprefix("# ")
    with FakeAnthropic([text("a draft")]) as fake:
        # The one change a test needs: the model API is the fake's.
        path.write_text("\n".join(lines).replace("max_turns = 8", f'base_url = "{fake.url}"'))
        writer = load_server_config(path).subagents[-1]
        assert isinstance(writer.runner, td.ModelRunner)
        assert (writer.name, writer.runner.api_key_env) == ("writer", KEY)
        monkeypatch.delenv(KEY, raising=False)
        async with td.open_runtime([writer]) as rt, rt.open_parent("p") as parent:
            with pytest.raises(td.RunFailedError, match=KEY) as failed:
                await parent.delegate("writer", "notes")
            monkeypatch.setenv(KEY, "sk-test-key")
            result = await parent.delegate("writer", "notes", replaces=failed.value.run_id)
    assert result.final_result == "a draft"
    # The key went out with the one call made (the run without it made none).
    sent = [request.headers for request in fake.requests]
    assert len(sent) == 1
    assert any("sk-test-key" in value for value in sent[0].values())
    monkeypatch.delitem(sys.modules, "starter_agents", raising=False)
