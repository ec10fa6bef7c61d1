"""Model-facing delegation tools bound to one parent (contract §10).

Each tool is described once, as a list of :class:`_Param`; the JSON Schema a
model sees, the provider formats and the argument checks of
:meth:`DelegationTools.call` are all derived from that one description, so
they cannot drift apart.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, ClassVar, Final, Literal, final

import attrs
import trio

from ._checks import builtin, check_seconds, describe, is_a, is_mapping
from ._construction import NoPublicConstructor
from ._converter import to_json_ready
from ._core import ToolsBinding, abandon
from ._errors import DelegationError, InvalidArgumentsError, UnknownSubagentError
from ._json import JsonProblem, TooDeep, check_nesting, parse, text_problem
from ._results import CancelAck, RunHandle, RunResult
from ._schema import MAX_SCHEMA_BYTES
from ._usage import Usage

if TYPE_CHECKING:
    from ._core import Parent

__all__ = [
    "MAX_ARGUMENTS_CHARS",
    "MAX_ARGUMENT_VALUES",
    "MAX_LISTED_RUNS",
    "DelegationTools",
    "ToolDefinition",
    "run_payload",
    "traced_call",
    "usage_payload",
]

#: Longest run id accepted from a model (ours are 36 characters).
_MAX_RUN_ID_CHARS: Final = 128
#: Most runs ``list_subagent_runs`` lists in one answer; it counts the rest.
MAX_LISTED_RUNS: Final = 100
#: Longest arguments accepted as JSON text: room for the longest task, escaped,
#: and the largest schema.
MAX_ARGUMENTS_CHARS: Final = 8 * 1024 * 1024
#: Most values (strings, numbers, arrays, objects, keys) accepted in one
#: call's arguments: decoding costs time per value, far more than per
#: character of a string, and this many take milliseconds. The largest
#: schema (64 KiB of JSON) holds fewer than 33,000.
MAX_ARGUMENT_VALUES: Final = 40_000

_Kind = Literal["string", "boolean", "number", "object", "subagent", "any"]


@final
@attrs.frozen
class ToolDefinition:
    """One tool as a model sees it.

    Attributes:
        name: the tool's name.
        description: what the tool does and the rules for using it.
        parameters: its arguments as a JSON Schema (draft 2020-12) object.
    """

    name: str
    description: str
    parameters: dict[str, Any]


@attrs.frozen
class _Param:
    name: str
    kind: _Kind
    description: str
    required: bool = True
    max_chars: int | None = None


@attrs.frozen
class _Tool:
    name: str
    description: str
    params: tuple[_Param, ...]
    handler: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


# -- descriptions: short, and they teach the rules of delegation ---------------

_RUN_ID = _Param(
    "run_id",
    "string",
    "The exact run_id returned by delegate_task or continue_subagent; never made up.",
    max_chars=_MAX_RUN_ID_CHARS,
)
_FINAL_SCHEMA = _Param(
    "final_schema",
    "object",
    "Optional JSON Schema the final result must satisfy.",
    required=False,
)
_BACKGROUND = _Param(
    "background",
    "boolean",
    "true: return a handle at once instead of waiting (default false).",
    required=False,
)

_DELEGATE_TEXT = (
    "Delegate a task to one of your subagents. In the foreground (default) this waits and "
    "returns {run_id, subagent, task_summary, final_result}; use it when your next step "
    "depends on the result. With background=true it returns {run_id, subagent, status} at "
    "once: that is an acknowledgment, not a result, and the run may still fail. Keep the "
    "exact run_id and call wait_subagent on every background run before you finish: work "
    "you have not waited for is unresolved and you cannot claim completion. A failure is "
    "an error, never a result. To recover a failed, cancelled or timed-out run, delegate "
    "again with replaces=<its run_id>. Each delegation starts a fresh conversation."
)
_STATUS_TEXT = (
    "Get a snapshot {run_id, subagent, status} of a run: pending, running, input_required "
    "(it waits for your answer: see answer_subagent), completed, failed, cancelled or "
    "timed_out, with its latest progress and open questions when it has any. A snapshot "
    "does not observe the result: call wait_subagent to read it."
)
_WAIT_TEXT = (
    "Wait for a run and return its result {run_id, subagent, task_summary, final_result}; "
    "this observes it (waiting again returns the same result). With a timeout in seconds, "
    "a run still going after it returns {run_id, subagent, status}: the run goes on, so do "
    "other work and wait again later. A run that waits for your answer returns at once, "
    "whatever the timeout, with status input_required and its questions: answer them with "
    "answer_subagent, then wait again. A failed, cancelled or timed-out run is an error."
)
_CANCEL_TEXT = (
    "Ask a run to stop. Returns {run_id, cancel_requested, status}; status may still read "
    "running while the run cleans up. Cancelling does not observe or resolve a run: start "
    "a replacement with replaces=<its run_id> if the work is still needed."
)
_ANSWER_TEXT = (
    "Answer a question one of your running subagents asked you: wait_subagent and "
    "subagent_status show a run that waits for an answer as status input_required with its "
    "questions [{question_id, question, schema}]. The answer must satisfy the question's "
    "schema. question_id defaults to the run's oldest open question; decline=true refuses "
    "to answer (the subagent carries on without it). Returns {run_id, question_id, "
    "accepted, status}; accepted false means the question was no longer open. Answering "
    "does not observe the run: wait_subagent for it as before."
)
_CONTINUE_TEXT = (
    "Continue a finished run's conversation with a new message: starts a new run (new "
    "run_id) of the same subagent that sees the earlier conversation. Returns like "
    "delegate_task, in the foreground or with background=true."
)

_LIST_TEXT = (
    "List your subagent runs that are still going or recently finished, to find a run_id "
    "you no longer have. Returns {runs: [{run_id, subagent, status, task_summary}], "
    f"omitted}}: at most {MAX_LISTED_RUNS} runs, those still going first, then finished ones "
    "newest first; omitted counts the runs left out. Listing does not observe a run: call "
    "wait_subagent on each finished run to read its result or error. Takes no parameters."
)


@final
class DelegationTools(metaclass=NoPublicConstructor):
    """The delegation tools a model sees, bound to one parent.

    Get one from :meth:`Parent.tools`.
    """

    _made_by: ClassVar[str] = "Parent.tools() (tools = parent.tools())"

    __slots__ = (
        "_asking",
        "_check_usable",
        "_children",
        "_events",
        "_listing",
        "_max_nesting",
        "_parent",
        "_tools",
    )

    def __init__(self, binding: ToolsBinding) -> None:
        config = binding.config
        self._parent: Parent = binding.parent
        # Raises once the parent or its runtime is closed (contract §8).
        self._check_usable = binding.check_usable
        # name -> description of each direct child, in registration order
        self._children = dict(binding.children)
        # The runtime's observer: a tool call's span, when runs are traced.
        self._events = binding.events
        # The parent's runs, bounded, with their task summaries.
        self._listing = binding.listing
        self._max_nesting = config.max_nesting_depth
        # The direct children that may ask questions (contract §19).
        self._asking = binding.asking
        max_task = config.max_task_chars
        tools: tuple[_Tool, ...] = (
            _Tool(
                "delegate_task",
                _DELEGATE_TEXT + self._children_text(),
                (
                    _Param("subagent", "subagent", "The subagent to delegate to."),
                    _Param(
                        "task",
                        "string",
                        "The whole task, self-contained: the subagent sees nothing else.",
                        max_chars=max_task,
                    ),
                    _FINAL_SCHEMA,
                    _BACKGROUND,
                    _Param(
                        "replaces",
                        "string",
                        "The run_id of a failed, cancelled or timed-out run this one replaces.",
                        required=False,
                        max_chars=_MAX_RUN_ID_CHARS,
                    ),
                ),
                self._delegate_task,
            ),
            _Tool(
                "subagent_status",
                _STATUS_TEXT,
                (_RUN_ID,),
                self._subagent_status,
            ),
            _Tool(
                "wait_subagent",
                _WAIT_TEXT,
                (
                    _RUN_ID,
                    _Param(
                        "timeout",
                        "number",
                        "Optional: seconds to wait at most (>= 0; 0 only checks). Omit to "
                        "wait until the run ends.",
                        required=False,
                    ),
                ),
                self._wait_subagent,
            ),
            _Tool(
                "cancel_subagent",
                _CANCEL_TEXT,
                (_RUN_ID,),
                self._cancel_subagent,
            ),
            _Tool(
                "continue_subagent",
                _CONTINUE_TEXT,
                (
                    _RUN_ID,
                    _Param(
                        "message",
                        "string",
                        "The next message to the subagent.",
                        max_chars=max_task,
                    ),
                    _FINAL_SCHEMA,
                    _BACKGROUND,
                ),
                self._continue_subagent,
            ),
            _Tool("list_subagent_runs", _LIST_TEXT, (), self._list_subagent_runs),
        )
        if self._asking:
            tools += (
                _Tool(
                    "answer_subagent",
                    _ANSWER_TEXT,
                    (
                        _RUN_ID,
                        _Param(
                            "answer",
                            "any",
                            "The answer, as JSON that satisfies the question's schema.",
                            required=False,
                        ),
                        _Param(
                            "question_id",
                            "string",
                            "Optional: the question answered (default: the oldest open one).",
                            required=False,
                            max_chars=_MAX_RUN_ID_CHARS,
                        ),
                        _Param(
                            "decline",
                            "boolean",
                            "true: refuse to answer instead (default false).",
                            required=False,
                        ),
                    ),
                    self._answer_subagent,
                ),
            )
        self._tools = {tool.name: tool for tool in tools}

    def __repr__(self) -> str:
        return f"<trio_delegate.DelegationTools of parent {self._parent.owner!r}>"

    @property
    def names(self) -> tuple[str, ...]:
        """The tool names, in the order the definitions list them.

        Raises:
            RuntimeClosedError: the parent or its runtime is closed.
        """
        self._check_usable()
        return tuple(self._tools)

    # -- definitions -------------------------------------------------------------

    def definitions(self) -> tuple[ToolDefinition, ...]:
        """Every tool in the neutral form: name, description, JSON Schema parameters.

        Raises:
            RuntimeClosedError: the parent or its runtime is closed (contract §8).
        """
        self._check_usable()
        return tuple(
            ToolDefinition(tool.name, tool.description, self._schema(tool, strict=False))
            for tool in self._tools.values()
        )

    def openai_chat_tools(self, *, strict: bool = True) -> list[dict[str, Any]]:
        """The tools for OpenAI Chat Completions (``tools=``).

        With *strict* (the default), schemas follow OpenAI's strict mode:
        every property is required, optional ones accept ``null``, and
        ``final_schema`` is passed as a JSON-encoded string.

        Raises:
            RuntimeClosedError: the parent or its runtime is closed (contract §8).
        """
        self._check_usable()
        out = []
        for tool in self._tools.values():
            function: dict[str, Any] = {
                "name": tool.name,
                "description": tool.description,
                "parameters": self._schema(tool, strict=strict),
            }
            if strict:
                function["strict"] = True
            out.append({"type": "function", "function": function})
        return out

    def openai_responses_tools(self, *, strict: bool = True) -> list[dict[str, Any]]:
        """The tools for the OpenAI Responses API (``tools=``); see :meth:`openai_chat_tools`.

        Raises:
            RuntimeClosedError: the parent or its runtime is closed (contract §8).
        """
        self._check_usable()
        return [
            {
                "type": "function",
                "name": tool.name,
                "description": tool.description,
                "parameters": self._schema(tool, strict=strict),
                "strict": strict,
            }
            for tool in self._tools.values()
        ]

    def anthropic_tools(self) -> list[dict[str, Any]]:
        """The tools for the Anthropic Messages API (``tools=``).

        Raises:
            RuntimeClosedError: the parent or its runtime is closed (contract §8).
        """
        self._check_usable()
        return [
            {
                "name": tool.name,
                "description": tool.description,
                "input_schema": self._schema(tool, strict=False),
            }
            for tool in self._tools.values()
        ]

    # -- dispatch ------------------------------------------------------------------

    async def call(self, name: str, arguments: Mapping[str, Any] | str | None) -> dict[str, Any]:
        """Run one tool call from a model.

        Args:
            name: the tool's name.
            arguments: the arguments as a mapping or a JSON string (``None`` or
                an empty string mean no arguments).

        Returns:
            the JSON-ready result of the tool.

        Raises:
            InvalidArgumentsError: unknown tool, bad JSON, or arguments that do
                not fit the tool's schema (every problem is named).
            UnknownSubagentError: ``subagent`` is not a direct child.
            RuntimeClosedError: the parent or its runtime is closed, whatever
                the arguments (contract §8).
            DelegationError: whatever the tool itself raises (unknown run,
                failed run, limits...).
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_usable()
        # A host's str subclass is looked up (and traced) as the builtin str.
        name = builtin(name)
        with traced_call(self, name) as traced:
            return await self._dispatch(name, arguments, traced)

    async def _dispatch(
        self, name: str, arguments: Mapping[str, Any] | str | None, traced: Any
    ) -> dict[str, Any]:
        """:meth:`call`'s work; *traced* (a tool call's span, or None) hears of the runs touched."""
        tool = self._tools.get(name) if is_a(name, str) else None
        if tool is None:
            raise InvalidArgumentsError(
                f"there is no tool {describe(name)}; the tools are: {', '.join(self._tools)}"
            )
        parsed = _parse_arguments(tool.name, arguments, self._max_nesting)
        values = self._check_arguments(tool, parsed)
        if traced is None:
            return await tool.handler(values)
        traced.note_run(values.get("run_id"))
        payload = await tool.handler(values)
        traced.note_run(payload.get("run_id"))  # the run delegate_task started
        return payload

    # -- the tools ---------------------------------------------------------------------

    async def _delegate_task(self, args: dict[str, Any]) -> dict[str, Any]:
        parent = self._parent
        if args["subagent"] in self._asking and not args.get("background", False):
            # The run may ask: answered by its handle with the question, the
            # run going on as background work (contract §19).
            return await self._delegate_asking(args)
        if args.get("background", False):
            handle = await parent.start(
                args["subagent"],
                args["task"],
                final_schema=args.get("final_schema"),
                replaces=args.get("replaces"),
            )
            return _handle_payload(handle)
        result = await parent.delegate(
            args["subagent"],
            args["task"],
            final_schema=args.get("final_schema"),
            replaces=args.get("replaces"),
        )
        return _result_payload(result)

    async def _delegate_asking(self, args: dict[str, Any]) -> dict[str, Any]:
        parent = self._parent
        handle = await parent.start(
            args["subagent"],
            args["task"],
            final_schema=args.get("final_schema"),
            replaces=args.get("replaces"),
        )
        try:
            answer = await parent.wait(handle.run_id)
        except BaseException as exc:
            if not isinstance(exc, DelegationError):
                # The caller left (cancelled): as a foreground delegate's run, it
                # is cancelled and joined first.
                with trio.CancelScope(shield=True):
                    await abandon(parent, handle.run_id)
            raise
        return run_payload(answer)

    async def _answer_subagent(self, args: dict[str, Any]) -> dict[str, Any]:
        parent = self._parent
        run_id, question_id = args["run_id"], args.get("question_id")
        value = args.get("answer")
        if args.get("decline", False):
            ack = parent.decline(run_id, question_id=question_id)
        elif type(value) is str:
            # Strict clients send any answer as JSON text: read as JSON when
            # that satisfies the question, else as the text it is.
            try:
                ack = parent.answer(run_id, parse(value), question_id=question_id)
            except (ValueError, TooDeep):  # not JSON, or JSON the schema refuses
                ack = parent.answer(run_id, value, question_id=question_id)
        else:
            ack = parent.answer(run_id, value, question_id=question_id)
        await trio.lowlevel.cancel_shielded_checkpoint()
        return {
            "run_id": ack.run_id,
            "question_id": ack.question_id,
            "accepted": ack.accepted,
            "status": ack.status.value,
        }

    async def _subagent_status(self, args: dict[str, Any]) -> dict[str, Any]:
        answer = _handle_payload(self._parent.status(args["run_id"]))
        # Every async call is a checkpoint; the answer stands whatever happens.
        await trio.lowlevel.cancel_shielded_checkpoint()
        return answer

    async def _wait_subagent(self, args: dict[str, Any]) -> dict[str, Any]:
        parent = self._parent
        answer = await parent.wait(args["run_id"], timeout=args.get("timeout"))
        payload = run_payload(answer)
        if isinstance(answer, RunResult):
            # The envelope tells what the run spent too (contract §20), though
            # RunResult does not: it is read from the run's status, at once.
            try:
                usage = parent.status(answer.run_id).usage
            except DelegationError:  # evicted at once (retention_seconds=0, say)
                usage = None
            if usage is not None:
                payload["usage"] = usage_payload(usage)
        return payload

    async def _cancel_subagent(self, args: dict[str, Any]) -> dict[str, Any]:
        answer = _ack_payload(self._parent.cancel(args["run_id"]))
        await trio.lowlevel.cancel_shielded_checkpoint()
        return answer

    async def _continue_subagent(self, args: dict[str, Any]) -> dict[str, Any]:
        answer = await self._parent.continue_run(
            args["run_id"],
            args["message"],
            final_schema=args.get("final_schema"),
            background=args.get("background", False),
        )
        return run_payload(answer)

    async def _list_subagent_runs(self, args: dict[str, Any]) -> dict[str, Any]:
        listing = self._listing(MAX_LISTED_RUNS)
        runs = []
        for listed in listing.runs:
            entry = _handle_payload(listed.handle)
            entry["task_summary"] = listed.task_summary
            runs.append(entry)
        await trio.lowlevel.cancel_shielded_checkpoint()
        return {"runs": runs, "omitted": listing.omitted}

    # -- schemas and checks -----------------------------------------------------------

    def _children_text(self) -> str:
        if not self._children:
            return " You have no subagents to delegate to."
        lines = [f"- {name}: {text or '(no description)'}" for name, text in self._children.items()]
        return " Your subagents:\n" + "\n".join(lines)

    def _schema(self, tool: _Tool, *, strict: bool) -> dict[str, Any]:
        properties = {param.name: self._param_schema(param, strict) for param in tool.params}
        required = [p.name for p in tool.params if p.required or strict]
        return {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        }

    def _param_schema(self, param: _Param, strict: bool) -> dict[str, Any]:
        schema: dict[str, Any]
        if param.kind == "subagent":
            schema = {"type": "string", "enum": list(self._children)}
        elif param.kind == "any":
            # Strict mode allows no free-form value: the answer travels as JSON text.
            schema = {"type": "string"} if strict else {}
        elif param.kind == "object" and strict:
            # Strict mode allows no free-form object: the schema travels as JSON text.
            schema = {"type": "string"}
        elif param.kind == "object":
            schema = {"type": "object"}
        else:
            schema = {"type": param.kind}
        description = param.description
        if param.kind == "any" and strict:
            description += " Pass it as JSON text (a string answer as itself)."
        if param.kind == "object" and strict:
            description += " Pass it as a JSON-encoded string, or null."
        elif param.name == "timeout" and not strict:
            schema["minimum"] = 0
        if not param.required and strict:
            schema["type"] = [schema["type"], "null"]
        schema["description"] = description
        return schema

    def _check_arguments(self, tool: _Tool, args: dict[str, Any]) -> dict[str, Any]:
        """Check every argument; raise once, naming every problem."""
        problems: list[str] = []
        known = {param.name for param in tool.params}
        if not known and args:
            # Named once, with the first few keys: each would read the same.
            shown = ", ".join(describe(key) for key in itertools.islice(args, 5))
            more = f" and {len(args) - 5} more" if len(args) > 5 else ""
            problems.append(
                f"{tool.name} takes no parameters, got {shown}{more}; call it with an "
                "empty object {}"
            )
        for key in args:
            if known and key not in known:
                problems.append(
                    f"{describe(key)} is not a parameter of {tool.name}; its parameters are: "
                    f"{', '.join(p.name for p in tool.params)}"
                )
        values: dict[str, Any] = {}
        unknown_subagent: str | None = None
        for param in tool.params:
            # A host's str or float subclass is checked (and used) as the builtin.
            value = builtin(args.get(param.name))
            if value is None:
                if param.required:
                    problems.append(f"{param.name} is required: {param.description}")
                continue
            if param.kind == "object" and type(value) is str:
                value, problem = _decode_schema_text(value)  # decoded once, here
            else:
                problem = _check_value(param, value)
            if problem is not None:
                problems.append(f"{param.name} {problem}")
                continue
            if param.kind == "subagent" and value not in self._children:
                unknown_subagent = value
            values[param.name] = value
        if problems:
            raise InvalidArgumentsError(
                f"invalid arguments for {tool.name}: " + "; ".join(problems)
            )
        if unknown_subagent is not None:
            allowed = tuple(self._children)
            raise UnknownSubagentError(
                f"{unknown_subagent!r} is not one of your subagents; choose one of: "
                f"{', '.join(allowed) or '(none)'}",
                subagent=unknown_subagent,
                allowed=allowed,
            )
        return values


