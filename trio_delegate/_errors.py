"""The exception vocabulary of trio_delegate.

Every error is a :class:`DelegationError`; where a builtin describes the same
kind of failure (a bad value, a missing key, a timeout), the error subclasses
it too, so ``except ValueError`` and ``except LookupError`` keep working.

Errors are named by their *cause*: a run that was cancelled is a
:class:`RunCancelledError`, one whose child deadline passed is a
:class:`RunTimedOutError`, one whose runner raised is a
:class:`RunFailedError`.

Every exception class a caller can meet is defined here, the errors of
each adapter's runs aside (``ClaudeRunError``, ``CodexRunError`` ...: they
live with their adapter), so the vocabulary can be read in one place.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, final

import attrs

from ._json import text_problem

if TYPE_CHECKING:
    from pathlib import Path

__all__ = [
    "CommandFailedError",
    "ConfigError",
    "BudgetExceededError",
    "DelegationError",
    "ExpiredRunError",
    "InvalidArgumentsError",
    "IndeterminateError",
    "InvalidResultError",
    "LimitExceededError",
    "McpConfigError",
    "RunCancelledError",
    "RunFailedError",
    "RunTimedOutError",
    "NotInTrioError",
    "AskTimeoutError",
    "InputUnavailableError",
    "QuestionDeclinedError",
    "RuntimeClosedError",
    "StoreError",
    "UnknownRunError",
    "UnknownSubagentError",
    "UnresolvedDelegationError",
    "UnresolvedRun",
]


def _snake_case(name: str) -> str:
    base = name.removesuffix("Error") or name
    return re.sub(r"(?<!^)(?=[A-Z])", "_", base).lower()


class DelegationError(Exception):
    """Base class of every error raised by trio_delegate.

    Attributes:
        run_id: the run the error is about, or ``None``.
        subagent: the subagent the error is about, or ``None``.
        status: the run's status value (``"failed"``, ...) where one applies.
    """

    def __init__(
        self,
        message: str,
        *,
        run_id: str | None = None,
        subagent: str | None = None,
        status: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.run_id = run_id
        self.subagent = subagent
        self.status = status

    @classmethod
    def kind(cls) -> str:
        """The error's snake_case kind, as used in payloads (``"run_failed"``)."""
        return _snake_case(cls.__name__)

    def to_payload(self) -> dict[str, Any]:
        """Render the error as a JSON-ready tool-result payload.

        Returns:
            ``{"error": {"type": <kind>, "message": str, ...}}`` with
            ``run_id``, ``subagent`` and ``status`` present where they apply.
        """
        body: dict[str, Any] = {"type": self.kind(), "message": self.message}
        for key in ("run_id", "subagent", "status"):
            value = getattr(self, key)
            if value is not None:
                body[key] = value
        body.update(self._payload_extra())
        return {"error": body}

    def _payload_extra(self) -> dict[str, Any]:
        return {}

    def __str__(self) -> str:
        return self.message


class InvalidArgumentsError(DelegationError, ValueError):
    """An argument is malformed, out of range, or not allowed in this state."""


#: Longest subagent name an error carries back as it was asked (ours are short).
_MAX_NAME_ECHO = 128


class UnknownSubagentError(DelegationError, LookupError):
    """The named subagent is not a direct child of this parent.

    Attributes:
        allowed: the names this parent may delegate to.
    """

    def __init__(self, message: str, *, subagent: str | None, allowed: Sequence[str]) -> None:
        # The name asked for is carried only when it can be sent back as it
        # is (the message names it in any case): a model's text may be long,
        # or hold a lone surrogate no payload can encode (contract §15).
        if subagent is not None and (
            len(subagent) > _MAX_NAME_ECHO or text_problem(subagent) is not None
        ):
            subagent = None
        super().__init__(message, subagent=subagent)
        self.allowed = tuple(allowed)

    def _payload_extra(self) -> dict[str, Any]:
        return {"allowed": list(self.allowed)}


class UnknownRunError(DelegationError, LookupError):
    """No run with this id belongs to this parent of this runtime."""


class ExpiredRunError(UnknownRunError):
    """The run existed but was evicted by retention before this call."""


class RunFailedError(DelegationError):
    """The run ended ``failed``; the child's exception is ``__cause__``.

    Attributes:
        error_type: the child exception's type name.
        error_message: the child exception's message.
    """

    def __init__(
        self,
        message: str,
        *,
        run_id: str | None = None,
        subagent: str | None = None,
        error_type: str = "",
        error_message: str = "",
    ) -> None:
        super().__init__(message, run_id=run_id, subagent=subagent, status="failed")
        self.error_type = error_type
        self.error_message = error_message

    def _payload_extra(self) -> dict[str, Any]:
        return {"error_type": self.error_type, "error_message": self.error_message}


class InvalidResultError(RunFailedError):
    """The runner's result did not satisfy the run's ``final_schema``."""


class RunCancelledError(DelegationError):
    """The run ended ``cancelled`` before it completed."""


class RunTimedOutError(DelegationError, TimeoutError):
    """The run's child deadline passed before it completed."""


class QuestionDeclinedError(DelegationError):
    """The parent declined to answer a child's question (contract §19).

    Raised by ``ctx.ask`` in the runner; an ``on_input`` callback may raise it
    to decline.

    Attributes:
        question_id: the question declined, where known.
        reason: the parent's reason (``""`` when it gave none).
    """

    def __init__(
        self,
        message: str,
        *,
        question_id: str | None = None,
        reason: str = "",
        run_id: str | None = None,
        subagent: str | None = None,
        status: str | None = None,
    ) -> None:
        super().__init__(message, run_id=run_id, subagent=subagent, status=status)
        self.question_id = question_id
        self.reason = reason

    def _payload_extra(self) -> dict[str, Any]:
        extra: dict[str, Any] = {"reason": self.reason}
        if self.question_id is not None:
            extra["question_id"] = self.question_id
        return extra


