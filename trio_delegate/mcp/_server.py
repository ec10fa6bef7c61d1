"""An MCP server (low-level ``mcp.server`` API) exposing the delegation tools.

The tools are a parent's :class:`DelegationTools` (contract §10), listed as
they are defined and called through :meth:`DelegationTools.call`, so an MCP
client sees exactly what the other provider formats see. A successful call
returns the payload as ``structured_content`` and as JSON text; a
:class:`DelegationError` returns an ``is_error`` result carrying the error's
message and ``to_payload()``, never a success-shaped one.

The server's lifespan is entered once per connection (``Server.run``), so a
connection is the unit of ownership: :func:`build_server` opens one parent per
connection and closes it, cancelling and joining its live runs, when the
connection ends; :func:`build_parent_server` serves one parent the host owns.

A foreground call (``delegate_task`` or ``continue_subagent`` without
``background``) is served on the public API as a background start followed
by a wait bounded by the *foreground limit*. Clients give up on a tool call
after a timeout of their own, some without telling the server (Codex), so a
call still running at the limit answers with the running handle and the run
goes on as background work the model must wait for; a client that cancels
the call meanwhile cancels and joins the run, as a foreground
:meth:`Parent.delegate` would. While it waits, the call reports the child's
latest progress to clients that asked for it (a progress token) and did not
declare the Tasks extension (a task carries it in its ``statusMessage``),
which also lets clients that reset their timeout on progress keep waiting.
"""

from __future__ import annotations

import logging
import math
import secrets
import warnings
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Final, final, get_args

import attrs
import mcp.types as mcp_types
import trio
from mcp.server import Server, ServerRequestContext
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from .. import (
    Budget,
    DelegationError,
    DelegationTools,
    InvalidArgumentsError,
    MemoryStore,
    Parent,
    Runtime,
    UnresolvedDelegationError,
    __version__,
)
from .._checks import describe
from .._tools import traced_call
from .._usage import check_budget
from ..lowlevel import abandon
from ._connection_end import ClientEnds, left_behind, leftovers
from ._results import error_result, success_result
from ._talk import declares_form_elicitation, report_progress
from ._tasks import (
    DEFAULT_TASK_POLL_INTERVAL_SECONDS,
    TASKS_EXTENSION,
    TaskBook,
    TaskIdParams,
    declares_tasks,
    require_tasks,
)

__all__ = [
    "DEFAULT_FOREGROUND_LIMIT_SECONDS",
    "DEFAULT_INSTRUCTIONS",
    "DEFAULT_NAME",
    "DEFAULT_PROGRESS_INTERVAL_SECONDS",
    "DEFAULT_TASK_POLL_INTERVAL_SECONDS",
    "build_parent_server",
    "build_server",
    "error_result",
    "success_result",
]

logger = logging.getLogger("trio_delegate.mcp")

#: The server's name in the MCP handshake.
DEFAULT_NAME: Final = "trio-delegate"

#: What the server tells a client's model about itself (clients show it ahead
#: of the tool list).
DEFAULT_INSTRUCTIONS: Final = (
    "Delegate self-contained tasks to subagents with delegate_task. A foreground call "
    "waits for the result. With background=true you get a run_id at once: keep it, do "
    "other work, and call wait_subagent on every background run before you finish (a "
    "timed wait that answers with a status means the run is still going: wait again "
    "later). Failed, cancelled and timed-out runs are errors, never results; recover "
    "with delegate_task(replaces=<run_id>). A foreground call that runs too long comes "
    "back as {run_id, subagent, status} instead of a result: it is then background work, "
    "so call wait_subagent on it. Runs belong to this connection and are cancelled when "
    "it ends. If you lose a run_id, list_subagent_runs lists your runs."
)

#: How long a foreground call may run before it answers with the running
#: handle: below the common client tool timeouts (Codex: 60 s by default).
DEFAULT_FOREGROUND_LIMIT_SECONDS: Final = 45.0

#: How often a running foreground call reports progress (when the client
#: asked for it with a progress token).
DEFAULT_PROGRESS_INTERVAL_SECONDS: Final = 5.0

#: The logger name of the log messages that announce a background run's end.
_SETTLEMENT_LOGGER: Final = "trio_delegate.settled"

