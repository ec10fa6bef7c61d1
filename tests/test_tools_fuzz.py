"""Fuzzing the model-facing surface: whatever a model sends, the dispatcher
answers with a JSON-ready result or raises a DelegationError with a payload.
Nothing else ever escapes, and nothing is left running behind an error.
"""

from __future__ import annotations

import json
from typing import Any

import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

import trio_delegate as td

TOOLS = (
    "delegate_task",
    "subagent_status",
    "wait_subagent",
    "cancel_subagent",
    "continue_subagent",
    "list_subagent_runs",
    "answer_subagent",
)
KEYS = (
    "subagent",
    "task",
    "final_schema",
    "background",
    "replaces",
    "run_id",
    "timeout",
    "message",
    "answer",
    "question_id",
    "decline",
)


async def worker(ctx: td.ChildContext) -> Any:
    await trio.sleep(1)
    return {"task": ctx.task[:20]}


async def asker(ctx: td.ChildContext) -> Any:
    ctx.progress(ctx.task, progress=1)
    answer = await ctx.ask("a number?", schema={"type": "integer"}, timeout=5)
    return {"answer": answer}


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
plausible = st.fixed_dictionaries(
    {},
    optional={
        "subagent": st.sampled_from(["worker", "asker", "nobody", ""]) | json_values,
        "task": st.text(max_size=40) | json_values,
        "final_schema": st.sampled_from(
            [{"type": "object"}, {"type": "bogus"}, '{"type": "string"}', "{bad"]
        )
        | json_values,
        "background": st.booleans() | json_values,
        "replaces": st.sampled_from(["run_x"]) | json_values,
        "run_id": st.sampled_from(["run_x", "", "0" * 200]) | json_values,
        "timeout": st.sampled_from([0, 0.5, -1, 1e308]) | json_values,
        "message": st.text(max_size=40) | json_values,
        "answer": json_values,
        "question_id": st.sampled_from(["q_x", ""]) | json_values,
        "decline": st.booleans() | json_values,
    },
)
arguments = (
    plausible
    | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=6), json_values, max_size=5)
    | json_values
    | st.text(max_size=60)
    | plausible.map(json.dumps)
    | st.binary(max_size=20)
    | st.builds(object)
)
names = st.sampled_from(TOOLS) | st.text(max_size=12) | st.none() | st.integers()


def checked_payload(error: td.DelegationError) -> dict[str, Any]:
    payload = error.to_payload()
    assert set(payload) == {"error"}
    assert payload["error"]["type"] == error.kind()
    assert payload["error"]["message"]
    json.dumps(payload)
    return payload


async def dispatch_all(calls: list[tuple[Any, Any]]) -> list[dict[str, Any]]:
    answers: list[dict[str, Any]] = []
    config = td.Config(fail_closed=False, max_task_chars=50)
    async with (
        td.open_runtime(
            [td.Subagent("worker", worker), td.Subagent("asker", asker, asks=True)], config=config
        ) as rt,
        rt.open_parent("fuzz") as parent,
    ):
        tools = parent.tools()
        for name, args in calls:
            before = rt.live_runs
            try:
                answer = await tools.call(name, args)
            except td.DelegationError as exc:
                answers.append(checked_payload(exc))
                if isinstance(exc, td.InvalidArgumentsError | td.UnknownSubagentError):
                    assert rt.live_runs == before  # refused: nothing was started
            else:
                assert isinstance(answer, dict)
                json.dumps(answer, allow_nan=False)
                if name == "list_subagent_runs":
                    assert set(answer) == {"runs", "omitted"}
                else:
                    assert "run_id" in answer
                answers.append(answer)
    return answers


@settings(max_examples=150)
@given(st.lists(st.tuples(names, arguments), min_size=1, max_size=6))
def test_any_tool_call_yields_a_result_or_a_delegation_error(
    calls: list[tuple[Any, Any]],
) -> None:
    answers = trio.run(dispatch_all, calls, clock=trio.testing.MockClock(autojump_threshold=0))
    assert len(answers) == len(calls)
