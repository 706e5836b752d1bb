"""What a waiting job must pass before the engine sees it: the jobs and arrays it depends on (docs/jobs.md
§Pipelines). Arrays' limits on tasks placed at once are the snapshot's (``snapshot._pending``).

Each cycle, ``settle`` reads every dependency of the organization's waiting jobs in one query (with the
state of what each waits for), and the state counts of the arrays they wait for in one more. A dependency
is met, still possible, or broken (``after_ok`` on a job that failed). A job with a broken dependency is
cancelled, or held when it asked to be (``Job.on_dependency_failure``); a cancellation breaks in turn what
depends on it, so the whole chain below is settled in the same cycle. What is left unmet is returned, with
words for its pending reason, and the snapshot leaves those jobs out of the engine's view.

A held job keeps waiting: should what it waits for be requeued (an admin's requeue, or an array's failed
tasks requeued), the dependency becomes possible again and the hold lifts by itself.
"""

from __future__ import annotations

import enum
from collections import Counter, defaultdict
from datetime import datetime
from typing import NamedTuple

from django.db.models import Count, Q

from scheduler.actions import lifecycle
from scheduler.engine.explain import array_limit_words, dependency_words
from scheduler.engine.model import PendingReason
from scheduler.models import Dependency, DependencyFailure, Job, JobArray
from scheduler.placement.snapshot import Index
from scheduler.states import FINAL, WAITING
from tenancy.models import Organization

S = Job.State
K = Dependency.Kind
BAD = frozenset({S.FAILED, S.CANCELLED})


class Verdict(enum.Enum):
    MET = "met"
    WAITING = "waiting"
    BROKEN = "broken"


class Dep(NamedTuple):
    kind: str
    on_job: int | None
    on_job_name: str
    on_array: int | None


def job_verdict(kind: str, state: str, label: str) -> tuple[Verdict, str]:
    """Whether a dependency of ``kind`` on a job in ``state`` (``label``: "#12 train") is met, with words."""
    if kind == K.AFTER_ANY:
        return (Verdict.MET, "") if state in FINAL else (Verdict.WAITING, f"{label} to end")
    ended = "was cancelled" if state == S.CANCELLED else state
    if kind == K.AFTER_OK:
        if state == S.SUCCEEDED:
            return Verdict.MET, ""
        return (Verdict.BROKEN, f"{label} {ended}") if state in BAD else (Verdict.WAITING, f"{label} to succeed")
    if state in BAD:
        return Verdict.MET, ""
    return (Verdict.BROKEN, f"{label} succeeded") if state == S.SUCCEEDED else (Verdict.WAITING, f"{label} to fail")


def array_verdict(kind: str, counts: Counter[str], label: str) -> tuple[Verdict, str]:
    """The same for a dependency on a whole array whose tasks are counted by state."""
    total = sum(counts.values())
    done = sum(n for state, n in counts.items() if state in FINAL)
    bad = sum(counts[s] for s in BAD)
    ok = counts[S.SUCCEEDED]
    progress = f"({done} of {total} done)"
    if kind == K.AFTER_ANY:
        return (Verdict.MET, "") if done == total else (Verdict.WAITING, f"{label} to end {progress}")
    if kind == K.AFTER_OK:
        if bad:
            return Verdict.BROKEN, f"{label} has {bad} failed or cancelled task{'s' if bad > 1 else ''}"
        return (Verdict.MET, "") if ok == total else (Verdict.WAITING, f"{label} to succeed {progress}")
    if ok == total:
        return Verdict.BROKEN, f"{label} succeeded in full"
    if done == total:
        return Verdict.MET, ""
    return Verdict.WAITING, f"{label} to end with a failed task {progress}"


