"""The capability matrix is the tested truth.

* every ✓ cell is backed by a test named ``test_cap_<framework>_<capability>``
  (or that name followed by ``_<detail>``) somewhere under tests/, and every
  such test backs a ✓ cell;
* every ✗ cell says why;
* the table in docs/adapters.md is the one rendered from the data.
"""

from __future__ import annotations

import ast
import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trio_delegate.adapters import CAPABILITIES, CAPABILITY_NAMES, Capability
from trio_delegate.adapters._capabilities import FRAMEWORK_TITLES, render_markdown_table

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "adapters.md"
BEGIN = "<!-- capability-matrix:begin (python -m trio_delegate.adapters) -->"
END = "<!-- capability-matrix:end -->"


@functools.cache
def capability_tests() -> frozenset[str]:
    """The names of every ``test_cap_*`` function under tests/, found by parsing."""
    names = set()
    for path in (ROOT / "tests").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            name = node.name if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else ""
            if name.startswith("test_cap_"):
                names.add(name)
    return frozenset(names)


def backs(name: str, framework: str, capability: str) -> bool:
    # "test_cap_x_cancel" must not be backed by "test_cap_x_cancellation_...".
    cell = f"test_cap_{framework}_{capability}"
    return name == cell or name.startswith(cell + "_")


def cells(supported: bool) -> list[tuple[str, str]]:
    return [
        (framework, capability)
        for framework, row in CAPABILITIES.items()
        for capability, cell in row.items()
        if cell.supported is supported
    ]


def test_every_supported_cell_has_its_test() -> None:
    names = capability_tests()
    missing = [
        f"test_cap_{framework}_{capability}"
        for framework, capability in cells(True)
        if not any(backs(name, framework, capability) for name in names)
    ]
    assert missing == [], f"✓ cells without a test: {missing}"


def test_every_capability_test_backs_a_supported_cell() -> None:
    stray = sorted(
        name
        for name in capability_tests()
        if not any(backs(name, framework, capability) for framework, capability in cells(True))
    )
    assert stray == [], f"tests named for no ✓ cell (a ✗ that should be ✓, or a typo): {stray}"


def test_every_unsupported_cell_says_why() -> None:
    silent = [
        f"{framework}.{capability}"
        for framework, capability in cells(False)
        if not CAPABILITIES[framework][capability].note.strip()
    ]
    assert silent == []


def test_every_row_has_every_capability_in_order() -> None:
    assert set(CAPABILITIES) <= set(FRAMEWORK_TITLES)
    for framework, row in CAPABILITIES.items():
        assert tuple(row) == CAPABILITY_NAMES, framework
        assert all(isinstance(cell, Capability) for cell in row.values())


def test_the_docs_show_the_table_rendered_from_the_data() -> None:
    text = DOC.read_text()
    assert text.count(BEGIN) == 1
    assert text.count(END) == 1
    shown = text.split(BEGIN)[1].split(END)[0].strip("\n") + "\n"
    assert shown == render_markdown_table(), (
        "docs/adapters.md is out of date: replace the table between the markers with the "
        "output of `python -m trio_delegate.adapters`"
    )


def test_the_table_is_printed_for_the_docs_and_no_framework_is_imported() -> None:
    code = (
        "import runpy, sys\n"
        "runpy.run_module('trio_delegate.adapters', run_name='__main__')\n"
        "loaded = [m for m in ('pydantic_ai', 'langchain_core', 'agents', 'dspy', "
        "'trio_asyncio', 'claude_agent_sdk') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    env = {**os.environ, "PYTHONWARNINGS": "error"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == render_markdown_table()


def test_a_note_on_a_cross_is_rendered_and_numbered_once() -> None:
    row = {name: Capability(True) for name in CAPABILITY_NAMES}
    row["status"] = Capability(False, "why not")
    row["cancel"] = Capability(False, "why not")
    table = render_markdown_table({"demo": row})
    assert "| demo | ✓ | ✓ | ✗ [1] | ✓ | ✗ [1] |" in table
    assert table.endswith("\n1. why not\n")


@pytest.mark.parametrize("name", ["test_cap_dspy_cancel", "test_cap_dspy_cancel_by_request"])
def test_a_test_name_backs_its_own_cell_only(name: str) -> None:
    assert backs(name, "dspy", "cancel")
    assert not backs("test_cap_dspy_cancellation_reaches_child", "dspy", "cancel")
