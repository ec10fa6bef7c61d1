"""The writer's answer about one admission record (``_writer``), waited for uninterruptibly."""

from __future__ import annotations

from collections.abc import Callable
from typing import final

import trio

from .._errors import StoreError

__all__ = ["Answer"]


@final
class Answer:
    """The writer's answer about one admission record, waited for uninterruptibly.

    The caller parks until the writer calls it. A cancellation cannot end the
    wait (the caller meets it at its next checkpoint, with its handle), as if
    the wait were in a shielded cancel scope; a ``KeyboardInterrupt`` for a
    waiting main task ends it at once, as it would there. Parking directly
    needs neither an event nor a shielded scope for each admission.
    """

    __slots__ = ("_answered", "_error", "_on_durable", "_task")

    def __init__(self, on_durable: Callable[[], None]) -> None:
        self._on_durable = on_durable
        self._answered = False
        self._error: StoreError | None = None
        self._task: trio.lowlevel.Task | None = None

    def __call__(self, error: StoreError | None) -> None:
        """The writer's answer: committed (``None``) or the error."""
        if error is None:
            self._on_durable()
        else:
            self._error = error
        self._answered = True
        task = self._task
        if task is not None:
            self._task = None
            trio.lowlevel.reschedule(task)

    async def wait(self) -> None:
        """Until the answer; a cancellation does not end it.

        Raises:
            StoreError: the record could not be committed.
        """
        if self._answered:  # answered at once (a stopped writer)
            await trio.lowlevel.cancel_shielded_checkpoint()
        else:
            self._task = trio.lowlevel.current_task()
            await trio.lowlevel.wait_task_rescheduled(self._abort)
        if self._error is not None:
            raise self._error

    def _abort(self, raise_cancel: trio.lowlevel.RaiseCancelT) -> trio.lowlevel.Abort:
        # Trio asks once per wait, for a cancellation or a KeyboardInterrupt;
        # raise_cancel raises the one it is for (it has no other effect).
        try:
            raise_cancel()
        except trio.Cancelled:
            return trio.lowlevel.Abort.FAILED  # keep waiting, as if shielded
        except BaseException:
            pass
        # A KeyboardInterrupt: stop waiting (Trio raises it in the caller).
        self._task = None
        return trio.lowlevel.Abort.SUCCEEDED
