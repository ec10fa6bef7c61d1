"""Durable stores of run records: the protocol and the stores that implement it.

Nothing here is public; ``trio_delegate`` re-exports what users need.
"""
