"""The Temporal workflow one run executes as, shared by the parent and the workers.

The parent starts one execution of :class:`RunWorkflow` per run (its
workflow id is the run id); a worker executes it, and the workflow runs the
subagent as one activity (:func:`activity_name`) on the same task queue.

The workflow keeps what the parent cannot see: it cancels its activity, and
waits for the runner's cleanup, when it is cancelled or when the parent
stops renewing its lease (:data:`RENEW_SIGNAL`), so no run goes on without a
living owner.

Needs the ``temporal`` extra (``temporalio``).
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta
from typing import Any, Final

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.workflow import ActivityCancellationType

from .._usage import COUNTS, Usage, reported_usage

__all__ = [
    "LEASE_EXPIRED",
    "PROTOCOL",
    "RENEW_SIGNAL",
    "USAGE",
    "WORKFLOW_NAME",
    "RunWorkflow",
    "activity_name",
    "reply_usage",
    "usage_fields",
]

#: The workflow type every run executes as.
WORKFLOW_NAME: Final = "trio-delegate-run"
#: The signal by which the parent renews a run's lease.
RENEW_SIGNAL: Final = "renew-lease"
#: The error type of a workflow ended because its parent stopped renewing.
LEASE_EXPIRED: Final = "LeaseExpired"
#: The version of the request and reply a workflow carries.
PROTOCOL: Final = 1
#: What bounds an activity when the run has no deadline: the lease does (an
#: activity needs some start-to-close bound).
_UNBOUNDED: Final = timedelta(days=3650)
#: The wait between two attempts of an activity whose worker was lost.
_RETRY_INTERVAL: Final = timedelta(seconds=1)


#: The key of a reply that holds what the runner spent (the fields of
#: ``td.Usage``), when it reported anything: the workflow hands the reply
#: back as it is, so the usage comes back with the result.
USAGE: Final = "usage"


def usage_fields(usage: Usage | None) -> dict[str, Any] | None:
    """*usage* as the JSON object a reply carries under :data:`USAGE`."""
    if usage is None:
        return None
    return {**{field: getattr(usage, field) for field in COUNTS}, "cost_usd": usage.cost_usd}


def reply_usage(reply: dict[str, Any]) -> Usage | None:
    """What a reply says the runner spent, or ``None`` when it says nothing.

    The reply crossed the network: a field that is not a count counts as 0,
    as in what a CLI reports, and anything but an object is nothing.
    """
    fields = reply.get(USAGE)
    if not isinstance(fields, dict):
        return None
    return reported_usage(**{key: fields.get(key) for key in (*COUNTS, "cost_usd")})


def activity_name(subagent: str) -> str:
    """The activity type that runs *subagent* on a worker."""
    return f"trio-delegate/{subagent}"


@workflow.defn(name=WORKFLOW_NAME, sandboxed=False)
class RunWorkflow:
    """One run: its subagent as one activity, under the parent's lease.

    The request (a JSON object) carries ``subagent``, ``run_id``, ``task``,
    ``history``, ``final_schema``, ``deadline_unix`` (the child deadline as
    wall-clock time, for the runner's ``ctx.deadline``, or ``None``),
    ``lease_seconds`` (or ``None``), ``heartbeat_timeout_seconds``,
    ``backstop_seconds`` (how long the activity may take in all, or
    ``None``) and ``max_attempts``.
    """

    def __init__(self) -> None:
        self._renewals = 0

    @workflow.signal(name=RENEW_SIGNAL)
    def renew(self) -> None:
        """The parent is alive: the lease starts again."""
        self._renewals += 1

    @workflow.run
    async def run(self, request: dict[str, Any]) -> dict[str, Any]:
        """Run the subagent's activity; return its reply ``{final_result, transcript}``
        (and ``usage``, :data:`USAGE`, when the runner reported any).

        Raises:
            ApplicationError: the runner failed (its type and message), or
                the lease ran out (:data:`LEASE_EXPIRED`).
            asyncio.CancelledError: the workflow was cancelled; raised after
                the activity's cancellation completed.
        """
        backstop = request.get("backstop_seconds")
        activity = workflow.start_activity(
            activity_name(request["subagent"]),
            request,
            heartbeat_timeout=timedelta(seconds=request["heartbeat_timeout_seconds"]),
            start_to_close_timeout=None if backstop is not None else _UNBOUNDED,
            schedule_to_close_timeout=(
                timedelta(seconds=backstop) if backstop is not None else None
            ),
            retry_policy=RetryPolicy(
                initial_interval=_RETRY_INTERVAL,
                backoff_coefficient=1.0,
                maximum_attempts=request["max_attempts"],
            ),
            # Cancelling waits for the runner's cleanup on the worker.
            cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        )
        lease = request.get("lease_seconds")
        try:
            if lease is None:
                reply: dict[str, Any] = await activity
            else:
                reply = await self._leased(activity, lease, request["run_id"])
        except asyncio.CancelledError:
            await _cancel_and_join(activity)
            raise
        return reply

    async def _leased(
        self, activity: workflow.ActivityHandle[Any], lease: float, run_id: str
    ) -> dict[str, Any]:
        """Wait for *activity* while the lease is renewed; cancel it once it is not."""
        while not activity.done():
            seen = self._renewals

            def renewed_or_done(seen: int = seen) -> bool:
                return activity.done() or self._renewals != seen

            try:
                await workflow.wait_condition(renewed_or_done, timeout=timedelta(seconds=lease))
            except TimeoutError:
                await _cancel_and_join(activity)
                raise ApplicationError(
                    f"the parent stopped renewing the lease of run {run_id} for {lease:g} s "
                    "(its host died or was cut off), so the run was cancelled",
                    type=LEASE_EXPIRED,
                    non_retryable=True,
                ) from None
        reply: dict[str, Any] = activity.result()
        return reply


async def _cancel_and_join(activity: workflow.ActivityHandle[Any]) -> None:
    """Cancel *activity* and wait until the worker confirmed it ended."""
    if activity.done():
        return
    activity.cancel()
    # An ActivityError is the cancellation, confirmed (or the runner's own ending).
    with contextlib.suppress(ActivityError, asyncio.CancelledError):
        await activity
