"""The package's one cattrs converter: values to JSON-ready data and back.

Everything trio_delegate turns into JSON (tool results, error payloads,
structured results) and everything it structures back into a host's attrs
class or dataclass goes through :data:`converter`. It is the JSON preset of
cattrs, so unions of JSON scalars structure as themselves.
"""

from __future__ import annotations

from typing import Any

from cattrs.preconf.json import JsonConverter, make_converter

__all__ = ["converter", "to_json_ready"]

converter: JsonConverter = make_converter()


def to_json_ready(value: Any) -> Any:
    """Unstructure *value* (attrs instances, dataclasses, enums, …) to JSON-ready data."""
    return converter.unstructure(value)
