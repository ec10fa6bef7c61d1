"""Row 8: throughput with a durable store against no store, one row per store and workload.

Each run writes two records, and waits for both: ``start``/``delegate``
returns once its admission record is committed (the run starts only then),
and a result is handed out once its terminal record is. The writer commits
whatever is pending in one batch (group commit). Two workloads:

* **at once** — every run delegated at the same moment: each durability
  point is one large batch, so commits are few and the cost is encoding and
  upserting records;
* **64 in flight** — 64 callers, each starting a run and waiting for it, over
  and over: batches of about 64 records, and every run waits for two commits
  in turn (the fsync latency counts).

Every repetition measures no store, the store, and a :class:`MemoryStore`
(the runtime's own side of durability, with nothing written anywhere) back to
back; the figure is the median of the paired wall-clock ratios. To add a
store, add it to :data:`STORES` (a name, a factory given a fresh folder, and
the row's letters).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import trio

import trio_delegate as td
from trio_delegate._core._persistence import WriteStats

from . import _delegate
from ._model import Figure, Options, Row, Sample, judge, paired_ratios
from ._timing import interleaved

__all__ = ["IN_FLIGHT", "STORES", "TARGET", "bench"]

#: Store cost over no store: the target (there is no must-not-exceed bound).
TARGET = 2.0
#: Callers of the "in flight" workload.
IN_FLIGHT = 64
#: How closely passes must agree on the ratio (wall clock, threads, a disk).
TOLERANCE = 0.15

StoreFactory = Callable[[Path], td.ResultStore]
Workload = Callable[[td.Parent, int], Awaitable[None]]


@dataclass(frozen=True)
class DurableStore:
    """A store measured by this module: its name, a factory, and its rows' numbers."""

    name: str
    make: StoreFactory
    numbers: tuple[str, str]  # (at once, in flight)


STORES = (
    DurableStore("SQLiteStore", lambda folder: td.SQLiteStore(folder / "runs.db"), ("8a", "8b")),
)


async def _at_once(parent: td.Parent, runs: int) -> None:
    async with trio.open_nursery() as nursery:
        for _ in range(runs):
            nursery.start_soon(parent.delegate, _delegate.SUBAGENT, _delegate.TASK)


async def _caller(parent: td.Parent, runs: int) -> None:
    for _ in range(runs):
        handle = await parent.start(_delegate.SUBAGENT, _delegate.TASK)
        await parent.wait(handle.run_id)


async def _in_flight(parent: td.Parent, runs: int) -> None:
    async with trio.open_nursery() as nursery:
        for _ in range(IN_FLIGHT):
            nursery.start_soon(_caller, parent, runs // IN_FLIGHT)


async def _measure(
    workload: Workload, runs: int, store: td.ResultStore | None, stats: list[WriteStats]
) -> tuple[float, float]:
    """(wall, CPU) seconds of *runs* runs; CPU time counts every thread of the process."""
    wall, cpu = trio.current_time(), time.process_time()
    async with (
        td.open_runtime(
            _delegate.subagents(), config=_delegate.roomy_config(runs), store=store
        ) as runtime,
        runtime.open_parent() as parent,
    ):
        await workload(parent, runs)
        persister = runtime._persister
        if persister is not None:
            stats.append(persister.stats)
    return trio.current_time() - wall, time.process_time() - cpu


def _row(
    number: str,
    title: str,
    store: DurableStore,
    workload: Workload,
    runs: int,
    options: Options,
) -> Row:
    stats: list[WriteStats] = []
    cpu: dict[str, list[float]] = {"none": [], "memory": [], "store": []}
    with tempfile.TemporaryDirectory(prefix="trio-delegate-bench-") as tmp:
        counter = iter(range(10**6))

        def contender(name: str, make: Callable[[], td.ResultStore | None]) -> Callable[[], float]:
            def measure() -> float:
                wall, seconds = trio.run(_measure, workload, runs, make(), stats)
                cpu[name].append(seconds / runs)
                return wall

            return measure

        def durable() -> td.ResultStore:
            # A fresh file each time: the file's size must not grow between repetitions.
            folder = Path(tmp) / str(next(counter))
            folder.mkdir()
            return store.make(folder)

        samples = interleaved(
            {
                "none": contender("none", lambda: None),
                "store": contender("store", durable),
                "memory": contender("memory", td.MemoryStore),
            },
            options.repetitions,
            per=runs,
        )
    warm = 1  # interleaved's warm-up round, measured but not kept
    cpu_us = {name: Sample.of(values[warm:]).scaled(1e6) for name, values in cpu.items()}
    none, durable_us, memory = (samples[name].scaled(1e6) for name in ("none", "store", "memory"))
    ratio = paired_ratios(durable_us, none)
    cpu_ratio = paired_ratios(cpu_us["store"], cpu_us["none"])
    runtime_side = paired_ratios(memory, none)
    batches = [stat for stat in stats if stat.commits]
    mean = sum(stat.mean_batch for stat in batches) / max(len(batches), 1)
    largest = max((stat.largest_batch for stat in batches), default=0)
    return Row(
        number,
        f"{store.name} vs no store: {title} (wall µs per run)",
        judge(ratio.median, TARGET, None),
        baseline=f"no store {none.show('{:.1f}', 'µs')}",
        measured=f"{store.name} {durable_us.show('{:.1f}', 'µs')}",
        comparison=f"{ratio.show('{:.2f}', 'x')} no store",
        target=f"≤ {TARGET:g}x",
        note=(
            f"CPU time of both threads {cpu_ratio.median:.2f}x no store "
            f"({cpu_us['store'].median:.1f} against {cpu_us['none'].median:.1f} µs); "
            f"the runtime's own side (MemoryStore) {runtime_side.median:.2f}x, "
            f"{memory.median:.1f} µs; records per commit: mean {mean:.1f}, largest "
            f"{largest}; WAL, synchronous=FULL, one writer thread"
        ),
        data={
            "runs": runs,
            "none_us": none.to_json(),
            "store_us": durable_us.to_json(),
            "memory_store_us": memory.to_json(),
            "cpu_us": {name: sample.to_json() for name, sample in cpu_us.items()},
            "ratio": ratio.to_json(),
            "cpu_ratio": cpu_ratio.to_json(),
            "memory_store_ratio": runtime_side.to_json(),
            "mean_batch": mean,
            "largest_batch": largest,
        },
        figures=(Figure("ratio", ratio.median, TOLERANCE),),
    )


def bench(options: Options) -> list[Row]:
    at_once = 5_000 if options.full else 2_000
    in_flight = 4_096 if options.full else 2_048
    rows = []
    for store in STORES:
        rows.append(
            _row(
                store.numbers[0],
                f"{at_once:,} runs delegated at once",
                store,
                _at_once,
                at_once,
                options,
            )
        )
        rows.append(
            _row(
                store.numbers[1],
                f"{in_flight:,} runs, {IN_FLIGHT} callers each starting one and waiting",
                store,
                _in_flight,
                in_flight,
                options,
            )
        )
    return rows
