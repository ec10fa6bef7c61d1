"""What a surface built on trio_delegate needs beyond the contract's API.

A *surface* serves parents and runtimes to something other than Python code
calling them: the MCP server and the command line are the package's own,
and are built on these names and the public API alone. Most programs need
none of them.

* :func:`abandon`: a surface that serves a foreground call as a background
  start and a bounded wait (so that a call still running at its limit goes
  on in the background) gives the run the verdict of
  :meth:`Parent.delegate` when its caller is cancelled meanwhile.
* :func:`talk_changed`: a surface that pushes a run's state to its client
  (the MCP server's task notifications) waits with it for the run's next
  question, answer or end (contract §19) instead of polling.
* :func:`unstopped_runs` and :class:`UnstoppedRun`: which runs still hold a
  closing runtime open (contract §18), for a process that must name them
  before it gives up on them.
* :func:`answer_in_store`: answer a run's open question (contract §19)
  through a shared store alone, without a runtime, as ``trio-delegate runs
  answer`` does; the runtime that runs the run applies it.
* :func:`worker_context`: the context for a runner that runs a run on
  behalf of a runtime elsewhere (``trio-delegate temporal-worker``), whose
  usage reports are summed for the reply (contract §20).
"""

from __future__ import annotations

from ._core import (
    UnstoppedRun,
    abandon,
    answer_in_store,
    talk_changed,
    unstopped_runs,
    worker_context,
)
from ._public_names import show_under

__all__ = [
    "UnstoppedRun",
    "abandon",
    "answer_in_store",
    "talk_changed",
    "unstopped_runs",
    "worker_context",
]


show_under(__name__, globals(), __all__)
del show_under
