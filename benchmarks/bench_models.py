"""Row 15: model subagents (``td.model_runner``) against the provider's SDK called directly.

Both sides talk to the same fake Anthropic Messages API (``tests/fakes``),
an HTTP server on 127.0.0.1 served from a thread of the same process, which
answers every conversation with four tool calls and then a text: five model
turns, each a non-streamed ``messages.create``. The timings read the
process's CPU time, the fake's thread included, so each side pays the same
server work per turn; waiting on the socket costs neither.

* 15a — CPU time per model turn: ``parent.delegate`` of a model subagent
  (``td.model_runner("anthropic:...", tools=[lookup])``), against a loop
  written on ``anthropic.AsyncAnthropic`` that makes the same requests
  (the same tool definition, the conversation grown the same way, the tool
  called with the model's arguments) with one client for every
  conversation, as such a loop is usually written. The SDK loop opening a
  client per conversation, as the runner opens one per run, is in the note:
  the runner's own work per turn is the difference to that one.
* 15b — memory per live model run, 1,000 live (each fresh interpreter):
  every run has made its first model call and is parked in the tool the
  model called, holding its conversation and its client. Against the SDK
  loop parked the same way with a client per conversation, and with one
  client shared by all. Blocked in a tool, not in a held model call: the
  fake would hold a thread of its own per held request in the measured
  process.

Run as ``python -m benchmarks.bench_models [--full] [--passes N]`` it
measures these rows alone; ``python -m benchmarks.bench_models memory KIND
RUNS`` is one process of row 15b, which prints its answer as JSON.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final, NoReturn

import trio

import trio_delegate as td

from ._model import MIB, Figure, Options, Row, Sample, Status, judge, paired_ratios
from ._probe import resident_bytes
from ._standalone import run_alone
from ._timing import clock, interleaved

__all__ = ["LIVE_RUNS", "QUICK_LIVE_RUNS", "TURN_RATIO", "bench"]

#: Runner over the SDK called directly, CPU time per model turn: the target.
TURN_RATIO: Final = 1.05

#: Model turns per conversation: four tool calls, then the answer.
TURNS: Final = 5
#: Live model runs of row 15b: the full suite's, and the quick suite's (setting up
#: a run costs its client, some 20 ms of CPU).
LIVE_RUNS: Final = 1_000
QUICK_LIVE_RUNS: Final = 200
#: Runs started at once while row 15b sets up: the fake's listening socket
#: keeps a short queue of connections waiting to be accepted.
_WAVE: Final = 5
#: The longest a wave may take to park (a run that failed would never park).
_WAVE_SECONDS: Final = 60.0

_MODEL: Final = "claude-bench"
_TASK: Final = "Look the question up, then answer it."
_ROOT = Path(__file__).resolve().parent.parent
_KINDS: Final = ("sdk", "runner", "shared")


async def lookup(query: str) -> str:
    """Look *query* up in the notes; the best match first."""
    return f"notes on {query}"


def _fake(conversations: int) -> Any:
    """A fake Messages API scripted for *conversations* conversations of :data:`TURNS` turns."""
    from tests.fakes import Call, FakeAnthropic, Reply, Turn

    def step(turn: Turn) -> Reply:
        done = len(turn.tool_results)
        if done < TURNS - 1:
            return Reply(calls=(Call("lookup", {"query": f"topic {done}"}),))
        return Reply(text="The answer, from the notes.")

    return FakeAnthropic([step] * (conversations * TURNS))


def _runner(url: str, tool: Callable[..., Awaitable[str]]) -> td.ModelRunner:
    return td.model_runner(
        f"anthropic:{_MODEL}",
        tools=[tool],
        base_url=url,
        api_key_env="",
        max_retries=0,
        max_turns=TURNS,
    )


def _tool_definitions(url: str, tool: Callable[..., Awaitable[str]]) -> list[dict[str, Any]]:
    """The tool as the runner offers it, so both sides send the same requests."""
    definition = _runner(url, tool).tools[0].definition
    return [
        {
            "name": definition.name,
            "description": definition.description,
            "input_schema": definition.parameters,
        }
    ]


def _client(url: str) -> Any:
    import anthropic

    return anthropic.AsyncAnthropic(api_key="none", base_url=url, max_retries=0)


async def _conversation(
    client: Any, tools: list[dict[str, Any]], tool: Callable[..., Awaitable[str]]
) -> str:
    """The tool loop written on the SDK: call, run the tools, send the results back."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": _TASK}]
    while True:
        message = await client.messages.create(
            model=_MODEL, max_tokens=4096, messages=messages, tools=tools
        )
        messages.append({"role": "assistant", "content": message.content})
        calls = [block for block in message.content if block.type == "tool_use"]
        if not calls:
            return "".join(block.text for block in message.content if block.type == "text")
        results = [
            {"type": "tool_result", "tool_use_id": block.id, "content": await tool(**block.input)}
            for block in calls
        ]
        messages.append({"role": "user", "content": results})