#: The log levels, least severe first (``logging/setLevel`` filters by them).
_LOG_LEVELS: Final[tuple[str, ...]] = get_args(mcp_types.LoggingLevel)

#: The tools that run in the foreground unless told ``background``.
_FOREGROUND_TOOLS: Final = ("delegate_task", "continue_subagent")

#: Hints for clients' approval policies. Delegating runs whatever the
#: subagent does, so it claims nothing; status, waits and the listing change
#: nothing outside the server; a cancel only stops a run of this connection.
_ANNOTATIONS: Final = {
    "delegate_task": mcp_types.ToolAnnotations(title="Delegate a task to a subagent"),
    "subagent_status": mcp_types.ToolAnnotations(
        title="Status of a subagent run", read_only_hint=True, open_world_hint=False
    ),
    "wait_subagent": mcp_types.ToolAnnotations(
        title="Wait for a subagent run", read_only_hint=True, open_world_hint=False
    ),
    "cancel_subagent": mcp_types.ToolAnnotations(
        title="Cancel a subagent run",
        read_only_hint=False,
        destructive_hint=False,
        idempotent_hint=True,
        open_world_hint=False,
    ),
    "continue_subagent": mcp_types.ToolAnnotations(title="Continue a subagent's conversation"),
    "list_subagent_runs": mcp_types.ToolAnnotations(
        title="List subagent runs",
        read_only_hint=True,
        idempotent_hint=True,
        open_world_hint=False,
    ),
}


@final
@attrs.define(eq=False)
class _Connection:
    """What one connection works with: a parent and its tools.

    Attributes:
        session: the connection's MCP session, once a request has shown it
            (the lifespan is entered before the session exists).
        foreground: runs a foreground call is waiting for within its limit:
            their ends reach the client as that call's answer.
        tasks: the Tasks extension's side of the connection, when it serves
            the extension.
        log_level: the least severe level a handshake-era client asked to
            hear with ``logging/setLevel`` (``None``: every level).
        ends: the runs the client ended itself (a cancel, a cancelled
            foreground call) or whose foreground call it left: what its
            ending reports as left behind depends on them.
    """

    parent: Parent
    tools: DelegationTools
    session: ServerSession | None = None
    foreground: set[str] = attrs.Factory(set)
    tasks: TaskBook | None = None
    log_level: str | None = None
    ends: ClientEnds = attrs.Factory(lambda: ClientEnds(1))


@final
@attrs.frozen
class _Limits:
    foreground_seconds: float | None
    progress_seconds: float


#: Opens what one connection works with.
_Session = Callable[[], AbstractAsyncContextManager[_Connection]]


