"""Run ids: random, never derived from a subagent's name or the task (contract §8)."""

from __future__ import annotations

import itertools
import os
import secrets
from collections.abc import Callable, Iterator
from typing import final

__all__ = ["RUN_ID_BYTES", "RunIds", "new_runtime_id"]

#: 128 random bits; contract §8 asks for at least 96.
RUN_ID_BYTES = 16


#: Ids cut from one read of the kernel's random source.
_BATCH = 256


def _batches() -> Iterator[list[str]]:
    """Batches of fresh run ids, each cut from one read of ``os.urandom``."""
    while True:
        # Cut in C rather than by a Python loop: the hex digits of each id's
        # bytes are separated by a space, which becomes the next id's prefix.
        digits = os.urandom(RUN_ID_BYTES * _BATCH).hex(" ", RUN_ID_BYTES)
        yield ("run_" + digits.replace(" ", " run_")).split(" ")


@final
class RunIds:
    """Fresh run ids for one runtime, cut from batches of random bytes.

    Reading the kernel's random source once per batch instead of once per run
    makes an id cost a slice; every id still carries RUN_ID_BYTES of
    ``os.urandom`` that no other id shares.

    Attributes:
        new: a fresh id. The ``__next__`` of a C iterator over the batches,
            so that an id costs no Python frame of its own (a batch is cut
            once per ``_BATCH`` ids).
    """

    __slots__ = ("new",)

    def __init__(self) -> None:
        self.new: Callable[[], str] = itertools.chain.from_iterable(_batches()).__next__


def new_runtime_id() -> str:
    """A fresh id for one runtime instance (recorded with its runs in a store)."""
    return "rt_" + secrets.token_hex(RUN_ID_BYTES)
