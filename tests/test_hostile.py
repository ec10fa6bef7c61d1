"""The hostile-input suite (contract §15).

Tasks, messages, tool arguments, schemas, results, transcripts and exception
messages come from models and runners and can be anything. Hypothesis draws
such input (``tests/hostile_strategies.py``) and feeds it into every public
entry point — ``Parent.delegate`` / ``start`` / ``continue_run`` /
``status`` / ``wait`` / ``cancel``, ``DelegationTools.call`` with mappings
and JSON text, what runners return and raise, ``final_schema`` from the
Python API and the tools, ``Subagent(...)``, ``Config(...)``,
``open_runtime(...)`` and ``open_parent(...)`` — with no store, a
``MemoryStore`` and an ``SQLiteStore``. Every example checks that:

* each call returns or raises a ``DelegationError`` (never anything else,
  never an ``ExceptionGroup``), and never hangs (an outer guard of
  ``CALL_SECONDS`` of real time, whatever the clock);
* error payloads and answers are JSON that encodes as valid UTF-8, as an MCP
  server would send them;
* the runtime is still usable afterwards: a normal delegation completes;
* with a store, every run the caller was told about is recorded, terminal,
  with the result the caller got; with SQLite, ``PRAGMA integrity_check``
  is ``ok``;
* no scheduler step holds the event loop's thread for more than
  ``STEP_LIMIT`` of its CPU time (:class:`~tests.helpers.StepTimer`): a
  stall costs seconds of it, while a machine busy with other work only
  stretches the wall time of ordinary steps.

Runs are on virtual time (an autojump ``MockClock``) except where results
and schemas are checked on worker threads, which need real deadlines.
``HYPOTHESIS_PROFILE=ci`` or ``thorough`` runs more examples.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import inspect
import json
import sqlite3
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import attrs
import pytest
import trio
import trio.testing
from cattrs.preconf.json import make_converter
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

import trio_delegate as td

from . import hostile_strategies as hs
from .helpers import STEP_CPU_LIMIT, HostileError, LoudStr, StepTimer

#: Real seconds after which one call counts as hung, whatever the clock says:
#: an outer guard only, generous for a machine busy with other work (a
#: stall is judged on CPU time, by STEP_LIMIT).
CALL_SECONDS: Final = 30.0
#: Real seconds after which a whole example (a runtime's life) counts as hung.
SESSION_SECONDS: Final = 90.0
#: The most CPU time of the event loop's thread a scheduler step may take (contract §15).
STEP_LIMIT: Final = STEP_CPU_LIMIT
#: Virtual seconds a "gated" run lives before it asks, and waits for an answer, before
#: it returns on its own.
GATE_SECONDS: Final = 20.0
#: A child deadline (real seconds) that bounds costly result checks.
CHECK_DEADLINE: Final = 0.5

STORE_KINDS: Final = ("none", "memory", "sqlite")
#: Share of a test's examples each store gets: SQLite commits cost milliseconds.
_STORE_SHARE: Final = {"none": 1.0, "memory": 0.6, "sqlite": 0.3}

_CONVERTER: Final = make_converter()


#: Failing examples are reported as drawn: shrinking would replay whole
#: sessions, each twice (see run_session), until the test's timeout.
AS_FOUND: Final = (Phase.explicit, Phase.reuse, Phase.generate)


def examples(base: int, kind: str = "none") -> int:
    """*base* examples (scaled for *kind*'s store) under the dev profile;
    proportionally more under the ``ci`` and ``thorough`` profiles."""
    scale = settings().max_examples / 100
    return max(2, round(base * _STORE_SHARE[kind] * scale))


# -- bounds ----------------------------------------------------------------------------


class TooSlow(AssertionError):
    """A call, or a scheduler step, took longer than its bound."""


@contextlib.contextmanager
def real_time_limit(seconds: float, what: str) -> Iterator[None]:
    """Fail if the body takes more than *seconds* of real time, and cancel it then.

    A watchdog thread measures real time, so the limit holds on a mock clock
    too (where a hang would otherwise jump virtual time, or stand still).
    """
    token = trio.lowlevel.current_trio_token()
    scope = trio.CancelScope()
    finished = threading.Event()

    def watch() -> None:
        if not finished.wait(seconds):
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(scope.cancel)

    watchdog = threading.Thread(target=watch, name="hostile-input watchdog", daemon=True)
    started = time.monotonic()
    watchdog.start()
    try:
        with scope:
            yield
    finally:
        finished.set()
        watchdog.join()
    elapsed = time.monotonic() - started
    if scope.cancelled_caught:
        raise TooSlow(f"{what} did not end within {seconds} s")
    if elapsed > seconds:
        raise TooSlow(f"{what} took {elapsed:.2f} s, more than {seconds} s")


def wire(value: Any) -> bytes:
    """*value* as an MCP server would send it: JSON without NaN, in UTF-8."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")


def check_error(exc: td.DelegationError) -> None:
    """A DelegationError renders as a payload a model can be sent."""
    assert not isinstance(exc, BaseExceptionGroup)
    payload = exc.to_payload()
    assert set(payload) == {"error"}
    body = payload["error"]
    assert body["type"] == exc.kind()
    assert isinstance(body["message"], str)
    assert body["message"]
    wire(payload)
    str(exc).encode("utf-8")


def to_json(answer: Any) -> Any:
    """The JSON form of an answer of the Python API or the tools."""
    if isinstance(answer, td.RunResult | td.RunHandle | td.CancelAck):
        return _CONVERTER.unstructure(answer)
    if isinstance(answer, tuple):
        return [to_json(item) for item in answer]
    return answer


async def read_settled(stream: AsyncIterator[td.RunHandle], seen: list[str]) -> None:
    """Read a parent's ``settled()`` stream to its end (the parent's close)."""
    async for handle in stream:
        assert handle.status.is_terminal, handle
        wire(to_json(handle))
        seen.append(handle.run_id)