def traced_call(tools: DelegationTools, name: str) -> AbstractContextManager[Any]:
    """A span around one call of tool *name* from a model, when runs are traced.

    Its value takes ``note_run(run_id)`` (``None`` when nothing traces). For
    a server that serves one call through several :meth:`DelegationTools.call`:
    they join its span (see ``trio_delegate._otel``).
    """
    events = tools._events
    if events is None:
        return contextlib.nullcontext()
    return events.tool_call(name, tools._parent.owner)


def _parse_arguments(tool: str, arguments: object, max_depth: int) -> dict[str, Any]:
    """The arguments of one call as a dict, bounded in size, values and nesting
    (contract §15), whatever it costs to find out: at most milliseconds."""
    # A host's str subclass is read as the text it holds (its own __len__ and
    # __class__ are not asked).
    arguments = builtin(arguments)
    if arguments is None or (type(arguments) is str and not arguments):
        return {}
    if type(arguments) is str:
        if len(arguments) > MAX_ARGUMENTS_CHARS:
            raise InvalidArgumentsError(
                f"the arguments for {tool} are {len(arguments)} characters of JSON; at most "
                f"{MAX_ARGUMENTS_CHARS} are allowed: send a shorter task"
            )
        if _values_in(arguments) > MAX_ARGUMENT_VALUES:
            raise InvalidArgumentsError(
                f"the arguments for {tool} hold more than {MAX_ARGUMENT_VALUES} JSON values; "
                "send only the tool's parameters, with a smaller final_schema"
            )
        try:
            arguments = parse(arguments)
        except TooDeep:
            raise InvalidArgumentsError(
                f"the arguments for {tool} nest too deep to read; at most {max_depth} levels "
                "are allowed"
            ) from None
        except ValueError as exc:
            raise InvalidArgumentsError(
                f"the arguments for {tool} are not valid JSON ({_short(exc)}); send one JSON object"
            ) from None
    if not is_mapping(arguments):
        raise InvalidArgumentsError(
            f"the arguments for {tool} must be a JSON object, got {describe(arguments)}"
        )
    try:
        parsed = dict(arguments)
    except Exception as exc:  # a host's mapping whose own methods raise
        raise InvalidArgumentsError(
            f"the arguments for {tool} could not be read ({type(exc).__name__}); pass a "
            "plain dict or JSON text"
        ) from None
    try:
        check_nesting(parsed, max_depth, MAX_ARGUMENT_VALUES)
    except JsonProblem as exc:
        raise InvalidArgumentsError(f"the arguments for {tool} are not accepted: {exc}") from None
    for key in parsed:
        if type(key) is not str:
            raise InvalidArgumentsError(
                f"the arguments for {tool} must have string keys, got {describe(key)}"
            )
    return parsed


