"""Subagent definitions: a name, a description and a runner (contract §2)."""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, final

import attrs

from ._checks import MAX_ITEMS, builtin, check_bool, check_seconds, describe, is_a, read_items
from ._config import INHERIT, TimeoutSetting
from ._errors import InvalidArgumentsError
from ._json import text_problem
from ._schema import ResultSchema, SchemaSpec, compile_result_schema
from ._usage import Budget, check_budget

if TYPE_CHECKING:
    from ._core import ChildContext

__all__ = ["NAME_PATTERN", "Runner", "Subagent", "check_name", "result_schema", "task_name"]

NAME_PATTERN = re.compile(r"[a-z][a-z0-9_-]{0,63}")

#: A runner: ``async def runner(ctx: ChildContext) -> object``.
Runner = Callable[["ChildContext"], Awaitable[Any]]


def check_name(field: str, value: Any) -> str:
    """Check that *value* is a valid subagent name; return it as a plain ``str``."""
    value = builtin(value)
    if not is_a(value, str) or NAME_PATTERN.fullmatch(value) is None:
        raise InvalidArgumentsError(
            f"{field} must match ^[a-z][a-z0-9_-]{{0,63}}$ (lowercase letter first, then "
            f"lowercase letters, digits, '_' or '-'), got {describe(value)}"
        )
    return value


def _is_async_callable(value: object) -> bool:
    try:
        if inspect.iscoroutinefunction(value):
            return True
        call = getattr(value, "__call__", None)  # noqa: B004 - async __call__ objects
        return call is not None and inspect.iscoroutinefunction(call)
    except Exception:  # an object whose attribute lookup raises is no runner
        return False


def _to_name(value: Any) -> str:
    # A converter, so that the name is checked (and a plain str) before the
    # fields made from it are.
    return check_name("Subagent.name", value)


def _check_runner(instance: Subagent, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not _is_async_callable(value):
        fix = ": define it with async def" if callable(value) else ": pass an async function"
        raise InvalidArgumentsError(
            f"Subagent.runner of {instance.name!r} must be an async function "
            f"`async def runner(ctx) -> result`, got {describe(value)}{fix}"
        )


def _check_description(instance: Subagent, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not is_a(value, str):
        raise InvalidArgumentsError(
            f"Subagent.description of {instance.name!r} must be a string, got {describe(value)}"
        )
    # The description goes into every tool definition a model is sent.
    problem = text_problem(value)
    if problem is not None:
        raise InvalidArgumentsError(
            f"Subagent.description of {instance.name!r} must be valid Unicode text: {problem}"
        )


def _check_timeout(instance: Subagent, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not INHERIT:
        check_seconds(
            f"Subagent.timeout_seconds of {instance.name!r}",
            value,
            allow_zero=False,
            allow_none=True,
        )


def _check_asks(instance: Subagent, attribute: attrs.Attribute[Any], value: Any) -> None:
    check_bool("Subagent.asks", value)


def _compile_final_schema(instance: Subagent) -> ResultSchema | None:
    if instance.final_schema is None:
        return None
    return compile_result_schema(
        instance.final_schema, f"Subagent.final_schema of {instance.name!r}"
    )


def _to_children(value: Iterable[str] | str) -> tuple[str, ...]:
    if is_a(value, str):
        # A lone string is almost always a forgotten comma: ("a") instead of ("a",).
        raise InvalidArgumentsError(
            f"Subagent.children must be a sequence of subagent names, got the string "
            f"{describe(value)}; write ({describe(value)},)"
        )
    names = read_items("Subagent.children", value, "a sequence of subagent names", MAX_ITEMS)
    return tuple(
        check_name(f"Subagent.children[{index}]", name) for index, name in enumerate(names)
    )


def _check_children(instance: Subagent, attribute: attrs.Attribute[Any], value: Any) -> None:
    seen: set[str] = set()
    for child in value:
        if child in seen:
            raise InvalidArgumentsError(
                f"Subagent.children of {instance.name!r} names {child!r} twice; list it once"
            )
        seen.add(child)


def _check_budget(instance: Subagent, attribute: attrs.Attribute[Any], value: Any) -> None:
    check_budget(f"Subagent.budget of {instance.name!r}", value)


@final
@attrs.frozen
class Subagent:
    """A named child definition.

    Args:
        name: matches ``^[a-z][a-z0-9_-]{0,63}$``; what the model selects.
        runner: ``async def runner(ctx: ChildContext) -> object`` doing the work.
        description: what the model is told this subagent is for.
        timeout_seconds: the child deadline: :data:`INHERIT` (the runtime's
            ``Config.subagent_timeout_seconds``), seconds > 0, or ``None``.
        final_schema: what a result must satisfy when a call gives none: a JSON
            Schema mapping, or an attrs class / dataclass (results are then
            structured into it).
        children: names of subagents this one may delegate to through
            ``ctx.parent``.
        budget: the most each run may spend, itself and everything it
            delegates (contract §20), or ``None`` for no limit.
        asks: whether its runner may ask its parent questions with
            ``ctx.ask`` (contract §19).

    Raises:
        InvalidArgumentsError: when any field is malformed.
    """

    name: str = attrs.field(converter=_to_name)
    runner: Runner = attrs.field(validator=_check_runner, eq=False)
    description: str = attrs.field(
        default="", kw_only=True, converter=builtin, validator=_check_description
    )
    timeout_seconds: TimeoutSetting = attrs.field(
        default=INHERIT, kw_only=True, converter=builtin, validator=_check_timeout
    )
    final_schema: SchemaSpec | None = attrs.field(default=None, kw_only=True, eq=False)
    children: tuple[str, ...] = attrs.field(
        default=(), kw_only=True, converter=_to_children, validator=_check_children
    )
    budget: Budget | None = attrs.field(default=None, kw_only=True, validator=_check_budget)
    asks: bool = attrs.field(default=False, kw_only=True, validator=_check_asks)
    # Checked once, here, so a malformed schema fails at definition time and
    # runs that use the default do not check it again.
    # The name of each run's Trio task, made once rather than once per run.
    _task_name: str = attrs.field(
        init=False,
        eq=False,
        repr=False,
        default=attrs.Factory(lambda self: f"trio_delegate run {self.name}", takes_self=True),
    )
    _result_schema: ResultSchema | None = attrs.field(
        init=False,
        eq=False,
        repr=False,
        default=attrs.Factory(_compile_final_schema, takes_self=True),
    )

    def resolve_timeout(self, default: float | None) -> float | None:
        """The child deadline in seconds for this subagent under *default*."""
        if self.timeout_seconds is INHERIT:
            return default
        return self.timeout_seconds


def task_name(subagent: Subagent) -> str:
    """The name of the Trio task of each run of *subagent* (made once, by the subagent)."""
    return subagent._task_name


def result_schema(subagent: Subagent) -> ResultSchema | None:
    """*subagent*'s ``final_schema``, checked and compiled when it was defined."""
    return subagent._result_schema
