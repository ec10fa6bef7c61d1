"""Agent CLIs as subagents: ``kind = "claude"`` and ``kind = "codex"``, with the real binaries.

Each test runs the bundled ``claude`` or ``codex`` against a fake model API
on 127.0.0.1 (see ``tests/fakes``), in a throwaway home. Real processes and
real time: every wait is bounded, and every test checks that no process of
the CLI is left behind.
"""

from __future__ import annotations

import json
import sys
import textwrap
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

import trio_delegate as td
from trio_delegate._runners._agents import (
    AgentCLIRunner,
    _claude_usage,
    _codex_usage,
)
from trio_delegate._server_config import load_server_config
from trio_delegate._usage import reported_usage

from .fakes import (
    Failure,
    FakeAnthropic,
    FakeModelServer,
    FakeResponses,
    Hold,
    Reply,
    Step,
    Turn,
    Usage,
    call,
    text,
)
from .fakes.clients import (
    claude_env,
    claude_program,
    codex_env,
    codex_program,
    processes_with,
)
from .hostile_strategies import hostile_numbers

KINDS = ["claude", "codex"]
SCHEMA = {
    "type": "object",
    "properties": {"count": {"type": "integer"}},
    "required": ["count"],
    "additionalProperties": False,
}


class Agent:
    """One kind of CLI, its fake model API, and a subagent configured for it."""

    def __init__(self, kind: str, tmp_path: Path, script: list[Step]) -> None:
        self.kind = kind
        self.home = tmp_path / "home"
        self.work = tmp_path / "work"
        self.work.mkdir()
        self.fake: FakeModelServer = (
            FakeAnthropic(script) if kind == "claude" else FakeResponses(script)
        )
        # Every process the CLI starts inherits this, so none can hide.
        self.marker = f"TRIO_DELEGATE_TEST_RUN={uuid.uuid4().hex}"
        self.config = tmp_path / "subagents.toml"

    def subagent(self, *, timeout_seconds: float = 30, extra: str = "") -> td.Subagent:
        if self.kind == "claude":
            program = claude_program()
            assert isinstance(self.fake, FakeAnthropic)
            env = claude_env(self.home, self.fake)
        else:
            program = codex_program()
            assert isinstance(self.fake, FakeResponses)
            env = codex_env(self.home, self.fake)
        name, value = self.marker.split("=")
        env[name] = value
        self.config.write_text(
            textwrap.dedent(
                f"""
                [[subagents]]
                name = "agent"
                kind = "{self.kind}"
                description = "An agent CLI."
                program = {json.dumps(program)}
                cwd = "work"
                env = {{ {", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items())} }}
                timeout_seconds = {timeout_seconds}
                kill_grace_seconds = 1
                """
            )
            + extra
        )
        [subagent] = load_server_config(self.config).subagents
        return subagent

    def sessions(self) -> dict[Path, bytes]:
        """The CLI's stored sessions, by file."""
        root = self.home / (".claude" if self.kind == "claude" else ".codex")
        pattern = "projects/*/*.jsonl" if self.kind == "claude" else "sessions/**/*.jsonl"
        return {path: path.read_bytes() for path in root.glob(pattern)}


@contextmanager
def agent(kind: str, tmp_path: Path, script: list[Step]) -> Iterator[Agent]:
    cli = Agent(kind, tmp_path, script)
    with cli.fake:
        yield cli
    assert cli.fake.problems == []


@asynccontextmanager
async def parent_for(subagent: td.Subagent, *, failing: bool = False) -> AsyncIterator[td.Parent]:
    """A parent; for runs meant to fail, one that does not check resolution."""
    config = td.Config(fail_closed=not failing)
    async with td.open_runtime([subagent], config=config) as rt, rt.open_parent("host") as parent:
        yield parent


async def no_process_left(cli: Agent) -> None:
    with trio.fail_after(30):
        while processes_with(cli.marker):  # noqa: ASYNC110 - other processes
            await trio.sleep(0.02)


