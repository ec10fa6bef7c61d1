"""Run ids: random, never derived from a subagent's name or the task (contract §8)."""

from __future__ import annotations

import os
import secrets

__all__ = ["RUN_ID_BYTES", "new_run_id", "new_runtime_id"]

#: 128 random bits; contract §8 asks for at least 96.
RUN_ID_BYTES = 16


def new_run_id() -> str:
    """A fresh run id such as ``run_3f9c…`` (32 hex digits after the prefix)."""
    # What secrets.token_hex does, without its two wrapper calls (one id per run).
    return "run_" + os.urandom(RUN_ID_BYTES).hex()


def new_runtime_id() -> str:
    """A fresh id for one runtime instance (recorded with its runs in a store)."""
    return "rt_" + secrets.token_hex(RUN_ID_BYTES)
