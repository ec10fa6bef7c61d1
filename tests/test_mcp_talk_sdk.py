"""The ``mcp`` SDK's client drives the Tasks path end to end, over stdio.

``Client(stdio_client(...), mode="2026-07-28")`` with a client extension that
claims ``resultType: "task"`` (the SDK ships none for the Tasks extension):
its resolver polls ``tasks/get``, hands each ``inputRequests`` entry to the
client's own elicitation callback as the ``elicitation/create`` it is, and
answers with ``tasks/update`` until the task ends. The server is
``tests/fakes/talking.py`` (``serve_stdio`` over subagents that ask and
report). Between polls the resolver lets the server wait (``wait_subagent``
with a timeout answers at once when the run asks or ends): the test never
sleeps.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import pytest
import trio

pytest.importorskip("mcp")

import mcp_types
from mcp import Client, StdioServerParameters
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.stdio import stdio_client
from pydantic import ConfigDict, Field

from trio_delegate.mcp._tasks import TASKS_EXTENSION

ROOT = Path(__file__).resolve().parent.parent

#: Outer hang guard for one session (it takes a second or two).
SESSION_SECONDS = 60

Elicit = Callable[[mcp_types.ElicitRequestFormParams], Awaitable[mcp_types.ElicitResult]]


class CreatedTask(mcp_types.Result):
    """A ``tools/call`` answered with a task (``resultType: "task"``)."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"] = Field(alias="resultType", default="task")


class TaskState(mcp_types.Result):
    """What ``tasks/get`` and ``tasks/update`` answer."""

    model_config = ConfigDict(extra="allow")


class TaskRequest(mcp_types.Request[dict[str, Any], str]):
    """``tasks/get`` or ``tasks/update`` (the task id is the request's name)."""

    name_param = "taskId"


class TasksClient(ClientExtension):
    """The client side of the Tasks extension: poll, elicit, update, until the end."""

    identifier = TASKS_EXTENSION

    def __init__(self, elicit: Elicit) -> None:
        self.elicit = elicit
        #: Every task state the client read, in order.
        self.states: list[dict[str, Any]] = []

    def claims(self) -> tuple[ResultClaim[CreatedTask], ...]:
        return (ResultClaim(result_type="task", model=CreatedTask, resolve=self.resolve),)

    async def resolve(self, created: CreatedTask, ctx: ClaimContext) -> mcp_types.CallToolResult:
        task_id = created.model_dump(by_alias=True)["taskId"]
        answered: set[str] = set()  # keys are stable across polls: answer each once
        while True:
            got = await ctx.session.send_request(
                TaskRequest(method="tasks/get", params={"taskId": task_id}), TaskState
            )
            state = got.model_dump(by_alias=True, exclude={"meta"})
            self.states.append(state)
            if state["status"] == "completed":
                return mcp_types.CallToolResult.model_validate(state["result"])
            assert state["status"] in ("working", "input_required"), state
            responses = {}
            for key, request in state.get("inputRequests", {}).items():
                if key in answered:
                    continue
                assert request["method"] == "elicitation/create"
                params = mcp_types.ElicitRequestFormParams.model_validate(request["params"])
                result = await self.elicit(params)
                responses[key] = result.model_dump(by_alias=True, exclude_none=True)
                answered.add(key)
            if responses:
                await ctx.session.send_request(
                    TaskRequest(
                        method="tasks/update",
                        params={"taskId": task_id, "inputResponses": responses},
                    ),
                    TaskState,
                )
            else:
                # The server waits (its clock): it answers as soon as the run asks or ends.
                await ctx.session.call_tool("wait_subagent", {"run_id": task_id, "timeout": 5})


@asynccontextmanager
async def client(tmp_path: Path, tasks: TasksClient) -> AsyncIterator[Client]:
    async def elicitation(context: Any, params: Any) -> mcp_types.ElicitResult:
        raise AssertionError("the server sends no elicitation/create of its own")

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "tests.fakes.talking", str(tmp_path)], cwd=ROOT
    )
    with trio.fail_after(SESSION_SECONDS):
        async with Client(
            stdio_client(params),
            mode="2026-07-28",
            extensions=[tasks],
            # Declaring the callback declares form elicitation on every request.
            elicitation_callback=elicitation,
        ) as session:
            yield session


async def test_the_sdk_client_answers_a_form_question_through_tasks(tmp_path: Path) -> None:
    asked: list[mcp_types.ElicitRequestFormParams] = []

    async def elicit(params: mcp_types.ElicitRequestFormParams) -> mcp_types.ElicitResult:
        asked.append(params)
        return mcp_types.ElicitResult(action="accept", content={"name": "Ada", "age": 36})

    tasks = TasksClient(elicit)
    async with client(tmp_path, tasks) as session:
        result = await session.call_tool(
            "delegate_task", {"subagent": "ask_form", "task": "a gift", "background": True}
        )
    assert not result.is_error
    assert result.structured_content is not None
    assert result.structured_content["final_result"] == {"name": "Ada", "age": 36}
    [question] = asked
    dumped = question.model_dump(by_alias=True, exclude_none=True)
    assert dumped["message"] == "Who is it for?"
    assert dumped["requestedSchema"]["properties"] == {
        "name": {"type": "string"},
        "age": {"type": "integer"},
    }
    assert "input_required" in [state["status"] for state in tasks.states]


async def test_the_sdk_client_declines_and_reads_progress_in_the_status_message(
    tmp_path: Path,
) -> None:
    async def elicit(params: mcp_types.ElicitRequestFormParams) -> mcp_types.ElicitResult:
        if params.message == "Go on?":
            return mcp_types.ElicitResult(action="accept", content={"answer": "yes"})
        return mcp_types.ElicitResult(action="decline")

    tasks = TasksClient(elicit)
    async with client(tmp_path, tasks) as session:
        declined = await session.call_tool(
            "delegate_task", {"subagent": "ask_text", "task": "the roof", "background": True}
        )
        went_on = await session.call_tool(
            "delegate_task", {"subagent": "report_then_ask", "task": "go", "background": True}
        )
    assert declined.structured_content is not None
    assert declined.structured_content["final_result"] == "the roof: declined (the client declined)"
    assert went_on.structured_content is not None
    assert went_on.structured_content["final_result"] == "went on: yes"
    asking = [s for s in tasks.states if s["status"] == "input_required"]
    assert any(s["statusMessage"].endswith("progress: halfway (1/2)") for s in asking)
