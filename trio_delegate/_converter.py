"""The package's one cattrs converter: values to JSON-ready data and back.

Everything trio_delegate turns into JSON (tool results, error payloads,
structured results) and everything it structures back into a host's attrs
class or dataclass goes through :func:`converter`. It is the JSON preset of
cattrs, so unions of JSON scalars structure as themselves.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cattrs.preconf.json import JsonConverter

__all__ = ["converter", "to_json_ready"]


@functools.cache
def converter() -> JsonConverter:
    """The converter, made on first use.

    cattrs is imported only then: its import (about 10 ms) would otherwise
    come before ``trio-delegate serve``'s first answer, which needs none of it.
    """
    from cattrs.preconf.json import make_converter

    return make_converter()


def to_json_ready(value: Any) -> Any:
    """Unstructure *value* (attrs instances, dataclasses, enums, …) to JSON-ready data."""
    return converter().unstructure(value)
