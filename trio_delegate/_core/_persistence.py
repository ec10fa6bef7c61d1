"""A runtime's side of durability (contract §12, §15, §16): its store and who uses it.

Three parts, each in its own module, talk to the store:

* the :class:`Writer` (``_writer``) commits this runtime's records in
  batches, and answers each run whose record it waits for;
* the :class:`Watcher` (``_watcher``) follows what other runtimes sharing
  the store do, and keeps this runtime's lease (``_lease``);
* the :class:`StoredRuns` (``_stored``) answer for the runs known only from
  the store: lookups, store-backed waits, results and conversations.

:class:`Persistence` holds the three for one runtime, attaches it to the
store and detaches it.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, final

import trio

from ._commit import WriteStats
from ._lease import Lease
from ._records import Records, store_error
from ._stored import StoredRuns
from ._watcher import Watcher, WatchHost
from ._writer import RUNNING_RECORD_DELAY, Writer

if TYPE_CHECKING:
    from .._config import Config
    from .._stores._protocol import ResultStore

__all__ = [
    "RUNNING_RECORD_DELAY",
    "Persistence",
    "WatchHost",
    "WriteStats",
]


@final
class Persistence:
    """One runtime's store, with its writer, its watcher and its stored runs.

    Attributes:
        store: the store.
        runtime_id: this runtime's id in it.
        writer: commits this runtime's records.
        watcher: follows the other runtimes sharing the store.
        stored: the runs known only from the store.
    """

    __slots__ = ("_lease", "runtime_id", "store", "stored", "watcher", "writer")

    def __init__(self, store: ResultStore, runtime_id: str, config: Config) -> None:
        self.store = store
        self.runtime_id = runtime_id
        lease = self._lease = Lease(store)
        # What the store declares it can do (ResultStore); anything but True
        # is read as False.
        self.writer = Writer(store, Records(runtime_id, store.splices_json is True), lease)
        self.watcher = Watcher(store, runtime_id, lease)
        self.stored = StoredRuns(store, runtime_id, config, self.writer, self.watcher)

    async def attach(self) -> tuple[str, ...]:
        """Attach to the store; returns the ids it marked interrupted.

        Raises:
            StoreError: the store could not be opened.
        """
        try:
            snapshot = await self.store.attach(self.runtime_id)
        except Exception as exc:
            raise store_error(exc, "open") from None
        await self.stored.attached(snapshot.terminal)
        # Attached: the lease is as fresh as it gets (the watcher renews it).
        self._lease.started(trio.current_time())
        return snapshot.interrupted

    async def detach(self) -> None:
        """Detach from the store (shielded by the caller); failures are not raised.

        Every run has been recorded by now; a store that cannot say goodbye
        loses nothing, and the runtime's exit must not be masked by it.
        """
        with contextlib.suppress(Exception):
            await self.store.detach(self.runtime_id)
