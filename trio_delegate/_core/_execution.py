"""The body of a run's task: call the runner under its child deadline, check what
it returned, and decide the run's outcome exactly once.

How a runner's ending maps to an outcome (see ``_run`` for the states):

* it returned → the result is checked (JSON, nesting, size, ``final_schema``)
  inside the run's cancel scope, so the child deadline bounds the check too;
  it passes → ``completed``, else ``failed``; a return after an unobserved
  cancel request is still ``completed``;
* it raised an ``Exception`` → ``failed`` (the exception is kept as the cause);
* it was cancelled → ``cancelled`` or ``timed_out`` (:meth:`Run.interrupted`);
  a cancellation from outside the run's own scope propagates after deciding;
* it raised another ``BaseException`` (``KeyboardInterrupt``, ``SystemExit``)
  → ``failed``, then the exception propagates: it is never swallowed.

Whatever a runner returns or raises, the run is decided: no waiter is ever
left hanging.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, final

import trio

from .._errors import InvalidResultError, LimitExceededError
from .._json import NULL, CanonicalJson, JsonProblem, is_small
from .._results import Output
from .._schema import SchemaMismatch
from .._status import RunStatus
from .._threads import run_sync
from ._context import context_of
from ._groups import open_transparent_nursery
from ._run import Outcome, completed, failed
from ._spending import report

if TYPE_CHECKING:
    from .._config import Config
    from ._parent_host import ParentHost
    from ._run import Run

__all__ = ["execute"]

#: The outcome of every run whose runner only acts and returns ``None``.
_COMPLETED_NULL: Final = Outcome(RunStatus.COMPLETED, NULL)


async def execute(run: Run, host: ParentHost) -> None:
    """Run *run*'s runner to its end and decide the run exactly once."""
    try:
        scope = run.scope
        assert scope is not None
        events = host.events
        if events is not None:
            events.entered(run)
        outcome: Outcome | None = None
        try:
            with scope:
                subagent = run.subagent
                if subagent.children:
                    # Its runs live in a nursery of this task, inside the scope.
                    value = await _call_with_nested_parent(run, host)
                else:
                    value = await subagent.runner(context_of(run))
                try:
                    checked = _check(run, host.config, value)
                except Exception as exc:
                    # Whatever the value does to the checks (a type's hook
                    # raising, say), the run is decided: it failed.
                    checked = failed(exc)
                outcome = checked if type(checked) is Outcome else await checked.run()
        except BaseException as exc:
            reraise = _decide_raised(run, exc)
            if reraise is exc:
                raise
            if reraise is not None:
                raise reraise from None
            return
        # None: the scope caught a cancellation (a cancel request or the deadline).
        run.decide(outcome if outcome is not None else run.interrupted())
    finally:
        # Counted from ParentHost.launch: the grace watchdog ends with the last
        # task, and logs what a run decided without its runner returned late.
        host.grace.task_returned(run)


async def _call_with_nested_parent(run: Run, host: ParentHost) -> Any:
    """Call a runner that may delegate: its children live inside this scope."""
    returned = False
    nested: ParentHost | None = None
    try:
        async with open_transparent_nursery() as nursery:
            nested = host.open_nested(run, nursery)
            try:
                value = await run.subagent.runner(context_of(run, nested.parent))
                returned = True
            finally:
                nested.close_now()
    except trio.Cancelled:
        # Once the runner has returned, its outcome stands: a deadline or
        # cancellation arriving while its children are joined must not replace
        # it (contract §3). The run settles without another checkpoint.
        if not returned:
            raise
    finally:
        # The owner stays taken until every run of the nested parent has ended.
        if nested is not None:
            nested.joined()
    assert nested is not None
    # The runner returned: that is its claim of completion (contract §7).
    nested.raise_if_unresolved()
    return value


def _decide_raised(run: Run, exc: BaseException) -> BaseException | None:
    """Decide a run whose runner raised *exc*; return what must propagate."""
    if isinstance(exc, trio.Cancelled):
        run.decide(run.interrupted())
        return exc
    if isinstance(exc, BaseExceptionGroup):
        cancelled, rest = exc.split(trio.Cancelled)
        if rest is None:
            run.decide(run.interrupted())
            return exc
        run.decide(failed(_single(rest)))
        if isinstance(rest, Exception):
            return cancelled
        return exc
    run.decide(failed(exc))
    if isinstance(exc, Exception):
        return None
    return exc


