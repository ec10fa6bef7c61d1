"""Model subagents talk, count and stop (docs/models.md): progress after every turn and
tool call, the ask_parent tool, prices, and budgets that clamp and stop the loop."""

from __future__ import annotations

import contextlib
from decimal import Decimal
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

import trio_delegate as td

from .fakes import Call, Reply, Step, Turn, Usage, call, text
from .helpers import open_parent, open_parent_lenient
from .model_support import ANTHROPIC, APIS, CHAT, Api

pytestmark = pytest.mark.usefixtures("mock_clock")

by_name = pytest.mark.parametrize("api", APIS, ids=lambda api: api.name)


def _tokens(api: Api) -> int:
    """The tokens one fake response reports: Anthropic counts its cache apart."""
    return 20 if api is ANTHROPIC else 15


def _max_tokens(api: Api, body: dict[str, Any]) -> Any:
    field = {"messages": "max_tokens", "responses": "max_output_tokens"}.get(
        api.api, "max_completion_tokens"
    )
    return body[field]


def _tools(api: Api, body: dict[str, Any]) -> list[str]:
    tools = body.get("tools", [])
    if api.api == "chat":
        return [tool["function"]["name"] for tool in tools]
    return [tool["name"] for tool in tools]


# -- progress -----------------------------------------------------------------------


@by_name
async def test_progress_follows_every_turn_and_every_tool_call(api: Api) -> None:
    seen: list[td.Progress | None] = []
    run: list[str] = []
    parent_of: list[td.Parent] = []

    def look(topic: str) -> str:
        """Look a topic up."""
        seen.append(parent_of[0].status(run[0]).progress)
        return f"notes on {topic}"

    script: list[Step] = [
        Reply(calls=(Call("look", {"topic": "a"}), Call("look", {"topic": "b"}))),
        text("done"),
    ]
    with api.fake(script) as fake:
        runner = api.runner(fake, tools=[look], max_turns=5)
        async with open_parent(td.Subagent("p", runner)) as parent:
            parent_of.append(parent)
            handle = await parent.start("p", "look things up")
            run.append(handle.run_id)
            result = await parent.wait(handle.run_id)
            last = parent.status(handle.run_id).progress
    assert isinstance(result, td.RunResult)
    assert result.final_result == "done"
    one = _tokens(api)
    assert [(p.message, p.progress, p.total) for p in seen if p is not None] == [
        (f"turn 1: called look, look; {one} tokens so far", 1, 5),
        (f"turn 1: look returned (1 of 2); {one} tokens so far", 1, 5),
    ]
    assert last is not None
    assert (last.message, last.progress, last.total) == (
        f"turn 2: answered; {2 * one} tokens so far",
        2,
        5,
    )
    # Turn 1, two tool calls, turn 2.
    assert last.seq == 4


async def test_progress_says_when_a_tool_call_failed() -> None:
    api = ANTHROPIC
    with api.fake([call("nope"), text("ok")]) as fake:
        async with open_parent(td.Subagent("p", api.runner(fake))) as parent:
            handle = await parent.start("p", "go")
            await parent.wait(handle.run_id)
            progress = parent.status(handle.run_id).progress
    # The last report is the answer; the one before it was the failed call.
    assert progress is not None
    assert progress.message == "turn 2: answered; 40 tokens so far"
    assert progress.seq == 3


# -- ask_parent ---------------------------------------------------------------------


def _ask(question: str, **more: Any) -> Reply:
    return Reply(calls=(Call("ask_parent", {"question": question, **more}),))


