"""The ``trio-delegate`` command line: ``demo``, ``runs``, ``serve``, and what they use.

Nothing here is public; ``trio_delegate`` and ``trio_delegate.mcp`` re-export
what users need.
"""
