"""Model subagents when things go wrong: retries, deadlines, cancellation, hostile calls.

Against the fakes on 127.0.0.1. Tests that wait out a backoff use the
autojump clock with no deadline and no request timeout, so the only times
the clock can jump to are the backoffs themselves; the others use a mock
clock that moves only when the test moves it.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

import trio_delegate as td

from .fakes import Failure, Hold, Malformed, Reply, Step, Turn, call, text
from .fakes._server import Call
from .helpers import open_parent, open_parent_lenient
from .model_support import ANTHROPIC, APIS, CHAT, RESPONSES, Api

by_name = pytest.mark.parametrize("api", APIS, ids=lambda api: api.name)


def _error_type(api: Api) -> Any:
    import anthropic
    import openai

    return anthropic if api is ANTHROPIC else openai


@by_name
async def test_rate_limits_and_server_errors_are_retried_on_the_trio_clock(
    api: Api, autojump_clock: trio.testing.MockClock
) -> None:
    script: list[Step] = [
        Failure(429, "rate_limit_error", "slow down", retry_after="7"),
        Failure(500, "api_error", "oops"),
        Failure(529, "overloaded_error", "busy"),
        text("at last"),
    ]
    with api.fake(script) as fake:
        runner = api.runner(fake)
        async with open_parent(td.Subagent("r", runner, timeout_seconds=None)) as parent:
            start = trio.current_time()
            result = await parent.delegate("r", "go")
            waited = trio.current_time() - start
    assert result.final_result == "at last"
    assert len(fake.turns) == 4
    # Retry-After's 7 s, then the backoff of the second and third retries: 2 s, 4 s.
    assert waited == 13.0


@by_name
async def test_retries_stop_after_max_retries_with_the_provider_s_error(
    api: Api, autojump_clock: trio.testing.MockClock
) -> None:
    script: list[Step] = [
        Failure(503, "api_error", "down"),
        Failure(503, "api_error", "still down"),
    ]
    with api.fake(script) as fake:
        runner = api.runner(fake, max_retries=1)
        async with open_parent_lenient(td.Subagent("r", runner, timeout_seconds=None)) as parent:
            with pytest.raises(td.RunFailedError) as raised:
                await parent.delegate("r", "go")
    assert len(fake.turns) == 2
    cause = raised.value.__cause__
    assert isinstance(cause, _error_type(api).InternalServerError)
    assert f"failed: {type(cause).__name__}: " in str(raised.value)
    assert "still down" in str(raised.value)
    assert "still down" in str(raised.value)


@by_name
async def test_a_retry_is_never_waited_for_past_the_run_s_deadline(
    api: Api, mock_clock: trio.testing.MockClock
) -> None:
    script: list[Step] = [
        Failure(429, "rate_limit_error", "come back in a minute", retry_after="60")
    ]
    with api.fake(script) as fake:
        runner = api.runner(fake)
        async with open_parent_lenient(td.Subagent("r", runner, timeout_seconds=10)) as parent:
            with pytest.raises(td.RunFailedError) as raised:
                await parent.delegate("r", "go")
            assert trio.current_time() == 0.0
    assert len(fake.turns) == 1
    assert isinstance(raised.value.__cause__, _error_type(api).RateLimitError)
    assert "come back in a minute" in str(raised.value)


@by_name
async def test_a_request_the_api_refuses_fails_the_run_at_once_with_its_error(
    api: Api, mock_clock: trio.testing.MockClock
) -> None:
    script: list[Step] = [Failure(400, "invalid_request_error", "no such model: nope")]
    with api.fake(script) as fake:
        async with open_parent_lenient(td.Subagent("r", api.runner(fake))) as parent:
            with pytest.raises(td.RunFailedError) as raised:
                await parent.delegate("r", "go")
    assert len(fake.turns) == 1
    assert isinstance(raised.value.__cause__, _error_type(api).BadRequestError)
    assert "BadRequestError" in str(raised.value)
    assert "no such model: nope" in str(raised.value)


@by_name
async def test_a_malformed_response_fails_the_run(
    api: Api, mock_clock: trio.testing.MockClock
) -> None:
    with api.fake([Malformed()]) as fake:
        async with open_parent_lenient(td.Subagent("r", api.runner(fake))) as parent:
            with pytest.raises(td.RunFailedError):
                await parent.delegate("r", "go")
    assert len(fake.turns) == 1


@by_name
async def test_cancelling_a_run_closes_the_model_request_in_flight(
    api: Api, mock_clock: trio.testing.MockClock
) -> None:
    with api.fake([Hold()]) as fake:
        async with open_parent_lenient(td.Subagent("h", api.runner(fake))) as parent:
            handle = await parent.start("h", "think hard")
            await trio.to_thread.run_sync(fake.holding.wait)
            parent.cancel(handle.run_id)
            with pytest.raises(td.RunCancelledError):
                await parent.wait(handle.run_id)
            # The fake sees the connection closed while it still holds the request.
            await trio.to_thread.run_sync(fake.disconnected.wait)


@by_name
async def test_the_deadline_ends_a_model_request_that_hangs(
    api: Api, mock_clock: trio.testing.MockClock
) -> None:
    with api.fake([Hold()]) as fake:
        runner = api.runner(fake)
        async with open_parent_lenient(td.Subagent("h", runner, timeout_seconds=30)) as parent:
            handle = await parent.start("h", "think hard")
            await trio.to_thread.run_sync(fake.holding.wait)
            mock_clock.jump(30)
            with pytest.raises(td.RunTimedOutError):
                await parent.wait(handle.run_id)
            await trio.to_thread.run_sync(fake.disconnected.wait)


@by_name
async def test_the_deadline_ends_a_tool_that_hangs(
    api: Api, mock_clock: trio.testing.MockClock
) -> None:
    entered = trio.Event()

    async def wait_forever() -> str:
        """Never answer."""
        entered.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    with api.fake([call("wait_forever")]) as fake:
        runner = api.runner(fake, tools=[wait_forever])
        async with open_parent_lenient(td.Subagent("h", runner, timeout_seconds=30)) as parent:
            handle = await parent.start("h", "wait")
            await entered.wait()
            mock_clock.jump(30)
            with pytest.raises(td.RunTimedOutError):
                await parent.wait(handle.run_id)
    assert len(fake.turns) == 1


def _deep(levels: int) -> str:
    return '{"words": ' + "[" * levels + "]" * levels + "}"


@by_name
async def test_hostile_tool_calls_reach_the_model_as_errors(
    api: Api, mock_clock: trio.testing.MockClock
) -> None:
    async def shout(words: str) -> str:
        """Say *words* loudly."""
        return words.upper()

    errors: list[dict[str, Any]] = []

    def then(reply: Reply) -> Any:
        def step(turn: Turn) -> Reply:
            errors.append(turn.last.json()["error"])
            return reply

        return step

    raw_calls = [
        # Anthropic's SDK parses the whole response, so a reply that deep is no tool call
        # at all (see the next test); a 300-level one is.
        Call("shout", {}, raw=_deep(300 if api is ANTHROPIC else 1000)),
        Call("shout", {}, raw='{"words": "\\ud800"}'),
    ]
    if api is not ANTHROPIC:  # Anthropic's tool input is always a JSON object
        raw_calls += [
            Call("shout", {}, raw="{not json"),
            Call("shout", {}, raw="[1, 2]"),
            # The arguments' text itself holds a lone surrogate (sent as an escape
            # in the response), so the conversation must not send it back as is.
            Call("shout", {}, raw='{"words": "\ud800"}'),
        ]
    script: list[Any] = [Reply(calls=(raw_calls[0],))]
    script += [then(Reply(calls=(raw,))) for raw in raw_calls[1:]]
    script.append(then(text("survived")))
    with api.fake(script) as fake:
        runner = api.runner(fake, tools=[shout])
        async with open_parent(td.Subagent("h", runner)) as parent:
            result = await parent.delegate("h", "go")
    assert result.final_result == "survived"
    assert fake.problems == []
    assert len(errors) == len(raw_calls)
    assert all(error["type"] == "invalid_arguments" for error in errors)
    assert "U+D800" in errors[1]["message"]


async def test_a_response_too_deep_to_parse_fails_the_run(
    mock_clock: trio.testing.MockClock,
) -> None:
    with ANTHROPIC.fake([Reply(calls=(Call("shout", {}, raw=_deep(1000)),))]) as fake:
        async with open_parent_lenient(td.Subagent("h", ANTHROPIC.runner(fake))) as parent:
            with pytest.raises(td.RunFailedError) as raised:
                await parent.delegate("h", "go")
    assert "RecursionError" in str(raised.value)


async def test_the_api_key_is_read_from_its_variable_and_never_shown(
    monkeypatch: pytest.MonkeyPatch, mock_clock: trio.testing.MockClock
) -> None:
    secret = "sk-test-do-not-show-0123456789"
    monkeypatch.setenv("TD_MODEL_TEST_KEY", secret)
    script: list[Step] = [text("ok"), Failure(401, "authentication_error", "invalid x-api-key")]
    for api in APIS:
        with api.fake(script) as fake:
            runner = api.runner(fake, api_key_env="TD_MODEL_TEST_KEY")
            async with open_parent_lenient(td.Subagent("k", runner)) as parent:
                await parent.delegate("k", "go")
                with pytest.raises(td.RunFailedError) as raised:
                    await parent.delegate("k", "go")
        # Where each SDK puts it (x-api-key, or authorization: Bearer) is its own affair.
        assert any(secret in value for value in fake.turns[0].request.headers.values())
        assert secret not in str(raised.value)
        assert secret not in repr(raised.value.__cause__)


async def test_a_missing_key_variable_fails_the_run_naming_it(
    monkeypatch: pytest.MonkeyPatch, mock_clock: trio.testing.MockClock
) -> None:
    monkeypatch.delenv("TD_MODEL_TEST_MISSING", raising=False)
    with RESPONSES.fake([]) as fake:
        runner = RESPONSES.runner(fake, api_key_env="TD_MODEL_TEST_MISSING")
        async with open_parent_lenient(td.Subagent("k", runner)) as parent:
            with pytest.raises(td.RunFailedError) as raised:
                await parent.delegate("k", "go")
    assert isinstance(raised.value.__cause__, td.InvalidArgumentsError)
    assert "TD_MODEL_TEST_MISSING" in str(raised.value)
    assert fake.turns == []


async def test_a_lead_model_delegates_to_child_models_two_levels_deep(
    mock_clock: trio.testing.MockClock,
) -> None:
    lead_script: list[Step] = [
        call("delegate_task", subagent="mid", task="ask the leaf"),
        lambda turn: text("lead: " + turn.last.json()["final_result"]),
    ]
    mid_script: list[Step] = [
        call("delegate_task", subagent="leaf", task="leaf work"),
        lambda turn: text("mid: " + turn.last.json()["final_result"]),
    ]
    with (
        ANTHROPIC.fake(lead_script) as lead,
        RESPONSES.fake(mid_script) as mid,
        CHAT.fake([text("leaf done")]) as leaf,
    ):
        subagents = [
            td.Subagent("lead", ANTHROPIC.runner(lead), children=("mid",)),
            td.Subagent("mid", RESPONSES.runner(mid), children=("leaf",)),
            td.Subagent("leaf", CHAT.runner(leaf), description="does leaf work"),
        ]
        async with td.open_runtime(subagents) as rt, rt.open_parent(subagents=["lead"]) as parent:
            result = await parent.delegate("lead", "delegate it")
    assert result.final_result == "lead: mid: leaf done"
    assert [fake.problems for fake in (lead, mid, leaf)] == [[], [], []]
    lead_tools = {tool["name"]: tool for tool in lead.turns[0].request.body["tools"]}
    assert lead_tools["delegate_task"]["input_schema"]["properties"]["subagent"]["enum"] == ["mid"]
    # The mid model's own task came from the lead model's call.
    assert mid.turns[0].request.body["input"][-1] == {"role": "user", "content": "ask the leaf"}
    assert leaf.turns[0].request.body["messages"][-1]["content"] == "leaf work"


async def test_a_child_s_failure_reaches_the_lead_model_as_a_tool_error(
    mock_clock: trio.testing.MockClock,
) -> None:
    lead_script: list[Step] = [
        call("delegate_task", subagent="leaf", task="fail"),
        lambda turn: text(turn.last.json()["error"]["type"]),
    ]
    with (
        ANTHROPIC.fake(lead_script) as lead,
        CHAT.fake([Failure(400, "invalid_request_error", "refused")]) as leaf,
    ):
        subagents = [
            td.Subagent("lead", ANTHROPIC.runner(lead), children=("leaf",)),
            td.Subagent("leaf", CHAT.runner(leaf)),
        ]
        config = td.Config(fail_closed=False)
        async with (
            td.open_runtime(subagents, config=config) as rt,
            rt.open_parent(subagents=["lead"]) as parent,
        ):
            result = await parent.delegate("lead", "try")
    assert result.final_result == "run_failed"
    assert lead.turns[1].last.is_error
    assert "refused" in lead.turns[1].last.json()["error"]["message"]


async def test_a_lead_model_that_leaves_its_child_s_failure_unresolved_fails_closed(
    mock_clock: trio.testing.MockClock,
) -> None:
    lead_script: list[Step] = [
        call("delegate_task", subagent="leaf", task="fail"),
        text("fine, though it failed"),
        text("fine anyway"),
    ]
    with (
        ANTHROPIC.fake(lead_script) as lead,
        CHAT.fake([Failure(400, "invalid_request_error", "refused")]) as leaf,
    ):
        subagents = [
            td.Subagent("lead", ANTHROPIC.runner(lead), children=("leaf",)),
            td.Subagent("leaf", CHAT.runner(leaf)),
        ]
        async with td.open_runtime(subagents) as rt, rt.open_parent(subagents=["lead"]) as parent:
            handle = await parent.start("lead", "try")
            with pytest.raises(td.RunFailedError) as raised:
                await parent.wait(handle.run_id)
            ok = await parent.delegate("lead", "again", replaces=handle.run_id)
    assert isinstance(raised.value.__cause__, td.UnresolvedDelegationError)
    assert ok.final_result == "fine anyway"
