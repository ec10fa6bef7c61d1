"""Adapters that hand the delegation tools to agent frameworks, and run their agents as subagents.

Each adapter is a module of its own and needs its framework's extra:

* :mod:`trio_delegate.adapters.claude` — the Claude Agent SDK
  (``pip install 'trio-delegate[claude]'``);
* :mod:`trio_delegate.adapters.codex` — Codex: its ``config.toml`` entry for
  ``trio-delegate serve``, and Codex threads as subagents
  (``pip install 'trio-delegate[codex]'``).

:data:`CAPABILITIES` says what each adapter can do. Importing this package
imports no framework.
"""

from ._capabilities import CAPABILITIES, CAPABILITY_NAMES, Capability

__all__ = ["CAPABILITIES", "CAPABILITY_NAMES", "Capability"]
