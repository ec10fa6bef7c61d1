"""The statistics the benchmarks publish: paired ratios, pairing order, reproduction.

Benchmarks are never part of the test suite; these are unit tests of the
helpers that turn measurements into published figures (``benchmarks/``).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from benchmarks._model import (
    Figure,
    Row,
    Sample,
    Status,
    agree,
    judge,
    paired_ratios,
    reproduced,
)
from benchmarks._timing import interleaved, round_order


def test_paired_ratios_are_taken_repetition_by_repetition() -> None:
    # A slow spell (the third repetition) slows both sides of its pair.
    baseline = Sample.of([10.0, 10.0, 30.0])
    measured = Sample.of([12.0, 12.0, 36.0])
    assert paired_ratios(measured, baseline).values == pytest.approx((1.2, 1.2, 1.2))
    # One side disturbed alone (the second repetition) moves one ratio, not
    # the median of the pairs; the ratio of the medians follows it.
    baseline = Sample.of([10.0, 11.0, 30.0])
    measured = Sample.of([11.0, 33.0, 33.0])
    assert paired_ratios(measured, baseline).median == pytest.approx(1.1)
    assert measured.median / baseline.median == pytest.approx(3.0)


def test_paired_ratios_need_the_same_repetitions() -> None:
    with pytest.raises(ValueError, match="same number"):
        paired_ratios(Sample.of([1.0, 2.0]), Sample.of([1.0]))


def test_round_order_keeps_the_pair_back_to_back_and_alternates_it() -> None:
    names = ["baseline", "measured", "a", "b", "c"]
    orders = [round_order(names, index) for index in range(6)]
    for index, order in enumerate(orders):
        assert sorted(order) == sorted(names)
        first, second = order[:2]
        assert {first, second} == {"baseline", "measured"}
        assert first == ("baseline" if index % 2 == 0 else "measured")
    # The others rotate: each of them comes first among them in some round.
    assert {order[2] for order in orders} == {"a", "b", "c"}


def test_interleaved_runs_pairs_side_by_side_and_drops_the_warm_up() -> None:
    calls: list[str] = []

    def contender(name: str, seconds: float) -> Callable[[], float]:
        def run() -> float:
            calls.append(name)
            return seconds * len(calls)  # a machine that gets slower and slower

        return run

    samples = interleaved(
        {
            "baseline": contender("baseline", 1.0),
            "measured": contender("measured", 1.0),
            "other": contender("other", 1.0),
        },
        4,
        per=2,
        warmups=1,
    )
    assert len(calls) == 15  # 5 rounds of 3, the first discarded
    for start in range(0, 15, 3):
        assert set(calls[start : start + 2]) == {"baseline", "measured"}
    assert all(len(sample.values) == 4 for sample in samples.values())
    # Per unit of work: each measurement is divided by per.
    assert samples["other"].values[0] == pytest.approx(6 / 2)
    # Side by side, the pair's ratios stay near 1 while the machine slows down.
    ratios = paired_ratios(samples["measured"], samples["baseline"])
    assert all(0.7 < ratio < 1.5 for ratio in ratios.values)


def test_agree_relative_and_absolute() -> None:
    assert agree([1.00, 1.02, 1.04], 0.05)
    assert not agree([1.00, 1.02, 1.10], 0.05)
    assert agree([0.1, -0.2, 0.3], 0.5, absolute=True)
    assert not agree([0.1, -0.2, 0.4], 0.5, absolute=True)
    with pytest.raises(ValueError, match="at least one"):
        agree([], 0.1)


def _row(value: float, *, note: str = "") -> Row:
    return Row(
        "1",
        "a scenario",
        judge(value, 1.25, 1.5),
        measured=f"{value:.2f}x",
        note=note,
        figures=(Figure("ratio", value, 0.05),),
    )


def test_a_figure_every_pass_agrees_on_is_published_from_the_median_pass() -> None:
    passes = [[_row(1.31, note="first")], [_row(1.30, note="second")], [_row(1.32, note="third")]]
    [row] = reproduced(passes)
    assert row.measured == "1.31x"
    assert row.status is Status.ABOVE_TARGET
    assert row.note.startswith("first; reproduced in 3 passes")
    assert "1.31 / 1.3 / 1.32" in row.note


def test_a_figure_the_passes_disagree_on_is_not_published() -> None:
    passes = [[_row(1.20)], [_row(1.45)], [_row(1.60)]]
    [row] = reproduced(passes)
    assert row.status is Status.NOT_REPRODUCED
    assert not row.status.breaks_build
    assert "1.2" not in row.measured
    assert "1.6" not in row.measured
    assert "ratio" in row.comparison
    assert "1.2 / 1.45 / 1.6" in row.note


def test_every_figure_of_a_row_must_agree() -> None:
    def row(ratio: float, cpu: float) -> Row:
        return Row(
            "2",
            "two figures",
            Status.PASS,
            figures=(Figure("instructions", ratio, 0.01), Figure("cpu", cpu, 0.05)),
        )

    [kept] = reproduced([[row(1.20, 1.70)], [row(1.201, 1.72)], [row(1.199, 1.71)]])
    assert kept.status is Status.PASS
    [dropped] = reproduced([[row(1.20, 1.50)], [row(1.201, 1.72)], [row(1.199, 1.71)]])
    assert dropped.status is Status.NOT_REPRODUCED
    assert "cpu" in dropped.comparison
    assert "instructions" not in dropped.comparison


def test_rows_without_figures_and_single_passes_are_kept_as_they_are() -> None:
    error = Row("6", "a slot", Status.ERROR, note="it raised")
    assert reproduced([[error], [error], [error]]) == [error]
    single = _row(1.9)
    assert reproduced([[single]]) == [single]
    with pytest.raises(ValueError, match="at least one pass"):
        reproduced([])