def text_of(turn: Turn) -> str:
    return json.dumps(turn.request.body)


@pytest.mark.parametrize("kind", KINDS)
async def test_result_then_a_continuation_that_forks_the_session(kind: str, tmp_path: Path) -> None:
    def second(turn: Turn) -> Any:
        # The fork carries the earlier conversation to the model.
        body = text_of(turn)
        assert "the first task" in body
        assert "the first answer" in body
        assert "and a follow-up" in body
        return text("the second answer")

    with agent(kind, tmp_path, [text("the first answer"), second]) as cli:
        subagent = cli.subagent()
        runner = subagent.runner
        assert isinstance(runner, AgentCLIRunner)
        assert runner.cwd == str(tmp_path / "work")
        with trio.fail_after(30):
            async with parent_for(subagent) as parent:
                first = await parent.delegate("agent", "the first task")
                assert first.final_result == "the first answer"
                before = cli.sessions()
                assert before
                second_run = await parent.continue_run(first.run_id, "and a follow-up")
                assert isinstance(second_run, td.RunResult)
                assert second_run.final_result == "the second answer"
        after = cli.sessions()
        # The earlier run's session is untouched; the fork is a new one.
        assert all(after[path] == content for path, content in before.items())
        assert len(after) == len(before) + 1
        await no_process_left(cli)


@pytest.mark.parametrize("kind", KINDS)
async def test_a_structured_result_through_the_clis_own_schema_option(
    kind: str, tmp_path: Path
) -> None:
    def answer(turn: Turn) -> Any:
        if kind == "claude":
            names = [tool["name"] for tool in turn.request.body["tools"]]
            assert "StructuredOutput" in names
            return call("StructuredOutput", count=3)
        assert turn.request.body["text"]["format"]["schema"] == SCHEMA
        return text('{"count": 3}')

    with agent(kind, tmp_path, [answer]) as cli:
        subagent = cli.subagent()
        with trio.fail_after(30):
            async with parent_for(subagent) as parent:
                result = await parent.delegate("agent", "count to three", final_schema=SCHEMA)
        assert result.final_result == {"count": 3}
        assert len(cli.fake.turns) == 1
        await no_process_left(cli)


@pytest.mark.parametrize(
    ("answer", "error", "fragment"),
    [
        ("three", td.RunFailedError, "not JSON"),
        ('{"count": "three"}', td.InvalidResultError, "count"),
    ],
)
async def test_an_answer_that_breaks_the_schema_fails_the_run(
    tmp_path: Path, answer: str, error: type[Exception], fragment: str
) -> None:
    # Claude Code checks the answer itself and asks its model again; Codex
    # hands back whatever the model wrote, which the run then checks.
    with agent("codex", tmp_path, [text(answer)]) as cli:
        subagent = cli.subagent()
        with trio.fail_after(30):
            async with parent_for(subagent, failing=True) as parent:
                handle = await parent.start("agent", "count", final_schema=SCHEMA)
                with pytest.raises(error) as info:
                    await parent.wait(handle.run_id)
        assert fragment in str(info.value)
        await no_process_left(cli)


@pytest.mark.parametrize(
    ("kind", "refusal", "says"),
    [
        # What the Messages API answers an account without credit (not
        # retried); Claude Code words it its own way.
        (
            "claude",
            Failure(400, "invalid_request_error", "Your credit balance is too low to access"),
            "Credit balance is too low",
        ),
        # A bad key (Codex is configured not to retry).
        (
            "codex",
            Failure(401, "invalid_api_key", "Incorrect API key provided: sk-test"),
            "401 Unauthorized: Incorrect API key provided: sk-test",
        ),
    ],
)
async def test_an_api_error_fails_the_run_with_the_clis_message(
    kind: str, refusal: Failure, says: str, tmp_path: Path
) -> None:
    with agent(kind, tmp_path, [refusal]) as cli:
        subagent = cli.subagent()
        with trio.fail_after(30):
            async with parent_for(subagent, failing=True) as parent:
                handle = await parent.start("agent", "anything")
                with pytest.raises(td.RunFailedError) as info:
                    await parent.wait(handle.run_id)
        cause = info.value.__cause__
        assert isinstance(cause, td.CommandFailedError)
        assert "reported an error" in cause.message
        assert says in cause.message
        assert says in str(info.value)
        await no_process_left(cli)


