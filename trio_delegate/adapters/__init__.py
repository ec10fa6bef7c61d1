"""Adapters between trio_delegate and agent frameworks, in both directions.

Each framework has a module of its own that needs its framework's extra:

* :mod:`trio_delegate.adapters.pydantic_ai` — Pydantic AI
  (``pip install 'trio-delegate[pydantic-ai]'``);
* :mod:`trio_delegate.adapters.langchain` — LangChain
  (``pip install 'trio-delegate[langchain]'``);
* :mod:`trio_delegate.adapters.openai_agents` — OpenAI Agents
  (``pip install 'trio-delegate[openai-agents]'``);
* :mod:`trio_delegate.adapters.dspy` — DSPy
  (``pip install 'trio-delegate[dspy]'``);
* :mod:`trio_delegate.adapters.claude` — the Claude Agent SDK
  (``pip install 'trio-delegate[claude]'``);
* :mod:`trio_delegate.adapters.codex` — Codex: its ``config.toml`` entry for
  ``trio-delegate serve``, and Codex threads as subagents
  (``pip install 'trio-delegate[codex]'``).

The parent side hands a Trio-owned parent's delegation tools to the
framework's agent; the child side runs the framework's agent as a
subagent's runner. Asyncio frameworks run on the asyncio bridge:
:func:`asyncio_loop` (open it once around ``open_runtime``) and
:func:`run_asyncio` (run an agent from Trio).

:data:`CAPABILITIES` says what each adapter can do (see the adapters guide,
<https://trio-delegate.github.io/trio-delegate/adapters/>). Importing this
package imports no framework.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._capabilities import CAPABILITIES, CAPABILITY_NAMES, Capability, render_markdown_table

if TYPE_CHECKING:
    from ._bridge import AsyncioBridgeError, asyncio_loop, run_asyncio

__all__ = [
    "CAPABILITIES",
    "CAPABILITY_NAMES",
    "AsyncioBridgeError",
    "Capability",
    "asyncio_loop",
    "render_markdown_table",
    "run_asyncio",
]

_BRIDGE_NAMES = frozenset({"AsyncioBridgeError", "asyncio_loop", "run_asyncio"})


def __getattr__(name: str) -> Any:
    # The bridge needs trio-asyncio (an extra); load it on first use so that
    # the package imports without it.
    if name in _BRIDGE_NAMES:
        from . import _bridge

        return getattr(_bridge, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
