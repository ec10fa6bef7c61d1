"""The package's layers: the core imports no surface and no concrete store; the
rest of the package reaches the core through its face (``trio_delegate._core``),
never through a module inside it; the core holds no global state.

Read from the source with ``ast``, so that an import added anywhere in a
module (a function's lazy import included) is seen; for what the core may
import, imports a type checker alone follows (under ``if TYPE_CHECKING:``)
are left out.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "trio_delegate"

#: What the core (``trio_delegate._core``) must not import at run time: the
#: surfaces built on it, and the concrete stores behind the store protocol.
NOT_FROM_THE_CORE = (
    "trio_delegate._tools",
    "trio_delegate._otel",
    "trio_delegate._observe",
    "trio_delegate._cli",
    "trio_delegate._runners",
    "trio_delegate.mcp",
    "trio_delegate.adapters",
    "trio_delegate.testing",
    "trio_delegate._stores._memory",
    "trio_delegate._stores._sqlite",
    "trio_delegate._stores._postgres",
    "trio_delegate._stores._base",
    "trio_delegate._stores._codec",
    "opentelemetry",
)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _run_time_imports(
    path: Path, text: str | None = None, *, type_checking: bool = False
) -> Iterator[tuple[int, str]]:
    """(line, absolute module) of every import in *path* (or *text*, read as the
    source of *path*) outside ``if TYPE_CHECKING:`` (inside it too, with
    *type_checking*)."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(text if text is not None else path.read_text(encoding="utf-8"))

    def visit(node: ast.AST) -> Iterator[tuple[int, str]]:
        if isinstance(node, ast.If) and _is_type_checking(node.test) and not type_checking:
            for branch in node.orelse:
                yield from visit(branch)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base)
                source = f"{prefix}.{node.module}" if node.module else prefix
            else:
                source = node.module or ""
            yield node.lineno, source
            for alias in node.names:  # `from .. import _tools` imports a module too
                yield node.lineno, f"{source}.{alias.name}"
        for child in ast.iter_child_nodes(node):
            yield from visit(child)

    yield from visit(tree)


def _violations(
    paths: list[Path], forbidden: tuple[str, ...], text: str | None = None
) -> list[str]:
    """One line per import statement that brings in a *forbidden* module."""
    return _matching(paths, forbidden, text)


def _matching(
    paths: list[Path],
    forbidden: tuple[str, ...],
    text: str | None = None,
    *,
    type_checking: bool = False,
) -> list[str]:
    found: dict[str, None] = {}
    for path in paths:
        for line, source in _run_time_imports(path, text, type_checking=type_checking):
            for name in forbidden:
                if source == name or source.startswith(name + "."):
                    found[f"{path.relative_to(PACKAGE.parent)}:{line} imports {name}"] = None
    return list(found)


def test_the_core_imports_no_surface_and_no_concrete_store() -> None:
    paths = sorted((PACKAGE / "_core").glob("*.py"))
    assert paths
    assert _violations(paths, NOT_FROM_THE_CORE) == []


def test_the_package_mcp_and_adapters_import_nothing_from_the_cli() -> None:
    paths = [
        PACKAGE / "__init__.py",
        *sorted((PACKAGE / "mcp").rglob("*.py")),
        *sorted((PACKAGE / "adapters").rglob("*.py")),
    ]
    assert _violations(paths, ("trio_delegate._cli",)) == []


@pytest.mark.parametrize(
    ("source", "forbidden"),
    [
        ("from .._tools import DelegationTools\n", "trio_delegate._tools"),
        ("def f():\n    from .._otel import open_telemetry\n", "trio_delegate._otel"),
        ("from .._stores import _memory\n", "trio_delegate._stores._memory"),
        ("import opentelemetry.trace\n", "opentelemetry"),
        ("from ..mcp._server import build_server\n", "trio_delegate.mcp"),
    ],
)
def test_the_rule_sees_each_kind_of_import(source: str, forbidden: str) -> None:
    probe = PACKAGE / "_core" / "_probe.py"  # read as a module of the core
    line = source.count("\n")
    assert _violations([probe], NOT_FROM_THE_CORE, source) == [
        f"trio_delegate/_core/_probe.py:{line} imports {forbidden}"
    ]


