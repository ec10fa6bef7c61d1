"""A run's conversation (contract §12): what a continuation carries on.

The one place its shape is decided, for runs in memory and runs read from a
store alike.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .._json import CanonicalJson, encode

__all__ = ["conversation", "conversation_json"]


def conversation_json(
    history: CanonicalJson | None, links: Iterable[tuple[str, CanonicalJson | None]]
) -> CanonicalJson:
    """The conversation of a run that gave no transcript (contract §12), the one
    place its shape is decided.

    Its *history*, then for each ``(task, result)`` of *links* (the run
    itself, or a chain of continuations oldest first) the task as a user
    entry and, when that run completed, its result as an assistant entry.
    Made from the canonical JSON texts, spliced without decoding them: a
    conversation is as large as the runs' history and results, and decoding
    and encoding it again would hold the event loop that long.
    """
    parts: list[str] = []
    size = 2  # the brackets
    if history is not None and history.text != "[]":
        parts.append(history.text[1:-1])
        size += history.size - 2
    for task, result in links:
        text, length = encode({"role": "user", "content": task}, max_depth=2)
        parts.append(text)
        size += length
        if result is not None:
            parts.append(f'{{"role":"assistant","content":{result.text}}}')
            size += len('{"role":"assistant","content":}') + result.size
    size += max(len(parts) - 1, 0)  # the commas
    return CanonicalJson("[" + ",".join(parts) + "]", size)


def conversation(
    history: list[Any], task: str, completed: bool, final_result: Any, *, max_depth: int = 64
) -> list[Any]:
    """:func:`conversation_json` of plain JSON data, as plain JSON data.

    Raises:
        JsonProblem, TypeError: *history* or *final_result* is not JSON the
            runtime can keep within *max_depth* levels.
    """
    result = CanonicalJson.of(final_result, max_depth=max_depth) if completed else None
    entries: list[Any] = conversation_json(
        CanonicalJson.of(history, max_depth=max_depth + 2), ((task, result),)
    ).copy()
    return entries