def _values_in(text: str) -> int:
    """About how many values the JSON *text* holds, counted without decoding it.

    Every string is a value; outside strings, every value after the first in
    an array or object follows a comma, and every array or object opens with
    a bracket. Escaped backslashes and quotes lie inside strings: with them
    gone, the quotes left delimit the strings. A few passes in C over the
    text, and an upper bound (up to the first error, for text that is not
    JSON: decoding stops there too).
    """
    plain = text.replace("\\\\", "").replace('\\"', "")
    strings = plain.count('"') // 2
    if strings > MAX_ARGUMENT_VALUES:
        return strings
    outside = "".join(plain.split('"')[::2])
    return strings + outside.count(",") + outside.count("[") + outside.count("{")


def _short(exc: BaseException, limit: int = 200) -> str:
    text = str(exc)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _check_value(param: _Param, value: Any) -> str | None:
    """What is wrong with *value* for *param*, or None."""
    kind = param.kind
    if kind in ("string", "subagent"):
        if type(value) is not str:  # read through builtin(): a str is a plain one
            return f"must be a string, got {describe(value)}"
        if param.max_chars is not None and len(value) > param.max_chars:
            return f"is {len(value)} characters long; at most {param.max_chars} are allowed"
        problem = text_problem(value)
        if problem is not None:
            return f"must be valid Unicode text: {problem}"
        return None
    if kind == "any":
        return None  # any JSON: the question's schema decides (Parent.answer)
    if kind == "boolean":
        if value is not True and value is not False:
            return f"must be true or false, got {describe(value)}"
        return None
    if kind == "number":
        try:
            check_seconds(param.name, value, allow_zero=True, allow_none=False)
        except InvalidArgumentsError:
            return f"must be a finite number of seconds >= 0, got {describe(value)}"
        return None
    # kind == "object": a JSON Schema object (its JSON text: _decode_schema_text)
    if not is_mapping(value):
        return f"must be a JSON object, got {describe(value)}"
    return None


