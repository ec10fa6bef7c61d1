"""The store contract (§12, §15, §16), the same for MemoryStore, SQLiteStore and PostgresStore.

Each test runs against every store; "another handle" is what another process
would hold (the memory store, living in this process only, has one).
"""

from __future__ import annotations

import json
import math
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

import trio_delegate as td
from trio_delegate._stores._postgres import PostgresReader
from trio_delegate._stores._protocol import INTERRUPTED_ERROR_TYPE
from trio_delegate._stores._sqlite import SQLiteReader

from .stores import KINDS, StoreKit, read_line, record, run_id, runtime_id, spawn_child

ON_DISK = ("sqlite", "postgres")


def _target(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Path, str, str]:
    """What a StoreKit of the kind *request* is parametrised with needs."""
    kind: str = request.param
    if kind != "postgres":
        return kind, tmp_path, "", ""
    server = request.getfixturevalue("pg_server")
    return kind, tmp_path, server.dsn(), request.getfixturevalue("pg_schema")


@pytest.fixture(params=KINDS)
def store_target(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Path, str, str]:
    return _target(request, tmp_path)


@pytest.fixture
async def kit(store_target: tuple[str, Path, str, str]) -> AsyncIterator[StoreKit]:
    made = StoreKit(*store_target)
    try:
        yield made
    finally:
        await made.aclose()


def nested(depth: int) -> Any:
    value: Any = "bottom"
    for level in range(depth):
        value = {"level": level, "inner": [value]} if level % 2 else [value, level]
    return value


# Valid data that is hard to keep exactly: NUL (PostgreSQL text cannot hold
# it), escapes, every plane of Unicode, numbers at the edges of their types.
AWKWARD: dict[str, Any] = {
    "nul": "before\x00after",
    "backslashes": "\\0 \\\\ \\u0000",
    "unicode": "héllo ✓ 𝄞 עברית 👩‍👩‍👧 \u2028\u2029",
    "controls": "\x1b[31mred\x1b[0m\t\r\n\x7f\x85",
    "big_ints": [10**300, -(2**1023), 2**63, -(2**63) - 1, 0],
    "floats": [0.1, -0.0, 1e308, 5e-324, 1.7976931348623157e308, -2.5],
    "empties": [{}, [], "", None, False, True],
    "deep": nested(60),
}


async def test_is_a_result_store(kit: StoreKit) -> None:
    store = kit.handle()
    assert isinstance(store, td.ResultStore)
    assert 0 < store.poll_interval <= 1.0
    if kit.kind == "postgres":
        assert store.lease_seconds == 30.0
    else:
        assert store.lease_seconds is None


async def test_what_is_read_equals_what_was_written(kit: StoreKit) -> None:
    writer, reader = kit.handle(), kit.handle()
    me = runtime_id()
    owners = ["owner\x00nul", "owner\\0nul", "plain"]
    records = [
        record(
            me,
            td.RunStatus.COMPLETED,
            owner=owner,
            task=f"task {AWKWARD['unicode']} {AWKWARD['nul']}",
            history=({"role": "user", "content": AWKWARD},),
            final_result=AWKWARD,
            transcript=({"role": "assistant", "content": AWKWARD["deep"]},),
            started_at="2030-01-01T00:00:00.500+00:00",
            deadline_at=1_900_000_000.123456789,
        )
        for owner in owners
    ]
    live = record(me, td.RunStatus.RUNNING, error_message=AWKWARD["controls"])
    await writer.write([*records, live])
    for written in [*records, live]:
        assert await reader.get(written.run_id) == written
    stored = await reader.get(records[0].run_id)
    assert stored is not None
    assert math.copysign(1.0, stored.final_result["floats"][1]) == -1.0  # -0.0 stays -0.0
    # Filtering by owner tells apart owners an escape could confuse.
    for owner, written in zip(owners, records, strict=True):
        assert await reader.list_runs(owner=owner) == [written]
    assert await reader.list_runs() == [live, *reversed(records)]
    assert await reader.list_runs(status=td.RunStatus.RUNNING) == [live]
    assert await reader.list_runs(limit=1) == [live]


