"""``trio-delegate mcp-config claude|codex``: the snippets that start ``serve``."""

from __future__ import annotations

import json
import os
import sys
import tomllib
from pathlib import Path

import pytest

from trio_delegate._cli._main import main
from trio_delegate._mcp_config import codex_config_toml

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_claude_gets_an_mcp_json_with_absolute_paths(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # any working directory will do
    assert main(["mcp-config", "claude", "--config", str(EXAMPLES / "subagents.toml")]) == 0
    out, err = capsys.readouterr()
    entry = json.loads(out)["mcpServers"]["delegate"]
    assert os.path.isabs(entry["command"])
    assert os.access(entry["command"], os.X_OK)
    assert entry["args"][-2:] == ["--config", str(EXAMPLES / "subagents.toml")]
    assert "serve" in entry["args"]
    # How headless runs allow the tools.
    assert '--allowedTools "mcp__delegate"' in err


def test_codex_gets_a_config_toml_entry_that_approves_its_tools(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "subagents.toml"
    config.write_text(
        "[server]\nforeground_limit_seconds = 20\n"
        f'[[subagents]]\nname = "x"\ncommand = ["{sys.executable}"]\n'
    )
    assert main(["mcp-config", "codex", "--config", str(config), "--name", "team"]) == 0
    entry = tomllib.loads(capsys.readouterr().out)["mcp_servers"]["team"]
    assert os.path.isabs(entry["command"])
    assert entry["args"][-1] == str(config.resolve())
    assert entry["default_tools_approval_mode"] == "approve"
    # Codex must not give up before the server answers a foreground call.
    assert entry["tool_timeout_sec"] > 20
    # Nor start without the tools of a server slower than its 1 s grace.
    assert entry["required"] is True


def test_no_foreground_limit_gives_codex_a_long_tool_timeout() -> None:
    entry = tomllib.loads(codex_config_toml(["/bin/td", "serve"], foreground_limit_seconds=None))
    assert entry["mcp_servers"]["delegate"]["tool_timeout_sec"] >= 3600


@pytest.mark.parametrize("client", ["claude", "codex"])
def test_it_refuses_what_would_fail_silently(
    client: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["mcp-config", client, "--config", str(tmp_path / "missing.toml")]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "does not exist" in err
    assert "fix: " in err
    broken = tmp_path / "broken.toml"
    broken.write_text("[[subagents]]\nname = 3\n")
    assert main(["mcp-config", client, "--config", str(broken)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "does not load" in err
    assert "subagents[0].name" in err


def test_a_name_clients_cannot_use_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["mcp-config", "codex", "--name", "my server"])
    assert info.value.code == 2
    assert "--name" in capsys.readouterr().err


def test_the_server_configs_defaults_are_the_servers() -> None:
    from trio_delegate import _server_config
    from trio_delegate.mcp import (
        DEFAULT_FOREGROUND_LIMIT_SECONDS,
        DEFAULT_PROGRESS_INTERVAL_SECONDS,
    )

    assert _server_config.DEFAULT_FOREGROUND_LIMIT_SECONDS == DEFAULT_FOREGROUND_LIMIT_SECONDS
    assert _server_config.DEFAULT_PROGRESS_INTERVAL_SECONDS == DEFAULT_PROGRESS_INTERVAL_SECONDS
