"""The Trio run a runtime lives in: refused outside one, and missed when it ends first.

Two misuses otherwise end in Trio's own words, which blame Trio. Called
from ``asyncio.run`` (the reflex of most Python model code), ``open_runtime``
met ``RuntimeError: must be called from async context`` deep inside the
registry. Entered by hand (``await cm.__aenter__()``) in one ``trio.run``
and left in another, the runtime's nursery outlived the run that owned it,
and Trio ended that run with ``TrioInternalError ... please file a bug``.
Both are now a `NotInTrioError` that names the misuse and the fix.
"""

from __future__ import annotations

import sniffio
import trio

from .._errors import NotInTrioError
from .._urls import docs_page

__all__ = ["RunGuard", "require_trio"]


def require_trio(what: str) -> None:
    """Refuse a call made outside a Trio run.

    Args:
        what: the call, as the message names it (``"open_runtime"``).

    Raises:
        NotInTrioError: no Trio run is current (asyncio, or no event loop).
    """
    try:
        trio.lowlevel.current_trio_token()
    except RuntimeError:
        raise NotInTrioError(_outside(what)) from None


def _outside(what: str) -> str:
    try:
        library: str | None = sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        library = None
    runs_under = (
        f"trio_delegate runs under Trio: enter {what} inside trio.run(main), not asyncio.run(main)."
    )
    bridge = (
        "To use asyncio code (Pydantic AI, LangChain, the OpenAI Agents SDK) inside the Trio "
        "run, see trio_delegate.adapters.asyncio_loop and run_asyncio: "
        f"{docs_page('adapters', 'the-asyncio-bridge')}"
    )
    if library is None:
        return f"{what} was called outside any async event loop; {runs_under} {bridge}"
    return f"{what} was called from {library}, not from a Trio run; {runs_under} {bridge}"


class RunGuard:
    """Names the misuse when a Trio run ends with a runtime still open in it.

    A runtime's block (``async with open_runtime(...)``) must be left in the
    run that entered it. If that run's main task returns first, Trio cancels
    its system tasks, then fails on the runtime's tasks still alive: this
    system task, cancelled then, raises a `NotInTrioError` that Trio reports
    as the cause of its internal error.
    """

    def __init__(self) -> None:
        self._closed = False
        self._scope = trio.CancelScope()

    def start(self) -> None:
        """Watch the current Trio run until `close` (one system task)."""
        trio.lowlevel.spawn_system_task(self._watch, name="trio_delegate run guard")

    def close(self) -> None:
        """The runtime's block was left: stop watching."""
        self._closed = True
        self._scope.cancel()

    async def _watch(self) -> None:
        try:
            with self._scope:
                await trio.sleep_forever()
        except trio.Cancelled:
            if self._closed:
                raise
            # The run is ending with the runtime's block still open.
            raise NotInTrioError(
                "the Trio run ended while a trio_delegate runtime opened in it was still open "
                "(was open_runtime's block entered by hand, with __aenter__, and left for "
                "another trio.run?); enter and leave it with one `async with open_runtime(...)` "
                "inside the function that trio.run runs"
            ) from None
