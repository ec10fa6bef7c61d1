"""Run ids: random, never derived from a subagent's name or the task (contract §8)."""

from __future__ import annotations

import os
import secrets
from typing import final

__all__ = ["RUN_ID_BYTES", "RunIds", "new_runtime_id"]

#: 128 random bits; contract §8 asks for at least 96.
RUN_ID_BYTES = 16


@final
class RunIds:
    """Fresh run ids for one runtime, cut from a batch of random bytes.

    Reading the kernel's random source once per batch instead of once per run
    makes an id cost a slice; every id still carries RUN_ID_BYTES of
    ``os.urandom`` that no other id shares.
    """

    __slots__ = ("_ready",)

    _BATCH = 256  # ids per read

    def __init__(self) -> None:
        self._ready: list[str] = []

    def new(self) -> str:
        ready = self._ready
        if not ready:
            # Cut in C rather than by a Python loop: the hex digits of each id's
            # bytes are separated by a space, which becomes the next id's prefix.
            digits = os.urandom(RUN_ID_BYTES * self._BATCH).hex(" ", RUN_ID_BYTES)
            ready.extend(("run_" + digits.replace(" ", " run_")).split(" "))
        return ready.pop()


def new_runtime_id() -> str:
    """A fresh id for one runtime instance (recorded with its runs in a store)."""
    return "rt_" + secrets.token_hex(RUN_ID_BYTES)