def test_imports_for_the_type_checker_only_are_left_out() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from .._tools import DelegationTools\n"
        "else:\n"
        "    from .._otel import Telemetry\n"
    )
    probe = PACKAGE / "_core" / "_probe.py"
    assert _violations([probe], NOT_FROM_THE_CORE, source) == [
        "trio_delegate/_core/_probe.py:5 imports trio_delegate._otel"
    ]


# -- the core's face -----------------------------------------------------------------

CORE = "trio_delegate._core"


def _core_module_imports(paths: list[Path], text: str | None = None) -> list[str]:
    """One line per import, type checkers' included, of a module inside the core."""
    found: dict[str, None] = {}
    for path in paths:
        for line, source in _run_time_imports(path, text, type_checking=True):
            if source.startswith(CORE + "._"):
                module = source.split(".")[2]
                found[f"{path.relative_to(PACKAGE.parent)}:{line} imports {CORE}.{module}"] = None
    return list(found)


def test_nothing_outside_the_core_imports_a_module_inside_it() -> None:
    paths = [
        path
        for path in sorted(PACKAGE.rglob("*.py"))
        if "_core" not in path.relative_to(PACKAGE).parts
    ]
    assert len(paths) > 50
    assert _core_module_imports(paths) == []


def test_mcp_the_cli_and_the_adapters_reach_the_core_through_the_public_api() -> None:
    # Through ``trio_delegate`` and ``trio_delegate.lowlevel``, as a user's surface would.
    paths = [
        *sorted((PACKAGE / "mcp").rglob("*.py")),
        *sorted((PACKAGE / "_cli").rglob("*.py")),
        *sorted((PACKAGE / "adapters").rglob("*.py")),
    ]
    assert _matching(paths, (CORE,), type_checking=True) == []


@pytest.mark.parametrize(
    ("source", "module"),
    [
        ("from ._core._run import Run\n", "_run"),
        ("from ._core import _parent\n", "_parent"),
        ("import trio_delegate._core._runtime\n", "_runtime"),
        ("def f():\n    from trio_delegate._core._events import RunEvents\n", "_events"),
        ("if TYPE_CHECKING:\n    from ._core._context import ChildContext\n", "_context"),
    ],
)
def test_the_face_rule_sees_each_kind_of_import(source: str, module: str) -> None:
    probe = PACKAGE / "_probe.py"  # read as a module of the package, outside the core
    line = source.count("\n")
    assert _core_module_imports([probe], source) == [
        f"trio_delegate/_probe.py:{line} imports {CORE}.{module}"
    ]


def test_the_face_rule_lets_the_face_through() -> None:
    probe = PACKAGE / "mcp" / "_probe.py"
    source = "from .._core import Parent, abandon\nfrom .. import _core\n"
    assert _core_module_imports([probe], source) == []


# -- no global state in the core (contract: no global state in the runtime core) ------


def _global_statements(paths: list[Path], text: str | None = None) -> list[str]:
    found = []
    for path in paths:
        tree = ast.parse(text if text is not None else path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Global):
                names = ", ".join(node.names)
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} global {names}")
    return found


def test_the_core_has_no_global_statement() -> None:
    paths = sorted((PACKAGE / "_core").glob("*.py"))
    assert paths
    assert _global_statements(paths) == []


def test_the_global_rule_sees_a_global_statement() -> None:
    probe = PACKAGE / "_core" / "_probe.py"
    source = (
        "_factory = None\n\ndef provide(factory):\n    global _factory\n    _factory = factory\n"
    )
    assert _global_statements([probe], source) == [
        "trio_delegate/_core/_probe.py:4 global _factory"
    ]