class AskTimeoutError(DelegationError, TimeoutError):
    """A child's question was not answered within the ``timeout`` of its ``ask``.

    The run goes on; the question was withdrawn (contract §19).

    Attributes:
        question_id: the question withdrawn.
    """

    def __init__(self, message: str, *, question_id: str, run_id: str | None = None) -> None:
        super().__init__(message, run_id=run_id)
        self.question_id = question_id

    def _payload_extra(self) -> dict[str, Any]:
        return {"question_id": self.question_id}


class InputUnavailableError(DelegationError, RuntimeError):
    """Nobody can answer a child's question: a foreground ``delegate`` without
    ``on_input``, a run whose cancellation was delivered, or a context built
    outside a runtime (contract §19)."""


class LimitExceededError(DelegationError):
    """A configured limit (live runs, depth, result size) was exceeded."""


class BudgetExceededError(LimitExceededError):
    """A scope (a run, a parent, the runtime) spent more than its budget allows
    (contract §20).

    The cause of the ``RunCancelledError`` of each run a budget stop
    cancelled, and what admission in a stopped or spent scope raises.

    Attributes:
        scope: ``"run"``, ``"parent"`` or ``"runtime"``.
        limit: the budget's field that was passed (``"max_total_tokens"``).
        limit_value: that field's value.
        spent: what the scope had spent of it.
    """

    def __init__(
        self,
        message: str,
        *,
        scope: str,
        limit: str,
        limit_value: int | float,
        spent: int | float,
        run_id: str | None = None,
        subagent: str | None = None,
    ) -> None:
        super().__init__(message, run_id=run_id, subagent=subagent)
        self.scope = scope
        self.limit = limit
        self.limit_value = limit_value
        self.spent = spent

    def _payload_extra(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "limit": self.limit,
            "limit_value": self.limit_value,
            "spent": self.spent,
        }


class RuntimeClosedError(DelegationError, RuntimeError):
    """The parent or runtime this call was made on is closed."""


class NotInTrioError(DelegationError, RuntimeError):
    """A runtime was used outside the Trio run it lives in.

    trio_delegate runs under Trio: ``open_runtime`` is entered inside
    ``trio.run`` (not ``asyncio.run``), and a runtime's block is entered and
    left in that same run.
    """


class StoreError(DelegationError, OSError):
    """A durable store could not be opened, read or written.

    Attributes:
        path: the store's file, or ``None`` for a store without one.
    """

    def __init__(self, message: str, *, path: str | None = None, run_id: str | None = None):
        super().__init__(message, run_id=run_id)
        self.path = path

    def _payload_extra(self) -> dict[str, Any]:
        return {"path": self.path} if self.path is not None else {}


@final
@attrs.frozen
class UnresolvedRun:
    """One entry of an :class:`UnresolvedDelegationError`."""

    run_id: str
    subagent: str
    status: str
    why: str


class UnresolvedDelegationError(DelegationError, RuntimeError):
    """A parent claimed completion while delegated work was unresolved.

    Attributes:
        unresolved: every unresolved run, oldest first.
    """

    def __init__(self, message: str, *, unresolved: Sequence[UnresolvedRun]) -> None:
        super().__init__(message)
        self.unresolved = tuple(unresolved)

    def _payload_extra(self) -> dict[str, Any]:
        return {"unresolved": [attrs.asdict(entry) for entry in self.unresolved]}


class CommandFailedError(DelegationError, RuntimeError):
    """A command subagent's process did not produce a usable result.

    Raised inside the run, so it becomes the ``__cause__`` of the
    ``RunFailedError`` a parent sees.

    Attributes:
        returncode: the exit code (negative: killed by that signal), or
            ``None`` when the process exited cleanly but its output was
            unusable, or never started.
        stderr_tail: the last lines of its stderr, possibly empty.
    """

    def __init__(
        self,
        message: str,
        *,
        returncode: int | None = None,
        stderr_tail: str = "",
        run_id: str | None = None,
        subagent: str | None = None,
    ) -> None:
        super().__init__(message, run_id=run_id, subagent=subagent)
        self.returncode = returncode
        self.stderr_tail = stderr_tail


class ConfigError(DelegationError, ValueError):
    """The server's configuration file is missing, malformed or inconsistent.

    Attributes:
        path: the configuration file.
        key: the offending key (``"subagents[1].command"``), or ``None`` for
            the file as a whole.
        fix: what to change.
    """

    def __init__(
        self, path: Path, key: str | None, problem: str, fix: str, *, subagent: str | None = None
    ) -> None:
        where = f"{path}: {key}" if key else str(path)
        if subagent is not None:
            where += f" (subagent {subagent!r})"
        super().__init__(f"{where}: {problem}\n  fix: {fix}", subagent=subagent)
        self.path = path
        self.key = key
        self.fix = fix


class McpConfigError(DelegationError, ValueError):
    """A client's configuration for ``trio-delegate serve`` cannot be made.

    Attributes:
        problem: what is wrong (a path that does not resolve, a configuration
            that does not load, the MCP SDK missing).
        fix: what to do about it.
    """

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(f"{problem}\n  fix: {fix}")
        self.problem = problem
        self.fix = fix


class IndeterminateError(Exception):
    """The runtime may answer this either way: it depends on how Trio orders
    tasks that wake at the same instant. Avoid the tie (or discard the case).

    Raised by ``trio_delegate.testing.LifecycleModel``, the oracle of a
    property-based test: it is about a prediction, not a run, so it is no
    :class:`DelegationError`.
    """
