"""The watch round (``scheduler.tasks.watch_jobs``, every minute): every running job's recent progress through
the detectors (``detector.py``), and what its tier says follows a flag (``PriorityTier.on_straggler``,
``on_hang``).

Per running job, from its current attempt's progress reports of the last ``HISTORY``:
- a worker's speed is 1 / its reported seconds per step, else the steps it made between two reports over the
  seconds between them; the job's progress is its highest step count at each report;
- a job that reports no progress is judged by its nodes' GPU utilization from the node probes (per minute):
  a node persistently less busy than its peers is a straggler, GPUs all idle past ``hang_floor`` a hang
  (``detector.idle_hang``; a hang whose GPUs spin at 100 % needs progress reports to be seen);
- a straggler (jobs of two workers or more) and a hang are each flagged once per attempt (and worker): an event
  on the job's timeline (``straggler``, ``hung``) with the evidence (the ratio to the peers, the robust
  z-score, the windows; the last progress, the usual step time), and the action taken;
- ``notify`` e-mails the job's owner; ``restart`` restarts the job from its last checkpoint: a straggler's node is
  drained (``clusters.actions.drain_node``, by the system: its jobs get their tier's grace to checkpoint, are
  requeued without spending a retry, and the engine places them elsewhere while the node is out), a hung job is
  stopped and requeued as an admin's preemption would (``scheduler.actions.stop_and_requeue``); ``both`` does
  both.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from clusters import actions as cluster_actions
from common import metrics
from governance.models import WatchAction
from scheduler import actions, utilization
from scheduler.actions import lifecycle
from scheduler.models import Assignment, Attempt, Job, JobEvent, Progress
from scheduler.placement import dispatch
from scheduler.states import JobState
from scheduler.watch import detector
from scheduler.watch.detector import Config, Sample
from tenancy.models import Organization

log = logging.getLogger(__name__)

#: How much of a job's recent progress the detectors read.
HISTORY = timedelta(hours=2)
CONFIG = Config()
STRAGGLER, HUNG = "straggler", "hung"


@dataclass
class WatchReport:
    jobs: int = 0
    stragglers: int = 0
    hangs: int = 0
    restarted: list[int] = field(default_factory=list)
    told: list[int] = field(default_factory=list)


def watch_round(organization: Organization, now: datetime | None = None) -> WatchReport:
    now = now or timezone.now()
    report = WatchReport()
    running = {
        j.pk: j
        for j in Job.objects.filter(team__organization=organization, state=JobState.RUNNING).select_related(
            "tier", "submitted_by"
        )
    }
    if not running:
        return report
    rows: defaultdict[int, list[Progress]] = defaultdict(list)
    for row in Progress.objects.filter(job_id__in=running, reported_at__gte=now - HISTORY).order_by("reported_at"):
        if row.attempt == running[row.job_id].attempt:
            rows[row.job_id].append(row)
    measured = _utilization({pk: job for pk, job in running.items() if pk not in rows}, now)
    seen = {
        (e.job_id, e.attempt, e.reason, str(e.detail.get("worker", "")))
        for e in JobEvent.objects.filter(job_id__in=[*rows, *measured], reason__in=(STRAGGLER, HUNG))
    }
    t = now.timestamp()
    for job_id in [*rows, *measured]:
        job = running[job_id]
        report.jobs += 1
        if job_id in rows:
            samples, steps = series(rows[job_id])
            hang = detector.hang(steps, t, CONFIG)
        else:  # no progress reports: the GPUs' utilization, per node, is the signal
            samples = measured[job_id]
            hang = detector.idle_hang(samples, t, CONFIG)
        if job.workers >= 2:
            for flag in detector.stragglers(samples, t, CONFIG):
                if (job.pk, job.attempt, STRAGGLER, flag.worker) not in seen:
                    report.stragglers += 1
                    _straggler(job, flag, report, now, by_progress=job_id in rows)
        if hang is not None and (job.pk, job.attempt, HUNG, "") not in seen:
            report.hangs += 1
            _hung(job, hang, report, now)
            signal = "progress" if job_id in rows else "utilization"
            metrics.WATCH_FLAGS.labels(kind=HUNG, signal=signal, action=job.tier.on_hang).inc()
    return report


def _utilization(jobs: dict[int, Job], now: datetime) -> dict[int, list[Sample]]:
    """Per job that reported no progress, its nodes' mean GPU utilization (%) per minute of ``HISTORY``, from
    the node probes (``scheduler/utilization.py``); the worker of each sample is the node's name."""
    holds = list(
        Assignment.objects.filter(attempt__job_id__in=jobs, attempt__outcome=Attempt.Outcome.ACTIVE)
        .filter(attempt__number=F("attempt__job__attempt"))
        .values_list("attempt__job_id", "node_id", "node__name", "node__accelerators")
    )
    if not holds:
        return {}
    buckets = utilization.node_buckets({h[1] for h in holds}, now - HISTORY, now, 60, per_gpu=False)
    found: defaultdict[int, list[Sample]] = defaultdict(list)
    for job_id, node_id, name, gpus in holds:
        for (node, start), bucket in buckets.items():
            if node == node_id and bucket.minutes and gpus:
                busy = 100 * bucket.busy_gpu_minutes / bucket.minutes / gpus
                found[job_id].append(Sample(start.timestamp() + 60, name, busy))
    return dict(found)


