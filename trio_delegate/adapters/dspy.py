"""DSPy: blocking delegation tools for a module, and a module as a subagent.

Parent side — a Trio-owned parent's delegation as two DSPy tools,
``delegate_task`` and ``continue_subagent``, both blocking::

    import dspy
    import trio_delegate as td
    from trio_delegate.adapters import dspy as td_dspy

    async with td.open_runtime(subagents) as rt, rt.open_parent("agent") as parent:
        react = dspy.ReAct("question -> answer", tools=td_dspy.tools(parent))
        prediction = await td_dspy.run_module(react, question="Why does login fail?")

DSPy's tool loop calls a tool and feeds its answer to the next step; it has
no way to come back to a run later, so there is no background lifecycle here
(no ``background``, ``subagent_status``, ``wait_subagent`` or
``cancel_subagent``): every delegation is answered before the module goes on,
which also keeps the parent resolved.

:func:`run_module` runs the module in a worker thread; the tools call back
into the Trio run (``trio.from_thread.run``), so cancelling the scope around
:func:`run_module` cancels the delegation in progress and its child run (the
module stops at its next tool call; a model call already under way finishes
first). The same tools also work on DSPy's async path, ``await
run_asyncio(react.acall, question=...)`` (:mod:`trio_delegate.adapters`).

A :class:`trio_delegate.DelegationError` in a tool is raised as a
:class:`DelegationToolError` whose text is the error's ``to_payload()`` as
JSON; ReAct reports a raising tool to the model as an execution error with
that text.

Child side — a module as a subagent's runner (DSPy's async path on the
asyncio bridge, so a cancel or the deadline ends it)::

    td.Subagent("answerer", td_dspy.runner(dspy.ChainOfThought("question -> answer")))

Needs the ``dspy`` extra (``pip install 'trio-delegate[dspy]'``).
"""

from __future__ import annotations

try:  # isort: skip  (trio_asyncio before the framework)
    from . import _bridge  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    # The bridge's own hint cannot know which adapter is being imported.
    raise ImportError(
        "trio_delegate.adapters.dspy needs DSPy and trio-asyncio: pip install 'trio-delegate[dspy]'"
    ) from exc

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, final

import trio

try:
    import dspy  # type: ignore[import-untyped]
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "trio_delegate.adapters.dspy needs DSPy: pip install 'trio-delegate[dspy]'"
    ) from exc

from .. import (
    ChildContext,
    DelegationError,
    DelegationTools,
    InvalidArgumentsError,
    Output,
    Parent,
    Usage,
)
from .._usage import reported_usage
from ._bridge import run_asyncio
from ._common import (
    ChildRunner,
    call_tool,
    error_payload_text,
    history_error,
    plain_entry,
    structured,
)

__all__ = ["DelegationToolError", "run_module", "runner", "tools"]

#: The tools offered, and the parameters of each (no ``background``).
_BLOCKING_TOOLS: Final = {
    "delegate_task": ("subagent", "task", "final_schema", "replaces"),
    "continue_subagent": ("run_id", "message", "final_schema"),
}

_BLOCKING_TEXT: Final = {
    "delegate_task": (
        "Delegate a task to one of your subagents and wait for its result "
        "{run_id, subagent, task_summary, final_result}. Each delegation starts a fresh "
        "conversation: make the task self-contained. A failure is an error, never a result; "
        "to recover a failed, cancelled or timed-out run, delegate again with "
        "replaces=<its run_id>."
    ),
    "continue_subagent": (
        "Continue a finished run's conversation with a new message and wait for the "
        "answer: a new run (new run_id) of the same subagent that sees the earlier "
        "conversation. Returns like delegate_task."
    ),
}


class DelegationToolError(DelegationError):
    """A delegation tool call failed; its text is the failure's payload as JSON.

    DSPy reports a raising tool to the model with the exception's text, so
    the text is the JSON of :meth:`to_payload` — that of the original error
    (:attr:`error`, also the ``__cause__``).

    Attributes:
        error: the :class:`trio_delegate.DelegationError` the tool raised.
    """

    def __init__(self, error: DelegationError) -> None:
        super().__init__(
            error_payload_text(error),
            run_id=error.run_id,
            subagent=error.subagent,
            status=error.status,
        )
        self.error = error

    def to_payload(self) -> dict[str, Any]:
        """The original error's payload (see :meth:`DelegationError.to_payload`)."""
        return self.error.to_payload()


def tools(parent: Parent) -> list[Any]:
    """The parent's blocking delegation tools as ``dspy.Tool`` objects.

    Hand them to ``dspy.ReAct(signature, tools=tools(parent))`` and run the
    module with :func:`run_module` (or ``run_asyncio(module.acall, ...)``).

    Args:
        parent: an open parent; the host owns it and its runs.

    Returns:
        ``[delegate_task, continue_subagent]`` as ``dspy.Tool``, their
        arguments described by contract §10's JSON Schema less
        ``background``.

    Raises:
        RuntimeClosedError: *parent* is closed.
    """
    delegation = parent.tools()
    subagents_text = _subagents_text(delegation)
    made = []
    for definition in delegation.definitions():
        names = _BLOCKING_TOOLS.get(definition.name)
        if names is None:
            continue
        properties = definition.parameters["properties"]
        made.append(
            dspy.Tool(
                _tool_function(delegation, definition.name, names),
                name=definition.name,
                desc=_BLOCKING_TEXT[definition.name]
                + (subagents_text if definition.name == "delegate_task" else ""),
                args={name: dict(properties[name]) for name in names},
            )
        )
    return made