# -- runs the session was told about ---------------------------------------------------


@attrs.frozen
class Ref:
    """A run id the session was told about, picked when a call is made.

    Attributes:
        index: which of the told ids (modulo their number).
        form: how it is passed: ``exact``, or changed into something that
            must not find it (padded, upper case, a str subclass, under
            another owner).
    """

    index: int
    form: str = "exact"

    def resolve(self, session: Session) -> Any:
        run_id = session.pick(self.index)
        if self.form == "padded":
            return f" {run_id}\n"
        if self.form == "upper":
            return run_id.upper()
        if self.form == "strsub":
            return hs.StrSub(run_id)
        if self.form == "owned":
            return f"hostile/{run_id}"
        return run_id


refs = st.builds(
    Ref,
    st.integers(0, 7),
    st.sampled_from(["exact", "exact", "exact", "padded", "upper", "strsub", "owned"]),
)
hostile_run_ids = hs.mostly(
    refs,
    hs.hostile_text(3)
    | hs.odd_objects
    | hs.long_texts
    | st.sampled_from(["run_" + "0" * 32, "run_", "", "hostile/run_x", "/", "../../etc/passwd"]),
)


def resolve(value: Any, session: Session) -> Any:
    """*value*, or the run id it stands for if it is a :class:`Ref`."""
    if isinstance(value, Ref):
        return value.resolve(session)
    return value


@asynccontextmanager
async def unmeasured(timer: StepTimer) -> AsyncIterator[None]:
    """A step of its own for the test's own checks, left out of *timer*'s measure.

    The runtime's work before and after stays in steps that are measured.
    """
    await trio.lowlevel.cancel_shielded_checkpoint()
    timer.exclude_current_step()
    yield
    await trio.lowlevel.cancel_shielded_checkpoint()


