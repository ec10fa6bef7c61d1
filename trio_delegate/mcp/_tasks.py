"""The MCP Tasks extension (``io.modelcontextprotocol/tasks``) over a connection's runs.

A task is a background run in the protocol's own words: ``tools/call``
answers with a task handle once the run's admission is durable, the client
polls ``tasks/get`` (the outcome comes inline once the run has ended),
cancels with ``tasks/cancel``, and can hear ``notifications/tasks`` on a
``subscriptions/listen`` stream. The task id is the run id.

Only requests of a 2026-07-28 connection that declare the extension in their
own ``_meta`` client capabilities are served tasks (the extension: the server
must never hand a task to a request that did not declare it); every other
request, and every request of a handshake-era connection, is answered as if
the extension did not exist.

How a run reads as a task (``tasks/get``):

* pending or running: ``working``, the status message saying which, with
  the child's latest progress; a status snapshot that observes nothing.
* asking (``input_required``): to a request that declared form elicitation,
  ``input_required`` with ``inputRequests`` keyed by question id, answered
  with ``tasks/update`` (``_talk``); to any other, ``working`` with the
  question in the status message.
* completed: ``completed``, ``result`` being exactly the ``CallToolResult``
  that ``wait_subagent`` gives for it (read with ``Parent.wait`` and
  rendered as the tools render it); handing it over is observation for the
  fail-closed policy, as that wait is.
* failed or timed out: ``completed`` with ``wait_subagent``'s error result
  (``isError: true``; the extension keeps ``failed`` for JSON-RPC errors),
  the status message naming the run's status.
* cancelled: ``cancelled``, the status message carrying the cancellation's
  reason (the message of the error ``wait_subagent`` raises; the extension
  gives a cancelled task no ``result``). That is the run's whole outcome, so
  handing it over is observation, as that wait is: the run leaves
  ``Parent.unobserved()``. Under the fail-closed policy a cancelled run is
  still resolved only by a replacement.

``ttlMs`` is ``null`` while the run is live (live runs are never evicted);
once it has ended, it is the time from creation until retention may drop the
run: its end plus ``Config.retention_seconds`` without a store, plus the
store's own retention with one (``null`` when the store keeps runs for good).
"""

from __future__ import annotations

import contextlib
import datetime
import math
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, Literal, cast, final

import attrs
import mcp_types
import trio
from mcp.server import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from .. import (
    Config,
    DelegationError,
    InvalidArgumentsError,
    Parent,
    RunCancelledError,
    RunFailedError,
    RunHandle,
    RunStatus,
    RunTimedOutError,
    UnknownRunError,
)
from .._checks import describe
from .._tools import run_payload
from ..lowlevel import talk_changed
from ._results import error_result, success_result
from ._talk import apply_responses, declares_form_elicitation, input_requests, status_words

if TYPE_CHECKING:
    from .. import ResultStore

__all__ = [
    "DEFAULT_TASK_POLL_INTERVAL_SECONDS",
    "TASKS_EXTENSION",
    "TaskBook",
    "TaskIdParams",
    "declares_tasks",
    "require_tasks",
]

#: The Tasks extension's identifier, in ``server/discover`` and in a request's capabilities.
TASKS_EXTENSION: Final = "io.modelcontextprotocol/tasks"

#: The ``pollIntervalMs`` the server suggests, in seconds.
DEFAULT_TASK_POLL_INTERVAL_SECONDS: Final = 2.0

_CAPABILITIES_KEY: Final = "io.modelcontextprotocol/clientCapabilities"

#: How the extension's statuses read a run's.
_TERMINAL_STATUS: Final[Mapping[RunStatus, str]] = {
    RunStatus.COMPLETED: "completed",
    RunStatus.FAILED: "completed",
    RunStatus.TIMED_OUT: "completed",
    RunStatus.CANCELLED: "cancelled",
}

#: The errors with which a wait tells that a run ended without completing.
_ENDED_ERRORS: Final = (RunFailedError, RunCancelledError, RunTimedOutError)


class TaskIdParams(mcp_types.RequestParams):
    """The params of ``tasks/get``, ``tasks/update`` and ``tasks/cancel``.

    ``taskId`` (and ``inputResponses``) are checked by the handlers, after the capability check, so
    that a request that did not declare the extension is told that first.
    """

    task_id: Any = None
    #: ``tasks/update`` only: the answers, keyed by ``inputRequests`` keys.
    input_responses: Any = None


