"""Every complete script in docs/ runs as written.

In the README and docs/, a ``python`` block right after an ``<!-- runnable -->`` line is a complete
script that needs nothing beyond this machine: it is executed here, so the
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
    assert capsys.readouterr().out  # every script shows what it did
