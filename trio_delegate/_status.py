"""The lifecycle states of a run (contract §3)."""

from __future__ import annotations

import enum
from typing import final

__all__ = ["LIVE_STATUSES", "TERMINAL_STATUSES", "RunStatus"]


@final
class RunStatus(enum.StrEnum):
    """Where a run is in its lifecycle.

    ``pending → running → completed | failed | cancelled | timed_out``, and
    ``pending → cancelled``; a running run whose runner asked its parent a
    question reads ``input_required`` until the last open question is
    answered, declined or withdrawn (contract §19). Terminal states never change.
    """

    PENDING = "pending"
    RUNNING = "running"
    INPUT_REQUIRED = "input_required"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"

    @property
    def is_terminal(self) -> bool:
        """Whether the run has settled (its state can never change again)."""
        return self in TERMINAL_STATUSES


LIVE_STATUSES = frozenset({RunStatus.PENDING, RunStatus.RUNNING, RunStatus.INPUT_REQUIRED})
TERMINAL_STATUSES = frozenset(set(RunStatus) - LIVE_STATUSES)
