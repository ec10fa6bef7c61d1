"""The wheel, installed into a clean venv on each interpreter present, works as a user gets it.

``make wheel-smoke`` (part of ``make test``): build the wheel once with
``uv build``, then for each Python 3.11, 3.12 and 3.13 found on this machine
make a new venv, install the wheel with its ``mcp`` extra (uv's cache keeps
this to seconds), check the description it installed (no checkout commands;
the install line), and in an empty folder run what a new user runs: the demo,
the README's script, ``trio-delegate init``, and ``trio-delegate serve
--config subagents.toml``, which must answer ``initialize`` and
``tools/list`` with the delegation tools. Nothing comes from the
checkout but the wheel: no ``docs/``, no ``examples/``.

Run directly: ``.venv/bin/python tests/wheel_smoke.py``. Exits 1 naming the
step that failed; 1 too when no interpreter is found at all.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parent.parent
VERSIONS = ("3.11", "3.12", "3.13")
TOOLS = {
    "delegate_task",
    "subagent_status",
    "wait_subagent",
    "cancel_subagent",
    "continue_subagent",
    "list_subagent_runs",
}
# A hang guard only: each step takes seconds.
STEP_TIMEOUT_SECONDS = 180
README_SCRIPT = re.compile(r"<!-- runnable -->\n```python\n(.*?)```", re.S)


class SmokeError(Exception):
    """A step failed: what ran, and what it printed."""


def _works(python: str, version: str) -> bool:
    try:
        done = subprocess.run(
            [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except OSError:
        return False
    return done.returncode == 0 and done.stdout.strip() == version


def interpreters() -> dict[str, str]:
    """Each wanted version → a working interpreter of it (PATH first, then pyenv's)."""
    found: dict[str, str] = {}
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    for version in VERSIONS:
        candidates = [shutil.which(f"python{version}") or ""]
        candidates += sorted(glob.glob(str(pyenv / f"{version}.*" / "bin" / f"python{version}")))
        for candidate in candidates:
            if candidate and _works(candidate, version):
                found[version] = candidate
                break
    return found


def run(command: list[str], *, cwd: Path, stdin: str | None = None) -> str:
    """Run *command*; its stdout, or SmokeError with everything it printed."""
    done = subprocess.run(
        command,
        cwd=cwd,
        input=stdin if stdin is not None else "",
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT_SECONDS,
        check=False,
    )
    if done.returncode != 0:
        raise SmokeError(
            f"{' '.join(command)} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
        )
    return done.stdout


def build_wheel(uv: str, out: Path) -> Path:
    run([uv, "build", "--wheel", "--quiet", "--out-dir", str(out), str(ROOT)], cwd=ROOT)
    (wheel,) = out.glob("trio_delegate-*.whl")
    return wheel


def _frame(message: dict[str, object]) -> str:
    return json.dumps(message) + "\n"


def _answer(server: subprocess.Popen[str], request_id: int) -> dict[str, Any]:
    assert server.stdout is not None
    for line in server.stdout:
        message = json.loads(line)
        if message.get("id") == request_id:
            return cast("dict[str, Any]", message)
    raise SmokeError(f"serve closed stdout before answering request {request_id}")


def serve_lists_tools(script: Path, folder: Path) -> set[str]:
    """Start ``serve`` on the starter configuration; the tools ``tools/list`` answers."""
    server = subprocess.Popen(
        [str(script), "serve", "--config", "subagents.toml"],
        cwd=folder,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # A hang guard only: the server answers in well under a second.
    guard = threading.Timer(STEP_TIMEOUT_SECONDS, server.kill)
    guard.start()
    try:
        assert server.stdin is not None
        server.stdin.write(
            _frame(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": "2025-06-18",
                        "capabilities": {},
                        "clientInfo": {"name": "wheel-smoke", "version": "0"},
                    },
                }
            )
        )
        server.stdin.flush()
        _answer(server, 1)
        server.stdin.write(_frame({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        server.stdin.write(_frame({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
        server.stdin.flush()
        listed = _answer(server, 2)
        # End of stdin: the client is gone, and the server exits.
        server.stdin.close()
        if server.wait() != 0:
            assert server.stderr is not None
            raise SmokeError(f"serve exited {server.returncode}: {server.stderr.read()!r}")
    finally:
        guard.cancel()
        if server.poll() is None:
            server.kill()
            server.wait()
    if "result" not in listed:
        raise SmokeError(f"serve did not answer tools/list: {listed!r}")
    return {tool["name"] for tool in listed["result"]["tools"]}


def smoke(uv: str, version: str, python: str, wheel: Path, work: Path) -> float:
    """Every step on one interpreter; the seconds it took."""
    started = time.monotonic()
    venv = work / f"venv-{version}"
    run([uv, "venv", "--quiet", "--python", python, str(venv)], cwd=work)
    bin_dir = venv / "bin"
    run(
        [uv, "pip", "install", "--quiet", "--python", str(bin_dir / "python"), f"{wheel}[mcp]"],
        cwd=work,
    )
    # The description a user reads (`pip show -v`, an index's page) is for the
    # installed package: no checkout commands, and how to install it.
    read = "from importlib.metadata import metadata; print(metadata('trio-delegate').get_payload())"
    description = run([str(bin_dir / "python"), "-c", read], cwd=work)
    if "make demo" in description or "pip install 'trio-delegate[mcp] @ git+" not in description:
        raise SmokeError(f"the installed package's description is not the user's: {description!r}")
    folder = work / f"user-{version}"
    folder.mkdir()
    script = bin_dir / "trio-delegate"
    # Speed 10 (about 1 s): the demo's story runs on real time, and at 1000 a
    # busy machine can make its timed steps miss.
    run([str(script), "demo", "--no-live", "--speed", "10", "--no-store"], cwd=folder)
    (readme_script,) = README_SCRIPT.findall((ROOT / "README.md").read_text())[:1]
    (folder / "readme_example.py").write_text(readme_script)
    shown = run([str(bin_dir / "python"), "readme_example.py"], cwd=folder)
    if "checked 'the login bug'" not in shown:
        raise SmokeError(f"the README's script did not show its result: {shown!r}")
    run([str(script), "init"], cwd=folder)
    tools = serve_lists_tools(script, folder)
    if tools != TOOLS:
        raise SmokeError(f"tools/list answered {sorted(tools)}, not {sorted(TOOLS)}")
    return time.monotonic() - started


def main() -> int:
    """Build once, smoke-test on each interpreter present; the exit code."""
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if uv is None:
        print("wheel smoke: uv is not installed (make installs it into .venv)", file=sys.stderr)
        return 1
    found = interpreters()
    if not found:
        print(f"wheel smoke: no Python {', '.join(VERSIONS)} found", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="wheel-smoke-") as temp:
        work = Path(temp)
        started = time.monotonic()
        try:
            wheel = build_wheel(uv, work / "dist")
            print(
                f"wheel smoke: built {wheel.name} in {time.monotonic() - started:.1f} s",
                flush=True,
            )
            for version, python in found.items():
                seconds = smoke(uv, version, python, wheel, work)
                print(
                    f"wheel smoke: Python {version} ({python}) passed in {seconds:.1f} s",
                    flush=True,
                )
        except (SmokeError, subprocess.TimeoutExpired) as exc:
            print(f"wheel smoke: FAILED: {exc}", file=sys.stderr)
            return 1
    missing = [version for version in VERSIONS if version not in found]
    if missing:
        print(f"wheel smoke: not on this machine, not tested: Python {', '.join(missing)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
