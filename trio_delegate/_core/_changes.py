"""Being told when a run's questions or status change (contract §19), for a surface.

A surface that pushes a run's state to its client (the MCP server's
``notifications/tasks``) must hear each question the run opens or closes and
its end, without polling. The run's :class:`Talk` already wakes the waits
that wait for these (``Talk.waiters``); :func:`talk_changed` is one such wait,
offered on the public API's terms (a parent and a run id).

Progress reports do not wake it: a runner may report in a hot loop, and a
surface reads the latest report when it reads the run.
"""

from __future__ import annotations

from typing import Final

import trio

from .._checks import describe, is_a
from .._errors import InvalidArgumentsError
from .._stores._protocol import StoredRun
from ._parent import Parent
from ._talk import talk_of

__all__ = ["STORED_RUN_RECHECK_SECONDS", "talk_changed"]

#: How long :func:`talk_changed` waits on a run that lives in another runtime
#: sharing the store: the pace at which that runtime's changes reach this one
#: (contract §16: within 1 s).
STORED_RUN_RECHECK_SECONDS: Final = 1.0


async def talk_changed(parent: Parent, run_id: str) -> None:
    """Wait until run *run_id* opens or closes a question, or ends.

    Read the run (``parent.status``) right before calling: nothing can change
    between that read and the start of this wait (no checkpoint lies between
    them), so a change is never missed. Returns at once for a run that has
    ended; after :data:`STORED_RUN_RECHECK_SECONDS` for a run this runtime
    knows only from a shared store (read it again then). A progress report
    does not end the wait.

    Args:
        parent: the parent whose owner the run belongs to.
        run_id: the run.

    Raises:
        InvalidArgumentsError: *parent* is not a :class:`Parent`, or *run_id*
            is not a string.
        UnknownRunError, ExpiredRunError, RuntimeClosedError: as for
            :meth:`Parent.status`.
    """
    if not is_a(parent, Parent):
        raise InvalidArgumentsError(
            f"parent must be a trio_delegate.Parent, got {describe(parent)}"
        )
    parent._host.check_usable()
    run = parent._registry.lookup(run_id, parent._owner)
    if isinstance(run, StoredRun):
        if run.status.is_terminal:
            await trio.lowlevel.checkpoint()
        else:
            await trio.sleep(STORED_RUN_RECHECK_SECONDS)
        return
    if run.ended_at is not None:
        await trio.lowlevel.checkpoint()
        return
    talk = talk_of(run)
    wake = trio.Event()
    talk.waiters.add(wake)
    try:
        await wake.wait()
    finally:
        talk.waiters.discard(wake)
