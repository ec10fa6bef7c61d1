"""The configuration file of ``trio-delegate serve``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

import trio_delegate as td
from trio_delegate._cli._main import main
from trio_delegate._runners._agents import AgentCLIRunner
from trio_delegate._server_config import ConfigError, load_server_config

from .helpers import open_parent_lenient

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
PY = sys.executable

# One valid subagent, to add to configurations that test something else.
ECHO = f"""
[[subagents]]
name = "echo"
command = ['{PY}', "-c", "import sys; print(sys.stdin.read())"]
"""

# One agent CLI subagent, its program given (a script stands in for it).
AGENT = f'[[subagents]]\nname = "x"\nkind = "claude"\nprogram = "{PY}"\n'

# One Python subagent (any async function passes the start-up checks).
PYSUB = '[[subagents]]\nname = "x"\npython = "trio:sleep_forever"\n'


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "subagents.toml"
    path.write_text(textwrap.dedent(text))
    return path


def test_the_example_configuration_loads() -> None:
    loaded = load_server_config(EXAMPLES / "subagents.toml")
    assert loaded.config.subagent_timeout_seconds == 120
    assert loaded.config.max_concurrent_runs == 4
    by_name = {subagent.name: subagent for subagent in loaded.subagents}
    assert list(by_name) == ["summarizer", "slow", "flaky", "outliner"]
    summarizer = by_name["summarizer"]
    assert summarizer.timeout_seconds == 30
    assert isinstance(summarizer.final_schema, dict)
    assert summarizer.final_schema["required"] == ["summary"]
    runner = summarizer.runner
    assert isinstance(runner, td.CommandRunner)
    assert runner.command == ("python3", "summarize.py")
    # relative paths count from the file's directory
    assert runner.cwd == str(EXAMPLES)
    assert runner.env == {"LANG": "C.UTF-8"}
    assert runner.max_output_bytes == loaded.config.max_result_bytes
    assert by_name["slow"].timeout_seconds == 60
    assert by_name["flaky"].timeout_seconds is td.INHERIT
    assert getattr(by_name["outliner"].runner, "__name__", None) == "outline"


def test_none_means_no_deadline(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f"""
        [runtime]
        subagent_timeout_seconds = "none"
        {ECHO}
        timeout_seconds = "none"
        kill_grace_seconds = 0.5
        """,
    )
    loaded = load_server_config(path)
    assert loaded.config.subagent_timeout_seconds is None
    assert loaded.subagents[0].timeout_seconds is None
    runner = loaded.subagents[0].runner
    assert isinstance(runner, td.CommandRunner)
    assert runner.kill_grace_seconds == 0.5


async def test_python_runner_next_to_the_file_and_relative_program(tmp_path: Path) -> None:
    module = f"agents_{uuid.uuid4().hex}"
    (tmp_path / f"{module}.py").write_text("async def shout(ctx):\n    return ctx.task.upper()\n")
    tool = tmp_path / "bin" / "tool.py"
    tool.parent.mkdir()
    tool.write_text(f"#!{PY}\nimport sys\nprint('tool:', sys.stdin.read())\n")
    tool.chmod(0o755)
    path = write(
        tmp_path,
        f"""
        [[subagents]]
        name = "shout"
        python = "{module}:shout"
        description = "Shouts."
        children = ["tool"]

        [[subagents]]
        name = "tool"
        command = ["./tool.py"]
        cwd = "bin"
        """,
    )
    loaded = load_server_config(path)
    assert loaded.subagents[0].description == "Shouts."
    async with open_parent_lenient(*loaded.subagents) as parent:
        assert (await parent.delegate("shout", "hey")).final_result == "HEY"
        assert (await parent.delegate("tool", "x")).final_result == "tool: x"


BAD_CONFIGS = [
    # (file text, key, what the message says)
    ("[runtime]\nmax_concurrent_runs = 0\n" + ECHO, "runtime.max_concurrent_runs", ">= 1"),
    (
        "[runtime]\nsubagent_timeout_seconds = -5\n" + ECHO,
        "runtime.subagent_timeout_seconds",
        "> 0",
    ),
    ("[runtime]\nfail_closed = 1\n" + ECHO, "runtime.fail_closed", "True or False"),
    ("[runtime]\nstore = 3\n" + ECHO, "runtime.store", "must be the path of an SQLite file"),
    ('[runtime]\nstore = ""\n' + ECHO, "runtime.store", "must be the path of an SQLite file"),
    (
        "[runtime]\nmax_concurent_runs = 4\n" + ECHO,
        "runtime.max_concurent_runs",
        "max_concurrent_runs",
    ),
    ("runtime = 3\n" + ECHO, "runtime", "must be a table"),
    ("[extra]\n" + ECHO, "extra", "unknown key"),
    ("[runtime]\n", None, "there are no subagents"),
    ("subagents = 3\n", "subagents", "array of tables"),
    (ECHO + ECHO, "subagents[1].name", "already the name of subagents[0]"),
    (ECHO.replace('"echo"', '"Echo"'), "subagents[0].name", "not a valid subagent name"),
    ('[[subagents]]\ncommand = ["true"]\n', "subagents[0]", "has no name"),
    ('[[subagents]]\nname = "x"\n', "subagents[0]", "neither command nor python"),
    (ECHO + 'python = "json:loads"\n', "subagents[0]", "both command and python"),
    ('[[subagents]]\nname = "x"\ncommand = "python3 x.py"\n', "subagents[0].command", '"x.py"]'),
    ('[[subagents]]\nname = "x"\ncommand = []\n', "subagents[0].command", "empty"),
    ('[[subagents]]\nname = "x"\ncommand = [1]\n', "subagents[0].command", "command[0]"),
    (
        '[[subagents]]\nname = "x"\ncommand = ["no-such-program-3e9a"]\n',
        "subagents[0].command[0]",
        "not found on PATH",
    ),
    (
        '[[subagents]]\nname = "x"\ncommand = ["./missing.sh"]\n',
        "subagents[0].command[0]",
        "not an executable file",
    ),
    (ECHO + 'cwd = "nowhere"\n', "subagents[0].cwd", "not a directory"),
    (ECHO + "env = { A = 1 }\n", "subagents[0].env", "table of strings"),
    (ECHO + "timeout_seconds = 0\n", "subagents[0].timeout_seconds", "> 0"),
    (ECHO + 'timeout_seconds = "forever"\n', "subagents[0].timeout_seconds", '"none"'),
    (ECHO + "kill_grace_seconds = -1\n", "subagents[0].kill_grace_seconds", ">= 0"),
    (ECHO + "description = 3\n", "subagents[0].description", "must be a string"),
    (
        ECHO + 'final_schema = { type = "objekt" }\n',
        "subagents[0].final_schema",
        "not a valid JSON Schema",
    ),
    (PYSUB + 'children = ["ghost"]\n', "subagents[0].children[0]", "not a subagent in this file"),
    (PYSUB + "children = 3\n", "subagents[0].children", "list of subagent names"),
    (ECHO + 'children = ["echo"]\n', "subagents[0].children", "a command subagent takes"),
    (ECHO + "timeout = 3\n", "subagents[0].timeout", "did you mean 'timeout_seconds'"),
    (
        '[[subagents]]\nname = "x"\npython = "json:loads"\ncwd = "."\n',
        "subagents[0].cwd",
        "a Python subagent takes",
    ),
    (
        '[[subagents]]\nname = "x"\npython = "no_such_module_3e9a:run"\n',
        "subagents[0].python",
        "cannot import 'no_such_module_3e9a'",
    ),
    ('[[subagents]]\nname = "x"\npython = "json:nothing"\n', "subagents[0].python", "no 'nothing'"),
    (
        '[[subagents]]\nname = "x"\npython = "json:dumps"\n',
        "subagents[0].python",
        "not an async runner",
    ),
    (
        '[[subagents]]\nname = "x"\npython = "json.dumps"\n',
        "subagents[0].python",
        "module:function",
    ),
    ("[[subagents]\n", None, "not valid TOML"),
    ('[[subagents]]\nname = "x"\nkind = "gemini"\n', "subagents[0].kind", "not an agent CLI"),
    (ECHO + 'kind = "claude"\n', "subagents[0]", "has both command and kind"),
    (AGENT + 'args = "--verbose"\n', "subagents[0].args", "list of strings"),
    (
        '[[subagents]]\nname = "x"\nkind = "claude"\nprogram = "./no-such-cli"\n',
        "subagents[0].program",
        "not an executable file",
    ),
    (
        '[[subagents]]\nname = "x"\nkind = "codex"\nprogram = 3\n',
        "subagents[0].program",
        "must be a path string",
    ),
    (AGENT + 'model = ""\n', "subagents[0].model", "must be a model name"),
    (AGENT + "kill_grace_seconds = -1\n", "subagents[0].kill_grace_seconds", ">= 0"),
    (AGENT + "children = []\n", "subagents[0].children", "an agent CLI subagent takes"),
    ("server = 1\n" + ECHO, "server", "must be a table"),
    ("[server]\nforeground_limit = 3\n" + ECHO, "server.foreground_limit", "did you mean"),
    ("[server]\nforeground_limit_seconds = 0\n" + ECHO, "server.foreground_limit_seconds", "> 0"),
    (
        "[server]\nforeground_limit_seconds = inf\n" + ECHO,
        "server.foreground_limit_seconds",
        "finite",
    ),
    (
        '[server]\nprogress_interval_seconds = "none"\n' + ECHO,
        "server.progress_interval_seconds",
        "must be a number of seconds > 0",
    ),
]


@pytest.mark.parametrize(("text", "key", "fragment"), BAD_CONFIGS)
def test_bad_configuration_names_file_key_and_fix(
    tmp_path: Path, text: str, key: str | None, fragment: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_server_config(path)
    error = info.value
    assert error.key == key
    assert error.path == path
    message = str(error)
    assert message.startswith(f"{path}: {key}" if key else f"{path}: ")
    assert fragment in message
    assert "\n  fix: " in message
    assert isinstance(error, td.DelegationError)
    assert isinstance(error, ValueError)


def test_an_empty_list_of_subagents_is_no_subagents(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="there are no subagents") as info:
        load_server_config(write(tmp_path, "subagents = []\n"))
    assert info.value.key == "subagents"
    assert "add at least one [[subagents]] table" in str(info.value)


def test_server_limits(tmp_path: Path) -> None:
    defaults = load_server_config(write(tmp_path, ECHO))
    assert defaults.foreground_limit_seconds == 45
    assert defaults.progress_interval_seconds == 5
    text = "[server]\nforeground_limit_seconds = 20\nprogress_interval_seconds = 2.5\n" + ECHO
    loaded = load_server_config(write(tmp_path, text))
    assert loaded.foreground_limit_seconds == 20
    assert loaded.progress_interval_seconds == 2.5
    unlimited = load_server_config(
        write(tmp_path, '[server]\nforeground_limit_seconds = "none"\n' + ECHO)
    )
    assert unlimited.foreground_limit_seconds is None


def test_agent_cli_subagents(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f"""
        [[subagents]]
        name = "coder"
        kind = "codex"
        program = "{PY}"
        args = ["-c", "sandbox_mode=\\"read-only\\""]
        model = "gpt-5.4"
        env = {{ CODEX_HOME = "/somewhere" }}
        timeout_seconds = 600
        """,
    )
    [subagent] = load_server_config(path).subagents
    runner = subagent.runner
    assert isinstance(runner, AgentCLIRunner)
    assert runner.kind == "codex"
    assert runner.program == PY
    assert runner.args == ("-c", 'sandbox_mode="read-only"')
    assert runner.model == "gpt-5.4"
    assert runner.env == {"CODEX_HOME": "/somewhere"}
    assert runner.cwd == str(tmp_path)
    assert subagent.timeout_seconds == 600


def test_an_agent_cli_is_found_on_path_then_in_its_python_package(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_claude = bin_dir / "claude"
    fake_claude.write_text("#!/bin/sh\n")
    fake_claude.chmod(0o755)
    on_path = f'[[subagents]]\nname = "x"\nkind = "claude"\nenv = {{ PATH = "{bin_dir}" }}\n'
    [subagent] = load_server_config(write(tmp_path, on_path)).subagents
    assert isinstance(subagent.runner, AgentCLIRunner)
    assert subagent.runner.program == str(fake_claude)
    # Not on PATH: the executable bundled with the Python package, when installed.
    bundled = on_path.replace(str(bin_dir), str(tmp_path / "empty"))
    [subagent] = load_server_config(write(tmp_path, bundled)).subagents
    assert isinstance(subagent.runner, AgentCLIRunner)
    assert subagent.runner.program.endswith("claude_agent_sdk/_bundled/claude")


def test_errors_about_a_subagent_name_it(tmp_path: Path) -> None:
    path = write(tmp_path, ECHO + "env = { A = 1 }\n")
    with pytest.raises(ConfigError) as info:
        load_server_config(path)
    assert str(info.value).startswith(f"{path}: subagents[0].env (subagent 'echo'): ")
    assert info.value.subagent == "echo"


def test_store_is_a_path_next_to_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, '[runtime]\nstore = "state/runs.db"\n' + ECHO)
    assert load_server_config(path).store == tmp_path / "state" / "runs.db"
    assert load_server_config(write(tmp_path, ECHO)).store is None
    (tmp_path / "adir").mkdir()
    with pytest.raises(ConfigError, match="is a folder"):
        load_server_config(write(tmp_path, '[runtime]\nstore = "adir"\n' + ECHO))


def test_store_may_be_a_postgres_uri_without_a_password(tmp_path: Path) -> None:
    uri = "postgresql://agent@db.internal:5432/runs?sslmode=require"
    path = write(tmp_path, f'[runtime]\nstore = "{uri}"\n' + ECHO)
    assert load_server_config(path).store == uri
    secret = "postgresql://agent:s3cret-word@db.internal/runs"
    with pytest.raises(ConfigError, match="PGPASSWORD") as info:
        load_server_config(write(tmp_path, f'[runtime]\nstore = "{secret}"\n' + ECHO))
    assert "s3cret-word" not in str(info.value)
    assert "agent:***@db.internal" in str(info.value)


def test_the_stores_retention_of_ended_runs_is_a_key(tmp_path: Path) -> None:
    default = load_server_config(write(tmp_path, '[runtime]\nstore = "runs.db"\n' + ECHO))
    assert (default.store_max_rows, default.store_retention_seconds) == (100_000, 2_592_000.0)
    text = '[runtime]\nstore = "runs.db"\nstore_max_rows = 500\nstore_retention_seconds = 60\n'
    bounded = load_server_config(write(tmp_path, text + ECHO))
    assert (bounded.store_max_rows, bounded.store_retention_seconds) == (500, 60.0)
    text = '[runtime]\nstore = "runs.db"\nstore_max_rows = "none"\n'
    text += 'store_retention_seconds = "none"\n'
    unbounded = load_server_config(write(tmp_path, text + ECHO))
    assert (unbounded.store_max_rows, unbounded.store_retention_seconds) == (None, None)


def test_serve_opens_its_store_with_the_retention_the_file_says(tmp_path: Path) -> None:
    from trio_delegate._cli._serve import _store

    text = '[runtime]\nstore = "runs.db"\nstore_max_rows = "none"\nstore_retention_seconds = 90\n'
    store = _store(load_server_config(write(tmp_path, text + ECHO)))
    assert isinstance(store, td.SQLiteStore)
    assert (store.max_rows, store.retention_seconds) == (None, 90.0)


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ("store_max_rows = 0", "runtime.store_max_rows: must be an integer >= 1 or 'none', got 0"),
        ("store_max_rows = 2.5", "runtime.store_max_rows: must be an integer >= 1"),
        ('store_max_rows = "all"', 'write e.g. 100000, or "none" to keep every ended run'),
        ("store_retention_seconds = -1", "runtime.store_retention_seconds: must be a finite"),
        ("store_retention_seconds = true", "store_retention_seconds: must be a finite number"),
    ],
)
def test_a_wrong_store_retention_names_the_key_and_the_fix(
    tmp_path: Path, line: str, fragment: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_server_config(write(tmp_path, f'[runtime]\nstore = "runs.db"\n{line}\n' + ECHO))
    assert fragment in str(info.value)


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load_server_config(tmp_path / "absent.toml")


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b"x = " + b"[" * 100_000 + b"]" * 100_000 + b"\n", "nests arrays or inline tables"),
        (b"[runtime]\nmax_concurrent_runs = " + b"9" * 5_000 + b"\n", "holds a number"),
        (b"\xff\xfe[runtime]\n", "is not UTF-8 text"),
        (b"#" + b"x" * (2 * 1024 * 1024) + b"\n", "is larger than 1024 KiB"),
        (b'[runtime]\nstore = "\\ud800"\n', "is not valid TOML"),
    ],
    ids=["deep", "huge-number", "not-utf8", "too-large", "surrogate"],
)
def test_a_hostile_file_is_a_config_error(tmp_path: Path, data: bytes, fragment: str) -> None:
    path = tmp_path / "server.toml"
    path.write_bytes(data)
    with pytest.raises(ConfigError) as info:
        load_server_config(path)
    message = str(info.value)
    assert fragment in message
    assert "\n  fix: " in message
    assert len(message) < 1_000


@pytest.mark.parametrize(
    "line",
    [
        "final_schema." + ".".join(["a"] * 50_000) + " = 1",
        "[" + ".".join(['"a"'] * 33) + "]",
        "x = { " + " . ".join(["a"] * 40) + " = 1 }",
    ],
    ids=["dotted-key", "table-name", "inline"],
)
def test_a_key_of_very_many_parts_is_refused_before_it_is_parsed(tmp_path: Path, line: str) -> None:
    # tomllib takes minutes over a key of 50,000 parts: it never gets it.
    path = write(tmp_path, f"{ECHO}\n\n{line}\n")
    with pytest.raises(ConfigError) as info:
        load_server_config(path)
    assert info.value.key is None
    assert "has a key of more than 32 dotted parts (line 7)" in str(info.value)


def test_a_key_of_32_parts_and_text_of_many_dots_are_read(tmp_path: Path) -> None:
    schema = "final_schema." + ".".join(["a"] * 31)
    dotted = ".".join(str(number) for number in range(40))
    text = f'{ECHO}{schema} = "x"\ndescription = "{dotted}"\n'
    [subagent] = load_server_config(write(tmp_path, text)).subagents
    assert subagent.description == dotted
    assert isinstance(subagent.final_schema, dict)


def test_serve_with_a_bad_configuration_exits_2_before_serving(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "[runtime]\nstore = 3\n" + ECHO)
    assert main(["serve", "--config", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"trio-delegate serve: {path}: runtime.store: ")
    assert 'fix: write e.g. store = "runs.db"' in captured.err


def test_the_serve_command_exits_2_as_a_process(tmp_path: Path) -> None:
    path = write(tmp_path, "[[subagents]]\nname = 'x'\n")
    done = subprocess.run(
        [PY, "-m", "trio_delegate", "serve", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONWARNINGS": "error"},
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert "subagents[0] (subagent 'x'): has neither command nor python" in done.stderr
