"""Which observer a new runtime uses: OpenTelemetry's, when an application set it up.

The package's ``open_runtime`` asks :func:`telemetry_events` as each
runtime opens (``_surfaces``). A process that never
loaded OpenTelemetry's API, and whose environment does not tell it to load
a provider, imports nothing of it: no provider can have been set without
the API.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._core import RunEvents

__all__ = ["telemetry_events"]

#: What makes OpenTelemetry's API load a provider on its own when first asked for one.
_PROVIDER_VARIABLES = ("OTEL_PYTHON_TRACER_PROVIDER", "OTEL_PYTHON_METER_PROVIDER")


def telemetry_events() -> RunEvents | None:
    """OpenTelemetry's observer when its API is loaded (or the environment names a
    provider) and a tracer or meter provider is set (``trio_delegate._otel``), else
    ``None``."""
    if "opentelemetry" not in sys.modules and not any(
        name in os.environ for name in _PROVIDER_VARIABLES
    ):
        return None
    try:
        from ._otel import open_telemetry
    except ImportError:  # an opentelemetry module without the API's trace and metrics
        return None
    return open_telemetry()
