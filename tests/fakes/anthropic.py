"""A fake Anthropic Messages API (``POST /v1/messages``, streamed as server-sent events).

Claude Code streams every model request; a reply is sent as ``message_start``,
a text block, one ``tool_use`` block per call (its input as one
``input_json_delta``), ``message_delta`` with the stop reason, and
``message_stop``. Tool results are read from the ``tool_result`` blocks of
the request's messages.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from ._server import FakeModelServer, Reply, ToolResult, Usage, raw_placeholder

_REMINDERS = re.compile(r"(\s*<system-reminder>.*?</system-reminder>)+\s*$", re.DOTALL)


class FakeAnthropic(FakeModelServer):
    """A scripted Messages API; point a client at it with ``ANTHROPIC_BASE_URL=<url>``."""

    model_path = "/v1/messages"

    def tool_results(self, body: Any) -> tuple[ToolResult, ...]:
        results = []
        for message in body.get("messages", ()):
            content = message.get("content")
            if message.get("role") != "user" or not isinstance(content, list):
                continue
            for block in content:
                if block.get("type") != "tool_result":
                    continue
                inner = block.get("content", "")
                if isinstance(inner, list):
                    inner = "".join(part.get("text", "") for part in inner)
                # Claude Code appends notes of its own for the model; the
                # tool's answer is what comes before them.
                inner = _REMINDERS.sub("", inner)
                results.append(
                    ToolResult(block["tool_use_id"], inner, bool(block.get("is_error", False)))
                )
        return tuple(results)

    def message(self, body: Any, reply: Reply) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        if reply.text or not reply.calls:
            content.append({"type": "text", "text": reply.text})
        raws = []
        for call in reply.calls:
            if call.raw is not None:
                raws.append(call.raw)
            content.append(
                {
                    "type": "tool_use",
                    "id": self.next_id("toolu"),
                    "name": call.name,
                    "input": raw_placeholder(call, len(raws) - 1),
                }
            )
        usage = reply.usage or Usage()
        return {
            "id": self.next_id("msg"),
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "claude-test"),
            "content": content,
            "stop_reason": "tool_use" if reply.calls else "end_turn",
            "stop_sequence": None,
            "usage": {
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "cache_read_input_tokens": usage.cache_read_input_tokens,
                "cache_creation_input_tokens": usage.cache_creation_input_tokens,
            },
            "__raw__": raws,
        }

    def events(self, body: Any, reply: Reply) -> Iterator[tuple[str, dict[str, Any]]]:
        yield (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": self.next_id("msg"),
                    "type": "message",
                    "role": "assistant",
                    "model": body.get("model", "claude-test"),
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": _start_usage(reply.usage),
                },
            },
        )
        index = 0
        if reply.text or not reply.calls:
            yield (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "text", "text": ""},
                },
            )
            yield (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "text_delta", "text": reply.text},
                },
            )
            yield "content_block_stop", {"type": "content_block_stop", "index": index}
            index += 1
        for call in reply.calls:
            block = {
                "type": "tool_use",
                "id": self.next_id("toolu"),
                "name": call.name,
                "input": {},
            }
            yield (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": block},
            )
            yield (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {
                        "type": "input_json_delta",
                        "partial_json": json.dumps(call.arguments),
                    },
                },
            )
            yield "content_block_stop", {"type": "content_block_stop", "index": index}
            index += 1
        stop = "tool_use" if reply.calls else "end_turn"
        yield (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 5 if reply.usage is None else reply.usage.output_tokens},
            },
        )
        yield "message_stop", {"type": "message_stop"}


def _start_usage(usage: Usage | None) -> dict[str, int]:
    """The usage a stream's ``message_start`` reports (the output count comes at its end)."""
    if usage is None:
        return {"input_tokens": 10, "output_tokens": 1}
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": 1,
        "cache_read_input_tokens": usage.cache_read_input_tokens,
        "cache_creation_input_tokens": usage.cache_creation_input_tokens,
    }
