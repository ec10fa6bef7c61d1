"""Model subagents against the fake model APIs: one description per API.

Every test of a model runner runs against a fake on 127.0.0.1 (tests/fakes)
under a mock clock that does not move unless a test moves it, so no
deadline fires while a fake's thread answers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

import attrs

import trio_delegate as td

from .fakes import FakeAnthropic, FakeChat, FakeModelServer, FakeResponses, Step


@attrs.frozen
class Api:
    """One model API: its fake and how a model runner reaches it."""

    name: str
    fake: Callable[[Sequence[Step]], FakeModelServer]
    model: str
    api: str
    path: str  # what goes after the fake's url in base_url

    def runner(self, fake: FakeModelServer, **options: Any) -> td.ModelRunner:
        """A model runner on *fake*, with no key and no request timeout (the clock is mocked)."""
        options.setdefault("api_key_env", "")
        options.setdefault("request_timeout_seconds", None)
        if self.api == "chat":
            options["api"] = "chat"
        return td.model_runner(self.model, base_url=fake.url + self.path, **options)


ANTHROPIC: Final = Api("anthropic", FakeAnthropic, "anthropic:claude-test", "messages", "")
RESPONSES: Final = Api("responses", FakeResponses, "openai:gpt-test", "responses", "/v1")
CHAT: Final = Api("chat", FakeChat, "openai:local-test", "chat", "/v1")

APIS: Final = (ANTHROPIC, RESPONSES, CHAT)
