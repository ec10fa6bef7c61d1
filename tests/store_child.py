"""A separate process for store tests: it is killed, or exits abruptly, mid-work.

Usage: ``python -m tests.store_child [--schema NAME] STORE MODE [ARGS]`` (from the
project's folder), where STORE
is an SQLite file or a ``postgresql://`` URI (then ``--schema`` names the
store's schema), and MODE is

* ``start`` — start a run that never ends, print its id, then wait to be killed;
* ``ask`` — start a run that asks a question nobody answers, print its id
  once the store holds the question, then wait to be killed;
* ``wait`` — delegate a run, print its result as JSON, then ``os._exit(0)``
  before anything else (no runtime exit, no cleanup);
* ``writer N`` — delegate N runs one after another, print ``done``;
* ``attach-live N`` — through the store alone: attach a runtime, write N live
  runs, print ``{"runtime_id": …, "run_ids": […]}``, then wait to be killed;
* ``write-many N`` — through the store alone: attach a runtime, write N runs,
  each admitted in one transaction and ended in another, print their ids as
  JSON, detach.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import trio

import trio_delegate as td
from tests.stores import record, runtime_id


async def forever(ctx: td.ChildContext) -> str:
    await trio.sleep_forever()


async def echo(ctx: td.ChildContext) -> dict[str, str]:
    await trio.lowlevel.checkpoint()
    return {"echo": ctx.task, "pid": str(os.getpid())}


async def asker(ctx: td.ChildContext) -> str:
    answer: str = await ctx.ask("anyone there?")
    return answer


SUBAGENTS = [
    td.Subagent("forever", forever),
    td.Subagent("echo", echo),
    td.Subagent("asker", asker, asks=True),
]


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def open_store(location: str, schema: str | None) -> Any:
    if location.startswith("postgresql://"):
        return td.PostgresStore(location, schema=schema or "trio_delegate")
    return td.SQLiteStore(location)


async def through_runtime(store: Any, mode: str, *args: str) -> None:
    config = td.Config(fail_closed=False)
    async with (
        td.open_runtime(SUBAGENTS, store=store, config=config) as rt,
        rt.open_parent("worker") as parent,
    ):
        if mode == "start":
            handle = await parent.start("forever", "never ends")
            say(handle.run_id)
            await trio.sleep_forever()
        elif mode == "ask":
            handle = await parent.start("asker", "asks and waits")
            # The store is written by this runtime's writer task: poll it.
            while not (await store.get(handle.run_id)).questions:  # noqa: ASYNC110
                await trio.sleep(0.05)
            say(handle.run_id)
            await trio.sleep_forever()
        elif mode == "wait":
            result = await parent.delegate("echo", "remember me")
            say(json.dumps({"run_id": result.run_id, "final_result": result.final_result}))
            os._exit(0)
        elif mode == "writer":
            for index in range(int(args[0])):
                await parent.delegate("echo", f"{os.getpid()}-{index}")
            say("done")
        else:
            raise SystemExit(f"unknown mode {mode!r}")


async def through_store(store: Any, mode: str, count: int) -> None:
    me = runtime_id()
    await store.attach(me)
    if mode == "attach-live":
        live = [record(me, td.RunStatus.RUNNING, task=f"live {i}") for i in range(count)]
        await store.write(live)
        say(json.dumps({"runtime_id": me, "run_ids": [r.run_id for r in live]}))
        await trio.sleep_forever()
    written = []
    for index in range(count):
        admitted = record(me, task=f"{os.getpid()}-{index}")
        await store.write([admitted])
        ended = record(
            me, td.RunStatus.COMPLETED, run=admitted.run_id, task=admitted.task, final_result=index
        )
        await store.write([ended])
        written.append(admitted.run_id)
    await store.detach(me)
    await store.aclose()
    say(json.dumps(written))


async def main(argv: list[str]) -> None:
    schema = None
    if argv[0] == "--schema":
        schema, argv = argv[1], argv[2:]
    location, mode, *args = argv
    store = open_store(location, schema)
    if mode in ("attach-live", "write-many"):
        await through_store(store, mode, int(args[0]))
    else:
        await through_runtime(store, mode, *args)


if __name__ == "__main__":
    trio.run(main, sys.argv[1:])
