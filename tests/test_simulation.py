"""The load simulation is deterministic: the same seed gives the same bytes.

The full scenario (10,000 runs over 24 virtual hours) is timed by
``benchmarks/bench_simulation.py``; here a smaller one runs twice.
"""

from __future__ import annotations

import re

import pytest

import trio_delegate.testing as tdt

RUNS, HOURS = 1500, 3.0


@pytest.fixture(scope="module")
def first() -> tdt.SimulationResult:
    return tdt.simulate(seed=11, runs=RUNS, hours=HOURS)


def test_the_same_seed_gives_a_byte_identical_trace(first: tdt.SimulationResult) -> None:
    again = tdt.simulate(seed=11, runs=RUNS, hours=HOURS)
    assert "\n".join(again.trace).encode() == "\n".join(first.trace).encode()
    assert again.digest == first.digest
    assert again.virtual_seconds == first.virtual_seconds


def test_another_seed_gives_another_trace(first: tdt.SimulationResult) -> None:
    assert tdt.simulate(seed=12, runs=200, hours=HOURS).digest != first.digest


def test_the_trace_holds_no_run_ids(first: tdt.SimulationResult) -> None:
    assert not any(re.search(r"run_[0-9a-f]{32}", line) for line in first.trace)


def test_the_scenario_mixes_every_kind_of_ending(first: tdt.SimulationResult) -> None:
    seen = first.summary
    for key in (
        "admitted running",
        "admitted pending",
        "finally returned",
        "finally raised ValueError",
        "finally cancelled",
        "cleanup",
        "step start",  # nested runs
        "delegate result",
        "delegate error run_timed_out",
        "cancel requested=True running",
        "wait timeout running",
        "wait result",
        "wait error run_failed",
        "session closed unresolved",
    ):
        assert seen.get(key, 0) > 0, key
    started = seen["start"]
    assert started >= RUNS  # every admitted run started (plus nested ones)
    assert (
        seen["finally returned"]
        + seen["finally cancelled"]
        + sum(count for key, count in seen.items() if key.startswith("finally raised"))
        == started
    )  # and every runner's finally ran
    assert first.virtual_seconds >= HOURS * 3600


def test_it_refuses_an_empty_scenario() -> None:
    with pytest.raises(ValueError, match="positive"):
        tdt.simulate(runs=0)
