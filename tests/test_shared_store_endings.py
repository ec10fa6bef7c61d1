"""Contract §16 with real processes: what one host admitted or ended, another answers.

Each test runs one "host" as a child process (``tests.store_child``) and the
other here, on one SQLite file or one PostgreSQL schema. The only bounds on
time are hang guards.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

import trio_delegate as td
from trio_delegate._stores._protocol import interrupted

from .stores import WrappedStore, read_line, spawn_child

GUARD_SECONDS = 30
FREEZE_GUARD_SECONDS = 15


class Shared:
    """One store, opened here and named for a child process."""

    def __init__(self, kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
        self.kind = kind
        self.path = tmp_path / "runs.db"
        if kind == "postgres":
            self.schema: str = request.getfixturevalue("pg_schema")
            self.dsn: str = request.getfixturevalue("pg_server").dsn()

    def store(self) -> Any:
        if self.kind == "sqlite":
            return td.SQLiteStore(self.path)
        return td.PostgresStore(self.dsn, schema=self.schema)

    def location(self) -> list[str]:
        if self.kind == "sqlite":
            return [str(self.path)]
        return ["--schema", self.schema, self.dsn]


@pytest.fixture(params=["sqlite", "postgres"])
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> Shared:
    return Shared(request.param, tmp_path, request)


async def _forever(ctx: td.ChildContext) -> str:
    await trio.sleep_forever()
    raise AssertionError("unreachable")  # pragma: no cover


class _Trailing(WrappedStore):
    """A shared store whose changes never reach this host's view: its watcher
    trails every commit elsewhere (as it may, by up to a poll, contract §16)."""

    async def changes(
        self, cursor: int | None, *, ignore_writes_of: str | None = None
    ) -> td.ChangeBatch:
        if cursor is None:
            return await self.inner.changes(cursor)
        await trio.sleep_forever()
        raise AssertionError("unreachable")  # pragma: no cover


async def test_wait_on_an_id_admitted_by_another_host_reads_the_store(shared: Shared) -> None:
    subagents = [td.Subagent("forever", _forever), td.Subagent("echo", _forever)]
    config = td.Config(fail_closed=False)
    with trio.fail_after(GUARD_SECONDS):
        async with (
            td.open_runtime(subagents, store=_Trailing(shared.store()), config=config) as rt,
            rt.open_parent("worker") as parent,
        ):
            child = await spawn_child(*shared.location(), "start")
            try:
                # Printed once its start() returned: the admission is committed,
                # but this host's view has not seen it.
                run_id = await read_line(child)
                for timeout in (0, 0.01):
                    answer = await parent.wait(run_id, timeout=timeout)
                    # (Its running record may still be on its way: admitted is enough.)
                    assert isinstance(answer, td.RunHandle)
                    assert (answer.run_id, answer.subagent) == (run_id, "forever")
                    assert answer.status in (td.RunStatus.PENDING, td.RunStatus.RUNNING)
                with pytest.raises(td.InvalidArgumentsError, match=r"still (pending|running)"):
                    await parent.continue_run(run_id, "more")
                async with rt.open_parent("someone-else") as other:
                    with pytest.raises(td.UnknownRunError):
                        await other.wait(run_id, timeout=0)
                with pytest.raises(td.UnknownRunError):
                    await parent.wait("run_" + "0" * 32, timeout=0)
            finally:
                child.kill()
                with trio.CancelScope(shield=True):
                    await child.wait()


FROZEN_HOST = """
import json, sys
import trio
import trio_delegate as td

dsn, schema = sys.argv[1], sys.argv[2]


async def slow(ctx):
    await trio.sleep(1)
    return "done here"


async def main():
    store = td.PostgresStore(dsn, schema=schema, lease_seconds=1.5)
    config = td.Config(fail_closed=False)
    async with (
        td.open_runtime([td.Subagent("slow", slow)], store=store, config=config) as rt,
        rt.open_parent("fleet") as parent,
    ):
        handle = await parent.start("slow", "work")
        print(handle.run_id, flush=True)
        try:
            result = await parent.wait(handle.run_id)
            answer = {"wait": "completed", "result": result.final_result}
        except td.DelegationError as exc:
            answer = {"wait": type(exc).__name__, "message": str(exc)}
        answer["status"] = parent.status(handle.run_id).status.value
        print(json.dumps(answer), flush=True)


