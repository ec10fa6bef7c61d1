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
    ``None``.

    A process that loaded only the tracing API (the MCP SDK does) and set no
    tracer provider loads nothing more: a meter provider cannot have been set
    without the metrics API.
    """
    if not any(name in os.environ for name in _PROVIDER_VARIABLES):
        if "opentelemetry" not in sys.modules:
            return None
        if "opentelemetry.metrics" not in sys.modules and not _tracer_provider_set():
            # Nothing to observe for, and trio_delegate._otel (which imports
            # the metrics API) stays unloaded: a runtime opens quicker.
            return None
    try:
        from ._otel import open_telemetry
    except ImportError:  # an opentelemetry module without the API's trace and metrics
        return None
    return open_telemetry()


def _tracer_provider_set() -> bool:
    """Whether a tracer provider was set, asked of the tracing API only if it is loaded."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return False
    try:
        provider = trace.get_tracer_provider()
        # Without set_tracer_provider the API hands out a stand-in.
        return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)
    except Exception:  # an API unlike the one known here: trio_delegate._otel decides
        return True
