"""The runtime core: runs, parents, their scheduling, lifecycle and retention.

Nothing here is public; ``trio_delegate`` re-exports what users need.
"""
