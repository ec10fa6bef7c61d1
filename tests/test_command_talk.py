"""Command subagents talk back: progress, usage and questions on ``TRIO_DELEGATE_FD``.

stdout stays the result; the process writes JSON lines to the descriptor the
variable names and reads its answers from it. These run real processes, so
they use real time; every wait is bounded by ``trio.fail_after`` so a hang
fails instead of stalling.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.lowlevel

import trio_delegate as td
from trio_delegate._runners._command_talk import MAX_LINE_BYTES, MAX_OPEN_ASKS

from .helpers import open_parent, open_parent_lenient

PY = sys.executable
S = td.RunStatus

#: What every script starts with: the channel, and how to write and read it.
PRELUDE = """
import json, os, sys, time
talk = open(int(os.environ["TRIO_DELEGATE_FD"]), "r+b", buffering=0)
def send(message):
    talk.write((json.dumps(message) + "\\n").encode())
def receive():
    return json.loads(talk.readline())
"""


def script(tmp_path: Path, body: str, name: str = "talker") -> list[str]:
    """A Python script with the prelude; the command that runs it."""
    path = tmp_path / f"{name}.py"
    path.write_text(PRELUDE + textwrap.dedent(body))
    return [PY, str(path)]


def talker(tmp_path: Path, body: str, *, asks: bool = True, **kwargs: Any) -> td.Subagent:
    return td.Subagent("talker", td.CommandRunner(script(tmp_path, body)), asks=asks, **kwargs)


async def waiting_for_input(parent: td.Parent, run_id: str) -> td.RunHandle:
    with trio.fail_after(30):
        handle = await parent.wait(run_id, timeout=None)
    assert isinstance(handle, td.RunHandle)
    assert handle.status is S.INPUT_REQUIRED
    return handle


async def settled(parent: td.Parent, run_id: str) -> td.RunResult:
    """The run's result once it has ended (a wait answers early while it asks)."""
    with trio.fail_after(30):
        # The run's process decides when it ends: nothing here can signal it.
        while not parent.status(run_id).status.is_terminal:  # noqa: ASYNC110
            await trio.sleep(0.01)
        result = await parent.wait(run_id)
    assert isinstance(result, td.RunResult)
    return result


async def test_progress_and_usage_reach_the_run_and_stdout_stays_the_result(
    tmp_path: Path,
) -> None:
    body = """
    sys.stdin.read()
    send({"progress": {"message": "reading", "progress": 1, "total": 3}})
    send({"usage": {"requests": 1, "input_tokens": 120, "output_tokens": 30}})
    send({"progress": {"message": "  writing\\n  the   summary ", "progress": 2}})
    send({"usage": {"requests": 2, "input_tokens": 80, "cache_read_input_tokens": 50,
                    "output_tokens": 45, "reasoning_output_tokens": 5, "cost_usd": 0.1}})
    send({"usage": {"cost_usd": 0.2}})
    print("the summary")
    """
    async with open_parent(talker(tmp_path, body, asks=False)) as parent:
        with trio.fail_after(30):
            result = await parent.delegate("talker", "a document")
        assert result.final_result == "the summary"
        handle = parent.status(result.run_id)
        assert handle.progress == td.Progress("writing the summary", 2.0, None, 2)
        assert handle.usage == td.Usage(
            requests=3,
            input_tokens=200,
            output_tokens=75,
            cache_read_input_tokens=50,
            reasoning_output_tokens=5,
            cost_usd=0.3,
        )
        assert parent.usage(result.run_id) == handle.usage