trio.run(main)
"""


async def test_a_host_frozen_past_its_lease_answers_the_stored_ending(
    pg_server: Any, pg_schema: str, tmp_path: Path
) -> None:
    script = tmp_path / "frozen_host.py"
    script.write_text(FROZEN_HOST)
    config = td.Config(fail_closed=False)
    store = td.PostgresStore(pg_server.dsn(), schema=pg_schema)
    with trio.fail_after(2 * GUARD_SECONDS):
        async with (
            td.open_runtime([td.Subagent("slow", _forever)], store=store, config=config) as rt,
            rt.open_parent("fleet") as parent,
        ):
            child = await trio.lowlevel.open_process(
                [sys.executable, str(script), pg_server.dsn(), pg_schema],
                stdout=subprocess.PIPE,
            )
            try:
                run_id = await read_line(child)
                # Host A is frozen while its run works; its lease runs out and
                # this host records the run as interrupted.
                os.kill(child.pid, signal.SIGSTOP)
                # (A host frozen inside a transaction holds its row locks, and
                # no other host can write its runs off until it thaws: the
                # freeze is bounded too, and then the run ends as host A says.)
                with trio.move_on_after(FREEZE_GUARD_SECONDS):
                    with pytest.raises(td.RunFailedError, match="interrupted"):
                        await parent.wait(run_id)
                # Thawed, host A's run finishes (or its lease guard stops it):
                # either way it must answer what the store holds.
                os.kill(child.pid, signal.SIGCONT)
                answer = json.loads(await read_line(child))
                stored = await store.get(run_id)
            finally:
                os.kill(child.pid, signal.SIGCONT)
                child.kill()
                with trio.CancelScope(shield=True):
                    await child.wait()
    # One ending everywhere: host A answers the stored terminal record.
    assert stored is not None
    assert answer["status"] == stored.status.value, (answer, stored)
    if stored.status is td.RunStatus.FAILED:
        assert answer["wait"] == "RunFailedError", answer
        assert "interrupted" in answer["message"], answer
    else:
        assert answer == {"wait": "completed", "result": "done here", "status": "completed"}


class _Rivalled(_Trailing):
    """A shared store where another host records each run as interrupted just
    before this host's ending of it is written, and this host's view trails
    that: only the write itself can tell this host its ending was not kept."""

    def __init__(self, inner: Any, rival: Any) -> None:
        super().__init__(inner)
        self.rival = rival
        self.rival_endings: dict[str, td.RunRecord] = {}

    async def write(self, records: Sequence[td.RunRecord]) -> Sequence[str] | None:
        for record in records:
            if record.status.is_terminal and record.run_id not in self.rival_endings:
                ending = interrupted(attrs.evolve(record, final_result=None, transcript=None))
                self.rival_endings[record.run_id] = ending
                await self.rival.write([ending])
        return await self.inner.write(records)


async def _done_here(ctx: td.ChildContext) -> str:
    return "done here"


async def test_an_ending_the_store_ignored_is_answered_as_stored(shared: Shared) -> None:
    # No lease lapsed anywhere: the store's write says this host's ending was
    # ignored, and the run answers the ending that stands.
    rival, inner = shared.store(), shared.store()
    store = _Rivalled(inner, rival)
    config = td.Config(fail_closed=False)
    try:
        with trio.fail_after(GUARD_SECONDS):
            async with (
                td.open_runtime(
                    [td.Subagent("quick", _done_here)], store=store, config=config
                ) as rt,
                rt.open_parent("fleet") as parent,
            ):
                handle = await parent.start("quick", "work")
                with pytest.raises(td.RunFailedError, match="interrupted"):
                    await parent.wait(handle.run_id)
                assert parent.status(handle.run_id).status is td.RunStatus.FAILED
                stored = await inner.get(handle.run_id)
    finally:
        await inner.aclose()
        await rival.aclose()
    assert stored == store.rival_endings[handle.run_id]
