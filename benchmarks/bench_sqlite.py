"""Rows 8 and 8b: the cost of a durable SQLiteStore, and where its time goes.

Row 8: 64 background runs live at a time (each of 64 tasks starts a run and
waits for it, over and over), with an SQLiteStore against no store, on the
wall clock. Each run writes two records (admission, end) and ``start`` waits
for the admission's commit: without group commit that is two fsyncs per run.
The writer batches whatever is pending into one commit.

Row 8b: the store's own work per record, measured on the store directly with
batches shaped like the runtime's (64 admissions, then their 64 ends):
encoding to JSON, the SQL statements, and the commit (WAL, fsync).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import attrs

import trio_delegate as td
from trio_delegate._core._persistence import WriteStats
from trio_delegate._stores._codec import encode_record
from trio_delegate._stores._protocol import wall_clock_now

from . import _delegate
from ._model import Figure, Options, Row, Status, judge, paired_ratios
from ._stores import NullStore, concurrent_runs
from ._timing import interleaved

__all__ = ["CONCURRENCY", "TARGET", "bench"]

#: Store cost over no store at CONCURRENCY live runs: the target (no must-not-exceed bound).
TARGET = 2.0
CONCURRENCY = 64
_BATCH = 64


def bench(options: Options) -> list[Row]:
    return [_throughput_row(options), _split_row(options)]


def _throughput_row(options: Options) -> Row:
    runs = 12_800 if options.full else 6_400
    seen: list[WriteStats] = []
    with tempfile.TemporaryDirectory(prefix="trio-delegate-bench-") as tmp:
        counter = iter(range(10**6))

        def sqlite_store() -> td.SQLiteStore:
            # A fresh file each time: the file's size must not grow between repetitions.
            folder = Path(tmp) / str(next(counter))
            folder.mkdir()
            return td.SQLiteStore(folder / "runs.db")

        samples = interleaved(
            {
                # The pair the row's ratio compares first: back to back in every repetition.
                "memory": lambda: concurrent_runs(CONCURRENCY, runs, lambda: None, []),
                "sqlite": lambda: concurrent_runs(CONCURRENCY, runs, sqlite_store, seen),
                "null": lambda: concurrent_runs(CONCURRENCY, runs, NullStore, []),
            },
            options.repetitions,
            per=runs,
        )
    memory = samples["memory"].scaled(1e6)
    null = samples["null"].scaled(1e6)
    sqlite = samples["sqlite"].scaled(1e6)
    ratio = paired_ratios(sqlite, memory)
    null_ratio = paired_ratios(null, memory)
    mean = sum(stat.mean_batch for stat in seen) / len(seen)
    largest = max(stat.largest_batch for stat in seen)
    return Row(
        "8",
        f"SQLiteStore with group commit vs no store: {CONCURRENCY} background runs live at "
        f"a time, {runs:,} runs (wall µs per run)",
        judge(ratio.median, TARGET, None),
        baseline=f"no store {memory.show('{:.1f}', 'µs')}\n"
        f"a store that keeps nothing {null.show('{:.1f}', 'µs')}",
        measured=f"SQLiteStore {sqlite.show('{:.1f}', 'µs')}",
        comparison=f"{ratio.show('{:.2f}', 'x')} no store\n"
        f"(keeping nothing: {null_ratio.show('{:.2f}', 'x')})",
        target=f"≤ {TARGET:g}x",
        note=f"records per commit: mean {mean:.1f}, largest {largest}; WAL, "
        "synchronous=FULL, one writer thread. A store that keeps nothing shows the "
        "runtime's own share of durability (records built, commits awaited); row 8b splits "
        "the store's",
        data={
            "concurrency": CONCURRENCY,
            "memory_us": memory.to_json(),
            "null_store_us": null.to_json(),
            "null_ratio": null_ratio.to_json(),
            "sqlite_us": sqlite.to_json(),
            "ratio": ratio.to_json(),
            "mean_batch": mean,
            "largest_batch": largest,
        },
        # Wall clock, a writer thread and a disk: passes agree less closely.
        figures=(Figure("ratio", ratio.median, 0.15),),
    )


def _records(
    runtime_id: str, first: int, count: int
) -> tuple[list[td.RunRecord], list[td.RunRecord]]:
    """*count* admission records, and the end records of the same runs, as a runtime writes them."""
    now = wall_clock_now()
    admitted = [
        td.RunRecord(
            run_id=f"run_{first + index:032x}",
            runtime_id=runtime_id,
            owner="root",
            subagent=_delegate.SUBAGENT,
            task=_delegate.TASK,
            task_summary=_delegate.TASK,
            status=td.RunStatus.PENDING,
            admitted_at=now,
        )
        for index in range(count)
    ]
    ended = [
        attrs.evolve(record, status=td.RunStatus.COMPLETED, ended_at=wall_clock_now())
        for record in admitted
    ]
    return admitted, ended


def _split(batches: int) -> dict[str, dict[str, float]]:
    """µs per record of each part of a write, for admissions and for ends."""
    spent: dict[str, dict[str, list[float]]] = {
        kind: {"encode": [], "statements": [], "commit": []} for kind in ("admission", "end")
    }
    with tempfile.TemporaryDirectory(prefix="trio-delegate-bench-") as tmp:
        store = td.SQLiteStore(Path(tmp) / "runs.db")
        conn = store._connection()
        where, heads = str(store.path), store._heads
        for batch in range(batches):
            admitted, ended = _records(f"rt_{batch:032x}", batch * _BATCH, _BATCH)
            for kind, records in (("admission", admitted), ("end", ended)):
                started = time.perf_counter()
                encoded = [encode_record(record, where, heads) for record in records]
                encoded_at = time.perf_counter()
                conn.execute("BEGIN IMMEDIATE")
                store._store(conn, encoded, own=True)
                stored_at = time.perf_counter()
                conn.execute("COMMIT")
                committed_at = time.perf_counter()
                heads.committed(encoded)
                parts = spent[kind]
                parts["encode"].append((encoded_at - started) / _BATCH * 1e6)
                parts["statements"].append((stored_at - encoded_at) / _BATCH * 1e6)
                parts["commit"].append((committed_at - stored_at) / _BATCH * 1e6)
        conn.close()
    return {
        kind: {part: statistics.median(values) for part, values in parts.items()}
        for kind, parts in spent.items()
    }


def _split_row(options: Options) -> Row:
    split = _split(200 if options.full else 100)

    def show(kind: str) -> str:
        parts = split[kind]
        return (
            f"{kind}: encode {parts['encode']:.1f}, statements {parts['statements']:.1f}, "
            f"commit {parts['commit']:.1f}"
        )

    per_run = sum(sum(parts.values()) for parts in split.values())
    return Row(
        "8b",
        f"Where SQLiteStore's time goes per record, batches of {_BATCH} (µs per record)",
        Status.INFO,
        measured=f"{show('admission')}\n{show('end')}",
        comparison=f"{per_run:.1f} µs per run (2 records)",
        note="median of the batches; an end rewrites only the changing part of its record "
        "(its admission-time part was written once); commit = WAL append and fsync",
        data={"per_record_us": split, "per_run_us": per_run, "batch": _BATCH},
        figures=(Figure("µs per run", per_run, 0.25),),
    )
