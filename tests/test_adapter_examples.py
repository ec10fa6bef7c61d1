"""Every framework example in examples/ runs offline and says what happened.

They run in this process (the frameworks are imported once), as scripts.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

#: Per example: what its output must show.
SHOWS = {
    "pydantic_ai_parent.py": [
        "lead calls wait_subagent",
        "'status': 'running'",  # the timed wait ran out
        "'final_result': 'Sessions expire before the login form is sent.'",
        "'final_result': {'words': 3}",
    ],
    "langchain_parent.py": [
        '"cancel_requested":true',
        '[error] {"error":{"type":"run_cancelled"',
        '"final_result":"Reviewed: Skim PR 12. Looks good, one nit."',
    ],
    "openai_agents_parent.py": [
        '"status":"running"',
        '"final_result":"2.1 adds retries, fixes login timeouts and speeds up search."',
        '"task_summary":"Shorter, please.","final_result":"2.1: retries, login fix, faster',
    ],
    "dspy_parent.py": [
        "lead calls continue_subagent",
        "'final_result': 'Trio runs tasks in nurseries; every task has an owner.'",
        "lead answers: Every Trio task has an owner.",
    ],
}


def test_every_framework_example_is_run_here() -> None:
    assert sorted(SHOWS) == sorted(path.name for path in EXAMPLES.glob("*_parent.py"))


@pytest.mark.parametrize("name", sorted(SHOWS))
def test_the_example_runs_offline_and_says_what_happened(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    runpy.run_path(str(EXAMPLES / name), run_name="__main__")
    out = capsys.readouterr().out
    for expected in SHOWS[name]:
        assert expected in out, f"{name} did not show {expected!r}:\n{out}"
    assert out.rstrip().endswith("the fail-closed check passed"), out
