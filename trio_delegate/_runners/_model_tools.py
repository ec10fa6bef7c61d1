"""The tools a model subagent offers its model: Python functions and the delegation tools.

A Python function becomes a tool through pydantic's :class:`~pydantic.TypeAdapter`
(installed with the ``anthropic``, ``openai`` and ``mcp`` SDKs): its JSON Schema
comes from the function's signature and annotations, and the same adapter
validates a model's arguments before the function is called. The name is
the function's ``__name__``, the description its docstring.

Whatever a model sends — an unknown tool, arguments that are not JSON, too
deep, not valid Unicode or not what the schema says, a tool that raises —
becomes a tool *error* the model reads and can act on; the loop goes on. Only
cancellation (the run's deadline, a cancel request) ends a tool call early.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol, final

import attrs

from .._checks import describe, is_a, is_mapping
from .._errors import DelegationError, InvalidArgumentsError
from .._json import JsonProblem, encode, escape_text, parse
from .._tools import MAX_ARGUMENT_VALUES, MAX_ARGUMENTS_CHARS, ToolDefinition

if TYPE_CHECKING:
    from .._tools import DelegationTools

__all__ = ["FunctionTool", "Tool", "ToolOutcome", "Toolbox", "function_tools", "tool_error"]

#: What the providers accept as a tool name (the strictest of them).
TOOL_NAME: Final = re.compile(r"[a-zA-Z0-9_-]{1,64}")

#: The longest tool description sent to a model.
_MAX_DESCRIPTION_CHARS: Final = 4_000

#: The most tools a model subagent may define.
MAX_TOOLS: Final = 128


@final
@attrs.frozen
class ToolOutcome:
    """What one tool call answers the model.

    Attributes:
        text: the tool's result as text (JSON for anything but a string).
        is_error: whether the call failed; *text* is then ``{"error": {...}}``.
    """

    text: str
    is_error: bool = False


def tool_error(kind: str, message: str) -> ToolOutcome:
    """An error outcome: ``{"error": {"type": kind, "message": message}}`` as text."""
    # The shape of DelegationError.to_payload(), so a model reads one error form.
    body = {"error": {"type": kind, "message": escape_text(message)}}
    return ToolOutcome(encode(body, max_depth=4)[0], is_error=True)


class Tool(Protocol):
    """A tool the model may call: a Python function, or a tool of an MCP server."""

    @property
    def name(self) -> str: ...

    @property
    def definition(self) -> ToolDefinition: ...

    async def call(self, arguments: dict[str, Any]) -> ToolOutcome:
        """Call it with checked *arguments*; every failure is an error outcome."""
        ...


@final
@attrs.frozen(eq=False)
class FunctionTool:
    """A Python function offered to a model as a tool.

    Attributes:
        name: the function's ``__name__``.
        definition: the tool as a model sees it.
        function: the function itself (sync or async).
    """

    name: str
    definition: ToolDefinition
    function: Callable[..., Any]
    _adapter: Any = attrs.field(repr=False)

    async def call(self, arguments: dict[str, Any]) -> ToolOutcome:
        """Validate *arguments* against the signature, call the function, render its result."""
        import pydantic

        try:
            # The adapter of a function validates the arguments and then calls it.
            result = self._adapter.validate_python(arguments)
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(part) for part in error['loc']) or '(arguments)'}: {error['msg']}"
                for error in exc.errors(include_url=False, include_input=False)
            )
            return tool_error(
                "invalid_arguments",
                f"the arguments of tool {self.name!r} do not match its schema: {problems}; "
                "call it again with arguments that do",
            )
        except Exception as exc:
            return _raised(self.name, exc)
        try:
            if inspect.isawaitable(result):
                result = await result
        except Exception as exc:
            return _raised(self.name, exc)
        if is_a(result, str):
            return ToolOutcome(escape_text(result))
        try:
            return ToolOutcome(encode(result, max_depth=64)[0])
        except (TypeError, JsonProblem) as exc:
            return tool_error(
                "invalid_result",
                f"tool {self.name!r} returned a value that is not JSON ({exc}); "
                "its author must make it return JSON-ready data",
            )


def _raised(name: str, exc: Exception) -> ToolOutcome:
    return tool_error(
        "tool_error",
        f"tool {name!r} raised {type(exc).__name__}: {exc}",
    )


def _function_tool(index: int, function: Any) -> FunctionTool:
    import pydantic

    field = f"model_runner(tools=...)[{index}]"
    if not callable(function) or not isinstance(getattr(function, "__name__", None), str):
        raise InvalidArgumentsError(
            f"{field} must be a function (its __name__ becomes the tool's name), "
            f"got {describe(function)}"
        )
    name = function.__name__
    if TOOL_NAME.fullmatch(name) is None:
        raise InvalidArgumentsError(
            f"{field} is named {name!r}, which is no tool name (1 to 64 of a-z, A-Z, 0-9, "
            "'_', '-'): give the function such a name"
        )
    try:
        adapter = pydantic.TypeAdapter(function)
        schema = adapter.json_schema()
    except Exception as exc:
        raise InvalidArgumentsError(
            f"{field} ({name!r}): its signature cannot be described as a JSON Schema "
            f"({type(exc).__name__}: {exc}); annotate its parameters with JSON-ready types"
        ) from exc
    description = (inspect.getdoc(function) or "")[:_MAX_DESCRIPTION_CHARS]
    return FunctionTool(name, ToolDefinition(name, description, schema), function, adapter)


def function_tools(functions: Iterable[Any]) -> tuple[FunctionTool, ...]:
    """The tools made from *functions*, checked.

    Raises:
        InvalidArgumentsError: a value is not a function, its name is no tool
            name, two share a name, or a signature has no JSON Schema.
    """
    if is_a(functions, str) or is_mapping(functions):
        raise InvalidArgumentsError(
            f"model_runner(tools=...) must be a sequence of functions, got {describe(functions)}"
        )
    try:
        items = list(functions)
    except TypeError:
        raise InvalidArgumentsError(
            f"model_runner(tools=...) must be a sequence of functions, got {describe(functions)}"
        ) from None
    if len(items) > MAX_TOOLS:
        raise InvalidArgumentsError(
            f"model_runner(tools=...) holds {len(items)} tools; at most {MAX_TOOLS} are allowed"
        )
    tools = tuple(_function_tool(index, item) for index, item in enumerate(items))
    seen: set[str] = set()
    for tool in tools:
        if tool.name in seen:
            raise InvalidArgumentsError(
                f"model_runner(tools=...) has two tools named {tool.name!r}; rename one"
            )
        seen.add(tool.name)
    return tools


@final
class Toolbox:
    """Every tool of one run: the functions, and the delegation tools of its children."""

    __slots__ = ("_delegation", "_delegation_names", "_functions", "definitions")

    def __init__(self, functions: Sequence[Tool], delegation: DelegationTools | None) -> None:
        """Args:
            functions: the Python function tools and the MCP servers' tools.
            delegation: the delegation tools of the run's nested parent, if any.

        Raises:
            InvalidArgumentsError: two tools share a name, or one has a
                delegation tool's name.
        """
        self._functions: dict[str, Tool] = {}
        for tool in functions:
            if tool.name in self._functions:
                raise InvalidArgumentsError(
                    f"two tools of this subagent are named {tool.name!r} (its functions and "
                    "its MCP servers' tools share one namespace); rename one"
                )
            self._functions[tool.name] = tool
        self._delegation = delegation
        definitions = [tool.definition for tool in functions]
        self._delegation_names: frozenset[str] = frozenset()
        if delegation is not None:
            offered = delegation.definitions()
            self._delegation_names = frozenset(tool.name for tool in offered)
            clash = sorted(self._delegation_names & self._functions.keys())
            if clash:
                raise InvalidArgumentsError(
                    f"the tools {clash} have the names of delegation tools this subagent "
                    "offers for its children; rename the functions"
                )
            definitions.extend(offered)
        #: What the model is offered, in the neutral form.
        self.definitions: tuple[ToolDefinition, ...] = tuple(definitions)

    async def call(self, name: str, arguments: Mapping[str, Any] | str | None) -> ToolOutcome:
        """Run one tool call of the model; every failure is an error outcome, never raised.

        Args:
            name: the tool's name as the model sent it.
            arguments: the arguments as the provider gave them: JSON text or an object.
        """
        if name in self._delegation_names and self._delegation is not None:
            try:
                payload = await self._delegation.call(name, arguments)
            except DelegationError as exc:
                return ToolOutcome(_payload_text(exc.to_payload()), is_error=True)
            return ToolOutcome(_payload_text(payload))
        tool = self._functions.get(name)
        if tool is None:
            known = ", ".join(tool.name for tool in self.definitions) or "(none)"
            return tool_error(
                "invalid_arguments",
                f"there is no tool {describe(name)}; the tools are: {known}",
            )
        args = _read_arguments(name, arguments)
        if isinstance(args, ToolOutcome):
            return args
        return await tool.call(args)


def _payload_text(payload: Any) -> str:
    try:
        return encode(payload, max_depth=200)[0]
    except (TypeError, JsonProblem) as exc:
        return encode({"error": {"type": "invalid_result", "message": str(exc)}}, max_depth=4)[0]


def _read_arguments(name: str, arguments: Any) -> dict[str, Any] | ToolOutcome:
    """*arguments* as a checked JSON object, or the error the model is told."""
    if arguments is None or arguments == "":
        return {}
    if is_a(arguments, str):
        if len(arguments) > MAX_ARGUMENTS_CHARS:
            return tool_error(
                "invalid_arguments",
                f"the arguments of tool {name!r} are {len(arguments)} characters long; "
                f"at most {MAX_ARGUMENTS_CHARS} are allowed",
            )
        try:
            arguments = parse(arguments)
        except ValueError as exc:
            return tool_error(
                "invalid_arguments",
                f"the arguments of tool {name!r} are not a JSON object ({exc}); send them as one",
            )
    if not is_mapping(arguments):
        return tool_error(
            "invalid_arguments",
            f"the arguments of tool {name!r} must be a JSON object, got {describe(arguments)}",
        )
    try:
        # Bounded and iterative: too deep, too many values or text that is not
        # valid Unicode is refused before any function sees it.
        encode(arguments, max_depth=64, max_items=MAX_ARGUMENT_VALUES)
    except (TypeError, JsonProblem) as exc:
        return tool_error(
            "invalid_arguments",
            f"the arguments of tool {name!r} are not acceptable JSON: {exc}",
        )
    return dict(arguments)
