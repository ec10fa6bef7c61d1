"""Tools for testing code that embeds trio_delegate (and trio_delegate itself).

* **Scripted runners** — build subagents from steps (:class:`Script`,
  :class:`ScriptedRunner`): sleep on the Trio clock, checkpoint, return,
  raise, hang, ignore cancellation for a while, start nested runs. Every step
  is recorded in a :class:`Trace` whose rendering has no random run ids.
* **Virtual time** — run a runtime on ``trio.testing.MockClock``
  (:func:`run`, :func:`mock_clock`) and move time by hand
  (:func:`advance`, :func:`jump_to_next_deadline`, :func:`advance_until_idle`,
  :func:`settle`, :func:`drive`).
* **A Trio run in a helper thread** — :class:`TrioThread`, to drive a
  runtime from synchronous code such as a Hypothesis state machine.
* **A reference model** — :class:`LifecycleModel` predicts, in plain Python,
  every status, wait, cancel and fail-closed answer (:class:`Answer`) and the
  runners' trace for a sequence of operations.
* **A load simulation** — :func:`simulate` plays thousands of runs over
  virtual hours and returns a trace that is the same on every run.
* **A scripted model** — :class:`ScriptedModel` stands in for a language
  model: it replays tool calls (:class:`ToolCall`) against
  ``parent.tools()`` and records every answer.
* **Histories** — :class:`HistoryRecorder` wraps a host's parents
  (:class:`RecordedParent`) and records every call and its answer
  (:class:`HistoryEvent`), per process, with both clocks;
  :func:`check_history` reads the histories of every process and the
  store's final records and returns each :class:`Violation` of the contract
  (:data:`INVARIANTS`) with the calls that show it;
  :func:`check_history_report` adds how many cases each invariant was
  checked on (:class:`HistoryReport`).
* **A runtime's internals** — :func:`internals` takes a snapshot
  (:class:`Internals`) of what no contract promises but a test of
  trio_delegate itself may need to see: whether an observer follows the
  runs, which runs are held in memory, how the store's writer batched.

See the testing kit's guide for a worked example:
<https://trio-delegate.github.io/trio-delegate/testing/>.
"""

from .._core import Internals, internals
from ._clock import (
    advance,
    advance_until_idle,
    current_mock_clock,
    drive,
    jump_to_next_deadline,
    mock_clock,
    run,
    settle,
)
from ._history import (
    HistoryEvent,
    HistoryRecorder,
    RecordedParent,
    RecordedSettled,
    read_history,
)
from ._history_check import (
    INVARIANTS,
    HistoryReport,
    Violation,
    check_history,
    check_history_report,
)
from ._model import Answer, IndeterminateError, LifecycleModel, answer_of
from ._scripted import (
    Checkpoint,
    Delegate,
    Hang,
    Raise,
    Return,
    Script,
    ScriptedRunner,
    ScriptStep,
    Shielded,
    Sleep,
    Spend,
    Start,
    WaitStarted,
)
from ._scripted_model import Ref, ScriptedModel, ToolCall, ToolCallRecord
from ._simulation import SimulationResult, simulate
from ._thread import Entered, TrioThread
from ._trace import Trace, TraceEvent

__all__ = [
    # scripted runners
    "Checkpoint",
    "Delegate",
    "Hang",
    "Raise",
    "Return",
    "Script",
    "ScriptedRunner",
    "ScriptStep",
    "Shielded",
    "Sleep",
    "Spend",
    "Start",
    "WaitStarted",
    "Trace",
    "TraceEvent",
    # virtual time
    "advance",
    "advance_until_idle",
    "current_mock_clock",
    "drive",
    "jump_to_next_deadline",
    "mock_clock",
    "run",
    "settle",
    # a Trio run in a helper thread
    "Entered",
    "TrioThread",
    # the reference model
    "Answer",
    "IndeterminateError",
    "LifecycleModel",
    "answer_of",
    # the load simulation
    "SimulationResult",
    "simulate",
    # a scripted model making tool calls
    "Ref",
    "ScriptedModel",
    "ToolCall",
    "ToolCallRecord",
    # histories and their checker
    "HistoryEvent",
    "HistoryRecorder",
    "HistoryReport",
    "INVARIANTS",
    "RecordedParent",
    "RecordedSettled",
    "Violation",
    "check_history",
    "check_history_report",
    "read_history",
    # a runtime's internals
    "Internals",
    "internals",
]