@by_name
async def test_a_question_of_a_child_model_is_answered_by_the_lead_model(api: Api) -> None:
    child_saw: list[str] = []
    lead_saw: list[Any] = []

    def child_answers(turn: Turn) -> Reply:
        child_saw.append(turn.last.text)
        return text(f"painted it {turn.last.text}")

    def answer(turn: Turn) -> Reply:
        handle = turn.last.json()
        lead_saw.append(handle)
        (question,) = handle["questions"]
        return call(
            "answer_subagent",
            run_id=handle["run_id"],
            question_id=question["question_id"],
            answer="blue",
        )

    def wait(turn: Turn) -> Reply:
        ack = turn.last.json()
        lead_saw.append(ack)
        return call("wait_subagent", run_id=ack["run_id"])

    def finish(turn: Turn) -> Reply:
        lead_saw.append(turn.last.json())
        return text("the painter is done")

    lead_script: list[Step] = [
        call("delegate_task", subagent="painter", task="paint the fence"),
        answer,
        wait,
        finish,
    ]
    child_script: list[Step] = [_ask("which colour?"), child_answers]
    with api.fake(lead_script) as lead_fake, api.fake(child_script) as child_fake:
        subagents = [
            td.Subagent("lead", api.runner(lead_fake), children=("painter",)),
            td.Subagent("painter", api.runner(child_fake), asks=True, description="Paints."),
        ]
        async with open_parent(*subagents) as parent:
            result = await parent.delegate("lead", "get the fence painted")
    assert result.final_result == "the painter is done"
    assert lead_fake.problems == child_fake.problems == []
    # The foreground delegate_task answered with the question; the lead answered it.
    asked = lead_saw[0]
    assert asked["status"] == "input_required"
    assert asked["questions"][0]["question"] == "which colour?"
    assert lead_saw[1]["accepted"] is True
    assert lead_saw[2]["final_result"] == "painted it blue"
    # The child's model read the answer as the tool's result.
    assert child_saw == ["blue"]
    assert "ask_parent" in _tools(api, child_fake.turns[0].request.body)
    assert "ask_parent" not in _tools(api, lead_fake.turns[0].request.body)


async def test_a_subagent_that_does_not_ask_offers_no_ask_parent_tool() -> None:
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    api = ANTHROPIC
    with api.fake([text("a"), text("b")]) as fake:
        runner = api.runner(fake, tools=[add])
        async with open_parent(
            td.Subagent("quiet", runner), td.Subagent("asking", runner, asks=True)
        ) as parent:
            await parent.delegate("quiet", "go")
            await parent.delegate("asking", "go", on_input=_never_called)
    assert _tools(api, fake.turns[0].request.body) == ["add"]
    assert _tools(api, fake.turns[1].request.body) == ["add", "ask_parent"]


async def _never_called(question: td.Question) -> Any:
    raise AssertionError(question)


async def _decline(question: td.Question) -> Any:
    raise td.QuestionDeclinedError("not now", reason="decide yourself")


@by_name
async def test_a_declined_question_reaches_the_model_as_a_tool_error(api: Api) -> None:
    errors: list[Any] = []

    def after(turn: Turn) -> Reply:
        errors.append(turn.last.json()["error"])
        return text("went with green")

    with api.fake([_ask("which colour?"), after]) as fake:
        runner = api.runner(fake)
        async with open_parent(td.Subagent("p", runner, asks=True)) as parent:
            result = await parent.delegate("p", "paint", on_input=_decline)
    assert result.final_result == "went with green"
    (error,) = errors
    assert error["type"] == "question_declined"
    assert error["reason"] == "decide yourself"


async def test_a_question_nobody_can_answer_is_a_tool_error_and_the_run_goes_on() -> None:
    api = CHAT
    errors: list[Any] = []

    def after(turn: Turn) -> Reply:
        errors.append(turn.last.json()["error"])
        return text("assumed blue")

    with api.fake([_ask("which colour?"), after]) as fake:
        async with open_parent(td.Subagent("p", api.runner(fake), asks=True)) as parent:
            # A foreground delegate without on_input: nobody can answer.
            result = await parent.delegate("p", "paint")
    assert result.final_result == "assumed blue"
    assert errors[0]["type"] == "input_unavailable"