def _subagents_text(delegation: DelegationTools) -> str:
    # The subagent list as the model sees it in delegate_task's own description.
    for definition in delegation.definitions():
        if definition.name == "delegate_task":
            marker = definition.description.find(" Your subagents:")
            if marker >= 0:
                return definition.description[marker:]
    return ""


def _tool_function(
    delegation: DelegationTools, name: str, allowed: Sequence[str]
) -> Callable[..., Any]:
    token = trio.lowlevel.current_trio_token()

    def call(**arguments: Any) -> Any:
        extra = sorted(set(arguments) - set(allowed))
        if extra:
            raise DelegationToolError(
                InvalidArgumentsError(
                    f"{', '.join(extra)}: not {'a parameter' if len(extra) == 1 else 'parameters'} "
                    f"of {name} here; its parameters are: {', '.join(allowed)} (delegation "
                    "from DSPy is blocking: there is no background)"
                )
            )
        if trio.lowlevel.in_trio_run():
            # DSPy's async path (acall) on the asyncio bridge: it awaits what
            # a tool returns when that is a coroutine.
            return _call_async(delegation, name, arguments)
        try:
            return _from_thread(token, delegation.call, name, arguments)
        except DelegationError as exc:
            raise DelegationToolError(exc) from exc

    call.__name__ = name
    return call


def _from_thread(token: trio.lowlevel.TrioToken, fn: Callable[..., Any], *args: Any) -> Any:
    """Run a Trio function from a worker thread, blocking.

    In a thread Trio started (``run_module``), the call runs in the task that
    started it, with its cancellation: a cancel there cancels this call. A
    thread DSPy started itself (``module.batch``, ``dspy.Parallel``) has no
    such task; the call then runs in the Trio run by its token, cancelled
    only when the runtime closes.
    """
    try:
        trio.from_thread.check_cancelled()  # raises trio.Cancelled when it is
    except RuntimeError:
        return trio.from_thread.run(fn, *args, trio_token=token)
    return trio.from_thread.run(fn, *args)


async def _call_async(
    delegation: DelegationTools, name: str, arguments: Mapping[str, Any]
) -> dict[str, Any]:
    try:
        return await call_tool(delegation, name, arguments)
    except DelegationError as exc:
        raise DelegationToolError(exc) from exc


async def run_module(module: Any, /, **inputs: Any) -> Any:
    """Run a DSPy module synchronously in a worker thread, from Trio.

    The delegation tools of :func:`tools` call back into this Trio run from
    that thread. Cancelling the scope around this call cancels the delegation
    in progress (and so its child run); the module ends at its next tool
    call, and this call raises ``trio.Cancelled`` once the thread is done.
    DSPy settings made with ``dspy.context(...)`` around the call apply in the
    thread.

    Args:
        module: a ``dspy.Module`` (``dspy.ReAct`` with :func:`tools`, ...).
        **inputs: the module's inputs.

    Returns:
        the module's ``dspy.Prediction``.

    Raises:
        Exception: whatever the module raises, as itself.
    """
    return await trio.to_thread.run_sync(functools.partial(module, **inputs))


@final
class _Fields:
    """Which of a module's signature fields carry the task, the history and the answer."""

    def __init__(
        self,
        module: Any,
        task_field: str | None,
        history_field: str | None,
    ) -> None:
        signature = getattr(module, "signature", None)
        inputs: dict[str, Any] = dict(getattr(signature, "input_fields", {}) or {})
        outputs: dict[str, Any] = dict(getattr(signature, "output_fields", {}) or {})
        histories = [name for name, info in inputs.items() if info.annotation is dspy.History]
        if history_field is None and len(histories) == 1:
            history_field = histories[0]
        if task_field is None:
            candidates = [name for name in inputs if name not in histories]
            if len(candidates) != 1:
                raise InvalidArgumentsError(
                    "runner() cannot tell which input field of the module takes the task: "
                    f"its signature has {', '.join(candidates) or 'no input fields'}; "
                    "pass task_field='<name>'"
                )
            task_field = candidates[0]
        elif inputs and task_field not in inputs:
            raise InvalidArgumentsError(
                f"task_field {task_field!r} is not an input field of the module's signature; "
                f"its input fields are: {', '.join(inputs)}"
            )
        self.task = task_field
        self.history = history_field
        self.outputs = tuple(outputs)


