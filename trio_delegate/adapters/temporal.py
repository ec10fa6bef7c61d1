"""Runs on Temporal: each run one workflow execution, executed by a pool of workers.

:func:`temporal_runner` returns a runner for a :class:`trio_delegate.Subagent`
that hands each run to ``trio-delegate temporal-worker`` processes through
a Temporal server: the run id becomes the workflow id, the worker's subagent
of the same name runs the task (with the run's history and
``final_schema``), and its result comes back as the run's result::

    import trio_delegate as td
    from trio_delegate.adapters.temporal import temporal_runner

    researcher = td.Subagent(
        "researcher", temporal_runner("temporal.internal:7233"), timeout_seconds=600
    )

Everything else stays with the parent's runtime: the child deadline (a
deadline reads ``timed_out``), cancellation (``cancel``, a cancelled
foreground caller, closing the parent or the runtime end the workflow, and
the run settles only once the worker's cleanup finished), result validation
and the fail-closed check. A remote error fails the run once, with a
:class:`TemporalRunError` naming the remote type and message.

While a run lives, the parent renews its lease (``lease_seconds``); the
workflow cancels its runner when renewals stop, so the runs of a host that
died end within the lease. A run needs a deadline or a lease: one with
neither fails at once.

The Temporal SDK runs on asyncio: this module runs it on one private event
loop in a thread of its own, never on the Trio loop. Needs the ``temporal``
extra; see the scaling guide, <https://trio-delegate.github.io/trio-delegate/scaling/>.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import math
import threading
import time
from collections.abc import Coroutine
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final, TypeVar, final

import attrs
import trio

from .. import ChildContext, DelegationError, InvalidArgumentsError, Output
from .._checks import check_int, check_seconds, describe

if TYPE_CHECKING:
    from temporalio.client import Client, WorkflowHandle

__all__ = [
    "DEFAULT_HEARTBEAT_TIMEOUT_SECONDS",
    "DEFAULT_LEASE_SECONDS",
    "DEFAULT_TASK_QUEUE",
    "TemporalRunError",
    "TemporalRunner",
    "temporal_runner",
]

T = TypeVar("T")

#: The task queue runs go to, and workers poll, unless told otherwise.
DEFAULT_TASK_QUEUE: Final = "trio-delegate"
#: The namespace runs go to unless told otherwise.
DEFAULT_NAMESPACE: Final = "default"
#: How long a worker may go without a heartbeat before Temporal gives its run
#: to another worker. Its runs' cancellations reach it within about this long.
DEFAULT_HEARTBEAT_TIMEOUT_SECONDS: Final = 10.0
#: How long a workflow waits for its parent's renewal before it ends the run.
DEFAULT_LEASE_SECONDS: Final = 60.0
#: How many workers may try a run in all (a lost worker's run starts again).
DEFAULT_MAX_ATTEMPTS: Final = 3
#: How long a cancelled run waits for the worker's cleanup before it gives up
#: (the lease then ends the workflow).
DEFAULT_CLEANUP_TIMEOUT_SECONDS: Final = 60.0
#: How long past the child deadline the server-side bound of a run sits: a
#: backstop for a parent that could not cancel, never what ends a run first.
BACKSTOP_MARGIN_SECONDS: Final = 300.0
#: Renewals per lease period: two may be lost before the lease runs out.
_RENEWALS_PER_LEASE: Final = 3


class TemporalRunError(DelegationError, RuntimeError):
    """A run on Temporal did not produce a result: the runner on the worker
    raised, the workers were lost too often, the lease ran out or Temporal
    could not be reached.

    Attributes:
        remote_type: the remote error's type (the runner's exception type
            name, ``"LeaseExpired"``, ``"TimeoutError"`` ...), or ``""``.
        remote_message: the remote error's message.
    """

    def __init__(self, message: str, *, remote_type: str = "", remote_message: str = "") -> None:
        super().__init__(message)
        self.remote_type = remote_type
        self.remote_message = remote_message


def _check_lease(value: Any) -> None:
    check_seconds("temporal_runner lease_seconds", value, allow_zero=False, allow_none=True)


@final
@attrs.frozen
class TemporalRunner:
    """A subagent's runner that executes each run as a Temporal workflow.

    Made by :func:`temporal_runner`; its fields are that function's arguments.
    """

    address: str
    task_queue: str = DEFAULT_TASK_QUEUE
    namespace: str = DEFAULT_NAMESPACE
    heartbeat_timeout_seconds: float = DEFAULT_HEARTBEAT_TIMEOUT_SECONDS
    lease_seconds: float | None = DEFAULT_LEASE_SECONDS
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    cleanup_timeout_seconds: float = DEFAULT_CLEANUP_TIMEOUT_SECONDS
    # One connection per runner, made on first use on the private loop.
    _client: _ClientSlot = attrs.field(factory=lambda: _ClientSlot(), init=False, eq=False)

    async def __call__(self, ctx: ChildContext) -> object:
        """Run *ctx*'s task as one workflow execution; return the worker's result.

        Raises:
            InvalidArgumentsError: the run has neither a deadline nor a lease.
            TemporalRunError: the remote run failed, or Temporal cannot be reached.
        """
        remaining = ctx.deadline - trio.current_time()
        if self.lease_seconds is None and not math.isfinite(remaining):
            raise InvalidArgumentsError(
                f"subagent {ctx.subagent!r} runs on Temporal with neither a deadline nor a "
                "lease, so a workflow whose parent died could run for ever: give the "
                "subagent a timeout_seconds, or the runner a lease_seconds"
            )
        request = self._request(ctx, remaining)
        loop = _PrivateLoop.get()
        try:
            client = await loop.wait(loop.submit(self._client.get(self)))
        except Exception as exc:
            raise _remote_error(ctx, self, exc) from None
        remote = _RemoteRun(self, client, request)
        execution = loop.submit(remote.execute())
        try:
            reply = await loop.wait(execution)
        except trio.Cancelled:
            # Shielded: the run settles only once the worker's cleanup is done.
            with trio.move_on_after(self.cleanup_timeout_seconds, shield=True) as cleanup:
                await loop.wait(loop.submit(remote.cancel_and_join()))
            if cleanup.cancelled_caught:
                # Temporal cannot be reached: stop renewing, so the lease ends it.
                execution.cancel()
            raise
        except DelegationError:
            raise
        except Exception as exc:
            raise _remote_error(ctx, self, exc) from None
        return _output(reply)

    def _request(self, ctx: ChildContext, remaining: float) -> dict[str, Any]:
        finite = math.isfinite(remaining)
        return {
            "protocol": _protocol(),
            "subagent": ctx.subagent,
            "run_id": ctx.run_id,
            "task": ctx.task,
            "history": list(ctx.history),
            "final_schema": None if ctx.final_schema is None else dict(ctx.final_schema),
            "deadline_unix": time.time() + max(remaining, 0.0) if finite else None,
            "lease_seconds": self.lease_seconds,
            "heartbeat_timeout_seconds": self.heartbeat_timeout_seconds,
            "backstop_seconds": (
                max(remaining, 0.0) + BACKSTOP_MARGIN_SECONDS + self.cleanup_timeout_seconds
                if finite
                else None
            ),
            "max_attempts": self.max_attempts,
        }


def temporal_runner(
    address: str,
    *,
    task_queue: str = DEFAULT_TASK_QUEUE,
    namespace: str = DEFAULT_NAMESPACE,
    heartbeat_timeout_seconds: float = DEFAULT_HEARTBEAT_TIMEOUT_SECONDS,
    lease_seconds: float | None = DEFAULT_LEASE_SECONDS,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    cleanup_timeout_seconds: float = DEFAULT_CLEANUP_TIMEOUT_SECONDS,
) -> TemporalRunner:
    """A runner that executes each run of its subagent on Temporal workers.

    Args:
        address: the Temporal server's ``host:port``.
        task_queue: the task queue the workers (``trio-delegate temporal-worker``)
            poll; they run the subagent of the same name from their configuration.
        namespace: the Temporal namespace.
        heartbeat_timeout_seconds: how long a worker may be silent before its run
            goes to another worker; a cancellation reaches the runner within
            about this long.
        lease_seconds: how long a run may go without the parent's renewal
            before the workflow cancels it (the parent renews three times per
            period); ``None``: no lease (then every run needs a deadline).
        max_attempts: how many workers may try a run in all (a lost worker's
            run starts again on another one); at least 1.
        cleanup_timeout_seconds: how long a cancelled run waits for the
            worker's cleanup before it settles anyway.

    Raises:
        InvalidArgumentsError: a malformed argument (named in the message).
    """
    if not isinstance(address, str) or not address.strip() or ":" not in address:
        raise InvalidArgumentsError(
            f"temporal_runner address must be the server's 'host:port', got {describe(address)}"
        )
    for field, value in (("task_queue", task_queue), ("namespace", namespace)):
        if not isinstance(value, str) or not value.strip():
            raise InvalidArgumentsError(
                f"temporal_runner {field} must be a non-empty string, got {describe(value)}"
            )
    check_seconds(
        "temporal_runner heartbeat_timeout_seconds",
        heartbeat_timeout_seconds,
        allow_zero=False,
        allow_none=False,
    )
    _check_lease(lease_seconds)
    check_int("temporal_runner max_attempts", max_attempts, minimum=1)
    check_seconds(
        "temporal_runner cleanup_timeout_seconds",
        cleanup_timeout_seconds,
        allow_zero=False,
        allow_none=False,
    )
    return TemporalRunner(
        address,
        task_queue,
        namespace,
        float(heartbeat_timeout_seconds),
        None if lease_seconds is None else float(lease_seconds),
        max_attempts,
        float(cleanup_timeout_seconds),
    )


def _protocol() -> int:
    from ._temporal_workflow import PROTOCOL

    return PROTOCOL


def _output(reply: Any) -> object:
    """The worker's reply ``{final_result, transcript, usage}`` as the runner's return value.

    ``usage`` (optional) is what the runner on the worker spent: it counts
    for this run as if the runner had run here.
    """
    from ._temporal_workflow import reply_usage

    if not isinstance(reply, dict) or "final_result" not in reply:
        raise TemporalRunError(f"the worker's reply is not a run result: {describe(reply)}")
    transcript = reply.get("transcript")
    usage = reply_usage(reply)
    if transcript is None and usage is None:
        return reply["final_result"]
    if transcript is not None and not isinstance(transcript, list):
        raise TemporalRunError(f"the worker's transcript is not a list: {describe(transcript)}")
    return Output(reply["final_result"], transcript=transcript, usage=usage)


def _remote_error(ctx: ChildContext, runner: TemporalRunner, exc: Exception) -> TemporalRunError:
    """What a failed execution means, as one error naming the remote type and message."""
    from temporalio.client import WorkflowFailureError
    from temporalio.exceptions import ApplicationError, TimeoutError

    if not isinstance(exc, WorkflowFailureError):
        return TemporalRunError(
            f"Temporal at {runner.address} (namespace {runner.namespace!r}) could not run "
            f"{ctx.subagent!r}: {type(exc).__name__}: {exc}",
            remote_type=type(exc).__name__,
            remote_message=str(exc),
        )
    # The innermost cause is what happened: the runner's error inside the
    # activity's, or the workflow's own (a lease that ran out).
    cause: BaseException = exc
    while cause.__cause__ is not None:
        cause = cause.__cause__
    if isinstance(cause, ApplicationError):
        kind = cause.type or "Error"
        return TemporalRunError(
            f"{kind}: {cause.message}", remote_type=kind, remote_message=cause.message
        )
    if isinstance(cause, TimeoutError):
        what = f"the worker timed out ({cause.type.name if cause.type else 'timeout'})"
        return TemporalRunError(
            f"TimeoutError: {what} on each of its attempts: {cause.message}",
            remote_type="TimeoutError",
            remote_message=str(cause.message),
        )
    return TemporalRunError(
        f"{type(cause).__name__}: {cause}",
        remote_type=type(cause).__name__,
        remote_message=str(cause),
    )


class _ClientSlot:
    """One Temporal client per runner, connected on the private loop on first use."""

    def __init__(self) -> None:
        self._client: Client | None = None
        self._lock: asyncio.Lock | None = None

    async def get(self, runner: TemporalRunner) -> Client:
        from temporalio.client import Client

        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._client is None:
                self._client = await Client.connect(runner.address, namespace=runner.namespace)
            return self._client


class _RemoteRun:
    """One workflow execution, driven on the private loop."""

    def __init__(self, runner: TemporalRunner, client: Client, request: dict[str, Any]) -> None:
        self._runner = runner
        self._client = client
        self._request = request
        self._handle: WorkflowHandle[Any, Any] | None = None
        self._started = asyncio.Event()
        self._task: asyncio.Task[Any] | None = None

    async def execute(self) -> Any:
        """Start the workflow and wait for its result, renewing its lease meanwhile."""
        from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy

        from ._temporal_workflow import WORKFLOW_NAME

        self._task = asyncio.current_task()
        backstop = self._request["backstop_seconds"]
        try:
            self._handle = await self._client.start_workflow(
                WORKFLOW_NAME,
                self._request,
                id=self._request["run_id"],
                task_queue=self._runner.task_queue,
                # After the child deadline, and after the cleanup: a backstop only.
                execution_timeout=(
                    timedelta(seconds=backstop + BACKSTOP_MARGIN_SECONDS)
                    if backstop is not None
                    else None
                ),
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            )
        finally:
            self._started.set()
        renewing = None
        if self._runner.lease_seconds is not None:
            renewing = asyncio.create_task(self._renew(self._handle, self._runner.lease_seconds))
        try:
            return await self._handle.result()
        finally:
            if renewing is not None:
                renewing.cancel()

    async def _renew(self, handle: WorkflowHandle[Any, Any], lease: float) -> None:
        from ._temporal_workflow import RENEW_SIGNAL

        while True:
            await asyncio.sleep(lease / _RENEWALS_PER_LEASE)
            try:
                await handle.signal(RENEW_SIGNAL)
            except Exception:  # a lost renewal is retried: two may be lost
                continue

    async def cancel_and_join(self) -> None:
        """Cancel the workflow; return once it closed (the worker's cleanup done)."""
        from temporalio.service import RPCError

        await self._started.wait()
        if self._handle is None:
            return  # it never started
        with contextlib.suppress(RPCError):  # closed already
            await self._handle.cancel()
        if self._task is not None:
            # The execution's result() returns once the workflow closed; the
            # lease is renewed until then.
            await asyncio.wait([self._task])


@final
class _PrivateLoop:
    """An asyncio event loop on a daemon thread of its own, for the Temporal SDK.

    Not trio-asyncio: a Temporal client on a trio-asyncio loop cannot be
    stopped cleanly. A plain selector loop is built directly, since with
    ``trio_asyncio`` imported the default policy hands out its own loops.
    """

    _instance: _PrivateLoop | None = None
    _lock: Final = threading.Lock()

    def __init__(self) -> None:
        self.loop = asyncio.SelectorEventLoop()
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._main, args=(ready,), name="trio-delegate-temporal", daemon=True
        )
        self._thread.start()
        ready.wait()

    def _main(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(ready.set)
        self.loop.run_forever()

    @classmethod
    def get(cls) -> _PrivateLoop:
        with cls._lock:
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    @staticmethod
    async def wait(future: concurrent.futures.Future[T]) -> T:
        """Wait in Trio for *future*; a cancelled wait leaves *future* running."""
        token = trio.lowlevel.current_trio_token()
        done = trio.Event()

        def wake(_: object) -> None:
            with contextlib.suppress(trio.RunFinishedError):  # nobody waits any more
                token.run_sync_soon(done.set)

        future.add_done_callback(wake)
        await done.wait()
        return future.result()
