"""What the runtime tells an observer about its runs (traces and metrics).

The core calls a :class:`RunEvents` at each point of a run's life that a
trace or a metric shows: admission (in the caller's task, so the caller's
current span can become the run's parent), start, the run's own task
beginning, a cancel request, an observation, the end, an admission undone;
the store writer's commits; each tool call. A runtime without an observer
holds ``None``, and each call site tests for it.

A runtime is given its observer when it opens, by the :class:`Surfaces`
(``_surfaces``) the package's ``open_runtime`` passes it (OpenTelemetry's,
``trio_delegate._observe``, when an application set it up): the core imports
no observer itself.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ._run import CancelReason, Run

__all__ = ["RunEvents"]


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
