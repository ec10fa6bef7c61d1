"""Hypothesis profiles for the test suite, and the PostgreSQL and Temporal servers its tests use.

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
import secrets
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from .pg_server import PostgresServer, ServerUnavailable
from .temporal_support import Pool, run_pool, serve_temporal

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


# -- a PostgreSQL server for the store tests ------------------------------------------


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    """One real PostgreSQL server for the whole session, started on first use (< 1 s)."""
    server = PostgresServer()
    try:
        server.start()
    except ServerUnavailable as exc:
        if "not installed" in str(exc):
            pytest.fail(str(exc))
        pytest.skip(f"no PostgreSQL server can run on this machine: {exc}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_schema() -> str:
    """A schema of its own for each test: stores of different tests never meet."""
    return "t_" + secrets.token_hex(8)


# -- Temporal: one dev server per session (tests/temporal_support.py) ------------
@pytest.fixture(scope="session")
def temporal_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from serve_temporal(tmp_path_factory)


@pytest.fixture(scope="module")
def pool(temporal_address: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    yield from run_pool(temporal_address, tmp_path_factory)
