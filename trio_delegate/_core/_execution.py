"""The body of a run's task: call the runner under its child deadline, then settle.

How a runner's ending maps to a terminal state (contract §3):

* it returned → ``completed`` when the result is JSON-ready and small
  enough, else ``failed``; a return after an unobserved cancel request is
  still ``completed``;
* it raised an ``Exception`` → ``failed`` (the exception is kept as the cause);
* it was cancelled → ``cancelled`` or ``timed_out`` (see
  :meth:`Run.settle_interrupted`); a cancellation from outside the run's own
  scope propagates after settling;
* it raised another ``BaseException`` (``KeyboardInterrupt``, ``SystemExit``)
  → ``failed``, then the exception propagates: it is never swallowed.
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring
from typing import TYPE_CHECKING, Any

import trio

from .._errors import InvalidResultError, LimitExceededError
from .._results import Output
from .._schema import SchemaMismatch
from ._context import ChildContext
from ._groups import open_transparent_nursery

if TYPE_CHECKING:
    from ._run import Run

__all__ = ["execute"]

# Marks "the runner never returned" (its cancel scope swallowed the Cancelled).
_NO_VALUE: Any = object()

# Built once: json.dumps with options builds a new encoder on every call, which
# costs more than encoding a small result. Encoders keep no state between calls.
_RESULT_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
_TRANSCRIPT_ENCODER = json.JSONEncoder(allow_nan=False)


async def execute(run: Run) -> None:
    """Run *run*'s runner to its end and settle the run exactly once."""
    scope = run.scope
    assert scope is not None
    value = _NO_VALUE
    try:
        with scope:
            # The common case inline: one coroutine fewer per run.
            if run.subagent.children:
                value = await _call_with_nested_parent(run)
            else:
                value = await run.subagent.runner(_context(run))
    except BaseException as exc:
        reraise = _settle_raised(run, exc)
        if reraise is exc:
            raise
        if reraise is not None:
            raise reraise from None
        return
    if value is _NO_VALUE:
        run.settle_interrupted()
        return
    try:
        _settle_returned(run, value)
    except Exception as exc:
        # Whatever a result does to the checks (a custom type's hook raising,
        # say), the run settles: a waiter must never be left hanging.
        run.settle_failed(exc)


def _context(run: Run, parent: Any = None) -> ChildContext:
    return ChildContext(
        run.run_id,
        run.subagent.name,
        run.task,
        run.schema.json_schema if run.schema is not None else None,
        run.history,
        run.deadline,
        parent,
    )


async def _call_with_nested_parent(run: Run) -> Any:
    """Call a runner that may delegate: its children live inside this scope."""
    returned = False
    try:
        async with open_transparent_nursery() as nursery:
            nested = run.parent._open_nested(run, nursery)
            try:
                value = await run.subagent.runner(_context(run, nested))
                returned = True
            finally:
                nested._close_now()
    except trio.Cancelled:
        # Once the runner has returned, its outcome stands: a deadline or
        # cancellation arriving while its children are joined must not replace
        # it (contract §3). The run settles without another checkpoint.
        if not returned:
            raise
    # The runner returned: that is its claim of completion (contract §7).
    nested._raise_if_unresolved()
    return value


def _settle_raised(run: Run, exc: BaseException) -> BaseException | None:
    """Settle a run whose runner raised *exc*; return what must propagate."""
    if isinstance(exc, trio.Cancelled):
        run.settle_interrupted()
        return exc
    if isinstance(exc, BaseExceptionGroup):
        cancelled, rest = exc.split(trio.Cancelled)
        if rest is None:
            run.settle_interrupted()
            return exc
        run.settle_failed(_single(rest))
        if isinstance(rest, Exception):
            return cancelled
        return exc
    run.settle_failed(exc)
    if isinstance(exc, Exception):
        return None
    return exc


def _single(exc: BaseException) -> BaseException:
    """Unwrap a group that holds exactly one exception."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _json_size(value: Any) -> int:
    """Bytes of *value* as compact UTF-8 JSON.

    Raises:
        TypeError, ValueError: *value* is not JSON-serialisable.
    """
    # A string goes to the C escaper alone, without the encoder's machinery:
    # most results of language-model subagents are one string.
    text = encode_basestring(value) if type(value) is str else _RESULT_ENCODER.encode(value)
    return len(text) if text.isascii() else len(text.encode())


def _settle_returned(run: Run, value: Any) -> None:
    """Settle a run whose runner returned: check the result, then complete it."""
    transcript = None
    if isinstance(value, Output):
        value, transcript = value.final_result, value.transcript
    schema = run.schema
    if schema is not None:
        value = schema.prepare(value)
    limit = run.parent._runtime.config.max_result_bytes
    try:
        size = 4 if value is None else _json_size(value)
        if transcript is not None:
            _TRANSCRIPT_ENCODER.encode(transcript)
    except (TypeError, ValueError) as exc:
        run.settle_failed(exc)
        return
    if size > limit:
        run.settle_failed(
            LimitExceededError(
                f"the result is {size} bytes of JSON; at most {limit} are allowed "
                "(Config.max_result_bytes): return a smaller result",
                run_id=run.run_id,
                subagent=run.subagent.name,
            )
        )
        return
    if schema is not None:
        try:
            value = schema.apply(value)
        except SchemaMismatch as exc:
            run.settle_failed(exc, InvalidResultError)
            return
    run.settle_completed(value, transcript)
