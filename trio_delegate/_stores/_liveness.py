"""Which runtimes sharing a store file are still alive, decided by the kernel.

Each runtime attached to an SQLite store holds an exclusive ``flock`` on its
own lock file beside the database. The kernel drops the lock when the
process dies, however it dies, so "is runtime X gone?" has an exact answer:
X is gone when its lock can be taken (or its lock file is missing). No
wall-clock guess, no heartbeat.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import final

__all__ = ["RuntimeLock", "lock_dir_for", "runtime_is_gone"]


def lock_dir_for(database: Path) -> Path:
    """The folder of lock files for *database* (``runs.db`` → ``runs.db-runtimes``)."""
    return database.with_name(database.name + "-runtimes")


def _lock_path(lock_dir: Path, runtime_id: str) -> Path:
    return lock_dir / f"{runtime_id}.lock"


@final
class RuntimeLock:
    """The lock a live runtime holds for as long as it is attached."""

    __slots__ = ("_fd", "path")

    def __init__(self, lock_dir: Path, runtime_id: str) -> None:
        lock_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.path = _lock_path(lock_dir, runtime_id)
        fd = os.open(self.path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BaseException:
            os.close(fd)
            raise
        self._fd: int | None = fd

    def release(self) -> None:
        """Drop the lock and remove the file (idempotent)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        # Unlink first: a reader that opens the path afterwards finds nothing
        # (gone), never an unlocked file of a runtime that is still closing.
        self.path.unlink(missing_ok=True)
        os.close(fd)


def runtime_is_gone(lock_dir: Path, runtime_id: str) -> bool:
    """Whether the runtime *runtime_id* no longer holds its lock.

    A gone runtime's leftover lock file is removed.
    """
    path = _lock_path(lock_dir, runtime_id)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    else:
        path.unlink(missing_ok=True)
        return True
    finally:
        os.close(fd)
