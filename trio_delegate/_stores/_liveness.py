"""Which runtimes sharing a store file are still alive, decided by the kernel.

Each runtime attached to an SQLite store holds an exclusive ``flock`` on its
own lock file beside the database. The kernel drops the lock when the
process dies, however it dies, so "is runtime X gone?" has an exact answer:
X is gone when its lock can be taken (or its lock file is missing). No
wall-clock guess, no heartbeat.

Runtime ids come from the database, which anything may have written: a lock
file's name is built only from an id of the exact shape a runtime makes
(``rt_`` and 32 lowercase hex digits), never from anything else.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import final

from ._protocol import is_runtime_id

__all__ = ["RuntimeLock", "lock_dir_for", "runtime_is_gone"]


def lock_dir_for(database: Path) -> Path:
    """The folder of lock files for *database* (``runs.db`` → ``runs.db-runtimes``)."""
    return database.with_name(database.name + "-runtimes")


def _lock_path(lock_dir: Path, runtime_id: str) -> Path:
    if not is_runtime_id(runtime_id):
        # The stores check ids first and say which row is wrong; this is the
        # last line of defence before a path is built.
        raise ValueError(f"not a runtime id: {runtime_id!r}")
    return lock_dir / f"{runtime_id}.lock"


def _take(path: Path) -> int:
    fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BaseException:
        os.close(fd)
        raise
    return fd


@final
class RuntimeLock:
    """The lock a live runtime holds for as long as it is attached."""

    __slots__ = ("_fd", "lock_dir", "path")

    def __init__(self, lock_dir: Path, runtime_id: str) -> None:
        self.path = _lock_path(lock_dir, runtime_id)
        self.lock_dir = lock_dir
        lock_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._fd: int | None = _take(self.path)

    def renew(self) -> None:
        """Make sure the lock file still is the one this runtime holds.

        Should someone have removed it (a clean-up of the folder), the others
        would read this runtime as gone: take a new one.
        """
        fd = self._fd
        if fd is None:
            return
        held = os.fstat(fd)
        try:
            current = os.stat(self.path, follow_symlinks=False)
        except FileNotFoundError:
            current = None
        if current is not None and (current.st_dev, current.st_ino) == (
            held.st_dev,
            held.st_ino,
        ):
            return
        self.lock_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        if current is not None:
            self.path.unlink(missing_ok=True)
        self._fd = _take(self.path)
        os.close(fd)

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

    Raises:
        ValueError: *runtime_id* is not a runtime id.
    """
    path = _lock_path(lock_dir, runtime_id)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
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
