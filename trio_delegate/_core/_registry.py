"""What a runtime's parents share: one registry of its runs (contract §1, §8).

The :class:`Runtime` is the public face and the :class:`Parent` the
delegating side; both reach the runtime's state only through this object's
fields and methods. A run enters ``runs`` and ``live_count`` in one place,
``admit``, leaves ``live_count`` for retention in one place,
``ParentHost.run_committed``, and an admission is undone by
:meth:`Registry.withdraw`; a lookup by id, after retention's expiry, is
:meth:`Registry.lookup`.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping
from typing import TYPE_CHECKING, Any, final

import trio

from .._checks import builtin, describe, is_a
from .._config import Config
from .._errors import InvalidArgumentsError, StoreError, UnknownRunError
from .._json import CanonicalJson, text_problem
from .._schema import ResultSchema, SchemaSpec, compile_result_schema
from .._stores._protocol import StoredRun
from .._subagent import result_schema, task_name
from ._grace import Grace
from ._ids import RunIds
from ._meter import Meter
from ._retention import Retention, expired_error

if TYPE_CHECKING:
    from .._subagent import Subagent
    from ._parent_host import ParentHost
    from ._persistence import Persistence
    from ._run import Run
    from ._surfaces import Surfaces

__all__ = ["MAX_OWNER_CHARS", "Registry", "check_owner"]


@final
class Registry:
    """One runtime's runs, limits and services, shared by all of its parents.

    Attributes:
        config: the runtime's config.
        subagents: the registered subagents by name.
        persistence: the runtime's store, its writer, watcher and stored runs
            (``None`` without a store).
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
        meter: what every run spent, and the runtime's budget (contract §20).
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
        "meter",
        "now",
        "parents",
        "persistence",
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
        persistence: Persistence | None,
        surfaces: Surfaces,
    ) -> None:
        self.config = config
        self.subagents = subagents
        self.persistence = persistence
        self.surfaces = surfaces
        self.events = surfaces.observer()
        if persistence is not None:
            persistence.writer.events = self.events
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
        self.meter = Meter(
            config.runtime_budget, any(sub.budget is not None for sub in subagents.values())
        )
        # Checked schemas of host types passed per call (types are few and
        # long-lived; mappings from a model are checked on every call).
        self.schemas: dict[type, ResultSchema] = {}

    # -- runs ------------------------------------------------------------------

    def withdraw(self, run: Run) -> None:
        """Undo live *run*'s admission (``admit``): its caller gets an error and
        no run id."""
        del self.runs[run.run_id]
        self.live_count -= 1
        events = self.events
        if events is not None:
            events.withdrawn(run)

    def lookup(self, run_id: str, owner: str) -> Run | StoredRun:
        """The run *run_id* of *owner*, in memory or in the store.

        Retention expires what it must first: whether a run is visible depends
        only on its owner and on retention (contract §8).

        Raises:
            InvalidArgumentsError: *run_id* is not a string.
            ExpiredRunError: retention evicted it (and no store holds it).
            UnknownRunError: it is not a run of *owner*.
        """
        if type(run_id) is not str:
            run_id = builtin(run_id)  # a str subclass is read as the text it holds
            if not is_a(run_id, str):
                raise InvalidArgumentsError(f"run_id must be a string, got {describe(run_id)}")
        if not run_id.isascii() and text_problem(run_id) is not None:
            raise InvalidArgumentsError(
                f"run_id must be valid Unicode text, got {describe(run_id)}; use the exact "
                "run_id that start or delegate returned"
            )
        retention = self.retention
        retention.expire(self.now())
        run = self.runs.get(run_id)
        if run is not None and run.owner == owner:
            return run
        persistence = self.persistence
        if persistence is not None:
            stored = persistence.stored.find(run_id, owner)
            if stored is not None:
                return stored
        if retention.evicted_owner(run_id) == owner:
            raise expired_error(run_id, self.config, stored=persistence is not None)
        # Lookups remember a bounded number of the runs known only from the
        # store: an older one is still there, and a wait reads it.
        stored_hint = (
            "; a run that ended long ago may still be in the store: wait reads it there"
            if persistence is not None
            else ""
        )
        raise UnknownRunError(
            f"no run {describe(run_id)} belongs to parent {owner!r} in this runtime; "
            "use the exact run_id that start or delegate returned (ids of other parents or "
            f"runtimes are not valid here){stored_hint}",
            run_id=run_id if len(run_id) <= 128 else None,
        )

    def runs_of(self, owner: str, hidden: Container[str]) -> list[Run]:
        """The runs of *owner* in memory, live or retained, in admission order
        (``Parent.runs``, contract §17), but those whose ids are *hidden*.

        Retention expires what it must first, as :meth:`lookup` does: a run
        listed is one a lookup finds. It reads every run the runtime holds
        (at most ``max_live_runs + retention_max_runs``) and costs nothing on
        the way in: ``runs`` is in admission order already.
        """
        self.retention.expire(self.now())
        return [
            run for run in self.runs.values() if run.owner == owner and run.run_id not in hidden
        ]

    async def lookup_in_store(
        self, run_id: str, owner: str, unknown: UnknownRunError, check: Callable[[], None]
    ) -> StoredRun:
        """The run *run_id* of *owner* that another runtime sharing the store admitted
        (see ``StoredRuns.admitted_elsewhere``; *check* runs once the store answered).

        Raises:
            UnknownRunError: *unknown*, when there is no store, or it does not hold
                the run for *owner* either.
            StoreError: the store could not be read.
        """
        persistence = self.persistence
        if persistence is None:
            raise unknown
        return await persistence.stored.admitted_elsewhere(run_id, owner, unknown, check)

    async def carried(
        self, run_id: str, owner: str, check: Callable[[], None]
    ) -> tuple[str, CanonicalJson]:
        """The subagent and the conversation a continuation of *run_id* carries on
        (contract §12), from memory or the store (*check* runs once it answered).

        Raises:
            InvalidArgumentsError: the run is still live.
            UnknownRunError, ExpiredRunError, StoreError: as for a lookup.
        """
        try:
            earlier = self.lookup(run_id, owner)
        except UnknownRunError as unknown:
            earlier = await self.lookup_in_store(run_id, owner, unknown, check)
        if isinstance(earlier, StoredRun):
            persistence = self.persistence
            assert persistence is not None
            return await persistence.stored.carried(run_id, check)
        if not earlier.is_terminal:
            raise InvalidArgumentsError(
                f"run {run_id} is still {earlier.status.value}; only a finished run can be "
                "continued: wait for it first"
            )
        # From the canonical JSON the run holds, never decoded here.
        return earlier.subagent.name, earlier.carried()

    def _evicted(self, run: Run) -> None:
        """Retention evicted *run*: it is answered from the store, if anywhere."""
        del self.runs[run.run_id]
        persistence = self.persistence
        outcome = run.outcome
        if persistence is not None and not (
            outcome is not None and isinstance(outcome.error, StoreError)
        ):
            persistence.stored.remember(run)
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


#: The longest top-level owner accepted.
MAX_OWNER_CHARS = 256


def check_owner(owner: Any) -> str:
    """*owner* as a plain ``str``, if it is a valid top-level owner."""
    owner = builtin(owner)
    if (
        not is_a(owner, str)
        or not owner.strip()
        or len(owner) > MAX_OWNER_CHARS
        or not owner.isprintable()
        or text_problem(owner) is not None
    ):
        raise InvalidArgumentsError(
            f"owner must be a non-empty printable string of at most {MAX_OWNER_CHARS} "
            f"characters, got {describe(owner)}"
        )
    if "/" in owner:
        raise InvalidArgumentsError(
            f"owner {describe(owner)} contains '/', which is reserved for the parents of "
            "nested runs ('<owner>/<run_id>'); choose an owner without '/'"
        )
    return owner
