"""Pending reasons in words a researcher understands (the machine-readable code travels beside them)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import cast

from .fgd import Shape
from .model import BATCH, CONTAINERS, REFUSED, WHOLE, Job, PendingReason

#: How many ruled-out clusters a pending message names before "and N more".
NAMED = 4


def shape_words(job: Job) -> str:
    shape = Shape.of(job)
    if shape.accelerators == 0:
        each = "a CPU-only worker"
    elif shape.fractional:
        each = f"{shape.milli / WHOLE:g} of an accelerator"
    else:
        each = f"{shape.accelerators} accelerator{'s' if shape.accelerators > 1 else ''}"
    words = each if job.workers == 1 else f"{job.workers} workers x {each}"
    return f"{words} and a Ray head" if job.has_head else words


def accel_words(milli: int) -> str:
    return f"{milli / WHOLE:g}"


def when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t))


def message(reason: PendingReason, job: Job, facts: Mapping[str, object]) -> str:  # noqa: C901
    flavors = facts.get("flavors") or "its accelerator types"
    shape = shape_words(job)
    match reason:
        case PendingReason.UNKNOWN_QUEUE:
            return f"Queue {job.queue!r} does not exist (any more); ask your team lead which queue to use."
        case PendingReason.UNKNOWN_TIER:
            return f"Priority tier {job.tier!r} does not exist (any more); resubmit with another tier."
        case PendingReason.NO_FLAVOR:
            return (
                f"None of the requested accelerator types is offered to queue {job.queue!r} "
                "in the clusters and regions the job allows."
            )
        case PendingReason.NEVER_FITS:
            return f"No node of {flavors} could hold {shape}, even with the whole fleet idle; shrink the request."
        case PendingReason.TOPOLOGY:
            level = job.topology.level if job.topology else "?"
            return (
                f"No single {level} of {flavors} has room for {shape}, even with the whole fleet idle; "
                f"use fewer workers or make the {level} placement preferred instead of required."
            )
        case PendingReason.PRICE_LIMIT:
            return (
                f"Every placement of {shape} on {flavors} costs more than the job's limit of "
                f"{job.max_price_per_hour:g} per hour."
            )
        case PendingReason.QUOTA_EXCEEDS_LIMIT:
            return (
                f"It needs {facts.get('needed', '?')} {facts.get('resource', 'accelerators')} of {flavors}, but queue "
                f"{job.queue!r} can get at most {facts.get('limit', '?')} even when borrowing from its cohort."
            )
        case PendingReason.QUOTA_EXHAUSTED:
            return (
                f"Queue {job.queue!r} is using its quota of {flavors} and cannot borrow more from its cohort "
                "right now; it starts when the team's running jobs finish or quota frees up."
            )
        case PendingReason.CAPACITY:
            return f"Quota allows it, but no free {flavors} nodes can take {shape} right now."
        case PendingReason.RESERVED:
            return (
                f"Capacity on {facts.get('where', flavors)} is reserved for it from about "
                f"{when(float(str(facts['start'])))}, when running jobs reach their time limits."
            )
        case PendingReason.WAITING_FOR_PREEMPTION:
            return (
                f"{facts.get('victims', 'Some')} lower-priority or borrowed job(s) were asked to stop to make room; "
                "it starts when they have checkpointed and exited."
            )
        case PendingReason.BACKFILL_BLOCKED:
            return (
                f"Free {flavors} capacity is held for a higher-priority job that starts soon, and this job "
                "would still be running then; a shorter time limit could let it start now."
            )
        case PendingReason.NOT_CONSIDERED:
            return "Not examined in this scheduling cycle: too many jobs are ahead of it. It keeps its place."
        case PendingReason.MEMBER_LIMIT:
            return (
                f"Its submitter's running jobs hold {facts.get('used')} accelerators and the team lead allows each "
                f"member {facts.get('limit')} at once; it needs {facts.get('needed')}. It starts when enough of them "
                "have finished."
            )
        case PendingReason.BUDGET:
            return _budget_words(shape, facts)
        case PendingReason.NO_CLUSTER:
            return _no_cluster_words(job, facts)
        case PendingReason.MAINTENANCE:
            then = (
                f" Capacity is reserved for it from about {when(float(str(facts['reserved'])))}."
                if facts.get("reserved") is not None
                else ""
            )
            return (
                f"It would run into maintenance on {facts.get('cluster')} at {when(float(str(facts.get('start'))))} "
                f"within its time limit, and it is not preemptible; a shorter time limit could let it start now.{then}"
            )
    raise AssertionError(reason)  # pragma: no cover - every reason is handled above


def _budget_words(shape: str, facts: Mapping[str, object]) -> str:
    hours = f"{float(str(facts.get('hours', 0))):.3g}"
    label, left = facts.get("label", "A hard budget"), float(str(facts.get("left", 0)))
    then = "It starts when the budget is raised, or when the next month begins."
    if facts.get("measure") == "money":
        return (
            f"Budget {label} has {left:,.2f} left this month: any placement of {shape} that could start now "
            f"would cost more over its {hours} hours (the budget pays up to {float(str(facts.get('cap', 0))):,.2f} "
            f"an hour). {then}"
        )
    return (
        f"Budget {label} has {left:,.4g} accelerator-hours left this month, and {shape} for up to {hours} hours "
        f"may use {float(str(facts.get('needed', 0))):,.4g}. {then}"
    )


#: A cluster ruled out for a job: (name, why in words, whether for good).
RuledOut = tuple[str, str, bool]


def refused_everywhere(ruled_out: Sequence[RuledOut]) -> bool:
    """Whether a job that no cluster can take (``NO_CLUSTER``, ruled out of these clusters) should fail: at
    least one cluster refused it, and every other one is ruled out for good too (refused it, or cannot run
    its program); none is out only for a while (could not be reached), after which the job may go there.
    The cycle puts the answer in ``Pending.refused`` for the placement loop."""
    return any(why.startswith(REFUSED) for _, why, _ in ruled_out) and all(good for _, _, good in ruled_out)


def _no_cluster_words(job: Job, facts: Mapping[str, object]) -> str:
    ruled_out = cast("Sequence[RuledOut]", facts.get("ruled_out") or ())
    named = "; ".join(f"{name} {why}" for name, why, _ in ruled_out[:NAMED])
    if len(ruled_out) > NAMED:
        named += f"; and {len(ruled_out) - NAMED} more"
    capability_only = all(good and not why.startswith(REFUSED) for _, why, good in ruled_out)
    if capability_only and job.needs == BATCH:
        return f"No cluster here runs batch scripts without a container image: {named}."
    if capability_only and job.needs == CONTAINERS:
        return f"No cluster here runs container images: {named}."
    return f"No cluster can run it: {named}."