def build_server(
    runtime: Runtime,
    *,
    name: str = DEFAULT_NAME,
    instructions: str | None = DEFAULT_INSTRUCTIONS,
    foreground_limit_seconds: float | None = DEFAULT_FOREGROUND_LIMIT_SECONDS,
    progress_interval_seconds: float = DEFAULT_PROGRESS_INTERVAL_SECONDS,
    owner: str | None = None,
    task_poll_interval_seconds: float = DEFAULT_TASK_POLL_INTERVAL_SECONDS,
    parent_budget: Budget | None = None,
) -> Server[Any]:
    """An MCP server giving each connection a parent of its own on *runtime*.

    Each connection (one ``Server.run``: a stdio process, an in-memory
    client, a Claude Agent SDK query) opens a parent with a fresh owner id
    (``mcp-<random>``) over every registered subagent, or with *owner*
    when given: with a store, a later server of the same owner then reads
    (and a client keeping task ids polls) the runs an earlier one recorded.
    Owners are unique among a runtime's open parents, so a fixed owner
    serves one connection at a time. When the connection
    ends, the parent closes: its live runs are cancelled and joined (a
    command subagent's processes are killed), and unresolved work is logged
    as a warning on the ``trio_delegate.mcp`` logger rather than raised, since
    nobody is left to hear it.

    Transports that enter a server's lifespan once for many sessions (the
    streamable HTTP session manager) would share one parent between them: use
    this server with connection-per-run transports (stdio, in-memory).

    A connection cut short (its task cancelled, as on SIGINT) logs the runs
    it leaves unresolved before they are cancelled.

    The server serves the MCP Tasks extension (``io.modelcontextprotocol/tasks``)
    to the requests that declare it (see ``docs/mcp.md``).

    Args:
        runtime: the open runtime the runs live in; it must outlive the server.
        name: the server's name in the MCP handshake.
        instructions: what the server tells the client's model; ``None`` for nothing.
        foreground_limit_seconds: how long a foreground call may run before it
            answers with the running handle (the run goes on in the
            background); ``None`` for no limit.
        progress_interval_seconds: how often a running foreground call
            reports progress to a client that asked for it.
        owner: the owner of every connection's parent; ``None`` for a fresh
            ``mcp-<random>`` one per connection.
        task_poll_interval_seconds: the polling interval the server suggests
            for tasks (``pollIntervalMs``).
        parent_budget: what each connection's runs may spend together: the
            budget of its parent (contract §20), or ``None``. A report that
            passes it cancels that connection's runs, and its later starts
            are refused; other connections are untouched.

    Raises:
        InvalidArgumentsError: a limit that is not a finite number > 0, an
            owner that is not valid, or a *parent_budget* that is not a
            :class:`~trio_delegate.Budget`.
    """
    limits = _limits(foreground_limit_seconds, progress_interval_seconds)
    poll = _limits(None, task_poll_interval_seconds, "task_poll_interval_seconds")
    if owner is not None:
        _check_owner(owner)
    check_budget("parent_budget", parent_budget)

    @asynccontextmanager
    async def session() -> AsyncIterator[_Connection]:
        who = owner if owner is not None else f"mcp-{secrets.token_hex(8)}"
        ends = ClientEnds(runtime.config.retention_max_runs)
        # Only a store that outlives the process keeps what a person may read later.
        stored = runtime.store is not None and not isinstance(runtime.store, MemoryStore)
        try:
            async with runtime.open_parent(who, budget=parent_budget) as parent:
                logger.info("connection %s opened", who)
                tools = parent.tools()
                book = TaskBook(
                    parent,
                    runtime.store,
                    runtime.config,
                    max(1, round(poll.progress_seconds * 1000)),
                )
                try:
                    yield _Connection(parent, tools, tasks=book, ends=ends)
                except BaseException:
                    _log_left_behind(who, parent, ends, stored, cut_short=True)
                    raise
                _log_left_behind(who, parent, ends, stored)
        except UnresolvedDelegationError:
            # The parent's close cancelled what was left: said above, in the
            # client's terms rather than a Python parent's.
            pass

    return _make_server(name, instructions, session, limits, tasks=True)


def build_parent_server(
    parent: Parent,
    *,
    name: str = DEFAULT_NAME,
    instructions: str | None = DEFAULT_INSTRUCTIONS,
    foreground_limit_seconds: float | None = DEFAULT_FOREGROUND_LIMIT_SECONDS,
    progress_interval_seconds: float = DEFAULT_PROGRESS_INTERVAL_SECONDS,
) -> Server[Any]:
    """An MCP server whose every connection works with *parent*'s tools.

    The host owns *parent*: its runs outlive any one connection, and leaving
    its ``async with`` block is where fail-closed completion is checked.

    Args:
        parent: an open parent.
        name: the server's name in the MCP handshake.
        instructions: what the server tells the client's model; ``None`` for nothing.
        foreground_limit_seconds: as for :func:`build_server`.
        progress_interval_seconds: as for :func:`build_server`.

    Raises:
        RuntimeClosedError: *parent* is closed.
        InvalidArgumentsError: a limit that is not a finite number > 0.
    """
    limits = _limits(foreground_limit_seconds, progress_interval_seconds)
    connection = _Connection(parent, parent.tools())

    @asynccontextmanager
    async def session() -> AsyncIterator[_Connection]:
        yield connection

    return _make_server(name, instructions, session, limits)


def _check_owner(owner: Any) -> None:
    if type(owner) is not str or not owner or "/" in owner or not owner.isprintable():
        raise InvalidArgumentsError(
            f"owner must be a non-empty printable string without '/', got {describe(owner)}; "
            "name the server's owner plainly, e.g. 'delegate'"
        )