async def test_a_terminal_record_keeps_its_usage(kit: StoreKit) -> None:
    writer, reader = kit.handle(), kit.handle()
    me = runtime_id()
    usage = td.Usage(requests=2**63 - 1, input_tokens=7, reasoning_output_tokens=1, cost_usd=0.1)
    spent = record(me, td.RunStatus.CANCELLED, error_message="by a budget stop", usage=usage)
    quiet = record(me, td.RunStatus.COMPLETED, final_result=1)
    await writer.write([spent, quiet])
    assert await reader.get(spent.run_id) == spent
    read = await reader.get(quiet.run_id)
    assert read is not None
    assert read.usage is None


async def test_a_terminal_record_never_changes(kit: StoreKit) -> None:
    store = kit.handle()
    me = runtime_id()
    pending = record(me)
    await store.write([pending])
    running = attrs.evolve(pending, status=td.RunStatus.RUNNING, started_at="t", deadline_at=9.5)
    await store.write([running])
    assert await store.get(pending.run_id) == running
    completed = attrs.evolve(running, status=td.RunStatus.COMPLETED, final_result=1, ended_at="e")
    await store.write([completed])
    # Later writes of that run (a runtime writing the end of a run another one
    # already marked interrupted, say) are ignored: all of them.
    await store.write([attrs.evolve(completed, status=td.RunStatus.FAILED, error_type="X")])
    await store.write([running])
    await store.write([pending, attrs.evolve(completed, final_result=2)])
    assert await store.get(pending.run_id) == completed
    assert await kit.handle().get(pending.run_id) == completed


async def test_one_batch_acts_as_its_records_written_one_after_another(kit: StoreKit) -> None:
    store = kit.handle()
    me = runtime_id()
    pending = record(me)
    running = attrs.evolve(pending, status=td.RunStatus.RUNNING, cancel_requested=True)
    completed = attrs.evolve(pending, status=td.RunStatus.COMPLETED, final_result=1, ended_at="e")
    failed = attrs.evolve(completed, status=td.RunStatus.FAILED, final_result=None)
    other = record(me)
    await store.write([pending, other, running, completed, failed, pending])
    assert await store.get(pending.run_id) == attrs.evolve(completed, cancel_requested=True)
    assert await store.get(other.run_id) == other


async def test_sticky_flags_are_never_cleared(kit: StoreKit) -> None:
    store, other = kit.handle(), kit.handle()
    me = runtime_id()
    live = record(me, td.RunStatus.RUNNING)
    await store.write([live])
    requested = await other.request_cancel(live.run_id)
    assert requested == attrs.evolve(live, cancel_requested=True)
    assert await other.request_cancel(live.run_id) == requested  # idempotent
    await other.mark_observed(live.run_id)
    # The owning runtime writes the run on, unaware: the flags stay.
    await store.write([live])
    flagged = attrs.evolve(live, cancel_requested=True, observed=True)
    assert await store.get(live.run_id) == flagged
    ended = attrs.evolve(live, status=td.RunStatus.CANCELLED, ended_at="e")
    await store.write([ended])
    assert await other.get(live.run_id) == attrs.evolve(ended, cancel_requested=True, observed=True)

    done = record(me, td.RunStatus.COMPLETED, final_result="ok")
    await store.write([done])
    # A request on an ended run changes nothing; observation is recorded.
    assert await other.request_cancel(done.run_id) == done
    await other.mark_observed(done.run_id)
    assert await store.get(done.run_id) == attrs.evolve(done, observed=True)

    assert await other.request_cancel(run_id()) is None
    await other.mark_observed(run_id())  # unknown: nothing happens
    assert await other.request_cancel("../not-an-id") is None
    assert await other.get("run_' OR 1=1 --") is None


async def test_changes_report_every_change_in_order(kit: StoreKit) -> None:
    store, watcher = kit.handle(), kit.handle()
    me = runtime_id()
    start = await watcher.changes(None)
    assert start.records == ()
    first, second = record(me), record(me)
    await store.write([first, second])
    ended = attrs.evolve(first, status=td.RunStatus.COMPLETED, final_result=[1], ended_at="e")
    await store.write([ended])
    await watcher.request_cancel(second.run_id)
    batch = await watcher.changes(start.cursor)
    # Each record once, in its current form, in the order of its latest change.
    assert batch.records == (ended, attrs.evolve(second, cancel_requested=True))
    assert batch.cursor > start.cursor
    assert await watcher.changes(batch.cursor) == td.ChangeBatch(batch.cursor, ())
    assert (await watcher.changes(None)).cursor == batch.cursor
    await watcher.mark_observed(first.run_id)
    assert (await watcher.changes(batch.cursor)).records == (attrs.evolve(ended, observed=True),)


