"""What every framework adapter shares: tool payloads as text, plain history
entries, JSON-ready results.

Nothing here imports a framework.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Literal

from .. import (
    ChildContext,
    DelegationError,
    DelegationTools,
    InvalidArgumentsError,
    Output,
    RunHandle,
)
from .._checks import describe
from .._json import parse
from ._bridge import call_trio

__all__ = [
    "settled_notice",
    "ChildRunner",
    "PlainEntry",
    "call_tool",
    "error_payload_text",
    "history_error",
    "json_text",
    "plain_entry",
    "structured",
]

#: What ``runner(...)`` returns: a runner for ``trio_delegate.Subagent``.
ChildRunner = Callable[[ChildContext], Awaitable[Output]]

Role = Literal["system", "user", "assistant"]

#: A ``{"role": ..., "content": ...}`` entry as (role, text).
PlainEntry = tuple[Role, str]

_ROLES: Final = ("system", "user", "assistant")


def json_text(value: Any) -> str:
    """*value* as compact JSON text that is always valid UTF-8.

    Non-ASCII text stays readable; text that cannot be encoded (a lone
    surrogate in an error message) falls back to ASCII escapes rather than
    breaking the framework that has to send it.
    """
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value, separators=(",", ":"))
    return text


async def call_tool(
    tools: DelegationTools, name: str, arguments: Mapping[str, Any] | str | None
) -> dict[str, Any]:
    """Run one delegation tool call from asyncio code on the bridge loop.

    Raises:
        DelegationError: what the tool raised; each adapter turns it into its
            framework's failed tool call.
    """
    return await call_trio(tools.call, name, arguments)


def plain_entry(entry: Any) -> PlainEntry | None:
    """A ``{"role": "user" | "assistant" | "system", "content": ...}`` entry as (role, text).

    This is the form the runtime writes into ``ctx.history`` for a run whose
    runner gave no transcript (contract §12), and the lingua franca between
    frameworks. Content that is not text (a structured final result) becomes
    its JSON text. Anything else is ``None``: the caller tries its own
    framework's form.

    Raises:
        InvalidArgumentsError: the entry's content cannot be written as JSON.
    """
    if not isinstance(entry, Mapping):
        return None
    role = entry.get("role")
    if role not in _ROLES or "content" not in entry or set(entry) - {"role", "content"}:
        return None
    content = entry["content"]
    if isinstance(content, str):
        return role, content
    try:
        return role, json_text(content)
    except (TypeError, ValueError, RecursionError):
        # Not JSON (an object), or past what json.dumps takes: nested past
        # Python's limit, or an integer of more than 4,300 digits.
        raise InvalidArgumentsError(
            f"a ctx.history entry's content is not JSON that can be sent, got {describe(content)}; "
            "content must be text or a plain JSON value"
        ) from None


def history_error(framework: str, index: int, entry: Any, forms: str) -> InvalidArgumentsError:
    """The error for a ``ctx.history`` entry a framework cannot take."""
    return InvalidArgumentsError(
        f"ctx.history[{index}] is not a conversation entry {framework} can take, got "
        f"{describe(entry)}; entries must be {forms} or "
        '{"role": "user" | "assistant" | "system", "content": ...}'
    )


def structured(value: Any, final_schema: Mapping[str, Any] | None) -> Any:
    """A framework's final output as a JSON-ready result.

    Pydantic models, dataclasses and the like become plain JSON data. When
    the run has a ``final_schema`` and the output is text, the text is parsed
    as JSON if it is JSON (models without a structured-output mode answer in
    text); the runtime then validates the result against the schema, so text
    that is not the asked-for structure fails the run.
    """
    # Every supported framework depends on pydantic.
    from pydantic_core import PydanticSerializationError, to_jsonable_python

    if final_schema is not None and isinstance(value, str):
        try:
            value = parse(value, parse_constant=_reject_constant)
        except ValueError:
            return value
    try:
        return to_jsonable_python(value)
    except PydanticSerializationError:
        # Not something pydantic knows: the runtime's own conversion and checks
        # decide (an attrs instance passes; an arbitrary object fails the run).
        return value


def _reject_constant(name: str) -> Any:
    # NaN and Infinity are not JSON; leave such text as text.
    raise ValueError(f"{name} is not JSON")


def error_payload_text(exc: DelegationError) -> str:
    """A delegation error as the text a model sees: its ``to_payload()`` as JSON."""
    return json_text(exc.to_payload())


def settled_notice(handle: RunHandle) -> str:
    """What a model is told at its next turn about a background run that ended.

    A notice, not a result: the model still reads the outcome with
    ``wait_subagent`` (contract §17).
    """
    return (
        f"Background run {handle.run_id} ({handle.subagent}) ended {handle.status.value}: "
        "call wait_subagent with that run_id to read its outcome."
    )
