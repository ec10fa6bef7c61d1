"""Docstrings as the API reference shows them: roles as links, fields typed, no constructors.

A griffe extension, loaded by mkdocs.yml, that rewrites the package's
docstrings before mkdocstrings renders them:

* **Sphinx roles.** The docstrings name other objects as trio's do
  (``:class:`Parent```, ``:meth:`~Parent.wait```), which reads well in the
  source and in ``help()``, but Markdown would show the role as written. A
  role whose target the reference documents becomes a cross-reference
  (``[`Parent`][trio_delegate.Parent]``), which ``mkdocs build --strict``
  checks like every other link; any other target (a private helper, another
  library's object) becomes plain code, as Sphinx shows a target it cannot
  find. Targets resolve as Sphinx resolves them: in the scope of the object
  whose docstring names them, else as a full path. A leading ``~`` shows the
  last component; ``title <target>`` shows the title; functions and methods
  are shown with ``()``.
* **attrs fields.** Griffe sees no ``__init__`` for an attrs class, so the
  fields it documents under Args would have an empty Type column: each
  takes the annotation of the class attribute of its name.
* **Pages.** A page of the docs named by its path in the checkout
  (``docs/mcp.md``) becomes a link to that page on the site.
* **Handles.** A class made by ``NoPublicConstructor`` (``Runtime``,
  ``Parent``, ...) is got from the package, never constructed: its private
  ``__init__`` (registries, persisters) is not shown as its signature.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import griffe

from trio_delegate._urls import docs_page

ROOT = Path(__file__).resolve().parent.parent
#: The reference pages: every ``::: name`` directive is a documented object.
REFERENCE = ROOT / "docs" / "reference"
DIRECTIVE = re.compile(r"^::: ([\w.]+)\s*$", re.M)
ROLE = re.compile(
    r":(?:py:)?(?P<role>class|meth|func|attr|exc|data|mod|obj|const):"
    r"`(?P<body>[^`]+)`"
)
#: A page of the docs named by its path in the checkout (``docs/mcp.md``).
DOCS_PATH = re.compile(r"``docs/(?P<page>[\w-]+)\.md``|(?<![\w/`])docs/(?P<bare>[\w-]+)\.md")
TITLED = re.compile(r"(?P<title>.*?)\s*<(?P<target>[^<>]+)>\Z", re.S)
CALLABLE_ROLES = frozenset({"meth", "func"})


class ReferenceDocstrings(griffe.Extension):
    """Rewrites a loaded package's docstrings for the reference pages."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        """Rewrite every docstring of *pkg* once it is loaded whole."""
        documented = _documented(pkg)
        for obj in _objects(pkg):
            if obj.docstring is not None:
                value = ROLE.sub(
                    lambda match, scope=obj: _render(match, scope, documented),  # type: ignore[misc]
                    obj.docstring.value,
                )
                obj.docstring.value = DOCS_PATH.sub(_page_link, value)
                if obj.is_class and "__init__" not in obj.members:
                    _type_fields(obj)
            if obj.is_class and _handle(obj):
                # Its __init__ is the package's own (the metaclass refuses
                # callers): the reference shows no constructor.
                obj.members.pop("__init__", None)


def _handle(cls: griffe.Object) -> bool:
    """Whether *cls* is a handle that users get, never construct."""
    metaclass = cls.keywords.get("metaclass") if isinstance(cls, griffe.Class) else None
    return metaclass is not None and str(metaclass).endswith("NoPublicConstructor")


def _type_fields(cls: griffe.Object) -> None:
    """The fields an attrs class documents under Args, typed as it annotates them.

    Griffe sees no ``__init__`` for an attrs class, so it finds no type for
    its Args: the reference would show an empty Type column.
    """
    for section in cls.docstring.parsed if cls.docstring is not None else ():
        if section.kind is not griffe.DocstringSectionKind.parameters:
            continue
        for parameter in section.value:
            field = cls.members.get(parameter.name)
            if parameter.annotation is None and isinstance(field, griffe.Attribute):
                parameter.annotation = field.annotation


def _objects(root: griffe.Module) -> list[griffe.Object]:
    """Every object defined in *root*, its submodules and classes (no aliases)."""
    found: list[griffe.Object] = []
    stack: list[griffe.Object] = [root]
    while stack:
        obj = stack.pop()
        found.append(obj)
        stack.extend(member for member in obj.members.values() if isinstance(member, griffe.Object))
    return found


def _real(obj: griffe.Object | griffe.Alias) -> griffe.Object:
    """The object itself: an alias's final target (which may raise griffe's errors)."""
    if isinstance(obj, griffe.Alias):
        target = obj.final_target
        assert isinstance(target, griffe.Object)
        return target
    return obj


def _documented(pkg: griffe.Module) -> dict[str, str]:
    """Each documented object's real path → the path its reference entry has.

    A class's members are documented with it (under the class's path).
    """
    documented: dict[str, str] = {}
    for page in sorted(REFERENCE.glob("*.md")):
        for name in DIRECTIVE.findall(page.read_text()):
            if name != pkg.path and not name.startswith(pkg.path + "."):
                continue
            try:
                obj = pkg.modules_collection[name] if "." in name else pkg
            except KeyError:
                continue
            target = _real(obj)
            documented[target.path] = name
            if target.is_class:
                for member_name, member in target.all_members.items():
                    documented.setdefault(_real(member).path, f"{name}.{member_name}")
    return documented


def _page_link(match: re.Match[str]) -> str:
    page = match["page"] or match["bare"]
    return f"[the {page.replace('-', ' ')} page]({docs_page(page)})"


def _render(match: re.Match[str], scope: griffe.Object, documented: dict[str, str]) -> str:
    body = match["body"].strip()
    titled = TITLED.match(body)
    if titled:
        title, target = titled["title"], titled["target"].strip()
    else:
        target = body.removeprefix("~")
        title = target.rsplit(".", 1)[-1] if body.startswith("~") else target
        if match["role"] in CALLABLE_ROLES and not title.endswith(")"):
            title += "()"
    path = _resolve(target.removeprefix("~"), scope)
    entry = documented.get(path) if path is not None else None
    if entry is None:
        return f"`{title}`"
    return f"[`{title}`][{entry}]"


def _resolve(target: str, scope: griffe.Object) -> str | None:
    """The real path of the object *target* names from *scope*, or ``None``."""
    first, _, rest = target.partition(".")
    base: str | None
    try:
        base = scope.resolve(first)
    except (griffe.NameResolutionError, ValueError):
        base = target if target.startswith(scope.package.path + ".") else None
        rest = ""
    if base is None:
        return None
    try:
        obj = _real(scope.modules_collection[base])
        for part in rest.split(".") if rest else ():
            obj = _real(obj.all_members[part])
    except (KeyError, AssertionError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None
    return obj.path