@attrs.define(eq=False)
class Session:
    """One runtime and parent under hostile input, and what callers were told."""

    runtime: td.Runtime
    parent: td.Parent
    store: td.ResultStore | None
    timer: StepTimer
    #: run id -> the last answer (or error) about it, for every admitted run.
    told: dict[str, Any] = attrs.Factory(dict)
    #: run id -> the JSON of the result a caller got.
    results: dict[str, Any] = attrs.Factory(dict)
    #: Behaviour of the "scripted" subagent, by task.
    behaviours: dict[str, Callable[[td.ChildContext], Any]] = attrs.Factory(dict)

    def pick(self, index: int) -> str:
        ids = list(self.told)
        if not ids:
            return "run_" + "f" * 32
        return ids[index % len(ids)]

    async def attempt(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call *fn*: it must return, or raise a DelegationError, within CALL_SECONDS."""
        answer: Any
        with real_time_limit(CALL_SECONDS, what):
            try:
                answer = fn(*args, **kwargs)
                if inspect.isawaitable(answer):
                    answer = await answer
            except td.DelegationError as exc:
                answer = exc
        async with unmeasured(self.timer):
            if isinstance(answer, td.DelegationError):
                check_error(answer)
                self._learn_error(answer)
            else:
                wire(to_json(answer))
                self._learn(answer)
        return answer

    def _learn(self, answer: Any) -> None:
        data = to_json(answer)
        if isinstance(data, dict) and isinstance(data.get("run_id"), str):
            run_id = data["run_id"]
            self.told[run_id] = answer
            if "final_result" in data:
                self.results[run_id] = data["final_result"]

    def _learn_error(self, exc: td.DelegationError) -> None:
        ended = td.RunFailedError | td.RunCancelledError | td.RunTimedOutError
        if isinstance(exc, ended) and exc.run_id is not None:
            self.told[exc.run_id] = exc


async def check_recorded(session: Session) -> None:
    """Every run a caller was told about is recorded, terminal, with the result it got."""
    store = session.store
    assert store is not None
    for run_id, answer in session.told.items():
        record = await store.get(run_id)
        async with unmeasured(session.timer):
            assert record is not None, f"run {run_id} ({answer!r}) is not recorded"
            assert record.status.is_terminal, record
            if run_id in session.results:
                assert record.status is td.RunStatus.COMPLETED, record
                assert record.final_result == session.results[run_id], record


def make_store(kind: str, folder: Path) -> td.ResultStore | None:
    if kind == "memory":
        return td.MemoryStore()
    if kind == "sqlite":
        # It polls for other runtimes' changes on the Trio clock: on the
        # autojump clock, every virtual second of a wait costs a read of the file.
        return td.SQLiteStore(folder / "runs.db", poll_interval=1.0)
    return None


def check_sqlite(folder: Path) -> None:
    path = folder / "runs.db"
    if not path.exists():
        return
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]


# -- subagents -------------------------------------------------------------------------


async def echo(ctx: td.ChildContext) -> Any:
    await trio.lowlevel.checkpoint()
    return ctx.task


async def gated(ctx: td.ChildContext) -> Any:
    ctx.progress(ctx.task, progress=1)
    await trio.sleep(GATE_SECONDS)
    # It may ask (contract §19): its question waits for an answer_subagent
    # call until its own timeout; in the foreground nobody can answer.
    with contextlib.suppress(td.DelegationError):
        await ctx.ask(ctx.task, timeout=GATE_SECONDS)
    return ctx.task


async def boss(ctx: td.ChildContext) -> Any:
    assert ctx.parent is not None
    result = await ctx.parent.delegate("echo", ctx.task)
    return result.final_result


def standard_subagents(session_box: list[Session]) -> list[td.Subagent]:
    """echo (returns its task), gated (returns it after GATE_SECONDS and a question),
    boss (delegates it to echo) and scripted (does what the session's behaviours say)."""

    async def scripted(ctx: td.ChildContext) -> Any:
        await trio.lowlevel.checkpoint()
        behaviour = session_box[-1].behaviours.get(ctx.task)
        if behaviour is None:
            return ctx.task
        return behaviour(ctx)

    # Every one has a deadline: a model's schema can make checking a result
    # take until the child deadline, and without one until the check gives up
    # (MAX_STEPS, minutes). On the autojump clock the deadline comes as soon as
    # the loop waits for the check's thread.
    return [
        td.Subagent("echo", echo, timeout_seconds=100.0),
        td.Subagent("gated", gated, timeout_seconds=10 * GATE_SECONDS, asks=True),
        td.Subagent("boss", boss, children=("echo",), timeout_seconds=10 * GATE_SECONDS),
        td.Subagent("scripted", scripted, timeout_seconds=100.0),
    ]


SUBAGENT_NAMES: Final = ("echo", "gated", "boss", "scripted")

configs = st.builds(
    td.Config,
    subagent_timeout_seconds=st.none(),
    max_concurrent_runs=st.sampled_from([1, 2, 16]),
    max_live_runs=st.just(256),
    retention_max_runs=st.sampled_from([1, 3, 1000]),
    fail_closed=st.just(False),
    max_task_chars=st.sampled_from([50, 100_000]),
    max_nesting_depth=st.sampled_from([3, hs.NESTING]),
)


@asynccontextmanager
async def open_session(
    kind: str,
    folder: Path,
    config: td.Config,
    *,
    subagents: Sequence[td.Subagent] = (),
) -> AsyncIterator[Session]:
    """A runtime and a parent (owner ``"hostile"``) whose every step is timed.

    On leaving: a normal delegation must still complete, the runtime must close
    without error, every run the caller was told about must be recorded in the
    store, and no step may have held the loop's thread for more than STEP_LIMIT.
    """
    store = make_store(kind, folder)
    box: list[Session] = []
    registry = [*standard_subagents(box), *subagents]
    timer = StepTimer()
    trio.lowlevel.add_instrument(timer)
    try:
        # The instrument times steps from the next one on.
        await trio.lowlevel.checkpoint()
        with real_time_limit(SESSION_SECONDS, "the session"):
            settled: list[str] = []
            async with (
                td.open_runtime(registry, config=config, store=store) as runtime,
                trio.open_nursery() as readers,
                runtime.open_parent("hostile") as parent,
            ):
                readers.start_soon(read_settled, parent.settled(), settled)
                session = Session(runtime, parent, store, timer)
                box.append(session)
                yield session
                normal = await session.attempt(
                    "a normal delegation", parent.delegate, "echo", "still works"
                )
                assert isinstance(normal, td.RunResult), normal
                assert normal.final_result == "still works"
                await session.attempt("unobserved", parent.unobserved)
                listed = await session.attempt("runs", parent.runs)
                assert type(listed) is tuple, listed
                assert all(type(handle) is td.RunHandle for handle in listed), listed
                assert len({handle.run_id for handle in listed}) == len(listed), listed
            assert runtime.live_runs == 0
            # Every run of the parent settled once, in its stream.
            assert normal.run_id in settled
            assert len(settled) == len(set(settled))
            if store is not None:
                await check_recorded(session)
        # The step running now would end after the instrument is gone.
        await trio.lowlevel.checkpoint()
    finally:
        trio.lowlevel.remove_instrument(timer)
    if timer.longest > STEP_LIMIT:
        raise TooSlow(f"a scheduler step took {timer.longest * 1000:.0f} ms of CPU time")


def run_session(
    kind: str,
    main: Callable[[Path], Any],
    *,
    virtual: bool = True,
) -> None:
    """Run ``main(folder)`` in a fresh Trio run (on an autojump clock if *virtual*),
    then check the SQLite file it left, if any.

    The objects alive before the run (pytest's, Hypothesis') are frozen out of
    the garbage collector's way meanwhile: a full collection walks every
    object of the process, and the steps measured should pay for the
    runtime's objects, not for the test harness's.

    An example that was too slow runs once more before it fails: on a machine
    shared with other work, a step now and then pays for page faults or a
    stall of the disk; a call that is slow by construction is slow again.
    """
    try:
        _run_once(kind, main, virtual)
    except TooSlow:
        _run_once(kind, main, virtual)


def _run_once(kind: str, main: Callable[[Path], Any], virtual: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="hostile-") as tmp:
        folder = Path(tmp)
        clock = trio.testing.MockClock(autojump_threshold=0) if virtual else None
        # What is alive now stays out of the garbage collector's walks for the
        # rest of the session, as what collection loaded does (tests/conftest.py):
        # a full collection during a timed call is not the call's own work.
        gc.freeze()
        trio.run(main, folder, clock=clock)
        if kind == "sqlite":
            check_sqlite(folder)


def fail_with_hostile_text(ctx: td.ChildContext) -> Any:
    raise ValueError("[/INST] \x1b[31m \ud800 <script>")


async def prelude(session: Session) -> None:
    """Runs in every state: completed, failed, live, pending or cancelled, and one
    of another owner."""
    parent = session.parent
    session.behaviours["fail"] = fail_with_hostile_text
    await session.attempt("delegate", parent.delegate, "echo", "done")
    await session.attempt("start", parent.start, "scripted", "fail")
    await session.attempt("start", parent.start, "gated", "live")
    cancelled = await session.attempt("start", parent.start, "gated", "to cancel")
    if isinstance(cancelled, td.RunHandle):
        await session.attempt("cancel", parent.cancel, cancelled.run_id)
    async with session.runtime.open_parent("other") as other:
        await session.attempt("delegate", other.delegate, "echo", "of another owner")


def calls_test(
    calls: st.SearchStrategy[Call | ToolCall], base: int, doc: str
) -> Callable[[str], None]:
    """A test, run with each store, of sessions that make a few drawn *calls*
    after the prelude; *base* examples under the dev profile."""

    @pytest.mark.parametrize("kind", STORE_KINDS)
    def test(kind: str) -> None:
        @settings(max_examples=examples(base, kind), deadline=None, phases=AS_FOUND)
        @given(config=configs, drawn=st.lists(calls, min_size=1, max_size=6))
        def check(config: td.Config, drawn: list[Call | ToolCall]) -> None:
            made = [call.made() for call in drawn]

            async def main(folder: Path) -> None:
                async with open_session(kind, folder, config) as session:
                    await prelude(session)
                    for call in made:
                        await call.perform(session)

            run_session(kind, main)

        check()

    test.__doc__ = doc
    return test


# -- 1. admission: delegate, start, continue_run ---------------------------------------

names = hs.mostly(st.sampled_from(SUBAGENT_NAMES[:3]), hs.hostile_text(2) | hs.odd_objects)
tasks = hs.mostly(hs.accepted_text(), hs.hostile_text() | hs.odd_objects)
admission_schemas = hs.mostly(st.none() | hs.costly_schemas, hs.hostile_schemas)


@attrs.frozen
class Call:
    """One drawn call of a Parent method."""

    method: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]

    def made(self) -> Call:
        """This call with its costly values built (outside the timed steps)."""
        return Call(self.method, hs.build(self.args), hs.build(self.kwargs))

    async def perform(self, session: Session) -> Any:
        if self.method == "sleep":
            return await trio.sleep(self.args[0])
        args = [resolve(arg, session) for arg in self.args]
        kwargs = {key: resolve(value, session) for key, value in self.kwargs.items()}
        method = getattr(session.parent, self.method)
        return await session.attempt(f"parent.{self.method}", method, *args, **kwargs)


admissions = st.builds(
    Call,
    st.sampled_from(["delegate", "start"]),
    st.tuples(names, tasks),
    st.fixed_dictionaries(
        {}, optional={"final_schema": admission_schemas, "replaces": hostile_run_ids}
    ),
)
continuations = st.builds(
    Call,
    st.just("continue_run"),
    st.tuples(hostile_run_ids, tasks),
    st.fixed_dictionaries(
        {},
        optional={
            "final_schema": admission_schemas,
            "background": hs.mostly(st.booleans(), hs.odd_objects | hs.hostile_numbers),
        },
    ),
)
#: Good calls among the hostile ones, so that there are runs to continue and replace.
good_calls = st.builds(
    Call,
    st.sampled_from(["delegate", "start"]),
    st.tuples(st.sampled_from(SUBAGENT_NAMES[:3]), st.just("a good task")),
    st.just({}),
)


test_admission_arguments = calls_test(
    good_calls | admissions | continuations,
    30,
    "Hostile names, tasks, messages, schemas, replaces and background flags.",
)


# -- 2. lookups: status, wait, cancel --------------------------------------------------

timeouts = (
    st.none()
    | st.sampled_from([0, 0.5, 5, GATE_SECONDS * 2, 1e300])
    | hs.hostile_numbers
    | hs.odd_objects
)
lookups = (
    st.builds(Call, st.sampled_from(["status", "cancel"]), st.tuples(hostile_run_ids), st.just({}))
    | st.builds(
        Call,
        st.just("wait"),
        st.tuples(hostile_run_ids),
        st.fixed_dictionaries({}, optional={"timeout": timeouts}),
    )
    | st.builds(Call, st.just("sleep"), st.tuples(st.sampled_from([1, GATE_SECONDS])), st.just({}))
)


test_status_wait_and_cancel_arguments = calls_test(
    lookups, 30, "Hostile run ids and timeouts, against runs in every state."
)


# -- 3. the model-facing tools ---------------------------------------------------------


@attrs.frozen
class ToolCall:
    """One drawn ``tools.call``; ``@RUN@`` in its arguments stands for a told run id."""

    name: Any
    arguments: Any
    ref: int

    def made(self) -> ToolCall:
        return ToolCall(hs.build(self.name), hs.build(self.arguments), self.ref)

    async def perform(self, session: Session) -> Any:
        arguments = hs.fill_run_refs(self.arguments, session.pick(self.ref))
        label = self.name if type(self.name) is str else type(self.name).__name__
        tools = session.parent.tools()
        answer = await session.attempt(f"tools.call({label!r})", tools.call, self.name, arguments)
        if isinstance(answer, dict) and "runs" in answer:  # list_subagent_runs
            assert set(answer) == {"runs", "omitted"}, answer
            assert all(isinstance(entry["run_id"], str) for entry in answer["runs"]), answer
        elif isinstance(answer, dict):
            assert isinstance(answer.get("run_id"), str), answer
        return answer


tool_calls = st.builds(
    lambda call, ref: ToolCall(call[0], call[1], ref),
    hs.tool_calls(SUBAGENT_NAMES),
    st.integers(0, 7),
)


test_tool_calls = calls_test(
    tool_calls, 40, "Hostile tool names and arguments, as mappings and as JSON text."
)


# -- 4. what runners return and raise --------------------------------------------------


class UnprintableError(Exception):
    """An exception whose message cannot be read."""

    def __str__(self) -> str:
        raise HostileError("no message")

    def __repr__(self) -> str:
        raise HostileError("no repr")


class LoudMessageError(Exception):
    """An exception whose message is a str subclass whose methods raise."""

    def __str__(self) -> str:
        return LoudStr("a loud message")


def _renamed_error() -> type[Exception]:
    error = type("Renamed", (Exception,), {})
    error.__name__ = LoudStr("Renamed")
    return error


def _named_error(name: str, qualname: str | None = None) -> type[Exception]:
    error = type(name, (Exception,), {})
    if qualname is not None:  # a type's __name__ must be valid Unicode; these need not be
        error.__qualname__ = error.__module__ = qualname
    return error


ERROR_TYPES: Final = (
    ("ValueError", lambda: ValueError),
    ("KeyError", lambda: KeyError),
    ("UnprintableError", lambda: UnprintableError),
    ("an error named [/INST]", lambda: _named_error("[/INST]")),
    ("an error named with ESC", lambda: _named_error("\x1b[2JError")),
    ("an error qualified with a lone surrogate", lambda: _named_error("E", "Bad\ud800Error")),
    ("an error with an empty name", lambda: _named_error("")),
    ("an error with a 10k name", lambda: _named_error("E" * 10_000)),
    ("td.InvalidArgumentsError", lambda: td.InvalidArgumentsError),
    ("LoudMessageError", lambda: LoudMessageError),
    ("an error renamed with a str subclass", _renamed_error),
)
error_types = st.sampled_from([hs.Built(recipe, make) for recipe, make in ERROR_TYPES])
messages = hs.hostile_text() | hs.odd_objects | hs.hostile_numbers | hs.deep_values()


@attrs.frozen
class Behaviour:
    """What a scripted runner does: return a value, return an Output, or raise."""

    kind: str
    value: Any = None
    transcript: Any = None

    def made(self) -> Behaviour:
        return Behaviour(self.kind, hs.build(self.value), hs.build(self.transcript))

    def __call__(self, ctx: td.ChildContext) -> Any:
        if self.kind == "return":
            return self.value
        if self.kind == "output":
            return td.Output(self.value, transcript=self.transcript)
        if self.kind == "raise":
            error_type, message = self.value
            raise error_type(message)
        assert self.kind == "group"
        raise ExceptionGroup("runner failed", [*self.value])


def _exception(error_type: Any, message: Any) -> hs.Built:
    """A recipe for ``error_type(message)`` (or the error that call raises)."""

    def make() -> Exception:
        try:
            made: Exception = hs.build(error_type)(hs.build(message))
        except Exception as exc:  # an exception type that refuses the message
            return exc
        return made

    return hs.Built(f"{error_type!r}({message!r})", make)


def _group(members: list[hs.Built]) -> hs.Built:
    """A recipe for an exception group of *members* (recipes too)."""
    return hs.Built(
        f"ExceptionGroup({members!r})", lambda: ExceptionGroup("inner", hs.build(members))
    )


exceptions = st.builds(_exception, error_types, messages)
behaviours = (
    st.builds(Behaviour, st.just("return"), hs.hostile_values())
    | st.builds(Behaviour, st.just("return"), hs.schema_results)
    | st.builds(
        Behaviour,
        st.just("output"),
        hs.hostile_values(),
        hs.hostile_values() | st.lists(hs.hostile_values(), max_size=3) | hs.deep_values(),
    )
    | st.builds(Behaviour, st.just("raise"), st.tuples(error_types, messages))
    | st.builds(
        Behaviour,
        st.just("group"),
        st.lists(
            exceptions | st.lists(exceptions, min_size=1, max_size=2).map(_group),
            min_size=1,
            max_size=3,
        ),
    )
)


def keepable(value: Any, config: td.Config) -> tuple[bool, Any] | None:
    """What the runtime must make of a returned *value* made of plain JSON types only:
    ``(True, its JSON)`` if it can be kept, ``(False, None)`` if not; ``None`` for
    values with other types, whose fate this does not predict."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    deepest = 0
    while stack:
        item, depth = stack.pop()
        if type(item) in (dict, list, tuple):
            depth += 1
            deepest = max(deepest, depth)
            if depth > config.max_nesting_depth:
                return False, None
            children = item.values() if type(item) is dict else item
            stack.extend((child, depth) for child in children)
        elif type(item) not in (str, int, float, bool, type(None)):
            return None
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        size = len(text.encode("utf-8"))
    except (TypeError, ValueError):
        return False, None
    if size > config.max_result_bytes:
        return False, None
    return True, json.loads(text)


routes = st.sampled_from(
    ["delegate", "start_wait", "start_cancel", "tool", "tool_background", "continue"]
)


@attrs.frozen
class DrawnRun:
    """One drawn run: what its runner does, its schema, and how it is asked for."""

    behaviour: Behaviour
    route: str
    schema: Any

    def made(self) -> DrawnRun:
        return DrawnRun(self.behaviour.made(), self.route, hs.build(self.schema))


outcomes = st.builds(
    DrawnRun,
    behaviours,
    routes,
    st.none() | st.none() | st.none() | hs.costly_schemas | hs.malformed_schemas,
)


async def ask(session: Session, task: str, outcome: DrawnRun) -> Any:
    """Run *task* on the scripted subagent (with a deadline when there is a schema)
    the way *outcome* says; return the final answer or error."""
    parent = session.parent
    name = "scripted" if outcome.schema is None else "checked"
    schema = {} if outcome.schema is None else {"final_schema": outcome.schema}
    route = outcome.route
    if route == "delegate":
        return await session.attempt("delegate", parent.delegate, name, task, **schema)
    if route == "continue":
        # The run's conversation, whatever it holds, carried into a new run.
        answer = await session.attempt("delegate", parent.delegate, name, task, **schema)
        run_id = getattr(answer, "run_id", None)
        if run_id is not None:
            session.behaviours["next"] = Behaviour("return", "next")
            carried = await session.attempt("continue_run", parent.continue_run, run_id, "next")
            async with unmeasured(session.timer):
                assert isinstance(carried, td.RunResult), carried
                assert carried.final_result == "next"
        return answer
    if route in ("start_wait", "start_cancel"):
        handle = await session.attempt("start", parent.start, name, task, **schema)
        if not isinstance(handle, td.RunHandle):
            return handle
        if route == "start_cancel":
            await session.attempt("cancel", parent.cancel, handle.run_id)
        answer = await session.attempt("wait", parent.wait, handle.run_id)
        again = await session.attempt("wait again", parent.wait, handle.run_id)
        async with unmeasured(session.timer):
            if isinstance(answer, td.RunResult):
                assert again == answer
            else:
                assert type(again) is type(answer)
        return answer
    tools = parent.tools()
    arguments: dict[str, Any] = {"subagent": name, "task": task, **schema}
    if route == "tool_background":
        handle = await session.attempt(
            "tools.call", tools.call, "delegate_task", {**arguments, "background": True}
        )
        if not isinstance(handle, dict):
            return handle
        return await session.attempt(
            "tools.call", tools.call, "wait_subagent", {"run_id": handle["run_id"]}
        )
    return await session.attempt("tools.call", tools.call, "delegate_task", arguments)


def checked_subagent(session_box: list[Session]) -> td.Subagent:
    async def checked(ctx: td.ChildContext) -> Any:
        await trio.lowlevel.checkpoint()
        return session_box[-1].behaviours[ctx.task](ctx)

    return td.Subagent("checked", checked, timeout_seconds=CHECK_DEADLINE)


@pytest.mark.parametrize("kind", STORE_KINDS)
def test_runner_results_and_errors(kind: str) -> None:
    """Hostile results, transcripts and exceptions, with and without a final_schema."""

    @settings(max_examples=examples(40, kind), deadline=None, phases=AS_FOUND)
    @given(drawn=st.lists(outcomes, min_size=1, max_size=4))
    def check(drawn: list[DrawnRun]) -> None:
        made = [outcome.made() for outcome in drawn]
        config = td.Config(fail_closed=False, subagent_timeout_seconds=None)
        box: list[Session] = []

        async def main(folder: Path) -> None:
            extra = [checked_subagent(box)]
            async with open_session(kind, folder, config, subagents=extra) as session:
                box.append(session)
                for index, outcome in enumerate(made):
                    task = f"run {index}"
                    session.behaviours[task] = outcome.behaviour
                    answer = await ask(session, task, outcome)
                    if outcome.behaviour.kind != "return" or outcome.schema is not None:
                        continue
                    async with unmeasured(session.timer):
                        expected = keepable(outcome.behaviour.value, config)
                        if expected is None:
                            continue
                        ok, value = expected
                        if ok and outcome.route != "start_cancel":
                            assert to_json(answer).get("final_result") == value, answer
                        elif not ok:
                            ended = td.RunFailedError | td.RunCancelledError
                            assert isinstance(answer, ended), answer

        run_session(kind, main, virtual=False)

    check()


# -- 5. final_schema from everywhere, against results built to stress it ---------------

schema_routes = st.sampled_from(["python", "tool_mapping", "tool_text", "subagent"])


@pytest.mark.parametrize("kind", STORE_KINDS)
def test_final_schemas(kind: str) -> None:
    """Costly and malformed schemas from the Python API, the tools (as objects and
    as JSON text) and ``Subagent(final_schema=...)``: checking stays bounded."""

    @settings(max_examples=examples(30, kind), deadline=None, phases=AS_FOUND)
    @given(
        schema=hs.costly_schemas | hs.malformed_schemas,
        result=hs.schema_results | hs.hostile_values(odd=False),
        route=schema_routes,
    )
    def check(schema: Any, result: Any, route: str) -> None:
        schema, result = hs.build(schema), hs.build(result)
        config = td.Config(fail_closed=False, subagent_timeout_seconds=None)
        box: list[Session] = []
        extra = [checked_subagent(box)]
        if route == "subagent":
            started = time.monotonic()
            try:
                extra.append(
                    td.Subagent(
                        "defaulted", extra[0].runner, final_schema=schema, timeout_seconds=0.5
                    )
                )
            except td.DelegationError as exc:
                check_error(exc)
                return
            finally:
                assert time.monotonic() - started < CALL_SECONDS

        async def main(folder: Path) -> None:
            async with open_session(kind, folder, config, subagents=extra) as session:
                box.append(session)
                session.behaviours["t"] = Behaviour("return", result)
                parent = session.parent
                if route == "subagent":
                    await session.attempt("delegate", parent.delegate, "defaulted", "t")
                elif route == "python":
                    await session.attempt(
                        "delegate", parent.delegate, "checked", "t", final_schema=schema
                    )
                else:
                    if route == "tool_text":
                        try:
                            schema_arg: Any = json.dumps(schema)
                        except Exception:
                            schema_arg = schema
                    else:
                        schema_arg = schema
                    await session.attempt(
                        "tools.call",
                        parent.tools().call,
                        "delegate_task",
                        {"subagent": "checked", "task": "t", "final_schema": schema_arg},
                    )

        run_session(kind, main, virtual=False)

    check()


# -- 6. Subagent(...) and Config(...) --------------------------------------------------


async def _async_runner(ctx: td.ChildContext) -> Any:
    return None


class _AsyncCallable:
    async def __call__(self, ctx: td.ChildContext) -> Any:
        return None


runners = (
    st.sampled_from(
        [
            hs.Built("an async function", lambda: _async_runner),
            hs.Built("an async callable object", _AsyncCallable),
            hs.Built("a sync function", lambda: lambda ctx: None),
            hs.Built("an async generator function", lambda: _agen),
        ]
    )
    | hs.odd_objects
)


async def _agen(ctx: td.ChildContext) -> Any:
    yield None


anything = hs.hostile_values() | hs.odd_objects | hs.hostile_numbers


def constructed(what: str, make: Callable[[], Any]) -> Any:
    """Call *make*: it must return, or raise a DelegationError, within CALL_SECONDS."""
    started = time.monotonic()
    try:
        return make()
    except td.DelegationError as exc:
        check_error(exc)
        return exc
    finally:
        elapsed = time.monotonic() - started
        assert elapsed < CALL_SECONDS, f"{what} took {elapsed:.2f} s"


@settings(max_examples=examples(150), deadline=None, phases=AS_FOUND)
@given(
    name=hs.mostly(st.just("echo"), hs.hostile_text(3) | hs.odd_objects),
    runner=runners,
    options=st.fixed_dictionaries(
        {},
        optional={
            "description": hs.hostile_text() | hs.odd_objects,
            "timeout_seconds": hs.hostile_numbers | hs.odd_objects | st.none(),
            "final_schema": hs.hostile_schemas,
            "children": st.lists(hs.hostile_text(2) | hs.odd_objects, max_size=3)
            | hs.odd_objects
            | hs.hostile_text(2),
        },
    ),
)
def test_subagent_arguments(name: Any, runner: Any, options: dict[str, Any]) -> None:
    made = hs.build(options)
    subagent = constructed(
        "Subagent(...)", lambda: td.Subagent(hs.build(name), hs.build(runner), **made)
    )
    if isinstance(subagent, td.Subagent) and not subagent.children:
        # What was accepted can be shown to a model: the tool definitions, in
        # every format, are JSON that encodes as valid UTF-8.
        async def main() -> None:
            async with (
                td.open_runtime([subagent]) as runtime,
                runtime.open_parent() as parent,
            ):
                tools = parent.tools()
                wire([attrs.asdict(definition) for definition in tools.definitions()])
                wire(tools.openai_chat_tools())
                wire(tools.openai_responses_tools())
                wire(tools.anthropic_tools())

        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


config_fields = (
    "subagent_timeout_seconds",
    "max_concurrent_runs",
    "max_live_runs",
    "max_depth",
    "retention_seconds",
    "retention_max_runs",
    "fail_closed",
    "max_task_chars",
    "max_result_bytes",
    "max_nesting_depth",
)


@settings(max_examples=examples(150), deadline=None, phases=AS_FOUND)
@given(
    options=st.fixed_dictionaries(
        {},
        optional={
            field: hs.hostile_numbers | hs.odd_objects | st.none() | st.booleans()
            for field in config_fields
        },
    )
)
def test_config_arguments(options: dict[str, Any]) -> None:
    config = constructed("Config(...)", lambda: td.Config(**hs.build(options)))
    if isinstance(config, td.Config):
        # What was accepted works: a runtime opens with it and runs a delegation,
        # which may fail by the config's own limits (a one-byte result, say).
        async def main() -> None:
            with real_time_limit(CALL_SECONDS, "a delegation"):
                try:
                    async with (
                        td.open_runtime([td.Subagent("echo", echo)], config=config) as runtime,
                        runtime.open_parent() as parent,
                    ):
                        result = await parent.delegate("echo", "t")
                        assert result.final_result == "t"
                except td.DelegationError as exc:
                    check_error(exc)

        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


# -- 7. open_runtime(...) and open_parent(...) -----------------------------------------


class UnopenableStore:
    """A store whose attach raises something other than StoreError."""

    async def attach(self, runtime_id: str) -> Any:
        raise HostileError("\ud800 cannot open")

    async def detach(self, runtime_id: str) -> None:
        pass

    async def write(self, records: Any) -> None:
        pass

    async def get(self, run_id: str) -> Any:
        return None

    async def list_runs(self, **kwargs: Any) -> Any:
        return []


owners = (
    st.sampled_from(["root", "hostile", "a/b", "hostile/run_x", "/", " ", "[/INST]"])
    | hs.hostile_text()
    | hs.odd_objects
    | hs.long_texts
)
registry_entries = (
    st.sampled_from([hs.Built("Subagent('echo')", lambda: td.Subagent("echo", echo))])
    | hs.odd_objects
)
registries = (
    st.lists(registry_entries, max_size=3)
    | hs.odd_objects
    | st.just(
        hs.Built("a generator of Subagents", lambda: (s for s in [td.Subagent("echo", echo)]))
    )
)
stores = st.sampled_from(["none", "memory", "sqlite", "unopenable"]) | hs.odd_objects
parent_children = (
    st.none()
    | st.lists(
        st.sampled_from(["echo", "nobody"]) | hs.hostile_text(2) | hs.odd_objects, max_size=3
    )
    | hs.hostile_text(2)
    | hs.odd_objects
)


@pytest.mark.parametrize("kind", STORE_KINDS)
def test_runtime_and_parent_arguments(kind: str) -> None:
    """Hostile subagent lists, configs, stores, owners and children lists."""

    @settings(max_examples=examples(40, kind), deadline=None, phases=AS_FOUND)
    @given(
        registry=registries,
        config=st.none() | configs | hs.odd_objects,
        store=stores,
        owners_drawn=st.lists(owners, min_size=1, max_size=3),
        children=parent_children,
    )
    def check(
        registry: Any, config: Any, store: Any, owners_drawn: list[Any], children: Any
    ) -> None:
        registry, config = hs.build(registry), hs.build(config)
        made_owners, children = hs.build(owners_drawn), hs.build(children)

        async def main(folder: Path) -> None:
            chosen = store
            if store == "unopenable":
                chosen = UnopenableStore()
            elif isinstance(store, str):
                chosen = make_store(kind, folder)
            else:
                chosen = hs.build(store)
            timer = StepTimer()
            trio.lowlevel.add_instrument(timer)
            try:
                await trio.lowlevel.checkpoint()
                await open_and_use(registry, config, chosen, made_owners, children)
            finally:
                trio.lowlevel.remove_instrument(timer)
            if timer.longest > STEP_LIMIT:
                raise TooSlow(f"a scheduler step took {timer.longest * 1000:.0f} ms of CPU time")

        run_session(kind, main)

    check()


async def open_and_use(
    registry: Any, config: Any, store: Any, owners: list[Any], children: Any
) -> None:
    """Open a runtime and a parent per owner with what was drawn; whatever opens must work."""
    with real_time_limit(SESSION_SECONDS, "opening and closing"):
        try:
            async with td.open_runtime(registry, config=config, store=store) as runtime:
                for owner in owners:
                    await open_parent_and_use(runtime, owner, children)
        except td.DelegationError as exc:
            check_error(exc)


async def open_parent_and_use(runtime: td.Runtime, owner: Any, children: Any) -> None:
    try:
        async with runtime.open_parent(owner, subagents=children) as parent:
            assert type(parent.owner) is str
            assert parent.owner == str.__str__(owner)
            if "echo" in parent.subagents:
                with real_time_limit(CALL_SECONDS, "a delegation"):
                    result = await parent.delegate("echo", "t")
                assert result.final_result == "t"
    except td.DelegationError as exc:
        check_error(exc)


# -- 8. a host's objects whose dunder methods misbehave --------------------------------


@attrs.frozen
class Target:
    """What a call of the dunder test acts on: a runtime, a parent, a completed run."""

    runtime: td.Runtime
    parent: td.Parent
    run_id: str


async def _enter(context: Any) -> None:
    async with context:
        pass


_CONFIG_FIELDS: Final = (*config_fields, "cancel_grace_seconds")
_SUBAGENT_FIELDS: Final = (
    "name",
    "runner",
    "description",
    "timeout_seconds",
    "final_schema",
    "children",
)
#: Good arguments of the tools that take the most, by tool.
_GOOD_TOOL_ARGUMENTS: Final[dict[str, Callable[[Target], dict[str, Any]]]] = {
    "delegate_task": lambda t: {"subagent": "echo", "task": "a task"},
    "wait_subagent": lambda t: {"run_id": t.run_id, "timeout": 0},
    "continue_subagent": lambda t: {"run_id": t.run_id, "message": "more"},
}


def _admission(method: str, argument: str, t: Target, bad: Any) -> Any:
    return getattr(t.parent, method)(**{"name": "echo", "task": "a task", argument: bad})


def _config(field: str, t: Target, bad: Any) -> Any:
    return td.Config(**{field: bad})


def _subagent(field: str, t: Target, bad: Any) -> Any:
    return td.Subagent(**{"name": "echo", "runner": echo, field: bad})


def _tool_argument(tool: str, key: str, t: Target, bad: Any) -> Any:
    return t.parent.tools().call(tool, {**_GOOD_TOOL_ARGUMENTS[tool](t), key: bad})


#: Every argument of every public entry point, by name, with a call that passes
#: the hostile object there and good values everywhere else.
ARGUMENTS: Final[dict[str, Callable[[Target, Any], Any]]] = {
    **{
        f"{method}({argument})": functools.partial(_admission, method, argument)
        for method in ("start", "delegate")
        for argument in ("name", "task", "final_schema", "replaces")
    },
    "continue_run(run_id)": lambda t, bad: t.parent.continue_run(bad, "more"),
    "continue_run(message)": lambda t, bad: t.parent.continue_run(t.run_id, bad),
    "continue_run(final_schema)": lambda t, bad: t.parent.continue_run(
        t.run_id, "more", final_schema=bad
    ),
    "continue_run(background)": lambda t, bad: t.parent.continue_run(
        t.run_id, "more", background=bad
    ),
    "status(run_id)": lambda t, bad: t.parent.status(bad),
    "cancel(run_id)": lambda t, bad: t.parent.cancel(bad),
    "wait(run_id)": lambda t, bad: t.parent.wait(bad, timeout=0),
    "wait(timeout)": lambda t, bad: t.parent.wait(t.run_id, timeout=bad),
    "open_parent(owner)": lambda t, bad: _enter(t.runtime.open_parent(bad)),
    "open_parent(subagents)": lambda t, bad: _enter(t.runtime.open_parent("o", subagents=bad)),
    "open_runtime(subagents)": lambda t, bad: _enter(td.open_runtime(bad)),
    "open_runtime(config)": lambda t, bad: _enter(td.open_runtime([], config=bad)),
    "open_runtime(store)": lambda t, bad: _enter(td.open_runtime([], store=bad)),
    **{f"Config({field})": functools.partial(_config, field) for field in _CONFIG_FIELDS},
    **{f"Subagent({field})": functools.partial(_subagent, field) for field in _SUBAGENT_FIELDS},
    "tools.call(name)": lambda t, bad: t.parent.tools().call(bad, {}),
    "tools.call(arguments)": lambda t, bad: t.parent.tools().call("delegate_task", bad),
    **{
        f"tools.call({tool}, {key})": functools.partial(_tool_argument, tool, key)
        for tool in _GOOD_TOOL_ARGUMENTS
        for key in ("subagent", "task", "run_id", "message", "timeout", "background")
    },
}


@pytest.mark.parametrize("kind", STORE_KINDS)
def test_objects_with_hostile_dunder_methods(kind: str) -> None:
    """Objects whose ``__str__``, ``__repr__``, ``__eq__``, ``__hash__``, ``__len__``,
    ``__bool__``, ``__format__``, ``__index__``, ``__float__``, ``__iter__``,
    ``__class__`` ... raise, never end or return junk, in every argument of every
    public entry point: only a DelegationError escapes, within bounded work (an
    endless iterable read too far raises Runaway, which fails the test)."""

    @settings(max_examples=examples(100, kind), deadline=None, phases=AS_FOUND)
    @given(
        calls=st.lists(
            st.tuples(st.sampled_from(sorted(ARGUMENTS)), hs.hostile_dunder_objects()),
            min_size=1,
            max_size=8,
        )
    )
    def check(calls: list[tuple[str, hs.Built]]) -> None:
        async def main(folder: Path) -> None:
            config = td.Config(fail_closed=False)
            subagents = [td.Subagent("echo", echo, timeout_seconds=100.0)]
            store = make_store(kind, folder)
            with real_time_limit(SESSION_SECONDS, "the session"):
                async with (
                    td.open_runtime(subagents, config=config, store=store) as runtime,
                    runtime.open_parent("host") as parent,
                ):
                    done = await parent.delegate("echo", "done")
                    target = Target(runtime, parent, done.run_id)
                    for argument, recipe in calls:
                        await _call_with(target, argument, hs.build(recipe))
                    # Still usable.
                    again = await parent.delegate("echo", "still works")
                    assert again.final_result == "still works"

        run_session(kind, main)

    check()


async def _call_with(target: Target, argument: str, bad: Any) -> None:
    with real_time_limit(CALL_SECONDS, argument):
        try:
            answer = ARGUMENTS[argument](target, bad)
            if inspect.isawaitable(answer):
                await answer
        except td.DelegationError as exc:
            check_error(exc)