def _decode_schema_text(text: str) -> tuple[Any, str | None]:
    """A JSON Schema sent as its JSON text (strict clients do): the value, or what is wrong."""
    if len(text) > MAX_SCHEMA_BYTES:
        return text, f"is {len(text)} characters long; at most {MAX_SCHEMA_BYTES} are allowed"
    try:
        value = parse(text)
    except ValueError:
        return text, "must be a JSON object or its JSON text, got text that is not JSON"
    if not is_mapping(value):
        return text, f"must be a JSON object, got {describe(value)}"
    return value, None


def run_payload(answer: RunResult | RunHandle) -> dict[str, Any]:
    """A wait's answer as the tools give it: the result envelope, or the run's handle.

    The one rendering of a run for the model, shared by every surface that
    answers for a run (``wait_subagent``, ``continue_subagent``, the MCP
    Tasks extension's ``tasks/get``).
    """
    if isinstance(answer, RunResult):
        return _result_payload(answer)
    return _handle_payload(answer)


def _result_payload(result: RunResult) -> dict[str, Any]:
    return {
        "run_id": result.run_id,
        "subagent": result.subagent,
        "task_summary": result.task_summary,
        "final_result": to_json_ready(result.final_result),
    }


def _handle_payload(handle: RunHandle) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "run_id": handle.run_id,
        "subagent": handle.subagent,
        "status": handle.status.value,
    }
    progress = handle.progress
    if progress is not None:
        payload["progress"] = {
            "message": progress.message,
            "progress": progress.progress,
            "total": progress.total,
            "seq": progress.seq,
        }
    if handle.questions:
        payload["questions"] = [
            {
                "question_id": question.question_id,
                "question": question.text,
                "schema": to_json_ready(question.schema),
            }
            for question in handle.questions
        ]
    usage = handle.usage
    if usage is not None:  # only when the run reported any (contract §20)
        payload["usage"] = usage_payload(usage)
    return payload


def usage_payload(usage: Usage) -> dict[str, Any]:
    """What a run spent, as the tools give it: every field of its :class:`Usage`."""
    return {
        "requests": usage.requests,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_read_input_tokens": usage.cache_read_input_tokens,
        "cache_creation_input_tokens": usage.cache_creation_input_tokens,
        "reasoning_output_tokens": usage.reasoning_output_tokens,
        "cost_usd": usage.cost_usd,
    }


def _ack_payload(ack: CancelAck) -> dict[str, Any]:
    return {
        "run_id": ack.run_id,
        "cancel_requested": ack.cancel_requested,
        "status": ack.status.value,
    }