@pytest.mark.parametrize("kind", KINDS)
async def test_the_deadline_ends_the_cli_and_everything_it_started(
    kind: str, tmp_path: Path
) -> None:
    with agent(kind, tmp_path, [Hold()]) as cli:
        subagent = cli.subagent(timeout_seconds=2)
        with trio.fail_after(30):
            async with parent_for(subagent, failing=True) as parent:
                handle = await parent.start("agent", "think for ever")
                with pytest.raises(td.RunTimedOutError):
                    await parent.wait(handle.run_id)
        assert cli.fake.holding.is_set()  # it was mid-request when the deadline came
        await no_process_left(cli)


@pytest.mark.parametrize("kind", KINDS)
async def test_a_cancel_ends_the_cli_and_everything_it_started(kind: str, tmp_path: Path) -> None:
    with agent(kind, tmp_path, [Hold()]) as cli:
        subagent = cli.subagent()
        with trio.fail_after(30):
            async with parent_for(subagent, failing=True) as parent:
                handle = await parent.start("agent", "think for ever")
                while not cli.fake.holding.is_set():  # noqa: ASYNC110 - another thread
                    await trio.sleep(0.02)
                assert processes_with(cli.marker)
                assert parent.cancel(handle.run_id).cancel_requested
                with pytest.raises(td.RunCancelledError):
                    await parent.wait(handle.run_id)
                # Joined: nothing of it runs once the run has settled.
                assert processes_with(cli.marker) == []
        await no_process_left(cli)


async def test_a_history_from_elsewhere_is_written_out_ahead_of_the_message(
    tmp_path: Path,
) -> None:
    def answer(turn: Turn) -> Any:
        body = text_of(turn)
        assert "an earlier question" in body
        assert "the next message" in body
        return text("answered")

    with agent("codex", tmp_path, [answer]) as cli:
        runner = cli.subagent().runner
        assert isinstance(runner, AgentCLIRunner)

        async def recorded(ctx: td.ChildContext) -> td.Output:
            return td.Output("x", transcript=[{"role": "user", "content": "an earlier question"}])

        # A continuation whose history has no session of this CLI.
        calls = 0

        async def switch(ctx: td.ChildContext) -> Any:
            nonlocal calls
            calls += 1
            return await (recorded if calls == 1 else runner)(ctx)

        with trio.fail_after(30):
            async with parent_for(td.Subagent("agent", switch)) as parent:
                first = await parent.delegate("agent", "start")
                done = await parent.continue_run(first.run_id, "the next message")
        assert isinstance(done, td.RunResult)
        assert done.final_result == "answered"


# -- what a CLI writes that no parser reads ---------------------------------------------

DEEP = "[" * 100_000 + "]" * 100_000


def fake_cli(tmp_path: Path, lines: list[str]) -> str:
    """An executable that prints *lines* whatever its arguments, as a CLI would."""
    script = tmp_path / "fake-cli"
    script.write_text(
        f"#!{sys.executable}\nimport sys\nsys.stdin.read()\n"
        f"for line in {lines!r}:\n    print(line)\n"
    )
    script.chmod(0o755)
    return str(script)


async def test_a_line_nested_too_deep_is_skipped_like_any_other_non_json(
    tmp_path: Path,
) -> None:
    result = {"type": "result", "subtype": "success", "result": "fine", "session_id": "s-1"}
    program = fake_cli(tmp_path, [DEEP, json.dumps(result)])
    subagent = td.Subagent("agent", AgentCLIRunner("claude", program))
    with trio.fail_after(30):
        async with parent_for(subagent) as parent:
            assert (await parent.delegate("agent", "anything")).final_result == "fine"


