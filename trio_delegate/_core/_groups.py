"""Turning a nursery's exception group back into the one error a caller expects.

A nursery wraps everything it saw in a ``BaseExceptionGroup``. trio_delegate's
own nurseries hold run tasks that never raise an ``Exception`` (a runner's
errors settle its run), so what they can add is ``trio.Cancelled`` and fatal
``BaseException``s such as ``KeyboardInterrupt``. contract §2 asks that the body's
exception come out as itself, and that a fatal one from a child win, with the
body's exception as its context.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import trio

__all__ = ["leaves", "open_transparent_nursery", "pick_exit_exception"]


def leaves(exc: BaseException) -> Iterator[BaseException]:
    """Every non-group exception inside *exc* (or *exc* itself)."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from leaves(inner)
    else:
        yield exc


def pick_exit_exception(
    group: BaseExceptionGroup[BaseException], body_exc: BaseException | None
) -> BaseException:
    """The exception an ``async with`` block should raise after its nursery raised *group*.

    Args:
        group: what the nursery raised.
        body_exc: what the block's body raised, or ``None``.

    Returns:
        the fatal ``BaseException`` of a child when there is exactly one (with
        *body_exc* as its context), a group of them when there are several,
        else *body_exc* (carrying any error a child raised too: see
        :func:`_carry`), else the group itself when it holds unexpected
        errors, else its first ``Cancelled``.
    """
    found = [leaf for leaf in leaves(group) if leaf is not body_exc]
    fatal = [leaf for leaf in found if not isinstance(leaf, Exception | trio.Cancelled)]
    if fatal:
        chosen: BaseException
        if len(fatal) == 1:
            chosen = fatal[0]
        else:
            chosen = BaseExceptionGroup("several fatal errors in child runs", fatal)
        if body_exc is not None and not isinstance(body_exc, trio.Cancelled):
            chosen.__context__ = body_exc
        return chosen
    if body_exc is not None:
        errors = [leaf for leaf in found if not isinstance(leaf, trio.Cancelled)]
        if errors:
            _carry(body_exc, errors)
        return body_exc
    if not found or any(not isinstance(leaf, trio.Cancelled) for leaf in found):
        return group
    return found[0]


def _carry(body_exc: BaseException, errors: list[BaseException]) -> None:
    """Attach child *errors* to the body's exception, which propagates as itself.

    Nothing is dropped: the errors become the context at the end of
    *body_exc*'s chain (so tracebacks show them), and a note names them.
    """
    lost: BaseException = (
        errors[0] if len(errors) == 1 else ExceptionGroup("errors in child tasks", errors)  # type: ignore[type-var]
    )
    tail, seen = body_exc, {id(body_exc)}
    while tail.__context__ is not None and id(tail.__context__) not in seen:
        tail = tail.__context__
        seen.add(id(tail))
    if tail is not lost:
        tail.__context__ = lost
    names = ", ".join(f"{type(error).__name__}: {error}" for error in errors)
    body_exc.add_note(f"while this propagated, a child task failed too: {names}")


@asynccontextmanager
async def open_transparent_nursery() -> AsyncIterator[trio.Nursery]:
    """A nursery whose body's exception comes out as itself, not in a group.

    The body's exception is caught inside the nursery and raised again once
    the nursery has joined its children; a fatal ``BaseException`` from a
    child wins (see :func:`pick_exit_exception`). The body should stop the
    children (cancel them, or close what they read from) on its way out.
    """
    body_exc: BaseException | None = None
    exit_exc: BaseException | None = None
    try:
        async with trio.open_nursery() as nursery:
            try:
                yield nursery
            except BaseException as exc:
                body_exc = exc
    except BaseExceptionGroup as group:
        exit_exc = pick_exit_exception(group, body_exc)
    # Raised outside the handler so the exception keeps the context
    # pick_exit_exception gave it instead of the group's.
    if exit_exc is not None:
        raise exit_exc
    if body_exc is not None:
        raise body_exc
