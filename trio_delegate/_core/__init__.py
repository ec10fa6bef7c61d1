"""The runtime core: runs, parents, their scheduling, lifecycle and retention.

Nothing here is public; ``trio_delegate`` re-exports what users need. The
core imports no surface (tools, telemetry, CLI, MCP, adapters) and no
concrete store: surfaces register themselves (``_events.observe_runs``,
``_parent.provide_tools``) and stores declare what they can do. Which form
of a run lives where, and its state table: docs/contract.md, appendix.
"""