def settle(organization: Organization, now: datetime) -> dict[int, str]:  # noqa: C901 - one pass, read once
    """Cancel the waiting jobs whose dependencies are broken (down the chain), and return the waiting jobs
    whose dependencies are not all met, with their pending messages."""
    rows = list(
        Dependency.objects.filter(job__team__organization=organization, job__state__in=WAITING).values_list(
            "job_id",
            "job__state",
            "job__array_id",
            "job__on_dependency_failure",
            "kind",
            "on_job_id",
            "on_job__state",
            "on_job__name",
            "on_array_id",
        )
    )
    if not rows:
        return {}
    states: dict[int, str] = {}
    array_of: dict[int, int | None] = {}
    policy: dict[int, str] = {}
    deps: dict[int, list[Dep]] = defaultdict(list)
    for job_id, job_state, array_id, on_failure, kind, on_job, on_job_state, on_job_name, on_array in rows:
        states[job_id], array_of[job_id], policy[job_id] = job_state, array_id, on_failure
        if on_job is not None:
            states.setdefault(on_job, on_job_state)
        deps[job_id].append(Dep(kind, on_job, on_job_name or "", on_array))
    array_ids = {d.on_array for ds in deps.values() for d in ds if d.on_array is not None}
    counts: dict[int, Counter[str]] = defaultdict(Counter)
    names: dict[int, str] = {}
    if array_ids:
        for array_id, state, n in (
            Job.objects.filter(array_id__in=array_ids).values_list("array_id", "state").annotate(n=Count("pk"))
        ):
            counts[array_id][state] += n
        names = dict(JobArray.objects.filter(pk__in=array_ids).values_list("pk", "name"))

    cancelled: dict[int, str] = {}
    blocked: dict[int, str] = {}
    changed = True
    while changed:  # each pass settles one more link of a chain of cancellations
        changed, blocked = False, {}
        for job_id, its in deps.items():
            if job_id in cancelled:
                continue
            waits, broken = [], []
            for dep in its:
                if dep.on_array is not None:
                    label = f"array #{dep.on_array} {names.get(dep.on_array, '')}".rstrip()
                    verdict, words = array_verdict(dep.kind, counts[dep.on_array], label)
                else:
                    assert dep.on_job is not None
                    verdict, words = job_verdict(dep.kind, states[dep.on_job], f"#{dep.on_job} {dep.on_job_name}")
                if verdict is Verdict.BROKEN:
                    broken.append(words)
                elif verdict is Verdict.WAITING:
                    waits.append(words)
            if broken and policy[job_id] == DependencyFailure.CANCEL:
                cancelled[job_id] = f"Cancelled because {'; '.join(broken)}, so what it waited for cannot happen."
                old, states[job_id] = states[job_id], S.CANCELLED
                if (array := array_of[job_id]) is not None and array in counts:
                    counts[array][old] -= 1
                    counts[array][S.CANCELLED] += 1
                changed = True
            elif broken:
                blocked[job_id] = dependency_words(broken, held=True)
            elif waits:
                blocked[job_id] = dependency_words(waits)
    for job_id, message in cancelled.items():
        job = Job.objects.filter(pk=job_id, state__in=WAITING).first()
        if job is not None:
            lifecycle.move(job, S.CANCELLED, "dependency_failed", message, at=now, finished_at=now, message=message)
    return blocked


def write_array_limits(index: Index, now: datetime) -> int:
    """Tell the waiting tasks of arrays at their limit that the snapshot did not even read why they wait:
    one statement per such array, touching only the tasks not told yet. Returns how many rows changed."""
    changed = 0
    for array_id, (limit, read) in index.full_arrays.items():
        changed += (
            Job.objects.filter(array_id=array_id, state__in=WAITING)
            .filter(Q(not_before=None) | Q(not_before__lte=now))
            .exclude(pk__in=read)
            .exclude(pending_reason=PendingReason.ARRAY_LIMIT)
            .update(
                pending_reason=PendingReason.ARRAY_LIMIT,
                pending_message=array_limit_words(f"#{array_id}", limit),
                queue_position=None,
                estimated_start=None,
            )
        )
    return changed