class _TaskNotification(mcp_types.Notification[dict[str, Any], Literal["notifications/tasks"]]):
    """``notifications/tasks``: the whole task, as ``tasks/get`` gives it.

    The params are a plain dict so that ``ttlMs: null`` survives the
    session's dump, which drops ``None`` fields of models.
    """

    method: Literal["notifications/tasks"] = "notifications/tasks"


def declares_tasks(ctx: ServerRequestContext[Any]) -> bool:
    """Whether the request of *ctx* declared the extension in its own capabilities."""
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False
    meta = ctx.params.get("_meta") if isinstance(ctx.params, Mapping) else None
    capabilities = meta.get(_CAPABILITIES_KEY) if isinstance(meta, Mapping) else None
    extensions = capabilities.get("extensions") if isinstance(capabilities, Mapping) else None
    return isinstance(extensions, Mapping) and TASKS_EXTENSION in extensions


def require_tasks(ctx: ServerRequestContext[Any]) -> None:
    """Refuse a task request that did not declare the extension.

    Raises:
        MCPError: ``-32601`` on a handshake-era connection (the method does
            not exist there, as before the extension), else ``-32021``
            naming the capability the request needs.
    """
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        raise MCPError(code=mcp_types.METHOD_NOT_FOUND, message="Method not found", data=ctx.method)
    if not declares_tasks(ctx):
        raise MCPError(
            code=mcp_types.MISSING_REQUIRED_CLIENT_CAPABILITY,
            message=(
                f"Missing required client capability: {ctx.method} needs the {TASKS_EXTENSION} "
                f"extension; declare it in this request's _meta[{_CAPABILITIES_KEY!r}].extensions"
            ),
            data={"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
        )


def _iso(seconds: float) -> str:
    moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _seconds(iso: str | None) -> float | None:
    """Unix time of an ISO 8601 text (a store's record), or ``None``."""
    if not iso:
        return None
    try:
        moment = datetime.datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


@final
@attrs.define(eq=False)
class _Times:
    """When a task was created and last changed, as this server saw it (Unix time)."""

    created: float
    updated: float
    status: RunStatus
    ended: float | None = None
    #: The ids of the run's open questions when last read: a change is an update.
    questions: tuple[str, ...] = ()


@final
@attrs.define(eq=False)
class TaskBook:
    """The task side of one connection: timestamps, retention and listen streams.

    What the book keeps per task is bounded as the runtime's own memory is
    (contract §8): times for at most ``max_live_runs`` live tasks (a runtime
    never holds more live runs) and for the ``retention_max_runs`` tasks that
    ended last (retention holds no more terminal runs). A task whose times
    the book has let go reads as the runtime answers for its run: expired
    without a store, from the store's record with one.

    Attributes:
        parent: the connection's parent; its runs are the tasks.
        store: the runtime's store, or ``None``.
        config: the runtime's configuration (its retention and live-run limits).
        poll_interval_ms: the suggested ``pollIntervalMs``.
    """

    parent: Parent
    store: ResultStore | None
    config: Config
    poll_interval_ms: int
    # Times of tasks seen live, oldest seen first, and of tasks seen ended,
    # in the order their ends were seen (the order retention evicts in).
    _live: OrderedDict[str, _Times] = attrs.Factory(OrderedDict)
    _ended: OrderedDict[str, _Times] = attrs.Factory(OrderedDict)

    def __len__(self) -> int:
        """How many tasks the book keeps times for."""
        return len(self._live) + len(self._ended)

    # -- what the connection tells the book ------------------------------------

    def settled(self, handle: RunHandle) -> None:
        """Note that a run of the parent ended (its task's last update is now)."""
        times = self._live.get(handle.run_id)
        if times is not None:
            times.updated = times.ended = time.time()
            times.status = handle.status
            self._keep(handle.run_id, times)

    # -- the extension's answers --------------------------------------------------

    async def create(self, handle: Mapping[str, Any], *, elicit: bool = False) -> dict[str, Any]:
        """The ``CreateTaskResult`` for a run just admitted (its admission is durable).

        Args:
            handle: the run's handle as the tool call that started it (or
                the timed wait that left it running) answered:
                ``{run_id, subagent, status}``. It is the task's state as
                it is: the run is not looked up again, but for the
                questions of a run that asks (``input_required``).
            elicit: whether the request declared form elicitation (the
                task then reads ``input_required`` with ``inputRequests``).
        """
        run = RunHandle(handle["run_id"], handle["subagent"], RunStatus(handle["status"]))
        if run.status is RunStatus.INPUT_REQUIRED:
            # Gone meanwhile: the handle as the call answered.
            with contextlib.suppress(DelegationError):
                run = self.parent.status(run.run_id)
        if self._times(run.run_id) is None:
            now = time.time()
            self._keep(run.run_id, _Times(now, now, run.status, None, _question_ids(run)))
        task = await self._task(run, elicit=elicit)
        return {"resultType": "task", **task}

    async def get(self, task_id: Any, *, elicit: bool = False) -> dict[str, Any]:
        """The task *task_id* as ``tasks/get`` gives it (an ended run's outcome inline).

        Args:
            task_id: the task's id (its run's).
            elicit: whether the request declared form elicitation: an asking
                run then reads ``input_required`` with its ``inputRequests``,
                else ``working`` with its question in the ``statusMessage``.

        Raises:
            MCPError: ``-32602`` for an unknown, expired or malformed id.
        """
        return await self._detailed(self._status(task_id), elicit=elicit)

    def update(self, task_id: Any, responses: Any) -> None:
        """Apply ``tasks/update``'s ``inputResponses`` to the task *task_id*.

        Keys that are not open questions of this very task are ignored; an
        ended task that is still known takes the update as a no-op.

        Raises:
            MCPError: ``-32602`` for an unknown, expired or malformed id, a
                malformed ``inputResponses``, or an answer its question's
                schema refuses (the question stays open).
        """
        handle = self._status(task_id)
        if handle.status.is_terminal:
            return
        apply_responses(self.parent, handle, responses)

    def cancel(self, task_id: Any) -> None:
        """Request the cancellation of the run *task_id*; idempotent.

        Raises:
            MCPError: ``-32602`` for an unknown, expired or malformed id.
        """
        self._status(task_id)
        try:
            self.parent.cancel(task_id)
        except DelegationError as exc:
            raise _task_error(exc) from None

    async def listen(
        self, ctx: ServerRequestContext[Any], params: mcp_types.SubscriptionsListenRequestParams
    ) -> mcp_types.SubscriptionsListenResult:
        """Serve a ``subscriptions/listen`` for ``notifications.taskIds``.

        Acknowledges the ids it accepts (those of this parent's owner, wherever
        their runs live), then sends one ``notifications/tasks`` as each of
        them ends (at once for one that has ended already), until the client
        closes the stream. Each end is heard through :meth:`Parent.wait`, so a
        run of the same owner in another runtime sharing the store is heard
        when the store's watcher sees its end (contract §16).

        Raises:
            MCPError: ``-32602`` when ``taskIds`` is not a list of strings;
                ``-32603`` when a run's end could not be read (the store
                failed, or the parent closed), naming the task.
        """
        requested = (params.notifications.model_extra or {}).get("taskIds")
        if type(requested) is not list or not all(type(i) is str for i in requested):
            raise MCPError(
                code=mcp_types.INVALID_PARAMS,
                message=(
                    "notifications.taskIds must be a list of task id strings, got "
                    f"{describe(requested)}; send the taskId values tools/call returned"
                ),
            )
        accepted = [i for i in dict.fromkeys(requested) if await self._found(i)]
        subscription_id = ctx.request_id
        meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: subscription_id}
        await ctx.session.send_notification(
            mcp_types.SubscriptionsAcknowledgedNotification(
                params=mcp_types.SubscriptionsAcknowledgedNotificationParams(
                    notifications=mcp_types.SubscriptionFilter.model_validate(
                        {"taskIds": accepted}
                    ),
                    _meta=meta,
                )
            ),
            related_request_id=subscription_id,
        )
        elicit = declares_form_elicitation(ctx)
        failures: list[MCPError] = []
        async with trio.open_nursery() as nursery:
            for run_id in accepted:
                nursery.start_soon(self._follow, ctx, run_id, meta, elicit, failures)
        if failures:
            # Raised outside the nursery, which would wrap it in a group.
            raise failures[0]
        # Every task has ended and been told of; the stream stays open until
        # the client closes it.
        await trio.sleep_forever()

    # -- inside -------------------------------------------------------------------

    async def _follow(
        self,
        ctx: ServerRequestContext[Any],
        run_id: str,
        meta: dict[str, Any],
        elicit: bool,
        failures: list[MCPError],
    ) -> None:
        """Tell a listener of each change of task *run_id*'s status or questions, then its end.

        A task that is ``input_required`` when the stream opens is told of at
        once. On a failure to read the run, the failure is kept in
        *failures* and the other followers are cancelled.
        """
        told: tuple[RunStatus, tuple[str, ...]] | None = None
        try:
            while True:
                try:
                    handle = self.parent.status(run_id)
                except UnknownRunError as exc:
                    if type(exc) is not UnknownRunError:
                        return  # expired meanwhile: nothing to tell
                    # Known only through the store (a run of the owner in
                    # another runtime): a wait hears its end.
                    if await self._await_end(run_id):
                        await self._notify(ctx, run_id, meta, elicit)
                    return
                if handle.status.is_terminal:
                    await self._notify(ctx, run_id, meta, elicit)
                    return
                state = (handle.status, _question_ids(handle))
                changed = told != state if told is not None else bool(state[1])
                told = state
                if changed:
                    await self._notify(ctx, run_id, meta, elicit)
                    continue  # read again: it may have changed while this was sent
                # Nothing can change between the read above and this wait.
                await talk_changed(self.parent, run_id)
        except UnknownRunError:
            pass  # expired meanwhile: nothing to tell
        except DelegationError as exc:
            failures.append(_task_error(exc, f"Failed to hear the end of task {run_id}"))
            nursery = trio.lowlevel.current_task().parent_nursery
            if nursery is not None:
                nursery.cancel_scope.cancel()  # the stream ends with the error

    async def _await_end(self, run_id: str) -> bool:
        """Wait for the end of run *run_id*; whether there is an end to tell.

        Raises:
            DelegationError: what kept this from knowing.
        """
        try:
            # A wait answers for the owner's runs in other runtimes through
            # the store. It answers early, with the handle, while the run
            # waits for an answer to a question (contract §19): then its
            # settlement says.
            if type(await self.parent.wait(run_id)) is RunHandle:
                async with self.parent.settled() as settled:
                    if not self.parent.status(run_id).status.is_terminal:
                        async for handle in settled:
                            if handle.run_id == run_id:
                                break
                    await self.parent.wait(run_id, timeout=0)
        except _ENDED_ERRORS:
            pass  # ended without completing: a wait says so by raising
        except UnknownRunError:
            return False  # expired meanwhile: nothing to tell
        return True

    async def _notify(
        self, ctx: ServerRequestContext[Any], run_id: str, meta: dict[str, Any], elicit: bool
    ) -> None:
        try:
            task = await self.get(run_id, elicit=elicit)
        except MCPError:
            return  # expired meanwhile: nothing to tell
        notification = _TaskNotification(params={**task, "_meta": meta})
        await ctx.session.send_notification(
            cast("mcp_types.ServerNotification", notification), related_request_id=ctx.request_id
        )

    async def _found(self, run_id: str) -> bool:
        """Whether *run_id* is a run of this parent's owner.

        This runtime's view of a shared store trails a commit elsewhere
        (contract §16): an id it does not know is looked up in the store
        itself, as a wait does, before it is refused.
        """
        try:
            self.parent.status(run_id)
        except UnknownRunError as exc:
            if type(exc) is not UnknownRunError:
                return False  # expired
        except DelegationError:
            return False
        else:
            return True
        try:
            await self.parent.wait(run_id, timeout=0)
        except _ENDED_ERRORS:
            return True
        except DelegationError:
            return False
        return True

    def _status(self, task_id: Any) -> RunHandle:
        if type(task_id) is not str:
            raise MCPError(
                code=mcp_types.INVALID_PARAMS,
                message=(
                    f"taskId must be a string, got {describe(task_id)}; send the taskId "
                    "tools/call returned"
                ),
            )
        try:
            return self.parent.status(task_id)
        except DelegationError as exc:
            raise _task_error(exc) from None

    async def _task(self, handle: RunHandle, *, elicit: bool) -> dict[str, Any]:
        """The task's common fields, for the run's current status."""
        times = await self._times_of(handle)
        status = handle.status
        asking = elicit and status is RunStatus.INPUT_REQUIRED and bool(handle.questions)
        task: dict[str, Any] = {
            "taskId": handle.run_id,
            "status": "input_required" if asking else _TERMINAL_STATUS.get(status, "working"),
            "createdAt": _iso(times.created),
            "lastUpdatedAt": _iso(times.updated),
            "ttlMs": self._ttl_ms(times) if status.is_terminal else None,
            "pollIntervalMs": self.poll_interval_ms,
        }
        if status.is_terminal:
            task["statusMessage"] = f"the run of {handle.subagent} ended {status.value}"
        else:
            task["statusMessage"] = status_words(handle, elicit=elicit)
        if asking:
            task["inputRequests"] = input_requests(handle.questions)
        return task

    async def _detailed(self, handle: RunHandle, *, elicit: bool) -> dict[str, Any]:
        task = await self._task(handle, elicit=elicit)
        if not handle.status.is_terminal:
            return task
        # The ended run's outcome, exactly as wait_subagent answers: the run
        # is observed by this (its outcome is handed over), whatever its end.
        reason: str | None = None
        try:
            answer = await self.parent.wait(handle.run_id, timeout=0)
        except DelegationError as exc:
            result, reason = error_result(exc), exc.message
        else:
            result = success_result(run_payload(answer))
        if handle.status is RunStatus.CANCELLED:
            # No result in a cancelled task: its reason goes in the message.
            if reason is not None:
                task["statusMessage"] = f"{task['statusMessage']}: {reason}"
        else:
            task["result"] = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        return task

    async def _times_of(self, handle: RunHandle) -> _Times:
        run_id = handle.run_id
        times = self._times(run_id)
        now = time.time()
        if times is None:
            times = await self._stored_times(run_id, handle.status) or _Times(
                now, now, handle.status
            )
            self._keep(run_id, times)
        questions = _question_ids(handle)
        if times.status is not handle.status or times.questions != questions:
            times.status = handle.status
            times.questions = questions
            times.updated = now
        if handle.status.is_terminal and times.ended is None:
            times.ended = times.updated
            self._keep(run_id, times)
        return times

    def _times(self, run_id: str) -> _Times | None:
        times = self._live.get(run_id)
        return times if times is not None else self._ended.get(run_id)

    def _keep(self, run_id: str, times: _Times) -> None:
        """File *times* with the live or the ended tasks, and let go what retention would.

        The runtime holds at most ``max_live_runs`` live runs and
        ``retention_max_runs`` terminal ones, evicting the oldest ended first:
        a task the book lets go here is one whose run the runtime no longer
        holds (or, with a store, one the store's record answers for).
        """
        config = self.config
        if times.ended is None:
            kept, limit = self._live, config.max_live_runs
        else:
            self._live.pop(run_id, None)
            kept, limit = self._ended, config.retention_max_runs
        kept[run_id] = times
        if len(kept) > limit:
            kept.popitem(last=False)

    async def _stored_times(self, run_id: str, status: RunStatus) -> _Times | None:
        """The times a store recorded for a run of an earlier process (or another host)."""
        if self.store is None:
            return None
        try:
            record = await self.store.get(run_id)
        except Exception:  # a store that cannot answer leaves this server's own clock
            return None
        if record is None:
            return None
        created = _seconds(record.admitted_at)
        if created is None:
            return None
        ended = _seconds(record.ended_at)
        updated = ended or _seconds(record.started_at) or created
        return _Times(created, updated, status, ended)

    def _ttl_ms(self, times: _Times) -> int | None:
        retention: float | None = self.config.retention_seconds
        if self.store is not None:
            # The store answers for the run after the runtime has let it go.
            kept = getattr(self.store, "retention_seconds", None)
            retention = kept if isinstance(kept, int | float) else None
        if retention is None or not math.isfinite(retention):
            return None
        ended = times.ended if times.ended is not None else times.updated
        return max(0, round((ended - times.created + retention) * 1000))


def _question_ids(handle: RunHandle) -> tuple[str, ...]:
    return tuple(question.question_id for question in handle.questions)


def _task_error(exc: DelegationError, failed: str = "Failed to read task") -> MCPError:
    """A lookup's error as the extension's: ``-32602`` for an id that names no task.

    Args:
        exc: the error.
        failed: what failed, for any other error (``-32603``).
    """
    if isinstance(exc, UnknownRunError | InvalidArgumentsError):
        return MCPError(
            code=mcp_types.INVALID_PARAMS, message=f"Failed to retrieve task: {exc.message}"
        )
    return MCPError(code=mcp_types.INTERNAL_ERROR, message=f"{failed}: {exc.message}")