async def test_progress_shows_while_the_command_runs_and_an_ask_is_answered(
    tmp_path: Path,
) -> None:
    body = """
    send({"progress": {"message": "half way", "progress": 5, "total": 10}})
    schema = {"type": "object", "properties": {"release": {"type": "string"}},
              "required": ["release"]}
    send({"ask": {"question": "Which release?", "schema": schema}, "id": 7})
    reply = receive()
    print(json.dumps(reply))
    """
    async with open_parent(talker(tmp_path, body)) as parent:
        handle = await parent.start("talker", "go")
        waiting = await waiting_for_input(parent, handle.run_id)
        assert waiting.progress == td.Progress("half way", 5.0, 10.0, 1)
        (question,) = waiting.questions
        assert question.text == "Which release?"
        assert question.schema["required"] == ["release"]
        # an answer that fails the schema is refused; the question stays open
        with pytest.raises(td.InvalidArgumentsError):
            parent.answer(handle.run_id, {"release": 2})
        ack = parent.answer(handle.run_id, {"release": "2.1 ü"})
        assert ack.accepted
        with trio.fail_after(30):
            result = await parent.wait(handle.run_id)
    assert isinstance(result, td.RunResult)
    assert json.loads(result.final_result) == {"id": 7, "answer": {"release": "2.1 ü"}}


async def test_a_declined_question_reaches_the_command_with_its_reason(tmp_path: Path) -> None:
    body = """
    send({"ask": {"question": "May I delete the cache?"}, "id": "q-1"})
    print(json.dumps(receive()))
    """
    async with open_parent(talker(tmp_path, body)) as parent:
        handle = await parent.start("talker", "go")
        await waiting_for_input(parent, handle.run_id)
        assert parent.decline(handle.run_id, reason="not today").accepted
        with trio.fail_after(30):
            result = await parent.wait(handle.run_id)
    assert isinstance(result, td.RunResult)
    reply = json.loads(result.final_result)
    assert reply["id"] == "q-1"
    assert reply["error"]["type"] == "QuestionDeclinedError"
    assert reply["error"]["reason"] == "not today"
    assert "not today" in reply["error"]["message"]


async def test_an_ask_that_times_out_or_that_nobody_can_answer_is_a_reply(
    tmp_path: Path,
) -> None:
    body = """
    send({"ask": {"question": "Anyone?", "timeout": 0.05}})
    first = receive()
    print(json.dumps(first))
    """
    async with open_parent(talker(tmp_path, body)) as parent:
        # In the background: nobody answers, the ask's own timeout passes.
        handle = await parent.start("talker", "go")
        result = await settled(parent, handle.run_id)
        reply = json.loads(result.final_result)
        assert reply["id"] is None
        assert reply["error"]["type"] == "AskTimeoutError"
        # In the foreground without on_input: nobody can answer, at once.
        with trio.fail_after(30):
            result = await parent.delegate("talker", "go")
        assert json.loads(result.final_result)["error"]["type"] == "InputUnavailableError"


async def test_on_input_answers_a_foreground_command(tmp_path: Path) -> None:
    body = """
    send({"ask": {"question": "Name a colour", "schema": {"type": "string"}}, "id": 1})
    print(receive()["answer"])
    """
    seen: list[td.Question] = []

    async def on_input(question: td.Question) -> Any:
        seen.append(question)
        return "teal"

    async with open_parent(talker(tmp_path, body)) as parent:
        with trio.fail_after(30):
            result = await parent.delegate("talker", "go", on_input=on_input)
    assert result.final_result == "teal"
    assert [question.text for question in seen] == ["Name a colour"]


async def test_several_questions_may_be_open_and_replies_carry_their_ids(
    tmp_path: Path,
) -> None:
    body = """
    send({"ask": {"question": "first?"}, "id": "a"})
    send({"ask": {"question": "second?"}, "id": "b"})
    print(json.dumps([receive(), receive()]))
    """
    async with open_parent(talker(tmp_path, body)) as parent:
        handle = await parent.start("talker", "go")
        with trio.fail_after(30):
            # The second line comes from another process: nothing here can signal it.
            while len(parent.questions()) < 2:  # noqa: ASYNC110
                await trio.sleep(0.01)
        # Each ask waits in a task of its own, and Trio runs tasks started
        # together in either order: the questions may open in either order.
        asked = {question.text: question for question in parent.questions()}
        assert sorted(asked) == ["first?", "second?"]
        parent.answer(handle.run_id, "two", question_id=asked["second?"].question_id)
        parent.answer(handle.run_id, "one", question_id=asked["first?"].question_id)
        with trio.fail_after(30):
            result = await parent.wait(handle.run_id)
    assert isinstance(result, td.RunResult)
    # Replies come as answers are applied; the ids tell them apart.
    replies = sorted(json.loads(result.final_result), key=lambda reply: reply["id"])
    assert replies == [{"id": "a", "answer": "one"}, {"id": "b", "answer": "two"}]


