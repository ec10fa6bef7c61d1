"""Fake model APIs for driving real agent CLIs offline, on 127.0.0.1.

See :mod:`tests.fakes.clients` for running the CLIs against them.

:class:`FakeAnthropic` (the Messages API, for Claude Code) and
:class:`FakeResponses` (the Responses API, for Codex) answer each model
request with the next step of a script and log every request.
"""

from ._server import (
    Answer,
    Call,
    Failure,
    FakeModelServer,
    Hold,
    Malformed,
    Reply,
    Request,
    Step,
    ToolResult,
    Turn,
    Usage,
    call,
    text,
)
from .anthropic import FakeAnthropic
from .openai_chat import FakeChat
from .openai_responses import FakeResponses

__all__ = [
    "Answer",
    "Call",
    "Failure",
    "FakeAnthropic",
    "FakeChat",
    "FakeModelServer",
    "FakeResponses",
    "Hold",
    "Malformed",
    "Reply",
    "Request",
    "Step",
    "ToolResult",
    "Turn",
    "Usage",
    "call",
    "text",
]
