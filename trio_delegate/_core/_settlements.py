"""Waking the parent (contract §17): which runs of a parent settled, and which
of them nobody has been told about yet.

Neither is observation (contract §7): a host may watch settlements to tell
its model at the next turn, and the model still has to ``wait`` for each run
before the parent may claim completion.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, final

import trio

from .._results import RunHandle

if TYPE_CHECKING:
    from ._run import Run

__all__ = ["SettledRuns", "Settlements"]


@final
class SettledRuns(AsyncIterator[RunHandle]):
    """The runs of one parent as they settle: from :meth:`Parent.settled`.

    An async iterator of ``RunHandle``\\ s with terminal statuses, in
    settlement order, from the moment it was made; it ends once its parent
    has closed (after the runs its close ended). Leave it early with
    :meth:`aclose` (or ``async with``) so nothing more is kept for it; an
    iterator nobody holds any more (``async for ... : break``) is forgotten
    as soon as it is garbage.
    """

    __slots__ = ("__weakref__", "_owner", "_receive")

    def __init__(self, owner: Settlements, receive: trio.MemoryReceiveChannel[RunHandle]) -> None:
        self._owner = owner
        self._receive = receive

    def __repr__(self) -> str:
        return f"<trio_delegate settled runs of parent {self._owner.parent_owner!r}>"

    def __aiter__(self) -> SettledRuns:
        return self

    async def __anext__(self) -> RunHandle:
        try:
            return await self._receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        """Stop following the parent's settlements (idempotent)."""
        self._owner.forget(self)
        await self._receive.aclose()

    async def __aenter__(self) -> SettledRuns:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def _entry(run: Run) -> tuple[Any, ...]:
    """What :meth:`Settlements.unobserved` makes *run*'s handle of: its latest
    progress and its usage too, as ``status`` shows them (contract §19-§20)."""
    talk = run.talk
    progress = None if talk is None else talk.latest()
    if progress is None and run.spent is None:
        return (run.run_id, run.subagent.name, run.state.status)
    return (run.run_id, run.subagent.name, run.state.status, progress, (), run.usage())


@final
class Settlements:
    """One parent's settlement stream and its unobserved runs."""

    __slots__ = ("_closed", "_streams", "_subscribed", "_unobserved", "parent_owner")

    def __init__(self, parent_owner: str) -> None:
        self.parent_owner = parent_owner
        # Held weakly: an iterator left by ``break`` and dropped must not stay
        # subscribed, buffering every later settlement until the parent closes.
        self._streams: weakref.WeakKeyDictionary[SettledRuns, trio.MemorySendChannel[RunHandle]] = (
            weakref.WeakKeyDictionary()
        )
        # Whether a stream may be subscribed (it may have been dropped since):
        # nearly every parent has none, and a settlement then sends nothing.
        self._subscribed = False
        # Terminal runs whose outcome no wait has told, oldest settled first,
        # as (run id, subagent, status); unobserved() makes the handles when
        # asked, which few callers do.
        # (and its latest progress and usage, when it reported any: contract §19-§20).
        self._unobserved: dict[str, tuple[Any, ...]] = {}
        self._closed = False

    def subscribe(self) -> SettledRuns:
        """A new stream of the runs that settle from now on."""
        send, receive = trio.open_memory_channel[RunHandle](math.inf)
        stream = SettledRuns(self, receive)
        if self._closed:
            send.close()
        else:
            self._streams[stream] = send
            self._subscribed = True
        return stream

    def forget(self, stream: SettledRuns) -> None:
        send = self._streams.pop(stream, None)
        if send is not None:
            send.close()

    def settled(self, run: Run) -> None:
        """*run* settled and its caller has its id: tell every stream."""
        if not run.foreground:
            if run.talk is None and run.spent is None:  # the common case, without a call
                self._unobserved[run.run_id] = (run.run_id, run.subagent.name, run.state.status)
            else:
                self._unobserved[run.run_id] = _entry(run)
        if self._subscribed:
            self._tell(run)

    def _tell(self, run: Run) -> None:
        streams = self._streams
        if not streams:
            # Every stream was forgotten or dropped: none until the next subscribe.
            self._subscribed = False
            return
        handle = run.handle()
        for stream, send in list(streams.items()):
            try:
                send.send_nowait(handle)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                streams.pop(stream, None)  # its reader left

    def untold(self, run: Run, unobserved: bool) -> None:
        """*run*'s foreground caller left without its outcome: list it as unobserved
        (*unobserved*), or not at all (the caller's cancellation answered for it)."""
        if unobserved:
            self._unobserved[run.run_id] = _entry(run)
        else:
            self._unobserved.pop(run.run_id, None)

    def told(self, run_id: str) -> None:
        """A wait returned *run_id*'s result or raised its error."""
        self._unobserved.pop(run_id, None)

    def unobserved(self) -> tuple[RunHandle, ...]:
        return tuple(RunHandle(*entry) for entry in self._unobserved.values())

    def close(self) -> None:
        """The parent closed and joined its runs: every stream ends."""
        self._closed = True
        self._subscribed = False
        streams, self._streams = self._streams, weakref.WeakKeyDictionary()
        for send in list(streams.values()):
            send.close()