def runner(
    module: Any,
    *,
    task_field: str | None = None,
    history_field: str | None = None,
) -> ChildRunner:
    """A subagent runner that runs a DSPy module on DSPy's async path.

    Each run calls ``module.acall(**{task_field: ctx.task, history_field:
    dspy.History(...)})`` on the asyncio bridge, so a cancel or the run's
    deadline cancels the module (its model call included).

    * The task goes to *task_field* — by default the signature's one input
      field that is not a ``dspy.History``.
    * ``ctx.history`` goes to *history_field* — by default the signature's
      ``dspy.History`` input field — as ``dspy.History(messages=...)``, one
      message per earlier turn (its task and its answer fields). A
      continuation of a module without one fails the run.
    * The result is the prediction's one output field (JSON-ready; text that
      is JSON is parsed when the run has a ``final_schema``), or an object of
      all its output fields when there are several. The runtime validates it
      against ``ctx.final_schema``: name the output fields after the
      schema's properties.
    * What the module's LM calls spent (``dspy.track_usage``: one request
      per call, its tokens) is the run's usage, reported also when the
      module fails or is cancelled. DSPy's tracker carries no cost.

    Args:
        module: a ``dspy.Module`` with a ``signature`` (``Predict``,
            ``ChainOfThought``, ``ReAct``...), or any module when the fields
            are named.
        task_field: the input field that takes the task.
        history_field: the input field that takes the history.

    Returns:
        ``async def runner(ctx) -> Output`` for ``trio_delegate.Subagent``.

    Raises:
        InvalidArgumentsError: the task field cannot be told or is not an
            input field of the module.
    """
    fields = _Fields(module, task_field, history_field)

    async def run_module_async(ctx: ChildContext) -> Output:
        inputs: dict[str, Any] = {fields.task: ctx.task}
        if ctx.history:
            if fields.history is None:
                raise InvalidArgumentsError(
                    "this run continues a conversation, but the module's signature has no "
                    "dspy.History input field to take it; add one (or pass history_field=)"
                )
            inputs[fields.history] = dspy.History(messages=_history_messages(fields, ctx.history))
        elif fields.history is not None:
            inputs[fields.history] = dspy.History(messages=[])
        trackers: list[Any] = []
        try:
            prediction = await run_asyncio(_tracked_call, module, inputs, trackers)
        except BaseException:
            # What the LM calls before the failure spent counts all the same.
            spent = _tracked_usage(trackers)
            if spent is not None:
                ctx.add_usage(spent)
            raise
        return Output(
            structured(_answer(fields, prediction), ctx.final_schema),
            usage=_tracked_usage(trackers),
        )

    return run_module_async


async def _tracked_call(module: Any, inputs: dict[str, Any], trackers: list[Any]) -> Any:
    """``module.acall(**inputs)`` (on asyncio) with DSPy's usage tracker on; the
    tracker goes into *trackers* first, so what it saw is known however the
    call ends."""
    with dspy.track_usage() as tracker:
        trackers.append(tracker)
        return await module.acall(**inputs)


def _tracked_usage(trackers: list[Any]) -> Usage | None:
    """What a DSPy usage tracker saw, or ``None`` when it saw no LM call.

    Each entry is one LM call in LiteLLM's form: ``prompt_tokens`` (the
    cache in it), ``completion_tokens`` (reasoning in it) and their details.
    """
    spent: Usage | None = None
    for tracker in trackers:
        for entries in tracker.usage_data.values():
            for entry in entries:
                if not isinstance(entry, Mapping):
                    continue
                prompt = entry.get("prompt_tokens_details")
                completion = entry.get("completion_tokens_details")
                prompt = prompt if isinstance(prompt, Mapping) else {}
                completion = completion if isinstance(completion, Mapping) else {}
                call = reported_usage(
                    requests=1,
                    input_tokens=entry.get("prompt_tokens"),
                    output_tokens=entry.get("completion_tokens"),
                    cache_read_input_tokens=prompt.get("cached_tokens"),
                    cache_creation_input_tokens=prompt.get("cache_creation_tokens"),
                    reasoning_output_tokens=completion.get("reasoning_tokens"),
                )
                spent = call if spent is None else spent + call
    return spent


def _answer(fields: _Fields, prediction: Any) -> Any:
    names = fields.outputs or tuple(prediction.keys())
    if len(names) == 1:
        return prediction[names[0]]
    return {name: prediction[name] for name in names}


def _history_messages(fields: _Fields, history: Sequence[Any]) -> list[dict[str, Any]]:
    """Plain user/assistant entries (what the runtime records for this runner's
    runs) paired into DSPy history messages; entries already in DSPy's form
    (a mapping of field names) pass through."""
    messages: list[dict[str, Any]] = []
    pending: dict[str, Any] | None = None
    for index, entry in enumerate(history):
        plain = plain_entry(entry)
        if plain is None:
            if isinstance(entry, Mapping) and "role" not in entry and entry:
                messages.append(dict(entry))
                continue
            raise history_error("DSPy", index, entry, "mappings of signature fields")
        role, text = plain
        if role == "user":
            pending = {fields.task: text}
            messages.append(pending)
        elif role == "assistant":
            answer = entry["content"]
            if pending is None:
                pending = {}
                messages.append(pending)
            if isinstance(answer, Mapping) and len(fields.outputs) != 1:
                pending.update(answer)
            elif fields.outputs:
                pending[fields.outputs[0]] = text
            pending = None
    return messages
