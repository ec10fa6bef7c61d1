"""Without OpenTelemetry loaded, or installed, a runtime imports nothing and observes nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

# Run in a fresh interpreter: the test process has OpenTelemetry loaded (the
# MCP SDK imports it), and an import cannot be taken back.
SCRIPT = textwrap.dedent(
    """
    import importlib.abc
    import os
    import sys

    import trio

    import trio_delegate as td
    import trio_delegate.testing as tdt


    async def work(ctx):
        await trio.lowlevel.checkpoint()
        return ctx.task


    async def scenario():
        async with td.open_runtime([td.Subagent("worker", work)]) as rt:
            async with rt.open_parent() as parent:
                await parent.delegate("worker", "foreground")
                handle = await parent.start("worker", "background")
                await parent.tools().call("wait_subagent", {"run_id": handle.run_id})
            return tdt.internals(rt).observed


    # Installed but never loaded: nobody can have set a provider, so the
    # runtime does not even look.
    assert trio.run(scenario) is False
    assert not [name for name in sys.modules if name.startswith("opentelemetry")]


    class Absent(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "opentelemetry" or name.startswith("opentelemetry."):
                raise ImportError(f"No module named {name!r}")
            return None


    # Not installed, while the environment names a provider to load: the
    # runtime tries, and goes on without.
    sys.meta_path.insert(0, Absent())
    os.environ["OTEL_PYTHON_TRACER_PROVIDER"] = "sdk_tracer_provider"
    assert trio.run(scenario) is False
    assert not [name for name in sys.modules if name.startswith("opentelemetry")]
    print("nothing imported")
    """
)


def test_nothing_is_imported_or_observed_without_opentelemetry() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "nothing imported"


#: The tracing API loaded (as the MCP SDK loads it) and no provider set: the
#: runtime observes nothing and loads neither its telemetry nor the metrics
#: API; once a tracer provider is set, a new runtime observes its runs.
TRACING_API_ONLY = textwrap.dedent(
    """
    import sys

    import opentelemetry.trace
    import trio

    import trio_delegate as td
    import trio_delegate.testing as tdt


    async def work(ctx):
        await trio.lowlevel.checkpoint()
        return ctx.task


    async def scenario():
        async with td.open_runtime([td.Subagent("worker", work)]) as rt:
            async with rt.open_parent() as parent:
                await parent.delegate("worker", "foreground")
            return tdt.internals(rt).observed


    assert trio.run(scenario) is False
    assert "opentelemetry.metrics" not in sys.modules
    assert "trio_delegate._otel" not in sys.modules

    from opentelemetry.sdk.trace import TracerProvider

    opentelemetry.trace.set_tracer_provider(TracerProvider())
    assert trio.run(scenario) is True
    print("observed once a provider was set")
    """
)


def test_the_tracing_api_alone_loads_nothing_more() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", TRACING_API_ONLY],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "observed once a provider was set"
