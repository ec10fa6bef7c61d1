"""The ``task_summary`` of a run envelope (contract §2)."""

from __future__ import annotations

__all__ = ["SUMMARY_CHARS", "summarize_task"]

SUMMARY_CHARS = 200


def summarize_task(task: str, limit: int = SUMMARY_CHARS) -> str:
    """Trim *task*, collapse whitespace runs to one space, cut to *limit* chars.

    A cut is marked with ``…``, which counts towards the limit.
    """
    # Already a summary when it is short, has no whitespace but single inner
    # spaces (isprintable() is False for every other whitespace character) and
    # no space at either end: checking is cheaper than rebuilding. (strip()
    # returns the string itself when there is nothing to strip, and == sees
    # that at once.)
    if len(task) <= limit and task.isprintable() and "  " not in task and task.strip() == task:
        return task
    text = " ".join(task.split())
    if len(text) <= limit:
        return text
    return text[: limit - 1].rstrip() + "…"