async def test_changes_can_leave_out_what_a_runtime_wrote_itself(kit: StoreKit) -> None:
    store, watcher = kit.handle(), kit.handle()
    assert isinstance(watcher, td.MemoryStore | td.SQLiteStore | td.PostgresStore)
    me, other = runtime_id(), runtime_id()
    assert getattr(watcher, "ignores_writes", False) is True
    start = (await watcher.changes(None)).cursor
    mine, flagged, theirs = record(me), record(me), record(other)
    await store.write([mine, flagged])
    await store.write([theirs])
    batch = await watcher.changes(start, ignore_writes_of=me)
    assert batch.records == (theirs,)
    # The cursor moves past what was left out: it is not read again.
    assert batch.cursor == (await watcher.changes(None)).cursor
    assert (await watcher.changes(batch.cursor, ignore_writes_of=me)).records == ()
    # Without the argument, every change shows.
    assert [r.run_id for r in (await watcher.changes(start)).records] == [
        mine.run_id,
        flagged.run_id,
        theirs.run_id,
    ]
    # A flag someone else set is news; so is my own later write that leaves
    # in place a flag my record did not carry.
    await watcher.request_cancel(flagged.run_id)
    flagged_now = attrs.evolve(flagged, cancel_requested=True)
    cursor = batch.cursor
    batch = await watcher.changes(cursor, ignore_writes_of=me)
    assert batch.records == (flagged_now,)
    running = attrs.evolve(flagged, status=td.RunStatus.RUNNING, started_at="s")
    await store.write([running])
    batch = await watcher.changes(batch.cursor, ignore_writes_of=me)
    assert batch.records == (attrs.evolve(running, cancel_requested=True),)
    # Ending my own unflagged run is not; observing it (someone else) is.
    ended = attrs.evolve(mine, status=td.RunStatus.COMPLETED, final_result=1, ended_at="e")
    await store.write([ended])
    assert (await watcher.changes(batch.cursor, ignore_writes_of=me)).records == ()
    await watcher.mark_observed(mine.run_id)
    observed = (await watcher.changes(batch.cursor, ignore_writes_of=me)).records
    assert observed == (attrs.evolve(ended, observed=True),)
    # The other runtime sees all of mine.
    seen = (await watcher.changes(start, ignore_writes_of=other)).records
    assert {r.run_id for r in seen} == {mine.run_id, flagged.run_id}


async def test_wait_changes_is_not_woken_by_a_runtimes_own_writes(kit: StoreKit) -> None:
    store, watcher = kit.handle(), kit.handle()
    assert isinstance(watcher, td.MemoryStore | td.SQLiteStore | td.PostgresStore)
    me = runtime_id()
    cursor = (await watcher.changes(None)).cursor
    with trio.fail_after(30):
        # A store told by notifications listens from now on (what was
        # committed before counts as news, its writer unknown).
        await watcher.wait_changes(cursor, 0.05, ignore_writes_of=me)
    await store.write([record(me)])
    with trio.fail_after(30):
        started = trio.current_time()
        await watcher.wait_changes(cursor, 0.2, ignore_writes_of=me)
    assert trio.current_time() - started >= 0.2  # timed out: nothing new for me

    async def write_soon() -> None:
        await trio.sleep(0.1)
        await store.write([record(me)])  # still nothing for me
        await trio.sleep(0.1)
        await store.write([record(runtime_id())])  # news

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(write_soon)
            started = trio.current_time()
            await watcher.wait_changes(cursor, 30, ignore_writes_of=me)
    # Woken by the news (its wait would have lasted 30 s), and not before it.
    assert 0.2 <= trio.current_time() - started < 15
    assert len((await watcher.changes(cursor, ignore_writes_of=me)).records) == 1


def _surrogate() -> str:
    return "lone \ud800 surrogate"


UNENCODABLE: dict[str, dict[str, Any]] = {
    "lone surrogate in the task": {"task": _surrogate()},
    "lone surrogate in the result": {"final_result": {"text": _surrogate()}},
    "lone surrogate in the owner": {"owner": _surrogate()},
    "nested 1,000 deep": {"final_result": nested(1000)},
    "NaN": {"final_result": {"score": math.nan}},
    "infinity": {"transcript": ({"t": -math.inf},)},
    "not JSON at all": {"final_result": {1, 2}},
}


