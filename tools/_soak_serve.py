"""``trio-delegate serve``, timed as the soak times its workers (used by ``tools/_soak_mcp.py``).

``python -m _soak_serve SAMPLES ARGS...`` runs the real ``trio-delegate``
command line with *ARGS* (``serve --config ...``), with one instrument added
to its event loop: every task step is timed in CPU time of the loop's
thread, and about once a second (at the first step after a second has
passed, and when the loop ends) a line of the workers' sample shape goes to
*SAMPLES*: wall time, this process's resident memory, the longest step since
the line before and its task. The command's own ``trio.run`` takes no
instruments, so this module hands them in by wrapping ``trio.run`` for the
one call the command makes.
"""

from __future__ import annotations

import functools
import sys
import time
import unittest.mock
from pathlib import Path
from typing import Any

import _soak_report
import trio

from trio_delegate._cli._main import main


class ServeSampler(_soak_report.StepTimer):
    """A step timer that appends a sample line to *path* about every second."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._written = time.time()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        super().after_task_step(task)
        now = time.time()
        if now - self._written >= _soak_report.SAMPLE_SECONDS:
            self.write(now)

    def after_run(self) -> None:
        self.write(time.time())

    def write(self, now: float) -> None:
        self._written = now
        longest, task = self.take()
        # The MCP driver counts the connection's calls: none here.
        _soak_report.append_sample(self.path, answered=0, events=0, longest=longest, task=task)


def run(samples: Path, argv: list[str]) -> int:
    """The ``trio-delegate`` command *argv*, its event loop timed into *samples*."""
    sampler = ServeSampler(samples)
    plain_run = trio.run

    @functools.wraps(plain_run)
    def timed_run(*args: Any, **kwargs: Any) -> Any:
        kwargs["instruments"] = [*kwargs.get("instruments", ()), sampler]
        return plain_run(*args, **kwargs)

    with unittest.mock.patch.object(trio, "run", timed_run):
        return main(argv)


if __name__ == "__main__":
    raise SystemExit(run(Path(sys.argv[1]), sys.argv[2:]))