def _limits(
    foreground: Any, progress: Any, progress_field: str = "progress_interval_seconds"
) -> _Limits:
    def check(field: str, value: Any, *, allow_none: bool) -> None:
        if value is None and allow_none:
            return
        ok = (
            not isinstance(value, bool)
            and isinstance(value, int | float)
            and math.isfinite(value)
            and value > 0
        )
        if not ok:
            allowed = "a finite number of seconds > 0" + (" or None" if allow_none else "")
            raise InvalidArgumentsError(f"{field} must be {allowed}, got {value!r}")

    check("foreground_limit_seconds", foreground, allow_none=True)
    check(progress_field, progress, allow_none=False)
    return _Limits(None if foreground is None else float(foreground), float(progress))


def _log_left_behind(
    who: str,
    parent: Parent,
    ends: ClientEnds,
    stored: bool,
    *,
    cut_short: bool = False,
) -> None:
    """Log what connection *who* leaves behind, before its parent closes."""
    entries = left_behind(parent, ends)
    level, message = leftovers(who, entries, ends=ends, stored=stored, cut_short=cut_short)
    logger.log(level, "%s", message)


def _make_server(
    name: str,
    instructions: str | None,
    session: _Session,
    limits: _Limits,
    *,
    tasks: bool = False,
) -> Server[Any]:
    @asynccontextmanager
    async def lifespan(server: Server[Any]) -> AsyncIterator[_Connection]:
        async with session() as connection, trio.open_nursery() as nursery:
            nursery.start_soon(_announce_settlements, connection)
            try:
                yield connection
            finally:
                nursery.cancel_scope.cancel()

    async def list_tools(
        ctx: ServerRequestContext[_Connection],
        params: mcp_types.PaginatedRequestParams | None,
    ) -> mcp_types.ListToolsResult:
        ctx.lifespan_context.session = ctx.session
        return mcp_types.ListToolsResult(tools=_tool_list(ctx.lifespan_context.tools, limits))

    async def call_tool(
        ctx: ServerRequestContext[_Connection],
        params: mcp_types.CallToolRequestParams,
    ) -> mcp_types.CallToolResult | dict[str, Any]:
        connection = ctx.lifespan_context
        connection.session = ctx.session
        arguments = params.arguments
        # A task only for a request that declared the extension itself.
        book = connection.tasks if declares_tasks(ctx) else None
        try:
            # One execute_tool span for the call, however many tool calls serve it.
            with traced_call(connection.tools, params.name):
                if params.name in _FOREGROUND_TOOLS and _is_foreground(arguments):
                    assert arguments is not None
                    return await _foreground(ctx, connection, params.name, arguments, limits, book)
                payload = await connection.tools.call(params.name, arguments)
                if params.name == "cancel_subagent":
                    connection.ends.cancelled(payload["run_id"])
                if book is not None and params.name in _FOREGROUND_TOOLS:
                    # A background start has returned: its admission is durable.
                    return await book.create(payload, elicit=declares_form_elicitation(ctx))
        except DelegationError as exc:
            return error_result(exc)
        return success_result(payload)

    async def set_level(
        ctx: ServerRequestContext[_Connection], params: mcp_types.SetLevelRequestParams
    ) -> mcp_types.EmptyResult:
        # Handshake era only (the SDK routes it nowhere else): it filters the
        # settlement notices, the one kind of log message this server sends.
        ctx.lifespan_context.log_level = params.level
        return mcp_types.EmptyResult()

    async def request_cancelled(
        ctx: ServerRequestContext[_Connection], params: mcp_types.CancelledNotificationParams
    ) -> None:
        # The SDK has cancelled the request already; this notes that the
        # client asked, so a foreground run that ends with it is not left behind.
        ctx.lifespan_context.ends.request_cancelled(params.request_id)

    server: Server[Any] = Server(
        name,
        version=__version__,
        instructions=instructions,
        lifespan=lifespan,
        on_list_tools=list_tools,
    )
    server.add_request_handler("tools/call", mcp_types.CallToolRequestParams, call_tool)
    server.add_request_handler("logging/setLevel", mcp_types.SetLevelRequestParams, set_level)
    server.add_notification_handler(
        "notifications/cancelled", mcp_types.CancelledNotificationParams, request_cancelled
    )
    if tasks:
        _add_tasks(server)
    return server


