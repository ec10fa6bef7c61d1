"""The project's canonical addresses, for hints that point a user at the docs.

A user who installed the wheel has no ``docs/`` folder: every hint names a
page of the documentation site instead. ``mkdocs.yml``, ``README.md`` and the
Project-URLs in ``pyproject.toml`` use the same addresses
(``tests/test_docs_site.py`` checks them).
"""

from __future__ import annotations

from typing import Final

__all__ = ["DOCS_URL", "REPOSITORY_URL", "docs_page"]

#: The documentation site (built from ``docs/`` by ``make docs``).
DOCS_URL: Final = "https://trio-delegate.github.io/trio-delegate/"

#: The source repository.
REPOSITORY_URL: Final = "https://github.com/trio-delegate/trio-delegate"


def docs_page(page: str, anchor: str = "") -> str:
    """The site address of ``docs/<page>.md`` (and of one of its headings).

    Args:
        page: the page's file name in ``docs/`` without ``.md``, such as ``"mcp"``.
        anchor: a heading's anchor on that page, without ``#``; empty for the page.
    """
    return f"{DOCS_URL}{page}/" + (f"#{anchor}" if anchor else "")
