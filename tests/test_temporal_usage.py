"""Usage from runs on Temporal: it comes back with the workflow's result.

A worker's reply is ``{final_result, transcript, usage}``; what it says was
spent counts for the run on the parent, as if the runner had run there.
These tests run the real workflow on the Temporal dev server, with a
stand-in activity in this process that replies with given numbers.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import trio

import trio_delegate as td

pytest.importorskip("temporalio")

from trio_delegate.adapters._temporal_workflow import (
    RunWorkflow,
    activity_name,
    reply_usage,
    usage_fields,
)
from trio_delegate.adapters.temporal import temporal_runner

from .temporal_support import GUARD

SPENT = td.Usage(
    requests=3,
    input_tokens=1200,
    output_tokens=340,
    cache_read_input_tokens=200,
    cache_creation_input_tokens=50,
    reasoning_output_tokens=40,
    cost_usd=0.0123,
)


@contextmanager
def stand_in_worker(address: str, task_queue: str, reply: dict[str, Any]) -> Iterator[None]:
    """A Temporal worker in this process: the real workflow, an activity that replies *reply*."""
    from temporalio import activity
    from temporalio.client import Client
    from temporalio.worker import Worker

    @activity.defn(name=activity_name("spender"))
    async def spend(request: dict[str, Any]) -> dict[str, Any]:
        return reply

    ready = threading.Event()
    # Built directly: with trio_asyncio imported, the policy hands out its own loops.
    loop = asyncio.SelectorEventLoop()
    stop = asyncio.Event()
    failure: list[BaseException] = []

    async def main() -> None:
        client = await Client.connect(address)
        async with Worker(
            client, task_queue=task_queue, workflows=[RunWorkflow], activities=[spend]
        ):
            ready.set()
            await stop.wait()

    def run() -> None:
        try:
            loop.run_until_complete(main())
        except BaseException as exc:  # shown by the test
            failure.append(exc)
            ready.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    ready.wait(GUARD)
    assert not failure, failure
    try:
        yield
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(GUARD)
        loop.close()


async def spent_on_temporal(address: str, reply: dict[str, Any]) -> tuple[Any, td.Usage]:
    task_queue = f"usage-{uuid.uuid4().hex}"
    runner = temporal_runner(address, task_queue=task_queue, lease_seconds=None)
    subagent = td.Subagent("spender", runner, timeout_seconds=GUARD)
    with stand_in_worker(address, task_queue, reply):
        async with td.open_runtime([subagent]) as rt, rt.open_parent() as parent:
            with trio.fail_after(GUARD):
                result = await parent.delegate("spender", "go")
            return result.final_result, parent.usage(result.run_id)


async def test_the_usage_a_worker_reports_comes_back_with_the_result(
    temporal_address: str,
) -> None:
    reply = {"final_result": "done", "transcript": None, "usage": usage_fields(SPENT)}
    result, spent = await spent_on_temporal(temporal_address, reply)
    assert result == "done"
    assert spent == SPENT


async def test_a_reply_without_usage_reports_nothing(temporal_address: str) -> None:
    reply = {"final_result": {"n": 1}, "transcript": None}
    result, spent = await spent_on_temporal(temporal_address, reply)
    assert result == {"n": 1}
    assert spent == td.Usage()


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        (None, None),
        ("lots", None),
        ([1, 2], None),
        ({}, td.Usage()),
        (usage_fields(SPENT), SPENT),
        # what is not a count counts as 0, as in what a CLI reports
        (
            {"input_tokens": -1, "output_tokens": 2.5, "requests": True, "cost_usd": "1"},
            td.Usage(),
        ),
        ({"input_tokens": 2**70, "cost_usd": float("inf")}, td.Usage(input_tokens=2**63 - 1)),
        ({"input_tokens": 5, "shoes": 3}, td.Usage(input_tokens=5)),
    ],
)
def test_a_replys_usage_is_read_whatever_it_holds(fields: Any, expected: td.Usage | None) -> None:
    reply = {"final_result": "x"} if fields is None else {"final_result": "x", "usage": fields}
    assert reply_usage(reply) == expected
