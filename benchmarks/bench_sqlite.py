"""Row 8: background throughput with a durable SQLiteStore against no store.

Each run writes two records (admission, end), and ``start`` waits for the
admission's commit: without group commit that is two fsyncs per run. The
writer batches whatever is pending into one commit, so the cost per run
falls as runs overlap; the row reports the batch sizes seen.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import trio

import trio_delegate as td
from trio_delegate._core._persistence import WriteStats

from . import _delegate
from ._model import Options, Row, judge, paired_ratios
from ._timing import interleaved

__all__ = ["TARGET", "bench"]

#: Store cost over no store: the target (there is no must-not-exceed bound).
TARGET = 2.0


async def _background(runs: int, folder: Path | None, stats: list[WriteStats]) -> float:
    store = td.SQLiteStore(folder / "runs.db") if folder is not None else None
    config = _delegate.roomy_config(runs)
    started = trio.current_time()
    async with (
        td.open_runtime(_delegate.subagents(), config=config, store=store) as runtime,
        runtime.open_parent() as parent,
    ):
        async with trio.open_nursery() as nursery:
            for _ in range(runs):
                nursery.start_soon(parent.delegate, _delegate.SUBAGENT, _delegate.TASK)
        persister = runtime._persister
        if persister is not None:
            stats.append(persister.stats)
    return trio.current_time() - started


def bench(options: Options) -> Row:
    runs = 5_000 if options.full else 2_000
    seen: list[WriteStats] = []
    with tempfile.TemporaryDirectory(prefix="trio-delegate-bench-") as tmp:
        counter = iter(range(10**6))

        def stored() -> float:
            # A fresh file each time: the file's size must not grow between repetitions.
            folder = Path(tmp) / str(next(counter))
            folder.mkdir()
            return trio.run(_background, runs, folder, seen)

        samples = interleaved(
            {"memory": lambda: trio.run(_background, runs, None, seen), "sqlite": stored},
            options.repetitions,
            per=runs,
        )
    memory = samples["memory"].scaled(1e6)
    sqlite = samples["sqlite"].scaled(1e6)
    ratio = paired_ratios(sqlite, memory)
    mean = sum(stat.mean_batch for stat in seen) / len(seen)
    largest = max(stat.largest_batch for stat in seen)
    return Row(
        "8",
        f"SQLiteStore with group commit vs no store: {runs:,} concurrent foreground "
        "delegations (wall µs per run)",
        judge(ratio.median, TARGET, None),
        baseline=f"no store {memory.show('{:.1f}', 'µs')}",
        measured=f"SQLiteStore {sqlite.show('{:.1f}', 'µs')}",
        comparison=f"{ratio.show('{:.2f}', 'x')} no store",
        target=f"≤ {TARGET:g}x",
        note=f"records per commit: mean {mean:.1f}, largest {largest}; WAL, "
        "synchronous=FULL, one writer thread",
        data={
            "memory_us": memory.to_json(),
            "sqlite_us": sqlite.to_json(),
            "ratio": ratio.to_json(),
            "mean_batch": mean,
            "largest_batch": largest,
        },
    )