@pytest.mark.parametrize("bad", list(UNENCODABLE))
async def test_an_unencodable_record_fails_its_batch_cleanly(kit: StoreKit, bad: str) -> None:
    store = kit.handle()
    me = runtime_id()
    good = record(me, td.RunStatus.COMPLETED, final_result="fine")
    fields = {"status": td.RunStatus.COMPLETED, **UNENCODABLE[bad]}
    broken = record(me, **fields)
    with pytest.raises(td.StoreError) as info:
        await store.write([good, broken])
    assert info.value.run_id == broken.run_id
    assert broken.run_id in str(info.value)
    assert await store.get(good.run_id) is None  # nothing of the batch was written
    assert await store.get(broken.run_id) is None
    await store.write([good])  # and the store goes on
    assert await kit.handle().get(good.run_id) == good


@pytest.mark.parametrize(
    "fields",
    [
        {"run": "../../etc/passwd"},
        {"run": "run_" + "A" * 32},
        {"replaces": "run_nope"},
        {"runtime": "rt_../../victim"},
    ],
    ids=["path run id", "uppercase run id", "malformed replaces", "path runtime id"],
)
async def test_a_record_with_malformed_ids_is_refused(
    kit: StoreKit, fields: dict[str, Any]
) -> None:
    store = kit.handle()
    fields = dict(fields)
    runtime = fields.pop("runtime", runtime_id())
    bad = record(runtime, **fields)
    with pytest.raises(td.StoreError, match="not an id a runtime made"):
        await store.write([bad])
    assert await store.list_runs() == []


@pytest.mark.parametrize("method", ["attach", "sweep"])
async def test_a_malformed_runtime_id_is_refused(kit: StoreKit, method: str) -> None:
    store = kit.handle()
    with pytest.raises(td.StoreError, match="rt_ and 32 lowercase hex"):
        await getattr(store, method)("rt_../../victim")


async def test_sweep_marks_the_live_runs_of_a_gone_runtime(kit: StoreKit) -> None:
    first, second = kit.handle(), kit.handle()
    gone, alive = runtime_id(), runtime_id()
    await first.attach(gone)
    live = [record(gone), record(gone, td.RunStatus.RUNNING, started_at="s", deadline_at=1.0)]
    done = record(gone, td.RunStatus.COMPLETED, final_result=3)
    await first.write([*live, done])
    snapshot = await second.attach(alive)
    assert snapshot.interrupted == ()  # its runtime is alive
    assert (done.run_id, td.StoredRun("owner", "worker", td.RunStatus.COMPLETED)) in (
        snapshot.terminal
    )
    assert await second.sweep(alive) == ()
    # Its runtime goes away without settling them (what a killed process does;
    # the tests with real processes kill them).
    await first.detach(gone)
    marked = await second.sweep(alive)
    assert sorted(marked) == sorted(r.run_id for r in live)
    for before in live:
        after = await second.get(before.run_id)
        assert after is not None
        assert after.status is td.RunStatus.FAILED
        assert after.error_type == INTERRUPTED_ERROR_TYPE
        assert f"while it was {before.status.value}" in (after.error_message or "")
        assert (
            attrs.evolve(
                after, status=before.status, error_type=None, error_message=None, ended_at=None
            )
            == before
        )
    assert await second.get(done.run_id) == done
    assert await second.sweep(alive) == ()
    await second.detach(alive)


async def test_wait_changes_wakes_on_a_change_and_honours_its_timeout(kit: StoreKit) -> None:
    store, other = kit.handle(), kit.handle()
    cursor = (await store.changes(None)).cursor
    with trio.fail_after(30):
        started = trio.current_time()
        await store.wait_changes(cursor, 0.2)
    assert trio.current_time() - started >= 0.2

    async def write_soon() -> None:
        await trio.sleep(0.1)
        await other.write([record(runtime_id())])

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(write_soon)
            started = trio.current_time()
            await store.wait_changes(cursor, 30)
    # Woken by the change, not the timeout (30 s): a bound of real time
    # generous for a busy machine, and still short of the timeout.
    assert trio.current_time() - started < 15
    assert len((await store.changes(cursor)).records) == 1
    with trio.fail_after(15):
        await store.wait_changes(cursor, 30)  # changes exist already: not the timeout