async def _sdk_loop(url: str, conversations: int, shared: bool) -> float:
    tools = _tool_definitions(url, lookup)
    started = clock()
    if shared:
        async with _client(url) as client:
            for _ in range(conversations):
                await _conversation(client, tools, lookup)
    else:
        for _ in range(conversations):
            async with _client(url) as client:
                await _conversation(client, tools, lookup)
    return clock() - started


async def _runner_loop(url: str, conversations: int) -> float:
    subagents = [td.Subagent("model", _runner(url, lookup), description="looks things up")]
    async with td.open_runtime(subagents) as runtime, runtime.open_parent() as parent:
        started = clock()
        for _ in range(conversations):
            result = await parent.delegate("model", _TASK)
            if result.final_result != "The answer, from the notes.":
                raise RuntimeError(f"the model run answered {result.final_result!r}")
        return clock() - started


def _served(conversations: int, scenario: Callable[[str], float]) -> float:
    """Run *scenario* against a fresh fake (started and stopped outside the timing)."""
    with _fake(conversations) as fake:
        seconds = scenario(fake.url)
        if fake.problems or fake.remaining:
            raise RuntimeError(f"the fake model was not used as scripted: {fake.problems}")
    return seconds


def turn_row(options: Options) -> Row:
    conversations = 24 if options.full else 12
    turns = conversations * TURNS
    samples = interleaved(
        {
            "shared": lambda: _served(
                conversations, lambda url: trio.run(_sdk_loop, url, conversations, True)
            ),
            "runner": lambda: _served(
                conversations, lambda url: trio.run(_runner_loop, url, conversations)
            ),
            "sdk": lambda: _served(
                conversations, lambda url: trio.run(_sdk_loop, url, conversations, False)
            ),
        },
        options.repetitions,
        per=turns,
    )
    us = {name: sample.scaled(1e6) for name, sample in samples.items()}
    ratio = paired_ratios(us["runner"], us["shared"])
    own = paired_ratios(us["runner"], us["sdk"])
    client = (us["sdk"].median - us["shared"].median) * TURNS / 1000
    return Row(
        "15a",
        f"Model runner: CPU time per model turn, {conversations} runs of {TURNS} turns "
        "(fake Anthropic API)",
        judge(ratio.median, TURN_RATIO, None),
        baseline=f"SDK loop, one client {us['shared'].show('{:.0f}', 'µs')}\n"
        f"a client per conversation {us['sdk'].show('{:.0f}', 'µs')}",
        measured=us["runner"].show("{:.0f}", "µs"),
        comparison=f"{ratio.show('{:.2f}', 'x')} one client\n"
        f"{own.show('{:.2f}', 'x')} a client per conversation",
        target=f"≤ {TURN_RATIO:g}x",
        note=(
            "µs of CPU time per model turn (the fake server's thread included), median "
            "[min-max] of the repetitions, ratios of paired repetitions; the runner opens an "
            "anthropic.AsyncAnthropic per run on its runner's one TLS context (a connection "
            f"of its own); a client per conversation in the SDK loop costs {client:.1f} ms of "
            "CPU, most of it the TLS context its HTTP client builds (the CA bundle loaded)"
        ),
        data={
            "conversations": conversations,
            "turns_per_conversation": TURNS,
            **{name: sample.to_json() for name, sample in us.items()},
            "ratio": ratio.to_json(),
            "ratio_client_per_conversation": own.to_json(),
            "client_ms_per_conversation": client,
        },
        figures=(
            Figure("turn ratio, one client", ratio.median, 0.10),
            Figure("turn ratio, a client per conversation", own.median, 0.05),
        ),
    )


# -- 15b: memory per live model run --------------------------------------------------


