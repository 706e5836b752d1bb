"""Pending reasons in words a researcher understands (the machine-readable code travels beside them)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import cast

from .fgd import Shape
from .model import BATCH, CONTAINERS, REFUSED, WHOLE, Job, PendingReason, Workload

#: How many ruled-out clusters a pending message names before "and N more".
NAMED = 4


def slice_words(shape: str, count: int = 1) -> str:
    """A TPU slice shape in words: ``v5p-32/2x2x4`` is "a v5p-32 slice of shape 2x2x4"."""
    kind, _, topology = shape.partition("/")
    what = f"{kind} slice{'s' if count > 1 else ''}" + (f" of shape {topology}" if topology else "")
    return f"{count} {what}" if count > 1 else f"a {what}"


def shape_words(job: Job) -> str:
    if job.shape:  # a TPU job asks for whole slices, not accelerators
        return slice_words(job.shape, job.workers)
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


def _hours(seconds: float) -> str:
    """A bound in words: ``90 min``, ``6 h``, ``1.5 h``."""
    return f"{seconds / 60:g} min" if seconds < 3600 else f"{seconds / 3600:g} h"


def units(job: Job) -> str:
    """What a job's accelerators are called in a message: a TPU slice's are its chips."""
    return "TPU chips" if job.shape else "accelerators"


def lost_work(workload: Workload, milli: int, now: float) -> float:
    """What preempting ``workload`` (holding ``milli`` thousandths of accelerators) costs now: accelerator-seconds
    of work since its last checkpoint, or since its start without one, which its restart does again."""
    return milli / 1000 * max(0.0, now - max(workload.admitted_at, workload.last_checkpoint_at or workload.admitted_at))


def preempted(why: str, workload: Workload, lost: float) -> str:
    """A victim's timeline entry: why it was preempted, and what that costs it."""
    since = "its last checkpoint" if workload.last_checkpoint_at is not None else "its start (it has no checkpoint)"
    return (
        f"Preempted: {why}. It is requeued and resumes from its last checkpoint; the work since {since}, about "
        f"{lost / 3600:.2f} accelerator-hours, is done again."
    )


def message(reason: PendingReason, job: Job, facts: Mapping[str, object]) -> str:
    """Why ``job`` waits, in words; where preempting for it was held back by the cap on disruption, that too."""
    said = _message(reason, job, facts)
    if facts.get("disruption_capped"):
        said += (
            " Preempting other work for it would lose more of a tier's work than that tier's cap on disruption "
            "allows this hour; it may preempt once the last hour's preemptions fall out of the window."
        )
    return said


