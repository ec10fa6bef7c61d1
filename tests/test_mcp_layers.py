"""``trio_delegate.mcp`` is layered one way: each module imports only those below it.

Read from the source with ``ast``, every import counted (a function's lazy
import and one for the type checker alike): a module that imported one
above it would close a circle, or make one likely.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

MCP = Path(__file__).resolve().parent.parent / "trio_delegate" / "mcp"
PACKAGE = "trio_delegate.mcp"

#: The modules of ``trio_delegate.mcp``, lowest first: the lines of the wire,
#: a tool's answer as an MCP result, what a connection leaves behind, what a
#: running child tells (progress, questions), the Tasks extension, the
#: server, how a serving process ends, serving over stdio, and the package's
#: face.
LAYERS = (
    "_wire",
    "_results",
    "_connection_end",
    "_talk",
    "_tasks",
    "_server",
    "_exit",
    "_serve",
    "__init__",
)


def imported_modules(source: str, module: str) -> set[str]:
    """The modules of ``trio_delegate.mcp`` that *source* (of *module*) imports, by name."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                # In the package's modules (and its __init__), level 1 is the package.
                base = "trio_delegate" if node.level == 2 else PACKAGE
                if node.level > 2:
                    continue
                source_module = f"{base}.{node.module}" if node.module else base
            else:
                source_module = node.module or ""
            if source_module == PACKAGE:
                # `from . import _tasks` imports a module; `from . import
                # build_server`, a name of the package's face.
                names = [
                    f"{PACKAGE}.{a.name}" if (MCP / f"{a.name}.py").is_file() else PACKAGE
                    for a in node.names
                ]
            else:
                names = [source_module]
        else:
            continue
        for name in names:
            if name == PACKAGE:
                found.add("__init__")
            elif name.startswith(PACKAGE + "."):
                found.add(name.removeprefix(PACKAGE + ".").split(".")[0])
    found.discard(module)
    return found


def import_graph() -> dict[str, set[str]]:
    return {
        path.stem: imported_modules(path.read_text(encoding="utf-8"), path.stem)
        for path in sorted(MCP.glob("*.py"))
    }


def circle(graph: dict[str, set[str]]) -> list[str] | None:
    """An import circle of *graph*, as the modules along it; ``None`` when it has none."""
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str] | None:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in done:
            return None
        for other in sorted(graph.get(module, ())):
            found = visit(other, [*path, module])
            if found is not None:
                return found
        done.add(module)
        return None

    for module in sorted(graph):
        found = visit(module, [])
        if found is not None:
            return found
    return None


def test_every_module_of_the_package_has_its_layer() -> None:
    assert set(import_graph()) == set(LAYERS)


def test_there_is_no_import_circle_in_the_package() -> None:
    assert circle(import_graph()) is None


@pytest.mark.parametrize("module", LAYERS)
def test_each_module_imports_only_those_below_it(module: str) -> None:
    below = set(LAYERS[: LAYERS.index(module)])
    assert import_graph()[module] <= below, f"{module} imports from above it"


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("from ._server import build_server", {"_server"}),
        ("from . import _tasks", {"_tasks"}),
        ("import trio_delegate.mcp._wire", {"_wire"}),
        ("from trio_delegate.mcp._serve import serve_stdio", {"_serve"}),
        ("from trio_delegate.mcp import build_server", {"__init__"}),
        ("from . import build_server", {"__init__"}),
        ("def f():\n    from ._serve import serve_stdio", {"_serve"}),
        ("if TYPE_CHECKING:\n    from ._server import logger", {"_server"}),
        ("from .. import Parent\nfrom .._tools import run_payload", set()),
        ("from mcp.server import Server", set()),
    ],
)
def test_the_rule_sees_each_kind_of_import(source: str, found: set[str]) -> None:
    assert imported_modules(source, "_module") == found


def test_a_circle_is_found() -> None:
    graph = {"_wire": set(), "_tasks": {"_server"}, "_server": {"_wire", "_tasks"}}
    assert circle(graph) == ["_server", "_tasks", "_server"]
    assert circle({"_wire": set(), "_tasks": {"_wire"}}) is None
