"""The capability matrix: what each framework adapter can do, as data.

``docs/adapters.md`` shows :func:`render_markdown_table`'s output between
marker comments; a test checks that the two agree, and another that every
✓ is backed by a test named ``test_cap_<framework>_<capability>``.
Print the table with ``python -m trio_delegate.adapters``.

Importing this module imports no framework.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final, final

import attrs

__all__ = [
    "CAPABILITIES",
    "CAPABILITY_NAMES",
    "FRAMEWORK_TITLES",
    "Capability",
    "render_markdown_table",
]

#: The capabilities, in table order.
CAPABILITY_NAMES = (
    "foreground",
    "background",
    "status",
    "timed_wait",
    "cancel",
    "continuation",
    "structured_results",
    "cancellation_reaches_child",
    "child_runner",
)

#: Column headings of the rendered table.
_CAPABILITY_TITLES: Final = {
    "foreground": "foreground",
    "background": "background",
    "status": "status",
    "timed_wait": "timed wait",
    "cancel": "cancel",
    "continuation": "continuation",
    "structured_results": "structured results",
    "cancellation_reaches_child": "cancellation reaches the child",
    "child_runner": "child runner",
}

#: Row headings of the rendered table, for every framework that may have a row.
FRAMEWORK_TITLES: Final = {
    "pydantic_ai": "Pydantic AI",
    "langchain": "LangChain",
    "openai_agents": "OpenAI Agents",
    "dspy": "DSPy",
    "claude": "Claude Agent SDK",
    "codex": "Codex",
    "temporal": "Temporal",
}


@final
@attrs.frozen
class Capability:
    """One cell of the matrix.

    Attributes:
        supported: whether the adapter offers it (backed by a test named
            ``test_cap_<framework>_<capability>``).
        note: for a ✗, why not (required); for a ✓, an optional detail.
    """

    supported: bool
    note: str = ""


def _row(
    cells: Mapping[str, Capability],
) -> Mapping[str, Capability]:
    missing = [name for name in CAPABILITY_NAMES if name not in cells]
    extra = [name for name in cells if name not in CAPABILITY_NAMES]
    if missing or extra:  # pragma: no cover - a mistake in the table below
        raise ValueError(f"capability row: missing {missing}, unknown {extra}")
    return MappingProxyType({name: cells[name] for name in CAPABILITY_NAMES})


_YES = Capability(True)


def _all(notes: Mapping[str, str]) -> Mapping[str, Capability]:
    """A row of ✓ only, with these notes."""
    return _row({name: Capability(True, notes.get(name, "")) for name in CAPABILITY_NAMES})


_ALL_ASYNCIO: Final = {
    "foreground": _YES,
    "background": _YES,
    "status": _YES,
    "timed_wait": _YES,
    "cancel": _YES,
    "continuation": _YES,
    "structured_results": _YES,
    "cancellation_reaches_child": Capability(
        True, "through the asyncio bridge: cancelling the agent run cancels the tool call"
    ),
    "child_runner": _YES,
}

_DSPY_BLOCKING = (
    "DSPy's tool loop calls a tool and goes on with its answer, with no way to come back "
    "to a run later: the tools block"
)

#: framework -> capability name -> cell, frameworks in table order.
CAPABILITIES: Mapping[str, Mapping[str, Capability]] = MappingProxyType(
    {
        "pydantic_ai": _row(_ALL_ASYNCIO),
        "langchain": _row(_ALL_ASYNCIO),
        "openai_agents": _row(_ALL_ASYNCIO),
        "dspy": _row(
            {
                "foreground": Capability(True, "blocking tools, module run in a worker thread"),
                "background": Capability(False, _DSPY_BLOCKING),
                "status": Capability(False, "no background runs to look at"),
                "timed_wait": Capability(False, "no background runs to wait for"),
                "cancel": Capability(
                    False,
                    "no background runs to cancel (cancelling the module run cancels the "
                    "delegation in progress)",
                ),
                "continuation": _YES,
                "structured_results": _YES,
                "cancellation_reaches_child": Capability(
                    True, "at the tool call in progress (the thread calls back into Trio)"
                ),
                "child_runner": Capability(True, "DSPy's async path on the asyncio bridge"),
            }
        ),
        "claude": _all(
            {
                "foreground": "in-process SDK MCP server (claude.mcp_server)",
                "cancellation_reaches_child": (
                    "cancelling the scope around query() cancels the tool call and its run"
                ),
                "child_runner": "claude.runner(options): one query() per run; continuations fork",
            }
        ),
        "codex": _all(
            {
                "foreground": (
                    "over MCP (trio-delegate serve); past the foreground limit the call "
                    "answers with the running handle"
                ),
                "cancellation_reaches_child": (
                    "Codex ending its session ends the server's runs and their processes"
                ),
                "child_runner": (
                    "codex.runner(): one turn of a Codex thread per run (openai-codex SDK); "
                    "cancellation interrupts the turn"
                ),
            }
        ),
        "temporal": _all(
            {
                "foreground": (
                    "temporal.temporal_runner(address): each run one workflow execution on "
                    "trio-delegate temporal-worker processes"
                ),
                "structured_results": (
                    "final_schema reaches the remote runner; the parent checks the result"
                ),
                "cancellation_reaches_child": (
                    "the workflow cancels the activity: the runner on the worker is "
                    "cancelled within a heartbeat, and the run settles after its cleanup"
                ),
                "child_runner": (
                    "the worker runs the subagent of the same name from its configuration "
                    "file, in a Trio run of its own"
                ),
            }
        ),
    }
)


def render_markdown_table(
    capabilities: Mapping[str, Mapping[str, Capability]] | None = None,
) -> str:
    """The matrix as a Markdown table, notes as numbered footnotes below it.

    Args:
        capabilities: the matrix to render (default :data:`CAPABILITIES`).

    Returns:
        the table and its notes, ending with a newline.
    """
    matrix = CAPABILITIES if capabilities is None else capabilities
    header = ["framework", *(_CAPABILITY_TITLES[name] for name in CAPABILITY_NAMES)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    notes: list[str] = []
    for framework, row in matrix.items():
        cells = [FRAMEWORK_TITLES.get(framework, framework)]
        for name in CAPABILITY_NAMES:
            cell = row[name]
            text = "✓" if cell.supported else "✗"
            if cell.note:
                if cell.note not in notes:
                    notes.append(cell.note)
                text += f" [{notes.index(cell.note) + 1}]"
            cells.append(text)
        lines.append("| " + " | ".join(cells) + " |")
    if notes:
        lines.append("")
        lines.extend(f"{number}. {note}" for number, note in enumerate(notes, 1))
    return "\n".join(lines) + "\n"
