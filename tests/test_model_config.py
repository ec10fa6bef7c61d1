"""``kind = "model"`` in a serve configuration: checked at start-up, then run as any subagent."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
import trio
import trio.testing
from mcp import StdioServerParameters

import trio_delegate as td
from trio_delegate._cli._main import main
from trio_delegate._server_config import ConfigError, load_server_config

from .fakes import Step, call, text
from .model_support import RESPONSES

TOOLS_MODULE = '''
def lookup(word: str) -> str:
    """Look a word up."""
    return word[::-1]

NOT_A_FUNCTION = 42
'''


def write(tmp_path: Path, body: str, module: str = TOOLS_MODULE) -> Path:
    # A module name of this test's own: sys.path is shared by the whole session.
    (tmp_path / "model_cfg_tools.py").write_text(module)
    path = tmp_path / "subagents.toml"
    path.write_text(textwrap.dedent(body))
    return path


LEAD = """
[[subagents]]
name = "lead"
kind = "model"
model = "openai:gpt-test"
instructions = "Plan, then delegate."
tools = ["model_cfg_tools:lookup"]
children = ["helper"]
max_turns = 7
base_url = "{url}"
api_key_env = ""
api = "responses"

[[subagents]]
name = "helper"
python = "trio:sleep_forever"
"""


def test_a_model_subagent_is_read_from_the_file(tmp_path: Path) -> None:
    loaded = load_server_config(write(tmp_path, LEAD.format(url="http://127.0.0.1:9/v1")))
    lead = loaded.subagents[0]
    assert lead.children == ("helper",)
    runner = lead.runner
    assert isinstance(runner, td.ModelRunner)
    assert runner.model == "gpt-test"
    assert runner.instructions == "Plan, then delegate."
    assert [tool.name for tool in runner.tools] == ["lookup"]
    assert runner.max_turns == 7
    assert runner.api_key_env == ""


async def test_a_model_subagent_from_the_file_runs_its_tools(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    script: list[Step] = [call("lookup", word="stressed"), lambda turn: text(turn.last.text)]
    with RESPONSES.fake(script) as fake:
        loaded = load_server_config(write(tmp_path, LEAD.format(url=fake.url + "/v1")))
        async with td.open_runtime(loaded.subagents) as rt, rt.open_parent() as parent:
            result = await parent.delegate("lead", "reverse it")
    assert result.final_result == "desserts"


MODEL = 'model = "openai:gpt-test"'
TOOLS = 'tools = ["model_cfg_tools:lookup"]'


@pytest.mark.parametrize(
    ("old", "new", "key", "fragment"),
    [
        (MODEL, 'model = "gpt-test"', "model", "'<provider>:<model id>'"),
        (MODEL, 'model = "gemini:pro"', "model", "the provider 'gemini'"),
        (MODEL, "model = 3", "model", "must be a non-empty string"),
        (MODEL, "", "", "has no model"),
        (TOOLS, 'tools = ["model_cfg_tools:nope"]', "tools[0]", "has no 'nope'"),
        (TOOLS, 'tools = ["no_such_module_here:f"]', "tools[0]", "cannot import"),
        (TOOLS, 'tools = ["model_cfg_tools:NOT_A_FUNCTION"]', "tools", "must be a function"),
        (TOOLS, 'tools = ["lookup"]', "tools[0]", "must be 'module:function'"),
        (TOOLS, 'tools = "model_cfg_tools:lookup"', "tools", "must be a list"),
        ('children = ["helper"]', 'children = ["ghost"]', "children[0]", "not a subagent"),
        ("max_turns = 7", "max_turns = 0", "max_turns", "must be an integer >= 1"),
        ('api = "responses"', 'api = "completions"', "api", 'must be "responses" or "chat"'),
        ('api_key_env = ""', 'api_key_env = "NOT A NAME"', "api_key_env", "environment variable"),
        ('base_url = "{url}"', 'base_url = "ftp://host"', "base_url", "http:// or https://"),
        ("max_turns = 7", "temperature = 1", "temperature", "unknown key"),
    ],
)
def test_a_malformed_model_subagent_names_its_key(
    tmp_path: Path, old: str, new: str, key: str, fragment: str
) -> None:
    assert old in LEAD
    body = LEAD.replace(old, new).format(url="http://127.0.0.1:9/v1")
    with pytest.raises(ConfigError) as info:
        load_server_config(write(tmp_path, body))
    assert info.value.key == f"subagents[0].{key}".rstrip(".")
    assert fragment in str(info.value)


def test_serve_exits_2_on_a_malformed_model_subagent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = LEAD.replace('model = "openai:gpt-test"', 'model = "gemini:pro"')
    path = write(tmp_path, body.format(url="http://127.0.0.1:9/v1"))
    assert main(["serve", "--config", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "subagents[0].model" in captured.err
    assert "the provider 'gemini'" in captured.err


SERVER = """
from mcp.server.mcpserver import MCPServer

server = MCPServer("echo")

@server.tool()
def echo(text: str) -> str:
    '''Echo the text.'''
    return text

