"""Questions, answers and progress in the stores (contract §19, §16).

A run's record carries its open questions and its latest progress; an
accepted answer reaches the child only once a committed record holds it;
another runtime sharing the store sees the question and may answer it, and
the owning runtime applies that answer as it applies a cancel request.
Two-runtime tests run in real time, as the shared-store tests do (the
stores work on threads); the rest run on the Trio clock.
"""

from __future__ import annotations

import signal
import sqlite3
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

import trio_delegate as td
from trio_delegate._stores._sqlite import SCHEMA_VERSION
from trio_delegate.lowlevel import answer_in_store

from .helpers import sub
from .stores import WrappedStore, read_line, record, runtime_id, spawn_child
from .test_shared_store import NEWS, Hosts, eventually, runtime

LENIENT = td.Config(fail_closed=False)
COLOUR = {"type": "string", "enum": ["red", "blue"]}


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def hosts(request: pytest.FixtureRequest, tmp_path: Path) -> Hosts:
    return Hosts(request.param, tmp_path, request)


async def painter(ctx: td.ChildContext) -> dict[str, Any]:
    ctx.progress("choosing", progress=1, total=3)
    try:
        colour = await ctx.ask("which colour?", schema=COLOUR)
    except td.QuestionDeclinedError as exc:
        return {"declined": exc.reason}
    return {"colour": colour}


async def result_of(parent: td.Parent, run_id: str) -> td.RunResult:
    """The run's result, waiting through the answers that say it asks (hang guard only)."""
    with trio.fail_after(NEWS):
        while True:
            answer = await parent.wait(run_id, timeout=0.2)
            if isinstance(answer, td.RunResult):
                return answer
            await trio.sleep(0.02)


def asking(parent: td.Parent, run_id: str) -> td.RunHandle | None:
    handle = parent.status(run_id)
    return handle if handle.status is td.RunStatus.INPUT_REQUIRED else None


# -- two runtimes on one store ----------------------------------------------------


async def test_another_runtime_sees_the_question_and_answers_it(hosts: Hosts) -> None:
    subagent = sub("painter", painter, asks=True)
    async with (
        runtime(hosts.store(), subagent, config=LENIENT) as host_a,
        runtime(hosts.store(), subagent, config=LENIENT) as host_b,
        host_a.open_parent("alice") as on_a,
        host_b.open_parent("alice") as on_b,
    ):
        run_id = (await on_a.start("painter", "paint the fence")).run_id
        seen = await eventually(lambda: asking(on_b, run_id))
        (question,) = seen.questions
        assert (question.run_id, question.text, question.schema) == (
            run_id,
            "which colour?",
            COLOUR,
        )
        assert question.question_id == on_a.questions()[0].question_id
        assert seen.progress == td.Progress("choosing", 1.0, 3.0, 1)
        # A wait elsewhere answers input_required at once, whatever its timeout.
        with trio.fail_after(NEWS):
            waited = await on_b.wait(run_id)
        assert isinstance(waited, td.RunHandle)
        assert waited.questions == (question,)
        # Checked here against the stored schema: the question stays open.
        with pytest.raises(td.InvalidArgumentsError, match="does not satisfy its schema"):
            on_b.answer(run_id, "green")
        ack = on_b.answer(run_id, "blue")
        assert ack == td.AnswerAck(run_id, question.question_id, True, td.RunStatus.RUNNING)
        # Answered already, as far as this runtime knows.
        assert not on_b.answer(run_id, "red", question_id=question.question_id).accepted
        assert (await result_of(on_b, run_id)).final_result == {"colour": "blue"}


async def test_another_runtime_declines_a_question(hosts: Hosts) -> None:
    subagent = sub("painter", painter, asks=True)
    async with (
        runtime(hosts.store(), subagent, config=LENIENT) as host_a,
        runtime(hosts.store(), subagent, config=LENIENT) as host_b,
        host_a.open_parent("alice") as on_a,
        host_b.open_parent("alice") as on_b,
    ):
        run_id = (await on_a.start("painter", "paint the fence")).run_id
        await eventually(lambda: asking(on_b, run_id))
        ack = on_b.decline(run_id, reason="ask the owner")
        assert ack.accepted
        assert (await result_of(on_a, run_id)).final_result == {"declined": "ask the owner"}


