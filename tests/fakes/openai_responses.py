"""A fake OpenAI Responses API (``POST /v1/responses``, streamed as server-sent events).

Codex streams every model request and reads ``response.created``, one
``response.output_item.done`` per output item (a ``message`` with
``output_text``, a ``function_call``), and ``response.completed``. MCP tools
are offered inside a ``namespace`` tool (``mcp__<server>``): a call names
the tool as ``<namespace>.<tool>``
in :class:`Call` (``"mcp__delegate.delegate_task"``), and is sent with the
``namespace`` field. Tool results are the ``function_call_output`` items of
the request's input.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from ._server import FakeModelServer, Reply, ToolResult, Usage


class FakeResponses(FakeModelServer):
    """A scripted Responses API; a Codex provider's ``base_url`` is ``<url>/v1``."""

    model_path = "/v1/responses"

    def tool_results(self, body: Any) -> tuple[ToolResult, ...]:
        results = []
        for item in body.get("input", ()):
            if not isinstance(item, dict) or item.get("type") != "function_call_output":
                continue
            output = item.get("output", "")
            if isinstance(output, list):
                output = "".join(part.get("text", "") for part in output)
            # Codex puts how long the call took ahead of an MCP tool's output.
            if output.startswith("Wall time:") and "\nOutput:\n" in output:
                output = output.split("\nOutput:\n", 1)[1]
            results.append(ToolResult(item["call_id"], output, False))
        return tuple(results)

    def message(self, body: Any, reply: Reply) -> dict[str, Any]:
        output: list[dict[str, Any]] = []
        if reply.text or not reply.calls:
            output.append(
                {
                    "type": "message",
                    "role": "assistant",
                    "id": self.next_id("msg"),
                    "status": "completed",
                    "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
                }
            )
        for call in reply.calls:
            output.append(
                {
                    "type": "function_call",
                    "id": self.next_id("fc"),
                    "call_id": self.next_id("call"),
                    "name": call.name,
                    "arguments": json.dumps(call.arguments) if call.raw is None else call.raw,
                    "status": "completed",
                }
            )
        usage = reply.usage or Usage()
        return {
            "id": self.next_id("resp"),
            "object": "response",
            "created_at": 0,
            "model": body.get("model", "gpt-test"),
            "status": "completed",
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": {
                "input_tokens": usage.input_tokens,
                "input_tokens_details": {"cached_tokens": usage.cache_read_input_tokens},
                "output_tokens": usage.output_tokens,
                "output_tokens_details": {"reasoning_tokens": usage.reasoning_output_tokens},
                "total_tokens": usage.input_tokens + usage.output_tokens,
                **({} if usage.cost is None else {"cost": usage.cost}),
            },
        }

    def events(self, body: Any, reply: Reply) -> Iterator[tuple[str, dict[str, Any]]]:
        response_id = self.next_id("resp")
        yield "response.created", {"type": "response.created", "response": {"id": response_id}}
        items: list[dict[str, Any]] = []
        if reply.text or not reply.calls:
            items.append(
                {
                    "type": "message",
                    "role": "assistant",
                    "id": self.next_id("msg"),
                    "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
                }
            )
        for call in reply.calls:
            namespace, _, name = call.name.rpartition(".")
            item: dict[str, Any] = {
                "type": "function_call",
                "id": self.next_id("fc"),
                "call_id": self.next_id("call"),
                "name": name,
                "arguments": json.dumps(call.arguments),
            }
            if namespace:
                item["namespace"] = namespace
            items.append(item)
        for index, item in enumerate(items):
            yield (
                "response.output_item.done",
                {"type": "response.output_item.done", "output_index": index, "item": item},
            )
        usage: dict[str, Any] = {
            "input_tokens": 10,
            "input_tokens_details": None,
            "output_tokens": 5,
            "output_tokens_details": None,
            "total_tokens": 15,
        }
        if reply.usage is not None:
            spent = reply.usage
            usage = {
                "input_tokens": spent.input_tokens,
                "input_tokens_details": {"cached_tokens": spent.cache_read_input_tokens},
                "output_tokens": spent.output_tokens,
                "output_tokens_details": {"reasoning_tokens": spent.reasoning_output_tokens},
                "total_tokens": spent.input_tokens + spent.output_tokens,
            }
        yield (
            "response.completed",
            {"type": "response.completed", "response": {"id": response_id, "usage": usage}},
        )
