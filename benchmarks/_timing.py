"""Side-by-side timing: a baseline and its contender back to back, repetition after repetition."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Mapping

from ._model import Sample

__all__ = ["clock", "interleaved", "round_order"]

#: The clock of every timed scenario: this process's CPU time. Each scenario is
#: a single-threaded loop that never blocks, so on an idle machine this equals
#: wall time; on a busy one it leaves out the time other processes held the CPU.
clock = time.process_time


def round_order(names: list[str], round_index: int) -> list[str]:
    """The order the contenders run in during round *round_index*.

    The first two names are a pair (a baseline and the contender measured
    against it): they always run back to back, in turn first, so that each
    repetition's ratio compares two measurements taken side by side under
    the same conditions. The others follow, in an order that rotates from
    one round to the next so that none is always first after a collection.
    """
    pair, rest = names[:2], names[2:]
    if round_index % 2:
        pair = pair[::-1]
    if rest:
        shift = round_index % len(rest)
        rest = rest[shift:] + rest[:shift]
    return pair + rest


def interleaved(
    contenders: Mapping[str, Callable[[], float]],
    repetitions: int,
    *,
    per: int,
    warmups: int = 1,
) -> dict[str, Sample]:
    """Time each contender *repetitions* times, in one process, in seconds per unit.

    Each callable runs the whole scenario (usually in a fresh ``trio.run``)
    and returns the seconds it measured for *per* units of work. Every round
    runs every contender once, in :func:`round_order` (the first two
    contenders back to back); the first *warmups* rounds are discarded. A
    full garbage collection precedes every measurement.

    The samples keep the rounds' order, so ``paired_ratios`` of two of them
    gives one ratio per repetition, taken side by side.
    """
    names = list(contenders)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(warmups + repetitions):
        for name in round_order(names, round_index):
            gc.collect()
            elapsed = contenders[name]()
            if round_index >= warmups:
                seconds[name].append(elapsed / per)
    return {name: Sample.of(values) for name, values in seconds.items()}
