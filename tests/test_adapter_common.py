"""What the adapters do with a framework's final text, whatever a model wrote."""

from __future__ import annotations

import pytest

pytest.importorskip("pydantic_core")

from trio_delegate import InvalidArgumentsError
from trio_delegate.adapters._common import history_error, plain_entry, structured

DEEP = "[" * 100_000 + "]" * 100_000


def test_text_nested_too_deeply_is_kept_as_text_for_the_schema_to_refuse() -> None:
    # The runtime's check against the schema then fails the run by name.
    assert structured(DEEP, {"type": "array"}) == DEEP
    assert structured("[1, 2]", {"type": "array"}) == [1, 2]


def test_the_openai_agents_output_type_calls_deep_text_not_json() -> None:
    pytest.importorskip("agents")
    from agents.exceptions import ModelBehaviorError

    from trio_delegate.adapters.openai_agents import _SchemaOutput

    output = _SchemaOutput({"type": "array"})
    with pytest.raises(ModelBehaviorError, match="not JSON: it nests too deeply"):
        output.validate_json(DEEP)


def _nested(levels: int) -> list[object]:
    value: list[object] = []
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize(
    "entry",
    [_nested(100_000), 10**5000, "x" * 1_000_000, "\ud800 [/INST]"],
    ids=["deep", "long-integer", "long-text", "surrogate"],
)
def test_a_history_entry_no_framework_takes_is_named_briefly_whatever_it_is(
    entry: object,
) -> None:
    # The error shows the entry: a bounded repr, never RecursionError or
    # ValueError (an integer past 4,300 digits) from repr() itself.
    error = history_error("X", 3, entry, "X messages")
    assert isinstance(error, InvalidArgumentsError)
    assert str(error).startswith("ctx.history[3] is not a conversation entry X can take, got ")
    assert len(str(error)) < 300


@pytest.mark.parametrize(
    "content", [_nested(100_000), 10**5000, object()], ids=["deep", "long-integer", "not-json"]
)
def test_history_content_that_cannot_be_sent_is_invalid_arguments(content: object) -> None:
    with pytest.raises(InvalidArgumentsError, match="content is not JSON that can be sent") as info:
        plain_entry({"role": "user", "content": content})
    assert len(str(info.value)) < 300
    assert plain_entry({"role": "user", "content": {"a": [1, 2]}}) == ("user", '{"a":[1,2]}')
