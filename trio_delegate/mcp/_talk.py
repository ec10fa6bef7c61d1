"""What a running child tells its parent, over MCP (contract §19).

Progress and questions reach a client on the channel its request declared:

* A request that declared the Tasks extension and form elicitation reads an
  asking run's task as ``input_required``, its open questions as
  ``inputRequests`` (each an ``elicitation/create`` in form mode, keyed by
  its question id, so a key is stable across polls and never reused), and
  answers or declines with ``tasks/update`` (:func:`apply_responses`).
  Progress rides the task's ``statusMessage``.
* A request that declared the Tasks extension but not form elicitation reads
  the task ``working``, the question in its ``statusMessage``, and answers
  with the ``answer_subagent`` tool.
* A foreground ``tools/call`` of any other request that carries a
  ``progressToken`` hears ``notifications/progress`` with the child's latest
  report (:func:`report_progress`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import mcp_types
import trio
from mcp.server import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from .. import DelegationError, InvalidArgumentsError, RunStatus
from .._checks import describe

if TYPE_CHECKING:
    from .. import Parent, Progress, Question, RunHandle

__all__ = [
    "ANSWER_FIELD",
    "apply_responses",
    "declares_form_elicitation",
    "input_requests",
    "progress_text",
    "question_text",
    "report_progress",
    "requested_schema",
    "status_words",
]

_CAPABILITIES_KEY: Final = "io.modelcontextprotocol/clientCapabilities"

#: The JSON Schema types a form field may have (MCP elicitation: a flat
#: object of primitives).
_PRIMITIVES: Final = frozenset({"string", "number", "integer", "boolean"})

#: What a form's schema may say at its top level and of each field.
_FORM_KEYS: Final = frozenset(
    {"type", "properties", "required", "title", "description", "$schema", "additionalProperties"}
)
_FIELD_KEYS: Final = frozenset(
    {
        "type",
        "title",
        "description",
        "default",
        "enum",
        "enumNames",
        "minLength",
        "maxLength",
        "format",
        "minimum",
        "maximum",
    }
)

#: The key under which a question whose schema is not a form is asked.
ANSWER_FIELD: Final = "answer"

#: What a ``tasks/update`` response's ``action`` may be.
_ACTIONS: Final = ("accept", "decline", "cancel")


def declares_form_elicitation(ctx: ServerRequestContext[Any]) -> bool:
    """Whether the 2026-07-28 request of *ctx* declared form elicitation.

    In its own ``_meta`` client capabilities, as it declares the Tasks
    extension (tasks exist on such requests only). An empty ``elicitation``
    object means form mode (the MCP specification's rule for clients that
    predate the modes).
    """
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False
    meta = ctx.params.get("_meta") if isinstance(ctx.params, Mapping) else None
    capabilities = meta.get(_CAPABILITIES_KEY) if isinstance(meta, Mapping) else None
    elicitation = capabilities.get("elicitation") if isinstance(capabilities, Mapping) else None
    if not isinstance(elicitation, Mapping):
        return False
    return not elicitation or "form" in elicitation


def progress_text(progress: Progress) -> str:
    """A progress report in words: its message and how far, e.g. ``parsing (3/10)``."""
    amount = ""
    if progress.progress is not None:
        amount = f"{progress.progress:g}"
        if progress.total is not None:
            amount += f"/{progress.total:g}"
    elif progress.total is not None:
        amount = f"?/{progress.total:g}"
    parts = [part for part in (progress.message, f"({amount})" if amount else "") if part]
    return " ".join(parts) if parts else f"report {progress.seq}"


def question_text(question: Question) -> str:
    """How a ``statusMessage`` names an open question and the way to answer it."""
    return (
        f"question {question.question_id}: {question.text!r}; answer it with answer_subagent "
        f"(run_id {question.run_id!r}, question_id {question.question_id!r})"
    )


def _is_form(schema: Mapping[str, Any]) -> bool:
    properties = schema.get("properties")
    if schema.get("type") != "object" or not isinstance(properties, Mapping):
        return False
    if not _FORM_KEYS.issuperset(schema) or schema.get("additionalProperties", False) is True:
        return False
    return all(
        isinstance(field, Mapping)
        # A type may be a list or anything else a schema holds: only a
        # string names a primitive.
        and isinstance(field.get("type"), str)
        and field["type"] in _PRIMITIVES
        and _FIELD_KEYS.issuperset(field)
        for field in properties.values()
    )


def requested_schema(schema: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """The form a question is asked with, and whether its answer is wrapped.

    A schema that is a flat object of primitives is the form itself; any
    other (a string, a list, nested objects) is asked as one field,
    ``{"answer": <schema>}``.
    """
    if _is_form(schema):
        return dict(schema), False
    return (
        {
            "type": "object",
            "properties": {ANSWER_FIELD: dict(schema)},
            "required": [ANSWER_FIELD],
        },
        True,
    )


def input_requests(questions: tuple[Question, ...]) -> dict[str, Any]:
    """A run's open questions as a task's ``inputRequests``, keyed by question id."""
    return {
        question.question_id: {
            "method": "elicitation/create",
            "params": {
                "mode": "form",
                "message": question.text,
                "requestedSchema": requested_schema(question.schema)[0],
            },
        }
        for question in questions
    }


def _invalid(message: str) -> MCPError:
    return MCPError(code=mcp_types.INVALID_PARAMS, message=message)


def apply_responses(parent: Parent, handle: RunHandle, responses: Any) -> None:
    """Apply a ``tasks/update``'s ``inputResponses`` to the run of *handle*.

    Only the keys that are open questions of this run are read (what else
    the client sends, another task's keys included, is ignored), so the
    work is bounded by the run's open questions whatever the request holds.
    Each response is applied on its own: ``accept`` answers the question
    with ``content`` (its ``answer`` field when the question was wrapped),
    ``decline`` and ``cancel`` decline it.

    Raises:
        MCPError: ``-32602`` when ``inputResponses`` is not an object, or a
            response to an open question is malformed or fails the
            question's schema (that question stays open; the others are
            applied), naming the key and what is allowed.
    """
    if not isinstance(responses, Mapping):
        raise _invalid(
            f"inputResponses must be an object keyed by the inputRequests keys, got "
            f"{describe(responses)}; send {{<key>: {{action, content}}}}"
        )
    problems: list[str] = []
    for question in handle.questions:
        key = question.question_id
        if key not in responses:
            continue
        try:
            _apply(parent, question, responses[key])
        except (InvalidArgumentsError, _Malformed) as exc:
            problems.append(f"inputResponses[{key!r}]: {exc}")
        except DelegationError:
            # The run ended or went away meanwhile: nothing left to answer.
            continue
    if problems:
        raise _invalid("; ".join(problems))


class _Malformed(ValueError):
    """A response that is not ``{action, content}``."""


def _apply(parent: Parent, question: Question, response: Any) -> None:
    action = response.get("action") if isinstance(response, Mapping) else None
    if type(action) is not str or action not in _ACTIONS:
        raise _Malformed(
            f"must be an object with action 'accept', 'decline' or 'cancel', got "
            f"{describe(response)}"
        )
    run_id, key = question.run_id, question.question_id
    if action != "accept":
        reason = "the client declined" if action == "decline" else "the client cancelled"
        parent.decline(run_id, question_id=key, reason=reason)
        return
    content = response.get("content")
    _, wrapped = requested_schema(question.schema)
    if wrapped:
        if not isinstance(content, Mapping) or ANSWER_FIELD not in content:
            raise _Malformed(
                f"content must be an object with the field {ANSWER_FIELD!r} (the question's "
                f"requestedSchema), got {describe(content)}"
            )
        value = content[ANSWER_FIELD]
    else:
        if not isinstance(content, Mapping):
            raise _Malformed(
                f"content must be an object matching the question's requestedSchema, got "
                f"{describe(content)}"
            )
        value = dict(content)
    try:
        parent.answer(run_id, value, question_id=key)
    except InvalidArgumentsError as exc:
        raise _Malformed(exc.message) from None


async def report_progress(
    ctx: ServerRequestContext[Any],
    parent: Parent,
    handle: Mapping[str, Any],
    interval: float,
) -> None:
    """Report a foreground run's progress to the request of *ctx*, once per *interval*.

    A no-op for a request without a ``progressToken`` (the SDK drops the
    reports). Each notice's ``progress`` is one more than the last one's, or
    the report's ``seq`` when that is higher, so it only ever increases;
    ``message`` is the child's latest report, or, before any, says how long
    the run has been going (a keepalive, so that clients which reset their
    timeout on progress keep waiting). Cancel the caller's scope before the
    call answers: nothing is sent afterwards.
    """
    run_id, subagent = handle["run_id"], handle["subagent"]
    started = trio.current_time()
    sent = 0
    while True:
        await trio.sleep(interval)
        try:
            progress = parent.status(run_id).progress
        except DelegationError:
            progress = None  # evicted or closed meanwhile: the wait answers for it
        if progress is not None:
            sent = max(sent + 1, progress.seq)
            message = f"run {run_id} of {subagent}: {progress_text(progress)}"
        else:
            sent += 1
            elapsed = trio.current_time() - started
            message = f"run {run_id} of {subagent} still running after {elapsed:.0f} s"
        await ctx.session.report_progress(sent, None, message)


def status_words(handle: RunHandle, *, elicit: bool) -> str:
    """A live task's ``statusMessage``: its status, its question, its latest progress."""
    words = f"the run of {handle.subagent} is {handle.status.value}"
    if handle.status is RunStatus.INPUT_REQUIRED and handle.questions:
        if elicit:
            words = f"the run of {handle.subagent} waits for an answer (see inputRequests)"
        else:
            words = (
                f"the run of {handle.subagent} waits for an answer to "
                f"{question_text(handle.questions[0])}"
            )
    if handle.progress is not None:
        words += f"; progress: {progress_text(handle.progress)}"
    return words
