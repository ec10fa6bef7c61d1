"""The API reference as a reader sees it: links, not roles; typed fields; no private constructors.

The site is built once for this module (``mkdocs build --strict``, about
10 s) into a temporary folder; each test reads the built reference pages.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: A role as Markdown shows it once its backticks became <code>: ":class:Parent".
ROLE = re.compile(r":(?:py:)?(?:class|meth|func|attr|exc|data|mod|obj|const):(?=\S)")
ROW = re.compile(
    r'<tr class="doc-section-item">\s*<td>\s*<code>(\w+)</code>\s*</td>\s*<td>(.*?)</td>', re.S
)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--quiet", "--strict", "-d", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return out


def pages(site: Path) -> dict[str, str]:
    return {
        path.relative_to(site).as_posix(): path.read_text()
        for path in sorted(site.rglob("*.html"))
        if "reference" in path.parts or path.parent == site
    }


def text_of(html: str) -> str:
    return re.sub(r"<[^>]+>", "", html)


def test_no_built_page_shows_a_sphinx_role(site: Path) -> None:
    shown = {
        name: ROLE.findall(text_of(html))
        for name, html in pages(site).items()
        if ROLE.search(text_of(html))
    }
    assert not shown, f"raw roles on {sorted(shown)}"


def docstring_of(html: str, identifier: str) -> str:
    """The HTML of *identifier*'s own docstring, up to its first member."""
    start = html.index(f'id="{identifier}"')
    body = html.index('<div class="doc doc-contents', start)
    return html[body : html.index('<div class="doc doc-children">', body)]


def test_a_role_naming_a_documented_object_is_a_link_to_it(site: Path) -> None:
    reference = site / "reference"
    # Parent's docstring says "Get one from :meth:`Runtime.open_parent`".
    parent = docstring_of(
        (reference / "trio_delegate" / "index.html").read_text(), "trio_delegate.Parent"
    )
    assert re.search(
        r'<a [^>]*href="#trio_delegate\.Runtime\.open_parent"[^>]*>'
        r"<code>Runtime\.open_parent\(\)</code></a>",
        parent,
    ), parent
    # The testing kit's module docstring names :class:`ScriptedRunner`.
    testing = docstring_of(
        (reference / "testing" / "index.html").read_text(), "trio_delegate.testing"
    )
    assert re.search(r'<a [^>]*href="#trio_delegate\.testing\.ScriptedRunner"[^>]*>', testing)


def test_handles_show_no_private_constructor(site: Path) -> None:
    html = (site / "reference" / "trio_delegate" / "index.html").read_text()
    for handle in ("Runtime", "Parent", "DelegationTools"):
        start = html.index(f'id="trio_delegate.{handle}"')
        heading = text_of(html[start : html.index("</h2>", start) + 2000])
        assert f"{handle}(" not in heading, heading[:300]
    assert "Persister" not in text_of(html)
    assert "Registry" not in text_of(html)


def test_every_documented_field_has_a_type(site: Path) -> None:
    for page in ("trio_delegate", "lowlevel", "testing", "mcp", "adapters"):
        html = (site / "reference" / page / "index.html").read_text()
        rows = ROW.findall(html)
        assert rows
        untyped = [name for name, cell in rows if not text_of(cell).strip()]
        assert not untyped, f"{page}: no type for {untyped}"


def test_the_reference_names_pages_by_link_not_by_path(site: Path) -> None:
    for name, html in pages(site).items():
        if name.startswith("reference/"):
            assert not re.search(r"docs/[\w-]+\.md", text_of(html)), name