async def test_every_method_is_a_checkpoint(kit: StoreKit) -> None:
    store = kit.handle()
    me = runtime_id()
    live = record(me)
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: store.attach(me),
        lambda: store.write([live]),
        lambda: store.get(live.run_id),
        lambda: store.list_runs(),
        lambda: store.sweep(me),
        lambda: store.changes(None),
        lambda: store.changes(0),
        lambda: store.wait_changes(0, 0),
        lambda: store.request_cancel(live.run_id),
        lambda: store.mark_observed(live.run_id),
        lambda: store.write([attrs.evolve(live, status=td.RunStatus.CANCELLED)]),
        lambda: store.detach(me),
    ]
    for call in calls:
        with trio.testing.assert_checkpoints():
            await call()


@pytest.mark.parametrize(
    ("method", "args"),
    [
        ("changes", (-1,)),
        ("changes", ("3",)),
        ("wait_changes", (0, -1)),
        ("wait_changes", (None, 1)),
        # Numbers that do not fit (§15): a cursor past 64 bits, a 400-digit timeout.
        ("changes", (2**63,)),
        ("changes", (10**400,)),
        ("wait_changes", (10**400, 1)),
        ("wait_changes", (0, 10**400)),
    ],
)
async def test_bad_cursors_and_timeouts_are_store_errors(
    kit: StoreKit, method: str, args: tuple[Any, ...]
) -> None:
    with pytest.raises(td.StoreError):
        await getattr(kit.handle(), method)(*args)


@pytest.fixture(params=ON_DISK)
def disk_target(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Path, str, str]:
    return _target(request, tmp_path)


async def test_a_retention_longer_than_the_calendar_prunes_nothing(
    disk_target: tuple[str, Path, str, str],
) -> None:
    # 1e308 seconds reaches back past year 1: no run is that old. Before, the
    # cutoff overflowed and every write failed with a StoreError.
    kit = StoreKit(*disk_target)

    async def done(ctx: td.ChildContext) -> str:
        return ctx.task

    try:
        store = kit.handle(retention_seconds=1e308)
        async with (
            td.open_runtime([td.Subagent("done", done)], store=store) as rt,
            rt.open_parent("a") as parent,
        ):
            result = await parent.delegate("done", "kept")
        reopened = kit.handle(retention_seconds=1e308)
        async with (
            td.open_runtime([td.Subagent("done", done)], store=reopened) as rt,
            rt.open_parent("a") as parent,
        ):
            assert await parent.wait(result.run_id) == result
    finally:
        await kit.aclose()


async def test_changes_skip_nothing_under_two_writer_processes(
    disk_target: tuple[str, Path, str, str],
) -> None:
    kit = StoreKit(*disk_target)
    watcher = kit.handle()
    try:
        cursor = (await watcher.changes(None)).cursor
        latest: dict[str, td.RunRecord] = {}
        per_process = 150
        writers = [
            await spawn_child(*kit.child_args(), "write-many", str(per_process)) for _ in range(2)
        ]
        written: list[str] = []

        async def collect(process: trio.Process) -> None:
            written.extend(json.loads(await read_line(process, timeout=60)))

        async with trio.open_nursery() as nursery:
            for process in writers:
                nursery.start_soon(collect, process)
            # Read as they write, as fast as the store answers: a change
            # numbered before another but committed after it would be missed.
            with trio.fail_after(60):
                while len(written) < 2 * per_process:
                    batch = await watcher.changes(cursor)
                    assert batch.cursor >= cursor
                    cursor = batch.cursor
                    for seen in batch.records:
                        before = latest.get(seen.run_id)
                        # Never back from an end to a live state.
                        assert not (
                            before and before.status.is_terminal and not seen.status.is_terminal
                        )
                        latest[seen.run_id] = seen
                    await trio.lowlevel.checkpoint()
        for process in writers:
            assert await process.wait() == 0
        batch = await watcher.changes(cursor)
        for seen in batch.records:
            latest[seen.run_id] = seen
        assert sorted(latest) == sorted(written)
        assert all(seen.status is td.RunStatus.COMPLETED for seen in latest.values())
        # And the rows are consistent: every run once, as it ended.
        stored = await watcher.list_runs(limit=1000)
        assert sorted(r.run_id for r in stored) == sorted(written)
        assert {r.run_id: r for r in stored} == latest
    finally:
        await kit.aclose()