async def test_a_command_that_exits_with_a_question_open_withdraws_it(tmp_path: Path) -> None:
    body = """
    send({"ask": {"question": "still there?"}})
    print("gave up")
    """
    async with open_parent(talker(tmp_path, body)) as parent:
        handle = await parent.start("talker", "go")
        result = await settled(parent, handle.run_id)
        assert result.final_result == "gave up"
        assert parent.questions() == ()


async def test_a_shell_script_can_talk_with_redirections(tmp_path: Path) -> None:
    path = tmp_path / "talk.sh"
    path.write_text(
        textwrap.dedent(
            """\
            echo '{"progress": {"message": "asking"}}' >&"$TRIO_DELEGATE_FD"
            echo '{"ask": {"question": "Proceed?"}}' >&"$TRIO_DELEGATE_FD"
            read -r reply <&"$TRIO_DELEGATE_FD"
            echo "$reply"
            """
        )
    )
    # bash: dash takes only one-digit descriptors in redirections.
    sub = td.Subagent("talker", td.CommandRunner(["bash", str(path)]), asks=True)
    async with open_parent(sub) as parent:
        handle = await parent.start("talker", "go")
        waiting = await waiting_for_input(parent, handle.run_id)
        assert waiting.progress is not None
        assert waiting.progress.message == "asking"
        parent.answer(handle.run_id, "yes")
        with trio.fail_after(30):
            result = await parent.wait(handle.run_id)
    assert isinstance(result, td.RunResult)
    assert json.loads(result.final_result) == {"id": None, "answer": "yes"}


async def test_a_flood_of_progress_lines_neither_holds_the_loop_nor_loses_the_result(
    tmp_path: Path,
) -> None:
    lines = 200_000
    body = f"""
    line = b'{{"progress": {{"message": "tick"}}}}\\n'
    talk.write(line * {lines})
    print("all done")
    """
    ticks = 0

    async def ticker(done: trio.Event) -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await trio.lowlevel.checkpoint()

    async with open_parent(talker(tmp_path, body, asks=False)) as parent:
        done = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ticker, done)
            with trio.fail_after(120):
                result = await parent.delegate("talker", "go")
            done.set()
        assert result.final_result == "all done"
        progress = parent.status(result.run_id).progress
        assert progress == td.Progress("tick", None, None, lines)
    # Another task ran many times while the lines were read: reading them
    # never held the event loop for long.
    assert ticks > 100


def bad(line: bytes) -> str:
    """A script body that writes *line* raw, then would run for a minute."""
    return f"""
    talk.write({line!r} + b"\\n")
    time.sleep(60)
    print("never")
    """


HOSTILE = [
    (b"not json", "not JSON"),
    (b"\xff\xfe{}", "not UTF-8 (at byte 0)"),
    (b'{"progress": {"message": "\xed\xa0\x80"}}', "not UTF-8"),
    (b"[" * 100_000 + b"]" * 100_000, "nests too deeply"),
    (b"[1, 2]", "must be a JSON object"),
    (b'{"progress": {}, "usage": {}}', "exactly one of the keys"),
    (b'{"shout": "hi"}', "exactly one of the keys"),
    (b'{"progress": "half"}', "must be an object of fields"),
    (b'{"progress": {"percent": 3}}', "the field 'percent'"),
    (b'{"progress": {"progress": NaN}}', "NaN is not a JSON value"),
    (b'{"progress": {"progress": -1}}', "progress"),
    (b'{"progress": {"message": 3}}', "must be a string or None"),
    (b'{"usage": {"input_tokens": -5}}', "input_tokens"),
    (b'{"usage": {"input_tokens": 1.5}}', "input_tokens"),
    (b'{"usage": {"tokens": 5}}', "the field 'tokens'"),
    (b'{"progress": {}, "id": 1}', 'only an "ask" has one'),
    (b'{"ask": {"question": "x"}, "id": [1]}', "an id is a string"),
    (b'{"ask": {"question": 3}}', "ctx.ask(question)"),
    (b'{"ask": {"question": "\\ud800?"}}', "ctx.ask(question)"),
    (b'{"ask": {"question": "x", "schema": {"type": "nope"}}}', "ctx.ask(schema=...)"),
    (b'{"ask": {"question": "x", "timeout": -1}}', "ctx.ask(timeout=...)"),
]


