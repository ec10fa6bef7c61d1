"""Model subagents (docs/models.md): the tool loop on each API, against fakes on 127.0.0.1."""

from __future__ import annotations

from typing import Any

import pytest
import trio

import trio_delegate as td

from .fakes import Step, Turn, call, text
from .helpers import open_parent, open_parent_lenient
from .model_support import APIS, Api

pytestmark = pytest.mark.usefixtures("mock_clock")


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def shout(words: str) -> str:
    """Say *words* loudly."""
    await trio.lowlevel.checkpoint()
    return words.upper()


@pytest.mark.parametrize("api", APIS, ids=lambda api: api.name)
async def test_the_model_calls_tools_until_it_answers(api: Api) -> None:
    def after_add(turn: Turn) -> Any:
        assert turn.last.text == "5"
        return call("shout", words="done")

    script: list[Step] = [
        call("add", a=2, b=3),
        after_add,
        lambda turn: text(f"sum {turn.last.text}"),
    ]
    with api.fake(script) as fake:
        runner = api.runner(fake, instructions="Be brief.", tools=[add, shout])
        async with open_parent(td.Subagent("calc", runner)) as parent:
            result = await parent.delegate("calc", "add 2 and 3")
    assert result.final_result == "sum DONE"
    assert fake.problems == []
    assert fake.remaining == 0
    first = fake.turns[0].request
    names = _tool_names(api, first.body)
    assert names == ["add", "shout"]


def _tool_names(api: Api, body: dict[str, Any]) -> list[str]:
    if api.api == "chat":
        return [tool["function"]["name"] for tool in body["tools"]]
    return [tool["name"] for tool in body["tools"]]


def _system(api: Api, body: dict[str, Any]) -> Any:
    if api.api == "messages":
        return body.get("system")
    if api.api == "responses":
        return body.get("instructions")
    first = body["messages"][0]
    return first["content"] if first["role"] == "system" else None


@pytest.mark.parametrize("api", APIS, ids=lambda api: api.name)
async def test_instructions_are_the_system_prompt_and_the_task_the_user_message(api: Api) -> None:
    with api.fake([text("ok")]) as fake:
        runner = api.runner(fake, instructions="You are terse.")
        async with open_parent(td.Subagent("terse", runner)) as parent:
            await parent.delegate("terse", "say ok")
    body = fake.turns[0].request.body
    assert _system(api, body) == "You are terse."
    conversation = body["input"] if api.api == "responses" else body["messages"]
    assert conversation[-1] == {"role": "user", "content": "say ok"}
    assert "tools" not in body


@pytest.mark.parametrize("api", APIS, ids=lambda api: api.name)
async def test_a_tool_s_schema_comes_from_its_signature(api: Api) -> None:
    def search(query: str, limit: int = 3) -> list[str]:
        """Search the notes."""
        return [query] * limit

    with api.fake([text("ok")]) as fake:
        runner = api.runner(fake, tools=[search])
        async with open_parent(td.Subagent("s", runner)) as parent:
            await parent.delegate("s", "find")
    (tool,) = fake.turns[0].request.body["tools"]
    if api.api == "chat":
        tool = tool["function"]
    schema = tool["input_schema"] if api.api == "messages" else tool["parameters"]
    assert tool["description"] == "Search the notes."
    assert schema["required"] == ["query"]
    assert schema["properties"]["limit"]["type"] == "integer"
    assert schema["properties"]["query"]["type"] == "string"


def _result_flag(api: Api, body: dict[str, Any]) -> list[bool]:
    """The error flags of the tool results in a request (Anthropic only has one)."""
    flags: list[bool] = []
    for message in body.get("messages", ()):
        if api.api == "messages" and isinstance(message.get("content"), list):
            flags.extend(
                bool(block.get("is_error"))
                for block in message["content"]
                if block.get("type") == "tool_result"
            )
    return flags


