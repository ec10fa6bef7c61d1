"""The runtime: one Trio nursery that owns every top-level run (contract §1, §8)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, final

import attrs
import trio

from .._checks import MAX_ITEMS, builtin, describe, is_a, read_items
from .._config import Config
from .._construction import NoPublicConstructor
from .._errors import (
    InvalidArgumentsError,
    RuntimeClosedError,
    UnknownSubagentError,
)
from .._status import RunStatus
from .._stores._protocol import ResultStore, RunRecord
from .._subagent import Subagent
from .._usage import Budget, Usage, check_budget
from ._adoption import adopted
from ._groups import open_transparent_nursery
from ._ids import new_runtime_id
from ._meter import usage_of
from ._parent import Parent, open_parent_host
from ._persistence import Persistence, WriteStats
from ._registry import Registry, check_owner
from ._remote import apply_requests
from ._run import CancelReason
from ._trio_run import RunGuard, require_trio

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from ._run import Run
    from ._surfaces import Surfaces

__all__ = [
    "Internals",
    "Runtime",
    "UnstoppedRun",
    "internals",
    "open_runtime",
    "unstopped_runs",
]


@final
class Runtime(metaclass=NoPublicConstructor):
    """Owns every run started through it; get one from :func:`open_runtime`.

    Leaving ``async with open_runtime(...)`` cancels and joins every run.
    """

    _made_by: ClassVar[str] = (
        "trio_delegate.open_runtime() (async with trio_delegate.open_runtime(subagents) as runtime)"
    )

    __slots__ = ("__weakref__", "_nursery", "_registry", "_subagents")

    def __init__(
        self,
        subagents: Mapping[str, Subagent],
        config: Config,
        persistence: Persistence | None,
        surfaces: Surfaces,
    ) -> None:
        self._subagents = MappingProxyType(dict(subagents))
        # Everything the runtime's parents share; they reach it through this.
        self._registry = Registry(self._subagents, config, persistence, surfaces)
        self._nursery: trio.Nursery | None = None

    def __repr__(self) -> str:
        state = "closed" if self._registry.closed else "open"
        return f"<trio_delegate.Runtime {state} subagents={list(self._subagents)}>"

    @property
    def config(self) -> Config:
        """The runtime's limits and policy."""
        return self._registry.config

    @property
    def subagents(self) -> Mapping[str, Subagent]:
        """The registered subagents by name (read-only)."""
        return self._subagents

    @property
    def store(self) -> ResultStore | None:
        """The durable store runs are recorded in, if any."""
        persistence = self._registry.persistence
        return persistence.store if persistence is not None else None

    @property
    def live_runs(self) -> int:
        """How many runs are pending or running in the whole runtime."""
        return self._registry.live_count

    @property
    def usage(self) -> Usage:
        """What every run of the runtime spent (contract §20); readable after close."""
        return usage_of(self._registry.meter.spent)

    def open_parent(
        self,
        owner: str = "root",
        *,
        subagents: Iterable[str] | None = None,
        budget: Budget | None = None,
    ) -> AbstractAsyncContextManager[Parent]:
        """Open a top-level parent for one conversation or session.

        Args:
            owner: the parent's id, unique among the runtime's open parents.
            subagents: the names of its direct children; ``None`` for every
                registered subagent.
            budget: the most all of its runs may spend together (contract
                §20), or ``None`` for no limit.

        Leaving the block normally is a claim of completion: live runs are
        cancelled and joined, then ``UnresolvedDelegationError`` is raised if
        any delegated work is unresolved (fail-closed). Leaving it with an
        exception cancels and joins, and lets the exception through unmasked.

        Raises:
            InvalidArgumentsError: a malformed owner or budget, or an owner that
                is open already.
            UnknownSubagentError: *subagents* names an unregistered subagent.
            RuntimeClosedError: the runtime is closed.
        """
        return self._parent_block(owner, subagents, budget)

    @asynccontextmanager
    async def _parent_block(
        self, owner: str, subagents: Iterable[str] | None, budget: Budget | None
    ) -> AsyncIterator[Parent]:
        await trio.lowlevel.checkpoint()
        self._check_open()
        owner = check_owner(owner)
        budget = check_budget("budget", budget)
        children = self._children_for(subagents)
        registry = self._registry
        if owner in registry.parents:
            raise InvalidArgumentsError(
                f"a parent with owner {owner!r} is already open in this runtime; owners are "
                "unique among open parents: close it first or choose another owner"
            )
        assert self._nursery is not None
        host = open_parent_host(registry, owner, children, 0, self._nursery, budget=budget)
        try:
            yield host.parent
        except BaseException:
            await host.aclose()
            raise
        await host.aclose()
        host.raise_if_unresolved()

    def _children_for(self, names: Iterable[str] | None) -> dict[str, Subagent]:
        if names is None:
            return dict(self._subagents)
        if is_a(names, str):
            text = describe(builtin(names))
            raise InvalidArgumentsError(
                f"subagents must be a sequence of names, got the string {text}; write [{text}]"
            )
        children: dict[str, Subagent] = {}
        for index, name in enumerate(
            read_items("subagents", names, "a sequence of names or None", MAX_ITEMS)
        ):
            if not is_a(name, str):
                raise InvalidArgumentsError(
                    f"subagents[{index}] must be a subagent's name (a string), got {describe(name)}"
                )
            name = builtin(name)
            subagent = self._subagents.get(name)
            if subagent is None:
                allowed = tuple(self._subagents)
                raise UnknownSubagentError(
                    f"subagents names {describe(name)}, which is not registered in this "
                    f"runtime; registered: {', '.join(allowed) or '(none)'}",
                    subagent=name,
                    allowed=allowed,
                )
            if name in children:
                raise InvalidArgumentsError(f"subagents names {name!r} twice; list it once")
            children[name] = subagent
        return children

    def _check_open(self) -> None:
        if self._registry.closed:
            raise RuntimeClosedError(
                "the runtime is closed: its runs were cancelled and nothing more can be done "
                "through it; open a new runtime"
            )

    def _close_now(self) -> None:
        """Refuse every further call and stop every run.

        Nested runs stop with the run that contains them; the runs that are
        running get their grace to stop in (contract §18).
        """
        registry = self._registry
        registry.closed = True
        now = registry.closed_at = registry.now()
        for host in list(registry.parents.values()):
            if host.depth == 0:
                host.cancel_pending(CancelReason.RUNTIME_CLOSED)
        grace = registry.grace
        for run in registry.runs.values():
            if run.state.live:
                grace.delivered(run, now)
        grace.closing()
        # Running runs are cancelled all at once by cancelling the nursery that
        # holds them; Run.interrupted reads closed_at as their request time.
        assert self._nursery is not None
        self._nursery.cancel_scope.cancel()


