"""How a configuration file's table is declared: a key is one attrs field.

A table made here, as the budget table of a subagent is made, is read by the
same converter and speaks with the same ConfigError as the file's own tables.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import attrs
import pytest

from trio_delegate._config_file._structure import key, structure
from trio_delegate._config_file._values import positive_int, text
from trio_delegate._server_config import ConfigError

PATH = Path("budget.toml")


@attrs.frozen(kw_only=True)
class Budget:
    """A table of two keys, each one field."""

    keys_say: ClassVar[str] = "[budget] takes these keys"

    max_tokens: int = key(1000, check=positive_int, fix="write e.g. max_tokens = 20000")
    owner: str = key(check=text, missing=("has no owner", 'add owner = "..."'))


@attrs.frozen(kw_only=True)
class File:
    keys_say: ClassVar[str] = "the file takes these tables"

    budget: Budget = key(table=Budget, fix="write it as [budget]")


def error(data: dict[str, Any]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        structure(data, File, PATH)
    return info.value


def test_a_field_is_a_key_with_its_default() -> None:
    read = structure({"budget": {"owner": "desk"}}, File, PATH)
    assert read.budget == Budget(max_tokens=1000, owner="desk")
    read = structure({"budget": {"owner": "desk", "max_tokens": 5}}, File, PATH)
    assert read.budget.max_tokens == 5


def test_a_wrong_value_names_the_key_the_value_and_the_fields_fix() -> None:
    wrong = error({"budget": {"owner": "desk", "max_tokens": 0}})
    assert wrong.key == "budget.max_tokens"
    assert str(wrong) == (
        "budget.toml: budget.max_tokens: must be an integer >= 1, got 0\n"
        "  fix: write e.g. max_tokens = 20000"
    )


def test_an_unknown_key_is_said_first_with_the_key_meant() -> None:
    # The first unknown key in the file, before the wrong value next to it.
    wrong = error({"budget": {"max_tokens": 0, "max_token": 5, "zzz": 1, "owner": "x"}})
    assert wrong.key == "budget.max_token"
    assert str(wrong).endswith(
        "unknown key\n  fix: did you mean 'max_tokens'? Otherwise remove it: "
        "[budget] takes these keys: max_tokens, owner"
    )


def test_a_missing_key_is_said_of_its_table() -> None:
    wrong = error({"budget": {}})
    assert wrong.key == "budget"
    assert str(wrong) == 'budget.toml: budget: has no owner\n  fix: add owner = "..."'


def test_a_table_that_is_not_one() -> None:
    wrong = error({"budget": 3})
    assert wrong.key == "budget"
    assert str(wrong) == "budget.toml: budget: must be a table, got 3\n  fix: write it as [budget]"
