"""The rows of the results table, each measured against its baseline in this run."""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import trio

from . import _asyncio_ref, _delegate, _instructions, _trio_baselines
from ._model import KIB, MIB, Figure, Options, Row, Sample, Status, judge, paired_ratios
from ._probe import run_probe
from ._slots import slot_rows
from ._timing import interleaved

__all__ = ["Results", "measure_all"]

#: (target, must not exceed) of each row that has them.
FOREGROUND_RATIO = (1.25, 1.5)
BACKGROUND_RATIO = (1.25, 1.5)
CLOSE_RATIO = (1.5, 2.0)
MEMORY_OVER_BARE_KIB = (1.5, 2.5)
#: How much resident memory may still grow once the retention window is full.
RETENTION_FLAT_MIB = 2.0

#: How closely passes must agree on the figures of rows 3 to 5 (see
#: ``_model.reproduced``): a close time in fresh processes varies more than
#: an in-process ratio; memory figures are compared in their own unit.
CLOSE_RATIO_TOLERANCE = 0.10
MEMORY_TOLERANCE_KIB = 0.25
RETENTION_TOLERANCE_MIB = 1.0

_LIVE_KINDS = ("bare", "scoped", "delegate")


class Results:
    """Every row, plus the raw series the plots are drawn from."""

    def __init__(self) -> None:
        self.rows: dict[str, Row] = {}
        self.curves: dict[str, Any] = {}

    def ordered(self) -> list[Row]:
        def key(row: Row) -> tuple[int, str]:
            digits = "".join(ch for ch in row.number if ch.isdigit())
            return (int(digits or 0), row.number)

        return sorted(self.rows.values(), key=key)


def _progress(message: str) -> None:
    print(f"· {message}", file=sys.stderr, flush=True)


def _failed(number: str, title: str, exc: BaseException) -> Row:
    detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return Row(number, title, Status.ERROR, note=f"the benchmark raised: {detail}")


def _us(sample: Sample) -> str:
    return sample.show("{:.1f}", "µs")


def _ratio(sample: Sample) -> str:
    return sample.show("{:.2f}", "x")


def _bounds(limits: tuple[float, float], unit: str = "x") -> tuple[str, str]:
    target, bound = limits
    return f"≤ {target:g}{unit}", f"≤ {bound:g}{unit}"


# -- 1, 2 and 9: foreground and background against raw Trio and asyncio ---------

#: How closely passes must agree on a figure (see ``_model.reproduced``):
#: instruction ratios repeat to about 1 %; CPU-time ratios to a few %.
INSTRUCTIONS_TOLERANCE = 0.02
TIME_RATIO_TOLERANCE = 0.05


def _instruction_ratio(
    options: Options, measured: str, baseline: str
) -> tuple[float, float, float] | None:
    """(measured, baseline, ratio) in instructions per run, or None without valgrind."""
    if not _instructions.available():
        return None
    sizes = _instructions.FULL_SIZES if options.full else _instructions.SIZES
    _progress(f"   instructions (callgrind, {sizes[0]:,} -> {sizes[1]:,} runs): {measured}")
    counted = _instructions.per_run([baseline, measured], sizes)
    return counted[measured], counted[baseline], counted[measured] / counted[baseline]


