"""A bare low-level MCP server over stdio under Trio: row 12's floor.

What any server on the ``mcp`` SDK imports and runs before its first answer,
with no tools and nothing else: ``python benchmarks/_bare_mcp.py``.
"""

from __future__ import annotations

import trio
from mcp.server import Server
from mcp.server.stdio import stdio_server


async def main() -> None:
    server: Server[object] = Server("bare")
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


if __name__ == "__main__":
    trio.run(main)
