"""What a parent checks before it admits a run: its child's name, the run it replaces.

Both checks run only off the hot path: a name that is not a plain key of
the parent's children, and a ``replaces`` argument.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from .._checks import builtin, describe, is_a
from .._errors import InvalidArgumentsError, UnknownSubagentError
from .._status import RunStatus
from ._fail_closed import Evicted

if TYPE_CHECKING:
    from .._subagent import Subagent
    from ._parent_host import ParentHost
    from ._run import Run

__all__ = ["child_named", "replaceable"]


def child_named(children: Mapping[str, Subagent], name: object) -> Subagent:
    """The child *name* of a parent with *children*; called once a plain lookup failed.

    Raises:
        InvalidArgumentsError: *name* is not a string.
        UnknownSubagentError: no child has that name (the error names those allowed).
    """
    allowed = tuple(children)
    name = builtin(name)
    if not is_a(name, str):
        raise InvalidArgumentsError(
            f"name must be a subagent's name (a string), got {describe(name)}; "
            f"choose one of: {', '.join(allowed) or '(none)'}"
        )
    subagent = children.get(name)
    if subagent is None:
        raise UnknownSubagentError(
            f"{describe(name)} is not a subagent this parent can delegate to; "
            f"choose one of: {', '.join(allowed) or '(none)'}",
            subagent=name,
            allowed=allowed,
        )
    return subagent


def replaceable(host: ParentHost, replaces: object) -> str:
    """*replaces* as a plain ``str``, if it names a run the parent of *host* may replace.

    Raises:
        InvalidArgumentsError: it names no run of this parent, or one that is
            live or completed (and not evicted unobserved).
    """
    replaces = builtin(replaces)
    if not is_a(replaces, str):
        raise InvalidArgumentsError(
            f"replaces must be the run_id of a failed, cancelled or timed-out run (or of "
            "a completed one that expired before it was observed), "
            f"got {describe(replaces)}"
        )
    record: Run | Evicted | None = host.ledger.get(replaces)
    if record is None:
        found = host.registry.runs.get(replaces)
        if found is not None and found.host is host:
            record = found
    if record is None:
        raise InvalidArgumentsError(
            f"replaces={describe(replaces)} is not a run this parent started (or it "
            "expired); pass the exact run_id of the failed, cancelled or timed-out run"
        )
    if record.status is RunStatus.COMPLETED and not isinstance(record, Evicted):
        # A completed run that expired before anyone observed it is the
        # exception: its result is gone from memory, and a replacement is
        # the only way left to resolve it (contract §7, fail-closed).
        raise InvalidArgumentsError(
            f"replaces={replaces!r} names a completed run, which needs no replacement; "
            "wait for it to read its result"
        )
    if not record.status.is_terminal:
        raise InvalidArgumentsError(
            f"replaces={replaces!r} names a run that is still {record.status.value}; "
            "wait for it, or cancel it first"
        )
    return replaces
