"""A DSPy ReAct module delegating through trio_delegate, offline.

The module's LM is DSPy's ``DummyLM``, its answers planned from what the tools
returned (recorded by a DSPy callback). It delegates a summary — the
summarizer is itself a DSPy module run as a subagent — and continues that
conversation to get a shorter one. DSPy's delegation is blocking: the module
runs in a worker thread and its tools call back into Trio. Needs
``pip install -e '.[dspy]'`` (from a checkout).

    python examples/dspy_parent.py
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import dspy
import trio
from dspy.utils.callback import BaseCallback
from dspy.utils.dummies import DummyLM

import trio_delegate as td
from trio_delegate.adapters import dspy as td_dspy


class Summarize(dspy.Signature):
    """Summarize the text."""

    text: str = dspy.InputField()
    history: dspy.History = dspy.InputField()
    summary: str = dspy.OutputField()


summarizer = dspy.Predict(Summarize)
summarizer.set_lm(
    DummyLM(
        [
            {"summary": "Trio runs tasks in nurseries; every task has an owner."},
            {"summary": "Every Trio task has an owner."},
        ]
    )
)


class ToolResults(BaseCallback):
    """Shows each delegation, and records its answer for the planned LM to read."""

    def __init__(self) -> None:
        self.results: list[dict[str, Any]] = []

    def on_tool_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        if instance.name != "finish":
            print(f"lead calls {instance.name}({inputs.get('kwargs', inputs)})")

    def on_tool_end(
        self, call_id: str, outputs: Any, exception: BaseException | None = None
    ) -> None:
        if isinstance(outputs, dict):  # a delegation's answer (finish answers with text)
            print(f"  <- {outputs}")
            self.results.append(outputs)


def lead_answers(recorded: ToolResults) -> Iterator[dict[str, Any]]:
    """The lead's LM: each answer is made when DSPy asks for it, after the last tool ran."""
    text = "Trio is a library for async concurrency. It runs tasks in nurseries, and ..."
    yield {
        "next_thought": "Delegate the summary.",
        "next_tool_name": "delegate_task",
        "next_tool_args": {"subagent": "summarizer", "task": text},
    }
    run_id = recorded.results[-1]["run_id"]
    yield {
        "next_thought": "Too long: continue that conversation.",
        "next_tool_name": "continue_subagent",
        "next_tool_args": {"run_id": run_id, "message": "Shorter, please."},
    }
    yield {"next_thought": "Done.", "next_tool_name": "finish", "next_tool_args": {}}
    yield {"reasoning": "The summarizer answered.", "answer": recorded.results[-1]["final_result"]}


async def main() -> None:
    subagents = [
        td.Subagent("summarizer", td_dspy.runner(summarizer), description="Summarizes a text.")
    ]
    async with td.open_runtime(subagents) as rt, rt.open_parent("lead") as parent:
        recorded = ToolResults()
        react = dspy.ReAct("question -> answer", tools=td_dspy.tools(parent))
        react.set_lm(DummyLM(lead_answers(recorded)))
        with dspy.context(callbacks=[recorded]):
            prediction = await td_dspy.run_module(react, question="Summarize the Trio intro.")
        print(f"lead answers: {prediction.answer}")
    print("every delegation was answered: the fail-closed check passed")


if __name__ == "__main__":
    trio.run(main)
