"""The Anthropic Messages API through ``anthropic.AsyncAnthropic``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, final

from ..._json import JsonProblem, encode
from ..._tools import ToolDefinition
from ..._usage import Usage
from .._model_tools import ToolOutcome
from . import ModelReply, ProviderCall, ToolCall, retry_after_http

__all__ = ["AnthropicProvider"]


@final
class AnthropicProvider(ProviderCall):
    """Messages API calls for one run; ``instructions`` go in ``system``."""

    async def call(
        self,
        conversation: Sequence[Any],
        tools: Sequence[ToolDefinition],
        final_schema: Mapping[str, Any] | None,
        max_tokens: int,
    ) -> ModelReply:
        request: dict[str, Any] = {
            **self._options,
            "model": self._model,
            "max_tokens": max_tokens,
            "messages": list(conversation),
        }
        if self._instructions:
            request["system"] = self._instructions
        if tools:
            request["tools"] = [
                {
                    "name": tool.name,
                    "description": tool.description,
                    "input_schema": tool.parameters,
                }
                for tool in tools
            ]
        if final_schema is not None:
            # Through extra_body: SDK versions that predate the field still send it.
            request["extra_body"] = {
                "output_config": {"format": {"type": "json_schema", "schema": dict(final_schema)}}
            }
        message = await self._client.messages.create(**request)
        texts = []
        calls = []
        for block in message.content:
            if block.type == "text":
                texts.append(block.text)
            elif block.type == "tool_use":
                calls.append(ToolCall(block.id, block.name, block.input))
        content = [_entry_block(block) for block in message.content]
        return ModelReply(
            text="".join(texts),
            calls=tuple(calls),
            usage=_usage(message.usage),
            entries=({"role": "assistant", "content": content},),
        )

    def results(self, calls: Sequence[ToolCall], outcomes: Sequence[ToolOutcome]) -> list[Any]:
        # All results of one response go back in one user message, in call order.
        blocks = []
        for tool_call, outcome in zip(calls, outcomes, strict=True):
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": tool_call.id,
                "content": outcome.text,
            }
            if outcome.is_error:
                block["is_error"] = True
            blocks.append(block)
        return [{"role": "user", "content": blocks}]

    def retry_after(self, error: Exception) -> float | None:
        import anthropic

        if isinstance(error, anthropic.APIStatusError):
            return retry_after_http(error.status_code, error.response.headers)
        if isinstance(error, anthropic.APIConnectionError):
            return retry_after_http(None, None)
        return None


def _entry_block(block: Any) -> dict[str, Any]:
    """*block* as the conversation keeps it (and sends it back).

    A tool call's input that could not be sent back (too deep, not valid
    Unicode) is kept as ``{}``: the model is told of the problem in the
    call's error result.
    """
    if block.type != "tool_use":
        entry: dict[str, Any] = block.model_dump(mode="json", exclude_none=True)
        return entry
    # Built by hand: pydantic's serializer gives up on input nested past its limit.
    try:
        encode(block.input, max_depth=64)
        arguments = block.input
    except (TypeError, JsonProblem):
        arguments = {}
    return {"type": "tool_use", "id": block.id, "name": block.name, "input": arguments}


def _usage(usage: Any) -> Usage:
    cache_read = usage.cache_read_input_tokens or 0
    cache_creation = usage.cache_creation_input_tokens or 0
    return Usage(
        requests=1,
        # Anthropic counts cached input apart; td.Usage counts it in input_tokens.
        input_tokens=(usage.input_tokens or 0) + cache_read + cache_creation,
        output_tokens=usage.output_tokens or 0,
        cache_read_input_tokens=cache_read,
        cache_creation_input_tokens=cache_creation,
    )
