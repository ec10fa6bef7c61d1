"""What a runtime's parents share: one registry of its runs (contract §1, §8).

The :class:`Runtime` is the public face and the :class:`Parent` the
delegating side; both reach the runtime's state only through this object's
fields and methods. A run enters ``runs`` and ``live_count`` in one place,
``Parent._admit``, leaves ``live_count`` for retention in one place,
``ParentHost.run_committed``, and an admission is undone by
:meth:`Registry.withdraw`; a lookup by id, after retention's expiry, is
:meth:`Registry.find`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, final

import trio

from .._checks import is_a
from .._config import Config
from .._errors import StoreError
from .._schema import ResultSchema, SchemaSpec, compile_result_schema
from .._stores._protocol import StoredRun
from .._subagent import result_schema, task_name
from ._grace import Grace
from ._ids import RunIds
from ._retention import Retention

if TYPE_CHECKING:
    from .._subagent import Subagent
    from ._parent import ParentHost
    from ._persistence import Persister
    from ._run import Run
    from ._surfaces import Surfaces

__all__ = ["Registry"]


@final
class Registry:
    """One runtime's runs, limits and services, shared by all of its parents.

    Attributes:
        config: the runtime's config.
        subagents: the registered subagents by name.
        persister: the persistence boundary (``None`` without a store).
        surfaces: what the runtime was given as it opened: the maker of its
            parents' tools.
        events: the observer of runs (``None`` when nothing observes them),
            fixed when the runtime opens.
        now: the Trio run's clock, read directly.
        runs: every run in memory by id: live ones, and terminal ones that
            retention has not evicted. A parent sees those of its owner.
        live_count: how many runs are pending or running.
        retention: the terminal runs kept, and tombstones of evicted ones.
        grace: the watchdog that decides runs whose runners do not stop
            (contract §18).
        timeouts: each subagent's child deadline in seconds (or ``None``).
        schemas_of: each subagent's compiled ``final_schema`` (or ``None``).
        task_names: the Trio task name of each subagent's runs.
        parents: the open parents by owner, nested ones included.
        closed, closed_at: whether (and when, on the Trio clock) the runtime
            began to close.
    """

    __slots__ = (
        "closed",
        "closed_at",
        "config",
        "events",
        "grace",
        "live_count",
        "now",
        "parents",
        "persister",
        "retention",
        "run_ids",
        "runs",
        "schemas",
        "schemas_of",
        "subagents",
        "surfaces",
        "task_names",
        "timeouts",
    )

    def __init__(
        self,
        subagents: Mapping[str, Subagent],
        config: Config,
        persister: Persister | None,
        surfaces: Surfaces,
    ) -> None:
        self.config = config
        self.subagents = subagents
        self.persister = persister
        self.surfaces = surfaces
        self.events = surfaces.observer()
        if persister is not None:
            persister.events = self.events
        # The Trio run's clock, read directly: trio.current_time() finds the
        # same clock through the run context on every call, several per run.
        self.now = trio.lowlevel.current_clock().current_time
        self.run_ids = RunIds()
        self.timeouts = {
            name: subagent.resolve_timeout(config.subagent_timeout_seconds)
            for name, subagent in subagents.items()
        }
        self.schemas_of = {name: result_schema(sub) for name, sub in subagents.items()}
        self.task_names = {name: task_name(sub) for name, sub in subagents.items()}
        self.closed = False
        self.closed_at: float | None = None
        self.parents: dict[str, ParentHost] = {}
        self.live_count = 0
        self.runs: dict[str, Run] = {}
        self.retention = Retention(
            config.retention_seconds, config.retention_max_runs, self._evicted
        )
        # Decides runs whose runners do not stop (contract §18).
        self.grace = Grace(config.cancel_grace_seconds, self.now)
        # Checked schemas of host types passed per call (types are few and
        # long-lived; mappings from a model are checked on every call).
        self.schemas: dict[type, ResultSchema] = {}

    # -- runs ------------------------------------------------------------------

    def withdraw(self, run: Run) -> None:
        """Undo live *run*'s admission (``Parent._admit``): its caller gets an error and
        no run id."""
        del self.runs[run.run_id]
        self.live_count -= 1
        events = self.events
        if events is not None:
            events.withdrawn(run)

    def find(self, run_id: str, owner: str) -> Run | StoredRun | None:
        """The run *run_id* of *owner*, in memory or in the store; ``None`` if neither.

        Retention expires what it must first: whether a run is visible depends
        only on its owner and on retention (contract §8).
        """
        self.retention.expire(self.now())
        run = self.runs.get(run_id)
        if run is not None and run.owner == owner:
            return run
        persister = self.persister
        if persister is not None:
            return persister.find(run_id, owner)
        return None

    def expired_for(self, run_id: str, owner: str) -> bool:
        """Whether retention evicted *run_id*, a run of *owner* (its tombstone says so)."""
        return self.retention.evicted_owner(run_id) == owner

    def _evicted(self, run: Run) -> None:
        """Retention evicted *run*: it is answered from the store, if anywhere."""
        del self.runs[run.run_id]
        persister = self.persister
        outcome = run.outcome
        if persister is not None and not (
            outcome is not None and isinstance(outcome.error, StoreError)
        ):
            persister.remember(run)
        run.host.run_evicted(run)

    # -- parents -----------------------------------------------------------------

    def register(self, host: ParentHost) -> None:
        self.parents[host.parent.owner] = host

    def unregister(self, host: ParentHost) -> None:
        """Free *host*'s owner: called once every run of its parent has ended."""
        owner = host.parent.owner
        if self.parents.get(owner) is host:
            del self.parents[owner]

    def compile_schema(self, spec: SchemaSpec) -> ResultSchema:
        nesting = self.config.max_nesting_depth
        if is_a(spec, type):
            compiled = self.schemas.get(spec)
            if compiled is None:
                compiled = self.schemas[spec] = compile_result_schema(spec, max_nesting=nesting)
            return compiled
        return compile_result_schema(spec, max_nesting=nesting)
