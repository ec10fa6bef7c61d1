"""``trio-delegate init``: a commented starter ``subagents.toml`` and its runner module.

A user who installed the wheel has no checkout and no ``examples/``: ``init``
writes the configuration that ``trio-delegate serve`` reads by default
(``./subagents.toml``) and serves it as it is (two Python subagents from a
small module beside it, and commented command, model and agent-CLI entries
to copy), then says what to run next. The model entry is commented out
because it needs a provider SDK a plain install lacks (``serve`` checks
that at start-up); its key is read only when a run calls the model.
It never overwrites a file.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Final

from .._checks import terminal_safe
from .._urls import docs_page

__all__ = ["CONFIG_NAME", "EXIT_REFUSED", "RUNNERS_NAME", "run_init", "starter_files"]

#: The configuration file ``init`` writes.
CONFIG_NAME: Final = "subagents.toml"
#: The Python module with the starter runners (``python = "starter_agents:..."``).
RUNNERS_NAME: Final = "starter_agents.py"
#: Exit code when ``init`` refuses (argparse's usage code, as ``mcp-config``).
EXIT_REFUSED: Final = 2

_CONFIG: Final = f"""\
# trio-delegate serve      (reads ./{CONFIG_NAME}; else --config FILE)
#
# The subagents an MCP client (Claude Code, Codex, Claude Desktop, Cursor,
# VS Code ...) can delegate to. Every key is described at
# {docs_page("mcp", "the-configuration-file")}
# Relative paths count from this file's directory, which is also the
# default working directory of command subagents.

[runtime]                          # any trio_delegate.Config field
subagent_timeout_seconds = 120     # each run's deadline, unless a subagent sets its own
max_concurrent_runs = 4            # per connection; more runs wait as "pending"
# store = "runs.db"                # record every run (trio-delegate runs list --db runs.db)
# runtime_budget = {{ max_cost_usd = 20 }}   # the most all runs may spend together

[server]
foreground_limit_seconds = 45      # a longer foreground call answers with its run id

# A Python subagent: an async runner (ctx) -> result, from {RUNNERS_NAME} beside this file.
[[subagents]]
name = "outliner"
description = "Turns a text into a bullet outline, one bullet per sentence."
python = "starter_agents:outline"

# A subagent whose result has a shape (its final_schema, below).
[[subagents]]
name = "counter"
description = "Counts the words and sentences of a text. Returns {{words, sentences}}."
python = "starter_agents:count"
timeout_seconds = 10
# Structured results: with a final_schema (JSON Schema), the result is checked against it.
[subagents.final_schema]
type = "object"
required = ["words", "sentences"]
properties.words.type = "integer"
properties.sentences.type = "integer"

# A command subagent: the task on stdin, the result on stdout (no shell).
# [[subagents]]
# name = "summarizer"
# description = "Summarizes a document: give it the whole text."
# command = ["python3", "summarize.py"]
# timeout_seconds = 30
# budget = {{ max_total_tokens = 100000, max_cost_usd = 2.5 }}   # the most each run may spend

# A model subagent: a model with instructions (and tools, children), run by
# trio_delegate itself. It needs the anthropic extra: pip install "trio-delegate[anthropic]".
# The key is read from api_key_env each time a run calls the model, so serve
# starts without it: export it where serve runs (an MCP client passes its own
# environment on, or only the variables its server entry names).
# [[subagents]]
# name = "writer"
# description = "Drafts a short, plain text from the notes it is given."
# kind = "model"
# model = "anthropic:claude-sonnet-4-5"
# instructions = "Write a short, plain draft from the notes you are given."
# api_key_env = "ANTHROPIC_API_KEY"
# max_turns = 8

# An agent CLI as a subagent, run headless with its own deadline.
# [[subagents]]
# name = "coder"
# description = "A Codex agent for code changes."
# kind = "codex"                   # or "claude"
# timeout_seconds = 900
"""

_RUNNERS: Final = '''\
"""Starter subagents for subagents.toml: each is an async runner (ctx) -> result.

A runner gets the run's trio_delegate.ChildContext (ctx.task is the task the
model sent) and returns a JSON-ready result: None, a bool, int, float or str,
or lists and string-keyed dicts of those. Replace these with your own: call a
model, run tools, delegate further through ctx.parent (see `children` in the
configuration docs).
"""

from __future__ import annotations

import re

import trio

import trio_delegate as td

_SENTENCE_END = re.compile(r"(?<=[.!?])\\s+")


async def outline(ctx: td.ChildContext) -> str:
    """One bullet per sentence of the task."""
    await trio.lowlevel.checkpoint()
    sentences = [s for s in _SENTENCE_END.split(ctx.task.strip()) if s]
    return "\\n".join(f"- {sentence}" for sentence in sentences)


async def count(ctx: td.ChildContext) -> dict[str, int]:
    """The task's words and sentences."""
    await trio.lowlevel.checkpoint()
    text = ctx.task.strip()
    return {
        "words": len(text.split()),
        "sentences": len([s for s in _SENTENCE_END.split(text) if s]),
    }
'''


def _shown(path: object) -> str:
    """*path* as the messages show it: a folder's name may hold escape sequences."""
    return terminal_safe(str(path))


def starter_files() -> dict[str, str]:
    """The files ``init`` writes: name → content."""
    return {CONFIG_NAME: _CONFIG, RUNNERS_NAME: _RUNNERS}


def _next_steps(folder: Path) -> str:
    here = "" if folder == Path.cwd() else f"cd {_shown(folder)}\n  "
    return (
        f"next:\n"
        f"  {here}trio-delegate serve     "
        f"# an MCP server on stdio (Ctrl-C stops it)\n"
        f"  trio-delegate mcp-config claude --config {CONFIG_NAME}   "
        f"# the client's configuration (also: claude-desktop, cursor, vscode, codex)\n"
        f"  docs: {docs_page('quickstart')}\n"
    )


def run_init(directory: str | os.PathLike[str] = ".") -> int:
    """Write the starter files into *directory*; return the exit code.

    Args:
        directory: where to write them (default: the current directory).

    Returns:
        0 with what was written and what to run next on stdout; 2, writing
        nothing, when a file of the same name is already there (or the
        folder cannot be written), with the fix on stderr.
    """
    folder = Path(directory)
    files = starter_files()
    existing = [name for name in files if (folder / name).exists()]
    if existing:
        print(
            f"trio-delegate init: {', '.join(existing)} already exist"
            f"{'s' if len(existing) == 1 else ''} in {_shown(folder.absolute())}; "
            "nothing was written\n"
            f"  fix: run it in an empty folder, or move {' and '.join(existing)} away first",
            file=sys.stderr,
        )
        return EXIT_REFUSED
    written: list[Path] = []
    try:
        for name, content in files.items():
            path = folder / name
            # "x": refuse a file created since the check above, never overwrite it.
            with path.open("x", encoding="utf-8") as stream:
                written.append(path)
                stream.write(content)
    except OSError as exc:
        for path in written:
            path.unlink(missing_ok=True)
        print(
            f"trio-delegate init: cannot write {_shown(exc.filename or folder)}: "
            f"{exc.strerror}; "
            f"nothing was written\n  fix: run it in a folder you can write to",
            file=sys.stderr,
        )
        return EXIT_REFUSED
    for path in written:
        print(f"wrote {_shown(path)}")
    print(_next_steps(folder.absolute()), end="")
    return 0