def _add_tasks(server: Server[Any]) -> None:
    """Serve the Tasks extension on *server* (to the requests that declare it)."""

    def book_of(ctx: ServerRequestContext[_Connection]) -> TaskBook:
        require_tasks(ctx)
        book = ctx.lifespan_context.tasks
        assert book is not None  # build_server gives every connection one
        return book

    async def discover(
        ctx: ServerRequestContext[_Connection], params: mcp_types.RequestParams
    ) -> mcp_types.DiscoverResult:
        capabilities = server.get_capabilities(
            protocol_version=ctx.protocol_version, extensions={TASKS_EXTENSION: {}}
        )
        # The listen streams carry task notices only (the tool list never
        # changes), and logging/setLevel exists in the handshake era only.
        capabilities.tools = mcp_types.ToolsCapability(list_changed=False)
        capabilities.logging = None
        return mcp_types.DiscoverResult(
            supported_versions=list(MODERN_PROTOCOL_VERSIONS),
            capabilities=capabilities,
            instructions=server.instructions,
        )

    async def get(ctx: ServerRequestContext[_Connection], params: TaskIdParams) -> dict[str, Any]:
        return await book_of(ctx).get(params.task_id, elicit=declares_form_elicitation(ctx))

    async def cancel(
        ctx: ServerRequestContext[_Connection], params: TaskIdParams
    ) -> dict[str, Any]:
        book_of(ctx).cancel(params.task_id)
        ctx.lifespan_context.ends.cancelled(params.task_id)
        return {}

    async def update(
        ctx: ServerRequestContext[_Connection], params: TaskIdParams
    ) -> dict[str, Any]:
        book_of(ctx).update(params.task_id, params.input_responses)
        return {}

    async def listen(
        ctx: ServerRequestContext[_Connection],
        params: mcp_types.SubscriptionsListenRequestParams,
    ) -> mcp_types.SubscriptionsListenResult:
        if "taskIds" not in (params.notifications.model_extra or {}):
            # Nothing but tasks is ever announced: as without the extension.
            raise MCPError(
                code=mcp_types.METHOD_NOT_FOUND, message="Method not found", data=ctx.method
            )
        return await book_of(ctx).listen(ctx, params)

    server.add_request_handler("server/discover", mcp_types.RequestParams, discover)
    server.add_request_handler("tasks/get", TaskIdParams, get)
    server.add_request_handler("tasks/cancel", TaskIdParams, cancel)
    server.add_request_handler("tasks/update", TaskIdParams, update)
    server.add_request_handler(
        "subscriptions/listen", mcp_types.SubscriptionsListenRequestParams, listen
    )


def _tool_list(tools: DelegationTools, limits: _Limits) -> list[mcp_types.Tool]:
    return [
        mcp_types.Tool(
            name=definition.name,
            description=_description(definition.name, definition.description, limits),
            input_schema=definition.parameters,
            annotations=_ANNOTATIONS.get(definition.name),
        )
        for definition in tools.definitions()
    ]


def _description(name: str, text: str, limits: _Limits) -> str:
    if name not in _FOREGROUND_TOOLS or limits.foreground_seconds is None:
        return text
    # Appended, not rewritten: the rest of the description is the parent's,
    # as every other provider format shows it.
    return (
        f"{text}\n\nA foreground call still running after {limits.foreground_seconds:g} s "
        "returns {run_id, subagent, status} instead of the result; the run goes on in the "
        "background: call wait_subagent with that run_id (with a timeout, repeatedly) before "
        "you finish. Progress is reported while a foreground call runs."
    )


def _is_foreground(arguments: Mapping[str, Any] | None) -> bool:
    """Whether a call's arguments ask for the foreground (anything malformed: no)."""
    # Malformed arguments go to the tools unchanged, which name the problem.
    return isinstance(arguments, Mapping) and arguments.get("background", False) in (False, None)


