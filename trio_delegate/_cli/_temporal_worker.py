"""The body of ``trio-delegate temporal-worker``: serve a configuration's subagents on Temporal.

The worker executes the runs that parents hand to Temporal with
:func:`trio_delegate.adapters.temporal.temporal_runner` (or ``kind =
"temporal"`` in ``serve``'s file): the run's workflow
(:class:`~trio_delegate.adapters._temporal_workflow.RunWorkflow`), and the
subagent's activity, whose runner runs in a Trio run of its own on a thread.

The Temporal SDK runs on a plain asyncio loop in the main thread (never a
trio-asyncio one: a worker on it cannot be stopped by SIGTERM). SIGTERM and
SIGINT stop the worker: it polls no more, cancels its runs, waits for their
runners' cleanup (at most the grace period), and exits 0; Temporal gives
the runs it gave up to other workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, Final

import trio

from .._checks import terminal_safe
from .._results import Output
from .._server_config import ConfigError, ServerConfig, load_server_config
from .._subagent import Subagent
from .._usage import Usage
from ..lowlevel import worker_context

__all__ = ["run_temporal_worker"]

EXIT_CONFIG: Final = 2
EXIT_UNAVAILABLE: Final = 1
#: The error type of a run given up because its worker stopped: Temporal
#: retries it on another worker.
WORKER_STOPPED: Final = "WorkerStopped"
#: Heartbeats per heartbeat timeout.
_BEATS_PER_TIMEOUT: Final = 4

_log = logging.getLogger("trio_delegate.temporal")


def run_temporal_worker(config_path: str) -> int:
    """Serve *config_path*'s subagents as Temporal activities until SIGTERM or SIGINT.

    Once it has served, it ends the process itself (with 0 after a signal
    stopped it, 1 when the server cannot be reached), without the
    interpreter's finalization: see the end of the function.

    Returns:
        2 for a bad configuration; 1 when the ``temporalio`` package is missing.
    """
    prog = "trio-delegate temporal-worker"
    try:
        server_config = load_server_config(config_path)
    except ConfigError as exc:
        print(f"{prog}: {terminal_safe(str(exc))}", file=sys.stderr)
        return EXIT_CONFIG
    if server_config.temporal is None:
        print(
            f"{prog}: {terminal_safe(str(server_config.path))}: has no [temporal] table\n"
            '  fix: add [temporal] with address = "host:port" (and task_queue, namespace '
            "if not the defaults)",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    try:
        subagents = _served(server_config)
    except ConfigError as exc:
        print(f"{prog}: {terminal_safe(str(exc))}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        import temporalio  # noqa: F401
    except ImportError as exc:
        print(
            f"{prog}: the Temporal SDK is missing ({exc}); install it with "
            "pip install 'trio-delegate[temporal]'",
            file=sys.stderr,
        )
        return EXIT_UNAVAILABLE
    logging.basicConfig(stream=sys.stderr, format=f"{prog}: %(message)s")
    logging.getLogger("trio_delegate").setLevel(logging.INFO)
    # A plain selector loop, built directly: with trio_asyncio imported (by a
    # runner), asyncio.run() would hand out a trio-asyncio loop.
    loop = asyncio.SelectorEventLoop()
    try:
        code = loop.run_until_complete(_serve(server_config, subagents))
    finally:
        loop.close()
    # The Temporal SDK's native threads may still call into Python while the
    # interpreter finalizes, which aborts a worker that stopped cleanly
    # ("PyGILState_Release ... finalizing", SIGABRT). Its runs are cleaned up
    # and reported by now: leave without finalizing.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _served(server_config: ServerConfig) -> tuple[Subagent, ...]:
    """The subagents a worker runs: those that do not themselves go to Temporal."""
    from ..adapters.temporal import TemporalRunner

    served = []
    for index, subagent in enumerate(server_config.subagents):
        if isinstance(subagent.runner, TemporalRunner):
            continue  # another worker pool's: running it here would only hand it on
        if subagent.children:
            raise ConfigError(
                server_config.path,
                f"subagents[{index}].children",
                "nested delegation does not run on Temporal workers",
                "remove children, or serve this subagent from the host (trio-delegate serve)",
                subagent=subagent.name,
            )
        served.append(subagent)
    if not served:
        raise ConfigError(
            server_config.path,
            "subagents",
            'every subagent is kind = "temporal": this worker would have nothing to run',
            "give the worker a file whose subagents are commands, Python runners or agent CLIs",
        )
    return tuple(served)


async def _serve(server_config: ServerConfig, subagents: tuple[Subagent, ...]) -> int:
    from temporalio.client import Client
    from temporalio.worker import Worker

    from ..adapters._temporal_workflow import RunWorkflow

    settings = server_config.temporal
    assert settings is not None  # checked by run_temporal_worker
    try:
        client = await Client.connect(settings.address, namespace=settings.namespace)
    except Exception as exc:
        print(
            terminal_safe(
                f"trio-delegate temporal-worker: cannot reach Temporal at {settings.address} "
                f"(namespace {settings.namespace!r}): {exc}"
            ),
            file=sys.stderr,
        )
        return EXIT_UNAVAILABLE
    grace = server_config.config.cancel_grace_seconds
    worker = Worker(
        client,
        task_queue=settings.task_queue,
        workflows=[RunWorkflow],
        activities=[_activity(subagent, grace) for subagent in subagents],
        max_concurrent_activities=server_config.config.max_concurrent_runs,
        # No sticky cache: a workflow whose worker died goes on at once on
        # another one, instead of after the sticky queue's timeout.
        max_cached_workflows=0,
        # A stopping worker cancels its runs at once (and waits for their cleanup).
        graceful_shutdown_timeout=timedelta(0),
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with worker:
        _log.info(
            "serving %s on task queue %r of %s (namespace %r)",
            ", ".join(subagent.name for subagent in subagents),
            settings.task_queue,
            settings.address,
            settings.namespace,
        )
        await stop.wait()
        _log.info("stopping: cancelling this worker's runs and waiting for their cleanup")
    _log.info("stopped")
    return 0


def _activity(subagent: Subagent, grace: float) -> Callable[[dict[str, Any]], Awaitable[Any]]:
    """The activity that runs *subagent*'s runner for one run."""
    from temporalio import activity
    from temporalio.exceptions import ApplicationError

    from ..adapters._temporal_workflow import activity_name

    async def run(request: dict[str, Any]) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        trio_run = _TrioRun(subagent, request)
        reply: asyncio.Future[tuple[str, Any]] = loop.create_future()
        thread = threading.Thread(
            target=trio_run.main,
            args=(loop, reply),
            name=f"trio-delegate run {request.get('run_id')}",
            daemon=True,  # a runner that never returns does not hold the process
        )
        thread.start()
        beating = asyncio.create_task(_heartbeats(float(request["heartbeat_timeout_seconds"])))
        try:
            kind, value = await asyncio.shield(reply)
        except asyncio.CancelledError:
            # Cancelled by the workflow (a cancel, a deadline, a lost lease) or
            # by this worker stopping: the runner is cancelled and its cleanup
            # waited for, heartbeats going on meanwhile.
            trio_run.cancel()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(reply), grace)
            details = activity.cancellation_details()
            if activity.is_worker_shutdown() and not (details and details.cancel_requested):
                raise ApplicationError(
                    "the worker stopped before the run ended; another worker may run it",
                    type=WORKER_STOPPED,
                ) from None
            raise
        finally:
            beating.cancel()
        if kind == "error":
            raise ApplicationError(
                _text(str(value)), type=_text(type(value).__name__), non_retryable=True
            )
        if kind == "cancelled":
            raise ApplicationError(
                "the runner was cancelled on the worker without a request",
                type="Cancelled",
                non_retryable=True,
            )
        result, reported = value
        return _reply(result, reported)

    activity_fn: Callable[[dict[str, Any]], Awaitable[Any]] = activity.defn(
        name=activity_name(subagent.name)
    )(run)
    return activity_fn


