"""trio_delegate: foreground and background delegation to subagents on Trio.

A :class:`Runtime` (``async with open_runtime(...)``) is a nursery that owns
every child run; a :class:`Parent` (``async with rt.open_parent(...)``)
delegates to its direct children in the foreground (:meth:`Parent.delegate`)
or the background (:meth:`Parent.start`, then ``status`` / ``wait`` /
``cancel``), under a fail-closed policy. What a surface built on it (a
server, a command line) needs beyond this API is in ``trio_delegate.lowlevel``.
"""

from . import lowlevel as lowlevel
from ._config import INHERIT, Config
from ._core import ChildContext, Parent, Runtime, SettledRuns
from ._errors import (
    AskTimeoutError,
    BudgetExceededError,
    DelegationError,
    ExpiredRunError,
    InputUnavailableError,
    InvalidArgumentsError,
    InvalidResultError,
    LimitExceededError,
    NotInTrioError,
    QuestionDeclinedError,
    RunCancelledError,
    RunFailedError,
    RuntimeClosedError,
    RunTimedOutError,
    StoreError,
    UnknownRunError,
    UnknownSubagentError,
    UnresolvedDelegationError,
    UnresolvedRun,
)
from ._public_names import show_under
from ._results import AnswerAck, CancelAck, Output, Progress, Question, RunHandle, RunResult
from ._runners._command import CommandFailedError, CommandRunner
from ._runners._model import ModelRunner, model_runner
from ._runners._model_live import Prices
from ._status import RunStatus
from ._stores._memory import MemoryStore
from ._stores._postgres import PostgresStore
from ._stores._protocol import ChangeBatch, ResultStore, RunRecord, StoredRun, StoreSnapshot
from ._stores._sqlite import SQLiteStore
from ._subagent import Subagent
from ._surfaces import open_runtime
from ._tools import DelegationTools, ToolDefinition
from ._usage import Budget, Usage

__version__ = "0.1.0.dev0"

__all__ = [
    "INHERIT",
    "AnswerAck",
    "AskTimeoutError",
    "Budget",
    "BudgetExceededError",
    "CancelAck",
    "ChangeBatch",
    "ChildContext",
    "CommandFailedError",
    "CommandRunner",
    "Config",
    "DelegationError",
    "DelegationTools",
    "ExpiredRunError",
    "InputUnavailableError",
    "InvalidArgumentsError",
    "InvalidResultError",
    "LimitExceededError",
    "MemoryStore",
    "ModelRunner",
    "Output",
    "Parent",
    "PostgresStore",
    "Prices",
    "Progress",
    "Question",
    "QuestionDeclinedError",
    "RunCancelledError",
    "RunFailedError",
    "ResultStore",
    "RunHandle",
    "RunRecord",
    "RunResult",
    "RunStatus",
    "RunTimedOutError",
    "Runtime",
    "NotInTrioError",
    "RuntimeClosedError",
    "SQLiteStore",
    "SettledRuns",
    "StoreError",
    "StoreSnapshot",
    "StoredRun",
    "Subagent",
    "ToolDefinition",
    "UnknownRunError",
    "UnknownSubagentError",
    "UnresolvedDelegationError",
    "UnresolvedRun",
    "Usage",
    "model_runner",
    "open_runtime",
]


show_under(__name__, globals(), __all__)
del show_under