@final
class _StoreWatch:
    """What the store watcher reports to a runtime (the ``WatchHost`` of ``_watcher``).

    Kept apart from :class:`Runtime` so that the public object shows only the
    contract's names (§2).
    """

    __slots__ = ("_registry",)

    def __init__(self, registry: Registry) -> None:
        self._registry = registry

    def own_record(self, record: RunRecord) -> None:
        """Another runtime flagged one of this runtime's runs, or recorded it as ended."""
        registry = self._registry
        run = registry.runs.get(record.run_id)
        if run is None:
            return
        now = registry.now()
        if run.is_live:
            if record.status.is_terminal:
                # Written off elsewhere (interrupted): it must not go on here,
                # and it ends as the store says (contract §16: the first
                # terminal record stored wins, everywhere).
                self._adopt(run, record)
            elif record.cancel_requested:
                run.request_cancel(now, CancelReason.REQUEST)
            elif record.answer_requests:
                apply_requests(run, record)  # answers left by another runtime (§19)
        if record.observed and record.status is RunStatus.COMPLETED:
            run.host.run_observed_elsewhere(run)

    def _adopt(self, run: Run, record: RunRecord) -> None:
        """End live *run* with the terminal *record* another runtime stored for it."""
        registry = self._registry
        scope = run.scope
        try:
            outcome = adopted(record, registry.config.max_nesting_depth)
        except Exception:  # a tampered store: stop the run, hand nothing out
            run.request_cancel(registry.now(), CancelReason.TAKEN_OVER)
            return
        if scope is not None:
            scope.cancel()  # its runner stops; whatever it returns is dropped
        run.decide(outcome)

    def lease_lost(self, expired: bool = False) -> None:
        """The shared store stayed unreachable: stop every live run before the lease ends.

        Args:
            expired: the lease has run out already (the process was stopped
                or cut off for longer): the runs may have been written off
                elsewhere, so each ends as its stored record says once its
                own ending is written.
        """
        registry = self._registry
        now = registry.now()
        reason = CancelReason.LEASE_EXPIRED if expired else CancelReason.LEASE_LOST
        for run in [run for run in registry.runs.values() if run.is_live]:
            run.request_cancel(now, reason)


