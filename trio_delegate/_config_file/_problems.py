"""A configuration file's errors: :class:`ConfigError` (defined with the others, in
``trio_delegate._errors``), and the :class:`Problem` behind one."""

from __future__ import annotations

from typing import Final

from .._checks import describe
from .._errors import ConfigError

__all__ = ["NO_DEADLINE", "ConfigError", "Problem", "cut", "key_text", "toml_text"]

#: What a timeout setting says for "no deadline": TOML has no null.
NO_DEADLINE: Final = "none"

#: Longest value quoted in a message: a hostile file's megabyte string is cut.
_QUOTE_LIMIT: Final = 200


class Problem(Exception):
    """What a check found wrong with a value; the key is added where it is caught.

    Args:
        problem: what is wrong, naming the value (``"must be a string, got 3"``).
        fix: what to do; ``None``: the fix the key's field declares.
        at: the place inside the value, if deeper (``(0,)`` for ``command[0]``).
    """

    def __init__(self, problem: str, fix: str | None = None, *, at: tuple[str | int, ...] = ()):
        super().__init__(problem)
        self.problem = problem
        self.fix = fix
        self.at = at


def key_text(parts: tuple[str | int, ...]) -> str | None:
    """``("subagents", 1, "command")`` → ``"subagents[1].command"``; ``()`` → ``None``."""
    text = ""
    for part in parts:
        if isinstance(part, str):
            part = cut(part)  # a hostile file's key may be a megabyte long
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else part
    return text or None


def cut(text: str) -> str:
    """*text*, cut to a length a message can hold."""
    return text if len(text) <= _QUOTE_LIMIT else text[: _QUOTE_LIMIT - 1] + "…"


def toml_text(value: object) -> str:
    """*value* as it would be written in TOML, for messages; long values are cut."""
    return cut(_toml(value))


def _toml(value: object) -> str:
    if value is None:
        return f'"{NO_DEADLINE}"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        # One character past the limit is enough to show that it was cut.
        cut = value[: _QUOTE_LIMIT + 1]
        return '"' + cut.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        parts: list[str] = []
        for item in value:
            parts.append(_toml(item))
            if sum(map(len, parts)) > _QUOTE_LIMIT:
                break
        return "[" + ", ".join(parts) + "]"
    return describe(value)
