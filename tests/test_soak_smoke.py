"""The soak in miniature (``tools/soak.py``, ``make soak``): three processes on one
SQLite store and an MCP connection to ``trio-delegate serve`` on it, a worker
killed and restarted, another stopped and continued, the store slow for a
while, the server killed and another serving the connection; every history
and the store's records checked. It must find no violation."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parent.parent


async def test_a_short_soak_on_sqlite_finds_no_violation(tmp_path: Path) -> None:
    command = [sys.executable, str(ROOT / "tools" / "soak.py"), "run", "--seed", "1"]
    command += ["--ops", "40", "--kills", "1", "--stops", "1", "--slow", "1"]
    command += ["--mcp", "--serve-kills", "1"]
    command += ["--dir", str(tmp_path)]
    done = await trio.run_process(command, capture_stdout=True, check=False, cwd=ROOT)
    out = done.stdout.decode()
    assert done.returncode == 0, out
    assert "soak: 0 violations (seed 1)" in out
    # The fault schedule ran: the victim's history ends with the kill, and a
    # new incarnation of it played on the same store.
    assert "killed p" in out
    assert "restarted as p" in out
    assert "stopped p" in out
    assert "the store was slow" in out
    # Three workers, one restarted incarnation and the MCP connection's two servers.
    assert " calls in 6 histories, " in out
    assert "killed the MCP server of m1.0; m1.1 serves the connection" in out
    # The killed server's history ends with its kill; the next one's with the close.
    first, second = ((tmp_path / f"m1.{i}.jsonl").read_text().splitlines() for i in (0, 1))
    assert json.loads(first[-1])["op"] == "killed"
    assert json.loads(second[-1])["op"] == "runtime_closed"
    # The report: what was checked, per invariant, and how each process fared.
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert summary["violations"] == 0
    assert summary["faults"] == {"kill": 1, "stop": 1, "slow": 1, "servekill": 1}
    assert summary["checked"]["one_ending"] > 0
    assert summary["checked"]["interrupted"] > 0  # the killed worker's runs
    # Every process samples itself, the server too (m1.0.serve).
    processes = {"p1.0", "p2.0", "p3.0", "p3.1", "m1.0", "m1.0.serve", "m1.1.serve"}
    assert set(summary["memory"]) == processes
    assert summary["longest_step_seconds"] > 0
    served = (tmp_path / "samples" / "m1.0.serve.jsonl").read_text().splitlines()
    assert max(json.loads(line)["longest_step"] for line in served) > 0
    assert summary["checked"]["answer_once"] > 0  # the connection answered over Tasks
    assert f"summary: {tmp_path / 'report' / 'summary.json'}" in out


def _restart_keeps_port_and_data() -> tuple[int, int, list[tuple[int]]]:
    import psycopg

    from tests.pg_server import PostgresServer

    # Durable: without synchronous commits a crash loses what was just committed.
    with PostgresServer(durable=True, fixed_port=True) as server:
        port = server.port
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            conn.execute("CREATE TABLE kept (n int)")
            conn.execute("INSERT INTO kept VALUES (7)")
            server.restart(kill=True)
            # The old session died with its server: a crash, not a shutdown.
            try:
                conn.execute("SELECT 1")
            except psycopg.OperationalError:
                pass
            else:
                raise AssertionError("a session outlived the server's kill")
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            rows = conn.execute("SELECT n FROM kept").fetchall()
        return port, server.port, rows


async def test_the_soaks_postgres_server_comes_back_on_its_port_with_its_data() -> None:
    # The soak's --pg-restarts fault: its workers reconnect to the same address.
    port, after, rows = await trio.to_thread.run_sync(_restart_keeps_port_and_data)
    assert after == port
    assert rows == [(7,)]
