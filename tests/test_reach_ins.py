"""No module reads another module's private attribute (read from the source with ``ast``).

An access ``x._name`` (``x`` neither ``self`` nor ``cls``) is allowed only
where ``_name`` is a member of a class of the same module: objects of one
module talk to those of another through methods and public fields, never
through private ones. (Read without types, a private name that classes of
two modules both define is taken to be the accessing module's own.)
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "trio_delegate"

#: Private names any module may use: the hidden constructor of the handles
#: (``NoPublicConstructor``), argparse's sub-parser type, which its own API
#: hands out with no public name, and ``os._exit``, the standard library's
#: documented way to end a process at once.
ALLOWED = {"_create", "_SubParsersAction", "_exit"}


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _members(tree: ast.Module) -> set[str]:
    """The private member names the classes of a module define."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        for item in ast.walk(node):
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                names.add(item.name)
            elif isinstance(item, ast.Attribute) and isinstance(item.value, ast.Name):
                if item.value.id in ("self", "cls") and isinstance(item.ctx, ast.Store):
                    names.add(item.attr)
            elif isinstance(item, ast.AnnAssign | ast.Assign):
                targets = item.targets if isinstance(item, ast.Assign) else [item.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        names.add(target.id)
                if isinstance(item, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "__slots__" for t in item.targets
                ):
                    for constant in ast.walk(item.value):
                        if isinstance(constant, ast.Constant) and isinstance(constant.value, str):
                            names.add(constant.value)
    return {name for name in names if _is_private(name)}


def reach_ins(sources: dict[str, str]) -> list[str]:
    """``module:line reads x._name`` for each private access across modules in *sources*."""
    trees = {module: ast.parse(text) for module, text in sources.items()}
    defined_in: dict[str, set[str]] = defaultdict(set)
    for module, tree in trees.items():
        for name in _members(tree):
            defined_in[name].add(module)
    found = []
    for module, tree in trees.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or not _is_private(node.attr):
                continue
            if node.attr in ALLOWED:
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            if module in defined_in.get(node.attr, ()):
                continue  # a private member of this module's own classes
            found.append(f"{module}:{node.lineno} reads {ast.unparse(node)}")
    return found


def test_no_module_reads_another_modules_private_attributes() -> None:
    sources = {
        str(path.relative_to(PACKAGE.parent)): path.read_text(encoding="utf-8")
        for path in sorted(PACKAGE.rglob("*.py"))
    }
    assert reach_ins(sources) == []


def test_the_rule_flags_a_private_field_read_from_another_module() -> None:
    sources = {
        "a.py": "class A:\n    __slots__ = ('_runs',)\n",
        "b.py": "def f(a):\n    return a._runs\n",
        "c.py": "class C:\n    def g(self, other):\n        return other._ids, self._runs\n"
        "    def __init__(self):\n        self._runs = {}\n",
    }
    assert reach_ins(sources) == ["b.py:2 reads a._runs", "c.py:3 reads other._ids"]


def test_the_rule_allows_a_modules_own_private_members() -> None:
    sources = {
        "a.py": "class A:\n    __slots__ = ('_live',)\n\nclass Host:\n"
        "    def f(self, parent):\n        return parent._live, parent._create()\n",
    }
    assert reach_ins(sources) == []
