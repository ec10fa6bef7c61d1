"""Hypothesis profiles for the test suite.

Choose one with ``HYPOTHESIS_PROFILE=dev|ci|thorough`` (default ``dev``):

* ``dev`` — Hypothesis' defaults, without per-example deadlines (virtual-time
  tests run in a helper thread whose start-up time varies);
* ``ci`` — more examples, derandomized and without a database, so a CI run is
  reproducible;
* ``thorough`` — many more examples, for a long hunt.

Tests that need a floor (the lifecycle state machine runs at least 200
examples) raise ``max_examples`` themselves, relative to the loaded profile.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile("dev", deadline=None)
settings.register_profile(
    "ci",
    deadline=None,
    max_examples=300,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "thorough", deadline=None, max_examples=2000, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))