async def test_an_answer_nested_too_deep_for_a_schema_fails_the_run_by_name(
    tmp_path: Path,
) -> None:
    events = [
        {"type": "thread.started", "thread_id": "t-1"},
        {"type": "item.completed", "item": {"type": "agent_message", "text": DEEP}},
    ]
    program = fake_cli(tmp_path, [json.dumps(event) for event in events])
    subagent = td.Subagent("agent", AgentCLIRunner("codex", program))
    with trio.fail_after(30):
        async with parent_for(subagent, failing=True) as parent:
            handle = await parent.start("agent", "count", final_schema=SCHEMA)
            with pytest.raises(td.RunFailedError) as info:
                await parent.wait(handle.run_id)
    assert isinstance(info.value.__cause__, td.CommandFailedError)
    assert "nests too deeply to read" in str(info.value)


# -- what the CLI spent ------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_the_tokens_the_model_reported_count_for_the_run(kind: str, tmp_path: Path) -> None:
    sent = Usage(
        input_tokens=100,
        output_tokens=20,
        cache_read_input_tokens=30,
        cache_creation_input_tokens=7 if kind == "claude" else 0,
        reasoning_output_tokens=0 if kind == "claude" else 4,
    )
    with agent(kind, tmp_path, [Reply(text="done", usage=sent)]) as cli:
        subagent = cli.subagent()
        with trio.fail_after(30):
            async with parent_for(subagent) as parent:
                done = await parent.delegate("agent", "anything")
                assert done.final_result == "done"
                spent = parent.usage(done.run_id)
        await no_process_left(cli)
    if kind == "claude":
        # Anthropic counts cached input apart; td.Usage counts it in input_tokens.
        assert spent.input_tokens == 100 + 30 + 7
        assert spent.requests == 1
        assert spent.cost_usd > 0  # Claude Code prices the tokens itself
    else:
        assert spent.input_tokens == 100
        assert spent.requests == 0  # Codex does not say
        assert spent.cost_usd == 0
    assert spent.output_tokens == 20
    assert spent.cache_read_input_tokens == 30
    assert spent.cache_creation_input_tokens == sent.cache_creation_input_tokens
    assert spent.reasoning_output_tokens == sent.reasoning_output_tokens


CLAUDE_FAILED = {
    "type": "result",
    "subtype": "error_max_turns",
    "is_error": True,
    "num_turns": 3,
    "total_cost_usd": 0.25,
    "usage": {"input_tokens": 1, "output_tokens": 1},
    "modelUsage": {
        "big": {"inputTokens": 40, "outputTokens": 9, "cacheReadInputTokens": 5},
        "small": {"inputTokens": 2, "outputTokens": 1, "cacheCreationInputTokens": 3},
    },
}
CODEX_FAILED = [
    {"type": "turn.completed", "usage": {"input_tokens": 40, "output_tokens": 9}},
    {
        "type": "turn.completed",
        "usage": {"input_tokens": 10, "cached_input_tokens": 5, "output_tokens": 1},
    },
    {"type": "turn.failed", "error": {"message": "usage limit reached"}},
]


@pytest.mark.parametrize("kind", KINDS)
async def test_what_a_failed_cli_run_spent_counts_all_the_same(kind: str, tmp_path: Path) -> None:
    lines = [CLAUDE_FAILED] if kind == "claude" else CODEX_FAILED
    program = fake_cli(tmp_path, [json.dumps(line) for line in lines])
    subagent = td.Subagent("agent", AgentCLIRunner(kind, program))  # type: ignore[arg-type]
    with trio.fail_after(30):
        async with parent_for(subagent, failing=True) as parent:
            handle = await parent.start("agent", "anything")
            with pytest.raises(td.RunFailedError):
                await parent.wait(handle.run_id)
            spent = parent.usage(handle.run_id)
    if kind == "claude":
        # Every model in modelUsage counts, the small one too; plain usage
        # (the main model's alone) is not added on top.
        assert spent == td.Usage(
            requests=3,
            input_tokens=40 + 5 + 2 + 3,
            output_tokens=10,
            cache_read_input_tokens=5,
            cache_creation_input_tokens=3,
            cost_usd=0.25,
        )
    else:
        assert spent == td.Usage(input_tokens=50, output_tokens=10, cache_read_input_tokens=5)


