"""The run state machine: the table in code is the table in docs/contract.md.

A run's state is one value (``Run.state``), moved only as :data:`MOVES`
allows (``Run._move`` checks it; ``start`` and ``commit`` write its test
out). The contract's appendix documents the same table; this test holds
the two equal, so that neither can change alone.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import trio_delegate as td
from trio_delegate._core._run import MOVES, IllegalMove, Outcome, Run, State

CONTRACT = Path(__file__).resolve().parent.parent / "docs" / "contract.md"


def _documented_moves() -> set[tuple[str, str]]:
    text = CONTRACT.read_text(encoding="utf-8")
    section = text.split("### A run's state", 1)[1].split("\n### ", 1)[0]
    moves: set[tuple[str, str]] = set()
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[0].startswith("`"):
            continue
        sources = re.findall(r"`([a-z_]+)`", cells[0])
        targets = re.findall(r"`([a-z_]+)`", cells[1])
        moves |= {(source, target) for source in sources for target in targets}
    return moves


def test_the_documented_table_is_the_table_in_code() -> None:
    in_code = {(state.value, to.value) for state, targets in MOVES.items() for to in targets}
    assert _documented_moves() == in_code


def test_every_state_has_a_row_and_terminal_states_have_no_way_out() -> None:
    assert set(MOVES) == set(State)
    for state in State:
        if state.terminal or state is State.WITHDRAWN:
            assert MOVES[state] == frozenset(), state
        else:
            assert MOVES[state], state


def test_only_live_states_can_be_decided() -> None:
    for state in State:
        if state.live:
            # The state a decided run waits for its record in is a move away.
            assert state.decided in MOVES[state]


class _Host:
    """Enough of a RunHost for a run that is only moved, never run."""

    records = False
    writer = None

    def __init__(self) -> None:
        self.committed: list[Run] = []

    def now(self) -> float:
        return 0.0

    def run_committed(self, run: Run, was_running: bool) -> None:
        self.committed.append(run)


async def _runner(ctx: object) -> str:
    return "done"  # pragma: no cover - never called


def _run() -> Run:
    host: Any = _Host()
    return Run(
        "r-1", host, "owner", td.Subagent("echo", _runner), "a task", None, None, None, 1, None
    )


def test_an_illegal_move_raises_and_changes_nothing() -> None:
    run = _run()
    assert run.state.status is td.RunStatus.PENDING
    run._move(State.RUNNING)
    assert run.state is State.RUNNING
    with pytest.raises(IllegalMove, match="cannot move to pending"):
        run._move(State.PENDING)
    assert run.state is State.RUNNING
    with pytest.raises(IllegalMove, match="cannot move to withdrawn"):
        run.withdraw()  # a run that started cannot be withdrawn
    assert run.state is State.RUNNING


def _state_of(run: Run) -> State:
    # Read through a call: the checker would keep the narrowing of the last
    # assert across the moves in between.
    return run.state


def test_start_and_commit_refuse_what_the_table_refuses() -> None:
    # Both write the table's test out (every run makes these two moves).
    run = _run()
    run.start(0.0)
    with pytest.raises(IllegalMove, match="cannot move to running"):
        run.start(1.0)
    assert run.state is State.RUNNING
    run.commit(Outcome(td.RunStatus.CANCELLED))
    assert _state_of(run) is State.CANCELLED
    with pytest.raises(IllegalMove, match="cannot move to failed"):
        run.commit(Outcome(td.RunStatus.FAILED))
    with pytest.raises(IllegalMove, match="cannot move to running"):
        run.start(2.0)
    assert _state_of(run) is State.CANCELLED
    host: Any = run.host
    assert host.committed == [run]  # the refused commit told nobody
