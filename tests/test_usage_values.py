"""Contract §20: the values of usage and budgets, and what they accept."""

from __future__ import annotations

import math
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

import trio_delegate as td
from tests.helpers import returning

MAX = 2**63 - 1
COUNTS = (
    "requests",
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
    "reasoning_output_tokens",
)
COUNT_LIMITS = ("max_requests", "max_input_tokens", "max_output_tokens", "max_total_tokens")

BAD_COUNTS = [-1, MAX + 1, 10**400, True, 3.0, "3", None, math.nan, [1]]
BAD_COSTS = [-0.01, -1, math.nan, math.inf, -math.inf, "0.1", True, None, 10**400, [0.1]]


def test_usage_defaults_to_nothing_spent() -> None:
    usage = td.Usage()
    assert attrs.asdict(usage) == dict.fromkeys(COUNTS, 0) | {"cost_usd": 0.0}
    assert usage.total_tokens == 0


@pytest.mark.parametrize("field", COUNTS)
@pytest.mark.parametrize("value", BAD_COUNTS, ids=repr)
def test_a_usage_count_must_be_an_int_from_0_to_2_63_minus_1(field: str, value: Any) -> None:
    with pytest.raises(td.InvalidArgumentsError) as raised:
        td.Usage(**{field: value})
    message = str(raised.value)
    assert f"Usage.{field}" in message
    assert "an int from 0 to 2**63-1" in message
    assert "got " in message
    assert len(message) < 400  # a 400-digit value is shown cut


@pytest.mark.parametrize("value", BAD_COSTS, ids=repr)
def test_a_usage_cost_must_be_a_finite_number_at_least_0(value: Any) -> None:
    with pytest.raises(td.InvalidArgumentsError, match=r"Usage\.cost_usd must be a finite"):
        td.Usage(cost_usd=value)


def test_a_whole_dollar_cost_is_a_float_and_the_largest_count_is_accepted() -> None:
    usage = td.Usage(requests=MAX, cost_usd=2)
    assert usage.cost_usd == 2.0
    assert type(usage.cost_usd) is float
    assert usage.requests == MAX


@pytest.mark.parametrize("field", COUNT_LIMITS)
@pytest.mark.parametrize("value", [v for v in BAD_COUNTS if v is not None], ids=repr)
def test_a_budget_limit_must_be_none_or_an_int_from_0(field: str, value: Any) -> None:
    with pytest.raises(td.InvalidArgumentsError, match=rf"Budget\.{field} must be an int"):
        td.Budget(**{field: value})


@pytest.mark.parametrize("value", [v for v in BAD_COSTS if v is not None], ids=repr)
def test_a_budget_cost_limit_must_be_none_or_a_finite_number_at_least_0(value: Any) -> None:
    with pytest.raises(td.InvalidArgumentsError, match=r"Budget\.max_cost_usd must be"):
        td.Budget(max_cost_usd=value)


def test_a_limit_of_zero_is_a_limit_and_none_is_no_limit() -> None:
    budget = td.Budget(max_requests=0, max_cost_usd=0)
    assert budget.max_requests == 0
    assert budget.max_cost_usd == 0.0
    assert td.Budget() == td.Budget(None, None, None, None, None)


@pytest.mark.parametrize("value", [5, "budget", td.Usage(), {"max_requests": 1}], ids=repr)
def test_a_budget_that_is_not_a_budget_is_refused_where_it_is_given(value: Any) -> None:
    with pytest.raises(td.InvalidArgumentsError, match=r"Subagent\.budget of 'a' must be"):
        td.Subagent("a", returning(1), budget=value)
    with pytest.raises(td.InvalidArgumentsError, match=r"Config\.runtime_budget must be"):
        td.Config(runtime_budget=value)


@pytest.mark.parametrize("value", [5, {"input_tokens": 1}, td.Budget()], ids=repr)
def test_output_usage_must_be_a_usage(value: Any) -> None:
    with pytest.raises(td.InvalidArgumentsError, match=r"Output\.usage must be"):
        td.Output(1, usage=value)


def test_costs_add_as_exact_decimals() -> None:
    assert (td.Usage(cost_usd=0.1) + td.Usage(cost_usd=0.2)).cost_usd == 0.3
    total = td.Usage()
    for _ in range(10):
        total = total + td.Usage(cost_usd=0.1)
    assert total.cost_usd == 1.0


def test_sums_saturate_and_never_wrap() -> None:
    big = td.Usage(**dict.fromkeys(COUNTS, MAX), cost_usd=1e308)
    total = big + big
    assert all(getattr(total, field) == MAX for field in COUNTS)
    assert math.isfinite(total.cost_usd)
    assert total.total_tokens == MAX


def test_usage_adds_only_usage() -> None:
    with pytest.raises(TypeError):
        _ = td.Usage() + 1


counts = st.integers(min_value=0, max_value=MAX)
costs = st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False)
usages = st.builds(
    td.Usage,
    requests=counts,
    input_tokens=counts,
    output_tokens=counts,
    cache_read_input_tokens=counts,
    cache_creation_input_tokens=counts,
    reasoning_output_tokens=counts,
    cost_usd=costs,
)


@given(usages, usages)
def test_usage_adds_field_by_field_saturating(first: td.Usage, second: td.Usage) -> None:
    total = first + second
    assert total == second + first
    for field in COUNTS:
        assert getattr(total, field) == min(getattr(first, field) + getattr(second, field), MAX)
    # Costs add as exact decimals of their shortest forms, floats as binary
    # fractions: the two agree to 12 digits, except among subnormal floats
    # (below 2.2e-308), whose shortest forms keep few digits.
    assert math.isclose(
        total.cost_usd, first.cost_usd + second.cost_usd, rel_tol=1e-12, abs_tol=1e-300
    )


def test_budget_exceeded_is_a_limit_exceeded_error_with_its_details() -> None:
    error = td.BudgetExceededError(
        "over", scope="parent", limit="max_total_tokens", limit_value=10, spent=12
    )
    assert isinstance(error, td.LimitExceededError)
    body = error.to_payload()["error"]
    assert body["type"] == "budget_exceeded"
    assert (body["scope"], body["limit"], body["limit_value"], body["spent"]) == (
        "parent",
        "max_total_tokens",
        10,
        12,
    )
