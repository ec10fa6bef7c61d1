"""What a surface built on trio_delegate needs beyond the contract's API.

A *surface* serves parents and runtimes to something other than Python code
calling them: the MCP server and the command line are the package's own,
and are built on these names and the public API alone. Most programs need
none of them.

* :func:`abandon`: a surface that serves a foreground call as a background
  start and a bounded wait (so that a call still running at its limit goes
  on in the background) gives the run the verdict of
  :meth:`Parent.delegate` when its caller is cancelled meanwhile.
* :func:`unstopped_runs` and :class:`UnstoppedRun`: which runs still hold a
  closing runtime open (contract §18), for a process that must name them
  before it gives up on them.
"""

from __future__ import annotations

from ._core import UnstoppedRun, abandon, unstopped_runs

__all__ = ["UnstoppedRun", "abandon", "unstopped_runs"]


def _fixup_module_metadata() -> None:
    """Make every name report ``trio_delegate.lowlevel`` as its module, as trio does."""
    import contextlib

    import attrs

    for name in __all__:
        value = globals()[name]
        if isinstance(value, type) and attrs.has(value):
            with contextlib.suppress(NameError):
                attrs.resolve_types(value)
        value.__module__ = __name__


_fixup_module_metadata()
del _fixup_module_metadata
