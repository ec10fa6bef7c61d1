"""The public objects show exactly the contract (§2, §17), under the package's own name."""

from __future__ import annotations

import pickle

import pytest

import trio_delegate as td
from tests.helpers import open_parent, returning, sub

#: Contract §2, §17, §19 and §20: the only public names of Parent and Runtime.
PARENT_NAMES = {
    "answer",
    "cancel",
    "check_resolved",
    "continue_run",
    "decline",
    "delegate",
    "owner",
    "questions",
    "runs",
    "settled",
    "start",
    "status",
    "subagents",
    "tools",
    "unobserved",
    "usage",
    "wait",
}
RUNTIME_NAMES = {"config", "live_runs", "open_parent", "store", "subagents", "usage"}


def _public(value: object) -> set[str]:
    return {name for name in dir(value) if not name.startswith("_")}


def test_parent_and_runtime_show_only_the_contract_names() -> None:
    assert _public(td.Parent) == PARENT_NAMES
    assert _public(td.Runtime) == RUNTIME_NAMES


async def test_open_objects_show_only_the_contract_names() -> None:
    async with td.open_runtime([sub("ok", returning(1))]) as runtime:
        assert _public(runtime) == RUNTIME_NAMES
        async with runtime.open_parent() as parent:
            assert _public(parent) == PARENT_NAMES


@pytest.mark.parametrize("name", td.__all__)
def test_every_public_name_reports_the_package_as_its_module(name: str) -> None:
    value = getattr(td, name)
    if hasattr(value, "__module__") and (isinstance(value, type) or callable(value)):
        assert value.__module__ == "trio_delegate"


def test_public_errors_pickle_under_the_package_name() -> None:
    error = td.RunFailedError("it failed", run_id="run_1", subagent="ok")
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is td.RunFailedError
    assert str(copy) == str(error)


@pytest.mark.parametrize(
    ("handle", "made_by"),
    [
        (td.Runtime, "trio_delegate.open_runtime()"),
        (td.Parent, "Runtime.open_parent()"),
        (td.DelegationTools, "Parent.tools()"),
    ],
)
def test_each_handle_names_where_it_comes_from(handle: type, made_by: str) -> None:
    with pytest.raises(TypeError) as raised:
        handle()
    message = str(raised.value)
    assert message.startswith(f"trio_delegate.{handle.__name__} has no public constructor")
    assert f"get one from {made_by}" in message


async def test_reprs_and_attrs_values_still_work_under_the_package_name() -> None:
    async with open_parent(sub("ok", returning({"x": 1}))) as parent:
        result = await parent.delegate("ok", "go")
    assert repr(result).startswith("RunResult(")
    assert result.final_result == {"x": 1}
