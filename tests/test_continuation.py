"""Continuations in memory (contract §12): a new run carrying a conversation on."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

import trio_delegate as td
from trio_delegate._core._conversation import conversation, conversation_json
from trio_delegate._json import CanonicalJson


async def chat(ctx: td.ChildContext) -> dict[str, Any]:
    await trio.sleep(1)
    return {"reply": ctx.task.upper(), "seen": len(ctx.history)}


async def transcribing(ctx: td.ChildContext) -> td.Output:
    await trio.sleep(1)
    transcript = [
        *ctx.history,
        {"role": "user", "content": ctx.task},
        {"role": "tool", "content": "looked it up"},
        {"role": "assistant", "content": f"answer to {ctx.task}"},
    ]
    return td.Output(f"answer to {ctx.task}", transcript=transcript)


async def failing(ctx: td.ChildContext) -> str:
    await trio.sleep(1)
    raise RuntimeError("nope")


async def sleepy(ctx: td.ChildContext) -> str:
    await trio.sleep(100)
    return "done"


SUBAGENTS = [
    td.Subagent("chat", chat),
    td.Subagent("scribe", transcribing),
    td.Subagent("failing", failing),
    td.Subagent("sleepy", sleepy),
]


async def test_continuation_is_a_new_run_with_synthesized_history(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[td.ChildContext] = []

    async def recording(ctx: td.ChildContext) -> str:
        seen.append(ctx)
        await trio.lowlevel.checkpoint()
        return f"re: {ctx.task}"

    async with (
        td.open_runtime([td.Subagent("rec", recording)]) as rt,
        rt.open_parent() as parent,
    ):
        first = await parent.delegate("rec", "hello")
        second = await parent.continue_run(first.run_id, "and then?")
    assert isinstance(second, td.RunResult)
    assert second.run_id != first.run_id
    assert second.subagent == "rec"
    assert second.final_result == "re: and then?"
    assert seen[0].history == ()
    assert seen[1].task == "and then?"
    assert seen[1].history == (
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "re: hello"},
    )


async def test_a_carried_conversation_is_the_synthesized_one_sized_in_utf8(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[tuple[Any, ...]] = []

    async def chatting(ctx: td.ChildContext) -> dict[str, Any]:
        seen.append(ctx.history)
        return await chat(ctx)

    task = 'café ☕ \\ "quoted"'
    async with (
        td.open_runtime([td.Subagent("chat", chatting)]) as rt,
        rt.open_parent() as parent,
    ):
        first = await parent.delegate("chat", task)
        second = await parent.continue_run(first.run_id, "encore", background=True)
        assert isinstance(second, td.RunHandle)
        await parent.wait(second.run_id)
    assert list(seen[1]) == conversation([], task, True, first.final_result)
    # The conversation is spliced from canonical JSON texts: its size (what
    # the limits count) is that of its UTF-8 text.
    result = CanonicalJson.of(first.final_result, max_depth=64)
    carried = conversation_json(None, ((task, result),))
    assert carried.size == len(carried.text.encode("utf-8"))
    assert carried.copy() == list(seen[1])


async def test_transcript_is_the_whole_history(autojump_clock: trio.testing.MockClock) -> None:
    async with td.open_runtime(SUBAGENTS) as rt, rt.open_parent() as parent:
        first = await parent.delegate("scribe", "q1")
        second = await parent.continue_run(first.run_id, "q2")
        third = await parent.continue_run(second.run_id, "q3")
    assert isinstance(third, td.RunResult)
    assert third.final_result == "answer to q3"
    # Chained continuations accumulate: q1 and q2 (three entries each) came before q3.
    histories: list[tuple[Any, ...]] = []

    async def scribe(ctx: td.ChildContext) -> td.Output:
        histories.append(ctx.history)
        return await transcribing(ctx)

    async with (
        td.open_runtime([td.Subagent("scribe", scribe)]) as rt,
        rt.open_parent() as parent,
    ):
        a = await parent.delegate("scribe", "q1")
        b = await parent.continue_run(a.run_id, "q2")
        assert isinstance(b, td.RunResult)
        c = await parent.continue_run(b.run_id, "q3", background=True)
        assert isinstance(c, td.RunHandle)
        await parent.wait(c.run_id)
        assert [entry["content"] for entry in histories[2]] == [
            "q1",
            "looked it up",
            "answer to q1",
            "q2",
            "looked it up",
            "answer to q2",
        ]


async def test_chained_synthesized_history_accumulates(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with td.open_runtime(SUBAGENTS) as rt, rt.open_parent() as parent:
        first = await parent.delegate("chat", "a")
        second = await parent.continue_run(first.run_id, "b")
        third = await parent.continue_run(second.run_id, "c")
    assert isinstance(third, td.RunResult)
    assert third.final_result == {"reply": "C", "seen": 4}


async def test_background_continuation_returns_a_handle(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with td.open_runtime(SUBAGENTS) as rt, rt.open_parent() as parent:
        first = await parent.delegate("chat", "a")
        handle = await parent.continue_run(first.run_id, "b", background=True)
        assert isinstance(handle, td.RunHandle)
        assert handle.status is td.RunStatus.RUNNING
        result = await parent.wait(handle.run_id)
    assert isinstance(result, td.RunResult)
    assert result.final_result == {"reply": "B", "seen": 2}


async def test_live_run_cannot_be_continued(autojump_clock: trio.testing.MockClock) -> None:
    config = td.Config(fail_closed=False)
    async with td.open_runtime(SUBAGENTS, config=config) as rt, rt.open_parent() as parent:
        handle = await parent.start("sleepy", "t")
        with pytest.raises(td.InvalidArgumentsError, match="still running"):
            await parent.continue_run(handle.run_id, "more")
        assert rt.live_runs == 1
        parent.cancel(handle.run_id)
        with pytest.raises(td.RunCancelledError):
            await parent.wait(handle.run_id)
        # Once it has ended it can be continued.
        again = await parent.continue_run(handle.run_id, "more", background=True)
        assert isinstance(again, td.RunHandle)
        assert again.status is td.RunStatus.RUNNING


async def test_failed_run_continues_with_its_task_only(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[tuple[Any, ...]] = []

    async def first_fails(ctx: td.ChildContext) -> str:
        seen.append(ctx.history)
        await trio.lowlevel.checkpoint()
        if not ctx.history:
            raise RuntimeError("flaky")
        return "ok"

    async with (
        td.open_runtime(
            [td.Subagent("flaky", first_fails)], config=td.Config(fail_closed=False)
        ) as rt,
        rt.open_parent() as parent,
    ):
        with pytest.raises(td.RunFailedError) as info:
            await parent.delegate("flaky", "try")
        failed_id = info.value.run_id
        assert failed_id is not None
        result = await parent.continue_run(failed_id, "try again")
    assert isinstance(result, td.RunResult)
    assert seen[1] == ({"role": "user", "content": "try"},)


async def test_continuing_an_unknown_run_is_an_error() -> None:
    async with td.open_runtime(SUBAGENTS) as rt, rt.open_parent() as parent:
        with pytest.raises(td.UnknownRunError):
            await parent.continue_run("run_nope", "hi")


async def test_continuation_checks_its_arguments(autojump_clock: trio.testing.MockClock) -> None:
    async with td.open_runtime(SUBAGENTS) as rt, rt.open_parent() as parent:
        first = await parent.delegate("chat", "a")
        with pytest.raises(td.InvalidArgumentsError, match="message"):
            await parent.continue_run(first.run_id, "   ")
        with pytest.raises(td.InvalidArgumentsError, match="background"):
            await parent.continue_run(first.run_id, "b", background="yes")  # type: ignore[arg-type]
        assert rt.live_runs == 0


async def test_continuation_of_another_parents_run_is_unknown(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with td.open_runtime(SUBAGENTS) as rt, rt.open_parent("alice") as alice:
        first = await alice.delegate("chat", "a")
        async with rt.open_parent("bob") as bob:
            with pytest.raises(td.UnknownRunError):
                await bob.continue_run(first.run_id, "b")


async def test_foreground_continuation_observes_the_new_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with td.open_runtime(SUBAGENTS) as rt, rt.open_parent() as parent:
        first = await parent.delegate("chat", "a")
        await parent.continue_run(first.run_id, "b")
        parent.check_resolved()
