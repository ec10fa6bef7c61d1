"""A scripted "model": replays tool calls against :class:`DelegationTools`.

It stands in for a language model in tests and examples: each step is a tool
call, its arguments may refer to what earlier steps returned (:class:`Ref`),
and every answer is recorded, results and error payloads alike, the way an
agent loop hands them back to a model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, final

import attrs

from .._errors import DelegationError
from .._tools import DelegationTools

__all__ = ["Ref", "ScriptedModel", "ToolCall", "ToolCallRecord"]


@final
@attrs.frozen
class Ref:
    """A value taken from an earlier step's result: ``Ref(0, "run_id")``.

    Args:
        step: the index of the earlier step (negative counts from the latest).
        key: the key of its result (or of its error payload's ``error`` body).
    """

    step: int
    key: str


@final
@attrs.frozen
class ToolCall:
    """One tool call a model makes.

    Args:
        name: the tool's name.
        arguments: a mapping (values may be :class:`Ref`) or raw JSON text.
    """

    name: str
    arguments: Mapping[str, Any] | str = attrs.field(factory=dict)


@final
@attrs.frozen
class ToolCallRecord:
    """What one step sent and got back.

    Attributes:
        name: the tool called.
        arguments: the arguments sent, with every :class:`Ref` resolved.
        output: the tool's result, or the error's ``to_payload()``.
        is_error: whether the call raised a ``DelegationError``.
    """

    name: str
    arguments: Mapping[str, Any] | str
    output: dict[str, Any]
    is_error: bool

    def value(self, key: str) -> Any:
        """``output[key]``, or the error body's ``key`` for an error."""
        body = self.output["error"] if self.is_error else self.output
        return body[key]


#: A step: a fixed call, or a function of the records so far returning the next call.
Step = ToolCall | Callable[[Sequence[ToolCallRecord]], ToolCall]


@final
@attrs.define(eq=False)
class ScriptedModel:
    """Replays *steps* against delegation tools, recording every answer.

    Example::

        model = ScriptedModel([
            ToolCall("delegate_task", {"subagent": "writer", "task": "draft", "background": True}),
            ToolCall("wait_subagent", {"run_id": Ref(0, "run_id")}),
        ])
        records = await model.run(parent.tools())
    """

    steps: Sequence[Step]
    records: list[ToolCallRecord] = attrs.field(factory=list, init=False)

    async def run(self, tools: DelegationTools) -> tuple[ToolCallRecord, ...]:
        """Make every call in order; a ``DelegationError`` is recorded, not raised.

        Raises:
            LookupError: a :class:`Ref` names a step or key that does not exist.
        """
        for step in self.steps:
            call = step(tuple(self.records)) if callable(step) else step
            arguments = self._resolve(call.arguments)
            try:
                output = await tools.call(call.name, arguments)
            except DelegationError as exc:
                self.records.append(ToolCallRecord(call.name, arguments, exc.to_payload(), True))
            else:
                self.records.append(ToolCallRecord(call.name, arguments, output, False))
        return tuple(self.records)

    def _resolve(self, arguments: Mapping[str, Any] | str) -> Mapping[str, Any] | str:
        if isinstance(arguments, str):
            return arguments
        return {key: self._resolve_value(value) for key, value in arguments.items()}

    def _resolve_value(self, value: Any) -> Any:
        if not isinstance(value, Ref):
            return value
        try:
            record = self.records[value.step]
        except IndexError:
            raise LookupError(
                f"{value!r} refers to step {value.step}, but only {len(self.records)} "
                "steps have run"
            ) from None
        try:
            return record.value(value.key)
        except KeyError:
            raise LookupError(
                f"{value!r}: step {value.step} ({record.name}) has no {value.key!r} in "
                f"{record.output!r}"
            ) from None
