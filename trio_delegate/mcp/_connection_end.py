"""What an MCP connection leaves behind when it ends, in its client's terms.

A connection's parent closes with the connection: its live runs are
cancelled and joined. Whoever reads ``serve``'s log then wants to know which
runs the client started and never saw through, said as an MCP client sees
them (tools and tasks), not as a Python parent's fail-closed verdict. Runs
the client itself cancelled were seen through: it asked for their end.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import final

import attrs

from .. import DelegationError, Parent, RunStatus, UnresolvedDelegationError, UnresolvedRun

__all__ = ["ClientEnds", "left_behind", "leftovers"]


def _remember(keys: OrderedDict[str, str | None], key: str, value: str | None, limit: int) -> None:
    keys[key] = value
    keys.move_to_end(key)
    while len(keys) > limit:
        keys.popitem(last=False)


@final
@attrs.define(eq=False)
class ClientEnds:
    """The runs a connection's client ended itself, for the connection's ending.

    A client ends a run with ``cancel_subagent``, ``tasks/cancel``, or by
    cancelling the foreground call waiting for it (``notifications/cancelled``).
    A foreground call that ended unanswered without such a notification was
    left: the client went away or stopped waiting.

    Bounded as retention bounds what a parent keeps: past *limit* entries of
    a kind the oldest is forgotten (its run has long left the parent's
    ledger too).

    Args:
        limit: how many entries of each kind to keep, at least 1.
    """

    limit: int
    _cancelled: OrderedDict[str, str | None] = attrs.field(init=False, factory=OrderedDict)
    _requests: OrderedDict[str, str | None] = attrs.field(init=False, factory=OrderedDict)
    _unanswered: OrderedDict[str, str | None] = attrs.field(init=False, factory=OrderedDict)

    def cancelled(self, run_id: str) -> None:
        """The client asked to cancel *run_id* (a tool or a task cancel)."""
        _remember(self._cancelled, run_id, None, self.limit)

    def request_cancelled(self, request_id: object) -> None:
        """The client cancelled its request *request_id* (``notifications/cancelled``)."""
        _remember(self._requests, _key(request_id), None, self.limit)

    def unanswered(self, run_id: str, request_id: object) -> None:
        """The foreground call *request_id* waiting for *run_id* ended unanswered."""
        _remember(self._unanswered, run_id, _key(request_id), self.limit)

    def saw_through(self, run_id: str) -> bool:
        """Whether the client itself ended *run_id*."""
        if run_id in self._cancelled:
            return True
        request = self._unanswered.get(run_id)
        return request is not None and request in self._requests

    def left(self, run_id: str) -> bool:
        """Whether *run_id*'s foreground call ended unanswered, the client gone or not waiting."""
        return run_id in self._unanswered and not self.saw_through(run_id)

    def __len__(self) -> int:
        return len(self._cancelled) + len(self._requests) + len(self._unanswered)


def _key(request_id: object) -> str:
    # 5 and "5" are two requests.
    return f"{type(request_id).__name__}:{request_id}"


def left_behind(parent: Parent, ends: ClientEnds) -> list[UnresolvedRun]:
    """The runs of *parent* its client never saw through, oldest first.

    Read while the parent is still open, so that a run still live reads as
    such rather than as the cancellation its close is about to make. Runs
    the client ended itself are left out. Empty when the runtime does not
    keep the fail-closed verdict (``Config.fail_closed`` off).
    """
    try:
        parent.check_resolved()
    except UnresolvedDelegationError as exc:
        return [entry for entry in exc.unresolved if not ends.saw_through(entry.run_id)]
    except DelegationError:
        # Closed already (the runtime went first): its close said what it cancelled.
        return []
    return []


#: What became of a run the client left behind, by the status it had.
_FATE = {
    RunStatus.PENDING.value: (
        "still waiting for a slot when the connection {ended}, so it {was} cancelled"
    ),
    RunStatus.RUNNING.value: "still running when the connection {ended}, so it {was} cancelled",
    RunStatus.COMPLETED.value: "completed, but the client never read its result",
}


def leftovers(
    who: str,
    entries: list[UnresolvedRun],
    *,
    ends: ClientEnds,
    stored: bool,
    cut_short: bool = False,
) -> tuple[int, str]:
    """The log level and message that say what connection *who* left behind.

    Args:
        who: the connection's owner id.
        entries: the runs it left behind (``left_behind``).
        ends: the runs the client ended itself, or whose foreground call it left.
        stored: whether a durable store keeps the runs' records.
        cut_short: the connection was cut short (a signal) rather than ended
            by its client.

    Returns:
        ``INFO`` and a one-line message when nothing was left behind, else
        ``WARNING`` and a message naming each run and what became of it.
    """
    ended, was = ("was cut short", "is being") if cut_short else ("ended", "was")
    if not entries:
        return logging.INFO, f"connection {who} {ended}"
    lines = []
    for entry in entries:
        fate = _FATE.get(entry.status)
        if ends.left(entry.run_id):
            fate = (
                "its foreground call ended unanswered (the client left or stopped "
                "waiting), so it was cancelled"
            )
        elif fate is None:
            fate = (
                f"ended {entry.status}, and the client neither read that nor started a replacement"
            )
        lines.append(f"  - {entry.run_id} ({entry.subagent}): {fate.format(ended=ended, was=was)}")
    runs = "run" if len(entries) == 1 else "runs"
    message = (
        f"connection {who} {ended} and left {len(entries)} {runs} behind:\n"
        + "\n".join(lines)
        + "\nA client sees a background run through by waiting for it (wait_subagent, or "
        "tasks/get for a task) or cancelling it before it disconnects."
    )
    if stored:
        message += (
            " The store keeps each run's record: 'trio-delegate runs show RUN_ID "
            "--config FILE' (the configuration serve was given) reads it."
        )
    return logging.WARNING, message
