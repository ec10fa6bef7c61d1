"""``asks`` in the ``serve`` configuration: a subagent whose runner may ask questions.

Any kind of subagent may declare ``asks = true`` (contract §19); it is
``Subagent.asks``. A value that is not a TOML boolean is a ConfigError naming
the key, the value and the fix, and ``serve`` exits 2 before anything starts.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from trio_delegate._server_config import ConfigError, load_server_config

PY = sys.executable

KINDS = {
    "command": f"command = ['{PY}', '-c', 'print(1)']\n",
    "python": 'python = "trio:sleep_forever"\n',
    "claude": f'kind = "claude"\nprogram = "{PY}"\n',
    "codex": f'kind = "codex"\nprogram = "{PY}"\n',
    "model": 'kind = "model"\nmodel = "openai:gpt-5"\napi_key_env = ""\n',
}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "subagents.toml"
    path.write_text(textwrap.dedent(text))
    return path


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_asks_true_declares_a_subagent_that_may_ask(tmp_path: Path, kind: str) -> None:
    text = '[[subagents]]\nname = "x"\n' + KINDS[kind]
    [plain] = load_server_config(write(tmp_path, text)).subagents
    assert plain.asks is False
    [asking] = load_server_config(write(tmp_path, text + "asks = true\n")).subagents
    assert asking.asks is True
    [silent] = load_server_config(write(tmp_path, text + "asks = false\n")).subagents
    assert silent.asks is False


@pytest.mark.parametrize(
    ("value", "shown"),
    [("1", "got 1"), ('"true"', 'got "true"'), ("0", "got 0"), ("[true]", "got [true]")],
)
def test_asks_that_is_not_a_boolean_names_the_key_the_value_and_the_fix(
    tmp_path: Path, value: str, shown: str
) -> None:
    text = '[[subagents]]\nname = "x"\n' + KINDS["command"] + f"asks = {value}\n"
    with pytest.raises(ConfigError) as info:
        load_server_config(write(tmp_path, text))
    wrong = info.value
    assert wrong.key == "subagents[0].asks"
    assert wrong.subagent == "x"
    assert f"must be true or false, {shown}" in str(wrong)
    assert "write asks = true" in wrong.fix
