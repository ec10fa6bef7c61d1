"""Adapters that hand the delegation tools to agent frameworks.

Each adapter is a module of its own and needs its framework's extra:

* :mod:`trio_delegate.adapters.claude` — the Claude Agent SDK
  (``pip install 'trio-delegate[claude]'``).
"""
