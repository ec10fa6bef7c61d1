"""Stores for tests: ids, records, and handles of one store as separate processes hold them."""

from __future__ import annotations

import secrets
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import trio

import trio_delegate as td

KINDS = ("memory", "sqlite", "postgres")


def runtime_id() -> str:
    """A fresh runtime id of the shape open_runtime makes."""
    return "rt_" + secrets.token_hex(16)


def run_id() -> str:
    """A fresh run id of the shape a runtime makes."""
    return "run_" + secrets.token_hex(16)


def record(
    runtime: str,
    status: td.RunStatus = td.RunStatus.PENDING,
    *,
    run: str | None = None,
    owner: str = "owner",
    task: str = "a task",
    **fields: Any,
) -> td.RunRecord:
    """A record as a runtime would write it."""
    terminal = status.is_terminal
    return td.RunRecord(
        run_id=run or run_id(),
        runtime_id=runtime,
        owner=owner,
        subagent="worker",
        task=task,
        task_summary=task[:200],
        status=status,
        admitted_at="2030-01-01T00:00:00.000+00:00",
        ended_at="2030-01-01T00:00:01.000+00:00" if terminal else None,
        **fields,
    )


class StoreKit:
    """Handles of one store, each what one process would hold; all closed at the end.

    Args:
        kind: ``memory``, ``sqlite`` or ``postgres``.
        folder: where the SQLite file lives.
        dsn: the PostgreSQL server.
        schema: the PostgreSQL schema of this store (one per test).
    """

    def __init__(self, kind: str, folder: Path, dsn: str = "", schema: str = "") -> None:
        self.kind = kind
        self.path = folder / "runs.db"
        self.dsn = dsn
        self.schema = schema
        self._memory = td.MemoryStore(poll_interval=0.05)
        self._handles: list[Any] = []

    def handle(self, **options: Any) -> td.ResultStore:
        """A new handle on the store (the memory store has only one)."""
        if self.kind == "memory":
            return self._memory
        settings: dict[str, Any] = {"poll_interval": 0.05, **options}
        store: td.SQLiteStore | td.PostgresStore
        if self.kind == "sqlite":
            store = td.SQLiteStore(self.path, **settings)
        else:
            store = td.PostgresStore(self.dsn, schema=self.schema, **settings)
        self._handles.append(store)
        return store

    def child_args(self) -> list[str]:
        """How a child process names this store (see store_child.py)."""
        if self.kind == "sqlite":
            return [str(self.path)]
        return ["--schema", self.schema, self.dsn]

    async def aclose(self) -> None:
        for store in self._handles:
            await store.aclose()
        self._handles.clear()


ROOT = Path(__file__).resolve().parent.parent


async def spawn_child(*args: str) -> trio.Process:
    """``python -m tests.store_child ARGS`` with its stdout piped to us."""
    return await trio.lowlevel.open_process(
        [sys.executable, "-m", "tests.store_child", *args], stdout=subprocess.PIPE, cwd=ROOT
    )


async def read_line(process: trio.Process, timeout: float = 30) -> str:
    """One line of *process*'s stdout (bounded in time)."""
    assert process.stdout is not None
    data = b""
    with trio.fail_after(timeout):
        while not data.endswith(b"\n"):
            chunk = await process.stdout.receive_some(1)
            if not chunk:
                raise AssertionError(f"the child exited early: {data!r}")
            data += chunk
    return data.decode().strip()


class WrappedStore:
    """A store (a MemoryStore by default) behind a test's own hooks: subclasses
    override what they meddle with.

    It declares no capability: records reach it as plain JSON data, and a
    runtime polls it and reads back every change.
    """

    splices_json = False
    in_process = False
    ignores_writes = False

    def __init__(self, inner: td.ResultStore | None = None) -> None:
        self.inner = inner if inner is not None else td.MemoryStore()
        self.poll_interval = self.inner.poll_interval
        self.lease_seconds = self.inner.lease_seconds

    async def attach(self, runtime_id: str) -> td.StoreSnapshot:
        return await self.inner.attach(runtime_id)

    async def detach(self, runtime_id: str) -> None:
        await self.inner.detach(runtime_id)

    async def write(self, records: Sequence[td.RunRecord]) -> Sequence[str] | None:
        return await self.inner.write(records)

    async def get(self, run_id: str) -> td.RunRecord | None:
        return await self.inner.get(run_id)

    async def list_runs(
        self, *, status: td.RunStatus | None = None, owner: str | None = None, limit: int = 100
    ) -> list[td.RunRecord]:
        return await self.inner.list_runs(status=status, owner=owner, limit=limit)

    async def sweep(self, runtime_id: str) -> tuple[str, ...]:
        return await self.inner.sweep(runtime_id)

    async def changes(
        self, cursor: int | None, *, ignore_writes_of: str | None = None
    ) -> td.ChangeBatch:
        return await self.inner.changes(cursor, ignore_writes_of=ignore_writes_of)

    async def wait_changes(
        self, cursor: int, timeout: float, *, ignore_writes_of: str | None = None
    ) -> None:
        await self.inner.wait_changes(cursor, timeout, ignore_writes_of=ignore_writes_of)

    async def request_cancel(self, run_id: str) -> td.RunRecord | None:
        return await self.inner.request_cancel(run_id)

    async def mark_observed(self, run_id: str, *, observed_by: str | None = None) -> None:
        if observed_by is None:
            await self.inner.mark_observed(run_id)
        else:
            await self.inner.mark_observed(run_id, observed_by=observed_by)
