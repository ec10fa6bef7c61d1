"""What a runner receives: the :class:`ChildContext` of its run."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, final

import attrs

if TYPE_CHECKING:
    from ._parent import Parent

__all__ = ["ChildContext"]


@final
@attrs.frozen
class ChildContext:
    """The run a runner is executing.

    Attributes:
        run_id: the run's id.
        subagent: the subagent's name.
        task: the task text (the new message, for a continuation).
        final_schema: the JSON Schema the result must satisfy, or ``None``.
        history: the earlier conversation: ``()`` for an ordinary delegation.
        deadline: the child deadline on the Trio clock, or ``math.inf``.
        parent: a :class:`Parent` for nested delegation when the subagent
            declares ``children``, else ``None``.
    """

    run_id: str
    subagent: str
    task: str
    final_schema: Mapping[str, Any] | None
    history: tuple[Any, ...]
    deadline: float
    parent: Parent | None = attrs.field(default=None, eq=False)
