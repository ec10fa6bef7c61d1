"""What a model subagent tells and asks while it runs, and what it may spend.

* **Progress** (contract §19): after every model turn and every tool call the
  run reports ``ctx.progress(message, progress=turn, total=max_turns)``;
  the message names the turn, the tools the model called (or the tool that
  just answered) and the tokens this run's own responses have used so far.
* **Questions** (contract §19): a subagent declared with ``asks=True`` offers
  its model an ``ask_parent`` tool; the parent's answer, or why there is
  none (declined, timed out, nobody can answer), is the tool's result.
* **Prices and budgets** (contract §20): :class:`Prices` turns a response's
  token counts into its cost when the provider gives none; before each model
  call, ``ctx.remaining()`` clamps the call's ``max_tokens``, and a call that
  what is left cannot pay for is not made.
"""

from __future__ import annotations

import decimal
import math
from collections.abc import Sequence
from typing import Any, Final, final

import attrs
import trio

from .._checks import builtin, describe, is_a, is_mapping
from .._core import ChildContext
from .._errors import (
    AskTimeoutError,
    DelegationError,
    InputUnavailableError,
    InvalidArgumentsError,
    LimitExceededError,
    QuestionDeclinedError,
)
from .._json import JsonProblem, encode
from .._tools import ToolDefinition
from .._usage import EXACT, Budget, Usage, cost_decimal, cost_float
from ._model_tools import Tool, ToolOutcome, tool_error

__all__ = [
    "ASK_PARENT",
    "AskParentTool",
    "Prices",
    "afford",
    "ask_tools",
    "check_prices",
    "priced",
    "tell_tool",
    "tell_turn",
]

#: The name of the tool a subagent that asks offers its model.
ASK_PARENT: Final = "ask_parent"

_MILLION: Final = decimal.Decimal(1_000_000)


