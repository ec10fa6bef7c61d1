"""The capability matrix: what each framework adapter can do, as data.

Every ✓ is backed by a test named ``test_cap_<framework>_<capability>``.
Importing this module imports no framework.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import final

import attrs

__all__ = ["CAPABILITIES", "CAPABILITY_NAMES", "Capability"]

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


def _all(notes: Mapping[str, str]) -> Mapping[str, Capability]:
    return MappingProxyType(
        {name: Capability(True, notes.get(name, "")) for name in CAPABILITY_NAMES}
    )


#: framework -> capability name -> cell
CAPABILITIES: Mapping[str, Mapping[str, Capability]] = MappingProxyType(
    {
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
    }
)
