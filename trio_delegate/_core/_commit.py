"""Committing one batch of records (contract §15): one bad record never fails the others.

The writer (``_writer``) hands each batch it gathered to :func:`commit`,
which writes it and, where the store fails, splits it until the records
that fail on their own are found; :class:`WriteStats` counts the commits.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final, final

import attrs

from .._errors import StoreError
from ._adoption import ignored_endings
from ._records import store_error

if TYPE_CHECKING:
    from .._stores._protocol import ResultStore, RunRecord
    from ._events import RunEvents

__all__ = ["WriteStats", "commit"]

#: A write that fails after this many seconds failed for the store's sake
#: (timeouts), not for one of its records: its batch is not split further.
_SLOW_FAILURE_SECONDS: Final = 0.5


@final
@attrs.define
class WriteStats:
    """How the writer batched its commits (for benchmarks and diagnostics)."""

    commits: int = 0
    records: int = 0
    largest_batch: int = 0
    failed_records: int = 0

    @property
    def mean_batch(self) -> float:
        return self.records / self.commits if self.commits else 0.0


async def commit(
    store: ResultStore,
    batch: Sequence[RunRecord],
    ignored: list[str],
    unknown: list[RunRecord],
    stats: WriteStats,
    events: RunEvents | None,
) -> dict[str, StoreError]:
    """Write *batch* to *store*; the errors of the records that could not be written,
    by run id. Each commit is counted in *stats* and told to *events*.

    The runs whose ending the store says it ignored (another one stood)
    are added to *ignored*; the records of a write the store could not
    say that of (it returned ``None``), to *unknown*.

    One bad record never fails the others. When the store names the
    record it could not write (a ``StoreError`` with its ``run_id``), that
    record fails and the rest is written again. Otherwise a batch that
    failed quickly is split in two and each half written again, until the
    records that fail on their own are found. A failure that took long
    (an unreachable server's timeouts) is the store's, not a record's: the
    whole batch fails at once rather than time out once per record.
    """
    started = time.perf_counter()
    try:
        answer = await store.write(batch)
    except Exception as exc:
        elapsed = time.perf_counter() - started
        named = exc.run_id if isinstance(exc, StoreError) else None
        if named is not None and any(record.run_id == named for record in batch):
            failures = _failed(stats, [r for r in batch if r.run_id == named], exc)
            rest = [record for record in batch if record.run_id != named]
            if rest:
                failures.update(await commit(store, rest, ignored, unknown, stats, events))
            return failures
        if len(batch) == 1 or elapsed >= _SLOW_FAILURE_SECONDS:
            return _failed(stats, batch, exc)
    else:
        stats.commits += 1
        stats.records += len(batch)
        stats.largest_batch = max(stats.largest_batch, len(batch))
        if events is not None:
            events.committed(len(batch), time.perf_counter() - started)
        if type(answer) is list and not answer:
            return {}  # the common answer: nothing ignored
        found = ignored_endings(answer, batch)
        if found is None:
            unknown.extend(batch)
        else:
            ignored.extend(found)
        return {}
    middle = len(batch) // 2
    failures = await commit(store, batch[:middle], ignored, unknown, stats, events)
    failures.update(await commit(store, batch[middle:], ignored, unknown, stats, events))
    return failures


def _failed(
    stats: WriteStats, records: Sequence[RunRecord], exc: Exception
) -> dict[str, StoreError]:
    stats.failed_records += len(records)
    return {
        record.run_id: store_error(exc, f"record run {record.run_id}", record.run_id)
        for record in records
    }
