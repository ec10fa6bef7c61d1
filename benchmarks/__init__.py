"""Benchmarks of trio_delegate against raw Trio and a hand-written asyncio equivalent.

``make bench`` (``python -m benchmarks``) measures the quick suite in about a
minute and prints the results table; ``make bench-full`` (``--full``) runs the
full sizes, draws the growth curves and rewrites the results section of
``docs/performance.md``. Every figure is measured against its baseline in the
same run; the exit status is non-zero when a "must not exceed" bound is
broken or a benchmark could not be measured. See ``docs/performance.md``.
"""
