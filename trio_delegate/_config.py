"""Runtime configuration (contract §13) and the ``INHERIT`` timeout sentinel."""

from __future__ import annotations

import enum
from typing import Any, Final, Literal, final

import attrs

from ._checks import builtin, check_bool, check_int, check_seconds
from ._json import DEFAULT_MAX_NESTING, MAX_NESTING_LIMIT
from ._usage import Budget, check_budget

__all__ = ["INHERIT", "Config", "InheritType", "TimeoutSetting"]


class InheritType(enum.Enum):
    """Type of :data:`INHERIT`: use the runtime's ``Config.subagent_timeout_seconds``."""

    INHERIT = "INHERIT"

    def __repr__(self) -> str:
        return "INHERIT"


INHERIT: Final = InheritType.INHERIT

#: What ``Subagent.timeout_seconds`` accepts: INHERIT, seconds, or None (no deadline).
TimeoutSetting = float | None | Literal[InheritType.INHERIT]


def _seconds_or_none(name: str) -> Any:
    def check(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        check_seconds(f"Config.{name}", value, allow_zero=False, allow_none=True)

    return check


def _int_at_least(name: str, minimum: int, maximum: int | None = None) -> Any:
    def check(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        check_int(f"Config.{name}", value, minimum=minimum, maximum=maximum)

    return check


def _seconds_above_zero(name: str) -> Any:
    def check(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        check_seconds(f"Config.{name}", value, allow_zero=False, allow_none=False)

    return check


def _seconds_at_least_zero(name: str) -> Any:
    def check(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        check_seconds(f"Config.{name}", value, allow_zero=True, allow_none=False)

    return check


def _budget(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    check_budget("Config.runtime_budget", value)


def _boolean(name: str) -> Any:
    def check(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        check_bool(f"Config.{name}", value)

    return check


@final
@attrs.frozen(kw_only=True)
class Config:
    """Limits and policy of one runtime. Every field is validated on construction.

    Attributes:
        subagent_timeout_seconds: the child deadline of subagents that inherit
            it, counted from the moment a run starts running; ``None`` for no
            deadline.
        max_concurrent_runs: running runs per parent; more wait as ``pending``.
        max_live_runs: pending plus running runs in the whole runtime; more
            are refused at admission with ``LimitExceededError``.
        max_depth: deepest nested delegation (a top-level parent's runs have
            depth 1).
        retention_seconds: how long a terminal run is kept after it ended.
        retention_max_runs: how many terminal runs are kept at most.
        fail_closed: whether a parent may not claim completion while its
            delegated work is unresolved.
        max_task_chars: longest task text accepted.
        max_result_bytes: largest final result, in bytes of JSON.
        max_nesting_depth: deepest nesting of arrays and objects accepted in
            tool arguments, schemas, results and transcripts; deeper input is
            ``InvalidArgumentsError``, a deeper result or transcript fails
            its run. At most 200: deeper values
            could not be walked everywhere without recursion errors.
        cancel_grace_seconds: how long after a run's cancellation was delivered
            (a request, its deadline, a close) the run is decided even if its
            runner has not returned: ``cancelled`` (or ``timed_out``) with a
            reason saying the runner did not stop; what the runner returns
            later is dropped and logged.
        runtime_budget: the most all runs of the runtime may spend together
            (contract §20), or ``None`` for no limit.
    """

    subagent_timeout_seconds: float | None = attrs.field(
        default=900.0,
        converter=builtin,
        validator=_seconds_or_none("subagent_timeout_seconds"),
    )
    max_concurrent_runs: int = attrs.field(
        default=16, converter=builtin, validator=_int_at_least("max_concurrent_runs", 1)
    )
    max_live_runs: int = attrs.field(
        default=256, converter=builtin, validator=_int_at_least("max_live_runs", 1)
    )
    max_depth: int = attrs.field(
        default=3, converter=builtin, validator=_int_at_least("max_depth", 1)
    )
    retention_seconds: float = attrs.field(
        default=3600.0, converter=builtin, validator=_seconds_at_least_zero("retention_seconds")
    )
    retention_max_runs: int = attrs.field(
        default=1000, converter=builtin, validator=_int_at_least("retention_max_runs", 1)
    )
    fail_closed: bool = attrs.field(default=True, validator=_boolean("fail_closed"))
    max_task_chars: int = attrs.field(
        default=100_000, converter=builtin, validator=_int_at_least("max_task_chars", 1)
    )
    max_result_bytes: int = attrs.field(
        default=1_000_000, converter=builtin, validator=_int_at_least("max_result_bytes", 1)
    )
    max_nesting_depth: int = attrs.field(
        default=DEFAULT_MAX_NESTING,
        converter=builtin,
        validator=_int_at_least("max_nesting_depth", 1, MAX_NESTING_LIMIT),
    )
    cancel_grace_seconds: float = attrs.field(
        default=30.0,
        converter=builtin,
        validator=_seconds_above_zero("cancel_grace_seconds"),
    )
    runtime_budget: Budget | None = attrs.field(default=None, validator=_budget)
