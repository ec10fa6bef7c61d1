"""Model subagents: a runner that is a model, its instructions and its tools.

:func:`model_runner` makes the runner of a :class:`~trio_delegate.Subagent`
whose work is a model's tool loop: call the model, run the tools it called,
send their results back, until it answers without calling a tool. The loop
runs inside the run's own scope, so every rule of the runtime applies to it
unchanged: the child deadline and a cancel request cancel the HTTP request
in flight, the subagent's ``children`` become the delegation tools of its
nested parent (``ctx.parent.tools()``), and fail-closed holds for them.

The conversation is kept in the provider's own message form and returned as
the run's transcript (``td.Output``), so ``continue_run`` resumes it exactly.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import ssl
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import Any, Final, Literal, final

import attrs
import trio

from .._checks import check_int, check_seconds, describe, is_a, is_mapping
from .._core import ChildContext
from .._errors import InvalidArgumentsError, LimitExceededError
from .._json import encode, escape_text, parse, text_problem
from .._results import Output
from .._usage import Usage
from ._model_live import (
    Prices,
    afford,
    ask_tools,
    check_prices,
    priced,
    tell_tool,
    tell_turn,
)
from ._model_mcp import check_mcp_servers, open_mcp_tools
from ._model_tools import FunctionTool, Tool, Toolbox, function_tools
from ._providers import ModelReply, Provider, sendable, user_entry

__all__ = ["ModelRunner", "TurnReport", "model_runner"]

_log = logging.getLogger("trio_delegate.model")

#: The providers a ``model`` string may name, with the SDK each needs.
PROVIDERS: Final = {"anthropic": "anthropic", "openai": "openai"}

#: The variable a provider's API key is read from unless told otherwise.
DEFAULT_KEY_ENV: Final = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}

#: The first wait before a retry without ``Retry-After``; it doubles each time.
_FIRST_BACKOFF: Final = 1.0
#: The longest wait before a retry without ``Retry-After``.
_MAX_BACKOFF: Final = 30.0

Api = Literal["responses", "chat"]


class ModelReplyError(Exception):
    """The model's final answer cannot be the run's result; the message says why."""


@final
@attrs.frozen
class TurnReport:
    """What one turn of the loop reports: the model call and the tools it called.

    Attributes:
        turn: the model call's number in this run, from 1.
        tools: the names of the tools the response called, in order.
        usage: the token counts the response reported.
    """

    turn: int
    tools: tuple[str, ...]
    usage: Usage


def report_turn(ctx: ChildContext, report: TurnReport) -> None:
    """Report one turn of a run: every turn of every model run goes through here.

    The response's usage counts for the run and everything above it
    (contract §20): a budget it crosses stops the run at this report.
    """
    ctx.add_usage(report.usage)
    _log.debug(
        "run %s (%s) turn %d: tools %s, input tokens %d, output tokens %d",
        ctx.run_id,
        ctx.subagent,
        report.turn,
        list(report.tools),
        report.usage.input_tokens,
        report.usage.output_tokens,
    )


@final
@attrs.frozen(eq=False)
class ModelRunner:
    """The runner of a model subagent; make one with :func:`model_runner`.

    Attributes:
        provider: ``"anthropic"`` or ``"openai"``.
        model: the provider's model id.
        instructions: the system prompt.
        tools: the Python function tools.
        max_turns: the most model calls one run makes.
        base_url: the API's address, or ``None`` for the SDK's default.
        api_key_env: the variable the API key is read from (``""``: no key).
        api: for OpenAI: ``"responses"`` or ``"chat"`` (Chat Completions).
        max_tokens: the most tokens one response may hold.
        max_retries: how often one model call is tried again after a rate
            limit, an overloaded or failing server, or a lost connection.
        request_timeout_seconds: the longest one HTTP request may take
            (``None``: only the run's deadline bounds it).
        options: more request parameters (``temperature``...), sent as they are.
        mcp_servers: the MCP servers whose tools the model is offered.
        prices: what the model's tokens cost, or ``None``.
        ask_timeout_seconds: how long an ``ask_parent`` call waits for an
            answer (``None``: until the run's deadline).
    """

    provider: str
    model: str
    instructions: str
    tools: tuple[FunctionTool, ...]
    max_turns: int
    base_url: str | None
    api_key_env: str
    api: Api
    max_tokens: int
    max_retries: int
    request_timeout_seconds: float | None
    options: Mapping[str, Any]
    mcp_servers: tuple[Any, ...] = ()
    prices: Prices | None = None
    ask_timeout_seconds: float | None = None
    #: One TLS context for every run's client: building one loads the CA
    #: bundle (about 20 ms of CPU and most of a client's 0.8 MiB), while each
    #: run keeps a client of its own, closed with the run.
    _tls: _TlsContext = attrs.field(factory=lambda: _TlsContext(), init=False, repr=False)

    async def __call__(self, ctx: ChildContext) -> Output:
        """Run the model's tool loop for one run.

        Raises:
            LimitExceededError: the model still called tools after ``max_turns``
                calls, or what the run's budgets leave cannot pay for the next call.
            InvalidArgumentsError: the API key's variable is not set.
            ModelReplyError: the final answer is not JSON although the run has a
                ``final_schema``.
            Exception: the provider's own error (an ``anthropic`` or ``openai``
                API error) when a model call failed for good.
        """
        delegation = ctx.parent.tools() if ctx.parent is not None else None
        conversation = [_history_entry(entry) for entry in ctx.history]
        conversation.append(user_entry(ctx.task))
        asks = ctx.asks
        spent = Usage()
        async with open_mcp_tools(self.mcp_servers) as remote, self._open_provider() as provider:
            functions: tuple[Tool, ...] = (*self.tools, *remote)
            ask = ask_tools(ctx, asks, self.ask_timeout_seconds, functions)
            toolbox = Toolbox((*functions, *ask), delegation)
            for turn in range(1, self.max_turns + 1):
                limit = await afford(ctx, turn, self.max_tokens, self.prices)
                reply = await self._call(ctx, provider, conversation, toolbox, limit)
                usage = priced(reply.usage, self.prices)
                spent += usage
                names = tuple(c.name for c in reply.calls)
                report_turn(ctx, TurnReport(turn, names, usage))
                tell_turn(ctx, turn, self.max_turns, names, spent)
                conversation.extend(sendable(reply.entries))
                if not reply.calls:
                    return Output(_final(ctx, reply), transcript=conversation)
                outcomes = []
                for index, each in enumerate(reply.calls, 1):
                    outcome = await toolbox.call(each.name, each.arguments)
                    where = (index, len(reply.calls))
                    tell_tool(ctx, turn, self.max_turns, each.name, outcome, where, spent)
                    outcomes.append(outcome)
                conversation.extend(provider.results(reply.calls, outcomes))
        raise LimitExceededError(
            f"the model still called tools after max_turns={self.max_turns} model calls; "
            "raise max_turns or give the subagent a smaller task"
        )

    async def _call(
        self,
        ctx: ChildContext,
        provider: Provider,
        conversation: list[Any],
        toolbox: Toolbox,
        max_tokens: int,
    ) -> ModelReply:
        """One model call, tried again on a transient failure while the deadline allows."""
        attempt = 0
        while True:
            try:
                return await provider.call(
                    conversation, toolbox.definitions, ctx.final_schema, max_tokens
                )
            except Exception as exc:
                wait = provider.retry_after(exc) if attempt < self.max_retries else None
                if wait is None:
                    raise
                if wait < 0:
                    wait = min(_FIRST_BACKOFF * 2**attempt, _MAX_BACKOFF)
                # A retry that could only start after the deadline would be
                # cut short by it: the provider's error is the better answer.
                if trio.current_time() + wait >= ctx.deadline:
                    raise
                attempt += 1
                _log.info(
                    "run %s: model call failed (%s), trying again in %.3g s",
                    ctx.run_id,
                    type(exc).__name__,
                    wait,
                )
                await trio.sleep(wait)

    @contextlib.asynccontextmanager
    async def _open_provider(self) -> AsyncIterator[Provider]:
        key = self._api_key()
        timeout = self.request_timeout_seconds
        if self.provider == "anthropic":
            import anthropic

            from ._providers._anthropic import AnthropicProvider

            async with anthropic.AsyncAnthropic(
                api_key=key,
                base_url=self.base_url,
                max_retries=0,
                timeout=timeout,
                http_client=anthropic.DefaultAsyncHttpxClient(verify=self._tls.get()),
            ) as client:
                yield AnthropicProvider(client, self.model, self.instructions, self.options)
            return
        import openai

        from ._providers._openai import ChatProvider, ResponsesProvider

        cls = ChatProvider if self.api == "chat" else ResponsesProvider
        async with openai.AsyncOpenAI(
            api_key=key,
            base_url=self.base_url,
            max_retries=0,
            timeout=timeout,
            http_client=openai.DefaultAsyncHttpxClient(verify=self._tls.get()),
        ) as client:
            yield cls(client, self.model, self.instructions, self.options)

    def _api_key(self) -> str:
        if not self.api_key_env:
            # A server that wants no key (a local one) ignores whatever is sent.
            return "none"
        key = os.environ.get(self.api_key_env)
        if not key:
            raise InvalidArgumentsError(
                f"the environment variable {self.api_key_env} (api_key_env) that holds the "
                f'{self.provider} API key is not set; set it, or pass api_key_env="" for a '
                "server that needs no key"
            )
        return key


class _TlsContext:
    """The TLS context a runner's clients share, made on first use."""

    __slots__ = ("_context",)

    def __init__(self) -> None:
        self._context: ssl.SSLContext | None = None

    def get(self) -> ssl.SSLContext:
        if self._context is None:
            import httpx

            # What the SDKs' clients would each build: certifi's CA bundle.
            self._context = httpx.create_ssl_context()
        return self._context


def _history_entry(entry: Any) -> Any:
    # An entry of the generic form (a run that gave no transcript) may carry a
    # structured result; every API wants text there.
    if (
        is_mapping(entry)
        and set(entry) == {"role", "content"}
        and entry["role"]
        in (
            "user",
            "assistant",
        )
    ):
        content = entry["content"]
        if not is_a(content, (str, list)):
            content = encode(content, max_depth=64)[0]
        return {"role": entry["role"], "content": content}
    return entry


def _final(ctx: ChildContext, reply: ModelReply) -> Any:
    # The model's text is recorded whatever it holds: a lone surrogate as its escape.
    text = escape_text(reply.text)
    if ctx.final_schema is None:
        return text
    try:
        return parse(text)
    except ValueError as exc:
        raise ModelReplyError(
            f"the model's final answer is not JSON ({exc}) although the run asks for a "
            f"final_schema; it began: {escape_text(reply.text[:200])!r}"
        ) from None


def _parse_model(model: Any) -> tuple[str, str]:
    if not is_a(model, str) or ":" not in model:
        raise InvalidArgumentsError(
            f"model_runner(model=...) must be '<provider>:<model id>' with provider one of "
            f"{sorted(PROVIDERS)} (e.g. 'anthropic:claude-sonnet-4-5'), got {describe(model)}"
        )
    provider, _, name = model.partition(":")
    if provider not in PROVIDERS:
        raise InvalidArgumentsError(
            f"model_runner(model=...) names the provider {provider!r}; the providers are "
            f"{sorted(PROVIDERS)}"
        )
    if not name.strip() or text_problem(name) is not None:
        raise InvalidArgumentsError(
            f"model_runner(model=...) {model!r} names no model id after '{provider}:'"
        )
    if importlib.util.find_spec(PROVIDERS[provider]) is None:
        raise InvalidArgumentsError(
            f"model_runner(model={model!r}) needs the {provider} SDK: install the "
            f"[{provider}] extra of trio-delegate (or the {provider} package)"
        )
    return provider, name


def model_runner(
    model: str,
    *,
    instructions: str = "",
    tools: Iterable[Callable[..., Any]] = (),
    max_turns: int = 20,
    base_url: str | None = None,
    api_key_env: str | None = None,
    api: Api = "responses",
    max_tokens: int = 4096,
    max_retries: int = 4,
    request_timeout_seconds: float | None = 600.0,
    options: Mapping[str, Any] | None = None,
    mcp_servers: Sequence[Any] = (),
    prices: Prices | Mapping[str, float] | None = None,
    ask_timeout_seconds: float | None = None,
) -> ModelRunner:
    """The runner of a subagent that is a model with instructions and tools.

    Hand it to :class:`~trio_delegate.Subagent`: ``td.Subagent("researcher",
    td.model_runner("anthropic:claude-sonnet-4-5", instructions=..., tools=[search]),
    description=..., children=("summarizer",))``. The subagent's ``children``
    become the model's delegation tools.

    While it runs, the run reports its progress after every model turn and
    tool call (``ctx.progress``: the turn as ``progress``, ``max_turns`` as
    ``total``, the tools called and the tokens so far in the message), and
    every response's usage (``ctx.add_usage``), priced by *prices*. A
    subagent declared with ``asks=True`` offers its model an ``ask_parent``
    tool (``ctx.ask``). Before each call, what the budgets leave
    (``ctx.remaining()``) clamps its ``max_tokens``; a call they cannot pay
    for is not made.

    Args:
        model: ``"<provider>:<model id>"``; the provider is ``anthropic``
            (the Messages API) or ``openai``.
        instructions: the system prompt.
        tools: Python functions (sync or async) the model may call; a
            tool's name is its ``__name__``, its description its docstring,
            its parameters' JSON Schema comes from its signature. Sync
            tools run on the event loop: make slow ones async.
        max_turns: the most model calls one run makes; the call past it is
            not made and the run fails naming ``max_turns``.
        base_url: the API's address (an OpenAI-compatible server's
            ``.../v1``), or ``None`` for the SDK's default.
        api_key_env: the environment variable the key is read from, at each
            run; default ``ANTHROPIC_API_KEY`` / ``OPENAI_API_KEY``; ``""``
            means the server needs no key.
        api: OpenAI only: ``"responses"`` (the Responses API) or ``"chat"``
            (Chat Completions, for OpenAI-compatible servers).
        max_tokens: the most tokens one response may hold.
        max_retries: how often one model call is tried again after a rate
            limit, an overloaded or failing server or a lost connection,
            waiting as ``Retry-After`` says (else 1 s, doubling, at most
            30 s) on the Trio clock, never past the run's deadline.
        request_timeout_seconds: the longest one HTTP request may take;
            ``None``: only the run's deadline bounds it.
        options: more request parameters sent with every call as they are
            (``temperature``, ``thinking``, ``reasoning``...).
        mcp_servers: MCP servers whose tools the model is offered beside
            *tools*: anything ``mcp.Client`` connects to (an
            ``mcp.StdioServerParameters``, a Streamable HTTP URL, an
            ``MCPServer``). Each run connects to them and lists their tools;
            the connections close when the run ends.
        prices: what the model's tokens cost (:class:`Prices`, or a mapping
            of its fields), in US dollars per million tokens: each
            response's ``cost_usd`` is computed from its token counts when
            the provider gives none, and a ``max_cost_usd`` budget clamps
            ``max_tokens``. ``None``: costs are what the provider says (0
            for Anthropic and OpenAI).
        ask_timeout_seconds: for a subagent declared with ``asks=True``, how
            long the model's ``ask_parent`` call waits for an answer;
            ``None``: until the run's deadline.

    Returns:
        the runner.

    Raises:
        InvalidArgumentsError: any argument is malformed, or the provider's
            SDK is not installed (the message says which extra to install).
    """
    provider, name = _parse_model(model)
    if not is_a(instructions, str) or text_problem(instructions) is not None:
        raise InvalidArgumentsError(
            "model_runner(instructions=...) must be valid Unicode text, got "
            f"{describe(instructions)}"
        )
    if api not in ("responses", "chat"):
        raise InvalidArgumentsError(
            f"model_runner(api=...) must be 'responses' or 'chat', got {describe(api)}"
        )
    if api == "chat" and provider != "openai":
        raise InvalidArgumentsError(
            f"model_runner(api='chat') is for the openai provider; {model!r} is {provider}"
        )
    if base_url is not None and (
        not is_a(base_url, str) or not base_url.startswith(("http://", "https://"))
    ):
        raise InvalidArgumentsError(
            f"model_runner(base_url=...) must be an http:// or https:// address or None, "
            f"got {describe(base_url)}"
        )
    if api_key_env is None:
        api_key_env = DEFAULT_KEY_ENV[provider]
    if not is_a(api_key_env, str) or (api_key_env and not api_key_env.isidentifier()):
        raise InvalidArgumentsError(
            f'model_runner(api_key_env=...) must name an environment variable, or be "" for '
            f"no key, got {describe(api_key_env)}"
        )
    if options is not None and not is_mapping(options):
        raise InvalidArgumentsError(
            f"model_runner(options=...) must be a mapping of request parameters, got "
            f"{describe(options)}"
        )
    return ModelRunner(
        provider=provider,
        model=name,
        instructions=instructions,
        tools=function_tools(tools),
        max_turns=check_int("model_runner(max_turns=...)", max_turns, minimum=1, maximum=10_000),
        base_url=base_url,
        api_key_env=api_key_env,
        api=api,
        max_tokens=check_int(
            "model_runner(max_tokens=...)", max_tokens, minimum=1, maximum=10_000_000
        ),
        max_retries=check_int("model_runner(max_retries=...)", max_retries, minimum=0, maximum=100),
        request_timeout_seconds=check_seconds(
            "model_runner(request_timeout_seconds=...)",
            request_timeout_seconds,
            allow_zero=False,
            allow_none=True,
        ),
        options=dict(options or {}),
        mcp_servers=check_mcp_servers(mcp_servers),
        prices=check_prices(prices),
        ask_timeout_seconds=check_seconds(
            "model_runner(ask_timeout_seconds=...)",
            ask_timeout_seconds,
            allow_zero=False,
            allow_none=True,
        ),
    )