async def _foreground(
    ctx: ServerRequestContext[_Connection],
    connection: _Connection,
    name: str,
    arguments: Mapping[str, Any],
    limits: _Limits,
    book: TaskBook | None,
) -> mcp_types.CallToolResult | dict[str, Any]:
    """A foreground call: a background start, then a wait bounded by the foreground limit.

    A call still running at the limit answers with the running handle, or,
    to a request that declared the Tasks extension, with the run as a task.

    Raises:
        DelegationError: what the start or the wait raise (the run's error).
    """
    handle = await connection.tools.call(name, {**arguments, "background": True})
    run_id = handle["run_id"]
    connection.foreground.add(run_id)
    try:
        result = await _foreground_wait(ctx, connection, handle, limits, tasks=book is not None)
    finally:
        connection.foreground.discard(run_id)
    answer = result.structured_content
    if book is not None and answer is not None and "final_result" not in answer:
        # Still running at the limit, or asking: the task is the run as that
        # wait left it.
        return await book.create(answer, elicit=declares_form_elicitation(ctx))
    return result


async def _foreground_wait(
    ctx: ServerRequestContext[_Connection],
    connection: _Connection,
    handle: Mapping[str, Any],
    limits: _Limits,
    *,
    tasks: bool,
) -> mcp_types.CallToolResult:
    run_id = handle["run_id"]
    wait: dict[str, Any] = {"run_id": run_id}
    if limits.foreground_seconds is not None:
        wait["timeout"] = limits.foreground_seconds
    answer: dict[str, Any] | DelegationError | None = None
    try:
        async with trio.open_nursery() as nursery:
            if not tasks:
                # A task carries its progress in its statusMessage instead.
                nursery.start_soon(
                    report_progress, ctx, connection.parent, handle, limits.progress_seconds
                )
            try:
                answer = await connection.tools.call("wait_subagent", wait)
            except DelegationError as exc:
                # Raised outside the nursery, which would wrap it in a group.
                answer = exc
            nursery.cancel_scope.cancel()
    finally:
        if answer is None:
            # The call ended unanswered: the run ends with it, as a
            # foreground delegation's does.
            connection.ends.unanswered(run_id, ctx.request_id)
            with trio.CancelScope(shield=True):
                await _cancel_and_join(connection.parent, run_id)
    if isinstance(answer, DelegationError):
        raise answer
    payload = answer
    if "final_result" in payload:
        return success_result(payload)
    if payload["status"] == "input_required":
        payload["message"] = (
            "the run waits for an answer to its question; it goes on in the background. "
            f"Answer it with answer_subagent (run_id {run_id!r}), then call wait_subagent "
            "until it answers, before you finish."
        )
        return success_result(payload)
    payload["message"] = (
        f"still {payload['status']} after {limits.foreground_seconds:g} s, the most a "
        f"foreground call waits here; it goes on in the background. Call wait_subagent "
        f"with run_id {run_id!r} (with a timeout, repeatedly) until it answers, before you "
        "finish."
    )
    return success_result(payload)


async def _announce_settlements(connection: _Connection) -> None:
    """Tell the client, as a log message, each time a background run of its own ends.

    Clients that show server logs then surface it; the model still reads the
    run with ``wait_subagent`` (a notice is never a result, nor observation).
    """
    info = _LOG_LEVELS.index("info")
    async for handle in connection.parent.settled():
        if connection.tasks is not None:
            connection.tasks.settled(handle)  # the task's last update
        session = connection.session
        if session is None or handle.run_id in connection.foreground:
            continue  # no request yet, or a foreground call answers for it
        if session.protocol_version in MODERN_PROTOCOL_VERSIONS:
            # At 2026-07-28 a log message may only ride the stream of the
            # request that asked for it, which has long been answered:
            # these clients hear of ends through tasks instead.
            continue
        if connection.log_level is not None and _LOG_LEVELS.index(connection.log_level) > info:
            continue  # the client asked for less than info (logging/setLevel)
        data = {
            "run_id": handle.run_id,
            "subagent": handle.subagent,
            "status": handle.status.value,
            "message": (
                f"background run {handle.run_id} ({handle.subagent}) ended "
                f"{handle.status.value}: call wait_subagent to read its outcome"
            ),
        }
        try:
            with warnings.catch_warnings():
                # MCP 2026-07-28 deprecates protocol logging (SEP-2577) but keeps
                # it working through the deprecation window; it is the channel
                # clients show today, so the notice still goes there.
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                await session.send_log_message("info", data, logger=_SETTLEMENT_LOGGER)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return  # the client has gone


async def _cancel_and_join(parent: Parent, run_id: str) -> None:
    """The client cancelled a foreground call: the core's verdict, as for ``delegate``."""
    await abandon(parent, run_id)