@final
@attrs.frozen
class Internals:
    """What a test may check of a runtime beyond the contract: a snapshot.

    Attributes:
        observed: whether an observer (OpenTelemetry) follows the runtime's
            runs; without one a run pays nothing for observation.
        in_memory: the ids of the runs the runtime holds in memory: live
            ones, and ended ones that retention keeps.
        write_stats: how its store's writer has batched its commits so far
            (a copy; ``None`` without a store).
    """

    observed: bool
    in_memory: frozenset[str]
    write_stats: WriteStats | None


def internals(runtime: Runtime) -> Internals:
    """A snapshot of *runtime*'s :class:`Internals` (``trio_delegate.testing.internals``)."""
    registry = runtime._registry
    persistence = registry.persistence
    return Internals(
        observed=registry.events is not None,
        in_memory=frozenset(registry.runs),
        write_stats=attrs.evolve(persistence.writer.stats) if persistence is not None else None,
    )


@final
@attrs.frozen
class UnstoppedRun:
    """A run that holds its runtime open while the runtime closes (contract §18).

    Attributes:
        run_id: the run's id.
        subagent: its subagent's name.
        status: its status: ``pending`` or ``running`` while it is live; once
            it was decided without its runner, the status it was decided as.
        decided_seconds_ago: seconds on the Trio clock since the run was
            decided without its runner, which has not returned; ``None`` for
            a live run.
    """

    run_id: str
    subagent: str
    status: RunStatus
    decided_seconds_ago: float | None


def unstopped_runs(runtime: Runtime) -> tuple[UnstoppedRun, ...]:
    """The runs whose tasks still hold *runtime*'s nursery open (contract §18).

    First the runs decided without their runners (their grace ran out), which
    have not returned, then the runs still live. Made for a process that must
    say, before it gives up on a closing runtime, which runs did not stop: it
    takes no lock and may be called from another thread while the Trio run
    is held up by a runner (an answer torn by a run changing meanwhile names
    a run once, in one of its states).

    Raises:
        InvalidArgumentsError: *runtime* is not a :class:`Runtime`.
    """
    if not is_a(runtime, Runtime):
        raise InvalidArgumentsError(
            f"runtime must be a trio_delegate.Runtime, got {describe(runtime)}"
        )
    registry = runtime._registry
    decided = [
        UnstoppedRun(run_id, subagent, status, seconds)
        for run_id, subagent, status, seconds in registry.grace.abandoned()
    ]
    live = [
        UnstoppedRun(run.run_id, run.subagent.name, run.status, None)
        for run in list(registry.runs.values())
        if run.is_live
    ]
    return (*decided, *live)


def _is_store(value: Any) -> bool:
    """Whether *value* has the methods of a ResultStore.

    The protocol check looks its methods up on *value*: an object whose
    attribute lookup raises is no store either.
    """
    try:
        return isinstance(value, ResultStore)
    except Exception:
        return False


