"""The asyncio bridge of trio_delegate.adapters: asyncio code inside the Trio run,
results and errors as themselves, and cancellation in both directions."""

from __future__ import annotations

import asyncio
import sys
import threading
import types

import pytest
import trio
import trio.testing

import trio_delegate as td
from trio_delegate import adapters
from trio_delegate.adapters import AsyncioBridgeError, asyncio_loop, run_asyncio
from trio_delegate.adapters._bridge import call_trio
from trio_delegate.adapters._common import json_text


async def _add(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


async def _boom() -> None:
    await asyncio.sleep(0)
    raise ValueError("boom")


async def test_run_asyncio_returns_the_result_on_a_loop_of_its_own() -> None:
    assert await run_asyncio(_add, 2, b=3) == 5


async def test_errors_come_out_as_themselves_with_or_without_a_shared_loop() -> None:
    with pytest.raises(ValueError, match="boom") as caught:
        await run_asyncio(_boom)
    assert not isinstance(caught.value, BaseExceptionGroup)
    async with asyncio_loop():
        with pytest.raises(ValueError, match="boom"):
            await run_asyncio(_boom)


async def test_an_error_in_the_loop_block_comes_out_as_itself() -> None:
    with pytest.raises(td.InvalidArgumentsError, match="body"):
        async with asyncio_loop():
            raise td.InvalidArgumentsError("from the body")


async def test_a_system_exit_in_the_loop_block_comes_out_as_itself() -> None:
    async def exit_in_block() -> None:
        async with asyncio_loop():
            await run_asyncio(_add, 1, 1)
            raise SystemExit(3)

    with pytest.raises(SystemExit) as caught:
        await exit_in_block()
    assert caught.value.code == 3


async def test_nested_blocks_and_calls_share_the_enclosing_loop() -> None:
    async def running_loop() -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

    async with asyncio_loop() as outer:
        async with asyncio_loop() as inner:
            assert inner is outer
        assert await run_asyncio(running_loop) is outer
        async with trio.open_nursery() as nursery:
            # Tasks started inside the block inherit the loop.
            found: list[asyncio.AbstractEventLoop] = []

            async def child() -> None:
                found.append(await run_asyncio(running_loop))

            nursery.start_soon(child)
        assert found == [outer]
    assert outer.is_closed()
    # Outside any block, each call has a loop of its own.
    first, second = await run_asyncio(running_loop), await run_asyncio(running_loop)
    assert first is not second


async def test_cancelling_trio_cancels_the_asyncio_task(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[str] = []

    async def slow() -> None:
        try:
            await asyncio.sleep(100)
        except asyncio.CancelledError:
            log.append(f"cancelled at {trio.current_time()}")
            raise

    with trio.move_on_after(3) as scope:
        await run_asyncio(slow)
    assert scope.cancelled_caught
    assert log == ["cancelled at 3.0"]


async def test_a_cancellation_asyncio_drops_is_delivered_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A future that completes although its task was cancelled drops the cancel
    (here: a Trio call that finishes its shielded work); the bridge delivers it
    again, so the task still ends soon after the deadline, not when it likes."""
    log: list[str] = []

    async def shielded_work() -> str:
        with trio.CancelScope(shield=True):
            await trio.sleep(2)
        return "finished anyway"

    async def agent() -> None:
        log.append(await call_trio(shielded_work))
        try:
            await asyncio.sleep(100)
        except asyncio.CancelledError:
            log.append(f"cancelled at {trio.current_time():.1f}")
            raise

    with trio.move_on_after(1) as scope:
        await run_asyncio(agent)
    assert scope.cancelled_caught
    assert log[0] == "finished anyway"
    assert log[1].startswith("cancelled at 2.")
    assert trio.current_time() < 2.5


async def test_cancelling_the_asyncio_side_cancels_the_trio_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[str] = []

    async def trio_work() -> None:
        try:
            await trio.sleep_forever()
        finally:
            log.append("trio work ended")

    async def agent() -> str:
        task = asyncio.ensure_future(call_trio(trio_work))
        await asyncio.sleep(1)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return "the trio call was cancelled"
        return "not cancelled"

    assert await run_asyncio(agent) == "the trio call was cancelled"
    assert log == ["trio work ended"]


async def test_a_tool_called_on_a_plain_asyncio_loop_says_what_to_do() -> None:
    """call_trio from asyncio code that does not run on the Trio loop."""
    outcome: list[BaseException] = []

    def on_plain_loop() -> None:
        loop = asyncio.SelectorEventLoop()
        try:
            loop.run_until_complete(call_trio(trio.sleep, 0))
        except AsyncioBridgeError as exc:
            outcome.append(exc)
        finally:
            loop.close()

    thread = threading.Thread(target=on_plain_loop)
    thread.start()
    await trio.to_thread.run_sync(thread.join)
    (error,) = outcome
    assert isinstance(error, td.DelegationError)
    assert "run_asyncio" in str(error)


async def test_an_anyio_imported_too_early_is_named_with_the_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stale = types.ModuleType("anyio._backends._asyncio")

    def unpatched_lookup() -> asyncio.AbstractEventLoop:
        raise RuntimeError("no running event loop")

    stale.get_running_loop = unpatched_lookup  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "anyio._backends._asyncio", stale)
    with pytest.raises(AsyncioBridgeError, match="-p trio_asyncio"):
        await run_asyncio(_add, 1, 2)
    with pytest.raises(AsyncioBridgeError, match="before trio_asyncio"):
        async with asyncio_loop():
            pass


def test_the_package_exports_the_bridge_and_the_matrix() -> None:
    assert adapters.run_asyncio is run_asyncio
    assert adapters.asyncio_loop is asyncio_loop
    assert set(adapters.__all__) >= {"CAPABILITIES", "Capability", "asyncio_loop", "run_asyncio"}
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        _ = adapters.nothing


def test_tool_text_is_valid_utf8_whatever_it_carries() -> None:
    """What a framework sends on to a model must encode; readable text stays readable."""
    assert json_text({"message": "naïve ✓"}) == '{"message":"naïve ✓"}'
    text = json_text({"message": "lone \ud800"})
    assert text.encode("utf-8") == b'{"message":"lone \\ud800"}'
