"""Budgets in the ``serve`` configuration: a subagent's ``budget`` and ``[runtime] runtime_budget``.

Each is a table of :class:`trio_delegate.Budget` fields, checked at start-up like
every other key: a wrong one is a ConfigError naming the key path, the value
and the fix, and ``serve`` exits 2 before anything starts.
"""

from __future__ import annotations

import math
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

import trio_delegate as td
from trio_delegate._cli._main import main
from trio_delegate._config_file._sections import RuntimeSection
from trio_delegate._config_file._structure import structure
from trio_delegate._server_config import ConfigError, load_server_config
from trio_delegate._usage import LIMITS, MAX_COUNT

PY = sys.executable

ECHO = f"""
[[subagents]]
name = "echo"
command = ['{PY}', "-c", "import sys; print(sys.stdin.read())"]
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "subagents.toml"
    path.write_text(textwrap.dedent(text))
    return path


def error(tmp_path: Path, text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_server_config(write(tmp_path, text))
    return info.value


def test_a_subagents_budget_is_its_budget(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        ECHO + "budget = { max_total_tokens = 100000, max_cost_usd = 2.5 }\n"
        '[[subagents]]\nname = "free"\ncommand = ["cat"]\n',
    )
    echo, free = load_server_config(path).subagents
    assert echo.budget == td.Budget(max_total_tokens=100000, max_cost_usd=2.5)
    assert free.budget is None


def test_a_budget_may_be_a_sub_table_with_every_limit(tmp_path: Path) -> None:
    text = ECHO + textwrap.dedent(
        """
        [subagents.budget]
        max_requests = 0
        max_input_tokens = 1
        max_output_tokens = 2
        max_total_tokens = 3
        max_cost_usd = 4
        """
    )
    [echo] = load_server_config(write(tmp_path, text)).subagents
    # 0 is a real limit, and an integer cost is read as dollars.
    assert echo.budget == td.Budget(0, 1, 2, 3, 4.0)
    assert isinstance(echo.budget.max_cost_usd, float)


def test_an_empty_budget_limits_nothing(tmp_path: Path) -> None:
    [echo] = load_server_config(write(tmp_path, ECHO + "budget = {}\n")).subagents
    assert echo.budget == td.Budget()


def test_the_runtime_budget_is_the_configs(tmp_path: Path) -> None:
    path = write(tmp_path, "[runtime]\nruntime_budget = { max_cost_usd = 10 }\n" + ECHO)
    loaded = load_server_config(path)
    assert loaded.config.runtime_budget == td.Budget(max_cost_usd=10.0)
    assert load_server_config(write(tmp_path, ECHO)).config.runtime_budget is None


BAD_BUDGETS = [
    (
        "{ max_total_token = 1 }",
        "budget.max_total_token",
        "unknown key",
        "did you mean 'max_total_tokens'?",
    ),
    ("{ max_tokens = 1 }", "budget.max_tokens", "unknown key", "max_cost_usd"),
    (
        '{ max_cost_usd = "2.5" }',
        "budget.max_cost_usd",
        'must be a number of US dollars, got the string "2.5"',
        "write the number without quotes, e.g. max_cost_usd = 2.5",
    ),
    (
        "{ max_cost_usd = nan }",
        "budget.max_cost_usd",
        "must be a finite number of US dollars >= 0, got nan",
        "max_cost_usd = 2.5",
    ),
    ("{ max_cost_usd = inf }", "budget.max_cost_usd", "got inf", "max_cost_usd = 2.5"),
    ("{ max_cost_usd = -0.5 }", "budget.max_cost_usd", "got -0.5", "remove the key"),
    ("{ max_cost_usd = true }", "budget.max_cost_usd", "got true", "max_cost_usd = 2.5"),
    (
        "{ max_requests = -1 }",
        "budget.max_requests",
        f"must be an integer from 0 to {MAX_COUNT}, got -1",
        "write e.g. max_requests = 50, or remove the key for no limit",
    ),
    ("{ max_total_tokens = 1.5 }", "budget.max_total_tokens", "got 1.5", "max_total_tokens ="),
    ("{ max_input_tokens = true }", "budget.max_input_tokens", "got true", "max_input_tokens"),
    ('{ max_output_tokens = "9" }', "budget.max_output_tokens", 'got "9"', "max_output_tokens"),
    ("3", "budget", "must be a table, got 3", "budget = { max_total_tokens = 100000"),
    ('"none"', "budget", "must be a table", "max_cost_usd = 2.5 }"),
]


@pytest.mark.parametrize(("value", "key", "problem", "fix"), BAD_BUDGETS)
def test_a_bad_subagent_budget_names_the_key_the_value_and_the_fix(
    tmp_path: Path, value: str, key: str, problem: str, fix: str
) -> None:
    wrong = error(tmp_path, ECHO + f"budget = {value}\n")
    assert wrong.key == f"subagents[0].{key}"
    assert wrong.subagent == "echo"
    assert problem in str(wrong)
    assert fix in wrong.fix


@pytest.mark.parametrize(("value", "key", "problem", "fix"), BAD_BUDGETS)
def test_a_bad_runtime_budget_names_the_key_the_value_and_the_fix(
    tmp_path: Path, value: str, key: str, problem: str, fix: str
) -> None:
    wrong = error(tmp_path, f"[runtime]\nruntime_budget = {value}\n" + ECHO)
    assert wrong.key == f"runtime.runtime_{key}"
    assert problem in str(wrong)
    assert fix.replace("budget =", "runtime_budget =") in wrong.fix


def test_a_budget_key_in_runtime_is_meant_as_runtime_budget(tmp_path: Path) -> None:
    wrong = error(tmp_path, "[runtime]\nbudget = { max_cost_usd = 1 }\n" + ECHO)
    assert wrong.key == "runtime.budget"
    assert "runtime.budget: unknown key\n  fix: did you mean 'runtime_budget'?" in str(wrong)


def test_a_count_past_64_bits_is_refused(tmp_path: Path) -> None:
    # TOML integers are 64-bit, but the reader takes more: the check bounds them.
    wrong = error(tmp_path, ECHO + f"budget = {{ max_total_tokens = {MAX_COUNT + 1} }}\n")
    assert f"from 0 to {MAX_COUNT}, got {MAX_COUNT + 1}" in str(wrong)
    path = write(tmp_path, ECHO + f"budget = {{ max_total_tokens = {MAX_COUNT} }}\n")
    [echo] = load_server_config(path).subagents
    assert echo.budget == td.Budget(max_total_tokens=MAX_COUNT)


limit_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5),
    st.lists(st.integers(), max_size=2),
)


@given(st.dictionaries(st.sampled_from([*LIMITS, "max_token", "cost"]), limit_values))
def test_any_table_is_the_budget_it_says_or_a_config_error(table: dict[str, object]) -> None:
    error: ConfigError | None
    try:
        runtime = structure({"runtime_budget": table}, RuntimeSection, Path("x.toml"))
    except ConfigError as exc:
        error = exc
    else:
        error = None
    if error is not None:
        # Said about one key of the table, with a fix.
        assert error.key is not None
        assert error.key.removeprefix("runtime_budget.") in table
        assert error.fix
        return
    read = runtime.runtime_budget
    assert isinstance(read, td.Budget)
    # What was read is exactly what the table says: a limit is never changed.
    assert set(table) <= set(LIMITS)
    for name in LIMITS:
        value = table.get(name)
        got = getattr(read, name)
        if value is None:
            assert got is None
        else:
            assert isinstance(value, int | float)
            assert not isinstance(value, bool)
            assert math.isfinite(value)
            assert value >= 0
            assert got == value


def test_serve_with_a_bad_budget_exits_2_before_serving(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, ECHO + 'budget = { max_cost_usd = "2.5" }\n')
    assert main(["serve", "--config", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(
        f"trio-delegate serve: {path}: subagents[0].budget.max_cost_usd (subagent 'echo'): "
        'must be a number of US dollars, got the string "2.5"'
    )
    assert "fix: write the number without quotes, e.g. max_cost_usd = 2.5" in captured.err


async def test_a_configured_budget_stops_the_run_that_passes_it(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    module = f"spender_{uuid.uuid4().hex}"
    (tmp_path / f"{module}.py").write_text(
        textwrap.dedent(
            """
            import trio
            import trio_delegate as td

            async def spend(ctx):
                ctx.add_usage(td.Usage(requests=1, input_tokens=600, output_tokens=500))
                await trio.sleep(3600)  # an hour unless the budget stops it
                return "not stopped"
            """
        )
    )
    path = write(
        tmp_path,
        f"""
        [runtime]
        fail_closed = false
        runtime_budget = {{ max_requests = 5 }}
        [[subagents]]
        name = "spender"
        python = "{module}:spend"
        budget = {{ max_total_tokens = 1000 }}
        """,
    )
    loaded = load_server_config(path)
    async with (
        td.open_runtime(loaded.subagents, config=loaded.config) as rt,
        rt.open_parent("desk") as parent,
    ):
        with pytest.raises(td.RunCancelledError) as info:
            await parent.delegate("spender", "go")
        cause = info.value.__cause__
        assert isinstance(cause, td.BudgetExceededError)
        assert (cause.scope, cause.limit, cause.limit_value) == ("run", "max_total_tokens", 1000)
        assert rt.usage.total_tokens == 1100


def test_the_server_budget_is_each_connections_parent_budget(tmp_path: Path) -> None:
    path = write(tmp_path, "[server]\nbudget = { max_total_tokens = 500 }\n" + ECHO)
    assert load_server_config(path).parent_budget == td.Budget(max_total_tokens=500)
    assert load_server_config(write(tmp_path, ECHO)).parent_budget is None


@pytest.mark.parametrize(("value", "key", "problem", "fix"), BAD_BUDGETS)
def test_a_bad_server_budget_names_the_key_the_value_and_the_fix(
    tmp_path: Path, value: str, key: str, problem: str, fix: str
) -> None:
    wrong = error(tmp_path, f"[server]\nbudget = {value}\n" + ECHO)
    assert wrong.key == f"server.{key}"
    assert problem in str(wrong)
    assert fix in wrong.fix