async def test_a_stale_or_unknown_question_is_not_accepted_elsewhere(hosts: Hosts) -> None:
    subagent = sub("painter", painter, asks=True)
    async with (
        runtime(hosts.store(), subagent, config=LENIENT) as host_a,
        runtime(hosts.store(), subagent, config=LENIENT) as host_b,
        host_a.open_parent("alice") as on_a,
        host_b.open_parent("alice") as on_b,
        host_b.open_parent("bob") as bob,
    ):
        run_id = (await on_a.start("painter", "paint")).run_id
        await eventually(lambda: asking(on_b, run_id))
        stale = td.AnswerAck(run_id, "q_" + "0" * 32, False, td.RunStatus.INPUT_REQUIRED)
        assert on_b.answer(run_id, "red", question_id=stale.question_id) == stale
        with pytest.raises(td.UnknownRunError):
            bob.answer(run_id, "red")  # another owner's run, on every host
        # Hostile answers: a DelegationError at once, and the question stays open.
        deep: Any = "red"
        for _ in range(1000):
            deep = [deep]
        with pytest.raises(td.InvalidArgumentsError):
            on_b.answer(run_id, deep)
        with pytest.raises(td.InvalidArgumentsError):
            on_b.answer(run_id, "\ud800")
        assert asking(on_b, run_id) is not None
        on_a.cancel(run_id)
        # Once the end reached host B's view, nothing is open any more.
        await eventually(lambda: on_b.status(run_id).status.is_terminal)
        assert not on_b.answer(run_id, "red").accepted


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_process_that_dies_asking_leaves_its_run_interrupted(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    hosts = Hosts(kind, tmp_path, request)
    process = await spawn_child(*hosts.location(), "ask")
    try:
        run_id = await read_line(process)
        async with (
            runtime(hosts.store(), sub("asker", painter, asks=True), config=LENIENT) as rt,
            rt.open_parent("worker") as parent,  # the child's owner
        ):
            still = await parent.wait(run_id, timeout=0)
            assert isinstance(still, td.RunHandle)
            assert still.status is td.RunStatus.INPUT_REQUIRED
            assert [q.text for q in still.questions] == ["anyone there?"]
            process.send_signal(signal.SIGKILL)
            # Until another runtime notices, the store says it asks; then it failed.
            with trio.fail_after(NEWS), pytest.raises(td.RunFailedError, match="interrupted"):
                await result_of(parent, run_id)
            assert not parent.answer(run_id, "too late").accepted
    finally:
        process.kill()
        with trio.move_on_after(10):
            await process.wait()


# -- what the store holds, on the Trio clock ------------------------------------------


class Recording(WrappedStore):
    """A memory store that keeps every record written, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[td.RunRecord] = []
        #: How long (Trio clock) each write takes to commit.
        self.delay = 0.0

    async def write(self, records: Any) -> Any:
        await trio.sleep(self.delay)
        committed = await super().write(records)
        self.written.extend(records)
        return committed

    def of(self, run_id: str) -> list[td.RunRecord]:
        return [r for r in self.written if r.run_id == run_id]


async def test_a_question_and_its_answer_are_recorded_before_the_child_has_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = Recording()
    store.delay = 0.5  # an answer must wait for its commit, however slow
    seen: dict[str, Any] = {}

    async def asker(ctx: td.ChildContext) -> str:
        answer: str = await ctx.ask("name?")
        # Durable before the child acts on it (contract §19).
        seen["answers"] = [a for r in store.of(ctx.run_id) for a in r.answers]
        return answer

    async with (
        td.open_runtime([sub("asker", asker, asks=True)], store=store) as rt,
        rt.open_parent("alice") as parent,
    ):
        run_id = (await parent.start("asker", "t")).run_id
        await trio.sleep(2)  # the question's record is written soon
        (question,) = parent.questions()
        stored = await store.get(run_id)
        assert stored is not None
        assert stored.questions == (
            {"question_id": question.question_id, "text": "name?", "schema": {"type": "string"}},
        )
        ack = parent.answer(run_id, "Ada")
        assert ack.accepted
        result = await parent.wait(run_id)
        assert result.final_result == "Ada"  # type: ignore[union-attr]
    assert seen["answers"] == [{"question_id": question.question_id, "answer": "Ada"}]
    ended = await store.get(run_id)
    assert ended is not None
    assert ended.questions == ()


async def test_progress_is_written_at_most_once_a_second(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = Recording()

    async def busy(ctx: td.ChildContext) -> str:
        for step in range(10_000):  # a hot loop of reports for ten seconds
            ctx.progress(f"step {step}", progress=step)
            await trio.sleep(0.001)
        return "done"

    async def quiet(ctx: td.ChildContext) -> str:
        await trio.sleep(10)
        return "done"

    async with (
        td.open_runtime([sub("busy", busy), sub("quiet", quiet)], store=store) as rt,
        rt.open_parent("alice") as parent,
    ):
        busy_id = (await parent.start("busy", "t")).run_id
        quiet_id = (await parent.start("quiet", "t")).run_id
        await parent.wait(busy_id)
        await parent.wait(quiet_id)
    reports = [r for r in store.of(busy_id) if r.progress is not None and not r.status.is_terminal]
    assert 5 <= len(reports) <= 11
    last = store.of(busy_id)[-1]
    assert last.status is td.RunStatus.COMPLETED
    assert last.progress == {
        "message": "step 9999",
        "progress": 9999.0,
        "total": None,
        "seq": 10000,
    }
    # A run that never reports writes what it always wrote: its admission,
    # its start and its end, and nothing about talk.
    quiet_records = store.of(quiet_id)
    assert [r.status for r in quiet_records] == [
        td.RunStatus.PENDING,
        td.RunStatus.RUNNING,
        td.RunStatus.COMPLETED,
    ]
    assert all(r.progress is None and not r.questions for r in quiet_records)


async def test_the_answers_left_on_a_run_stay_one_per_open_question(tmp_path: Path) -> None:
    for store in (td.MemoryStore(), td.SQLiteStore(tmp_path / "runs.db")):
        me = runtime_id()
        await store.attach(me)
        qid = "q_" + "1" * 32
        question = {"question_id": qid, "text": "?", "schema": {"type": "string"}}
        live = record(me, td.RunStatus.RUNNING, questions=(question,))
        await store.write([live])
        for index in range(1000):  # stale ids, and the open one again and again
            for question_id in (f"q_{index:032x}", qid):
                await store.post_answer(
                    live.run_id, {"question_id": question_id, "answer": index, "declined": False}
                )
        stored = await store.get(live.run_id)
        assert stored is not None
        # The first answer left for the open question, and nothing else.
        assert [entry["answer"] for entry in stored.answer_requests] == [0]
        assert stored.questions == (question,)
        # A terminal run takes none.
        ended = record(me, td.RunStatus.COMPLETED, run=live.run_id)
        await store.write([ended])
        after = await store.post_answer(live.run_id, {"question_id": qid, "answer": "x"})
        assert after is not None
        assert after.answer_requests == ()
        await store.detach(me)
        await store.aclose()


async def test_a_version_4_sqlite_file_is_migrated(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    me = runtime_id()
    done = record(me, td.RunStatus.COMPLETED, final_result={"kept": 1})
    store = td.SQLiteStore(db)
    await store.write([done])
    await store.aclose()
    # What version 4 made: no answer_requests column.
    conn = sqlite3.connect(db)
    try:
        conn.execute("ALTER TABLE runs DROP COLUMN answer_requests")
        conn.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")
        conn.commit()
    finally:
        conn.close()
    migrated = td.SQLiteStore(db)
    assert await migrated.get(done.run_id) == done
    await migrated.aclose()
    conn = sqlite3.connect(db)
    try:
        version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    finally:
        conn.close()
    assert version == (str(SCHEMA_VERSION),)
    assert SCHEMA_VERSION == 5


async def test_answer_in_store_answers_through_the_store_alone(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = td.MemoryStore()

    async def asker(ctx: td.ChildContext) -> Any:
        return await ctx.ask("how many?", schema={"type": "integer"})

    async with (
        td.open_runtime([sub("asker", asker, asks=True)], store=store) as rt,
        rt.open_parent("alice") as parent,
    ):
        run_id = (await parent.start("asker", "t")).run_id
        await trio.sleep(1)
        (question,) = parent.questions()
        deep: Any = 1
        for _ in range(1000):
            deep = [deep]
        for hostile in (deep, "\ud800", "three", float("nan")):
            with pytest.raises(td.InvalidArgumentsError):
                await answer_in_store(store, run_id, hostile)
        assert parent.questions() == (question,)  # still open
        with pytest.raises(td.UnknownRunError):
            await answer_in_store(store, run_id, 3, owner="bob")
        stale = await answer_in_store(store, run_id, 3, question_id="q_" + "0" * 32)
        assert not stale.accepted
        ack = await answer_in_store(store, run_id, 3, owner="alice")
        assert ack == td.AnswerAck(run_id, question.question_id, True, td.RunStatus.RUNNING)
        await trio.sleep(1)  # the owner's watcher applies it (at once, in memory)
        result = await parent.wait(run_id)
        assert result.final_result == 3  # type: ignore[union-attr]
        again = await answer_in_store(store, run_id, 4)
        assert not again.accepted


async def test_answer_in_store_refuses_what_it_cannot_use() -> None:
    store = td.MemoryStore()
    with pytest.raises(td.InvalidArgumentsError, match="run_id must be a run id"):
        await answer_in_store(store, "run_1", "x")
    with pytest.raises(td.InvalidArgumentsError, match="question_id must be a string"):
        await answer_in_store(store, record(runtime_id()).run_id, "x", question_id=5)  # type: ignore[arg-type]
    with pytest.raises(td.InvalidArgumentsError, match="reason"):
        await answer_in_store(store, record(runtime_id()).run_id, None, reason="\ud800")
    with pytest.raises(td.InvalidArgumentsError, match="takes answers"):
        await answer_in_store(WrappedStore(), record(runtime_id()).run_id, "x")
    with pytest.raises(td.UnknownRunError, match="holds no run"):
        await answer_in_store(store, record(runtime_id()).run_id, "x")


async def test_many_answers_are_recorded_without_growing_the_record(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = Recording()

    async def curious(ctx: td.ChildContext) -> int:
        total = 0
        for _ in range(500):
            total += await ctx.ask("a number?", schema={"type": "integer"})
        return total

    async with (
        td.open_runtime([sub("curious", curious, asks=True)], store=store) as rt,
        rt.open_parent("alice") as parent,
    ):
        run_id = (await parent.start("curious", "t")).run_id
        while isinstance(answer := await parent.wait(run_id), td.RunHandle):
            assert parent.answer(run_id, 2).accepted
    assert answer.final_result == 1000
    written = store.of(run_id)
    # Each answer is written once it is accepted, then never again.
    assert sum(len(r.answers) for r in written) == 500
    assert max(len(r.answers) for r in written) == 1


def test_a_stored_progress_figure_past_a_floats_range_is_left_out() -> None:
    from .stores import record, runtime_id

    live = record(runtime_id(), td.RunStatus.RUNNING)
    import attrs

    huge = attrs.evolve(live, progress={"message": "m", "progress": 10**400, "total": 3, "seq": 1})
    assert huge.progress_report() == td.Progress("m", None, 3.0, 1)


class LeftAnswers(WrappedStore):
    """A memory store whose reads of one run carry the answer requests a test
    leaves on it, as a store changed by something else would hold them."""

    def __init__(self) -> None:
        super().__init__()
        self.run_id: str | None = None
        self.requests: tuple[Any, ...] = ()

    async def changes(
        self, cursor: int | None, *, ignore_writes_of: str | None = None
    ) -> td.ChangeBatch:
        batch = await super().changes(cursor, ignore_writes_of=ignore_writes_of)
        stored = None if self.run_id is None else await self.inner.get(self.run_id)
        if stored is None:
            return batch
        left = attrs.evolve(stored, answer_requests=self.requests)
        return attrs.evolve(batch, records=(*batch.records, left))


@pytest.mark.parametrize(
    ("reason", "told"),
    [
        ("ask the owner", "ask the owner"),
        ("no \ud800", "refused: reason must be valid Unicode text: it holds a lone surrogate"),
        ("x" * 3_000_000, "refused: reason is 3000000 characters long; at most 100000"),
    ],
)
async def test_a_declines_stored_reason_is_checked_before_the_run_has_it(
    reason: str, told: str, autojump_clock: trio.testing.MockClock
) -> None:
    store = LeftAnswers()
    async with (
        td.open_runtime([sub("painter", painter, asks=True)], store=store) as rt,
        rt.open_parent("alice") as parent,
    ):
        run_id = (await parent.start("painter", "paint the fence")).run_id
        await trio.sleep(1)
        (question,) = parent.questions()
        store.run_id = run_id
        left = {"question_id": question.question_id, "declined": True, "reason": reason}
        store.requests = (left,)
        await trio.sleep(10)  # the owner's watcher polls and applies it
        result = await parent.wait(run_id)
    assert isinstance(result, td.RunResult)
    # The decline stands; a reason the runtime could not keep is replaced by
    # what is wrong with it, in a few hundred characters.
    (said,) = result.final_result.values()
    assert told in said
    assert said == reason or len(said) < 300
