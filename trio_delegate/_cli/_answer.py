"""``trio-delegate runs answer``: answer a run's open question from another terminal.

The run lives in a runtime that records it in a shared store (an SQLite
file, or PostgreSQL); its question is in the store (contract §19). The
answer is checked against the question's schema here, then left in the
store, durably, for the runtime that runs it, which applies it within a
second, as it applies a cancel request. Unlike the other ``runs`` actions
this one writes to the store (an SQLite file of an older version is
migrated).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, TextIO

import trio

from .._checks import terminal_safe
from .._errors import DelegationError
from .._json import parse
from .._results import AnswerAck
from .._stores._postgres import PostgresStore, is_postgres_dsn
from .._stores._protocol import is_run_id
from .._stores._sqlite import SQLiteStore
from ..lowlevel import answer_in_store

__all__ = ["add_answer_parser"]


def add_answer_parser(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``runs answer`` among the ``runs`` actions."""
    # Imported here: _runs registers this parser, and holds the options every action shares.
    from ._runs import common_arguments

    answer = actions.add_parser(
        "answer",
        help="answer a run's open question through a shared store",
        description=(
            "Answer (or decline) the open question of a run that lives in a runtime sharing "
            "the store. The answer is JSON, checked against the question's schema here; the "
            "runtime that runs it applies it within a second. 'runs show' and 'runs watch' "
            "show the question; a string answer is JSON too: '\"blue\"'."
        ),
    )
    answer.add_argument("run_id", metavar="RUN_ID", help="the run that asked")
    answer.add_argument(
        "answer", metavar="JSON", nargs="?", default=None, help="the answer, as JSON"
    )
    answer.add_argument(
        "--question",
        metavar="ID",
        default=None,
        help="the question to answer (default: the run's oldest open question)",
    )
    answer.add_argument(
        "--decline", metavar="REASON", default=None, help="decline the question, saying why"
    )
    answer.add_argument(
        "--owner", default=None, help="answer only if the run belongs to this parent owner"
    )
    common_arguments(answer)
    answer.set_defaults(handler=run_answer)


def _say(err: TextIO, text: str) -> int:
    print(f"trio-delegate: {terminal_safe(text)}", file=err)
    return 1


def run_answer(
    args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """``trio-delegate runs answer``: the handler of the parsed arguments; the exit code."""
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    from ._runs import json_text, store_location

    if not is_run_id(args.run_id):
        return _say(
            err,
            f"{args.run_id!r} is not a run id (run_ and 32 hex digits): copy it from "
            "'trio-delegate runs list'",
        )
    value: Any = None
    declined = args.decline is not None
    if declined == (args.answer is not None):
        return _say(err, "give the answer as JSON, or --decline REASON, not both nor neither")
    if not declined:
        try:
            value = parse(args.answer)
        except ValueError as exc:  # TooDeep included
            return _say(
                err,
                f"the answer {args.answer[:200]!r} is not JSON ({exc}); a string answer is "
                "quoted JSON too: '\"blue\"'",
            )
    db = store_location(args, err)
    if db is None:
        return 1
    if not is_postgres_dsn(db) and not Path(db).is_file():
        # Answering must not create an empty store where the user mistyped a path.
        return _say(err, f"no store at {db}; pass --db PATH (or a postgresql:// URI)")
    try:
        ack = trio.run(_answer, db, args, value, declined)
    except DelegationError as exc:
        return _say(err, str(exc))
    if args.json:
        print(
            json_text(
                {
                    "run_id": ack.run_id,
                    "question_id": ack.question_id,
                    "accepted": ack.accepted,
                    "status": ack.status.value,
                }
            ),
            file=out,
        )
        return 0 if ack.accepted else 1
    if not ack.accepted:
        which = "no open question" if args.question is None else f"no open question {args.question}"
        return _say(
            err,
            f"run {ack.run_id} ({ack.status.value}) has {which} in the store, or another "
            "answer was left first: 'trio-delegate runs show RUN_ID' shows what it asks",
        )
    done = "declined" if declined else "answered"
    print(
        f"{done} question {ack.question_id} of run {ack.run_id}; the runtime that runs it "
        "applies it within a second",
        file=out,
    )
    return 0


async def _answer(db: str, args: argparse.Namespace, value: Any, declined: bool) -> AnswerAck:
    store: SQLiteStore | PostgresStore = (
        PostgresStore(db, schema=args.schema) if is_postgres_dsn(db) else SQLiteStore(db)
    )
    try:
        return await answer_in_store(
            store,
            args.run_id,
            value,
            owner=args.owner,
            question_id=args.question,
            declined=declined,
            reason=args.decline or "",
        )
    finally:
        with trio.CancelScope(shield=True):
            await store.aclose()