def _per_child_rows(
    number: str,
    asyncio_number: str,
    title: str,
    children: int,
    limits: tuple[float, float],
    samples: dict[str, Sample],
    baseline: str,
    baseline_label: str,
    instructions: tuple[float, float, float] | None,
) -> list[Row]:
    us = {name: sample.scaled(1e6) for name, sample in samples.items()}
    ratio = paired_ratios(us["delegate"], us[baseline])
    over_bare = paired_ratios(us["delegate"], us["bare"])
    note = (
        f"{over_bare.median:.2f}x bare; µs per child (CPU time), median [min-max] of "
        "the repetitions; ratios are medians of paired repetitions"
    )
    if baseline != "scoped":
        plain = paired_ratios(us["delegate"], us["scoped"])
        note += f"; {plain.median:.2f}x scoped without the checkpoint per start"
    figures = [Figure("CPU-time ratio", ratio.median, TIME_RATIO_TOLERANCE)]
    comparison = f"{_ratio(ratio)} {baseline_label} (CPU time)"
    judged = ratio.median
    if instructions is not None:
        measured_ir, baseline_ir, ir_ratio = instructions
        figures.insert(0, Figure("instruction ratio", ir_ratio, INSTRUCTIONS_TOLERANCE))
        comparison = f"{ir_ratio:.2f}x {baseline_label} (instructions)\n" + comparison
        note += (
            f"; instructions per run (callgrind): trio_delegate {measured_ir:,.0f}, "
            f"{baseline_label} {baseline_ir:,.0f}; the verdict is on instructions"
        )
        judged = ir_ratio
    else:
        note += "; valgrind not found: the verdict is on CPU time"
    target, bound = _bounds(limits)
    data: dict[str, Any] = {name: sample.to_json() for name, sample in us.items()}
    data["unit"] = "µs per child"
    data["children"] = children
    data["baseline"] = baseline
    data["ratio_vs_baseline"] = ratio.to_json()
    if instructions is not None:
        data["instructions_per_run"] = {"delegate": instructions[0], baseline: instructions[1]}
    baselines = [f"{baseline_label} {_us(us[baseline])}"]
    if baseline != "scoped":
        baselines.append(f"scoped {_us(us['scoped'])}")
    baselines.append(f"bare {_us(us['bare'])}")
    main = Row(
        number,
        title,
        judge(judged, *limits),
        baseline="\n".join(baselines),
        measured=_us(us["delegate"]),
        comparison=comparison,
        target=target,
        bound=bound,
        note=note,
        data=data,
        figures=tuple(figures),
    )
    asyncio_vs_scoped = paired_ratios(us["asyncio"], us["scoped"])
    delegate_vs_asyncio = paired_ratios(us["delegate"], us["asyncio"])
    reference = Row(
        asyncio_number,
        f"asyncio reference: {title[0].lower()}{title[1:]}",
        Status.INFO,
        baseline=f"scoped {_us(us['scoped'])}",
        measured=f"asyncio {_us(us['asyncio'])}",
        comparison=f"asyncio {_ratio(asyncio_vs_scoped)} scoped",
        note=(
            f"trio_delegate {delegate_vs_asyncio.median:.2f}x the asyncio reference "
            "(benchmarks/_asyncio_ref.py), CPU time"
        ),
        data={
            "asyncio": us["asyncio"].to_json(),
            "scoped": us["scoped"].to_json(),
            "asyncio_vs_scoped": asyncio_vs_scoped.to_json(),
            "delegate_vs_asyncio": delegate_vs_asyncio.to_json(),
        },
        figures=(Figure("asyncio ratio", asyncio_vs_scoped.median, TIME_RATIO_TOLERANCE),),
    )
    return [main, reference]


def foreground_rows(options: Options) -> list[Row]:
    n = options.foreground_children
    _progress(f"1, 9a: {n:,} foreground children x {options.repetitions} repetitions")
    # The first two run back to back in every repetition (see round_order).
    samples = interleaved(
        {
            "scoped": lambda: trio.run(_trio_baselines.foreground, "scoped", n),
            "delegate": lambda: trio.run(_delegate.foreground, n),
            "bare": lambda: trio.run(_trio_baselines.foreground, "bare", n),
            "asyncio": lambda: _asyncio_ref.foreground(n),
        },
        options.repetitions,
        per=n,
    )
    return _per_child_rows(
        "1",
        "9a",
        f"Foreground delegate, trivial child ({n:,} in sequence)",
        n,
        FOREGROUND_RATIO,
        samples,
        "scoped",
        "scoped",
        _instruction_ratio(options, "delegate-foreground", "scoped-foreground"),
    )


def _background_samples(children: int, repetitions: int) -> dict[str, Sample]:
    contenders: dict[str, Callable[[], float]] = {
        # The pair first: they run back to back in every repetition.
        "checkpointed": lambda: trio.run(
            partial(_trio_baselines.background, "scoped", children, checkpoint=True)
        ),
        "delegate": lambda: trio.run(_delegate.background, children),
        "scoped": lambda: trio.run(_trio_baselines.background, "scoped", children),
        "bare": lambda: trio.run(_trio_baselines.background, "bare", children),
        "asyncio": lambda: _asyncio_ref.background(children),
    }
    return interleaved(contenders, repetitions, per=children)


def background_rows(options: Options) -> list[Row]:
    n = options.background_children
    _progress(f"2, 9b: {n:,} background starts, then waits x {options.repetitions} repetitions")
    samples = _background_samples(n, options.repetitions)
    return _per_child_rows(
        "2",
        "9b",
        f"Background start x{n:,}, then wait for all",
        n,
        BACKGROUND_RATIO,
        samples,
        "checkpointed",
        "scoped+checkpoint",
        _instruction_ratio(options, "delegate-background", "scoped-background"),
    )


