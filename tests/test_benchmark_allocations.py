"""The allocation check behind the benchmark's "a usage report allocates nothing".

Not a benchmark: a unit test of the helper that turns readings of allocated
memory into that figure (``benchmarks/_allocations.py``).
"""

from __future__ import annotations

import tracemalloc

import pytest

from benchmarks._allocations import allocations


def test_a_batch_that_keeps_nothing_reads_zero() -> None:
    counts = [0]

    def batch(rounds: int) -> None:
        for _ in range(rounds):
            counts[0] = counts[0] + 1000  # a new integer each time, the old one freed

    batch(1)  # warm: the count is past CPython's small integers
    found = allocations(batch, 10_000)
    assert found["blocks"] == 0
    assert found["traced_net"] == 0
    # The integers made and freed on the way show in the peak, not in what is left.
    assert found["traced_peak"] >= 0


def test_a_batch_that_keeps_one_object_per_call_reads_about_one_block_each() -> None:
    kept: list[object] = []

    def batch(rounds: int) -> None:
        for _ in range(rounds):
            kept.append(object())

    found = allocations(batch, 10_000)
    # One object per call, and now and then a bigger array for the list.
    assert 10_000 <= found["blocks"] <= 10_100
    assert found["traced_net"] >= 10_000 * 16


def test_it_refuses_to_run_under_someone_elses_tracing() -> None:
    tracemalloc.start()
    try:
        with pytest.raises(RuntimeError, match="tracemalloc"):
            allocations(lambda rounds: None, 1)
    finally:
        tracemalloc.stop()
