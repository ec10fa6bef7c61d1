"""The asyncio bridge: asyncio agent frameworks inside the Trio run.

Pydantic AI, LangChain, OpenAI Agents and DSPy's async path are asyncio
code: they call ``asyncio.create_task`` and cannot run on bare Trio.
``trio-asyncio`` runs an asyncio event loop *on top of* the Trio run, so both
kinds of code share one scheduler and one cancellation story:

* asyncio code called from Trio (:func:`run_asyncio`) runs as an asyncio task
  of that loop; cancelling the Trio scope around the call cancels the task,
  and the call raises ``trio.Cancelled`` once the task has ended;
* Trio code called from asyncio (:func:`call_trio`, what every delegation
  tool handed to a framework does) runs as a Trio task; cancelling the
  asyncio task that awaits it cancels that Trio task, and the asyncio side
  sees ``CancelledError`` only once the Trio task has ended.

So a cancel scope around a framework's agent run reaches the delegation tool
it is in (``trio.Cancelled`` in ``Parent.delegate`` / ``Parent.wait``) and,
through the runtime, the child run; and a child run that wraps a framework
agent ends the agent when the run is cancelled or its deadline passes.

This module imports ``trio_asyncio`` before anything else: importing it
patches asyncio's loop lookup, which only helps code that looks the loop up
after the patch (anyio binds ``asyncio.get_running_loop`` when its asyncio
backend is first imported).
"""

from __future__ import annotations

# trio_asyncio first: see the module docstring.
try:  # isort: skip
    import trio_asyncio  # type: ignore[import-untyped]
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "the trio_delegate adapters for asyncio frameworks need trio-asyncio: install the "
        "framework's extra, e.g. pip install 'trio-delegate[pydantic-ai]'"
    ) from exc

import asyncio
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any, Final, ParamSpec, TypeVar, final

import trio

from .. import DelegationError

__all__ = ["AsyncioBridgeError", "asyncio_loop", "call_trio", "run_asyncio"]

#: How often a cancelled asyncio task is cancelled again until it ends.
_RECANCEL_SECONDS: Final = 0.05

P = ParamSpec("P")
T = TypeVar("T")

#: The loop of the innermost enclosing ``asyncio_loop()`` block. Only these
#: long-lived loops are shared; a loop opened for one call is never reused by
#: another (it closes when that call ends).
_shared_loop: ContextVar[asyncio.AbstractEventLoop | None] = ContextVar(
    "trio_delegate_shared_asyncio_loop", default=None
)


@final
class AsyncioBridgeError(DelegationError, RuntimeError):
    """The asyncio bridge cannot run here (an import-order problem, see the message)."""


def _check_import_order() -> None:
    """Refuse to run with an anyio that bound the unpatched loop lookup.

    Without this check the failure is ``RuntimeError: no running event loop``
    deep inside a framework, far from its cause.
    """
    backend = sys.modules.get("anyio._backends._asyncio")
    if backend is None:
        return
    bound = getattr(backend, "get_running_loop", asyncio.get_running_loop)
    if bound is not asyncio.get_running_loop:
        raise AsyncioBridgeError(
            "anyio's asyncio backend was imported before trio_asyncio, so asyncio code run "
            "on the Trio loop cannot find its event loop. Import trio_delegate.adapters (or "
            "trio_asyncio) before anything that imports anyio's asyncio backend; under "
            "pytest, add '-p trio_asyncio' to addopts so it loads before anyio's plugin"
        )


@asynccontextmanager
async def asyncio_loop() -> AsyncIterator[asyncio.AbstractEventLoop]:
    """An asyncio event loop running inside the current Trio run, for the block.

    Open it once, around ``open_runtime``: every adapter call inside the block
    (agent runs through :func:`run_asyncio`, child runners, tool calls) then
    shares this one loop, which is what clients that pool connections across
    calls (HTTP clients of model providers) need, and every run ends before
    the loop does. Without it, each adapter call opens a loop of its own for
    its duration. Nested blocks reuse the enclosing loop.

    Leaving the block cancels the asyncio tasks still on the loop and waits
    for them, like ``asyncio.run``.

    Yields:
        the loop (a ``trio_asyncio`` loop; ``asyncio.get_running_loop()``
        returns it inside asyncio code run on it).

    Raises:
        AsyncioBridgeError: anyio's asyncio backend was imported before
            ``trio_asyncio`` (the message says how to fix it).
    """
    current = _shared_loop.get()
    if current is not None and not current.is_closed():
        yield current
        return
    _check_import_order()
    async with _open_loop() as loop:
        token = _shared_loop.set(loop)
        try:
            yield loop
        finally:
            _shared_loop.reset(token)