async def test_an_unanswered_question_times_out_as_a_tool_error(
    mock_clock: trio.testing.MockClock,
) -> None:
    api = ANTHROPIC
    errors: list[Any] = []

    def after(turn: Turn) -> Reply:
        errors.append(turn.last.json()["error"])
        return text("carried on")

    with api.fake([_ask("which colour?"), after]) as fake:
        runner = api.runner(fake, ask_timeout_seconds=5)
        async with open_parent(td.Subagent("p", runner, asks=True)) as parent:
            handle = await parent.start("p", "paint")
            waiting = await parent.wait(handle.run_id)
            assert isinstance(waiting, td.RunHandle)
            assert waiting.status is td.RunStatus.INPUT_REQUIRED
            mock_clock.jump(5)
            # The ask ends at its timeout; the question is withdrawn.
            await trio.testing.wait_all_tasks_blocked()
            result = await parent.wait(handle.run_id)
    assert isinstance(result, td.RunResult)
    assert result.final_result == "carried on"
    assert errors[0]["type"] == "ask_timeout"


@by_name
async def test_hostile_questions_are_tool_errors(api: Api) -> None:
    errors: list[Any] = []

    def then(reply: Reply) -> Any:
        def step(turn: Turn) -> Reply:
            errors.append(turn.last.json()["error"])
            return reply

        return step

    hostile = [
        Call("ask_parent", {}, raw='{"question": "\\ud800?"}'),
        Call("ask_parent", {"question": 7}),
        Call("ask_parent", {"question": "x?", "schema": "not a schema"}),
        Call("ask_parent", {"question": "x?", "schema": {"type": "no such type"}}),
        Call("ask_parent", {"question": "x?", "colour": "red"}),
        Call("ask_parent", {"question": "   "}),
    ]
    if api is ANTHROPIC:
        # Anthropic's SDK parses tool input itself; a lone surrogate there is sent escaped.
        hostile[0] = Call("ask_parent", {"question": "\ud800?"})
    script: list[Step] = [Reply(calls=(hostile[0],))]
    script += [then(Reply(calls=(each,))) for each in hostile[1:]]
    script.append(then(text("gave up asking")))
    with api.fake(script) as fake:
        async with open_parent(td.Subagent("p", api.runner(fake), asks=True)) as parent:
            result = await parent.delegate("p", "paint", on_input=_never_called)
    assert result.final_result == "gave up asking"
    assert fake.problems == []
    assert [error["type"] for error in errors] == ["invalid_arguments"] * len(hostile)


async def test_a_tool_named_ask_parent_on_a_subagent_that_asks_fails_the_run() -> None:
    def ask_parent(question: str) -> str:
        """Mine."""
        return question

    api = ANTHROPIC
    with api.fake([]) as fake:
        runner = api.runner(fake, tools=[ask_parent])
        async with open_parent_lenient(td.Subagent("p", runner, asks=True)) as parent:
            with pytest.raises(td.RunFailedError) as raised:
                await parent.delegate("p", "go", on_input=_never_called)
    assert "named 'ask_parent'" in str(raised.value)
    assert "rename the tool" in str(raised.value)
    assert fake.turns == []


# -- budgets ------------------------------------------------------------------------


@by_name
async def test_what_the_budget_leaves_clamps_max_tokens(api: Api) -> None:
    script: list[Step] = [call("nope"), call("nope"), text("done")]
    budget = td.Budget(max_output_tokens=12)
    with api.fake(script) as fake:
        runner = api.runner(fake, max_tokens=8)
        async with open_parent(td.Subagent("b", runner, budget=budget)) as parent:
            await parent.delegate("b", "go")
    # 8 (the runner's own), then 12 - 5 = 7 left, then 12 - 10 = 2 left.
    assert [_max_tokens(api, turn.request.body) for turn in fake.turns] == [8, 7, 2]


@by_name
async def test_a_call_the_budget_cannot_afford_is_not_made(api: Api) -> None:
    # Each response spends 5 output tokens: after the second nothing is left.
    script: list[Step] = [call("nope"), call("nope"), text("never sent")]
    with api.fake(script) as fake:
        runner = api.runner(fake)
        subagent = td.Subagent("b", runner, budget=td.Budget(max_output_tokens=10))
        async with open_parent_lenient(subagent) as parent:
            with pytest.raises(td.RunFailedError) as raised:
                await parent.delegate("b", "go")
            spent = parent.usage(raised.value.run_id)
    assert len(fake.turns) == 2
    assert fake.remaining == 1
    cause = raised.value.__cause__
    assert type(cause) is td.LimitExceededError
    assert "model call 3" in str(cause)
    assert "max_output_tokens=0" in str(cause)
    assert spent.output_tokens == 10
    assert spent.requests == 2


