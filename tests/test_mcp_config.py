"""``trio-delegate mcp-config CLIENT``: the snippets that start ``serve``."""

from __future__ import annotations

import json
import os
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_delegate._checks import terminal_safe
from trio_delegate._cli._main import main
from trio_delegate._mcp_config import (
    McpConfigError,
    claude_desktop_json,
    claude_mcp_json,
    codex_config_toml,
    cursor_mcp_json,
    vscode_mcp_json,
)

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


# -- every client's snippet reads back as what it was made of ------------------------------

#: Characters that break a hand-made TOML or JSON string, or act on a terminal.
HOSTILE_CHARS = st.sampled_from(
    [
        *("\x00", "\x01", "\t", "\n", "\r", "\x1b", "\x7f", "\x85", "\x9b", '"', "'", "\\"),
        *("\u202e", "\u2066", "\u061c", "\U0001f600", "\U00010000", "é", "[", "]", "=", "#", "."),
    ]
)
#: Text made mostly of them (valid Unicode: a path of bytes that are not UTF-8 is refused).
HOSTILE_TEXT = st.lists(
    st.one_of(HOSTILE_CHARS, st.characters(exclude_categories=["Cs"])), min_size=1, max_size=24
).map("".join)

#: Each client's snippet maker and how that client reads its file back.
READERS: dict[str, tuple[Any, Any]] = {
    "claude": (claude_mcp_json, lambda text, name: json.loads(text)["mcpServers"][name]),
    "claude-desktop": (
        claude_desktop_json,
        lambda text, name: json.loads(text)["mcpServers"][name],
    ),
    "cursor": (cursor_mcp_json, lambda text, name: json.loads(text)["mcpServers"][name]),
    "vscode": (vscode_mcp_json, lambda text, name: json.loads(text)["servers"][name]),
    "codex": (codex_config_toml, lambda text, name: tomllib.loads(text)["mcp_servers"][name]),
}


@pytest.mark.parametrize("client", sorted(READERS))
@given(paths=st.lists(HOSTILE_TEXT, min_size=1, max_size=4), name=HOSTILE_TEXT)
def test_every_clients_snippet_reads_back_whatever_the_paths_and_name_hold(
    client: str, paths: list[str], name: str
) -> None:
    snippet, read = READERS[client]
    command = ["/opt/" + paths[0], "serve", "--config", *paths[1:]]
    text = snippet(command, name=name)
    entry = read(text, name)
    assert [entry["command"], *entry["args"]] == command
    # Printed to a terminal, nothing in it acts on the terminal.
    assert terminal_safe(text) == text


@pytest.mark.parametrize("client", sorted(READERS))
def test_a_path_that_is_not_unicode_is_refused_for_every_client(client: str) -> None:
    snippet, _ = READERS[client]
    with pytest.raises(McpConfigError, match=r"not valid Unicode"):
        snippet(["/opt/bin/trio-delegate", "serve", "--config", "/home/\udcff.toml"])


@pytest.mark.parametrize("client", sorted(READERS))
def test_a_configuration_at_a_hostile_path_gets_a_snippet_that_parses(
    client: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    folder = tmp_path / 'a\x7fb "c" \\d\u202e\x1b[2J'
    folder.mkdir()
    config = folder / "subagents.toml"
    config.write_text(f'[[subagents]]\nname = "x"\ncommand = ["{Path(sys.executable).name}"]\n')
    assert main(["mcp-config", client, "--config", str(config)]) == 0
    out = capsys.readouterr().out
    entry = READERS[client][1](out, "delegate")
    assert entry["args"][-1] == str(config.resolve())
    assert terminal_safe(out) == out


# -- what comes from outside is shown, never acted on --------------------------------------


def test_refusals_show_paths_and_arguments_literally(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    hostile = "\x1b]0;pwned\x07\x1b[2J\u202e"
    assert main(["mcp-config", "codex", "--config", str(tmp_path / hostile)]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err
    assert terminal_safe(err) == err
    assert "\\x1b]0;pwned\\x07" in err
    for argv in (
        ["mcp-config", "codex", "--name", hostile],
        ["mcp-config", "codex", hostile],
        ["mcp-config", hostile],
        ["runs", "list", hostile],
        [hostile],
    ):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2
        err = capsys.readouterr().err
        assert terminal_safe(err) == err, argv
        assert "\\x1b" in err
    # A megabyte argument is quoted briefly.
    with pytest.raises(SystemExit):
        main(["mcp-config", "codex", "x" * 1_000_000])
    assert len(capsys.readouterr().err) < 2_000
