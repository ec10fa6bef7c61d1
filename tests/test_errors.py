"""Contract §9: the error classes, what they carry and how they render."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
import trio.testing

import trio_delegate as td
from tests.helpers import forever, open_parent, open_parent_lenient, raising, returning, sub

ALL_ERRORS: list[type[td.DelegationError]] = [
    td.UnknownSubagentError,
    td.UnknownRunError,
    td.ExpiredRunError,
    td.RunFailedError,
    td.InvalidResultError,
    td.RunCancelledError,
    td.RunTimedOutError,
    td.UnresolvedDelegationError,
    td.LimitExceededError,
    td.InvalidArgumentsError,
    td.RuntimeClosedError,
    td.QuestionDeclinedError,
    td.AskTimeoutError,
    td.InputUnavailableError,
]


def test_every_error_is_a_delegation_error() -> None:
    for error in ALL_ERRORS:
        assert issubclass(error, td.DelegationError)
    assert issubclass(td.DelegationError, Exception)
    assert issubclass(td.ExpiredRunError, td.UnknownRunError)
    assert issubclass(td.InvalidResultError, td.RunFailedError)


def test_payload_kinds_are_snake_case() -> None:
    assert [error.kind() for error in ALL_ERRORS] == [
        "unknown_subagent",
        "unknown_run",
        "expired_run",
        "run_failed",
        "invalid_result",
        "run_cancelled",
        "run_timed_out",
        "unresolved_delegation",
        "limit_exceeded",
        "invalid_arguments",
        "runtime_closed",
        "question_declined",
        "ask_timeout",
        "input_unavailable",
    ]


def _payload(error: td.DelegationError) -> dict[str, Any]:
    payload = error.to_payload()
    # JSON-ready, and a single "error" object.
    assert json.loads(json.dumps(payload)) == payload
    assert list(payload) == ["error"]
    body = payload["error"]
    assert isinstance(body, dict)
    assert body["type"] == error.kind()
    assert body["message"] == str(error)
    return body


async def test_run_failed_error_names_the_run_the_subagent_and_the_cause(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cause = KeyError("missing thing")
    async with open_parent_lenient(sub("fetcher", raising(cause))) as parent:
        handle = await parent.start("fetcher", "t")
        with pytest.raises(td.RunFailedError) as info:
            await parent.wait(handle.run_id)
    error = info.value
    assert error.__cause__ is cause
    assert error.run_id == handle.run_id
    assert error.subagent == "fetcher"
    assert error.status == "failed"
    message = str(error)
    assert handle.run_id in message
    assert "fetcher" in message
    assert "KeyError" in message
    assert "missing thing" in message
    assert "replaces=" in message  # what the caller can do next
    body = _payload(error)
    assert body["run_id"] == handle.run_id
    assert body["subagent"] == "fetcher"
    assert body["status"] == "failed"


async def test_every_wait_on_a_failed_run_raises_with_the_same_cause(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cause = RuntimeError("boom")
    async with open_parent_lenient(sub("bad", raising(cause))) as parent:
        handle = await parent.start("bad", "t")
        with pytest.raises(td.RunFailedError) as first:
            await parent.wait(handle.run_id)
        with pytest.raises(td.RunFailedError) as second:
            await parent.wait(handle.run_id)
    assert first.value.__cause__ is cause
    assert second.value.__cause__ is cause
    assert str(first.value) == str(second.value)


@pytest.mark.parametrize(
    ("timeout", "error", "status", "phrase"),
    [
        (None, td.RunCancelledError, "cancelled", "cancelled"),
        (2.0, td.RunTimedOutError, "timed_out", "timed out"),
    ],
)
async def test_cancelled_and_timed_out_errors_name_run_and_subagent(
    autojump_clock: trio.testing.MockClock,
    timeout: float | None,
    error: type[td.DelegationError],
    status: str,
    phrase: str,
) -> None:
    async with open_parent_lenient(sub("worker", forever, timeout_seconds=timeout)) as parent:
        handle = await parent.start("worker", "t")
        if timeout is None:
            await trio.sleep(1)
            parent.cancel(handle.run_id)
        with pytest.raises(error) as info:
            await parent.wait(handle.run_id)
    exc = info.value
    assert (exc.run_id, exc.subagent, exc.status) == (handle.run_id, "worker", status)
    assert handle.run_id in str(exc)
    assert "worker" in str(exc)
    assert phrase in str(exc)
    body = _payload(exc)
    assert (body["run_id"], body["subagent"], body["status"]) == (handle.run_id, "worker", status)


async def test_unknown_and_expired_run_errors_carry_the_run_id(
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = td.Config(retention_max_runs=1)
    async with open_parent(sub("ok", returning(1)), config=config) as parent:
        old = await parent.delegate("ok", "t")
        await parent.delegate("ok", "t")
        with pytest.raises(td.ExpiredRunError) as expired:
            parent.status(old.run_id)
        with pytest.raises(td.UnknownRunError) as unknown:
            parent.status("run_nope")
    for info, run_id in ((expired, old.run_id), (unknown, "run_nope")):
        assert info.value.run_id == run_id
        assert run_id in str(info.value)
        assert _payload(info.value)["run_id"] == run_id
    assert "expired" in str(expired.value)
    assert _payload(expired.value)["type"] == "expired_run"


async def test_unknown_subagent_error_names_it_and_lists_the_allowed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_parent(sub("alpha", returning(1)), sub("beta", returning(2))) as parent:
        with pytest.raises(td.UnknownSubagentError) as info:
            await parent.delegate("gamma", "t")
    error = info.value
    assert error.subagent == "gamma"
    assert error.allowed == ("alpha", "beta")
    assert "gamma" in str(error)
    assert "alpha" in str(error)
    assert "beta" in str(error)
    body = _payload(error)
    assert body["subagent"] == "gamma"
    assert body["allowed"] == ["alpha", "beta"]


async def test_unresolved_delegation_error_payload_lists_every_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with pytest.raises(td.UnresolvedDelegationError) as info:  # noqa: PT012 - the block exit is under test
        async with open_parent(sub("ok", returning(1)), sub("bad", raising(OSError()))) as p:
            done = await p.start("ok", "t")
            failed = await p.start("bad", "t")
            await trio.sleep(1)
    body = _payload(info.value)
    assert [(e["run_id"], e["subagent"], e["status"]) for e in body["unresolved"]] == [
        (done.run_id, "ok", "completed"),
        (failed.run_id, "bad", "failed"),
    ]
    assert all(isinstance(e["why"], str) and e["why"] for e in body["unresolved"])


async def test_limit_exceeded_error_names_the_limit_and_subagent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = td.Config(max_live_runs=1, fail_closed=False)
    async with open_parent(sub("idle", forever), config=config) as parent:
        await parent.start("idle", "t")
        with pytest.raises(td.LimitExceededError) as info:
            await parent.start("idle", "t")
    assert "max_live_runs" in str(info.value)
    assert info.value.subagent == "idle"
    assert _payload(info.value)["subagent"] == "idle"


def test_question_errors_carry_their_question_in_the_payload() -> None:
    declined = td.QuestionDeclinedError(
        "declined", question_id="q_1", reason="not now", run_id="run_1"
    )
    assert _payload(declined) == {
        "type": "question_declined",
        "message": "declined",
        "run_id": "run_1",
        "question_id": "q_1",
        "reason": "not now",
    }
    timed_out = td.AskTimeoutError("too slow", question_id="q_2", run_id="run_1")
    assert isinstance(timed_out, TimeoutError)
    assert _payload(timed_out) == {
        "type": "ask_timeout",
        "message": "too slow",
        "run_id": "run_1",
        "question_id": "q_2",
    }


def test_payload_omits_fields_that_do_not_apply() -> None:
    body = _payload(td.InvalidArgumentsError("task must be a string"))
    assert body == {"type": "invalid_arguments", "message": "task must be a string"}


def _public_exceptions() -> list[tuple[str, str, type[BaseException]]]:
    """(face, name, class) of every exception class a public face exports."""
    import trio_delegate.mcp
    import trio_delegate.testing

    found = []
    for face in (td, trio_delegate.mcp, trio_delegate.testing):
        for name in face.__all__:
            value = getattr(face, name)
            if isinstance(value, type) and issubclass(value, BaseException):
                found.append((face.__name__, name, value))
    return found


def test_every_public_exception_class_is_defined_with_the_others() -> None:
    from trio_delegate import _errors

    exported = _public_exceptions()
    assert {name for _, name, _ in exported} >= {
        "CommandFailedError",
        "ConfigError",
        "IndeterminateError",
    }
    for face, name, value in exported:
        assert getattr(_errors, name, None) is value, f"{face}.{name} is not from _errors"


def test_a_client_configuration_that_cannot_be_made_is_a_delegation_error() -> None:
    from trio_delegate._mcp_config import McpConfigError

    error = McpConfigError("the file is missing", "pass --config FILE")
    assert isinstance(error, td.DelegationError)
    assert isinstance(error, ValueError)  # what the Codex adapter's helper documents
    assert str(error) == "the file is missing\n  fix: pass --config FILE"
    assert (error.problem, error.fix) == ("the file is missing", "pass --config FILE")
    assert _payload(error) == {"type": "mcp_config", "message": str(error)}