async def test_a_parent_budget_with_no_request_left_stops_the_loop() -> None:
    api = CHAT
    with api.fake([call("nope"), text("never sent")]) as fake:
        subagents = [td.Subagent("b", api.runner(fake))]
        async with (
            td.open_runtime(subagents, config=td.Config(fail_closed=False)) as rt,
            rt.open_parent(budget=td.Budget(max_requests=1)) as parent,
        ):
            with pytest.raises(td.RunFailedError) as raised:
                await parent.delegate("b", "go")
    assert len(fake.turns) == 1
    assert "max_requests=0" in str(raised.value)


async def test_a_response_that_passes_the_budget_stops_the_run_before_the_next_call() -> None:
    # The fake ignores max_tokens: its 50 output tokens pass the budget of 10.
    api = ANTHROPIC
    big = Reply(calls=(Call("nope", {}),), usage=Usage(output_tokens=50))
    with api.fake([big, text("never sent")]) as fake:
        subagent = td.Subagent("b", api.runner(fake), budget=td.Budget(max_output_tokens=10))
        async with open_parent_lenient(subagent) as parent:
            with pytest.raises(td.RunCancelledError) as raised:
                await parent.delegate("b", "go")
    cause = raised.value.__cause__
    assert isinstance(cause, td.BudgetExceededError)
    assert (cause.scope, cause.limit, cause.spent) == ("run", "max_output_tokens", 50)
    assert len(fake.turns) == 1


# -- prices -------------------------------------------------------------------------


PRICES = td.Prices(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)


@by_name
async def test_prices_give_each_response_its_cost(api: Api) -> None:
    with api.fake([call("nope"), text("done")]) as fake:
        runner = api.runner(fake, prices=PRICES)
        async with open_parent(td.Subagent("c", runner)) as parent:
            result = await parent.delegate("c", "go")
            usage = parent.usage(result.run_id)
    # Per response: Anthropic 10 fresh input tokens, 3 read from the cache, 2
    # written to it; the OpenAI APIs 7 fresh and 3 read; 5 output tokens.
    if api is ANTHROPIC:
        one = (10 * 3.0 + 3 * 0.3 + 2 * 3.75 + 5 * 15.0) / 1e6
    else:
        one = (7 * 3.0 + 3 * 0.3 + 5 * 15.0) / 1e6
    assert usage.cost_usd == pytest.approx(2 * one, rel=1e-12)


async def test_cache_prices_default_to_the_input_price() -> None:
    usage = td.Usage(
        input_tokens=1_000_000,
        cache_read_input_tokens=200_000,
        cache_creation_input_tokens=300_000,
        output_tokens=100_000,
    )
    assert td.Prices(input=2.0, output=10.0).cost(usage) == 2.0 + 1.0
    assert td.Prices(input=2.0, output=10.0, cache_read=0.5).cost(usage) == 1.0 + 0.1 + 0.6 + 1.0


async def test_a_cost_the_server_reports_wins_over_the_price_table() -> None:
    api = CHAT
    with api.fake([Reply(text="ok", usage=Usage(cost=0.25))]) as fake:
        runner = api.runner(fake, prices=PRICES)
        async with open_parent(td.Subagent("c", runner)) as parent:
            result = await parent.delegate("c", "go")
            assert parent.usage(result.run_id).cost_usd == 0.25


async def test_a_reported_cost_past_a_floats_range_counts_as_none_given() -> None:
    # As every cost reported from elsewhere is read: not a figure, so the
    # prices price the tokens (and no OverflowError ends the run).
    api = CHAT
    with api.fake([Reply(text="ok", usage=Usage(cost=10**400))]) as fake:
        runner = api.runner(fake, prices=PRICES)
        async with open_parent(td.Subagent("c", runner)) as parent:
            result = await parent.delegate("c", "go")
            usage = parent.usage(result.run_id)
    assert result.final_result == "ok"
    assert usage.cost_usd == pytest.approx((7 * 3.0 + 3 * 0.3 + 5 * 15.0) / 1e6, rel=1e-12)


