"""Command subagents: a runner that runs one program per run.

Each run starts the command in a process group of its own (a new session),
writes the task to its stdin and closes it, and reads its stdout as the
result. What the runtime asks of a runner maps onto the process like this:

* the run completes with stdout, decoded as UTF-8 and trimmed (parsed as JSON
  when the run has a ``final_schema``);
* a non-zero exit, a signal, output that is not UTF-8 (or not JSON when JSON
  is due) fail the run with :class:`CommandFailedError`, naming the exit and
  the last lines of stderr;
* more than ``max_output_bytes`` on stdout fails the run with
  :class:`LimitExceededError` as soon as the limit is passed, without holding
  more than that in memory;
* cancellation and the child deadline send SIGTERM to the whole group, then
  SIGKILL after ``kill_grace_seconds``; the command is always reaped, and
  processes it left behind in its group are ended too;
* progress, usage and questions come as JSON lines on the descriptor named
  by ``TRIO_DELEGATE_FD`` (:mod:`._command_talk`), so stdout stays the result.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shlex
import signal
import subprocess
import tempfile
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final, final

import attrs
import trio

from .._checks import describe
from .._core import ChildContext
from .._errors import CommandFailedError, InvalidArgumentsError, LimitExceededError
from .._json import parse
from .._threads import run_sync
from ._command_talk import FD_VARIABLE, Talk

__all__ = [
    "INLINE_OUTPUT_BYTES",
    "CommandFailedError",
    "CommandRunner",
    "Finished",
    "json_file",
    "quote",
    "run_process",
]

#: How much of stdout is read at a time.
_CHUNK_BYTES: Final = 64 * 1024
#: Output up to which a result is read on the event loop (well under a
#: millisecond of decoding and parsing); more is read on a worker thread.
INLINE_OUTPUT_BYTES: Final = 64 * 1024
#: The longest stdout line handed to a line reader as it comes (see
#: :func:`run_process`); longer ones are only in the whole output.
LINE_BYTES: Final = 64 * 1024
#: How much of the end of stderr is kept for error messages.
_STDERR_TAIL_BYTES: Final = 8 * 1024
#: How many of its last lines an error message shows.
_STDERR_TAIL_LINES: Final = 20
#: How long output may go on flowing after the command exited (written by
#: processes it left behind) before they are stopped.
_DRAIN_SECONDS: Final = 2.0
#: How often to look whether processes left in the group have exited.
_GROUP_POLL_SECONDS: Final = 0.02
#: How much of an unusable output an error message quotes.
_QUOTE_CHARS: Final = 200


def _to_command(value: Any) -> tuple[str, ...]:
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise InvalidArgumentsError(
            f"command must be a sequence of strings (the program, then its arguments), got "
            f"{describe(value)}; for example ['python3', 'summarize.py']"
        )
    command = tuple(value)
    if not command:
        raise InvalidArgumentsError("command must name a program; it is empty")
    for index, part in enumerate(command):
        if not isinstance(part, str) or "\0" in part:
            raise InvalidArgumentsError(
                f"command[{index}] must be a string without NUL characters, got {describe(part)}"
            )
    if not command[0]:
        raise InvalidArgumentsError("command[0], the program, must not be empty")
    return command


def _to_cwd(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str | os.PathLike):
        raise InvalidArgumentsError(f"cwd must be a path or None, got {describe(value)}")
    return os.fspath(value)


def _to_env(value: Any) -> Mapping[str, str]:
    if not isinstance(value, Mapping):
        raise InvalidArgumentsError(
            f"env must be a mapping of variable names to strings, got {describe(value)}"
        )
    for key, text in value.items():
        if not isinstance(key, str) or not key or "=" in key or "\0" in key:
            raise InvalidArgumentsError(
                f"env has the variable name {describe(key)}; names are non-empty strings "
                "without '=' or NUL"
            )
        if not isinstance(text, str) or "\0" in text:
            raise InvalidArgumentsError(
                f"env[{key!r}] must be a string without NUL characters, got {describe(text)}"
            )
    return MappingProxyType(dict(value))


def _check_limit(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgumentsError(
            f"max_output_bytes must be an integer >= 1, got {describe(value)}"
        )


def _check_grace(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    ok = (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and math.isfinite(value)
        and value >= 0
    )
    if not ok:
        raise InvalidArgumentsError(
            f"kill_grace_seconds must be a finite number of seconds >= 0, got {describe(value)}"
        )


@final
@attrs.frozen(eq=False)
class CommandRunner:
    """A runner that runs a program for each run: task on stdin, result on stdout.

    Use it as a :class:`Subagent`'s runner::

        td.Subagent("summarizer", td.CommandRunner(["python3", "summarize.py"]))

    The process gets the task text on stdin (then end of file), and these
    variables on top of this process's environment and *env*:
    ``TRIO_DELEGATE_RUN_ID``, ``TRIO_DELEGATE_SUBAGENT``, ``TRIO_DELEGATE_FINAL_SCHEMA``
    (the run's JSON Schema, when it has one), ``TRIO_DELEGATE_FD`` and, for a
    continuation, ``TRIO_DELEGATE_HISTORY_FILE`` (a JSON file holding
    ``ctx.history``; the new message is on stdin).

    ``TRIO_DELEGATE_FD`` is a descriptor (a Unix stream socket) on which the
    process reports progress and usage and asks questions, one JSON object a
    line (``{"progress": {...}}``, ``{"usage": {...}}``, ``{"ask": {...},
    "id": ...}``), and reads each ask's answer line back. A line that breaks
    the protocol fails the run with :class:`CommandFailedError`.

    Args:
        command: the program and its arguments; no shell is involved.
        cwd: the working directory (default: the current one). A relative
            program path is looked up from it.
        env: variables added to the inherited environment.
        max_output_bytes: the most stdout accepted; past it the run fails.
        kill_grace_seconds: how long the process group has to exit after
            SIGTERM before it gets SIGKILL.

    Raises:
        InvalidArgumentsError: when any argument is malformed.
    """

    command: tuple[str, ...] = attrs.field(converter=_to_command)
    cwd: str | None = attrs.field(default=None, kw_only=True, converter=_to_cwd)
    env: Mapping[str, str] = attrs.field(
        factory=lambda: MappingProxyType({}), kw_only=True, converter=_to_env
    )
    max_output_bytes: int = attrs.field(default=1_000_000, kw_only=True, validator=_check_limit)
    kill_grace_seconds: float = attrs.field(default=2.0, kw_only=True, validator=_check_grace)

    async def __call__(self, ctx: ChildContext) -> Any:
        """Run the command for one run and return its result.

        Raises:
            CommandFailedError: the process failed, its output is unusable, or
                it broke the protocol of ``TRIO_DELEGATE_FD``.
            LimitExceededError: stdout was longer than ``max_output_bytes``.
        """
        async with _history_file(ctx.history) as history_path:
            finished = await run_process(
                ctx,
                self.command,
                ctx.task.encode(errors="replace"),
                cwd=self.cwd,
                env=self._environment(ctx, history_path),
                max_output_bytes=self.max_output_bytes,
                kill_grace_seconds=self.kill_grace_seconds,
                talk=True,
            )
        if len(finished.stdout) <= INLINE_OUTPUT_BYTES:
            return self._result(ctx, finished)
        # A long stdout is decoded (and parsed) on a worker thread: the event
        # loop, which every other run shares, is never held by it.
        return await run_sync(self._result, ctx, finished)

    # -- the process ------------------------------------------------------------

    def _environment(self, ctx: ChildContext, history_path: str | None) -> dict[str, str]:
        env = {**os.environ, **self.env}
        env["TRIO_DELEGATE_RUN_ID"] = ctx.run_id
        env["TRIO_DELEGATE_SUBAGENT"] = ctx.subagent
        # Variables of an enclosing run must not leak into this one.
        env.pop("TRIO_DELEGATE_FINAL_SCHEMA", None)
        env.pop("TRIO_DELEGATE_HISTORY_FILE", None)
        if ctx.final_schema is not None:
            env["TRIO_DELEGATE_FINAL_SCHEMA"] = json.dumps(ctx.final_schema)
        if history_path is not None:
            env["TRIO_DELEGATE_HISTORY_FILE"] = history_path
        return env

    # -- the result ---------------------------------------------------------------

    def _result(self, ctx: ChildContext, finished: Finished) -> Any:
        if finished.returncode != 0:
            raise finished.failure(ctx)
        try:
            text = finished.text()
        except CommandFailedError as exc:
            raise finished.failure(ctx, exc.message) from None
        if ctx.final_schema is None:
            return text
        try:
            return parse(text)
        except ValueError as exc:
            raise finished.failure(
                ctx,
                f"wrote stdout that is not JSON ({exc}), but the run has a final_schema and "
                f"its result must be one JSON value; stdout began {quote(text)!r}",
            ) from None


@final
@attrs.frozen
class Finished:
    """A command that ran to its end: how it exited, its stdout and the end of its stderr.

    Attributes:
        program: the command, shortened, for messages (``command `a b` ``).
        returncode: the exit code (negative: killed by that signal).
        stdout: everything it wrote to stdout.
        stderr_tail: the last lines of its stderr.
    """

    program: str
    returncode: int
    stdout: bytes
    stderr_tail: str

    def text(self) -> str:
        """stdout decoded as UTF-8 and trimmed.

        Raises:
            CommandFailedError: stdout is not UTF-8 (the message says how to fix it).
        """
        try:
            return self.stdout.decode("utf-8").strip()
        except UnicodeDecodeError as exc:
            raise CommandFailedError(
                f"wrote stdout that is not UTF-8 (at byte {exc.start}); make it write UTF-8 "
                "(for Python, PYTHONIOENCODING=utf-8)"
            ) from None

    def failure(self, ctx: ChildContext, what: str | None = None) -> CommandFailedError:
        """The error that fails the run: *what* went wrong (default: how it exited)."""
        code: int | None = None
        if what is None:
            code = self.returncode
            if code < 0:
                what = f"was killed by signal {_signal_name(-code)}"
            else:
                what = f"exited with code {code}"
        tail = self.stderr_tail
        detail = f"; its stderr ended with:\n{tail}" if tail else "; its stderr was empty"
        return CommandFailedError(
            f"{self.program} {what}{detail}",
            returncode=code,
            stderr_tail=tail,
            run_id=ctx.run_id,
            subagent=ctx.subagent,
        )


async def run_process(
    ctx: ChildContext,
    command: Sequence[str],
    stdin: bytes,
    *,
    cwd: str | None,
    env: Mapping[str, str],
    max_output_bytes: int,
    kill_grace_seconds: float,
    talk: bool = False,
    on_line: Callable[[bytes], None] | None = None,
) -> Finished:
    """Run *command* for the run *ctx* in a process group of its own, to its end.

    *stdin* is written and closed; stdout is collected up to
    *max_output_bytes*, and the end of stderr is kept. On cancellation (or
    once the command has exited) the whole group gets SIGTERM, then SIGKILL
    after *kill_grace_seconds*, and the command is always reaped. With
    *talk*, the command gets the channel of :mod:`._command_talk` (its
    descriptor in ``TRIO_DELEGATE_FD``) for progress, usage and questions.
    *on_line* is called with each line of stdout (without its newline) as it
    arrives, on the event loop, for lines of at most :data:`LINE_BYTES`.

    Raises:
        CommandFailedError: the program could not be started, or it broke
            the protocol of its channel.
        LimitExceededError: stdout was longer than *max_output_bytes*.
    """
    program = _describe(command)
    try:
        channel = Talk(ctx) if talk else None
    except OSError as exc:  # out of descriptors, most likely
        raise CommandFailedError(
            f"could not start {program}: no channel for it ({exc}); try again later",
            run_id=ctx.run_id,
            subagent=ctx.subagent,
        ) from exc
    environment = dict(env)
    # The descriptor of an enclosing command's run is never passed on.
    environment.pop(FD_VARIABLE, None)
    if channel is not None:
        environment[FD_VARIABLE] = str(channel.child_fd)
    try:
        try:
            process = await trio.lowlevel.open_process(
                list(command),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=cwd,
                env=environment,
                # A group of its own: signals reach everything it starts,
                # and a terminal's Ctrl-C reaches only the server.
                start_new_session=True,
                pass_fds=() if channel is None else (channel.child_fd,),
            )
        except OSError as exc:
            raise CommandFailedError(
                f"could not start {program}: {exc}; check command and cwd",
                run_id=ctx.run_id,
                subagent=ctx.subagent,
            ) from exc
        if channel is not None:
            # The process has its copy; the channel ends when it (and
            # whatever it started) closes that.
            channel.started()
        try:
            stdout, stderr = await _communicate(
                process, stdin, _Capture(max_output_bytes, on_line), channel
            )
        finally:
            await _stop(process, kill_grace_seconds)
    finally:
        if channel is not None:
            with trio.CancelScope(shield=True):
                await channel.aclose()
    if stdout.overflowed:
        raise LimitExceededError(
            f"{program} wrote more than {max_output_bytes} bytes to stdout, "
            "the most a result may have (max_output_bytes); it was stopped: make it write "
            "a shorter result",
            run_id=ctx.run_id,
            subagent=ctx.subagent,
        )
    returncode = process.returncode
    assert returncode is not None
    finished = Finished(program, returncode, bytes(stdout.data), stderr.text())
    if channel is not None and channel.failure is not None:
        raise finished.failure(ctx, f"{channel.failure}; it was stopped")
    return finished


async def _communicate(
    process: trio.Process, task: bytes, stdout: _Capture, channel: Talk | None
) -> tuple[_Capture, _Tail]:
    """Feed stdin, collect stdout and the end of stderr, until the command exits."""
    stderr = _Tail(_STDERR_TAIL_BYTES)
    assert process.stdin is not None
    assert process.stdout is not None
    assert process.stderr is not None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_feed, process.stdin, task)
        nursery.start_soon(stdout.read, process.stdout, nursery.cancel_scope)
        nursery.start_soon(stderr.read, process.stderr)
        if channel is not None:
            nursery.start_soon(channel.run, nursery.cancel_scope)
        await process.wait()
        # The pipes end when every process holding them has exited; one
        # the command left running in the background may hold them on.
        with trio.move_on_after(_DRAIN_SECONDS):
            await stdout.done.wait()
            await stderr.done.wait()
            if channel is not None:
                await channel.done.wait()
        nursery.cancel_scope.cancel()
    return stdout, stderr


async def _stop(process: trio.Process, kill_grace_seconds: float) -> None:
    """End the command's whole process group, then reap the command.

    Shielded: this runs on cancellation too, and must finish (boundedly)
    so that no process outlives its run.
    """
    with trio.CancelScope(shield=True):
        group = process.pid
        if _signal_group(group, signal.SIGTERM):
            with trio.move_on_after(kill_grace_seconds):
                await process.wait()
                # Nothing signals the exit of a process that is not our
                # child, so the rest of the group is polled.
                while _group_exists(group):  # noqa: ASYNC110
                    await trio.sleep(_GROUP_POLL_SECONDS)
            _signal_group(group, signal.SIGKILL)
        await process.wait()


def _describe(command: Sequence[str]) -> str:
    return f"command `{quote(shlex.join(command))}`"


def quote(text: str) -> str:
    """*text* cut for an error message."""
    return text if len(text) <= _QUOTE_CHARS else text[: _QUOTE_CHARS - 1] + "…"


# -- helpers ------------------------------------------------------------------------


class _Capture:
    """stdout, held up to a limit; passing it stops the command.

    With *on_line*, each line is handed to it as soon as its newline arrives
    (one longer than :data:`LINE_BYTES` is skipped), and the last line at
    the end of output.
    """

    def __init__(self, limit: int, on_line: Callable[[bytes], None] | None = None) -> None:
        self.limit = limit
        self.data = bytearray()
        self.overflowed = False
        self.done = trio.Event()
        self.on_line = on_line
        # Where the line being read starts, and how far it was searched.
        self._line_start = 0
        self._searched = 0

    async def read(self, stream: trio.abc.ReceiveStream, scope: trio.CancelScope) -> None:
        try:
            while True:
                # Never ask for more than one byte past the limit, so memory
                # stays bounded by it.
                wanted = min(_CHUNK_BYTES, self.limit - len(self.data) + 1)
                chunk = await stream.receive_some(wanted)
                if not chunk:
                    self._lines(end=True)
                    return
                self.data += chunk
                if len(self.data) > self.limit:
                    self.overflowed = True
                    del self.data[self.limit :]
                    scope.cancel()
                    return
                self._lines()
        except trio.ClosedResourceError:  # pragma: no cover - closed under us at teardown
            return
        finally:
            self.done.set()

    def _lines(self, *, end: bool = False) -> None:
        if self.on_line is None:
            return
        data = self.data
        while (newline := data.find(b"\n", self._searched)) >= 0:
            if newline - self._line_start <= LINE_BYTES:
                self.on_line(bytes(data[self._line_start : newline]))
            self._line_start = self._searched = newline + 1
        self._searched = len(data)
        if end and 0 < len(data) - self._line_start <= LINE_BYTES:
            self.on_line(bytes(data[self._line_start :]))


class _Tail:
    """The last bytes of stderr, for error messages."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.data = bytearray()
        self.done = trio.Event()

    async def read(self, stream: trio.abc.ReceiveStream) -> None:
        try:
            while chunk := await stream.receive_some(_CHUNK_BYTES):
                self.data += chunk
                if len(self.data) > self.keep:
                    del self.data[: len(self.data) - self.keep]
        except trio.ClosedResourceError:  # pragma: no cover - closed under us at teardown
            return
        finally:
            self.done.set()

    def text(self) -> str:
        lines = bytes(self.data).decode("utf-8", errors="replace").strip().splitlines()
        return "\n".join(lines[-_STDERR_TAIL_LINES:])


async def _feed(stream: trio.abc.SendStream, data: bytes) -> None:
    """Write the task to stdin and close it; a command may exit without reading it."""
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        async with stream:
            if data:
                await stream.send_all(data)


def _signal_group(group: int, signum: int) -> bool:
    """Send *signum* to process group *group*; False when the group is gone."""
    try:
        os.killpg(group, signum)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - a member changed its credentials
        return True
    return True


def _group_exists(group: int) -> bool:
    """Whether a process of *group* is still running.

    A member that has exited but waits for its reaper (a zombie) does not
    count: an orphan's reaper, the init process, may take its time.
    """
    if not _signal_group(group, 0):
        return False
    try:
        entries = os.listdir("/proc")
    except OSError:  # pragma: no cover - no procfs: trust the signal probe
        return True
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as file:
                stat = file.read()
        except OSError:
            continue
        # After the command name: state, ppid, pgrp, ...
        fields = stat.rpartition(b")")[2].split()
        if len(fields) > 2 and fields[2] == str(group).encode() and fields[0] != b"Z":
            return True
    return False


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)


@contextlib.asynccontextmanager
async def _history_file(history: tuple[Any, ...]) -> AsyncIterator[str | None]:
    """A JSON file holding a continuation's history, removed afterwards."""
    async with json_file("history", list(history) if history else None) as path:
        yield path


@contextlib.asynccontextmanager
async def json_file(kind: str, value: Any) -> AsyncIterator[str | None]:
    """A temporary file holding *value* as JSON (none when *value* is None), removed afterwards."""
    if value is None:
        yield None
        return
    text = json.dumps(value, ensure_ascii=False)
    path = await trio.to_thread.run_sync(_write_temporary, text, kind)
    try:
        yield path
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _write_temporary(text: str, kind: str) -> str:
    handle, path = tempfile.mkstemp(prefix=f"trio-delegate-{kind}-", suffix=".json")
    with os.fdopen(handle, "w", encoding="utf-8") as file:
        file.write(text)
    return path
