"""Finding runs again (contract §17): ``parent.runs()`` and the ``list_subagent_runs`` tool."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

import trio_delegate as td
from trio_delegate._tools import MAX_LISTED_RUNS

from .helpers import forever, open_parent, open_parent_lenient, raising, sleeping, sub
from .stores import WrappedStore

S = td.RunStatus
SUBAGENTS = (
    sub("quick", sleeping(1, "quick")),
    sub("slow", sleeping(5, "slow")),
    sub("broken", raising(RuntimeError("no"), after=2)),
    sub("idle", forever, timeout_seconds=None),
)


def listed(parent: td.Parent) -> list[tuple[str, S]]:
    return [(handle.run_id, handle.status) for handle in parent.runs()]


async def test_runs_are_listed_in_admission_order_with_their_status(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_parent_lenient(*SUBAGENTS) as parent:
        assert parent.runs() == ()
        slow = await parent.start("slow", "a")
        quick = await parent.start("quick", "b")
        broken = await parent.start("broken", "c")
        idle = await parent.start("idle", "d")
        assert listed(parent) == [
            (slow.run_id, S.RUNNING),
            (quick.run_id, S.RUNNING),
            (broken.run_id, S.RUNNING),
            (idle.run_id, S.RUNNING),
        ]
        await trio.sleep(3)
        # Ended runs keep their place: admission order, not settlement order.
        assert listed(parent) == [
            (slow.run_id, S.RUNNING),
            (quick.run_id, S.COMPLETED),
            (broken.run_id, S.FAILED),
            (idle.run_id, S.RUNNING),
        ]
        handles = parent.runs()
        assert type(handles) is tuple
        assert all(type(handle) is td.RunHandle for handle in handles)
        assert handles[1] == parent.status(quick.run_id)


async def test_pending_runs_are_listed_as_pending(autojump_clock: trio.testing.MockClock) -> None:
    config = td.Config(max_concurrent_runs=1, fail_closed=False)
    async with open_parent(*SUBAGENTS, config=config) as parent:
        first = await parent.start("idle", "first")
        second = await parent.start("quick", "second")
        assert listed(parent) == [(first.run_id, S.RUNNING), (second.run_id, S.PENDING)]


async def test_only_this_owners_runs_are_listed(autojump_clock: trio.testing.MockClock) -> None:
    config = td.Config(fail_closed=False)
    async with td.open_runtime(SUBAGENTS, config=config) as rt:
        async with rt.open_parent("a") as a, rt.open_parent("b") as b:
            mine = await a.delegate("quick", "mine")
            theirs = await b.delegate("quick", "theirs")
            assert listed(a) == [(mine.run_id, S.COMPLETED)]
            assert listed(b) == [(theirs.run_id, S.COMPLETED)]
        # Visibility goes by owner (contract §8): a new parent of the same owner
        # finds the runs an earlier one started, while retention holds them.
        async with rt.open_parent("a") as again:
            assert listed(again) == [(mine.run_id, S.COMPLETED)]


async def test_nested_parents_list_their_own_runs(autojump_clock: trio.testing.MockClock) -> None:
    seen: list[tuple[tuple[str, S], ...]] = []

    async def lead(ctx: td.ChildContext) -> str:
        assert ctx.parent is not None
        done = await ctx.parent.delegate("quick", "inner")
        seen.append(tuple((h.run_id, h.status) for h in ctx.parent.runs()))
        assert seen[-1] == ((done.run_id, S.COMPLETED),)
        return "led"

    async with open_parent(*SUBAGENTS, sub("lead", lead, children=("quick",))) as parent:
        outer = await parent.delegate("lead", "outer")
        assert listed(parent) == [(outer.run_id, S.COMPLETED)]  # not the nested run
    assert len(seen) == 1


class HeldAdmissions(WrappedStore):
    """A memory store whose writes wait at a gate once the test closes it."""

    def __init__(self) -> None:
        super().__init__()
        self.gate: trio.Event | None = None
        self.writing = trio.Event()

    async def write(self, records: Sequence[td.RunRecord]) -> Sequence[str] | None:
        gate = self.gate
        if gate is not None:
            self.writing.set()
            await gate.wait()
        return await self.inner.write(records)


async def test_a_run_still_being_admitted_is_not_listed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = HeldAdmissions()
    config = td.Config(fail_closed=False)
    async with (
        td.open_runtime(SUBAGENTS, store=store, config=config) as rt,
        rt.open_parent() as parent,
        trio.open_nursery() as nursery,
    ):
        first = await parent.start("idle", "first")
        handles: list[td.RunHandle] = []

        async def start() -> None:
            handles.append(await parent.start("idle", "second"))

        gate = store.gate = trio.Event()
        nursery.start_soon(start)
        await store.writing.wait()
        await trio.testing.wait_all_tasks_blocked()
        try:
            assert rt.live_runs == 2  # admitted, its record not written yet
            assert listed(parent) == [(first.run_id, S.RUNNING)]
            assert (await parent.tools().call("list_subagent_runs", {}))["runs"] == [
                {
                    "run_id": first.run_id,
                    "subagent": "idle",
                    "status": "running",
                    "task_summary": "first",
                }
            ]
        finally:
            # The write is shielded: a failed check must not leave it held.
            store.gate = None
            gate.set()
        await trio.testing.wait_all_tasks_blocked()
        (second,) = handles
        assert [run_id for run_id, _ in listed(parent)] == [first.run_id, second.run_id]


async def test_retention_decides_which_ended_runs_are_listed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = td.Config(retention_seconds=10, retention_max_runs=2, fail_closed=False)
    async with open_parent(*SUBAGENTS, config=config) as parent:
        idle = await parent.start("idle", "live runs are never evicted")
        one = await parent.delegate("quick", "one")
        two = await parent.delegate("quick", "two")
        three = await parent.delegate("quick", "three")
        # At most two ended runs are kept: the oldest ended went.
        assert [run_id for run_id, _ in listed(parent)] == [
            idle.run_id,
            two.run_id,
            three.run_id,
        ]
        await trio.sleep(9)  # two ended at 2 s: due once more than 10 s have passed
        assert [run_id for run_id, _ in listed(parent)] == [idle.run_id, two.run_id, three.run_id]
        await trio.sleep(0.5)
        # Listing itself expires what is due, as a lookup does.
        assert [run_id for run_id, _ in listed(parent)] == [idle.run_id, three.run_id]
        await trio.sleep(1)
        assert listed(parent) == [(idle.run_id, S.RUNNING)]
        with pytest.raises(td.ExpiredRunError):
            parent.status(one.run_id)


async def test_listing_does_not_observe(autojump_clock: trio.testing.MockClock) -> None:
    started: list[td.RunHandle] = []

    async def session(rt: td.Runtime) -> None:
        async with rt.open_parent() as parent:
            started.append(await parent.start("quick", "done but never waited for"))
            started.append(await parent.start("broken", "failed, never waited for"))
            quick, broken = started
            await trio.sleep(3)
            tools = parent.tools()
            for _ in range(2):
                parent.runs()
                await tools.call("list_subagent_runs", None)
            assert [h.run_id for h in parent.unobserved()] == [quick.run_id, broken.run_id]
            with pytest.raises(td.UnresolvedDelegationError):
                parent.check_resolved()
            # Its one observation is still to come, and resolves it.
            result = await parent.wait(quick.run_id)
            assert isinstance(result, td.RunResult)
            assert result.final_result == "quick"
            assert [h.run_id for h in parent.unobserved()] == [broken.run_id]

    async with td.open_runtime(SUBAGENTS) as rt:
        with pytest.raises(td.UnresolvedDelegationError) as info:
            await session(rt)
    assert [entry.run_id for entry in info.value.unresolved] == [started[1].run_id]


async def test_a_closed_parent_or_runtime_lists_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with td.open_runtime(SUBAGENTS) as rt:
        async with rt.open_parent() as parent:
            tools = parent.tools()
            await parent.delegate("quick", "before")
        with pytest.raises(td.RuntimeClosedError, match="parent 'root' is closed"):
            parent.runs()
        with pytest.raises(td.RuntimeClosedError, match="parent 'root' is closed"):
            await tools.call("list_subagent_runs", {})
        async with rt.open_parent("other") as other:
            pass
    with pytest.raises(td.RuntimeClosedError, match="runtime"):
        other.runs()


def _tool_answer_is_bounded(answer: dict[str, Any]) -> None:
    assert set(answer) == {"runs", "omitted"}
    assert len(answer["runs"]) <= MAX_LISTED_RUNS
    json.dumps(answer, allow_nan=False)


async def test_the_tool_lists_live_runs_first_then_the_newest_ended(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ended_count = MAX_LISTED_RUNS + 3
    config = td.Config(fail_closed=False, retention_max_runs=1000)
    async with open_parent(*SUBAGENTS, config=config) as parent:
        tools = parent.tools()
        early = await parent.start("idle", "early")
        ended = [(await parent.delegate("quick", f"task {n}")).run_id for n in range(ended_count)]
        late = await parent.start("idle", "  late\n\n   and   spaced  ")
        answer = await tools.call("list_subagent_runs", {})
        _tool_answer_is_bounded(answer)
        runs = answer["runs"]
        assert len(runs) == MAX_LISTED_RUNS
        assert answer["omitted"] == ended_count + 2 - MAX_LISTED_RUNS
        assert runs[:2] == [
            {
                "run_id": early.run_id,
                "subagent": "idle",
                "status": "running",
                "task_summary": "early",
            },
            {
                "run_id": late.run_id,
                "subagent": "idle",
                "status": "running",
                "task_summary": "late and spaced",
            },
        ]
        newest_first = ended[::-1][: MAX_LISTED_RUNS - 2]
        assert [entry["run_id"] for entry in runs[2:]] == newest_first
        assert runs[2] == {
            "run_id": ended[-1],
            "subagent": "quick",
            "status": "completed",
            "task_summary": f"task {ended_count - 1}",
        }
        # parent.runs() is not bounded: every run, in admission order.
        assert [h.run_id for h in parent.runs()] == [early.run_id, *ended, late.run_id]
        parent.cancel(early.run_id)
        parent.cancel(late.run_id)
        await trio.testing.wait_all_tasks_blocked()
        answer = await tools.call("list_subagent_runs", "{}")
        assert answer["runs"][0]["run_id"] == late.run_id  # ended now, and the newest
        assert answer["runs"][0]["status"] == "cancelled"


async def test_a_long_task_is_summarized(autojump_clock: trio.testing.MockClock) -> None:
    async with open_parent(*SUBAGENTS) as parent:
        done = await parent.delegate("quick", "word " * 10_000)
        (entry,) = (await parent.tools().call("list_subagent_runs", {}))["runs"]
        assert entry["task_summary"] == done.task_summary
        assert len(entry["task_summary"]) == 200
        assert entry["task_summary"].endswith("…")


async def test_the_tool_takes_no_parameters_in_any_format(
    autojump_clock: trio.testing.MockClock,
) -> None:
    empty = {"type": "object", "properties": {}, "required": [], "additionalProperties": False}
    async with open_parent(*SUBAGENTS) as parent:
        tools = parent.tools()
        assert tools.names[-1] == "list_subagent_runs"
        (neutral,) = [d for d in tools.definitions() if d.name == "list_subagent_runs"]
        assert neutral.parameters == empty
        assert "lost" in neutral.description or "no longer have" in neutral.description
        (chat,) = [
            t for t in tools.openai_chat_tools() if t["function"]["name"] == "list_subagent_runs"
        ]
        assert chat["function"]["parameters"] == empty
        assert chat["function"]["strict"] is True
        (responses,) = [
            t for t in tools.openai_responses_tools() if t["name"] == "list_subagent_runs"
        ]
        assert responses["parameters"] == empty
        (anthropic,) = [t for t in tools.anthropic_tools() if t["name"] == "list_subagent_runs"]
        assert anthropic["input_schema"] == empty
        nothing: Any
        for nothing in (None, "", "{}", {}, "  {}  "):
            assert await tools.call("list_subagent_runs", nothing) == {"runs": [], "omitted": 0}


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"run_id": "run_x"}, "list_subagent_runs takes no parameters, got 'run_id'; call it"),
        ('{"limit": 5}', "takes no parameters, got 'limit'"),
        ({f"k{n}": n for n in range(9)}, "got 'k0', 'k1', 'k2', 'k3', 'k4' and 4 more"),
        ("[]", "must be a JSON object"),
        ("null", "must be a JSON object"),
        ("{", "not valid JSON"),
        (7, "must be a JSON object"),
        ({1: 2}, "string keys"),
    ],
)
async def test_hostile_arguments_are_refused_with_what_to_do(
    autojump_clock: trio.testing.MockClock, arguments: Any, message: str
) -> None:
    async with open_parent(*SUBAGENTS) as parent:
        with pytest.raises(td.InvalidArgumentsError, match="list_subagent_runs") as info:
            await parent.tools().call("list_subagent_runs", arguments)
    assert message in str(info.value)
    assert info.value.to_payload()["error"]["type"] == "invalid_arguments"


async def test_a_closed_runtime_refuses_the_tool_whatever_the_arguments(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_parent(*SUBAGENTS) as parent:
        tools = parent.tools()
    with pytest.raises(td.RuntimeClosedError):
        await tools.call("list_subagent_runs", {"bogus": 1})


#: What a drawn run does: never ends, completes, fails, or is cancelled at once.
_KIND_NAMES = ("idle", "quick", "broken", "cancelled")
_KINDS = st.sampled_from(_KIND_NAMES)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, MAX_LISTED_RUNS + 5), st.lists(_KINDS, max_size=30))
def test_the_listing_is_parent_runs_live_first_then_newest_ended(
    done_first: int, kinds: list[str]
) -> None:
    async def main() -> None:
        config = td.Config(fail_closed=False, max_concurrent_runs=4)
        async with open_parent(*SUBAGENTS, config=config) as parent:
            admitted = [(await parent.delegate("quick", "quick")).run_id for _ in range(done_first)]
            for kind in kinds:
                handle = await parent.start("idle" if kind == "cancelled" else kind, kind)
                if kind == "cancelled":
                    parent.cancel(handle.run_id)
                admitted.append(handle.run_id)
            await trio.sleep(3)  # every quick and broken run that could start has ended
            runs = parent.runs()
            assert [h.run_id for h in runs] == admitted
            live = [h for h in runs if not h.status.is_terminal]
            ended = [h for h in runs if h.status.is_terminal]
            expected = [*live, *reversed(ended)][:MAX_LISTED_RUNS]
            answer = await parent.tools().call("list_subagent_runs", {})
            assert [(e["run_id"], e["status"]) for e in answer["runs"]] == [
                (h.run_id, h.status.value) for h in expected
            ]
            assert answer["omitted"] == len(runs) - len(expected)
            assert all(entry["task_summary"] in _KIND_NAMES for entry in answer["runs"])

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
