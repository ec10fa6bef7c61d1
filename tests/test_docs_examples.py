"""Every complete script in docs/ runs as written, and prints what it should.

In the README and docs/, a ``python`` block right after an ``<!-- runnable -->`` line is a complete
script that needs nothing beyond this machine: it is executed here, and what it
prints is checked line by line against :data:`EXPECTED`, so the
documentation cannot drift from the code.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"<!-- runnable -->\n```python\n(.*?)```", re.S)

#: A run id (random): any one matches.
RUN = r"run_[0-9a-f]{32}"

#: What each script prints, one regular expression per line (matched whole).
#: Only what is random (run ids, a server's own owner) is left open.
EXPECTED: dict[str, list[str]] = {
    "README.md#0": [
        re.escape("{'finding': \"checked 'the login bug'\"}"),
        "running",
        re.escape("RunResult(run_id='")
        + RUN
        + re.escape(
            "', subagent='investigator', task_summary='the logout bug', "
            "final_result={'finding': \"checked 'the logout bug'\"})"
        ),
    ],
    "library.md#0": [
        re.escape("input_required reading the schema how many rows per batch?"),
        "refused 0",
        "True running",
        re.escape("{'batch': 500}"),
        re.escape("{'batch': 100}"),
    ],
    "mcp.md#0": [
        re.escape("{'run_id': '")
        + RUN
        + re.escape("', 'subagent': 'shout', 'task_summary': 'hi', 'final_result': 'HI'}"),
        re.escape("True no run 'run_made_up' belongs to parent 'mcp-") + r"[0-9a-f]+' .*",
    ],
    "testing.md#0": ["the three review tests passed"],
    "testing.md#1": [re.escape("timed out 40 s after it started, as contract §6 says")],
    "testing.md#2": [
        "0.000 style review of draft start style",
        "0.000 style review of draft step 0 sleep 30",
        "30.000 facts review of draft start facts",
        "30.000 facts review of draft step 0 raise KeyError",
        "30.000 facts review of draft finally raised KeyError",
        "30.000 style review of draft finally returned",
    ],
    "testing.md#3": ["10 random lifecycles agreed with the model"],
    # The digest of a whole trace changes with any change to what is traced.
    "testing.md#4": [r"\d+ trace lines, twice the same: sha256 [0-9a-f]{64}"],
    "testing.md#5": ["0 violations"],
    "usage.md#0": [
        "researcher may spend 1500",
        "1000 tokens for notes on topic A",
        "researcher may spend 500",
        "writer cancelled: parent max_total_tokens 1500 2000",
        "refused: parent budget spent",
        re.escape("parent spent 2000 tokens, $ 0.006"),
        "runtime spent 2 requests",
    ],
    "tools.md#0": [
        re.escape("delegate_task ok {'run_id': '")
        + f"({RUN})"
        + re.escape("', 'subagent': 'investigator', 'status': 'running'}"),
        re.escape("wait_subagent ok {'run_id': '")
        + r"\1"
        + re.escape("', 'subagent': 'investigator', 'status': 'running'}"),
        re.escape("delegate_task error {'error': {'type': 'run_failed', 'message': \"run ")
        + f"({RUN})"
        + re.escape(" (subagent 'checker') failed: RuntimeError: flaky network; ")
        + ".*"
        + re.escape("'error_type': 'RuntimeError', 'error_message': 'flaky network'}}"),
        re.escape("delegate_task ok {'run_id': '")
        + RUN
        + re.escape(
            "', 'subagent': 'checker', 'task_summary': 'is it fixed?', "
            "'final_result': {'verdict': 'pass'}}"
        ),
        re.escape("wait_subagent ok {'run_id': '")
        + r"\1"
        + re.escape(
            "', 'subagent': 'investigator', 'task_summary': 'the bug', "
            "'final_result': {'finding': \"looked into 'the bug'\"}}"
        ),
    ],
}


def scripts() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        for index, code in enumerate(BLOCK.findall(page.read_text())):
            found.append((f"{page.name}#{index}", code))
    return found


def test_the_docs_have_scripts() -> None:
    names = {name.split("#")[0] for name, _ in scripts()}
    assert {"README.md", "tools.md"} <= names


@pytest.mark.parametrize(("name", "code"), scripts(), ids=[name for name, _ in scripts()])
def test_doc_script_runs(
    name: str, code: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The scripts run on virtual time: their sleeps take no real time.
    real_run = trio.run

    def virtual_run(*args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("clock", trio.testing.MockClock(autojump_threshold=0))
        return real_run(*args, **kwargs)

    monkeypatch.setattr(trio, "run", virtual_run)
    exec(compile(code, name, "exec"), {"__name__": "__main__"})
    printed = capsys.readouterr().out
    assert name in EXPECTED, f"say in EXPECTED what {name} prints:\n{printed}"
    # One pattern over the whole output: a group a line captures (a run id)
    # is the same where a later line refers back to it.
    pattern = "\n".join(EXPECTED[name]) + "\n"
    assert re.fullmatch(pattern, printed), printed


def test_every_expectation_belongs_to_a_script() -> None:
    assert set(EXPECTED) == {name for name, _ in scripts()}
