"""A host that wakes its model when background work ends (contract §17).

The model starts two runs in the background and keeps talking. The host
follows ``parent.settled()``; at each new turn it puts a short notice in
front of the model for every run in ``parent.unobserved()`` ("run … completed:
call wait_subagent to read it"), and the model reads each one with
``wait_subagent``. Neither the stream nor the notices observe a run: until
the model has waited, the parent cannot claim completion.

Runs offline, on virtual time: ``python examples/wakeup_host.py``.
"""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

import trio_delegate as td


async def researcher(ctx: td.ChildContext) -> dict[str, str]:
    await trio.sleep(30)  # the real work: a model, tools, ...
    return {"finding": f"three sources agree on {ctx.task!r}"}


async def checker(ctx: td.ChildContext) -> str:
    await trio.sleep(10)
    return "the draft's numbers add up"


class ScriptedChatModel:
    """Stands in for a language model: one list of tool calls per turn."""

    def __init__(self) -> None:
        self.turn = 0

    def respond(self, notices: list[str]) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
        """What the model says and which tools it calls, given the host's notices."""
        self.turn += 1
        if self.turn == 1:
            return "I'll have both looked into and keep going.", [
                (
                    "delegate_task",
                    {"subagent": "researcher", "task": "tariffs", "background": True},
                ),
                ("delegate_task", {"subagent": "checker", "task": "draft v2", "background": True}),
            ]
        calls = [("wait_subagent", {"run_id": notice.split()[1]}) for notice in notices]
        if calls:
            return "A run finished: let me read it.", calls
        return "Still drafting the introduction meanwhile.", []


async def main() -> None:
    subagents = [
        td.Subagent("researcher", researcher, description="Finds and checks sources."),
        td.Subagent("checker", checker, description="Checks a draft's numbers."),
    ]
    model = ScriptedChatModel()
    async with td.open_runtime(subagents) as rt, rt.open_parent("session") as parent:
        tools = parent.tools()
        woken = trio.Event()

        async def follow() -> None:
            nonlocal woken
            async for handle in parent.settled():
                print(f"  [host] {handle.run_id[:12]}… ({handle.subagent}) {handle.status}")
                woken.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(follow)
            for _ in range(8):
                notices = [
                    f"run {h.run_id} ({h.subagent}) {h.status.value}: call wait_subagent to read it"
                    for h in parent.unobserved()
                ]
                for notice in notices:
                    print(f"  [notice] {notice}")
                said, calls = model.respond(notices)
                print(f"{trio.current_time():5.1f} s  model: {said}")
                for name, arguments in calls:
                    answer = await tools.call(name, arguments)
                    print(f"         {name} -> {answer}")
                try:
                    parent.check_resolved()
                except td.UnresolvedDelegationError as exc:
                    print(f"         (not done yet: {len(exc.unresolved)} unresolved run(s))")
                else:
                    if model.turn > 1:
                        print("         every run observed: the parent may claim completion")
                        break
                # The model keeps talking; the host wakes it early when a run settles.
                with trio.move_on_after(15):
                    await woken.wait()
                woken = trio.Event()
            nursery.cancel_scope.cancel()


if __name__ == "__main__":
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
