"""Side-by-side timing: every contender of a scenario once per repetition, in turn."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Mapping

from ._model import Sample

__all__ = ["clock", "interleaved"]

#: The clock of every timed scenario: this process's CPU time. Each scenario is
#: a single-threaded loop that never blocks, so on an idle machine this equals
#: wall time; on a busy one it leaves out the time other processes held the CPU.
clock = time.process_time


def interleaved(
    contenders: Mapping[str, Callable[[], float]],
    repetitions: int,
    *,
    per: int,
    warmups: int = 1,
) -> dict[str, Sample]:
    """Time each contender *repetitions* times, interleaved, in seconds per unit.

    Each callable runs the whole scenario (usually in a fresh ``trio.run``)
    and returns the seconds it measured for *per* units of work. The order of
    the contenders rotates from one repetition to the next so that none is
    always first after a collection, and the first *warmups* rounds are
    discarded. A full garbage collection precedes every measurement.
    """
    names = list(contenders)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(warmups + repetitions):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            gc.collect()
            elapsed = contenders[name]()
            if round_index >= warmups:
                seconds[name].append(elapsed / per)
    return {name: Sample.of(values) for name, values in seconds.items()}
