"""What the adapters do with a framework's final text, whatever a model wrote."""

from __future__ import annotations

import pytest

pytest.importorskip("pydantic_core")

from trio_delegate.adapters._common import structured

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
