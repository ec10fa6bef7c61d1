"""The documentation site: an API reference entry for every public name, one set of addresses.

``make test`` builds the site with ``mkdocs build --strict`` (broken links and
cross-references fail it); these checks cover what a strict build cannot see:
a public name with no entry at all, and a README or hint pointing at a page
the site does not have.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import tomllib
from pathlib import Path

import trio_delegate.adapters
from trio_delegate._urls import DOCS_URL, REPOSITORY_URL, docs_page

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
DIRECTIVE = re.compile(r"^::: ([\w.]+)\s*$", re.M)


def public_modules() -> list[str]:
    adapters = [
        f"trio_delegate.adapters.{info.name}"
        for info in pkgutil.iter_modules(trio_delegate.adapters.__path__)
        if not info.name.startswith("_")
    ]
    return [
        "trio_delegate",
        "trio_delegate.lowlevel",
        "trio_delegate.testing",
        "trio_delegate.mcp",
        "trio_delegate.adapters",
        *adapters,
    ]


def public_names() -> set[str]:
    names: set[str] = set()
    for module_name in public_modules():
        module = importlib.import_module(module_name)
        names.update(f"{module_name}.{name}" for name in module.__all__)
    return names


def reference_entries() -> set[str]:
    entries: set[str] = set()
    for page in (DOCS / "reference").glob("*.md"):
        entries.update(DIRECTIVE.findall(page.read_text()))
    return entries


def test_every_public_name_has_a_reference_entry() -> None:
    missing = public_names() - reference_entries()
    assert not missing, f"add these to docs/reference/*.md as '::: name': {sorted(missing)}"


def test_every_reference_entry_is_a_public_name_or_module() -> None:
    stale = reference_entries() - public_names() - set(public_modules())
    assert not stale, f"these entries name nothing public: {sorted(stale)}"


def test_the_adapters_are_found() -> None:
    # The discovery above is what makes a new adapter need its entries.
    assert {"trio_delegate.adapters.langchain", "trio_delegate.adapters.codex"} <= set(
        public_modules()
    )


def _site_pages() -> set[str]:
    return {page.stem for page in DOCS.glob("*.md")}


def test_readme_links_are_absolute_and_name_site_pages() -> None:
    readme = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)\s]+)\)", readme)
    assert targets
    relative = [target for target in targets if not target.startswith("https://")]
    assert not relative, f"a package index page breaks relative links: {relative}"
    pages = _site_pages()
    for target in targets:
        if target.startswith(DOCS_URL):
            page = target.removeprefix(DOCS_URL).split("#")[0].strip("/")
            assert page in pages, f"{target} names no page of docs/"
        elif target.startswith(REPOSITORY_URL):
            path = target.removeprefix(f"{REPOSITORY_URL}/blob/main/")
            assert (ROOT / path).exists(), f"{target} names no file of the repository"


def test_docs_page_names_a_page_of_the_site() -> None:
    assert docs_page("mcp") == f"{DOCS_URL}mcp/"
    assert docs_page("testing", "moving-time-by-hand") == f"{DOCS_URL}testing/#moving-time-by-hand"
    assert "mcp" in _site_pages()


def test_one_set_of_addresses() -> None:
    mkdocs = (ROOT / "mkdocs.yml").read_text()
    assert f"site_url: {DOCS_URL}\n" in mkdocs
    assert f"repo_url: {REPOSITORY_URL}\n" in mkdocs
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    urls = project["urls"]
    assert urls["Documentation"] == DOCS_URL
    assert urls["Source"] == REPOSITORY_URL
    assert urls["Changelog"] == docs_page("changelog")
