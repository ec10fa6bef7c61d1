"""``trio-delegate runs usage``: what a store's runs spent, in total or by subagent, owner or day.

Each terminal record keeps what its run and its nested runs spent (§20),
so adding every record would count a nested run's spend twice: once as its
own, once in its parent's. A summary adds each run's record and takes a
nested run's away from its parent run's group, so each run counts what it
spent itself, in its own group, and the total is what the top-level runs
spent. A nested run whose parent run the store no longer holds (or whose
parent has recorded no usage yet) counts as a top-level one.

By owner, a nested run counts for the owner of its top-level run (a
nested parent's owner is ``<owner>/<run id>``), which is also what
``--owner`` picks. By day, a run counts on the day (UTC) it was admitted.
Records are read a page at a time (``_usage_scan``); the groups shown are
at most :data:`MAX_GROUPS`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable
from typing import Any, Final, TextIO

from .._errors import StoreError
from .._status import LIVE_STATUSES
from ._runs import common_arguments, fail, json_text, literal, reader_for
from ._spend import Spend, cost_text, parent_of, tokens_text, top_owner
from ._usage_scan import ParentFacts, UsageRow, UsageSource

__all__ = ["GROUPINGS", "MAX_GROUPS", "Summary", "add_usage_parser", "summarize"]

#: What ``--by`` groups on.
GROUPINGS: Final = ("subagent", "owner", "day")
#: Groups a summary keeps; the runs of any further ones are added up under :data:`OTHERS`.
MAX_GROUPS: Final = 10_000
#: The group of the runs past :data:`MAX_GROUPS` groups.
OTHERS: Final = "(all other groups)"
#: Damaged rows named one by one (on stderr, and in ``--json``); the rest are counted.
_NAMED_DAMAGED: Final = 20

_LIVE: Final = frozenset(status.value for status in LIVE_STATUSES)


def _day(admitted_at: str) -> str:
    day = admitted_at[:10]
    ok = len(day) == 10 and day[4] == day[7] == "-" and (day[:4] + day[5:7] + day[8:]).isdigit()
    return day if ok else "(unknown day)"


_KEYS: Final[dict[str | None, Callable[[str, str, str], str]]] = {
    None: lambda owner, subagent, admitted_at: "all runs",
    "subagent": lambda owner, subagent, admitted_at: subagent,
    "owner": lambda owner, subagent, admitted_at: top_owner(owner),
    "day": lambda owner, subagent, admitted_at: _day(admitted_at),
}


class Summary:
    """What the runs of a store spent, by group.

    Attributes:
        groups: the sums, by group.
        total: the sum of every run's own spend.
        live: runs still live (their usage is recorded when they end).
        damaged: how many rows hold a usage that cannot be read.
        named: the first damaged rows: run id and why.
    """

    def __init__(self) -> None:
        self.groups: dict[str, Spend] = {}
        self.total = Spend()
        self.live = 0
        self.damaged = 0
        self.named: list[tuple[str, str]] = []

    def group(self, key: str) -> Spend:
        """The sum of group *key* (made when there is room, else :data:`OTHERS`)."""
        spend = self.groups.get(key)
        if spend is None:
            if len(self.groups) >= MAX_GROUPS:
                key = OTHERS
            spend = self.groups.setdefault(key, Spend())
        return spend

    def ordered(self) -> list[tuple[str, Spend]]:
        """The groups, the costliest first, then by tokens, then by name."""
        return sorted(
            self.groups.items(), key=lambda item: (-item[1].cost, -item[1].total_tokens, item[0])
        )


def summarize(
    rows: Iterable[UsageRow],
    parent: Callable[[str], ParentFacts | None],
    *,
    by: str | None,
    owner: str | None,
) -> Summary:
    """Add *rows* (:class:`UsageRow`, oldest first) up by *by*, only runs of *owner*;
    *parent* tells what the store holds of a run (``None``: nothing).

    Raises:
        StoreError: a parent run cannot be read.
    """
    summary = Summary()
    key_of = _KEYS[by]
    for row in rows:
        if owner is not None and top_owner(row.owner) != owner:
            continue
        if row.damaged is not None:
            summary.damaged += 1
            if len(summary.named) < _NAMED_DAMAGED:
                summary.named.append((row.run_id, row.damaged))
            continue
        usage = row.usage
        if usage is None:
            summary.live += row.status in _LIVE
            continue
        summary.group(key_of(row.owner, row.subagent, row.admitted_at)).add(usage)
        summary.total.add(usage)
        parent_id = parent_of(row.owner)
        if parent_id is None:
            continue
        facts = parent(parent_id)
        if facts is None or not facts.has_usage:
            continue  # its spend is in no record but its own: a top-level run's
        key = key_of(facts.owner, facts.subagent, facts.admitted_at)
        summary.group(key).add(usage, -1)
        summary.total.add(usage, -1)
    return summary


def add_usage_parser(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``runs usage``."""
    usage = actions.add_parser(
        "usage",
        help="what the runs spent: tokens and cost, in total or by subagent, owner or day",
        description=(
            "Add up the tokens and cost the store's ended runs recorded. Each run counts what "
            "it spent itself (a run's record includes its nested runs', which count as "
            "their own), so the total is what the top-level runs spent. --by groups the "
            "runs: by subagent, by owner (a nested run counts for its top-level run's "
            "owner), or by the day (UTC) each was admitted; the costliest group first, and a "
            "total row. Live runs count once they end. The store is read a page at a time."
        ),
    )
    common_arguments(usage)
    usage.add_argument("--by", choices=GROUPINGS, help="one row per subagent, owner or day")
    usage.add_argument(
        "--owner", help="only the runs of this parent owner (and the runs they delegated)"
    )
    usage.set_defaults(handler=_usage)