def background_curve(options: Options, sizes: Sequence[int]) -> dict[str, Any]:
    """Time per run of start-all-then-wait-all against the number of runs (full only)."""
    curve: dict[str, Any] = {"sizes": list(sizes)}
    repetitions = max(3, options.repetitions // 3)
    for size in sizes:
        _progress(f"curve: background start+wait of {size:,} runs x {repetitions}")
        samples = _background_samples(size, repetitions)
        for name, sample in samples.items():
            curve.setdefault(name, []).append(sample.scaled(1e6).median)
    return curve


# -- 3 and 4: many live runs, in fresh processes ----------------------------------


def _live_probes(options: Options, runs: int, close_repetitions: int) -> dict[str, Any]:
    untraced: dict[str, list[dict[str, Any]]] = {kind: [] for kind in _LIVE_KINDS}
    for repetition in range(close_repetitions):
        kinds = ("scoped", "delegate", "bare") if repetition == 0 else ("scoped", "delegate")
        for kind in kinds:
            untraced[kind].append(run_probe("live", kind=kind, runs=runs, traced=False))
    traced_kinds = _LIVE_KINDS if options.full else ("bare", "delegate")
    traced: dict[str, list[dict[str, Any]]] = {}
    for kind in traced_kinds:
        traced[kind] = [
            run_probe("live", kind=kind, runs=runs, traced=True)
            for _ in range(options.memory_repetitions)
        ]
    return {"untraced": untraced, "traced": traced}


def _sample(probes: list[dict[str, Any]], key: str) -> Sample:
    return Sample.of([probe[key] for probe in probes])


def live_rows(options: Options, results: Results) -> list[Row]:
    n = options.live_runs
    _progress(
        f"3, 4: {n:,} live runs in fresh processes ({options.close_repetitions} close "
        f"repetitions, {options.memory_repetitions} traced)"
    )
    probes = _live_probes(options, n, options.close_repetitions)
    results.curves.setdefault("live", {})[n] = probes
    return [_close_row(n, probes), _memory_row(n, probes)]


def _close_row(n: int, probes: dict[str, Any]) -> Row:
    untraced = probes["untraced"]
    seconds = {kind: _sample(untraced[kind], "close_seconds") for kind in _LIVE_KINDS}
    ratio = paired_ratios(seconds["delegate"], seconds["scoped"])
    rss = {kind: _sample(untraced[kind], "rss_live").scaled(1 / MIB) for kind in _LIVE_KINDS}
    target, bound = _bounds(CLOSE_RATIO)
    return Row(
        "3",
        f"Close a runtime holding {n:,} live runs",
        judge(ratio.median, *CLOSE_RATIO),
        baseline=f"scoped {seconds['scoped'].show('{:.2f}', 's')}\n"
        f"bare {seconds['bare'].show('{:.2f}', 's')}",
        measured=seconds["delegate"].show("{:.2f}", "s"),
        comparison=f"{_ratio(ratio)} scoped",
        target=target,
        bound=bound,
        note=(
            f"time from cancelling the enclosing scope to its exit, vs the same for a "
            f"scoped nursery; resident memory while live: "
            f"trio_delegate {rss['delegate'].median:.0f} MiB, "
            f"scoped {rss['scoped'].median:.0f} MiB, bare {rss['bare'].median:.0f} MiB; "
            f"{seconds['delegate'].median / n * 1e6:.1f} µs per run to close"
        ),
        data={
            "runs": n,
            "close_seconds": {kind: sample.to_json() for kind, sample in seconds.items()},
            "rss_live_mib": {kind: sample.to_json() for kind, sample in rss.items()},
            "ratio_vs_scoped": ratio.to_json(),
        },
        figures=(Figure("close ratio", ratio.median, CLOSE_RATIO_TOLERANCE),),
    )


def _memory_row(n: int, probes: dict[str, Any]) -> Row:
    untraced, traced = probes["untraced"], probes["traced"]
    traced_per_run = {kind: _sample(traced[kind], "traced_per_run") for kind in traced}
    rss_per_run = {kind: _sample(untraced[kind], "rss_per_run") for kind in _LIVE_KINDS}
    traced_over = (traced_per_run["delegate"].median - traced_per_run["bare"].median) / KIB
    rss_over = (rss_per_run["delegate"].median - rss_per_run["bare"].median) / KIB
    verdicts = [judge(traced_over, *MEMORY_OVER_BARE_KIB), judge(rss_over, *MEMORY_OVER_BARE_KIB)]
    worst = max(verdicts, key=[Status.PASS, Status.ABOVE_TARGET, Status.FAIL].index)
    target, bound = _bounds(MEMORY_OVER_BARE_KIB, " KiB")

    def both(kind: str) -> str:
        parts = []
        if kind in traced_per_run:
            parts.append(f"{traced_per_run[kind].median / KIB:.2f} KiB traced")
        parts.append(f"{rss_per_run[kind].median / KIB:.2f} KiB RSS")
        return ", ".join(parts)

    return Row(
        "4",
        f"Memory per live run, {n:,} live",
        worst,
        baseline=f"bare {both('bare')}\nscoped {both('scoped')}",
        measured=both("delegate"),
        comparison=f"+{traced_over:.2f} KiB traced\n+{rss_over:.2f} KiB RSS",
        target=f"{target} over bare",
        bound=f"{bound} over bare",
        note=(
            "per live run, over a bare Trio task with its Event (tracemalloc in one "
            "process per kind, RSS in the close-time processes); 1 KiB = 1,024 bytes"
        ),
        data={
            "runs": n,
            "traced_per_run": {k: s.to_json() for k, s in traced_per_run.items()},
            "rss_per_run": {k: s.to_json() for k, s in rss_per_run.items()},
            "traced_over_bare_kib": traced_over,
            "rss_over_bare_kib": rss_over,
        },
        figures=(
            Figure("KiB over bare, traced", traced_over, MEMORY_TOLERANCE_KIB, absolute=True),
            Figure("KiB over bare, RSS", rss_over, MEMORY_TOLERANCE_KIB, absolute=True),
        ),
    )


def live_curve(options: Options, results: Results) -> None:
    """Memory and close time against the number of live runs (full only)."""
    known = results.curves.setdefault("live", {})
    for size in options.curve_sizes:
        if size in known:
            continue
        _progress(f"curve: {size:,} live runs")
        known[size] = _live_probes(options, size, close_repetitions=1)


# -- 5: retention ------------------------------------------------------------------


def retention_row(options: Options, results: Results) -> Row:
    n = options.retention_runs
    _progress(f"5: {n:,} sequential completed runs with default retention")
    samples = 100 if options.full else 50
    answer = run_probe("retention", runs=n, samples=samples)
    points: list[dict[str, Any]] = answer["points"]
    results.curves["retention"] = points
    # The retention window (1,000 runs kept, tombstones for 10,000 more) is
    # full after 11,000 runs; memory is compared from a point well past that.
    settled_from = max(22_000, n // 5)
    after = [point for point in points if point["runs"] >= settled_from] or points[-2:]
    first, last = after[0], after[-1]
    growth_mib = (last["rss"] - first["rss"]) / MIB
    object_growth = last["objects"] - first["objects"]
    flat = growth_mib <= RETENTION_FLAT_MIB
    per_run = Sample.of([point["us"] for point in points if point["us"] is not None])
    return Row(
        "5",
        f"Retention: {n:,} sequential runs, default retention",
        Status.PASS if flat else Status.FAIL,
        baseline=f"RSS at {first['runs']:,} runs: {first['rss'] / MIB:.1f} MiB",
        measured=f"RSS at {last['runs']:,} runs: {last['rss'] / MIB:.1f} MiB",
        comparison=f"{round(growth_mib, 2) + 0.0:+.2f} MiB\n{object_growth:+,} objects",
        target="flat",
        bound=f"≤ {RETENTION_FLAT_MIB:g} MiB growth",
        note=(
            f"growth once the window is full (from {first['runs']:,} runs); "
            f"{per_run.median:.1f} µs per run [{per_run.low:.1f}-{per_run.high:.1f}] over "
            f"{len(per_run.values)} chunks"
        ),
        data={
            "runs": n,
            "settled_from": first["runs"],
            "rss_growth_mib": growth_mib,
            "object_growth": object_growth,
            "us_per_run": per_run.to_json(),
        },
        figures=(Figure("RSS growth, MiB", growth_mib, RETENTION_TOLERANCE_MIB, absolute=True),),
    )


# -- everything ----------------------------------------------------------------


def _guarded(
    results: Results,
    numbers: Sequence[tuple[str, str]],
    build: Callable[[], list[Row] | Row],
) -> None:
    try:
        built = build()
    except Exception as exc:
        for number, title in numbers:
            results.rows[number] = _failed(number, title, exc)
        return
    for row in built if isinstance(built, list) else [built]:
        results.rows[row.number] = row


def measure_all(options: Options, *, curves: bool = True) -> Results:
    """Measure every row (and, for the full suite with *curves*, the growth curves)."""
    results = Results()
    _guarded(
        results,
        [("1", "Foreground delegate"), ("9a", "asyncio reference: foreground")],
        lambda: foreground_rows(options),
    )
    _guarded(
        results,
        [("2", "Background start, then wait"), ("9b", "asyncio reference: background")],
        lambda: background_rows(options),
    )
    _guarded(
        results,
        [("3", "Close with many live runs"), ("4", "Memory per live run")],
        lambda: live_rows(options, results),
    )
    _guarded(results, [("5", "Retention")], lambda: retention_row(options, results))
    for row in slot_rows(options):
        results.rows[row.number] = row
    if options.full and curves:
        sizes = (1_000, 10_000, 100_000)
        try:
            results.curves["background"] = background_curve(options, sizes)
            live_curve(options, results)
        except Exception as exc:
            _progress(f"growth curves failed: {exc!r}")
    return results