@by_name
@pytest.mark.parametrize("field", ["input_tokens", "output_tokens", "cache_read_input_tokens"])
async def test_a_reported_token_count_past_any_count_fails_the_run_naming_it(
    api: Api, field: str
) -> None:
    usage = Usage(**{field: 10**400})
    with api.fake([Reply(text="ok", usage=usage)]) as fake:
        runner = api.runner(fake, prices=PRICES)
        async with open_parent_lenient(td.Subagent("c", runner)) as parent:
            with pytest.raises(td.RunFailedError) as raised:
                await parent.delegate("c", "go")
    cause = raised.value.__cause__
    assert isinstance(cause, td.InvalidArgumentsError)
    # Anthropic reports cached input apart: it is counted in input_tokens.
    named = "input_tokens" if api is ANTHROPIC and field.startswith("cache") else field
    assert f"Usage.{named} must be an int from 0 to 2**63-1" in str(cause)


@by_name
async def test_a_cost_budget_clamps_max_tokens_and_stops_a_call_it_cannot_pay_for(
    api: Api,
) -> None:
    # 15 dollars per million output tokens: 0.000015 a token. The budget
    # leaves 0.0001 dollars at first (6 output tokens' worth).
    prices = td.Prices(input=0.0, output=15.0)
    spend = Usage(
        input_tokens=0,
        output_tokens=6,
        cache_read_input_tokens=0,
        cache_creation_input_tokens=0,
        reasoning_output_tokens=0,
    )
    script: list[Step] = [Reply(calls=(Call("nope", {}),), usage=spend), text("never sent")]
    with api.fake(script) as fake:
        runner = api.runner(fake, prices=prices)
        subagent = td.Subagent("c", runner, budget=td.Budget(max_cost_usd=0.0001))
        async with open_parent_lenient(subagent) as parent:
            with pytest.raises(td.RunFailedError) as raised:
                await parent.delegate("c", "go")
    assert _max_tokens(api, fake.turns[0].request.body) == 6
    assert len(fake.turns) == 1
    assert "max_cost_usd" in str(raised.value.__cause__)


@pytest.mark.parametrize(
    ("prices", "says"),
    [
        ({"input": -1.0, "output": 1.0}, "Prices.input must be a finite number >= 0"),
        ({"input": 1.0, "output": float("nan")}, "Prices.output must be a finite number"),
        ({"input": True, "output": 1.0}, "got True"),
        ({"input": "3", "output": 1.0}, "got '3'"),
        ({"input": 1.0, "output": 1.0, "cache_read": float("inf")}, "Prices.cache_read"),
        ({"input": 10**400, "output": 1.0}, "Prices.input must be a finite number >= 0"),
        ({"input": 1, "output": 1, "cache_write": 10**400}, "Prices.cache_write must be a finite"),
        ({"input": 1.0}, "lacks ['output']"),
        ({"input": 1.0, "output": 1.0, "per": "token"}, "unknown field(s) ['per']"),
        ("3 dollars", "must be a trio_delegate.Prices or None"),
    ],
)
def test_malformed_prices_are_refused_naming_the_field(prices: Any, says: str) -> None:
    with pytest.raises(td.InvalidArgumentsError) as raised:
        td.model_runner("anthropic:claude-test", prices=prices)
    assert says in str(raised.value)


def test_prices_as_a_mapping_are_prices() -> None:
    runner = td.model_runner("openai:gpt-test", prices={"input": 1, "output": 2})
    assert runner.prices == td.Prices(input=1.0, output=2.0)


@by_name
async def test_hostile_tool_names_are_tool_errors_and_progress_stays_readable(api: Api) -> None:
    errors: list[Any] = []

    def after(turn: Turn) -> Reply:
        errors.extend(result.json()["error"]["type"] for result in turn.tool_results)
        return text("ok")

    names = ["\ud800bad", "x" * 5_000, *[f"tool{n}" for n in range(20)]]
    hostile = Reply(calls=tuple(Call(name, {}) for name in names))
    with api.fake([hostile, after]) as fake:
        async with open_parent(td.Subagent("h", api.runner(fake))) as parent:
            handle = await parent.start("h", "go")
            seen: list[td.Progress | None] = []
            result = await parent.wait(handle.run_id)
            seen.append(parent.status(handle.run_id).progress)
    assert isinstance(result, td.RunResult)
    assert result.final_result == "ok"
    assert errors == ["invalid_arguments"] * len(names)
    last = seen[0]
    assert last is not None
    # A turn, 22 tool calls, the answer.
    assert last.seq == 24


