"""The delegation tools as an MCP server, for Claude Code, Codex and every MCP client.

Needs the ``mcp`` extra (``pip install 'trio-delegate[mcp]'``).

* :func:`build_server` — a low-level ``mcp.server.Server`` giving each
  connection a parent of its own on a runtime; its runs end with the
  connection.
* :func:`build_parent_server` — the same tools bound to one parent the host
  owns (used by :mod:`trio_delegate.adapters.claude`).
* :func:`serve_stdio` — serve over stdin/stdout as a process's main job
  (what ``trio-delegate serve`` runs).
* :func:`load_server_config` — read and check a ``trio-delegate serve``
  configuration file (:class:`ServerConfig`, :class:`ConfigError`).

See the MCP server's guide for client configuration:
<https://trio-delegate.github.io/trio-delegate/mcp/>.
"""

import importlib.util

# Found, not imported (that costs start-up time): without the SDK, a hint
# naming the extra instead of a bare "No module named 'mcp'".
if importlib.util.find_spec("mcp") is None:  # pragma: no cover - depends on the environment
    raise ImportError("trio_delegate.mcp needs the MCP SDK: pip install 'trio-delegate[mcp]'")

from .._server_config import ConfigError, ServerConfig, load_server_config
from ._serve import serve_stdio
from ._server import (
    DEFAULT_FOREGROUND_LIMIT_SECONDS,
    DEFAULT_INSTRUCTIONS,
    DEFAULT_NAME,
    DEFAULT_PROGRESS_INTERVAL_SECONDS,
    build_parent_server,
    build_server,
    error_result,
    success_result,
)

__all__ = [
    "DEFAULT_FOREGROUND_LIMIT_SECONDS",
    "DEFAULT_INSTRUCTIONS",
    "DEFAULT_NAME",
    "DEFAULT_PROGRESS_INTERVAL_SECONDS",
    "ConfigError",
    "ServerConfig",
    "build_parent_server",
    "build_server",
    "error_result",
    "load_server_config",
    "serve_stdio",
    "success_result",
]
