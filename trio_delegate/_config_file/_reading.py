"""Reading a configuration file: a regular file of at most 1 MiB of UTF-8 TOML."""

from __future__ import annotations

import os
import re
import stat
import tomllib
from pathlib import Path
from typing import Any, Final

from ._problems import Problem

__all__ = ["MAX_CONFIG_BYTES", "MAX_KEY_PARTS", "read_toml", "special_kind"]

#: Largest configuration file read: far above any real one.
MAX_CONFIG_BYTES: Final = 1024 * 1024

#: Most parts of one dotted key or table name (``a.b.c = 1``, ``[a.b.c]``: 3).
MAX_KEY_PARTS: Final = 32

# A dotted key of more parts (that many dots), from its start: bare or quoted parts, each
# followed by a dot. tomllib takes time growing with the square of a key's
# parts (a key of 50,000 parts: minutes), so such a file is refused unread.
# Possessive quantifiers and a start only where no part goes on keep the
# search linear in the file's length.
_DEEP_KEY: Final = re.compile(
    r"""(?<![\w.'"-])(?:(?:[\w-]++|"(?:[^"\\\n]|\\.)*+"|'[^'\n]*+')[ \t]*+\.[ \t]*+)"""
    f"{{{MAX_KEY_PARTS}}}"
)


def read_toml(path: Path) -> dict[str, Any]:
    """The TOML data of the configuration file *path*.

    Raises:
        Problem: about the file as a whole: missing, not a regular file,
            unreadable, too large, not UTF-8 or not TOML.
    """
    try:
        data = _read_regular_file(path, MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise Problem(
            "no such file", "pass the path of an existing TOML file to --config"
        ) from None
    except _NotRegular as exc:
        raise Problem(
            f"is {exc.args[0]}, not a regular file",
            "pass the path of the server's TOML configuration file to --config",
        ) from None
    except OSError as exc:
        raise Problem(f"cannot be read: {exc}", "check the path and its permissions") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise Problem(
            f"is larger than {MAX_CONFIG_BYTES // 1024} KiB",
            "pass the server's configuration file, not another file",
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Problem(f"is not UTF-8 text: {exc}", "save it as UTF-8, as TOML requires") from None
    deep = _DEEP_KEY.search(text)
    if deep is not None:
        line = text.count("\n", 0, deep.start()) + 1
        raise Problem(
            f"has a key of more than {MAX_KEY_PARTS} dotted parts (line {line})",
            "a server configuration needs a few levels at most: flatten it",
        )
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise Problem(f"is not valid TOML: {exc}", "fix the syntax at that place") from None
    except RecursionError:
        # tomllib parses nested arrays and inline tables recursively.
        raise Problem(
            "nests arrays or inline tables too deeply to read",
            "a server configuration needs a few levels at most: flatten it",
        ) from None
    except ValueError as exc:
        # An integer with more digits than Python converts (4,300 by default).
        raise Problem(
            f"holds a number that cannot be read: {str(exc)[:200]}", "write it shorter"
        ) from None


class _NotRegular(OSError):
    """A path names something that is not a regular file; the argument says what."""


def special_kind(path: Path) -> str | None:
    """What *path* is when it exists and is not a regular file (or a folder)."""
    try:
        mode = path.stat().st_mode
    except (OSError, ValueError):
        # Missing (created later) or unreadable: said when opened. A NUL in
        # the path is a ValueError: said by whoever checks the path first.
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a file"


def _read_regular_file(path: Path, most: int) -> bytes:
    """At most *most* bytes of the regular file *path*.

    Opened without blocking and checked on the open descriptor: a FIFO
    would block the open (and every read) until a writer came, a device
    could be read for ever.

    Raises:
        _NotRegular: *path* is a FIFO, a socket, a device or a folder.
        OSError: it cannot be opened or read.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except IsADirectoryError:
        raise _NotRegular("a folder") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _NotRegular("a folder" if stat.S_ISDIR(mode) else special_kind(path) or "special")
        with os.fdopen(fd, "rb", closefd=True) as file:
            fd = -1
            return file.read(most)
    finally:
        if fd >= 0:
            os.close(fd)