def series(progress: list[Progress]) -> tuple[list[Sample], list[tuple[float, int]]]:
    """(each worker's speed over time, the job's step count over time) from its progress reports."""
    samples: list[Sample] = []
    steps: list[tuple[float, int]] = []
    last: dict[int, Progress] = {}
    highest = -1
    for row in progress:
        t = row.reported_at.timestamp()
        if row.step_seconds:
            samples.append(Sample(t, str(row.worker), 1.0 / row.step_seconds))
        elif row.worker in last and t > last[row.worker].reported_at.timestamp():
            before = last[row.worker]
            samples.append(Sample(t, str(row.worker), (row.step - before.step) / (t - before.reported_at.timestamp())))
        last[row.worker] = row
        highest = max(highest, row.step)
        steps.append((t, highest))
    return samples, steps


def _node_of(job: Job, worker: int) -> str:
    """The node of worker ``worker``, in the order the backends were given the job's nodes (``dispatch``)."""
    held = Assignment.objects.filter(attempt__job=job, attempt__number=job.attempt).select_related("node")
    nodes = dispatch.worker_nodes(list(held.order_by("pk")))
    return nodes[worker] if 0 <= worker < len(nodes) else ""


def _straggler(job: Job, flag: detector.Straggler, report: WatchReport, now: datetime, *, by_progress: bool) -> None:
    if by_progress:
        node = _node_of(job, int(flag.worker))
        where = f"worker {flag.worker}" + (f" on {node}" if node else "")
        slower = f"{(1 - flag.ratio) * 100:.0f} % slower than its peers' median"
    else:
        node = flag.worker
        where = f"node {node}"
        slower = f"its GPUs {(1 - flag.ratio) * 100:.0f} % less busy than its peers' median"
    z = "" if flag.z == float("inf") else f", robust z-score {flag.z:.1f}"
    evidence = f"{where} is a straggler: {slower}{z}, {flag.windows} windows of {CONFIG.window:.0f} s in a row."
    action = job.tier.on_straggler
    done = []
    if action in (WatchAction.RESTART, WatchAction.BOTH) and node:
        done.append(_drain(job, node, evidence))
    if action in (WatchAction.NOTIFY, WatchAction.BOTH):
        done.append(_tell(job, f"Job #{job.pk}: a straggler", evidence))
    signal = "progress" if by_progress else "utilization"
    metrics.WATCH_FLAGS.labels(kind=STRAGGLER, signal=signal, action=action).inc()
    detail = {"worker": flag.worker, "node": node, "ratio": round(flag.ratio, 3), "windows": flag.windows}
    detail |= {"since": flag.since, "action": action}
    lifecycle.note(job, STRAGGLER, " ".join([evidence, *filter(None, done)]), detail=detail, at=now)
    (report.restarted if action != WatchAction.NOTIFY else report.told).append(job.pk)


def _hung(job: Job, hang: detector.Hang, report: WatchReport, now: datetime) -> None:
    quiet = (now.timestamp() - hang.last_progress) / 60
    pace = f"its usual step takes {hang.usual_step:.2f} s" if hang.usual_step else "its pace is not known"
    pause = f", its longest pause so far {hang.longest_pause / 60:.0f} min" if hang.longest_pause else ""
    evidence = f"Hung: no progress for {quiet:.0f} min; {pace}{pause}."
    action = job.tier.on_hang
    lifecycle.note(job, HUNG, evidence, detail={"last_progress": hang.last_progress, "action": action}, at=now)
    if action in (WatchAction.NOTIFY, WatchAction.BOTH):
        _tell(job, f"Job #{job.pk} is hung", evidence)
    if action in (WatchAction.RESTART, WatchAction.BOTH):
        actions.stop_and_requeue(job, "hung", f"{evidence} Restarted from its last checkpoint (its tier says so).")
    (report.restarted if action != WatchAction.NOTIFY else report.told).append(job.pk)


def _drain(job: Job, node: str, evidence: str) -> str:
    found = job.attempts.get(number=job.attempt).cluster.nodes.filter(name=node, present=True).first()
    if found is None:
        return ""
    try:
        with transaction.atomic():
            cluster_actions.drain_node(None, found, f"straggler in job #{job.pk}: {evidence}")
    except Exception as error:  # noqa: BLE001 - a node already draining, a cluster that refuses: say so, go on
        log.warning("could not drain %s for job %s: %s", node, job.pk, error)
        return f"Its node {node} could not be drained ({error}); the job goes on."
    return f"Its node {node} is drained: the job restarts from its last checkpoint without it."


def _tell(job: Job, subject: str, text: str) -> str:
    owner = job.submitted_by
    if owner is None or not owner.email:
        return "Its owner has no e-mail address to tell."
    body = f"{text}\n\n{settings.PUBLIC_URL.rstrip('/')}/jobs/{job.pk}/"
    transaction.on_commit(lambda: send_mail(subject, body, settings.DEFAULT_FROM_EMAIL, [owner.email]))
    return f"Its owner ({owner.get_username()}) was told by e-mail."
