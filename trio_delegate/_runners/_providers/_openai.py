"""OpenAI through ``openai.AsyncOpenAI``: the Responses API, or Chat Completions.

Chat Completions (``api="chat"``) is what most OpenAI-compatible servers
speak (vLLM, llama.cpp, Ollama), given a ``base_url``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, final

from ..._json import escape_text
from ..._tools import ToolDefinition
from ..._usage import Usage
from .._model_tools import ToolOutcome
from . import ModelReply, ProviderCall, ToolCall, retry_after_http

__all__ = ["ChatProvider", "ResponsesProvider"]

#: The name a structured final answer's schema is given (the APIs require one).
_SCHEMA_NAME = "final_result"


class _OpenAIBase(ProviderCall):
    def retry_after(self, error: Exception) -> float | None:
        import openai

        if isinstance(error, openai.APIStatusError):
            return retry_after_http(error.status_code, error.response.headers)
        if isinstance(error, openai.APIConnectionError):
            return retry_after_http(None, None)
        return None


@final
class ResponsesProvider(_OpenAIBase):
    """Responses API calls for one run; ``instructions`` go in ``instructions``."""

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
            "input": list(conversation),
            "max_output_tokens": max_tokens,
        }
        if self._instructions:
            request["instructions"] = self._instructions
        if tools:
            request["tools"] = [
                {
                    "type": "function",
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                    "strict": False,
                }
                for tool in tools
            ]
        if final_schema is not None:
            request["text"] = {
                "format": {
                    "type": "json_schema",
                    "name": _SCHEMA_NAME,
                    "schema": dict(final_schema),
                    "strict": False,
                }
            }
        response = await self._client.responses.create(**request)
        texts: list[str] = []
        calls = []
        entries = []
        for item in response.output:
            entry = item.model_dump(mode="json", exclude_none=True)
            if item.type == "message":
                texts.extend(
                    part.text for part in item.content if getattr(part, "type", "") == "output_text"
                )
            elif item.type == "function_call":
                calls.append(ToolCall(item.call_id, item.name, item.arguments))
                # Arguments that are not valid Unicode could not be sent back.
                entry["arguments"] = escape_text(item.arguments)
            entries.append(entry)
        return ModelReply(
            text="".join(texts),
            calls=tuple(calls),
            usage=_responses_usage(response.usage),
            entries=tuple(entries),
        )

    def results(self, calls: Sequence[ToolCall], outcomes: Sequence[ToolOutcome]) -> list[Any]:
        # The output carries the error: the Responses API has no error flag.
        return [
            {"type": "function_call_output", "call_id": tool_call.id, "output": outcome.text}
            for tool_call, outcome in zip(calls, outcomes, strict=True)
        ]


@final
class ChatProvider(_OpenAIBase):
    """Chat Completions calls for one run; ``instructions`` are a leading system message."""

    async def call(
        self,
        conversation: Sequence[Any],
        tools: Sequence[ToolDefinition],
        final_schema: Mapping[str, Any] | None,
        max_tokens: int,
    ) -> ModelReply:
        messages = list(conversation)
        if self._instructions:
            # Not part of the transcript: a continuation gets the runner's
            # instructions as they are then.
            messages.insert(0, {"role": "system", "content": self._instructions})
        request: dict[str, Any] = {
            **self._options,
            "model": self._model,
            "messages": messages,
            "max_completion_tokens": max_tokens,
        }
        if tools:
            request["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": tool.parameters,
                    },
                }
                for tool in tools
            ]
        if final_schema is not None:
            request["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": _SCHEMA_NAME, "schema": dict(final_schema)},
            }
        completion = await self._client.chat.completions.create(**request)
        if not completion.choices:
            raise ValueError("the Chat Completions response holds no choice")
        message = completion.choices[0].message
        calls = []
        entry: dict[str, Any] = {"role": "assistant", "content": message.content}
        tool_calls = []
        for tool_call in message.tool_calls or ():
            function = getattr(tool_call, "function", None)
            if function is None:
                continue  # a custom tool call: this runner offers none
            calls.append(ToolCall(tool_call.id, function.name, function.arguments))
            tool_calls.append(
                {
                    "id": tool_call.id,
                    "type": "function",
                    "function": {
                        "name": function.name,
                        "arguments": escape_text(function.arguments),
                    },
                }
            )
        if tool_calls:
            entry["tool_calls"] = tool_calls
        return ModelReply(
            text=message.content or "",
            calls=tuple(calls),
            usage=_chat_usage(completion.usage),
            entries=(entry,),
        )

    def results(self, calls: Sequence[ToolCall], outcomes: Sequence[ToolOutcome]) -> list[Any]:
        return [
            {"role": "tool", "tool_call_id": tool_call.id, "content": outcome.text}
            for tool_call, outcome in zip(calls, outcomes, strict=True)
        ]


def _details(value: Any, name: str) -> int:
    return int(getattr(value, name, None) or 0) if value is not None else 0


def _given_cost(usage: Any) -> float:
    """The cost a server put in the usage (``cost``, as OpenRouter does), else 0.

    Read as every cost reported from elsewhere is (``reported_usage``): one
    that is not a finite number >= 0, an integer past a float's range among
    them, counts as none given, and the run's prices, if any, price the tokens.
    """
    cost: Any = getattr(usage, "cost", None)
    if type(cost) not in (int, float):
        return 0.0
    try:
        number = float(cost)
    except OverflowError:  # an integer of hundreds of digits
        return 0.0
    return number if math.isfinite(number) and number >= 0 else 0.0


def _responses_usage(usage: Any) -> Usage:
    if usage is None:
        return Usage(requests=1)
    return Usage(
        requests=1,
        input_tokens=usage.input_tokens or 0,
        output_tokens=usage.output_tokens or 0,
        cache_read_input_tokens=_details(usage.input_tokens_details, "cached_tokens"),
        reasoning_output_tokens=_details(usage.output_tokens_details, "reasoning_tokens"),
        cost_usd=_given_cost(usage),
    )


def _chat_usage(usage: Any) -> Usage:
    if usage is None:
        return Usage(requests=1)
    return Usage(
        requests=1,
        input_tokens=usage.prompt_tokens or 0,
        output_tokens=usage.completion_tokens or 0,
        cache_read_input_tokens=_details(usage.prompt_tokens_details, "cached_tokens"),
        reasoning_output_tokens=_details(usage.completion_tokens_details, "reasoning_tokens"),
        cost_usd=_given_cost(usage),
    )
