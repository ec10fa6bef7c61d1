"""Tool definitions in the OpenAI and Anthropic shapes (contract §10).

The shapes are checked against the request types the providers' own SDKs
publish (TypedDicts validated with pydantic); no request is ever sent.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import jsonschema
import pytest
import trio
from anthropic.types import ToolParam
from openai.types.chat import ChatCompletionToolParam
from openai.types.responses import FunctionToolParam
from pydantic import TypeAdapter

import trio_delegate as td


async def nothing(ctx: td.ChildContext) -> str:
    await trio.lowlevel.checkpoint()
    return "ok"


@pytest.fixture(params=[False, True], ids=["no_child_asks", "a_child_asks"])
async def tools(request: pytest.FixtureRequest) -> AsyncIterator[td.DelegationTools]:
    # With a child that may ask questions, answer_subagent is offered too (§19).
    subagents = [
        td.Subagent("investigator", nothing, description="Finds facts."),
        td.Subagent("writer", nothing, description="Writes prose.", asks=request.param),
    ]
    async with td.open_runtime(subagents) as rt, rt.open_parent() as parent:
        yield parent.tools()


def _objects(schema: Any) -> Iterator[dict[str, Any]]:
    if isinstance(schema, dict):
        if schema.get("type") == "object" or "properties" in schema:
            yield schema
        for value in schema.values():
            yield from _objects(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _objects(value)


def assert_openai_strict(schema: dict[str, Any]) -> None:
    """OpenAI strict mode: every object closed, every property required."""
    jsonschema.Draft202012Validator.check_schema(schema)
    for obj in _objects(schema):
        assert obj["additionalProperties"] is False
        assert sorted(obj["required"]) == sorted(obj["properties"])
        for prop in obj["properties"].values():
            # Free-form objects are not allowed under strict mode.
            assert prop.get("type") != "object" or "properties" in prop
            assert "default" not in prop


async def test_openai_chat_tools_match_the_sdk_shape(tools: td.DelegationTools) -> None:
    adapter = TypeAdapter(ChatCompletionToolParam)
    chat = tools.openai_chat_tools()
    assert [tool["function"]["name"] for tool in chat] == list(tools.names)
    for tool in chat:
        adapter.validate_python(tool)
        assert set(tool) == {"type", "function"}
        assert set(tool["function"]) == {"name", "description", "parameters", "strict"}
        assert tool["function"]["strict"] is True
        assert_openai_strict(tool["function"]["parameters"])
        json.dumps(tool)


async def test_openai_responses_tools_match_the_sdk_shape(tools: td.DelegationTools) -> None:
    adapter = TypeAdapter(FunctionToolParam)
    for tool in tools.openai_responses_tools():
        adapter.validate_python(tool)
        assert set(tool) == {"type", "name", "description", "parameters", "strict"}
        assert tool["strict"] is True
        assert_openai_strict(tool["parameters"])


async def test_non_strict_openai_tools_keep_optional_fields_optional(
    tools: td.DelegationTools,
) -> None:
    chat = tools.openai_chat_tools(strict=False)
    delegate = chat[0]["function"]
    assert "strict" not in delegate
    assert delegate["parameters"]["required"] == ["subagent", "task"]
    responses = tools.openai_responses_tools(strict=False)
    TypeAdapter(FunctionToolParam).validate_python(responses[0])
    assert responses[0]["strict"] is False


async def test_strict_optional_fields_are_nullable(tools: td.DelegationTools) -> None:
    params = tools.openai_chat_tools()[0]["function"]["parameters"]["properties"]
    assert params["background"]["type"] == ["boolean", "null"]
    assert params["replaces"]["type"] == ["string", "null"]
    assert params["final_schema"]["type"] == ["string", "null"]
    assert params["subagent"]["type"] == "string"
    assert params["subagent"]["enum"] == ["investigator", "writer"]


async def test_anthropic_tools_match_the_sdk_shape(tools: td.DelegationTools) -> None:
    adapter = TypeAdapter(ToolParam)
    anthropic = tools.anthropic_tools()
    neutral = {d.name: d.parameters for d in tools.definitions()}
    for tool in anthropic:
        adapter.validate_python(tool)
        assert set(tool) == {"name", "description", "input_schema"}
        assert tool["input_schema"] == neutral[tool["name"]]
        assert tool["input_schema"]["type"] == "object"


async def test_strict_schema_accepts_what_a_strict_client_sends(
    tools: td.DelegationTools,
) -> None:
    strict = tools.openai_chat_tools()[0]["function"]["parameters"]
    sent = {
        "subagent": "writer",
        "task": "t",
        "final_schema": json.dumps({"type": "string"}),
        "background": None,
        "replaces": None,
    }
    jsonschema.validate(sent, strict)
    result = await tools.call("delegate_task", sent)
    assert result["final_result"] == "ok"


async def test_definitions_are_fresh_copies(tools: td.DelegationTools) -> None:
    first = tools.definitions()[0]
    first.parameters["properties"].clear()
    assert tools.definitions()[0].parameters["properties"]
