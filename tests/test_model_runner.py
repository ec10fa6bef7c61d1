"""Model subagents (docs/models.md): the tool loop on each API, against fakes on 127.0.0.1."""

from __future__ import annotations

from typing import Any

import pytest
import trio

import trio_delegate as td

from .fakes import Turn, call, text
from .helpers import open_parent
from .model_support import APIS, Api

pytestmark = pytest.mark.usefixtures("mock_clock")


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def shout(words: str) -> str:
    """Say *words* loudly."""
    await trio.lowlevel.checkpoint()
    return words.upper()


@pytest.mark.parametrize("api", APIS, ids=lambda api: api.name)
async def test_the_model_calls_tools_until_it_answers(api: Api) -> None:
    def after_add(turn: Turn) -> Any:
        assert turn.last.text == "5"
        return call("shout", words="done")

    script = [call("add", a=2, b=3), after_add, lambda turn: text(f"sum {turn.last.text}")]
    with api.fake(script) as fake:
        runner = api.runner(fake, instructions="Be brief.", tools=[add, shout])
        async with open_parent(td.Subagent("calc", runner)) as parent:
            result = await parent.delegate("calc", "add 2 and 3")
    assert result.final_result == "sum DONE"
    assert fake.problems == []
    assert fake.remaining == 0
    first = fake.turns[0].request
    names = _tool_names(api, first.body)
    assert names == ["add", "shout"]


def _tool_names(api: Api, body: dict[str, Any]) -> list[str]:
    if api.api == "chat":
        return [tool["function"]["name"] for tool in body["tools"]]
    return [tool["name"] for tool in body["tools"]]