async def _heartbeats(timeout: float) -> None:
    from temporalio import activity

    while True:
        activity.heartbeat()
        await asyncio.sleep(timeout / _BEATS_PER_TIMEOUT)


def _reply(value: Any, reported: Usage | None) -> dict[str, Any]:
    """The activity's result: ``{final_result, transcript}`` and, when the runner
    reported any (``ctx.add_usage``, ``Output(usage=...)``), ``usage``; checked
    to be JSON."""
    from temporalio.exceptions import ApplicationError

    from ..adapters._temporal_workflow import USAGE, usage_fields

    if isinstance(value, Output):
        reply = {
            "final_result": value.final_result,
            "transcript": None if value.transcript is None else list(value.transcript),
        }
        if value.usage is not None:
            reported = value.usage if reported is None else reported + value.usage
    else:
        reply = {"final_result": value, "transcript": None}
    if reported is not None:
        reply[USAGE] = usage_fields(reported)
    try:
        json.dumps(reply, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ApplicationError(
            f"the runner's result is not JSON-serialisable: {_text(str(exc))}",
            type="TypeError",
            non_retryable=True,
        ) from None
    return reply


def _text(text: str) -> str:
    """*text* as valid UTF-8 (a Temporal failure message is protobuf text)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")[:10_000]


class _TrioRun:
    """One runner in a Trio run of its own, on the calling thread of :meth:`main`."""

    def __init__(self, subagent: Subagent, request: dict[str, Any]) -> None:
        self._subagent = subagent
        self._request = request
        self._lock = threading.Lock()
        self._cancelled = False
        self._token: trio.lowlevel.TrioToken | None = None
        self._scope: trio.CancelScope | None = None

    def main(self, loop: asyncio.AbstractEventLoop, reply: asyncio.Future[tuple[str, Any]]) -> None:
        try:
            result: tuple[str, Any] = trio.run(self._run)
        except BaseException as exc:  # a KeyboardInterrupt or SystemExit from the runner
            result = ("error", exc)

        def settle() -> None:
            if not reply.done():
                reply.set_result(result)

        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits
            loop.call_soon_threadsafe(settle)

    def cancel(self) -> None:
        """Cancel the runner (now, or as soon as it starts)."""
        with self._lock:
            self._cancelled = True
            token, scope = self._token, self._scope
        if token is not None and scope is not None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(scope.cancel)

    async def _run(self) -> tuple[str, Any]:
        request = self._request
        deadline_unix = request.get("deadline_unix")
        deadline = math.inf
        if deadline_unix is not None:
            deadline = trio.current_time() + max(float(deadline_unix) - time.time(), 0.0)
        ctx, reported = worker_context(
            str(request["run_id"]),
            self._subagent.name,
            str(request["task"]),
            request.get("final_schema"),
            tuple(request.get("history") or ()),
            deadline,
        )
        with trio.CancelScope() as scope:
            with self._lock:
                self._token = trio.lowlevel.current_trio_token()
                self._scope = scope
                if self._cancelled:
                    scope.cancel()
            try:
                value = await self._subagent.runner(ctx)
            except Exception as exc:
                return ("error", exc)
            return ("ok", (value, reported()))
        return ("cancelled", None)
