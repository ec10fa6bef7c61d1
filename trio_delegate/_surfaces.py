"""The package's surfaces, given to every runtime it opens: :func:`open_runtime`.

The core imports no surface (``_core.Surfaces``): the package's
:func:`open_runtime` gives each new runtime the model-facing tools
(``_tools``) and OpenTelemetry's observer of runs (``_observe``), when an
application set it up.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractAsyncContextManager
from typing import Final, final

from . import _core
from ._config import Config
from ._observe import telemetry_events
from ._stores._protocol import ResultStore
from ._subagent import Subagent
from ._tools import DelegationTools

__all__ = ["PACKAGE_SURFACES", "open_runtime"]


@final
class _PackageSurfaces:
    """The package's :class:`_core.Surfaces`: its tools and its observer."""

    __slots__ = ()

    def observer(self) -> _core.RunEvents | None:
        return telemetry_events()

    def tools(self, binding: _core.ToolsBinding) -> DelegationTools:
        return DelegationTools._create(binding)


#: What every runtime the package opens is given (it holds no state).
PACKAGE_SURFACES: Final[_core.Surfaces] = _PackageSurfaces()


def open_runtime(
    subagents: Iterable[Subagent],
    *,
    config: Config | None = None,
    store: ResultStore | None = None,
) -> AbstractAsyncContextManager[_core.Runtime]:
    """Open a runtime owning every run started through it.

    Args:
        subagents: the subagent definitions; names must be unique and every
            ``children`` entry must name one of them.
        config: limits and policy; ``Config()`` when omitted.
        store: a durable store (:class:`MemoryStore`, :class:`SQLiteStore`,
            :class:`PostgresStore`, or another :class:`ResultStore`) for run
            records, results and continuations; ``None`` keeps nothing beyond
            retention.

    Leaving the block cancels and joins every run (and, with a store, commits
    their final records). An exception raised in the body comes out as
    itself, never wrapped in an ``ExceptionGroup``.

    Raises:
        NotInTrioError: called outside a Trio run (from ``asyncio.run``, say).
        InvalidArgumentsError: malformed subagents, config or store.
        StoreError: the store could not be opened.
    """
    return _core.open_runtime(subagents, config=config, store=store, surfaces=PACKAGE_SURFACES)
