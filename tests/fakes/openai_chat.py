"""A fake OpenAI Chat Completions API (``POST /v1/chat/completions``), not streamed.

The API of most OpenAI-compatible servers (vLLM, llama.cpp, Ollama). A reply
is one ``chat.completion`` with an assistant message carrying the text and
the ``tool_calls``; tool results are the ``tool`` messages of the request.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from ._server import FakeModelServer, Reply, ToolResult, Usage


class FakeChat(FakeModelServer):
    """A scripted Chat Completions API; a client's ``base_url`` is ``<url>/v1``."""

    model_path = "/v1/chat/completions"

    def tool_results(self, body: Any) -> tuple[ToolResult, ...]:
        return tuple(
            ToolResult(message["tool_call_id"], message.get("content") or "", False)
            for message in body.get("messages", ())
            if isinstance(message, dict) and message.get("role") == "tool"
        )

    def message(self, body: Any, reply: Reply) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if reply.calls:
            message["tool_calls"] = [
                {
                    "id": self.next_id("call"),
                    "type": "function",
                    "function": {
                        "name": call.name,
                        "arguments": json.dumps(call.arguments) if call.raw is None else call.raw,
                    },
                }
                for call in reply.calls
            ]
        usage = reply.usage or Usage()
        counts: dict[str, Any] = {
            "prompt_tokens": usage.input_tokens,
            "completion_tokens": usage.output_tokens,
            "total_tokens": usage.input_tokens + usage.output_tokens,
            "prompt_tokens_details": {"cached_tokens": usage.cache_read_input_tokens},
            "completion_tokens_details": {"reasoning_tokens": usage.reasoning_output_tokens},
        }
        if usage.cost is not None:
            counts["cost"] = usage.cost
        return {
            "id": self.next_id("chatcmpl"),
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", "local-test"),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if reply.calls else "stop",
                }
            ],
            "usage": counts,
        }

    def events(self, body: Any, reply: Reply) -> Iterator[tuple[str, dict[str, Any]]]:
        raise NotImplementedError("the fake Chat Completions API does not stream")