@pytest.mark.parametrize("api", APIS, ids=lambda api: api.name)
async def test_a_failing_tool_call_reaches_the_model_as_an_error_and_the_loop_goes_on(
    api: Api,
) -> None:
    def explode(reason: str) -> str:
        """Fail."""
        raise RuntimeError(f"boom: {reason}")

    errors: list[dict[str, Any]] = []

    def record(turn: Turn) -> Any:
        errors.append(turn.last.json()["error"])
        return None

    def step(reply: Any) -> Any:
        def answer(turn: Turn) -> Any:
            record(turn)
            return reply

        return answer

    script: list[Step] = [
        call("explode", reason="x"),
        step(call("nope", a=1)),
        step(call("add", a="not a number", b=2)),
        step(call("add", a=1, b=2, c=3)),
        step(text("gave up")),
    ]
    with api.fake(script) as fake:
        runner = api.runner(fake, tools=[add, explode])
        async with open_parent(td.Subagent("t", runner)) as parent:
            result = await parent.delegate("t", "try")
    assert result.final_result == "gave up"
    assert fake.problems == []
    assert [error["type"] for error in errors] == [
        "tool_error",
        "invalid_arguments",
        "invalid_arguments",
        "invalid_arguments",
    ]
    assert "RuntimeError: boom: x" in errors[0]["message"]
    assert "there is no tool 'nope'" in errors[1]["message"]
    assert "tools are: add, explode" in errors[1]["message"]
    assert "a: Input should be a valid integer" in errors[2]["message"]
    assert "c: Unexpected keyword argument" in errors[3]["message"]
    if api.api == "messages":
        assert _result_flag(api, fake.turns[-1].request.body) == [True] * 4


SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "integer"}},
    "required": ["answer"],
    "additionalProperties": False,
}


def _format(api: Api, body: dict[str, Any]) -> Any:
    if api.api == "messages":
        return body["output_config"]["format"]["schema"]
    if api.api == "responses":
        return body["text"]["format"]["schema"]
    return body["response_format"]["json_schema"]["schema"]


@pytest.mark.parametrize("api", APIS, ids=lambda api: api.name)
async def test_final_schema_asks_the_provider_for_structured_output(api: Api) -> None:
    with api.fake([text('{"answer": 42}')]) as fake:
        async with open_parent(td.Subagent("s", api.runner(fake))) as parent:
            result = await parent.delegate("s", "answer", final_schema=SCHEMA)
    assert result.final_result == {"answer": 42}
    assert _format(api, fake.turns[0].request.body) == SCHEMA


@pytest.mark.parametrize("api", APIS, ids=lambda api: api.name)
async def test_a_final_answer_that_is_not_json_fails_a_run_with_a_final_schema(api: Api) -> None:
    with api.fake([text("forty-two")]) as fake:
        async with open_parent_lenient(td.Subagent("s", api.runner(fake))) as parent:
            with pytest.raises(td.RunFailedError) as raised:
                await parent.delegate("s", "answer", final_schema=SCHEMA)
    assert "ModelReplyError" in str(raised.value)
    assert "not JSON" in str(raised.value)
    assert "forty-two" in str(raised.value)


@pytest.mark.parametrize("api", APIS, ids=lambda api: api.name)
async def test_a_structured_answer_that_breaks_the_schema_is_an_invalid_result(api: Api) -> None:
    with api.fake([text('{"answer": "many"}')]) as fake:
        async with open_parent_lenient(td.Subagent("s", api.runner(fake))) as parent:
            with pytest.raises(td.InvalidResultError):
                await parent.delegate("s", "answer", final_schema=SCHEMA)


@pytest.mark.parametrize("api", APIS, ids=lambda api: api.name)
async def test_a_continuation_resumes_the_model_conversation_exactly(api: Api) -> None:
    script: list[Step] = [call("add", a=1, b=2), text("three"), text("again three")]
    with api.fake(script) as fake:
        runner = api.runner(fake, instructions="Sys.", tools=[add])
        async with open_parent(td.Subagent("c", runner)) as parent:
            first = await parent.delegate("c", "add 1 and 2")
            second = await parent.continue_run(first.run_id, "and again?")
            assert isinstance(second, td.RunResult)
    assert second.final_result == "again three"
    key = "input" if api.api == "responses" else "messages"
    before = fake.turns[1].request.body[key]
    after = fake.turns[2].request.body[key]
    if api.api == "chat":  # the system message is not part of the transcript
        before, after = before[1:], after[1:]
    # The earlier conversation (task, tool call, tool result, answer), then the new message.
    assert after[: len(before)] == before
    assert after[len(before) + 1 :] == [{"role": "user", "content": "and again?"}]
    assert after[0] == {"role": "user", "content": "add 1 and 2"}
    assert _system(api, fake.turns[2].request.body) == "Sys."