def _check_subagents(subagents: Any) -> dict[str, Subagent]:
    if is_a(subagents, (Subagent, str, Mapping)) or not is_a(subagents, (Iterable,)):
        raise InvalidArgumentsError(
            f"subagents must be a sequence of trio_delegate.Subagent, got {describe(subagents)}"
        )
    registry: dict[str, Subagent] = {}
    for index, subagent in enumerate(
        read_items("subagents", subagents, "a sequence of trio_delegate.Subagent", MAX_ITEMS)
    ):
        if not is_a(subagent, Subagent):
            raise InvalidArgumentsError(
                f"subagents[{index}] must be a trio_delegate.Subagent, got {describe(subagent)}"
            )
        if subagent.name in registry:
            raise InvalidArgumentsError(
                f"subagents[{index}] reuses the name {subagent.name!r}; names must be unique"
            )
        registry[subagent.name] = subagent
    for subagent in registry.values():
        for child in subagent.children:
            if child not in registry:
                raise InvalidArgumentsError(
                    f"subagent {subagent.name!r} lists child {child!r}, which is not "
                    f"registered; registered: {', '.join(registry)}"
                )
    return registry


@asynccontextmanager
async def open_runtime(
    subagents: Iterable[Subagent],
    *,
    config: Config | None = None,
    store: ResultStore | None = None,
    surfaces: Surfaces,
) -> AsyncIterator[Runtime]:
    """What ``trio_delegate.open_runtime`` opens (its docstring says the rest).

    Args:
        subagents, config, store: as ``trio_delegate.open_runtime`` takes them.
        surfaces: what makes the runtime's observer and its parents' tools;
            the package gives its own (``trio_delegate._surfaces``).

    Raises:
        NotInTrioError, InvalidArgumentsError, StoreError: as
            ``trio_delegate.open_runtime`` raises them.
    """
    require_trio("open_runtime")
    registry = _check_subagents(subagents)
    if config is None:
        config = Config()
    elif not is_a(config, Config):
        raise InvalidArgumentsError(
            f"config must be a trio_delegate.Config, got {describe(config)}"
        )
    if store is not None and not _is_store(store):
        raise InvalidArgumentsError(
            "store must be a trio_delegate.MemoryStore, SQLiteStore, PostgresStore or "
            "another ResultStore (with the protocol's methods and capability attributes), "
            f"got {describe(store)}"
        )
    persistence = Persistence(store, new_runtime_id(), config) if store is not None else None
    runtime = Runtime._create(registry, config, persistence, surfaces)
    guard = RunGuard()
    guard.start()
    try:
        async with _open_runtime_block(runtime, persistence) as opened:
            yield opened
    finally:
        guard.close()


@asynccontextmanager
async def _open_runtime_block(
    runtime: Runtime, persistence: Persistence | None
) -> AsyncIterator[Runtime]:
    """The runtime's nursery, and its store's writer and watcher when it has one."""
    if persistence is None:
        async with _owning_nursery(runtime):
            yield runtime
        return
    await persistence.attach()
    try:
        async with open_transparent_nursery() as system:
            await system.start(persistence.writer.run)
            await system.start(
                persistence.watcher.run, _StoreWatch(runtime._registry), persistence.stored.seen
            )
            try:
                async with _owning_nursery(runtime):
                    yield runtime
            finally:
                # Every run has settled: the writer commits what is queued and
                # ends (it is shielded); the watcher has nothing left to watch.
                persistence.writer.close()
                system.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await persistence.detach()


@asynccontextmanager
async def _owning_nursery(runtime: Runtime) -> AsyncIterator[None]:
    """The nursery that holds the runtime's top-level runs."""
    async with open_transparent_nursery() as nursery:
        runtime._nursery = nursery
        nursery.start_soon(runtime._registry.grace.watch, name="trio_delegate grace")
        try:
            yield
        finally:
            runtime._close_now()
