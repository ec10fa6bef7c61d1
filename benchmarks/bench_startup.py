"""Row 12: ``trio-delegate serve`` from spawn to its first answer, idle and with a core busy.

An MCP client starts the server and waits for its answer to the first
request; Codex lists a session's tools after waiting 1 s for a server that
is not ``required``, and Claude Code's ``server/discover`` probe has a
timeout of its own. Each repetition spawns, one after the other:

* ``python`` — the interpreter answering one line (process start, pipes);
* ``bare SDK`` — a bare low-level ``mcp`` server under Trio
  (``benchmarks/_bare_mcp.py``): the floor of any server on this SDK;
* ``serve`` — ``trio-delegate serve`` as ``mcp-config`` starts it, asked
  ``initialize`` (the legacy handshake);
* ``serve discover`` — the same, asked ``server/discover`` (2026-07-28).

Each is timed on the wall clock from spawn to the first line on its stdout
(the answer), after a request written at once. The ratio to the bare SDK is
taken per repetition, side by side: ``serve`` answers through the SDK, so the
bare server's time is its floor, and on an idle machine the median ratio must
not exceed :data:`RATIO_BOUND`. Then the same again while a process of this
benchmark spins on one core (a loaded machine: other builds, the client
itself).
"""

from __future__ import annotations

import functools
import json
import os
import selectors
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from trio_delegate._mcp_config import serve_command

from ._model import Figure, Options, Row, Sample, Status, judge, paired_ratios
from ._timing import interleaved

__all__ = ["RATIO_BOUND", "TARGET_SECONDS", "bench", "first_answer"]

#: Spawn to the first answer on an idle machine, median (seconds).
TARGET_SECONDS = 1.0
#: The most the first answer may take on an idle machine, as a multiple of a
#: bare SDK server's (the median of the paired ratios): what the runtime adds
#: to the SDK's start-up.
RATIO_BOUND = 1.2
#: Longest wait for one answer before the measurement is called broken.
_TIMEOUT_SECONDS = 60.0

_BARE = Path(__file__).resolve().parent / "_bare_mcp.py"
#: The spinning process of the busy rounds: pure Python, one core.
_SPIN = "while True:\n    pass\n"

_INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "0"},
    },
}
_DISCOVER = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "server/discover",
    "params": {
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "0"},
            "io.modelcontextprotocol/clientCapabilities": {},
        }
    },
}
_CONFIG = """
[[subagents]]
name = "echo"
description = "Echoes its task."
command = [{python}, "-c", "import sys; print(sys.stdin.read())"]
"""
#: The python contender: read the request, answer at once.
_ECHO = "import sys; sys.stdin.readline(); print('{\"result\": {}}', flush=True)"


def first_answer(argv: Sequence[str], request: dict[str, object]) -> float:
    """Seconds from spawning *argv* to the first line it writes on stdout.

    The request is written as soon as the process exists (as a client
    does); the process is then told to stop by closing its stdin.

    Raises:
        RuntimeError: no answer within a minute, or an answer that is not a
            JSON-RPC result.
    """
    line = (json.dumps(request) + "\n").encode()
    started = time.perf_counter()
    process = subprocess.Popen(
        list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    try:
        assert process.stdin is not None
        assert process.stdout is not None
        process.stdin.write(line)
        process.stdin.flush()
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            if not selector.select(_TIMEOUT_SECONDS):
                raise RuntimeError(f"{argv[0]} did not answer within {_TIMEOUT_SECONDS:g} s")
        answer = process.stdout.readline()
        elapsed = time.perf_counter() - started
        if b'"result"' not in answer:
            raise RuntimeError(f"{argv[0]} answered {answer[:200]!r}")
        return elapsed
    finally:
        if process.stdin is not None:
            process.stdin.close()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


@contextmanager
def _spinning() -> Iterator[None]:
    """One core kept busy by a pure-Python loop while the block runs."""
    spin = subprocess.Popen([sys.executable, "-c", _SPIN])
    try:
        time.sleep(0.2)  # let it take its core before the first measurement
        yield
    finally:
        spin.kill()
        spin.wait()


def _contenders(config: Path) -> dict[str, Callable[[], float]]:
    serve = serve_command(config)
    # The pair first (bare SDK, serve): they run back to back, in turn first.
    return {
        "bare SDK": functools.partial(first_answer, [sys.executable, str(_BARE)], _INITIALIZE),
        "serve": functools.partial(first_answer, serve, _INITIALIZE),
        "python": functools.partial(first_answer, [sys.executable, "-c", _ECHO], _INITIALIZE),
        "serve discover": functools.partial(first_answer, serve, _DISCOVER),
    }


def _row(number: str, busy: bool, samples: dict[str, Sample]) -> Row:
    ms = {name: sample.scaled(1e3) for name, sample in samples.items()}
    ratio = paired_ratios(samples["serve"], samples["bare SDK"])
    serve = samples["serve"]
    if busy:
        status = Status.INFO
    elif ratio.median > RATIO_BOUND:
        status = Status.FAIL
    else:
        status = judge(serve.median, TARGET_SECONDS, None)
    load = "/".join(f"{value:.1f}" for value in os.getloadavg())
    return Row(
        number,
        "serve: spawn to first answer"
        + (", one core kept busy by a spinning process" if busy else ", no core kept busy")
        + " (wall ms)",
        status,
        baseline=f"python {ms['python'].show('{:.0f}', 'ms')}<br>"
        f"bare SDK {ms['bare SDK'].show('{:.0f}', 'ms')}",
        measured=f"initialize {ms['serve'].show('{:.0f}', 'ms')}<br>"
        f"server/discover {ms['serve discover'].show('{:.0f}', 'ms')}",
        comparison=f"{ratio.show('{:.2f}', 'x')} bare SDK",
        target="" if busy else f"≤ {TARGET_SECONDS * 1e3:.0f} ms",
        bound="" if busy else f"≤ {RATIO_BOUND:g}x bare SDK",
        note=f"fresh process per answer, wall clock from spawn to the answer line; "
        f"{ms['serve'].median - ms['bare SDK'].median:+.0f} ms against the bare SDK server; "
        f"load average {load} at the end",
        data={name: sample.to_json() for name, sample in ms.items()}
        | {"ratio_to_bare": ratio.to_json()},
        figures=(
            Figure("initialize ms", ms["serve"].median, 0.25),
            Figure("ratio to bare SDK", ratio.median, 0.15),
        ),
    )


def bench(options: Options) -> list[Row]:
    # Each answer is a process start: the quick suite takes fewer of them.
    repetitions = options.repetitions if options.full else 3
    with tempfile.TemporaryDirectory() as folder:
        config = Path(folder) / "subagents.toml"
        config.write_text(_CONFIG.format(python=json.dumps(sys.executable)))
        contenders = _contenders(config)
        idle = interleaved(contenders, repetitions, per=1)
        with _spinning():
            busy = interleaved(contenders, repetitions, per=1)
    return [_row("12a", False, idle), _row("12b", True, busy)]


if __name__ == "__main__":
    for row in bench(Options.quick()):
        print(row.number, row.title, row.status.value)
        print("  ", row.baseline.replace("<br>", "; "), "|", row.measured.replace("<br>", "; "))
        print("  ", row.comparison, "|", row.note)