def _usage(args: argparse.Namespace) -> int:
    out, err = sys.stdout, sys.stderr
    opened = reader_for(args, err)
    if opened is None:
        return 1
    reader, name = opened
    try:
        source = UsageSource(reader)
        summary = summarize(
            source.rows(owner=args.owner), source.parent, by=args.by, owner=args.owner
        )
    except StoreError as exc:
        fail(exc, err)
        return 1
    finally:
        reader.close()
    if args.json:
        out.write(json_text(_as_json(summary, args.by)) + "\n")
    else:
        _print_table(summary, args.by, name, out)
    for run_id, why in summary.named:
        print(f"trio-delegate: {literal(f'the run {run_id} is damaged: {why}').plain}", file=err)
    if summary.damaged > len(summary.named):
        print(
            f"trio-delegate: and {summary.damaged - len(summary.named):,} more damaged rows",
            file=err,
        )
    return 0


def _as_json(summary: Summary, by: str | None) -> dict[str, Any]:
    document: dict[str, Any] = {"by": by}
    if by is not None:
        document["groups"] = [
            {by: key, "runs": spend.runs, **spend.fields()} for key, spend in summary.ordered()
        ]
    document["total"] = {"runs": summary.total.runs, **summary.total.fields()}
    document["live_runs"] = summary.live
    document["damaged_rows"] = summary.damaged
    if summary.named:
        document["damaged"] = [{"run_id": run_id, "error": why} for run_id, why in summary.named]
    return document


def _print_table(summary: Summary, by: str | None, name: str, out: TextIO) -> None:
    from rich.console import Console
    from rich.table import Table

    caption = []
    if summary.live:
        caption.append(f"{summary.live:,} live runs are counted when they end")
    if summary.damaged:
        caption.append(f"{summary.damaged:,} damaged rows left out (said on stderr)")
    table = Table(
        title=literal(f"usage of the runs in {name}"),
        caption="; ".join(caption) or None,
        show_footer=by is not None,
    )
    total = summary.total
    figures: list[tuple[str, Callable[[Spend], str]]] = [
        ("runs", lambda spend: f"{spend.runs:,}"),
        ("requests", lambda spend: tokens_text(spend.count("requests"))),
        ("input tokens", lambda spend: tokens_text(spend.count("input_tokens"))),
        ("output tokens", lambda spend: tokens_text(spend.count("output_tokens"))),
        ("cache read", lambda spend: tokens_text(spend.count("cache_read_input_tokens"))),
        ("total tokens", lambda spend: tokens_text(spend.total_tokens)),
        ("cost", lambda spend: cost_text(spend.cost_usd)),
    ]
    table.add_column(by or "", footer="total", overflow="fold")
    for heading, figure in figures:
        table.add_column(heading, footer=figure(total), justify="right")
    rows = summary.ordered() if by is not None else [("total", total)]
    for key, spend in rows:
        table.add_row(literal(key), *(figure(spend) for _, figure in figures))
    Console(file=out, width=160).print(table)
