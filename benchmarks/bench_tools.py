"""Row 6: the cost of one tool call through ``DelegationTools.call``.

``subagent_status`` with its arguments as a JSON string, as a model's tool
call arrives, against calling ``Parent.status`` directly in the same run:
what the dispatcher (JSON parsing, argument checks, the answer's JSON-ready
dict and the call's checkpoint) adds.
"""

from __future__ import annotations

import json

import trio

import trio_delegate as td

from . import _delegate
from ._model import Figure, Options, Row, judge
from ._timing import clock, interleaved

__all__ = ["TARGET_US", "bench"]

#: µs per subagent_status call through call() with JSON-string arguments.
TARGET_US = 30.0


async def _calls(count: int, through_tools: bool) -> float:
    # Not fail-closed: the run being looked at is cancelled when the parent closes.
    config = td.Config(fail_closed=False)
    async with (
        td.open_runtime(_delegate.subagents(), config=config) as runtime,
        runtime.open_parent() as parent,
    ):
        handle = await parent.start("sleeper", _delegate.TASK)
        tools = parent.tools()
        arguments = json.dumps({"run_id": handle.run_id})
        started = clock()
        if through_tools:
            for _ in range(count):
                await tools.call("subagent_status", arguments)
        else:
            for _ in range(count):
                parent.status(handle.run_id)
                # The same checkpoint the tool call makes, so the two differ
                # only by the dispatcher.
                await trio.lowlevel.checkpoint()
        return clock() - started


def bench(options: Options) -> Row:
    count = 20_000 if options.full else 10_000
    samples = interleaved(
        {
            "direct": lambda: trio.run(_calls, count, False),
            "call": lambda: trio.run(_calls, count, True),
        },
        options.repetitions,
        per=count,
    )
    direct = samples["direct"].scaled(1e6)
    call = samples["call"].scaled(1e6)
    return Row(
        "6",
        "Tool dispatch: DelegationTools.call('subagent_status', JSON string), µs per call",
        judge(call.median, TARGET_US, None),
        baseline=f"parent.status + checkpoint {direct.show('{:.1f}', 'µs')}",
        measured=call.show("{:.1f}", "µs"),
        comparison=f"+{call.median - direct.median:.1f} µs for the dispatcher",
        target=f"< {TARGET_US:g} µs",
        note=f"{count:,} calls per repetition; the dispatcher parses, checks every "
        "argument and builds the JSON-ready answer",
        data={"direct_us": direct.to_json(), "call_us": call.to_json(), "calls": count},
        figures=(Figure("µs per call", call.median, 0.15),),
    )
