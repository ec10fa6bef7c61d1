"""Progress from an agent CLI's streamed events, reported as they come.

Claude Code (``-p --output-format stream-json --verbose``) and Codex (``exec
--json``) write one JSON event a line while they work. Each step the parent
may want to see becomes one ``ctx.progress`` report, whose ``progress`` is
the number of steps so far (there is no total: nobody knows it):

* Claude Code: each block of an ``assistant`` event: a tool call
  (``"tool call: Bash"``) or text (the text itself).
* Codex: each completed item: a command (``"ran: ls -la"``), an MCP tool
  call (``"tool call: server/tool"``), a web search, a file change, or a
  message (its text); and each completed turn (``"turn 2 completed"``).

An event is data from elsewhere: a line that is not a JSON object, or a
field that is not what it should be, is no step. Lines longer than
``LINE_BYTES`` are not read for progress (a tool's whole output is no
step); the result and usage are read from the whole output afterwards, as
ever.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final, final

from .._core import ChildContext
from .._json import parse

__all__ = ["Steps"]

#: How much of a command or query a step's message quotes.
_QUOTE_CHARS: Final = 200


@final
class Steps:
    """Reads a CLI's stdout line by line and reports each step as progress.

    Args:
        ctx: the run to report to.
        kind: ``"claude"`` or ``"codex"``.
    """

    def __init__(self, ctx: ChildContext, kind: str) -> None:
        self._ctx = ctx
        self._steps = _claude_steps if kind == "claude" else _codex_steps
        self._count = 0
        self._turns = 0

    def line(self, raw: bytes) -> None:
        """One line of stdout, as it arrived."""
        if not raw.startswith(b"{"):
            return  # not an event: cheaper to tell before decoding
        try:
            event = parse(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return
        if isinstance(event, dict):
            self.event(event)

    def event(self, event: dict[str, Any]) -> None:
        """One event, as the CLI writes it (parsed); each step in it is reported."""
        for message in self._steps(self, event):
            self._count += 1
            self._ctx.progress(message, progress=self._count)

    def turn(self) -> int:
        """Count one more completed turn; its number."""
        self._turns += 1
        return self._turns


def _text(value: Any) -> str | None:
    """*value* when it is text with something in it (quoted as it is)."""
    return value if isinstance(value, str) and value.strip() else None


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _QUOTE_CHARS else text[: _QUOTE_CHARS - 1] + "…"


def _claude_steps(steps: Steps, event: dict[str, Any]) -> Iterator[str]:
    if event.get("type") != "assistant":
        return
    message = event.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return
    for block in content:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "tool_use" and (name := _text(block.get("name"))):
            yield f"tool call: {_cut(name)}"
        elif kind == "text" and (words := _text(block.get("text"))):
            yield words


def _codex_steps(steps: Steps, event: dict[str, Any]) -> Iterator[str]:
    kind = event.get("type")
    if kind == "turn.completed":
        yield f"turn {steps.turn()} completed"
        return
    item = event.get("item")
    if kind != "item.completed" or not isinstance(item, dict):
        return
    what = item.get("type")
    if what == "agent_message" and (words := _text(item.get("text"))):
        yield words
    elif what == "command_execution" and (command := _text(item.get("command"))):
        yield f"ran: {_cut(command)}"
    elif what == "mcp_tool_call":
        server, tool = _text(item.get("server")), _text(item.get("tool"))
        if server and tool:
            yield f"tool call: {_cut(server)}/{_cut(tool)}"
    elif what == "web_search" and (query := _text(item.get("query"))):
        yield f"web search: {_cut(query)}"
    elif what == "file_change":
        changes = item.get("changes")
        paths = (
            [
                change["path"]
                for change in changes
                if isinstance(change, dict) and _text(change.get("path"))
            ]
            if isinstance(changes, list)
            else []
        )
        yield f"changed: {_cut(', '.join(paths))}" if paths else "changed files"