def _single(exc: BaseException) -> BaseException:
    """Unwrap a group that holds exactly one exception."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


@final
class _Deferred:
    """Checks of a returned value that may take a while: a large value's encoding
    (on a worker thread) and a ``final_schema``'s check (see ``_schema``).

    Both run inside the run's cancel scope, so its cancellation and child
    deadline reach them.
    """

    __slots__ = ("_config", "_encoded", "_entries", "_run", "_value")

    def __init__(
        self, run: Run, config: Config, value: Any, entries: Any, encoded: Outcome | None
    ) -> None:
        self._run = run
        self._config = config
        self._value = value
        self._entries = entries
        self._encoded = encoded

    async def run(self) -> Outcome:
        """The outcome. Raises only ``trio.Cancelled`` (the run's cancellation)."""
        try:
            outcome = self._encoded
            if outcome is None:
                outcome = await run_sync(
                    _encode, self._run, self._config, self._value, self._entries
                )
            schema = self._run.schema
            if schema is None or outcome.status is not RunStatus.COMPLETED:
                return outcome
            result = outcome.result
            assert result is not None
            await schema.check(result)
        except SchemaMismatch as exc:
            return failed(exc, InvalidResultError)
        except trio.Cancelled:
            raise
        except Exception as exc:
            return failed(exc)
        return outcome


def _check(run: Run, config: Config, value: Any) -> Outcome | _Deferred:
    """The outcome of a runner that returned *value*, when it can be decided at once.

    A small value without a schema is checked and encoded here, on the event
    loop; anything that may take a while is deferred (:class:`_Deferred`).
    """
    schema = run.schema
    if value is None and schema is None and NULL.size <= config.max_result_bytes:
        return _COMPLETED_NULL  # a runner that only acts: one shared outcome
    entries = None
    if isinstance(value, Output):
        usage = value.usage
        if usage is not None:
            # Counted whether the result then passes its checks or not; it can
            # stop other runs in its scopes, never this one (contract §20).
            report(run, usage, returned=True)
        value, entries = value.final_result, value.transcript
    if schema is not None:
        value = schema.prepare(value)
    if not is_small(value) or (entries is not None and not is_small(entries)):
        return _Deferred(run, config, value, entries, None)
    outcome = _encode(run, config, value, entries)
    if schema is not None and outcome.status is RunStatus.COMPLETED:
        return _Deferred(run, config, value, entries, outcome)
    return outcome


#: What a runner may return, and what to do about anything else.
_JSON_READY: Final = (
    "a runner returns JSON-ready data: None, bool, int, float, str, and lists and "
    "str-keyed dicts of those; convert anything else in the runner (a datetime with "
    ".isoformat(), say) before starting a replacement, which would fail the same way"
)


def _most_values(config: Config) -> int:
    """Values a result may hold: each takes at least two bytes of JSON, so one
    with more is over ``max_result_bytes`` anyway (and a value that shares
    its containers, ``[x, x]`` sixty levels deep, stops being walked here)."""
    return config.max_result_bytes // 2 + 1


def _encode(run: Run, config: Config, value: Any, entries: Any) -> Outcome:
    """Check *value* (and a transcript's *entries*) and hold them as canonical JSON.

    Pure and thread-safe: it reads the run and touches nothing.
    """
    if value is None and entries is None and NULL.size <= config.max_result_bytes:
        # A runner that only acts returns None: nothing to encode, and one
        # shared outcome (never changed) serves every such run.
        return _COMPLETED_NULL
    transcript: CanonicalJson | None = None
    if entries is not None:
        try:
            transcript = CanonicalJson.of(list(entries), max_depth=config.max_nesting_depth)
        except JsonProblem as exc:
            return failed(ValueError(f"the transcript is not JSON the runtime can keep: {exc}"))
        except TypeError as exc:
            return failed(TypeError(f"the transcript is not JSON-ready ({exc}); {_JSON_READY}"))
    try:
        result = CanonicalJson.of(
            value, max_depth=config.max_nesting_depth, max_items=_most_values(config)
        )
    except JsonProblem as exc:
        return failed(ValueError(f"the result is not JSON the runtime can keep: {exc}"))
    except TypeError as exc:
        # Say what a result may be: a replacement running the same runner would
        # fail the same way, so the fix is in the runner.
        return failed(TypeError(f"the result is not JSON-ready ({exc}); {_JSON_READY}"))
    size, limit = result.size, config.max_result_bytes
    if size > limit:
        return failed(
            LimitExceededError(
                f"the result is {size} bytes of JSON; at most {limit} are allowed "
                "(Config.max_result_bytes): return a smaller result",
                run_id=run.run_id,
                subagent=run.subagent.name,
            )
        )
    return completed(result, transcript)
