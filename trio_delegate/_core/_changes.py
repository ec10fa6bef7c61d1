"""Being told when a run's questions or status change (contract §19), for a surface.

A surface that pushes a run's state to its client (the MCP server's
``notifications/tasks``) must hear each question the run opens or closes and
its end, without polling. The run's :class:`Talk` already wakes the waits
that wait for these (``Talk.waiters``); :func:`run_talk_changed` is one such
wait, which ``lowlevel.talk_changed`` (``_parent``) offers on the public
API's terms (a parent and a run id).

Progress reports do not wake it: a runner may report in a hot loop, and a
surface reads the latest report when it reads the run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import trio

from .._stores._protocol import StoredRun
from ._talk import talk_of

if TYPE_CHECKING:
    from ._run import Run

__all__ = ["STORED_RUN_RECHECK_SECONDS", "run_talk_changed"]

#: How long :func:`talk_changed` waits on a run that lives in another runtime
#: sharing the store: the pace at which that runtime's changes reach this one
#: (contract §16: within 1 s).
STORED_RUN_RECHECK_SECONDS: Final = 1.0


async def run_talk_changed(run: Run | StoredRun) -> None:
    """Wait until *run* opens or closes a question, or ends (see ``talk_changed``).

    Returns at once for a run that has ended; after
    :data:`STORED_RUN_RECHECK_SECONDS` for a run this runtime knows only from a
    shared store.
    """
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
