"""Runners that ship with trio_delegate: commands, agent CLIs and models run as subagents.

The runtime core knows none of them; the CLI, the MCP server and the adapters
build them from a configuration file or from code.
"""
