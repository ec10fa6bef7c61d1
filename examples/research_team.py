"""A research team of models: a lead, an investigator with a tool, a writer, and a budget.

    pip install -e '.[anthropic]'     # from a checkout (or '.[openai]')
    ANTHROPIC_API_KEY=... python examples/research_team.py "Why did logins fail on the 3rd?"
    OPENAI_API_KEY=... python examples/research_team.py --provider openai "..."

The lead model plans: it starts the investigator in the background
(``delegate_task`` with ``background=true``), waits for its notes, and
hands them to the writer. The investigator searches the incident notes
with a Python tool (``search_notes``). Every model call counts against one
budget for the whole tree (``--budget-tokens``, and ``--budget-usd`` with
``--prices``); each call's ``max_tokens`` is clamped to what is left.

While the team works, the lead's progress is printed as it changes (its
turn, the tool it called, its tokens so far), and every model turn of every
subagent as it happens (the ``trio_delegate.model`` log). At the end: the
report, then what the whole tree spent (``parent.usage()``).

``--base-url`` (or ``RESEARCH_TEAM_BASE_URL``) points the provider's SDK at
another server: a gateway, a local model server, or the project's fake
model APIs in the tests (tests/test_research_team.py).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

import trio

import trio_delegate as td

#: The models each provider's team uses unless told otherwise: a larger lead,
#: smaller workers.
MODELS = {
    "anthropic": ("anthropic:claude-sonnet-4-5", "anthropic:claude-haiku-4-5"),
    "openai": ("openai:gpt-5", "openai:gpt-5-mini"),
}

LEAD = (
    "You lead a research team. First start the investigator on the question with "
    "delegate_task and background=true; then wait for its notes with wait_subagent. "
    "Give the notes to the writer with delegate_task (in the foreground) and answer with "
    "the writer's report as it is. Wait for every run you start before you answer."
)
INVESTIGATOR = (
    "You investigate incidents. Search the notes with search_notes (try a few queries), "
    "then answer with the facts you found, each with the note it came from."
)
WRITER = "You write a short incident report (at most 120 words) from the notes you are given."

#: The incident notes the investigator searches: a stand-in for your own data.
NOTES = {
    "n1": "03 Mar 21:40: deploy 412 rotated the session signing key.",
    "n2": "03 Mar 21:42: login error rate rose from 0.1% to 38%.",
    "n3": "03 Mar 22:05: the auth service still cached the old signing key.",
    "n4": "03 Mar 22:19: auth service restarted; login errors back to normal.",
    "n5": "04 Mar 09:00: the cache now reloads keys when they rotate (change 977).",
}


def search_notes(query: str, limit: int = 3) -> list[dict[str, str]]:
    """Search the incident notes; each match is {id, text}, best first."""
    words = [word for word in query.lower().split() if len(word) > 2]
    scored = [(sum(word in text.lower() for word in words), key) for key, text in NOTES.items()]
    best = sorted((item for item in scored if item[0]), key=lambda item: (-item[0], item[1]))
    return [{"id": key, "text": NOTES[key]} for _, key in best[: max(limit, 0)]]


def team(
    provider: str,
    *,
    base_url: str | None = None,
    prices: td.Prices | None = None,
    lead_model: str | None = None,
    worker_model: str | None = None,
) -> list[td.Subagent]:
    """The three subagents: the lead delegates to the other two."""
    lead, worker = MODELS[provider]
    common: dict[str, Any] = {"base_url": base_url, "prices": prices}
    return [
        td.Subagent(
            "lead",
            td.model_runner(lead_model or lead, instructions=LEAD, max_turns=12, **common),
            description="Plans the research and delegates it.",
            children=("investigator", "writer"),
            timeout_seconds=900,
        ),
        td.Subagent(
            "investigator",
            td.model_runner(
                worker_model or worker,
                instructions=INVESTIGATOR,
                tools=[search_notes],
                max_turns=8,
                **common,
            ),
            description="Finds the facts of an incident in the notes.",
            timeout_seconds=600,
        ),
        td.Subagent(
            "writer",
            td.model_runner(worker_model or worker, instructions=WRITER, max_turns=2, **common),
            description="Writes a short report from notes.",
            timeout_seconds=300,
        ),
    ]


class _Turns(logging.Handler):
    """Prints each model turn of every subagent as it happens."""

    def emit(self, record: logging.LogRecord) -> None:
        print(f"    {record.getMessage()}", flush=True)


async def research(
    question: str, subagents: Sequence[td.Subagent], budget: td.Budget
) -> tuple[str | None, td.Usage]:
    """Run the team on *question* within *budget*: the report (``None`` if the team
    failed) and what the whole tree spent."""
    # A team that failed is reported, not raised: leaving the parent does not
    # insist that its failed runs be replaced (fail_closed=False).
    async with td.open_runtime(subagents, config=td.Config(fail_closed=False)) as rt:
        # The budget covers every run started through this parent: the lead's
        # and everything it delegates.
        async with rt.open_parent("you", subagents=["lead"], budget=budget) as parent:
            handle = await parent.start("lead", question)
            seen = 0
            try:
                while True:
                    # Returns the result when the lead is done, else its handle
                    # after a second: print its progress when it changed.
                    answer = await parent.wait(handle.run_id, timeout=1.0)
                    status = parent.status(handle.run_id)
                    progress = status.progress
                    if progress is not None and progress.seq != seen:
                        seen = progress.seq
                        print(f"[lead] {progress.message}", flush=True)
                    if isinstance(answer, td.RunResult):
                        report = answer.final_result
                        break
            except td.DelegationError as error:
                print(f"the team stopped: {error}", file=sys.stderr)
                report = None
        return report, parent.usage()


def _prices(text: str | None) -> td.Prices | None:
    if text is None:
        return None
    try:
        given, taken = (float(part) for part in text.split(","))
    except ValueError:
        sys.exit(f"--prices must be INPUT,OUTPUT in US dollars per million tokens, got {text!r}")
    return td.Prices(input=given, output=taken)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line, run the team, print the report and the bill."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("question", nargs="?", default="Why did logins fail on 3 March?")
    parser.add_argument("--provider", choices=sorted(MODELS), default="anthropic")
    parser.add_argument("--base-url", default=os.environ.get("RESEARCH_TEAM_BASE_URL"))
    parser.add_argument("--lead-model", help="e.g. anthropic:claude-opus-4-1")
    parser.add_argument("--worker-model", help="e.g. anthropic:claude-haiku-4-5")
    parser.add_argument("--budget-tokens", type=int, default=200_000)
    parser.add_argument("--budget-usd", type=float, help="needs --prices to count")
    parser.add_argument(
        "--prices", help="INPUT,OUTPUT: US dollars per million tokens (your provider's page)"
    )
    parser.add_argument("--quiet", action="store_true", help="no per-turn lines")
    args = parser.parse_args(argv)
    subagents = team(
        args.provider,
        base_url=args.base_url,
        prices=_prices(args.prices),
        lead_model=args.lead_model,
        worker_model=args.worker_model,
    )
    budget = td.Budget(max_total_tokens=args.budget_tokens, max_cost_usd=args.budget_usd)
    log = logging.getLogger("trio_delegate.model")
    if not args.quiet:
        log.setLevel(logging.DEBUG)
        log.addHandler(_Turns())
    report, spent = trio.run(research, args.question, subagents, budget)
    if report is not None:
        print(f"\n{report}\n")
    print(
        f"the team spent {spent.requests} model calls, {spent.input_tokens:,} input and "
        f"{spent.output_tokens:,} output tokens, ${spent.cost_usd:.4f} "
        f"(budget: {args.budget_tokens:,} tokens)"
    )
    return 0 if report is not None else 1


if __name__ == "__main__":
    sys.exit(main())
