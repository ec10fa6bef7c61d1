"""Running the real agent CLIs against the fakes, with nothing of the machine's.

Claude Code comes bundled in the ``claude-agent-sdk`` wheel and Codex in
``openai-codex-cli-bin``. Each run gets a throwaway home (``HOME``,
``CLAUDE_CONFIG_DIR``, ``CODEX_HOME``) under the test's temporary folder,
talks only to a fake on 127.0.0.1, and has telemetry, error reporting and
update checks off.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any, Final

import pytest

from .anthropic import FakeAnthropic
from .openai_responses import FakeResponses


def _bundled(module: str, inside: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / inside
    return path if path.is_file() and os.access(path, os.X_OK) else None


#: The bundled executables, or None where the package is missing.
CLAUDE: Final = _bundled("claude_agent_sdk", "_bundled/claude")
CODEX: Final = _bundled("codex_cli_bin", "bin/codex")

#: The model names the fakes are asked for (any name works with them).
CLAUDE_MODEL: Final = "claude-sonnet-4-5"
CODEX_MODEL: Final = "gpt-5.4"


def claude_program() -> str:
    """The bundled ``claude``; skips the test where it cannot run."""
    if CLAUDE is None or os.name != "posix":
        pytest.skip("Claude Code is not bundled for this platform (claude-agent-sdk wheel)")
    return str(CLAUDE)


def codex_program() -> str:
    """The bundled ``codex``; skips the test where it cannot run."""
    if CODEX is None or os.name != "posix":
        pytest.skip("Codex is not bundled for this platform (openai-codex-cli-bin wheel)")
    return str(CODEX)


def _base_env(home: Path) -> dict[str, str]:
    home.mkdir(parents=True, exist_ok=True)
    return {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        # No proxy may turn 127.0.0.1 into a trip elsewhere.
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }


def claude_env(home: Path, fake: FakeAnthropic) -> dict[str, str]:
    """The whole environment for ``claude``: a home of its own, the fake as its API."""
    return {
        **_base_env(home),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "ANTHROPIC_BASE_URL": fake.url,
        "ANTHROPIC_API_KEY": "sk-ant-test-not-a-key",
        "ANTHROPIC_MODEL": CLAUDE_MODEL,
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_BUG_COMMAND": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }


def codex_env(home: Path, fake: FakeResponses, *, config: str = "") -> dict[str, str]:
    """The whole environment for ``codex``, and its ``config.toml`` (plus *config*)."""
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(codex_config(fake) + config)
    return {
        **_base_env(home),
        "CODEX_HOME": str(codex_home),
        "FAKE_OPENAI_KEY": "sk-test-not-a-key",
    }


def codex_config(fake: FakeResponses) -> str:
    """A ``config.toml`` that sends Codex to the fake and keeps it offline and quiet."""
    return f"""
model = {json.dumps(CODEX_MODEL)}
model_provider = "fake"
check_for_update_on_startup = false

[model_providers.fake]
name = "fake"
base_url = {json.dumps(fake.url + "/v1")}
wire_api = "responses"
env_key = "FAKE_OPENAI_KEY"
request_max_retries = 0
stream_max_retries = 0

[analytics]
enabled = false

[otel]
exporter = "none"
"""


def processes_with(marker: str) -> list[int]:
    """The live processes whose environment holds *marker* (``NAME=value``)."""
    needle = marker.encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z" and needle in environ.split(b"\0"):
            found.append(int(entry))
    return found


def result_json(stdout: bytes) -> Any:
    """``claude -p --output-format json``'s result object."""
    return json.loads(stdout.decode().strip().splitlines()[-1])
