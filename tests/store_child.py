"""A separate process for store tests: it is killed, or exits abruptly, mid-work.

Usage: ``python store_child.py DB MODE`` where MODE is

* ``start`` — start a run that never ends, print its id, then wait to be killed;
* ``wait`` — delegate a run, print its result as JSON, then ``os._exit(0)``
  before anything else (no runtime exit, no cleanup);
* ``writer N`` — delegate N runs one after another, print ``done``.
"""

from __future__ import annotations

import json
import os
import sys

import trio

import trio_delegate as td


async def forever(ctx: td.ChildContext) -> str:
    await trio.sleep_forever()


async def echo(ctx: td.ChildContext) -> dict[str, str]:
    await trio.lowlevel.checkpoint()
    return {"echo": ctx.task, "pid": str(os.getpid())}


SUBAGENTS = [td.Subagent("forever", forever), td.Subagent("echo", echo)]


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def main(db: str, mode: str, *args: str) -> None:
    store = td.SQLiteStore(db)
    config = td.Config(fail_closed=False)
    async with (
        td.open_runtime(SUBAGENTS, store=store, config=config) as rt,
        rt.open_parent("worker") as parent,
    ):
        if mode == "start":
            handle = await parent.start("forever", "never ends")
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


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2], *sys.argv[3:])
