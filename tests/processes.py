"""Watching real processes from tests: pid files, liveness, bounded waits."""

from __future__ import annotations

import os
from pathlib import Path

import trio

# What a test script includes to publish a pid: written atomically, so a
# reader never sees half a number.
WRITE_PID = """
import os, sys
def write_pid(path, pid=None):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(pid or os.getpid()))
    os.replace(tmp, path)
"""


def alive(pid: int) -> bool:
    """Whether *pid* is a live process (a zombie awaiting its reaper is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def pid_in(path: Path) -> int | None:
    return int(path.read_text()) if path.exists() else None


async def read_pid(path: Path) -> int:
    """The pid a script wrote to *path*, once it is there."""
    with trio.fail_after(30):
        while (pid := pid_in(path)) is None:  # noqa: ASYNC110 - written by another process
            await trio.sleep(0.01)
    return pid


async def gone(pid: int) -> None:
    """Wait (boundedly) until *pid* is no longer a live process."""
    with trio.fail_after(30):
        while alive(pid):  # noqa: ASYNC110 - polling another process
            await trio.sleep(0.01)
