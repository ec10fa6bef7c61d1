"""What a runtime is given by the layer that opens it: the surfaces built on the core.

The core imports no surface (tests/test_layering.py holds it to that): the
model-facing tools and the observer of runs are the package's, and the
package's ``open_runtime`` hands each new runtime a :class:`Surfaces` that
makes them. A runtime keeps what it was given for its whole life, so two
runtimes of one process never share a surface by accident, and nothing is
registered at import.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol, final

import attrs

if TYPE_CHECKING:
    from .._config import Config
    from .._tools import DelegationTools
    from ._events import RunEvents
    from ._listing import RunListing
    from ._parent import Parent

__all__ = ["Surfaces", "ToolsBinding"]


@final
@attrs.frozen
class ToolsBinding:
    """What a parent gives the model-facing tools bound to it (``Parent.tools``).

    Attributes:
        parent: the parent the tools delegate through (its public API).
        children: each direct child's description, by name, in registration order.
        config: the config of the parent's runtime.
        events: the runtime's observer of runs (``None`` when nothing observes them).
        check_usable: raises ``RuntimeClosedError`` once the parent or its runtime
            is closed: the tools check it before each use (contract §8).
        listing: at most *limit* of the parent's runs, live ones first, with
            their task summaries (``list_subagent_runs``, contract §17).
        asking: the direct children that may ask questions (``asks=True``, contract §19).
    """

    parent: Parent
    children: Mapping[str, str]
    config: Config
    events: RunEvents | None
    check_usable: Callable[[], None]
    listing: Callable[[int], RunListing]
    asking: frozenset[str] = frozenset()


class Surfaces(Protocol):
    """The surfaces a runtime uses and the core does not import."""

    def observer(self) -> RunEvents | None:
        """The observer of a new runtime's runs, or ``None`` when nothing observes them.

        Asked once, as the runtime opens, so an observer set up before that
        (after the package was imported) is found.
        """

    def tools(self, binding: ToolsBinding) -> DelegationTools:
        """The model-facing delegation tools bound to *binding*'s parent (contract §10)."""