async def _hold(kind: str, url: str, runs: int, measure: Callable[[str], None]) -> None:
    """Park *runs* model conversations of *kind* in their tool; *measure* before and after."""
    entered = 0
    wave_done = trio.Event()
    parked = trio.Event()  # never set: the probe leaves by os._exit
    target = 0

    # Named as the tool the fake model calls; this one parks the run.
    async def lookup(query: str) -> str:
        """Look *query* up in the notes; the best match first."""
        nonlocal entered
        entered += 1
        if entered == target:
            wave_done.set()
        await parked.wait()
        return query

    async def start_all(start_one: Callable[[], Awaitable[None]]) -> None:
        nonlocal target, wave_done
        async with trio.open_nursery() as nursery:
            measure("empty")
            while target < runs:
                wave_done = trio.Event()
                target = min(target + _WAVE, runs)
                for _ in range(target - entered):
                    nursery.start_soon(start_one)
                with trio.fail_after(_WAVE_SECONDS):
                    await wave_done.wait()
            measure("live")

    if kind == "runner":
        subagents = [td.Subagent("model", _runner(url, lookup), description="holds")]
        config = td.Config(max_concurrent_runs=runs, max_live_runs=runs)
        async with (
            td.open_runtime(subagents, config=config) as runtime,
            runtime.open_parent() as parent,
        ):

            async def start_one() -> None:
                await parent.start("model", _TASK)

            await start_all(start_one)
        return
    tools = _tool_definitions(url, lookup)
    if kind == "shared":
        async with _client(url) as client:

            async def start_one() -> None:
                await _conversation(client, tools, lookup)

            await start_all(start_one)
        return

    async def own_client() -> None:
        async with _client(url) as client:
            await _conversation(client, tools, lookup)

    await start_all(own_client)


def _answer(result: dict[str, Any]) -> NoReturn:
    sys.stdout.write(json.dumps(result))
    sys.stdout.flush()
    os._exit(0)


def _memory_probe(kind: str, runs: int) -> NoReturn:
    warm_up = 8
    with _fake(warm_up + runs) as fake:
        # A first process-wide round: imports, the SDK's lazy modules, caches.
        trio.run(_sdk_loop, fake.url, 1, True)
        trio.run(_runner_loop, fake.url, 1)
        marks: dict[str, int] = {}

        def measure(label: str) -> None:
            # The fake's request log is not the runs' memory.
            fake.requests.clear()
            fake.turns.clear()
            gc.collect()
            marks[label] = resident_bytes()
            if label == "live":
                _answer(
                    {
                        "kind": kind,
                        "runs": runs,
                        "rss_empty": marks["empty"],
                        "rss_live": marks["live"],
                        "mib_per_run": (marks["live"] - marks["empty"]) / runs / MIB,
                    }
                )

        trio.run(_hold, kind, fake.url, runs, measure)
    raise RuntimeError("the memory probe ended without measuring")


def _probe(kind: str, runs: int) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_models", "memory", kind, str(runs)],
        capture_output=True,
        text=True,
        cwd=_ROOT,
        check=False,
        timeout=900,
    )
    if done.returncode != 0:
        last = done.stderr.strip().splitlines()[-1:] or ["(no output)"]
        raise RuntimeError(f"the model memory probe ({kind}) exited {done.returncode}: {last[0]}")
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def memory_row(options: Options) -> Row:
    runs = LIVE_RUNS if options.full else QUICK_LIVE_RUNS
    # One process per kind and pass: at full size each takes 20-30 s to set up,
    # and the full suite's three passes are its repetitions.
    per_run = {kind: [_probe(kind, runs)["mib_per_run"]] for kind in _KINDS}
    mib = {kind: Sample.of(values) for kind, values in per_run.items()}
    over_sdk = mib["runner"].median - mib["sdk"].median
    over_shared = mib["runner"].median - mib["shared"].median
    return Row(
        "15b",
        f"Memory per live model run, {runs:,} live, each parked in a tool after its first "
        "model call",
        Status.INFO,
        baseline=f"SDK loop, a client each {mib['sdk'].show('{:.3f}', 'MiB')}\n"
        f"one shared client {mib['shared'].show('{:.3f}', 'MiB')}",
        measured=mib["runner"].show("{:.3f}", "MiB"),
        comparison=f"{over_sdk:+.3f} MiB a client each\n{over_shared:+.3f} MiB one client",
        note=(
            "resident memory per live run (RSS, fresh interpreter per kind, fake Anthropic "
            "API in the same process, its request log cleared before each reading); a run "
            "holds its anthropic.AsyncAnthropic and its connection; the TLS context is its "
            "runner's, one for all its runs"
        ),
        data={
            "runs": runs,
            "mib_per_run": {kind: sample.to_json() for kind, sample in mib.items()},
            "over_client_each_mib": over_sdk,
            "over_shared_mib": over_shared,
        },
        figures=(
            Figure("MiB per run", mib["runner"].median, 0.05, absolute=True),
            Figure("MiB over the SDK, a client each", over_sdk, 0.05, absolute=True),
        ),
    )


def bench(options: Options) -> list[Row]:
    try:
        import anthropic  # noqa: F401
    except ImportError:
        note = "needs the anthropic SDK (the dev extra)"
        return [Row("15", "Model subagents", Status.NOT_AVAILABLE, note=note)]
    return [turn_row(options), memory_row(options)]


if __name__ == "__main__":
    if sys.argv[1:2] == ["memory"]:
        _memory_probe(sys.argv[2], int(sys.argv[3]))
    sys.exit(run_alone("bench_models", bench, sys.argv[1:]))
