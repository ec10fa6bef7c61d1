"""How ``trio-delegate serve`` ends whatever its runners do (contract §18).

A runner is user code, and one can hold up what the server does on its way
out in two ways. One that does not stop when cancelled holds the runtime
open (Trio cannot kill a task). One that blocks the event loop (a
``time.sleep`` in an ``async def``, a long call into C) holds up every task,
Trio's signal watcher and the reader of stdin's end included. So the
countdown to a forced exit is never armed by the event loop alone:

- a stop signal is heard on a thread of its own: CPython's C-level signal
  handler writes each signal's number to the wakeup file descriptor whatever
  the main thread is doing, and :func:`relayed_signals` takes that
  descriptor over, hands every byte on to Trio's own, and tells the
  :class:`ExitGuard`;
- the end of stdin is reported by the thread that reads it (see
  ``trio_delegate.mcp._serve``).

The :class:`ExitGuard`'s timer then names the runs it abandons on stderr
and ends the process, from its own thread.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
from collections.abc import Callable, Collection, Iterator
from typing import TYPE_CHECKING, Final

from ..lowlevel import unstopped_runs
from ._server import logger

if TYPE_CHECKING:
    from .. import Runtime

__all__ = ["EXIT_MARGIN_SECONDS", "ExitGuard", "relayed_signals", "signal_name", "stuck_runs"]

#: How long after the grace the server waits for its runtime to close before it
#: exits anyway (contract §18): room for the stores to commit the last records.
EXIT_MARGIN_SECONDS: Final = 3.0


class ExitGuard:
    """Ends the process if the runtime's close outlasts the grace (contract §18).

    A runner that does not stop is decided ``cancel_grace_seconds`` after
    its cancellation, but its task holds the runtime open until it returns,
    and Trio cannot kill it. Once the server is stopping, a timer on a
    daemon thread (which a runner blocking the event loop cannot hold up
    either) names the runs it abandons on stderr and exits with a non-zero
    status: 128 plus the signal's number, or 1 when the input ended.

    Every method may be called from any thread.

    Attributes:
        runtime: the runtime whose runs are named, once it is open.
    """

    def __init__(self, grace_seconds: float) -> None:
        """Make a guard that is not armed yet.

        Args:
            grace_seconds: the runtime's ``Config.cancel_grace_seconds``.
        """
        self.runtime: Runtime | None = None
        self._grace = grace_seconds
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._signalled = False
        self._exiting = False

    def arm(self, why: str, signum: int | None) -> None:
        """Start the countdown (once: later calls keep the first one).

        Args:
            why: what stops the server, for the exit's line on stderr.
            signum: the signal that stops it, or ``None`` for the end of
                the connection (the exit status is then 1).
        """
        with self._lock:
            if self._timer is not None:
                return
            timer = threading.Timer(self._grace + EXIT_MARGIN_SECONDS, self.exit_now, (why, signum))
            timer.name = "trio-delegate exit"
            timer.daemon = True
            self._timer = timer
        timer.start()

    def signalled(self, signum: int) -> None:
        """A stop signal arrived: start the countdown, or exit at once on a second one."""
        with self._lock:
            again, self._signalled = self._signalled, True
        if again:
            # A second signal: do not wait out the grace.
            self.exit_now(f"stopped by a second {signal_name(signum)}", signum)
        else:
            self.arm(f"stopped by {signal_name(signum)}", signum)

    def exit_now(self, why: str, signum: int | None) -> None:
        """Name the runs that are still running on stderr, and end the process."""
        with self._lock:
            if self._exiting:
                return  # another thread is writing the line and exiting
            self._exiting = True
        try:
            # Read while the loop may run (or be held up by a runner): the
            # reads take no lock, so anything they meet is caught below.
            stuck = ", ".join(stuck_runs(self.runtime)) or "none"
        except Exception:  # pragma: no cover - read from the timer's thread, racing the loop
            stuck = "(they could not be listed)"
        line = (
            f"trio-delegate: {why}, and the runtime did not close within "
            f"Config.cancel_grace_seconds ({self._grace:g} s) "
            f"plus {EXIT_MARGIN_SECONDS:g} s; exiting and abandoning the runs whose runners "
            f"did not stop: {stuck}\n"
        )
        try:
            os.write(2, line.encode("utf-8", "backslashreplace"))
        finally:
            os._exit(1 if signum is None else 128 + signum)


def stuck_runs(runtime: Runtime | None) -> list[str]:
    """The runs still running in *runtime*: decided without their runners, or live."""
    if runtime is None:
        return []
    return [
        f"{run.run_id} (subagent {run.subagent!r}, "
        + (
            f"{run.status.value})"
            if run.decided_seconds_ago is None
            else f"still running {run.decided_seconds_ago:.1f} s after it was decided)"
        )
        for run in unstopped_runs(runtime)
    ]


@contextlib.contextmanager
def relayed_signals(signums: Collection[int], on_signal: Callable[[int], None]) -> Iterator[None]:
    """Call *on_signal* on a thread of its own whenever one of *signums* arrives.

    Called in the main thread of a Trio run, while Python-level handlers for
    *signums* are installed (``trio.open_signal_receiver``): CPython's
    C-level handler writes the number of each signal to the wakeup file
    descriptor (``signal.set_wakeup_fd``) at once, even while a runner holds
    the event loop. That descriptor becomes a socket read by a daemon thread,
    which hands every byte on to the descriptor it replaced (Trio's, which
    wakes the event loop as before) and calls *on_signal* for the signals
    asked for. The former descriptor is back in place on the way out.

    Args:
        signums: the signals to report.
        on_signal: called with each one's number, on the relay's thread.
    """
    receive, send = socket.socketpair()
    send.setblocking(False)
    try:
        former = signal.set_wakeup_fd(send.fileno(), warn_on_full_buffer=False)
    except BaseException:
        receive.close()
        send.close()
        raise
    relay = threading.Thread(
        target=_relay,
        args=(receive, former, frozenset(signums), on_signal),
        name="trio-delegate signals",
        daemon=True,
    )
    try:
        relay.start()
        yield
    finally:
        signal.set_wakeup_fd(former, warn_on_full_buffer=False)
        # The relay's read then finds the end, and the relay returns.
        send.close()


def _relay(
    receive: socket.socket,
    former: int,
    signums: frozenset[int],
    on_signal: Callable[[int], None],
) -> None:
    with receive:
        while True:
            try:
                data = receive.recv(256)
            except OSError:  # pragma: no cover - a socketpair's read does not fail
                return
            if not data:
                return
            if former != -1:
                # Full (the loop has yet to drain it) or closed: either way
                # the loop has been woken already, or has stopped listening.
                with contextlib.suppress(OSError):
                    os.write(former, data)
            for signum in data:
                if signum in signums:
                    try:
                        on_signal(signum)
                    except Exception:  # pragma: no cover - a thread could not be started
                        logger.exception("could not act on %s", signal_name(signum))


def signal_name(signum: int) -> str:
    """``SIGTERM`` for 15, and so on."""
    try:
        return signal.Signals(signum).name
    except ValueError:  # pragma: no cover - only the stop signals are named
        return str(signum)