@pytest.mark.parametrize(("line", "fragment"), HOSTILE)
async def test_a_line_that_breaks_the_protocol_fails_the_run_at_once(
    tmp_path: Path, line: bytes, fragment: str
) -> None:
    async with open_parent_lenient(talker(tmp_path, bad(line))) as parent:
        with trio.fail_after(30), pytest.raises(td.RunFailedError) as info:
            await parent.delegate("talker", "go")
    assert info.value.error_type == "CommandFailedError"
    message = str(info.value)
    assert "TRIO_DELEGATE_FD" in message or "refused" in message
    assert fragment in message
    assert "it was stopped" in message


async def test_progress_that_goes_down_fails_the_run(tmp_path: Path) -> None:
    body = """
    send({"progress": {"progress": 5}})
    send({"progress": {"progress": 4}})
    time.sleep(60)
    """
    async with open_parent_lenient(talker(tmp_path, body)) as parent:
        with trio.fail_after(30), pytest.raises(td.RunFailedError) as info:
            await parent.delegate("talker", "go")
    assert 'a "progress" line that was refused' in str(info.value)
    assert "never goes down" in str(info.value) or "below" in str(info.value)


async def test_a_subagent_without_asks_may_not_ask(tmp_path: Path) -> None:
    body = """
    send({"ask": {"question": "may I?"}})
    print(json.dumps(receive()))
    """
    async with open_parent_lenient(talker(tmp_path, body, asks=False)) as parent:
        with trio.fail_after(30), pytest.raises(td.RunFailedError) as info:
            await parent.delegate("talker", "go")
    assert 'an "ask" line that was refused' in str(info.value)
    assert "may not ask its parent questions" in str(info.value)


async def test_a_line_past_the_limit_fails_without_waiting_for_its_end(tmp_path: Path) -> None:
    # One byte past the limit, then nothing: the run fails on that byte,
    # holding no more than the limit, without waiting for a newline.
    body = f"""
    talk.write(b"x" * ({MAX_LINE_BYTES} + 1))
    time.sleep(60)
    """
    async with open_parent_lenient(talker(tmp_path, body)) as parent:
        with trio.fail_after(30), pytest.raises(td.RunFailedError) as info:
            await parent.delegate("talker", "go")
    assert f"a line longer than {MAX_LINE_BYTES} bytes" in str(info.value)


async def test_a_long_line_within_the_limit_is_read(tmp_path: Path) -> None:
    # Past what is parsed on the event loop: read on a worker thread.
    body = """
    send({"progress": {"message": "x" * 500_000}})
    print("ok")
    """
    async with open_parent(talker(tmp_path, body)) as parent:
        with trio.fail_after(30):
            result = await parent.delegate("talker", "go")
        progress = parent.status(result.run_id).progress
    assert progress is not None
    assert progress.message == "x" * 999 + "…"  # cut like every progress message


async def test_too_many_questions_at_once_fail_the_run(tmp_path: Path) -> None:
    body = f"""
    for i in range({MAX_OPEN_ASKS + 1}):
        send({{"ask": {{"question": f"q{{i}}"}}, "id": i}})
    time.sleep(60)
    """
    async with open_parent_lenient(talker(tmp_path, body)) as parent:
        handle = await parent.start("talker", "go")
        with pytest.raises(td.RunFailedError) as info:
            await settled(parent, handle.run_id)
        assert parent.questions() == ()
    assert f"more than {MAX_OPEN_ASKS} questions at once" in str(info.value)


