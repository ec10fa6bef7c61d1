"""A parent's runs as the model-facing tools list them (contract §17).

``Parent.runs`` is the host's snapshot: every run of the parent's owner
that is live or retained, in admission order. A model that lost a run id
gets a bounded answer instead (``list_subagent_runs``): live runs first, as
they were admitted, then finished ones, newest first, so a long history
leaves out the runs least likely to be asked about. Neither observes a run
(contract §7).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, final

import attrs

from .._results import RunHandle

if TYPE_CHECKING:
    from ._parent_host import ParentHost

__all__ = ["ListedRun", "RunListing", "list_runs"]


@final
@attrs.frozen
class ListedRun:
    """One run of a listing.

    Attributes:
        handle: its status snapshot, as ``Parent.runs`` gives it.
        task_summary: its task, summarized as in a result envelope (contract §2).
    """

    handle: RunHandle
    task_summary: str


@final
@attrs.frozen
class RunListing:
    """At most *limit* runs of a parent (see :func:`list_runs`).

    Attributes:
        runs: the runs listed: live ones first, in admission order, then
            finished ones, newest admitted first.
        omitted: how many runs of the parent are left out.
    """

    runs: tuple[ListedRun, ...]
    omitted: int


def list_runs(host: ParentHost, limit: int) -> RunListing:
    """At most *limit* of the runs of *host*'s parent, live ones first.

    Only the runs listed are summarized: a task may be long.
    """
    runs = host.listed()
    live = [run for run in runs if not run.status.is_terminal]
    ended = [run for run in reversed(runs) if run.status.is_terminal]
    chosen = (live + ended)[:limit]
    return RunListing(
        runs=tuple(ListedRun(handle=run.handle(), task_summary=run.task_summary) for run in chosen),
        omitted=len(runs) - len(chosen),
    )