async def run_asyncio(fn: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """Call an asyncio async function from Trio and return its result.

    ``await run_asyncio(agent.run, "prompt")`` runs ``agent.run("prompt")``
    as an asyncio task on the loop of the enclosing :func:`asyncio_loop`
    block, or on a loop opened for this call alone (closed, with everything
    left on it, before this returns).

    Cancelling the Trio scope around the call cancels the asyncio task; the
    call raises ``trio.Cancelled`` once the task has ended.

    Args:
        fn: an asyncio-flavoured async function (an agent's ``run``,
            ``ainvoke``, ``Runner.run``, ``acall``...).
        *args: positional arguments for *fn*.
        **kwargs: keyword arguments for *fn*.

    Returns:
        what *fn* returned.

    Raises:
        AsyncioBridgeError: see :func:`asyncio_loop`.
        Exception: whatever *fn* raises, as itself.
    """
    current = _shared_loop.get()
    if current is not None and not current.is_closed():
        return await _on_loop(current, fn, *args, **kwargs)
    _check_import_order()
    async with _open_loop() as loop:
        return await _on_loop(loop, fn, *args, **kwargs)


@asynccontextmanager
async def _open_loop() -> AsyncIterator[asyncio.AbstractEventLoop]:
    """``trio_asyncio.open_loop()``, with exceptions coming out as themselves.

    The loop runs on nurseries, which wrap whatever leaves the block in
    exception groups; the block's exception is taken out of the loop and
    raised once the loop has closed, and cancellations of the loop's own
    shutdown come out as one ``trio.Cancelled``. A KeyboardInterrupt or
    SystemExit from the loop wins over the block's exception.
    """
    failure: BaseException | None = None
    try:
        async with trio_asyncio.open_loop() as loop:
            try:
                yield loop
            except BaseException as exc:
                failure = exc
    except BaseExceptionGroup as group:
        leaves = list(_leaves(group))
        fatal = [e for e in leaves if not isinstance(e, Exception | trio.Cancelled)]
        if fatal:
            raise fatal[0] from None  # KeyboardInterrupt, SystemExit: they win
        if failure is not None:
            raise failure from None
        if all(isinstance(e, trio.Cancelled) for e in leaves):
            raise leaves[0] from None
        raise
    if failure is not None:
        raise failure


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    else:
        yield exc


async def _on_loop(
    loop: asyncio.AbstractEventLoop,
    fn: Callable[P, Awaitable[T]],
    /,
    *args: P.args,
    **kwargs: P.kwargs,
) -> T:
    """Run ``fn(*args, **kwargs)`` as an asyncio task on *loop*; wait for it from Trio.

    A Trio cancellation is delivered to the task again and again until the
    task ends. Once is not enough: asyncio drops a cancellation when the
    future the task awaits completes anyway, and on this loop every
    ``run_in_executor`` future (``asyncio.to_thread``, which DSPy, for one,
    uses on every model call) and every Trio call that finishes its work
    despite the cancel does exactly that. The framework would then run on
    past the deadline. Trio's own cancellation is level-triggered too.
    """

    async def call() -> T:
        return await fn(*args, **kwargs)

    coroutine = call()
    try:
        task = loop.create_task(coroutine)
    except BaseException:
        coroutine.close()  # never started: no "never awaited" warning
        raise
    done = trio.Event()
    task.add_done_callback(lambda _: done.set())
    try:
        await done.wait()
    except trio.Cancelled:
        with trio.CancelScope(shield=True):
            while not done.is_set():
                task.cancel()
                with trio.move_on_after(_RECANCEL_SECONDS):
                    await done.wait()
        if not task.cancelled():
            # Whatever it ended with, the call was cancelled: that is what
            # the caller's scope expects. Fetch the outcome so asyncio does
            # not report it as never retrieved.
            task.exception()
        raise
    return task.result()


async def call_trio(fn: Callable[..., Awaitable[T]], /, *args: Any) -> T:
    """Call a Trio async function from asyncio code running on a bridge loop.

    Every delegation tool handed to an asyncio framework goes through this:
    awaiting a Trio function directly in asyncio code fails ("Task got bad
    yield").

    Args:
        fn: a Trio-flavoured async function.
        *args: its arguments.

    Returns:
        what *fn* returned.

    Raises:
        AsyncioBridgeError: not called from asyncio code on a ``trio_asyncio``
            loop (the framework runs on a plain asyncio loop).
        Exception: whatever *fn* raises, as itself.
    """
    loop = asyncio.get_running_loop()
    if not isinstance(loop, trio_asyncio.BaseTrioEventLoop):
        raise AsyncioBridgeError(
            f"a delegation tool was called on {type(loop).__name__}, not on the Trio loop; "
            "run the agent from Trio with trio_delegate.adapters.run_asyncio(...) (or inside "
            "async with trio_delegate.adapters.asyncio_loop())"
        )
    result: T = await trio_asyncio.trio_as_aio(fn, loop=loop)(*args)
    return result
