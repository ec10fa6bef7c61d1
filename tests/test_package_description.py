"""What a person who installs the package reads: its description, and the docs' install lines.

The wheel's description (what an index and ``pip show`` display) is
assembled from parts of README.md by the build backend. It must read right
outside the checkout: no ``make`` commands of the checkout, no relative link
and no path to a file the wheel does not hold; and no install line anywhere
in the docs may ask an index for a package that is not published there.
"""

from __future__ import annotations

import re
from pathlib import Path

from hatchling.metadata.core import ProjectMetadata
from hatchling.plugin.manager import PluginManager

from trio_delegate._urls import REPOSITORY_URL

ROOT = Path(__file__).resolve().parent.parent
PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *(ROOT / "examples").glob("*.py"),
]
LINK = re.compile(r"\]\(([^)\s]+)\)")
CODE_BLOCK = re.compile(r"^```[a-z]*\n(.*?)^```", re.M | re.S)
#: What a ``pip install`` command names, up to the end of its line or its code span.
INSTALL = re.compile(r"pip install ([^`#\n]*)")
#: The package by name (and extras) alone: pip asks the index for it.
BY_NAME = re.compile(r"trio[-_]delegate(\[[\w,-]+\])?")


def asks_the_index(arguments: str) -> bool:
    words = [word.strip("'\"") for word in arguments.split()]
    return any(
        BY_NAME.fullmatch(word) and words[index + 1 : index + 2] != ["@"]
        for index, word in enumerate(words)
    )


def description() -> str:
    metadata = ProjectMetadata(str(ROOT), PluginManager())
    assert metadata.core.readme_content_type == "text/markdown"
    return metadata.core.readme


def test_the_description_has_no_commands_of_the_checkout() -> None:
    text = description()
    for block in CODE_BLOCK.findall(text):
        commands = [line for line in block.splitlines() if line.startswith("make ")]
        assert not commands, f"the description shows checkout commands: {commands}"


def test_every_link_of_the_description_works_outside_the_checkout() -> None:
    text = description()
    links = LINK.findall(text)
    assert links, "the description links to the documentation"
    relative = [link for link in links if not link.startswith("https://")]
    assert not relative, f"relative links in the description: {relative}"
    # Files of the checkout it names are links into the repository.
    for path in re.findall(r"`(examples/[\w./-]+)`", text):
        assert f"({REPOSITORY_URL}/blob/main/{path})" in text, path


def test_the_description_says_how_to_install_it() -> None:
    text = description()
    assert f"pip install 'trio-delegate[mcp] @ git+{REPOSITORY_URL}'" in text
    assert "pydantic-ai-slim[anthropic]" in text


def test_no_install_line_asks_the_index_for_the_package() -> None:
    found = []
    for page in PAGES:
        for number, line in enumerate(page.read_text().splitlines(), 1):
            if any(asks_the_index(arguments) for arguments in INSTALL.findall(line)):
                found.append(f"{page.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "the package is not on an index yet:\n" + "\n".join(found)
