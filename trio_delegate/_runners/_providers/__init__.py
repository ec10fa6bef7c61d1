"""Model providers: one model call in, text, tool calls and usage numbers out.

Each provider speaks one API through its official SDK, which runs natively
under Trio (httpx over anyio): no worker thread, no asyncio bridge, and a
run's cancellation cancels the HTTP request in flight. A provider keeps the
conversation in its API's own message form, so a transcript resumes a
conversation exactly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import attrs

from ..._json import escape_text, text_problem
from ..._tools import ToolDefinition
from ..._usage import Usage
from .._model_tools import ToolOutcome

__all__ = ["ModelReply", "Provider", "ProviderCall", "ToolCall", "sendable", "user_entry"]


@attrs.frozen
class ToolCall:
    """One tool call a model made: its id, the tool's name, the arguments as sent."""

    id: str
    name: str
    arguments: Mapping[str, Any] | str | None


@attrs.frozen
class ModelReply:
    """One model response.

    Attributes:
        text: the text of the response (its text parts joined).
        calls: the tool calls, in order.
        usage: the token counts it reported.
        entries: what it adds to the conversation, in the API's own form.
    """

    text: str
    calls: tuple[ToolCall, ...]
    usage: Usage
    entries: tuple[Any, ...]


class Provider(Protocol):
    """One model API, for one run."""

    async def call(
        self,
        conversation: Sequence[Any],
        tools: Sequence[ToolDefinition],
        final_schema: Mapping[str, Any] | None,
        max_tokens: int,
    ) -> ModelReply:
        """Make one model call over *conversation*, its response at most *max_tokens*
        long; raise the SDK's error when it fails."""
        ...

    def results(self, calls: Sequence[ToolCall], outcomes: Sequence[ToolOutcome]) -> list[Any]:
        """The conversation entries that carry *outcomes* of *calls* back to the model."""
        ...

    def retry_after(self, error: Exception) -> float | None:
        """Seconds to wait before trying again after *error*, or ``None`` when it is final.

        A rate limit, an overloaded or failing server (5xx) and a lost
        connection are tried again; ``-1.0`` means "retry, with the default backoff".
        """
        ...


class ProviderCall:
    """What every provider keeps for one run's calls: the SDK's client, the
    model, the instructions and extra request options."""

    def __init__(
        self,
        client: Any,
        model: str,
        instructions: str,
        options: Mapping[str, Any],
    ) -> None:
        self._client = client
        self._model = model
        self._instructions = instructions
        self._options = dict(options)


def sendable(entries: Sequence[Any]) -> list[Any]:
    """*entries* with every text that is not valid Unicode written as escapes.

    A model's reply is sent back with the next request: a lone surrogate in
    a tool's name or in its text could not be encoded as UTF-8 there. The
    walk is iterative, so no nesting can exhaust the stack.
    """
    out = [_escaped(entry) for entry in entries]
    stack = [item for item in out if isinstance(item, dict | list)]
    while stack:
        node = stack.pop()
        pairs = list(node.items()) if isinstance(node, dict) else list(enumerate(node))
        for key, value in pairs:
            if isinstance(value, dict | list):
                value = _escaped(value)
                stack.append(value)
            elif isinstance(value, str):
                value = escape_text(value)
            if isinstance(node, dict):
                if isinstance(key, str) and text_problem(key) is not None:
                    del node[key]
                    key = escape_text(key)
                node[key] = value
            else:
                node[key] = value
    return out


def _escaped(value: Any) -> Any:
    """A shallow copy of a dict or list (the SDK's own objects stay untouched), or the text."""
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, list):
        return list(value)
    if isinstance(value, str):
        return escape_text(value)
    return value


def user_entry(text: str) -> dict[str, Any]:
    """A user message in the form all three APIs accept."""
    return {"role": "user", "content": text}


#: HTTP statuses worth another try: a rate limit, a timeout, server errors,
#: Anthropic's "overloaded" (529).
_RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})

#: The longest Retry-After honoured from a server; past it the error is final.
_MAX_RETRY_AFTER = 600.0


def retry_after_http(status: int | None, headers: Mapping[str, str] | None) -> float | None:
    """The wait an HTTP failure asks for: ``None`` (final), ``-1.0`` (default backoff) or seconds.

    Args:
        status: the HTTP status, or ``None`` for a connection that failed.
        headers: the response headers (``retry-after-ms``, ``retry-after`` in seconds).
    """
    if status is None:
        return -1.0
    if status not in _RETRY_STATUSES:
        return None
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = None if headers is None else headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:
            continue  # an HTTP date: the default backoff
        if seconds != seconds or seconds < 0 or seconds > _MAX_RETRY_AFTER:
            continue
        return seconds
    return -1.0
