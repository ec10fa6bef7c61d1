"""What the runtime tells an observer about its runs (traces and metrics).

The core calls a :class:`RunEvents` at each point of a run's life that a
trace or a metric shows: admission (in the caller's task, so the caller's
current span can become the run's parent), start, the run's own task
beginning, a cancel request, an observation, the end, an admission undone;
the store writer's commits; each tool call. A runtime without an observer
holds ``None`` and each call site costs one comparison.

:func:`runtime_events` gives a new runtime OpenTelemetry's observer
(``trio_delegate._otel``) when an application has set a tracer or meter
provider, else ``None``. A process that never loaded OpenTelemetry imports
nothing: no provider can have been set without its API.
"""

from __future__ import annotations

import os
import sys
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ._run import CancelReason, Run

__all__ = ["RunEvents", "runtime_events"]


class RunEvents(Protocol):
    """An observer of one runtime's runs. Every method must return quickly and never raise."""

    def admitted(self, run: Run) -> None:
        """*run* was admitted (called in the admitting caller's task)."""

    def started(self, run: Run) -> None:
        """*run* started running (its child deadline counts from now)."""

    def entered(self, run: Run) -> None:
        """*run*'s own task begins (anything it sets in its context is the run's)."""

    def cancel_requested(self, run: Run, reason: CancelReason) -> None:
        """A first cancel request reached live *run*."""

    def observed(self, run: Run) -> None:
        """A wait returned *run*'s result (an observation, contract §7)."""

    def ended(self, run: Run) -> None:
        """*run* is terminal (its outcome is committed)."""

    def withdrawn(self, run: Run) -> None:
        """*run*'s admission was undone: it never existed for its caller."""

    def committed(self, records: int, seconds: float) -> None:
        """The store writer committed *records* records in *seconds* (wall clock)."""

    def tool_call(self, name: str, parent_owner: str) -> AbstractContextManager[Any]:
        """A context around one model-facing tool call; its value takes ``note_run(run_id)``."""


#: What makes OpenTelemetry's API load a provider on its own when first asked for one.
_PROVIDER_VARIABLES = ("OTEL_PYTHON_TRACER_PROVIDER", "OTEL_PYTHON_METER_PROVIDER")


def runtime_events() -> RunEvents | None:
    """The observer a new runtime uses: ``None`` when nothing observes runs.

    OpenTelemetry's when its API is loaded (or told to load a provider by
    the environment) and a provider is set (``trio_delegate._otel``).
    """
    if "opentelemetry" not in sys.modules and not any(
        name in os.environ for name in _PROVIDER_VARIABLES
    ):
        return None
    try:
        from .._otel import open_telemetry
    except ImportError:  # an opentelemetry module without the API's trace and metrics
        return None
    return open_telemetry()