async def test_numbers_that_are_not_counts_count_as_zero(tmp_path: Path) -> None:
    result = {
        "type": "result",
        "subtype": "success",
        "result": "fine",
        "num_turns": True,
        "total_cost_usd": "1e308",
        "usage": {
            "input_tokens": -5,
            "output_tokens": 2.0,
            "cache_read_input_tokens": 2**70,
            "cache_creation_input_tokens": "7",
        },
    }
    program = fake_cli(tmp_path, [json.dumps(result)])
    subagent = td.Subagent("agent", AgentCLIRunner("claude", program))
    with trio.fail_after(30):
        async with parent_for(subagent) as parent:
            done = await parent.delegate("agent", "anything")
            assert done.final_result == "fine"
            spent = parent.usage(done.run_id)
    # Only the clamped cache count is a count; input includes it.
    assert spent == td.Usage(input_tokens=2**63 - 1, cache_read_input_tokens=2**63 - 1)


#: What a CLI's JSON may hold where a count belongs.
ANY_JSON = st.recursive(
    st.none() | st.booleans() | hostile_numbers | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=30), inner),
    max_leaves=6,
)
CLAUDE_KEYS = ["num_turns", "total_cost_usd", "usage", "modelUsage"]
COUNT_KEYS = [
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
    "cached_input_tokens",
    "cache_write_input_tokens",
    "reasoning_output_tokens",
    "inputTokens",
    "outputTokens",
    "cacheReadInputTokens",
    "cacheCreationInputTokens",
]
FIELDS = st.dictionaries(st.sampled_from(COUNT_KEYS), ANY_JSON)


@given(
    result=st.dictionaries(
        st.sampled_from(CLAUDE_KEYS),
        ANY_JSON | FIELDS | st.dictionaries(st.text(max_size=3), FIELDS | ANY_JSON),
    ),
    turns=st.lists(st.fixed_dictionaries({"usage": FIELDS | ANY_JSON}), max_size=3),
)
def test_whatever_a_cli_says_it_spent_is_a_usage(
    result: dict[str, Any], turns: list[dict[str, Any]]
) -> None:
    claude = _claude_usage([{**result, "type": "result"}])
    codex = _codex_usage([{**turn, "type": "turn.completed"} for turn in turns])
    for usage in (claude, codex):
        if usage is not None:
            # A valid Usage, as Usage itself checks (it raises otherwise).
            assert td.Usage(**attrs.asdict(usage)) == usage
            assert usage.input_tokens >= usage.cache_read_input_tokens


USAGE_FIELDS = [
    "requests",
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
    "reasoning_output_tokens",
    "cost_usd",
]


@given(st.dictionaries(st.sampled_from(USAGE_FIELDS), ANY_JSON | st.integers(0, 2**63 - 1)))
def test_reported_usage_keeps_counts_clamped_and_zeroes_the_rest(fields: dict[str, Any]) -> None:
    usage = reported_usage(**fields)
    for name in ("requests", "cache_read_input_tokens", "cache_creation_input_tokens"):
        value: Any = fields.get(name)
        # A whole number >= 0 is kept, clamped at 2**63-1; anything else is 0.
        expected = min(value, 2**63 - 1) if type(value) is int and value >= 0 else 0
        assert getattr(usage, name) == expected
    # The totals hold their parts, as td.Usage counts them.
    assert usage.output_tokens >= usage.reasoning_output_tokens
    assert usage.input_tokens >= min(
        usage.cache_read_input_tokens + usage.cache_creation_input_tokens, 2**63 - 1
    )