@pytest.mark.parametrize("api", APIS, ids=lambda api: api.name)
async def test_max_turns_bounds_model_calls_and_the_call_past_it_is_not_made(api: Api) -> None:
    script: list[Step] = [call("add", a=1, b=1), call("add", a=2, b=2), text("never sent")]
    with api.fake(script) as fake:
        runner = api.runner(fake, tools=[add], max_turns=2)
        async with open_parent_lenient(td.Subagent("m", runner)) as parent:
            with pytest.raises(td.RunFailedError) as raised:
                await parent.delegate("m", "loop")
    assert len(fake.turns) == 2
    assert fake.remaining == 1
    assert isinstance(raised.value.__cause__, td.LimitExceededError)
    assert "max_turns=2" in str(raised.value)


@pytest.mark.parametrize("api", APIS, ids=lambda api: api.name)
async def test_each_turn_is_reported_with_its_tools_and_token_counts(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    script: list[Step] = [call("add", a=1, b=1), text("2")]
    caplog.set_level("DEBUG", logger="trio_delegate.model")
    with api.fake(script) as fake:
        async with open_parent(td.Subagent("u", api.runner(fake, tools=[add]))) as parent:
            await parent.delegate("u", "go")
    lines = [r.getMessage() for r in caplog.records if r.name == "trio_delegate.model"]
    assert len(lines) == 2
    assert "turn 1: tools ['add']" in lines[0]
    assert "turn 2: tools []" in lines[1]
    # The fakes report 10 input (3 cache read, 2 cache written) and 5 output tokens:
    # Anthropic counts the cache apart, the others within.
    expected = 15 if api.api == "messages" else 10
    assert f"input tokens {expected}, output tokens 5" in lines[0]


@pytest.mark.parametrize("api", APIS, ids=lambda api: api.name)
async def test_a_history_of_the_generic_form_becomes_the_conversation(api: Api) -> None:
    # The history a run gets when the earlier run gave no transcript (contract §12):
    # a structured result is sent as its JSON text.
    history = (
        {"role": "user", "content": "count"},
        {"role": "assistant", "content": {"count": 2}},
    )
    with api.fake([text("3")]) as fake:
        ctx = td.ChildContext("run_x", "c", "and one more?", history=history)
        output = await api.runner(fake)(ctx)
    key = "input" if api.api == "responses" else "messages"
    assert fake.turns[0].request.body[key][-3:] == [
        {"role": "user", "content": "count"},
        {"role": "assistant", "content": '{"count":2}'},
        {"role": "user", "content": "and one more?"},
    ]
    assert output.final_result == "3"
    # The transcript is the whole conversation: the history, the message, the answer.
    assert output.transcript is not None
    assert list(output.transcript[:3]) == fake.turns[0].request.body[key][-3:]
    assert len(output.transcript) == 4


@pytest.mark.parametrize("api", APIS, ids=lambda api: api.name)
async def test_each_response_s_usage_counts_for_the_run(api: Api) -> None:
    # Contract §20: the runner reports every response's tokens by itself.
    script: list[Step] = [call("add", a=1, b=1), text("2")]
    with api.fake(script) as fake:
        async with open_parent(td.Subagent("u", api.runner(fake, tools=[add]))) as parent:
            result = await parent.delegate("u", "go")
            usage = parent.usage(result.run_id)
    # Per response, the fakes send 10 input tokens (3 read from the cache, 2
    # written to it; Anthropic counts those apart from its 10), 5 output
    # tokens (1 of reasoning, where the API reports it).
    messages = api.api == "messages"
    assert usage == td.Usage(
        requests=2,
        input_tokens=2 * (15 if messages else 10),
        output_tokens=10,
        cache_read_input_tokens=6,
        cache_creation_input_tokens=4 if messages else 0,
        reasoning_output_tokens=0 if messages else 2,
    )


@pytest.mark.parametrize("api", APIS, ids=lambda api: api.name)
async def test_a_budget_stops_the_loop_at_the_response_that_crosses_it(api: Api) -> None:
    script: list[Step] = [call("add", a=1, b=1), call("add", a=2, b=2), text("never")]
    budget = td.Budget(max_output_tokens=7)  # the second response (10 in all) crosses it
    with api.fake(script) as fake:
        runner = api.runner(fake, tools=[add])
        async with open_parent_lenient(td.Subagent("u", runner, budget=budget)) as parent:
            with pytest.raises(td.RunCancelledError) as info:
                await parent.delegate("u", "go")
    cause = info.value.__cause__
    assert isinstance(cause, td.BudgetExceededError), cause
    assert (cause.scope, cause.limit, cause.limit_value) == ("run", "max_output_tokens", 7)
    assert len(fake.turns) == 2  # no model call after the stop
