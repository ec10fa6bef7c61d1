"""The core stays in small pieces: one concept per module, no class that does everything.

Measured from the source with ``ast``: a class's span runs from its
``class`` line (or its first decorator) to its last line, docstrings and
comments included. ``Parent``, the public facade with the contract's
docstrings, may be larger than the rest.
"""

from __future__ import annotations

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parent.parent / "trio_delegate" / "_core"

#: The most lines a class of the core may span.
CLASS_LINES = 350
#: ... and the exceptions, by ``module:class``.
CLASS_LINES_FOR = {"_parent.py:Parent": 450}
#: The most lines a module of the core may have, and the exceptions.
MODULE_LINES = 400
MODULE_LINES_FOR = {"_parent.py": 700, "_run.py": 850, "_runtime.py": 500}


def class_spans(source: str) -> dict[str, int]:
    """The number of lines each class of *source* spans, by name."""
    spans: dict[str, int] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            assert node.end_lineno is not None
            spans[node.name] = node.end_lineno - first + 1
    return spans


def test_class_spans_are_measured_from_the_first_decorator_to_the_last_line() -> None:
    source = "import attrs\n\n@attrs.frozen\nclass A:\n    x: int\n\n    y: int\n\nB = 1\n"
    assert class_spans(source) == {"A": 5}


def test_no_class_of_the_core_is_too_large() -> None:
    too_large = {
        f"{path.name}:{name}": lines
        for path in sorted(CORE.glob("*.py"))
        for name, lines in class_spans(path.read_text(encoding="utf-8")).items()
        if lines > CLASS_LINES_FOR.get(f"{path.name}:{name}", CLASS_LINES)
    }
    assert too_large == {}


def test_no_module_of_the_core_is_too_large() -> None:
    too_large = {
        path.name: lines
        for path in sorted(CORE.glob("*.py"))
        if (lines := len(path.read_text(encoding="utf-8").splitlines()))
        > MODULE_LINES_FOR.get(path.name, MODULE_LINES)
    }
    assert too_large == {}
