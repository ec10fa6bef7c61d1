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

import gc
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


#: The modules that take longest, longest first (see docs/testing.md). They are
#: collected first, so that with the suite split across processes (make test:
#: whole modules to each) none of them starts last while the others are done.
LONGEST_MODULES = (
    "test_state_machine.py",
    "test_hostile.py",
    "test_temporal.py",
    "test_shared_store_endings.py",
    "test_cli_agents_subagents.py",
    "test_store_contract.py",
    "test_cli_agents_clients.py",
    "test_grace_serve.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put the longest modules first; every other test keeps its place."""
    rank = {name: index for index, name in enumerate(LONGEST_MODULES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Keep what collection loaded out of every later garbage collection.

    Collecting imports every framework the suite covers (some 780,000
    objects); each full collection then walks them all, about half a second
    a time, and the suite's own garbage triggers dozens of them. Frozen, they
    are never walked again: objects made afterwards are collected as ever.
    """
    gc.collect()
    gc.freeze()
    # With the frozen objects out of the count, CPython's rule for a full
    # collection (a quarter more long-lived objects) fires on every tenth
    # second-generation one; a hundredth keeps young cycles collected as ever.
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, 100)


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