def _price(field: str, allow_none: bool) -> Any:
    allowed = "a finite number >= 0" + (", or None" if allow_none else "")

    def check(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is None and allow_none:
            return
        # An int left by _number did not fit a float: no price.
        if type(value) is not float or not math.isfinite(value) or value < 0:
            raise InvalidArgumentsError(
                f"Prices.{field} must be {allowed} (US dollars per million tokens), got "
                f"{describe(value)}; write the price as a number, e.g. 3.0"
            )

    return check


def _number(value: Any) -> Any:
    value = builtin(value)
    # int and float only: a bool is no price (True would read as 1 dollar).
    if type(value) is int:
        try:
            return float(value)
        except OverflowError:
            return value  # the validator says why
    return value


@final
@attrs.frozen
class Prices:
    """What a model's tokens cost, in US dollars per million tokens.

    Given to :func:`~trio_delegate.model_runner` (``prices=...``), it gives
    each response a ``cost_usd`` computed from its token counts when the
    provider reports none. trio_delegate ships no price list: prices change,
    so take them from the provider's price page.

    Args:
        input: per million uncached input tokens.
        output: per million output tokens (reasoning included).
        cache_read: per million input tokens read from the prompt cache;
            ``None``: the *input* price.
        cache_write: per million input tokens written to the prompt cache;
            ``None``: the *input* price.

    Raises:
        InvalidArgumentsError: a price that is not a finite number >= 0.
    """

    input: float = attrs.field(converter=_number, validator=_price("input", False))
    output: float = attrs.field(converter=_number, validator=_price("output", False))
    cache_read: float | None = attrs.field(
        default=None, converter=_number, validator=_price("cache_read", True), kw_only=True
    )
    cache_write: float | None = attrs.field(
        default=None, converter=_number, validator=_price("cache_write", True), kw_only=True
    )

    def cost(self, usage: Usage) -> float:
        """What *usage*'s tokens cost at these prices, in US dollars (exact decimals)."""
        read = usage.cache_read_input_tokens
        written = usage.cache_creation_input_tokens
        # td.Usage counts cache reads and writes inside input_tokens.
        fresh = max(usage.input_tokens - read - written, 0)
        cache_read = self.input if self.cache_read is None else self.cache_read
        cache_write = self.input if self.cache_write is None else self.cache_write
        total = decimal.Decimal(0)
        for count, price in (
            (fresh, self.input),
            (read, cache_read),
            (written, cache_write),
            (usage.output_tokens, self.output),
        ):
            if count and price:
                part = EXACT.multiply(decimal.Decimal(count), cost_decimal(price))
                total = EXACT.add(total, part)
        return cost_float(EXACT.divide(total, _MILLION))

    def output_cost(self, tokens: int) -> float:
        """What *tokens* output tokens cost, in US dollars."""
        return self.cost(Usage(output_tokens=tokens))


def check_prices(value: Any) -> Prices | None:
    """*value* as :class:`Prices`: a ``Prices``, a mapping of its fields, or ``None``.

    Raises:
        InvalidArgumentsError: anything else, or a mapping with unknown or bad fields.
    """
    if value is None or type(value) is Prices:
        return value
    if is_mapping(value):
        unknown = sorted(str(key) for key in value if key not in _PRICE_FIELDS)
        if unknown:
            raise InvalidArgumentsError(
                f"model_runner(prices=...) has the unknown field(s) {unknown}; the fields are "
                f"{list(_PRICE_FIELDS)} (US dollars per million tokens)"
            )
        missing = [name for name in ("input", "output") if name not in value]
        if missing:
            raise InvalidArgumentsError(
                f"model_runner(prices=...) lacks {missing}: give at least the input and "
                "output prices (US dollars per million tokens)"
            )
        return Prices(**{str(key): item for key, item in value.items()})
    raise InvalidArgumentsError(
        f"model_runner(prices=...) must be a trio_delegate.Prices or None, got "
        f"{describe(value)}; write td.Prices(input=3.0, output=15.0)"
    )


_PRICE_FIELDS: Final = ("input", "output", "cache_read", "cache_write")


def priced(usage: Usage, prices: Prices | None) -> Usage:
    """*usage* with its cost from *prices*, unless the provider gave one (or there are none)."""
    if prices is None or usage.cost_usd:
        return usage
    return attrs.evolve(usage, cost_usd=prices.cost(usage))


# -- budgets ----------------------------------------------------------------------


async def afford(ctx: ChildContext, turn: int, max_tokens: int, prices: Prices | None) -> int:
    """The ``max_tokens`` of this turn's model call, clamped to what the budgets leave.

    Args:
        ctx: the run's context (``ctx.remaining()``).
        turn: the model call's number, for the message.
        max_tokens: the runner's own ``max_tokens``.
        prices: the runner's prices: without them a call's cost is unknown
            beforehand, and only its tokens are clamped.

    Returns:
        *max_tokens*, or less when what is left allows fewer output tokens.

    Raises:
        trio.Cancelled: the run was stopped (a budget the last response
            passed, a cancel request, its deadline).
        LimitExceededError: what is left cannot pay for any model call: a
            request, an input or output token, or (with *prices*) the cost
            of one output token. The call is not made.
    """
    # A budget stop the last response caused is delivered here first: the run
    # then ends cancelled by it (contract §20), not refused by what is left.
    await trio.lowlevel.checkpoint()
    left = ctx.remaining()
    if left is None:
        return max_tokens
    for field, value in (
        ("max_requests", left.max_requests),
        ("max_input_tokens", left.max_input_tokens),
        ("max_output_tokens", left.max_output_tokens),
        ("max_total_tokens", left.max_total_tokens),
    ):
        if value is not None and value < 1:
            raise _refused(ctx, turn, field, left)
    clamped = max_tokens
    for value in (left.max_output_tokens, left.max_total_tokens):
        if value is not None:
            clamped = min(clamped, value)
    if left.max_cost_usd is not None and prices is not None and prices.output:
        # The most output tokens the money left pays for (input aside).
        per_token = prices.output_cost(1)
        # A float ratio: it may be inf (a tiny price), which no floor takes.
        most = left.max_cost_usd / per_token if per_token else math.inf
        if most < 1:
            raise _refused(ctx, turn, "max_cost_usd", left)
        if most < clamped:
            clamped = math.floor(most)
    return clamped


def _refused(ctx: ChildContext, turn: int, field: str, left: Budget) -> LimitExceededError:
    value = getattr(left, field)
    return LimitExceededError(
        f"model call {turn} of run {ctx.run_id} was not made: the budgets that hold the run "
        f"leave {field}={value:g} (ctx.remaining()), too little for one more call; give the "
        "subagent or its parent a larger budget, or a smaller task",
        run_id=ctx.run_id,
        subagent=ctx.subagent,
    )


# -- progress ---------------------------------------------------------------------


#: The most tool names one progress message lists (a model may call hundreds).
_MOST_NAMES: Final = 8


def _names(tools: Sequence[str]) -> str:
    # The names are the model's: cut, so that one long name leaves room for the rest.
    listed = ", ".join(name[:64] for name in tools[:_MOST_NAMES])
    more = len(tools) - _MOST_NAMES
    return f"{listed} and {more} more" if more > 0 else listed


def _tokens(spent: Usage) -> str:
    return f"{spent.total_tokens:,} tokens so far"


def tell_turn(
    ctx: ChildContext, turn: int, max_turns: int, tools: Sequence[str], spent: Usage
) -> None:
    """Report model turn *turn*: the tools it called (or that it answered) and the tokens."""
    did = "called " + _names(tools) if tools else "answered"
    ctx.progress(f"turn {turn}: {did}; {_tokens(spent)}", progress=turn, total=max_turns)


def tell_tool(
    ctx: ChildContext,
    turn: int,
    max_turns: int,
    name: str,
    outcome: ToolOutcome,
    position: tuple[int, int],
    spent: Usage,
) -> None:
    """Report that tool *name*, call *position[0]* of *position[1]* in *turn*, answered."""
    how = "failed" if outcome.is_error else "returned"
    index, of = position
    ctx.progress(
        f"turn {turn}: {name[:64]} {how} ({index} of {of}); {_tokens(spent)}",
        progress=turn,
        total=max_turns,
    )


# -- questions --------------------------------------------------------------------


_ASK_SCHEMA: Final = {
    "type": "object",
    "properties": {
        "question": {
            "type": "string",
            "description": "The question, complete in itself: the parent sees nothing else.",
        },
        "schema": {
            "type": "object",
            "description": "Optional: a JSON Schema the answer must satisfy (default: a string).",
        },
    },
    "required": ["question"],
    "additionalProperties": False,
}

_ASK_DESCRIPTION: Final = (
    "Ask the one who gave you this task a question, and wait for the answer. Ask only what "
    "you cannot find out or decide yourself. The result is the answer; an error says that "
    "the question was declined (with the reason), not answered in time, or that nobody can "
    "answer: then carry on with your best judgement and say what you assumed."
)


_ASK_DEFINITION: Final = ToolDefinition(ASK_PARENT, _ASK_DESCRIPTION, _ASK_SCHEMA)


@final
@attrs.frozen(eq=False)
class AskParentTool:
    """The ``ask_parent`` tool: a question to the run's parent, through ``ctx.ask``.

    Attributes:
        name: ``"ask_parent"``.
        definition: the tool as the model sees it.
        timeout: seconds to wait for an answer, or ``None`` (the deadline bounds it).
    """

    _ctx: ChildContext = attrs.field(repr=False)
    timeout: float | None
    name: str = ASK_PARENT
    definition: ToolDefinition = _ASK_DEFINITION

    async def call(self, arguments: dict[str, Any]) -> ToolOutcome:
        """Ask; the answer is the result, a decline or a missing answer an error outcome."""
        unknown = sorted(set(arguments) - {"question", "schema"})
        if unknown:
            return tool_error(
                "invalid_arguments",
                f"ask_parent takes 'question' and optionally 'schema'; drop {unknown}",
            )
        schema = arguments.get("schema")
        if schema is not None and not is_mapping(schema):
            return tool_error(
                "invalid_arguments",
                f"ask_parent's 'schema' must be a JSON Schema object, got {describe(schema)}",
            )
        try:
            # ctx.ask checks the question (a string, valid Unicode, not too long).
            question: Any = arguments.get("question")
            answer = await self._ctx.ask(question, schema=schema, timeout=self.timeout)
        except (
            QuestionDeclinedError,
            AskTimeoutError,
            InputUnavailableError,
            InvalidArgumentsError,
        ) as exc:
            return _error_outcome(exc)
        if is_a(answer, str):
            return ToolOutcome(answer)
        try:
            return ToolOutcome(encode(answer, max_depth=200)[0])
        except (TypeError, JsonProblem) as exc:
            return tool_error("invalid_result", f"the answer cannot be sent as JSON: {exc}")


def _error_outcome(exc: DelegationError) -> ToolOutcome:
    # The error form of every tool (a decline carries its reason).
    try:
        return ToolOutcome(encode(exc.to_payload(), max_depth=8)[0], is_error=True)
    except (TypeError, JsonProblem):
        return tool_error(exc.kind(), exc.message)


def ask_tools(
    ctx: ChildContext, asks: bool, timeout: float | None, others: Sequence[Tool]
) -> tuple[Tool, ...]:
    """The ``ask_parent`` tool when *asks*, else nothing.

    Raises:
        InvalidArgumentsError: another tool of the subagent is named ``ask_parent``.
    """
    if not asks:
        return ()
    if any(tool.name == ASK_PARENT for tool in others):
        raise InvalidArgumentsError(
            f"subagent {ctx.subagent!r} has a tool named {ASK_PARENT!r}, the name of the tool "
            "a subagent with asks=True offers for questions to its parent; rename the tool",
            run_id=ctx.run_id,
            subagent=ctx.subagent,
        )
    return (AskParentTool(ctx, timeout),)
