"""Whether a batch of calls leaves memory allocated: the check behind "allocates nothing".

A reading of allocated blocks or traced bytes allocates a little itself (the
integers it returns, a first-time buffer), so every figure here is a batch's
reading minus the same reading around an empty batch: a batch that leaves
nothing reads 0 and a batch that keeps one object per call reads about one
block per call.
"""

from __future__ import annotations

import gc
import sys
import tracemalloc
from collections.abc import Callable

__all__ = ["allocations"]


def _blocks(batch: Callable[[int], object], rounds: int) -> int:
    before = sys.getallocatedblocks()
    batch(rounds)
    return sys.getallocatedblocks() - before


def _traced(batch: Callable[[int], object], rounds: int) -> tuple[int, int]:
    start = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    batch(rounds)
    current, peak = tracemalloc.get_traced_memory()
    return current - start, peak - start


def allocations(batch: Callable[[int], object], rounds: int) -> dict[str, int]:
    """What ``batch(rounds)`` leaves allocated, with the cyclic collector paused.

    Run it warm: whatever its first call makes for good (caches, counts that
    leave CPython's small integers) is not what a steady path allocates.

    Returns:
        ``blocks``: blocks left allocated (``sys.getallocatedblocks``);
        ``traced_net``: bytes left allocated, and ``traced_peak``: the
        highest it went over the start, both by :mod:`tracemalloc` around a
        second batch (the first under tracing replaces, in a path that
        rebinds values, the objects made before tracing, whose release
        tracing cannot see).
    """
    if tracemalloc.is_tracing():
        raise RuntimeError("allocations() starts and stops tracemalloc itself")
    gc.collect()
    gc.disable()
    try:
        blocks = _blocks(batch, rounds) - _blocks(batch, 0)
        tracemalloc.start()
        try:
            batch(rounds)
            _traced(batch, 0)  # the reading's own first-time allocations
            net, peak = _traced(batch, rounds)
            own_net, own_peak = _traced(batch, 0)
        finally:
            tracemalloc.stop()
    finally:
        gc.enable()
    return {"blocks": blocks, "traced_net": net - own_net, "traced_peak": peak - own_peak}