def _message(reason: PendingReason, job: Job, facts: Mapping[str, object]) -> str:  # noqa: C901
    flavors = facts.get("flavors") or "its accelerator types"
    shape = shape_words(job)
    if job.shape and reason in SHAPED:
        return _slice_words(reason, job, facts)
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
            if facts.get("spot_would"):
                return (
                    f"Only spot nodes of {flavors} could hold {shape}, and the job does not accept spot capacity; "
                    "accept spot (preemptible work only), or shrink the request."
                )
            return f"No node of {flavors} could hold {shape}, even with the whole fleet idle; shrink the request."
        case PendingReason.MEMORY_NEVER_FITS | PendingReason.CPU_NEVER_FITS:
            unit = "GiB of memory" if reason is PendingReason.MEMORY_NEVER_FITS else "CPU cores"
            return (
                f"The largest node of {flavors} it may use has {facts.get('largest')} {unit}, and it asks for more "
                f"than that {facts.get('who', 'per worker')}; ask for at most {facts.get('largest')}."
            )
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
            resource = facts.get("resource", "accelerators")
            resource = units(job) if resource == "accelerators" else resource
            return (
                f"It needs {facts.get('needed', '?')} {resource} of {flavors}, but queue {job.queue!r} can get at "
                f"most {facts.get('limit', '?')} even when borrowing from its cohort: it can never start as things "
                "stand; ask for less, or ask your team lead for more quota."
            )
        case PendingReason.QUOTA_EXHAUSTED:
            then = (
                f" The running jobs' time limits free enough of it by about {when(float(str(facts['free_at'])))} "
                "(jobs ahead of it in the queue may take it first)."
                if facts.get("free_at") is not None
                else ""
            )
            return (
                f"Queue {job.queue!r} is using its quota of {flavors} and cannot borrow more from its cohort "
                f"right now; it starts when the team's running jobs finish or quota frees up.{then}"
            )
        case PendingReason.CAPACITY:
            return f"Quota allows it, but no free {flavors} nodes can take {shape} right now.{_until(facts)}"
        case PendingReason.RESERVED:
            overdue = (
                f" It has waited longer than its tier's bound of {_hours(float(str(facts['overdue'])))}, so it goes "
                "ahead of the tier's other jobs."
                if facts.get("overdue")
                else ""
            )
            return (
                f"Capacity on {facts.get('where', flavors)} is reserved for it from about "
                f"{when(float(str(facts['start'])))}, when running jobs reach their time limits.{overdue}"
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
            return _member_words(job, facts)
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
            into = (
                f"capacity team {facts['booked_by']} reserved ahead ({facts.get('booking')})"
                if facts.get("booked_by")
                else "maintenance"
            )
            return (
                f"It would run into {into} on {facts.get('cluster')} at {when(float(str(facts.get('start'))))} "
                f"within its time limit, and it is not preemptible; a shorter time limit could let it start now.{then}"
            )
        case PendingReason.DEPENDENCY:
            return dependency_words(cast("Sequence[str]", facts.get("waits_for") or ()), bool(facts.get("held")))
        case PendingReason.ARRAY_LIMIT:
            return array_limit_words(str(facts.get("array")), int(str(facts.get("limit", 0))))
    raise AssertionError(reason)  # pragma: no cover - every reason is handled above


def dependency_words(waits_for: Sequence[str], held: bool = False) -> str:
    """``["#12 train to succeed", ...]`` as a sentence; ``held``: one of them can no longer be met."""
    what = "; ".join(waits_for) or "the jobs it depends on"
    if held:
        return f"Held: {what}. Requeue it, or cancel this job."
    return f"Waits for {what}."


def array_limit_words(array: str, limit: int) -> str:
    each = "task" if limit == 1 else "tasks"
    return f"Waits for its turn: array {array} runs at most {limit} {each} at once."


#: Reasons whose words name a TPU job's slice shape rather than accelerators on nodes.
SHAPED = frozenset(
    {
        PendingReason.NEVER_FITS,
        PendingReason.CAPACITY,
        PendingReason.TOPOLOGY,
        PendingReason.RESERVED,
        PendingReason.BACKFILL_BLOCKED,
    }
)


def _slice_words(reason: PendingReason, job: Job, facts: Mapping[str, object]) -> str:
    """A TPU job's reason, about the slices it asked for: slices come whole, one per worker."""
    one = slice_words(job.shape)
    if reason is PendingReason.RESERVED:
        where = f" in {facts['cluster']}" if facts.get("cluster") else ""
        held = f"{shape_words(job)}{where} {'are' if job.workers > 1 else 'is'}"
        return (
            f"{held[0].upper()}{held[1:]} reserved for it from about {when(float(str(facts['start'])))}, when "
            "running jobs reach their time limits."
        )
    if reason is PendingReason.BACKFILL_BLOCKED:
        return (
            f"The free {one[2:]} is held for a higher-priority job that starts soon, and this job would still be "
            "running then; a shorter time limit could let it start now."
        )
    if reason is PendingReason.CAPACITY:
        return f"Quota allows it, but no {one[2:]} is free for it right now ({job.workers} needed).{_until(facts)}"
    return (
        f"No {one[2:]} exists in the clusters and regions the job allows"
        + (f", and it needs {job.workers}" if job.workers > 1 else "")
        + "; ask for a slice type and shape that is offered (the form lists them)."
        if reason is PendingReason.NEVER_FITS
        else f"No single {job.topology.level if job.topology else '?'} holds {shape_words(job)}, even with the "
        "whole fleet idle; use fewer slices."
    )


def _until(facts: Mapping[str, object]) -> str:
    """When capacity frees up for a job waiting for it, or why nobody can say."""
    if facts.get("free_at") is not None:
        return f" The running jobs' time limits say room frees up by about {when(float(str(facts['free_at'])))}."
    if facts.get("unbounded"):
        return (
            " When the jobs placed here reach their time limits they still leave too little: the rest is in use by "
            "work started outside Quartermaster, whose end is not known."
        )
    return ""


def _member_words(job: Job, facts: Mapping[str, object]) -> str:
    unit = units(job)
    used, limit, needed = facts.get("used"), facts.get("limit"), facts.get("needed")
    if facts.get("never"):
        return (
            f"It needs {needed} {unit} at once, more than the {limit} its team lead allows each member: it can "
            "never start as things stand. Ask for fewer, or ask your team lead to raise your limit."
        )
    start = facts.get("start")
    then = (
        f"from about {when(float(str(start)))}, when enough of them reach their time limits"
        if start is not None
        else "when enough of them have finished"
    )
    return (
        f"Its submitter's running jobs hold {used} {unit} and the team lead allows each member {limit} at once; "
        f"it needs {needed}. It can start {then}."
    )


def _budget_words(shape: str, facts: Mapping[str, object]) -> str:
    hours = f"{float(str(facts.get('hours', 0))):.3g}"
    label, left = facts.get("label", "A hard budget"), float(str(facts.get("left", 0)))
    if facts.get("never"):
        what = "money" if facts.get("measure") == "money" else "accelerator-hours"
        return (
            f"Budget {label} allows no {what} a month, and {shape} needs some: it can never start as things stand. "
            "Ask your team lead to raise the budget."
        )
    start = facts.get("start")
    then = (
        f"It can start from about {when(float(str(start)))}, when what it may use before the month ends fits what "
        "is left (or as soon as the budget is raised)."
        if start is not None
        else "It starts when the budget is raised, or when the next month begins."
    )
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