server.run()
"""


def test_mcp_servers_of_a_model_subagent_are_read_from_the_file(tmp_path: Path) -> None:
    body = LEAD.replace(
        "max_turns = 7",
        'max_turns = 7\nmcp_servers = [{ command = ["python3", "srv.py"], env = { A = "1" }, '
        'cwd = "." }, { url = "https://example.com/mcp" }]',
    )
    loaded = load_server_config(write(tmp_path, body.replace("{url}", "http://127.0.0.1:9/v1")))
    runner = loaded.subagents[0].runner
    assert isinstance(runner, td.ModelRunner)
    stdio, url = runner.mcp_servers
    assert isinstance(stdio, StdioServerParameters)
    assert (stdio.command, stdio.args, stdio.env) == ("python3", ["srv.py"], {"A": "1"})
    assert Path(stdio.cwd or "") == tmp_path
    assert url == "https://example.com/mcp"


async def test_a_model_subagent_from_the_file_calls_its_mcp_server(tmp_path: Path) -> None:
    (tmp_path / "echo_srv.py").write_text(SERVER)
    script: list[Step] = [call("echo", text="hello"), lambda turn: text(turn.last.text)]
    with RESPONSES.fake(script) as fake:
        body = LEAD.replace(
            "max_turns = 7",
            f'max_turns = 7\nmcp_servers = [{{ command = ["{sys.executable}", "echo_srv.py"] }}]',
        )
        loaded = load_server_config(write(tmp_path, body.replace("{url}", fake.url + "/v1")))
        async with td.open_runtime(loaded.subagents) as rt, rt.open_parent() as parent:
            result = await parent.delegate("lead", "echo hello")
    assert result.final_result == "hello"


@pytest.mark.parametrize(
    ("value", "key", "fragment"),
    [
        ('"srv"', "mcp_servers", "must be a list of tables"),
        ("[{ env = {} }]", "mcp_servers[0]", "either command"),
        ('[{ command = ["a"], url = "https://x" }]', "mcp_servers[0]", "either command"),
        ('[{ command = "a b" }]', "mcp_servers[0].command", "must be a list of strings"),
        ('[{ url = "ftp://x" }]', "mcp_servers[0].url", "http:// or https://"),
        ('[{ command = ["a"], port = 3 }]', "mcp_servers[0].port", "unknown key"),
        ('[{ command = ["a"], env = { A = 1 } }]', "mcp_servers[0].env", "table of strings"),
        ('[{ url = "https://x", cwd = "." }]', "mcp_servers[0]", "env and cwd are for"),
        ('[{ command = ["a"], cwd = "nowhere" }]', "mcp_servers[0].cwd", "not a directory"),
    ],
)
def test_a_malformed_mcp_server_names_its_key(
    tmp_path: Path, value: str, key: str, fragment: str
) -> None:
    body = LEAD.replace("max_turns = 7", f"max_turns = 7\nmcp_servers = {value}")
    with pytest.raises(ConfigError) as info:
        load_server_config(write(tmp_path, body.replace("{url}", "http://127.0.0.1:9/v1")))
    assert info.value.key == f"subagents[0].{key}"
    assert fragment in str(info.value)


def test_prices_of_a_model_subagent_are_read_from_the_file(tmp_path: Path) -> None:
    body = LEAD.replace(
        "max_turns = 7", "max_turns = 7\nprices = { input = 3, output = 15.0, cache_read = 0.3 }"
    )
    loaded = load_server_config(write(tmp_path, body.replace("{url}", "http://127.0.0.1:9/v1")))
    runner = loaded.subagents[0].runner
    assert isinstance(runner, td.ModelRunner)
    assert runner.prices == td.Prices(input=3.0, output=15.0, cache_read=0.3)


@pytest.mark.parametrize(
    ("value", "key", "fragment"),
    [
        ('"3 dollars"', "prices", "must be a table"),
        ("{ output = 15 }", "prices", "has no input price"),
        ("{ input = 3 }", "prices", "has no output price"),
        ('{ input = "3", output = 15 }', "prices.input", "got the string"),
        ("{ input = 3, output = -1 }", "prices.output", ">= 0"),
        ("{ input = 3, output = nan }", "prices.output", ">= 0"),
        ("{ input = 3, output = 15, cache_write = inf }", "prices.cache_write", ">= 0"),
        ("{ input = 3, output = 15, per = 1 }", "prices.per", "unknown key"),
    ],
)
def test_malformed_prices_name_their_key(
    tmp_path: Path, value: str, key: str, fragment: str
) -> None:
    body = LEAD.replace("max_turns = 7", f"max_turns = 7\nprices = {value}")
    with pytest.raises(ConfigError) as info:
        load_server_config(write(tmp_path, body.replace("{url}", "http://127.0.0.1:9/v1")))
    assert info.value.key == f"subagents[0].{key}"
    assert fragment in str(info.value)


async def test_serve_runs_a_model_subagent_for_an_mcp_client(tmp_path: Path) -> None:
    from .test_mcp_stdio import call as call_tool
    from .test_mcp_stdio import serve

    # The lead calls its tool, then answers with what it returned; the fake
    # model server runs in this process, serve in its own.
    script: list[Step] = [call("lookup", word="stressed"), lambda turn: text(turn.last.text)]
    with RESPONSES.fake(script) as fake:
        config = write(tmp_path, LEAD.format(url=fake.url + "/v1"))
        with trio.fail_after(60):  # a hang guard only
            async with serve(config, tmp_path) as client:
                done = await call_tool(client, "delegate_task", subagent="lead", task="reverse it")
                status = await call_tool(client, "subagent_status", run_id=done["run_id"])
    assert done["final_result"] == "desserts"
    assert status["status"] == "completed"
    assert status["usage"]["requests"] == 2