async def test_replies_a_command_leaves_unread_count_against_the_open_questions(
    tmp_path: Path,
) -> None:
    # The command asks one question at a time, each once the previous one was
    # answered (the test counts its answers in a file), and never reads a
    # reply: the replies fill the channel, and the ones that cannot go out
    # must count as open, or they pile up in the parent without bound.
    answered = tmp_path / "answered"
    answered.write_text("0")
    body = f"""
    for i in range({4 * MAX_OPEN_ASKS}):
        while int(open({str(answered)!r}).read() or 0) < i:
            time.sleep(0.005)
        send({{"ask": {{"question": f"q{{i}}", "schema": {{"type": "string"}}}}, "id": i}})
    print("never read a reply")
    """
    async with open_parent_lenient(talker(tmp_path, body)) as parent:
        handle = await parent.start("talker", "go")
        count = 0

        async def answer_each() -> None:
            nonlocal count
            # A wait answers at once while the run asks, and else when it asks or ends.
            while isinstance(waited := await parent.wait(handle.run_id), td.RunHandle):
                for question in waited.questions:
                    parent.answer(handle.run_id, "x" * 100_000, question_id=question.question_id)
                    count += 1
                    answered.write_text(str(count))

        with trio.fail_after(60), pytest.raises(td.RunFailedError) as info:
            await answer_each()
    assert f"more than {MAX_OPEN_ASKS} questions at once" in str(info.value)
    assert MAX_OPEN_ASKS <= count < 2 * MAX_OPEN_ASKS


async def test_a_usage_report_past_the_budget_stops_the_command(tmp_path: Path) -> None:
    body = """
    send({"usage": {"input_tokens": 500, "output_tokens": 600}})
    time.sleep(60)
    """
    sub = talker(tmp_path, body, budget=td.Budget(max_total_tokens=1000))
    async with open_parent_lenient(sub) as parent:
        with trio.fail_after(30), pytest.raises(td.RunCancelledError) as info:
            await parent.delegate("talker", "go")
        assert parent.usage(info.value.run_id) == td.Usage(input_tokens=500, output_tokens=600)
    assert isinstance(info.value.__cause__, td.BudgetExceededError)


async def test_a_lone_surrogate_escaped_in_a_progress_message_is_kept_escaped(
    tmp_path: Path,
) -> None:
    body = """
    talk.write(b'{"progress": {"message": "half \\\\ud800 way"}}\\n')
    print("ok")
    """
    async with open_parent(talker(tmp_path, body)) as parent:
        with trio.fail_after(30):
            result = await parent.delegate("talker", "go")
        progress = parent.status(result.run_id).progress
    assert result.final_result == "ok"
    assert progress is not None
    assert progress.message == "half \\ud800 way"


#: The page that documents the protocol, read at import (no file access in a test's loop).
PROTOCOL_PAGE = (Path(__file__).resolve().parent.parent / "docs" / "mcp.md").read_text()


async def test_the_documented_python_example_talks_as_the_docs_say(tmp_path: Path) -> None:
    example = PROTOCOL_PAGE.split("In Python:\n\n```python\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "example.py"
    path.write_text(example)
    sub = td.Subagent("example", td.CommandRunner([PY, str(path)]), asks=True)
    async with open_parent(sub) as parent:
        handle = await parent.start("example", "a task")
        waiting = await waiting_for_input(parent, handle.run_id)
        assert waiting.progress == td.Progress("reading", 1.0, 2.0, 1)
        assert waiting.questions[0].text == "Which branch?"
        parent.answer(handle.run_id, "dev")
        result = await settled(parent, handle.run_id)
        assert result.final_result == "dev"
        assert parent.usage(handle.run_id) == td.Usage(
            requests=1, input_tokens=900, output_tokens=120
        )
