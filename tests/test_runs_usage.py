"""``trio-delegate runs``: what runs spent (list, show, watch, ``runs usage``), and live runs.

Real stores written by a real runtime: a lead run that spends and delegates
two leaf runs, which spend too, and a leaf run of another owner. A run's
record keeps what it and its nested runs spent; ``runs show`` works out
what it spent itself, and ``runs usage`` counts each run once.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import trio

import trio_delegate as td
from trio_delegate._cli import _usage_scan
from trio_delegate._cli._live import Live, live_cells, live_json, live_rows
from trio_delegate._cli._main import main
from trio_delegate._cli._spend import Spend, cost_text, parent_of, top_owner
from trio_delegate._cli._watch import RunsView
from trio_delegate._stores._sqlite import SQLiteReader

from .pg_server import PostgresServer
from .stores import record, run_id, runtime_id

LEAD = td.Usage(
    requests=2, input_tokens=1000, output_tokens=50, cache_read_input_tokens=400, cost_usd=0.25
)
LEAF = td.Usage(requests=1, input_tokens=100, output_tokens=10, cost_usd=0.1)


async def _leaf(ctx: td.ChildContext) -> str:
    ctx.add_usage(LEAF)
    await trio.lowlevel.checkpoint()
    return "leaf"


async def _lead(ctx: td.ChildContext) -> str:
    ctx.add_usage(LEAD)
    assert ctx.parent is not None
    await ctx.parent.delegate("leaf", "a")
    await ctx.parent.delegate("leaf", "b")
    return "lead"


async def spend(store: td.ResultStore) -> dict[str, str]:
    """alice's lead run (two nested leaf runs) and bob's leaf run; their ids."""
    subagents = [td.Subagent("leaf", _leaf), td.Subagent("lead", _lead, children=("leaf",))]
    async with td.open_runtime(subagents, store=store) as rt:
        async with rt.open_parent("alice") as parent:
            lead = await parent.delegate("lead", "plan")
        async with rt.open_parent("bob") as parent:
            leaf = await parent.delegate("leaf", "alone")
    return {"lead": lead.run_id, "bob": leaf.run_id}


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def spent(tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    db = tmp_path / "runs.db"
    return ["--db", str(db)], trio.run(spend, td.SQLiteStore(db))


def _row_of(out: str, run: str) -> str:
    lines = out.splitlines()
    index = next(i for i, line in enumerate(lines) if run in line)
    return lines[index] + lines[index + 1]


def test_runs_list_shows_what_each_run_spent_with_its_nested_runs(
    spent: tuple[list[str], dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    where, ids = spent
    code, out, err = _cli(["runs", "list", *where], capsys)
    assert code == 0, err
    assert "spent" in out
    # The lead's record: its own 1,050 tokens and $0.25, and its two leaves'.
    assert "1,270 tok" in _row_of(out, ids["lead"])
    assert "$0.45" in _row_of(out, ids["lead"])
    assert "110 tok" in _row_of(out, ids["bob"])
    code, out, _ = _cli(["runs", "list", *where, "--json"], capsys)
    listed = {run["run_id"]: run for run in json.loads(out)}
    assert listed[ids["lead"]]["usage"]["input_tokens"] == 1200
    assert listed[ids["lead"]]["usage"]["cost_usd"] == 0.45
    assert "waiting_for_answer" not in listed[ids["lead"]]  # an ended run waits for nothing


def test_runs_show_gives_a_runs_usage_with_its_nested_runs_and_on_its_own(
    spent: tuple[list[str], dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    where, ids = spent
    code, out, err = _cli(["runs", "show", ids["lead"], *where], capsys)
    assert code == 0, err
    rows = {
        line.split("│")[1].strip(): line.split("│")[2].strip() for line in out.splitlines()[3:-1]
    }
    assert rows["usage"] == "1,270 tokens, $0.45, 4 requests (with its 2 nested runs)"
    assert rows["tokens"] == "input 1,200, output 70, cache read (in input) 400"
    assert rows["own usage"] == "1,050 tokens, $0.25, 2 requests"
    assert rows["own tokens"] == "input 1,000, output 50, cache read (in input) 400"
    code, out, _ = _cli(["runs", "show", ids["lead"], *where, "--json"], capsys)
    shown = json.loads(out)
    assert shown["usage"]["output_tokens"] == 70
    assert shown["own_usage"] == {
        "requests": 2,
        "input_tokens": 1000,
        "output_tokens": 50,
        "cache_read_input_tokens": 400,
        "cache_creation_input_tokens": 0,
        "reasoning_output_tokens": 0,
        "total_tokens": 1050,
        "cost_usd": 0.25,
    }
    assert shown["nested_runs_with_usage"] == 2
    # A run that delegated nothing: its usage is its own, said once.
    code, out, _ = _cli(["runs", "show", ids["bob"], *where], capsys)
    assert "110 tokens, $0.10, 1 request\n" in out.replace(" │\n", "\n").replace("  ", "")
    assert "own usage" not in out


def _usage(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code, out, err = _cli(["runs", "usage", *argv, "--json"], capsys)
    assert code == 0, err
    document: dict[str, Any] = json.loads(out)
    return document


def test_runs_usage_counts_each_run_once_whatever_the_grouping(
    spent: tuple[list[str], dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    where, _ = spent
    total = _usage(where, capsys)["total"]
    # 1,050 + 3 x 110 tokens: a nested run is not counted again in its parent's record.
    assert (total["runs"], total["total_tokens"], total["cost_usd"]) == (4, 1380, 0.55)
    assert total["requests"] == 5
    by_subagent = _usage([*where, "--by", "subagent"], capsys)
    assert [
        (g["subagent"], g["runs"], g["total_tokens"], g["cost_usd"]) for g in by_subagent["groups"]
    ] == [
        ("leaf", 3, 330, 0.3),
        ("lead", 1, 1050, 0.25),
    ]
    by_owner = _usage([*where, "--by", "owner"], capsys)
    # alice's nested runs count for alice, the owner of the run that delegated them.
    assert [(g["owner"], g["total_tokens"], g["cost_usd"]) for g in by_owner["groups"]] == [
        ("alice", 1270, 0.45),
        ("bob", 110, 0.1),
    ]
    by_day = _usage([*where, "--by", "day"], capsys)
    assert len(by_day["groups"]) in (1, 2)  # the test may run over midnight (UTC)
    assert sum(g["total_tokens"] for g in by_day["groups"]) == 1380
    for document in (by_subagent, by_owner, by_day):
        assert document["total"] == total
    alice = _usage([*where, "--owner", "alice"], capsys)["total"]
    assert (alice["runs"], alice["total_tokens"], alice["cost_usd"]) == (3, 1270, 0.45)
    assert _usage([*where, "--owner", "nobody"], capsys)["total"]["runs"] == 0


def test_runs_usage_table_puts_the_costliest_first_and_a_total_row(
    spent: tuple[list[str], dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    where, _ = spent
    code, out, err = _cli(["runs", "usage", *where, "--by", "owner"], capsys)
    assert code == 0, err
    rows = [line for line in out.splitlines() if line.startswith("│")]
    assert [row.split("│")[1].strip() for row in rows] == ["alice", "bob", "total"]
    assert rows[-1].split("│")[-2].strip() == "$0.55"
    assert "1,380" in rows[-1]


def test_a_nested_run_whose_parent_run_is_gone_counts_as_a_top_level_one(
    spent: tuple[list[str], dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    where, ids = spent
    conn = sqlite3.connect(where[1])
    with conn:
        conn.execute("DELETE FROM runs WHERE run_id = ?", (ids["lead"],))
    conn.close()
    total = _usage(where, capsys)["total"]
    assert (total["runs"], total["total_tokens"]) == (3, 330)


def test_runs_usage_reads_a_store_a_page_at_a_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "runs.db"
    owner = runtime_id()
    parents = [
        record(owner, td.RunStatus.COMPLETED, owner="o", usage=td.Usage(input_tokens=10 + n))
        for n in range(5)
    ]
    children = [
        record(
            owner,
            td.RunStatus.COMPLETED,
            owner=f"o/{parent.run_id}",
            usage=td.Usage(input_tokens=1, cost_usd=0.1),
        )
        for parent in parents
        for _ in range(2)
    ]

    async def write() -> None:
        store = td.SQLiteStore(db)
        await store.write([*children[:3], *parents, *children[3:]])  # children before parents too
        await store.aclose()

    trio.run(write)
    pages: list[int] = []
    original = SQLiteReader.usage_rows  # counts the rows each query gives

    def page(self: Any, after: int, owner: str | None, limit: int) -> list[Any]:
        rows: list[Any] = original(self, after, owner, limit)
        pages.append(len(rows))
        return rows

    monkeypatch.setattr(_usage_scan, "PAGE_ROWS", 4)
    monkeypatch.setattr(SQLiteReader, "usage_rows", page)
    total = _usage(["--db", str(db)], capsys)["total"]
    # The parents' records hold their children's usage: each run counts once.
    assert total["input_tokens"] == sum(10 + n for n in range(5))
    assert total["cost_usd"] == 0.0  # the children's cost is in the parents' records only
    assert pages == [4, 4, 4, 3]


# -- hostile stores ---------------------------------------------------------------------------


def _tamper(db: Path, run: str, *, state: dict[str, Any] | None = None, **columns: Any) -> None:
    conn = sqlite3.connect(db)
    with conn:
        if state is not None:
            (text,) = conn.execute("SELECT state FROM runs WHERE run_id = ?", (run,)).fetchone()
            conn.execute(
                "UPDATE runs SET state = ? WHERE run_id = ?",
                (json.dumps({**json.loads(text), **state}), run),
            )
        for column, value in columns.items():
            conn.execute(f"UPDATE runs SET {column} = ? WHERE run_id = ?", (value, run))
    conn.close()


def test_damaged_usage_huge_numbers_and_names_that_are_not_unicode_render(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.db"
    owner = runtime_id()
    names = ("negative count", "string count", "not an object", "huge", "bytes", "healthy")
    runs = {
        name: record(owner, td.RunStatus.COMPLETED, usage=td.Usage(input_tokens=7))
        for name in names
    }

    async def write() -> None:
        store = td.SQLiteStore(db)
        await store.write(list(runs.values()))
        await store.aclose()

    trio.run(write)
    ids = {name: run.run_id for name, run in runs.items()}
    _tamper(db, ids["negative count"], state={"usage": {"input_tokens": -1}})
    # Read as 7 by a lax reader: a count of text is damage all the same.
    _tamper(db, ids["string count"], state={"usage": {"input_tokens": "7"}})
    _tamper(db, ids["not an object"], state={"usage": 5})
    _tamper(
        db,
        ids["huge"],
        state={"usage": {"input_tokens": 2**63 - 1, "output_tokens": 2**63 - 1, "cost_usd": 1e308}},
    )
    # A subagent name of bytes no UTF-8 reader decodes, and a lone surrogate in its record.
    _tamper(db, ids["bytes"], subagent=b"\xed\xa0\x80\x1b[2J")
    conn = sqlite3.connect(db)
    with conn:
        conn.execute(
            "UPDATE runs SET record = replace(record, '\"worker\"', '\"w\\ud800\"') "
            "WHERE run_id = ?",
            (ids["bytes"],),
        )
    conn.close()
    where = ["--db", str(db)]
    for argv in (
        ["runs", "list", *where],
        ["runs", "list", *where, "--json"],
        ["runs", "show", ids["huge"], *where],
        ["runs", "show", ids["bytes"], *where, "--json"],
        ["runs", "usage", *where, "--by", "subagent"],
        ["runs", "usage", *where, "--by", "owner", "--json"],
        ["runs", "watch", *where, "--duration", "0.01"],
    ):
        code, out, err = _cli(argv, capsys)
        assert code == 0, (argv, err)
        for raw in ("\x1b", "\ud800", "\udced"):
            assert raw not in out + err, argv
        assert len(out) < 20_000
    # The damaged usages are named on stderr; the rest is added up.
    code, out, err = _cli(["runs", "usage", *where, "--json"], capsys)
    summary = json.loads(out)
    assert summary["damaged_rows"] == 3
    assert {row["run_id"] for row in summary["damaged"]} == {
        ids["negative count"],
        ids["string count"],
        ids["not an object"],
    }
    assert f"the run {ids['not an object']} is damaged: its usage is int 5" in err
    assert "Usage.input_tokens must be an int from 0 to 2**63-1, got '7'" in err
    total = summary["total"]
    assert total["runs"] == 3
    assert total["input_tokens"] == 2**63 - 1 + 14  # never saturated, never wrapped
    assert total["cost_usd"] == 1e308
    code, out, _ = _cli(["runs", "usage", *where, "--by", "subagent"], capsys)
    assert "\\xed\\xa0\\x80\\x1b[2J" in out or "\\udced" in out  # the bytes, escaped
    assert "$1e+308" in out


# -- live runs: input_required, progress, questions --------------------------------------------


def test_a_run_waiting_for_an_answer_reads_so_in_every_view(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.db"
    waiting = record(runtime_id(), td.RunStatus.RUNNING, started_at="2030-01-01T00:00:00+00:00")

    async def write() -> None:
        store = td.SQLiteStore(db)
        await store.write([waiting])
        await store.aclose()

    trio.run(write)
    # As a store that records questions writes it.
    _tamper(db, waiting.run_id, state={"status": "input_required"}, status="input_required")
    where = ["--db", str(db)]
    code, out, err = _cli(["runs", "list", *where], capsys)
    assert code == 0, err
    assert "input_required" in out
    code, out, _ = _cli(["runs", "list", *where, "--json"], capsys)
    assert json.loads(out)[0]["waiting_for_answer"] is True
    code, out, _ = _cli(["runs", "show", waiting.run_id, *where], capsys)
    assert "waiting for an answer to a question it asked" in out
    assert "timed out" not in out
    code, out, _ = _cli(["runs", "watch", *where, "--duration", "0.01"], capsys)
    assert code == 0
    assert "waiting for an answer" in out
    code, out, _ = _cli(["runs", "watch", *where, "--duration", "0.01", "--json"], capsys)
    assert json.loads(out.splitlines()[0])["waiting_for_answer"] is True


def test_progress_and_questions_are_rendered_in_one_place() -> None:
    question = td.Question("q_1", run_id(), "Which release?", {"type": "string"})
    progress = td.Progress("drafting \x1b[2J", 3, 10, 4)
    live = Live(td.RunStatus.INPUT_REQUIRED, progress, (question,))
    assert live_rows(live) == [
        ("input", "waiting for an answer: 1 open question"),
        ("question q_1", "Which release?"),
        ("progress", "3/10 (30%): drafting \x1b[2J (report 4)"),
    ]
    assert live_cells(live) == [
        "waiting for an answer: Which release?",
        "3/10 (30%): drafting \x1b[2J",
    ]
    assert live_json(live) == {
        "waiting_for_answer": True,
        "progress": {"message": "drafting \x1b[2J", "progress": 3, "total": 10, "seq": 4},
        "questions": [
            {"question_id": "q_1", "question": "Which release?", "schema": {"type": "string"}}
        ],
    }
    running = Live(td.RunStatus.RUNNING, td.Progress(None, 2.5, None, 1))
    assert live_cells(running) == ["2.5"]
    assert live_json(running) == {
        "waiting_for_answer": False,
        "progress": {"message": None, "progress": 2.5, "total": None, "seq": 1},
    }
    assert live_rows(Live(td.RunStatus.RUNNING)) == []


def test_the_watch_table_shows_what_each_run_spent() -> None:
    from rich.console import Console

    done = record(runtime_id(), td.RunStatus.COMPLETED, usage=LEAD + LEAF)
    view = RunsView(limit=10)
    view.load([done])
    console = Console(width=200, record=True)
    console.print(view.table("runs"))
    out = console.export_text()
    assert "spent" in out
    assert "1,160 tok" in out
    assert "$0.35" in out


@pytest.mark.parametrize(
    ("cost", "text"),
    [
        (0.0, "$0.00"),
        (0.004, "$0.0040"),
        (0.00001, "$1e-05"),
        (12345.678, "$12,345.68"),
        (1e300, "$1e+300"),
    ],
)
def test_costs_read_as_a_bill(cost: float, text: str) -> None:
    assert cost_text(cost) == text


def test_nested_owners_are_read_by_their_shape_in_linear_time() -> None:
    parent = run_id()
    assert parent_of(f"alice/{parent}") == parent
    assert parent_of(parent) is None
    assert parent_of(f"/{parent}") is None
    assert parent_of("alice/run_nope") is None
    assert top_owner(f"team/alice/{parent}/{run_id()}") == "team/alice"
    deep = "o" + f"/{parent}" * 200_000  # 7 MB of levels: one pass
    assert top_owner(deep) == "o"


def test_a_sum_is_exact_and_never_saturates() -> None:
    spend = Spend()
    for _ in range(10):
        spend.add(td.Usage(input_tokens=2**63 - 1, cost_usd=0.1))
    assert spend.count("input_tokens") == 10 * (2**63 - 1)
    assert spend.cost_usd == 1.0
    spend.add(td.Usage(input_tokens=2**63 - 1, cost_usd=0.1), -1)
    assert spend.runs == 10
    assert spend.cost_usd == 0.9


# -- PostgreSQL -------------------------------------------------------------------------------


def test_runs_usage_and_show_read_postgres(
    pg_server: PostgresServer, pg_schema: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = trio.run(spend, td.PostgresStore(pg_server.dsn(), schema=pg_schema))
    where = ["--db", pg_server.dsn(), "--schema", pg_schema]
    by_subagent = _usage([*where, "--by", "subagent"], capsys)
    assert [(g["subagent"], g["total_tokens"]) for g in by_subagent["groups"]] == [
        ("leaf", 330),
        ("lead", 1050),
    ]
    assert by_subagent["total"]["cost_usd"] == 0.55
    assert _usage([*where, "--owner", "alice"], capsys)["total"]["total_tokens"] == 1270
    code, out, err = _cli(["runs", "show", ids["lead"], *where, "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["own_usage"]["total_tokens"] == 1050


def test_runs_usage_says_what_is_wrong_with_what_it_was_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nothing.db"
    code, out, err = _cli(["runs", "usage", "--db", str(missing)], capsys)
    assert (code, out) == (1, "")
    assert "no store at" in err
    assert not missing.exists()
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    with conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
    conn.close()
    code, out, err = _cli(["runs", "usage", "--db", str(other), "--by", "day"], capsys)
    assert (code, out) == (1, "")
    assert str(other) in err
    assert "Traceback" not in err


def test_a_stored_usage_nested_too_deep_is_damaged_not_a_crash() -> None:
    deep = "[" * 999 + "]" * 999  # within the 2,000 characters a usage may take
    usage, damaged = _usage_scan._usage(deep)
    assert usage is None
    assert damaged is not None
    assert "not JSON" in damaged