async def test_sweep_marks_the_runs_of_a_killed_process_at_once(
    disk_target: tuple[str, Path, str, str],
) -> None:
    kit = StoreKit(*disk_target)
    survivor, me = kit.handle(), runtime_id()
    try:
        await survivor.attach(me)
        child = await spawn_child(*kit.child_args(), "attach-live", "3")
        told = json.loads(await read_line(child))
        assert await survivor.sweep(me) == ()  # alive: its runs are left alone
        child.send_signal(signal.SIGKILL)
        with trio.fail_after(10):
            await child.wait()
            # The kernel (or the server) drops its lock as it dies: the very
            # next sweep sees it gone; polling only waits for the server to
            # notice the closed connection.
            while not (marked := await survivor.sweep(me)):  # noqa: ASYNC110 - another process
                await trio.sleep(0.005)
        assert sorted(marked) == sorted(told["run_ids"])
        for run in told["run_ids"]:
            stored = await survivor.get(run)
            assert stored is not None
            assert stored.status is td.RunStatus.FAILED
            assert stored.error_type == INTERRUPTED_ERROR_TYPE
            assert stored.runtime_id == told["runtime_id"]
        await survivor.detach(me)
    finally:
        await kit.aclose()


async def test_text_no_record_can_hold_finds_nothing(
    disk_target: tuple[str, Path, str, str],
) -> None:
    # A lone surrogate (what a command line's undecodable bytes become) is no
    # owner or run id of any record: nothing is found, for the store and for
    # its read-only reader alike, and the store is not blamed for it.
    kit = StoreKit(*disk_target)
    store = kit.handle()
    try:
        written = record(runtime_id(), td.RunStatus.COMPLETED)
        await store.write([written])
        reader: SQLiteReader | PostgresReader = (
            SQLiteReader(kit.path)
            if kit.kind == "sqlite"
            else PostgresReader(kit.dsn, schema=kit.schema)
        )
        try:
            for bad in ("\udc80", "owner\udcff"):
                assert await store.list_runs(owner=bad) == []
                assert await store.get(bad) is None
                assert reader.list_runs(owner=bad) == []
                assert reader.get(bad) is None
            assert reader.list_runs(owner="owner") == [written]
            assert reader.get(written.run_id) == written
        finally:
            reader.close()
    finally:
        await kit.aclose()


async def _ignored(store: td.ResultStore, records: list[td.RunRecord]) -> list[str]:
    """The runs whose ending *store*'s write of *records* says it ignored, sorted."""
    answer = await store.write(records)
    assert answer is not None  # every store of this package can tell
    return sorted(answer)


async def test_write_names_the_endings_it_ignored(kit: StoreKit) -> None:
    # A terminal record never changes; a later, different ending of the run is
    # not kept, and write says so (decided in its own transaction), for a
    # handle that wrote the run before and for one that never saw it.
    store, me = kit.handle(), runtime_id()
    await store.attach(me)
    admitted = record(me)
    running = attrs.evolve(admitted, status=td.RunStatus.RUNNING, started_at="2030-01-01T00:00:00")
    ended = attrs.evolve(
        running,
        status=td.RunStatus.COMPLETED,
        final_result={"answer": 42},
        ended_at="2030-01-01T00:00:01.000+00:00",
    )
    other_ending = attrs.evolve(
        running,
        status=td.RunStatus.FAILED,
        error_type=INTERRUPTED_ERROR_TYPE,
        error_message="interrupted",
        ended_at="2030-01-01T00:00:02.000+00:00",
    )
    assert await _ignored(store, [admitted]) == []
    assert await _ignored(store, [running]) == []
    assert await _ignored(store, [ended]) == []  # the first ending
    assert await _ignored(store, [ended]) == []  # the same ending again
    assert await _ignored(store, [running]) == []  # no ending: nothing to adopt
    fresh = record(me, td.RunStatus.COMPLETED, final_result="first")
    live = record(me, td.RunStatus.RUNNING)
    assert await _ignored(store, [fresh, other_ending, live]) == [admitted.run_id]
    assert await store.get(admitted.run_id) == ended
    assert await store.get(fresh.run_id) == fresh
    another = kit.handle()  # what another process would hold
    ignored = await _ignored(another, [other_ending, attrs.evolve(fresh, final_result="x")])
    assert ignored == sorted([admitted.run_id, fresh.run_id])
    assert await _ignored(another, [ended, fresh]) == []
    assert await another.get(admitted.run_id) == ended
    assert await another.get(fresh.run_id) == fresh
    await store.detach(me)