@by_name
async def test_a_lone_surrogate_in_the_model_s_text_is_kept_as_its_escape(api: Api) -> None:
    script: list[Step] = [Reply(text="half \ud800 way", calls=(Call("nope", {}),)), text("\udfff")]
    with api.fake(script) as fake:
        async with open_parent(td.Subagent("s", api.runner(fake))) as parent:
            result = await parent.delegate("s", "go")
    assert result.final_result == "\\udfff"
    assert fake.problems == []
    # The first reply went back with the second request, escaped.
    assert repr("half \\ud800 way")[1:-1] in str(fake.turns[1].request.body)


counts = st.integers(min_value=0, max_value=10**12)
price_values = st.one_of(st.none(), st.floats(min_value=0, max_value=1_000, allow_nan=False))


@given(
    fresh=counts,
    read=counts,
    written=counts,
    output=counts,
    given_prices=st.tuples(price_values, price_values, price_values, price_values),
)
def test_a_cost_is_each_kind_of_token_at_its_price(
    fresh: int,
    read: int,
    written: int,
    output: int,
    given_prices: tuple[float | None, ...],
) -> None:
    given_input, given_output, cache_read, cache_write = given_prices
    prices = td.Prices(
        input=given_input or 0.0,
        output=given_output or 0.0,
        cache_read=cache_read,
        cache_write=cache_write,
    )
    usage = td.Usage(
        input_tokens=fresh + read + written,
        cache_read_input_tokens=read,
        cache_creation_input_tokens=written,
        output_tokens=output,
    )
    exact = (
        Decimal(fresh) * Decimal(repr(prices.input))
        + Decimal(read) * Decimal(repr(prices.input if cache_read is None else cache_read))
        + Decimal(written) * Decimal(repr(prices.input if cache_write is None else cache_write))
        + Decimal(output) * Decimal(repr(prices.output))
    ) / Decimal(1_000_000)
    assert prices.cost(usage) == float(exact)


# Each example runs a fake server and a runtime: a few cover the cases.
@settings(max_examples=12, deadline=None)
@given(left=st.integers(min_value=0, max_value=50), mine=st.integers(min_value=1, max_value=50))
async def test_max_tokens_never_exceeds_what_the_budget_leaves(left: int, mine: int) -> None:
    api = ANTHROPIC
    spend = Usage(
        input_tokens=0,
        output_tokens=50,
        cache_read_input_tokens=0,
        cache_creation_input_tokens=0,
    )
    script: list[Step] = [Reply(calls=(Call("nope", {}),), usage=spend), text("done")]
    with api.fake(script) as fake:
        runner = api.runner(fake, max_tokens=mine)
        budget = td.Budget(max_output_tokens=50 + left)
        async with open_parent_lenient(td.Subagent("b", runner, budget=budget)) as parent:
            with contextlib.suppress(td.RunFailedError):
                await parent.delegate("b", "go")
    sent = [_max_tokens(api, turn.request.body) for turn in fake.turns]
    assert sent[0] == min(mine, 50 + left)
    if left == 0:
        assert len(sent) == 1  # nothing left: the second call is not made
    else:
        assert sent[1] == min(mine, left)


async def test_a_tiny_price_and_a_large_cost_budget_leave_max_tokens_as_it_is() -> None:
    # What is left over the price of a token is larger than any float.
    api = ANTHROPIC
    prices = td.Prices(input=0.0, output=1e-300)
    with api.fake([text("ok")]) as fake:
        runner = api.runner(fake, prices=prices, max_tokens=9)
        budget = td.Budget(max_cost_usd=1e308)
        async with open_parent(td.Subagent("c", runner, budget=budget)) as parent:
            await parent.delegate("c", "go")
    assert _max_tokens(api, fake.turns[0].request.body) == 9
