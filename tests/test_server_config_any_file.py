"""Any file given to ``serve --config`` is a ServerConfig or a ConfigError, never another error.

Hypothesis writes TOML documents shaped like a configuration (its tables and
keys, each holding any TOML value) and documents of any text, and loads them.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Final

import attrs
import pytest
import tomli_w
from hypothesis import given
from hypothesis import strategies as st

from trio_delegate._config_file._sections import (
    AgentSubagent,
    CommandSubagent,
    PythonSubagent,
    ServerSection,
    TemporalSettings,
    TemporalSubagent,
)
from trio_delegate._server_config import ConfigError, ServerConfig, load_server_config

#: Every key a configuration file knows, to draw keys a loader reads.
KNOWN_KEYS: Final = sorted(
    {
        *(field.name for field in attrs.fields(ServerSection)),
        *(field.name for field in attrs.fields(TemporalSettings)),
        *(
            field.name
            for cls in (CommandSubagent, PythonSubagent, AgentSubagent, TemporalSubagent)
            for field in attrs.fields(cls)
        ),
        "store",
        "max_concurrent_runs",
        "subagent_timeout_seconds",
    }
)

#: What a `python` key may name here: importing a module drawn at random could
#: run anything that module runs on import.
SAFE_RUNNERS: Final = (
    "trio:sleep_forever",
    "json:loads",
    "json:nothing",
    "json.dumps",
    "no_such_module_3e9a:run",
    "a:b:c",
)

# Text as TOML holds it: any character but a surrogate.
TEXT: Final = st.text(st.characters(exclude_categories=["Cs"]), max_size=20)

SCALARS: Final = st.one_of(
    TEXT,
    st.sampled_from(
        ["none", "claude", "codex", "temporal", "h:1", "runs.db", ".", sys.executable, "true"]
    ),
    st.integers(),
    st.integers(min_value=10**300, max_value=10**400),
    st.floats(),
    st.booleans(),
    st.dates(),
    st.datetimes(),
    st.times(),
)

KEYS: Final = st.one_of(st.sampled_from(KNOWN_KEYS), TEXT)


def _values(depth: int) -> st.SearchStrategy[Any]:
    if depth == 0:
        return SCALARS
    inner = _values(depth - 1)
    return st.one_of(
        SCALARS,
        st.lists(inner, max_size=4),
        st.dictionaries(KEYS, inner, max_size=4),
        st.lists(SCALARS, min_size=1, max_size=3),
    )


VALUES: Final = _values(3)
TABLES: Final = st.dictionaries(KEYS, VALUES, max_size=6)


def _safe(value: Any) -> Any:
    """*value* with every ``python`` key naming one of :data:`SAFE_RUNNERS`."""
    if isinstance(value, list):
        return [_safe(item) for item in value]
    if isinstance(value, dict):
        return {
            key: SAFE_RUNNERS[len(str(item)) % len(SAFE_RUNNERS)]
            if key == "python" and item not in SAFE_RUNNERS
            else _safe(item)
            for key, item in value.items()
        }
    return value


def _subagent(runner: str, value: Any, name: str, extra: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, runner: value, **extra}


SUBAGENTS: Final = st.lists(
    st.one_of(
        st.builds(
            _subagent,
            st.sampled_from(["command", "python", "kind"]),
            st.one_of(
                st.just([sys.executable]),
                st.sampled_from(["claude", "codex", "temporal"]),
                st.sampled_from(SAFE_RUNNERS),
                VALUES,
            ),
            st.one_of(st.sampled_from(["a", "b", "c-1"]), TEXT),
            TABLES,
        ),
        TABLES,
    ),
    max_size=3,
)

DOCUMENTS: Final = st.fixed_dictionaries(
    {},
    optional={
        "runtime": st.one_of(TABLES, VALUES),
        "server": st.one_of(TABLES, VALUES),
        "temporal": st.one_of(
            st.fixed_dictionaries({"address": st.one_of(st.just("127.0.0.1:7233"), VALUES)}),
            TABLES,
            VALUES,
        ),
        "subagents": st.one_of(SUBAGENTS, VALUES),
    },
).flatmap(lambda document: st.builds(lambda extra: {**extra, **document}, TABLES))


#: Tables that are right, to change a key or two of.
RIGHT_SUBAGENTS: Final = (
    {"command": [sys.executable]},
    {"python": "trio:sleep_forever"},
    {"kind": "claude", "program": sys.executable},
    {"kind": "temporal"},
)
CHANGES: Final = st.dictionaries(st.sampled_from(KNOWN_KEYS), VALUES, max_size=2)

NEARLY_RIGHT: Final = st.builds(
    lambda runtime, server, temporal, subagents: {
        "runtime": runtime,
        "server": server,
        "temporal": {"address": "127.0.0.1:7233", **temporal},
        "subagents": subagents,
    },
    CHANGES,
    CHANGES,
    CHANGES,
    st.lists(
        st.builds(
            lambda right, name, changes: {"name": name, **right, **changes},
            st.sampled_from(RIGHT_SUBAGENTS),
            st.sampled_from(["a", "b", "c-1"]),
            CHANGES,
        ),
        min_size=1,
        max_size=3,
    ),
)


def _loads(path: Path) -> ServerConfig | ConfigError:
    try:
        return load_server_config(path)
    except ConfigError as error:
        message = str(error)
        assert message.startswith(f"{path}: ")
        assert "\n  fix: " in message
        assert len(message) < 2_000
        return error


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("any-config")


@given(document=st.one_of(DOCUMENTS, NEARLY_RIGHT))
def test_any_toml_document_is_a_config_or_a_config_error(
    folder: Path, document: dict[str, Any]
) -> None:
    path = folder / "subagents.toml"
    path.write_text(tomli_w.dumps(_safe(document)), encoding="utf-8")
    loaded = _loads(path)
    if isinstance(loaded, ServerConfig):
        assert loaded.subagents  # a configuration that loads has something to serve


@given(text=st.text(max_size=200))
def test_any_text_is_a_config_or_a_config_error(folder: Path, text: str) -> None:
    path = folder / "subagents.toml"
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    _loads(path)


def test_a_document_written_as_drawn_ones_are_loads(folder: Path) -> None:
    # The documents above are written by the same means: one that is right loads.
    document = {
        "runtime": {"max_concurrent_runs": 2},
        "subagents": [_subagent("command", [sys.executable], "a", {"timeout_seconds": "none"})],
    }
    path = folder / "right.toml"
    path.write_text(tomli_w.dumps(_safe(document)), encoding="utf-8")
    loaded = load_server_config(path)
    assert [subagent.name for subagent in loaded.subagents] == ["a"]
    assert loaded.config.max_concurrent_runs == 2
    assert loaded.subagents[0].timeout_seconds is None
