"""The runtime core: runs, parents, their scheduling, lifecycle and retention.

This module is the core's face, as trio's ``_core`` is: the rest of the
package imports what it needs of the core from here, never from a module
inside it (tests/test_layering.py). Users see a part of it through
``trio_delegate`` and ``trio_delegate.lowlevel``; the rest (the run as an
observer sees it, the testing kit's hooks) is for the package's own layers.

The core imports no surface (tools, telemetry, CLI, MCP, adapters) and no
concrete store: a runtime is given its surfaces when it opens (``Surfaces``)
and stores declare what they can do. It holds no global state. Which form
of a run lives where, its state table, and where the code lives:
docs/contract.md, appendix.
"""

from ._context import ChildContext, worker_context
from ._events import RunEvents
from ._parent import Parent, abandon, talk_changed
from ._remote import answer_in_store
from ._retention import TOMBSTONES_PER_RETAINED_RUN
from ._run import CancelReason, Outcome, Run, StoredEnding, error_type
from ._runtime import (
    Internals,
    Runtime,
    UnstoppedRun,
    internals,
    open_runtime,
    unstopped_runs,
)
from ._settlements import SettledRuns
from ._surfaces import Surfaces, ToolsBinding

__all__ = [
    "TOMBSTONES_PER_RETAINED_RUN",
    "CancelReason",
    "ChildContext",
    "Internals",
    "Outcome",
    "Parent",
    "Run",
    "RunEvents",
    "Runtime",
    "SettledRuns",
    "StoredEnding",
    "Surfaces",
    "ToolsBinding",
    "UnstoppedRun",
    "abandon",
    "answer_in_store",
    "error_type",
    "internals",
    "open_runtime",
    "talk_changed",
    "unstopped_runs",
    "worker_context",
]
