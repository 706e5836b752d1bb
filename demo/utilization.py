"""The demo fleet's GPU readings: what a node probe on each simulated node would report, so that a fresh
demo's job pages plot utilization and its statements show allocated-but-idle cost.

Each job has a character, drawn from its id: most keep their GPUs busy, some far less (an evaluation
waiting on its data loader, a notebook left open); per minute and per GPU the reading wobbles around it. A
GPU no job holds reads 0 %. Power, clocks, memory and the idle throttle reason follow the utilization as
they do on an H100 (``tests/clusters/data/probe-h100-activity.json``: 72 W and 345 MHz idle, 683 W and
1980 MHz flat out).

Running jobs are read every ``--interval`` seconds by ``manage.py demo_probe`` (a child of ``manage.py
demo``), through ``clusters.actions.probe.record``: the path a real probe's report takes once it is accepted. The
last hours of the seeded history get their samples written directly, minute by minute.
"""

from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping

from django.db.models import Q

from clusters.actions import probe
from clusters.models import GpuSample, Node
from scheduler.models import Assignment, Attempt
from tenancy.models import Organization

#: Mean utilization (fraction) by a job's character: busy trainers, a middling one, and two wasteful ones.
CHARACTERS = (0.94, 0.88, 0.71, 0.42, 0.09)
IDLE_W, MAX_W, LIMIT_W = 72.0, 683.0, 700.0
IDLE_MHZ, MAX_MHZ, MEMORY_MHZ = 345, 1980, 2619
MEMORY_TOTAL = 80 * 2**30


def level(job_id: int, gpu: int, at: dt.datetime) -> float:
    """A job's utilization (0-100) on one GPU at one minute: its character, with a slow wave and a wobble."""
    base = CHARACTERS[job_id % len(CHARACTERS)]
    minute = int(at.timestamp() // 60)
    wave = 0.06 * math.sin((minute + 7 * job_id) / 9.0)
    wobble = 0.04 * math.sin(minute * 1.7 + gpu * 2.3 + job_id)
    return round(100 * min(1.0, max(0.0, base + wave + wobble)), 1)


def readings(gpus: int, held: Mapping[int, int], at: dt.datetime) -> tuple[probe.GpuReading, ...]:
    """One report's GPU readings for a node of ``gpus`` GPUs, ``held`` mapping a GPU index to its job."""
    out = []
    for gpu in range(gpus):
        job = held.get(gpu)
        u = level(job, gpu, at) if job is not None else 0.0
        out.append(
            probe.GpuReading(
                index=gpu,
                temperature_c=int(34 + 0.3 * u),
                activity=probe.Activity(
                    utilization=u,
                    memory_utilization=round(0.35 * u, 1),
                    memory_used=int(MEMORY_TOTAL * (0.006 + (0.7 if job is not None else 0.0))),
                    memory_total=MEMORY_TOTAL,
                    power_w=round(IDLE_W + (MAX_W - IDLE_W) * u / 100, 1),
                    power_limit_w=LIMIT_W,
                    sm_clock_mhz=MAX_MHZ if u > 5 else IDLE_MHZ,
                    memory_clock_mhz=MEMORY_MHZ,
                    throttle_reasons=0x1 if u <= 5 else 0,
                ),
            )
        )
    return tuple(out)


def _held(assignments: Iterable[tuple[int, int, list[list[int]]]]) -> dict[int, dict[int, int]]:
    """Per node, GPU index -> job, from (node, job, accelerators) rows."""
    held: dict[int, dict[int, int]] = defaultdict(dict)
    for node, job, slots in assignments:
        for index, _ in slots:
            held[node][int(index)] = job
    return held


def quiet(gpus: int) -> tuple[probe.GpuReading, ...]:
    """An idle node's report: every GPU there, cool, with no activity readings (so no samples are kept for
    GPUs no job holds, and the samples table grows with the work, not with the fleet)."""
    return tuple(probe.GpuReading(index=gpu, temperature_c=34) for gpu in range(gpus))


def probe_running(org: Organization, now: dt.datetime) -> int:
    """Report every node of the organization's simulated clusters that runs a job, as its probe would, and
    every node whose probe reported before: a real probe goes on reporting when its node falls idle, and a
    node whose probe goes quiet is failed by the health round ("no probe report"). Returns how many nodes
    ran a job."""
    rows = Assignment.objects.filter(
        attempt__outcome=Attempt.Outcome.ACTIVE,
        attempt__started_at__isnull=False,
        node__cluster__organization=org,
        node__cluster__kind="simulated",
    ).values_list("node_id", "attempt__job_id", "accelerators")
    held = _held(rows)
    simulated = Node.objects.filter(cluster__organization=org, cluster__kind="simulated", present=True)
    for node in simulated.filter(Q(pk__in=held) | Q(probe_reported_at__isnull=False)):
        gpus = readings(node.accelerators, held[node.pk], now) if node.pk in held else quiet(node.accelerators)
        probe.record(node, probe.Report(node.name, now, gpus, "", node.accelerators))
    return len(held)


def seed_history_samples(org: Organization, since: dt.datetime, until: dt.datetime) -> int:
    """Minute samples for the simulated nodes held by the organization's attempts in [since, until), as
    their probes would have sent them; idempotent (a minute already sampled is left as it is)."""
    since = since.replace(second=0, microsecond=0)
    rows = (
        Assignment.objects.filter(
            node__cluster__organization=org,
            node__cluster__kind="simulated",
            attempt__started_at__lt=until,
        )
        .filter(Q(attempt__ended_at=None) | Q(attempt__ended_at__gt=since))
        .values_list("node_id", "attempt__job_id", "accelerators", "attempt__started_at", "attempt__ended_at")
    )
    spans: dict[int, list[tuple[dt.datetime, dt.datetime, int, list[list[int]]]]] = defaultdict(list)
    for node, job, slots, started, ended in rows:
        if started is not None:
            spans[node].append((started, ended or until, job, slots))
    gpus = dict(Node.objects.filter(pk__in=spans).values_list("pk", "accelerators"))
    samples = []
    minute = since
    while minute < until:
        for node, held_spans in spans.items():
            held = _held((node, job, slots) for start, end, job, slots in held_spans if start <= minute < end)
            if not held:
                continue
            for reading in readings(gpus[node], held[node], minute):
                a = reading.activity
                samples.append(
                    GpuSample(
                        node_id=node,
                        gpu=reading.index,
                        at=minute,
                        utilization=a.utilization,
                        memory_utilization=a.memory_utilization,
                        memory_used=a.memory_used,
                        memory_total=a.memory_total,
                        power_w=a.power_w,
                        power_limit_w=a.power_limit_w,
                        sm_clock_mhz=a.sm_clock_mhz,
                        memory_clock_mhz=a.memory_clock_mhz,
                        throttle_reasons=a.throttle_reasons,
                    )
                )
        minute += dt.timedelta(minutes=1)
    GpuSample.objects.bulk_create(samples, batch_size=5000, ignore_conflicts=True)
    return len(samples)
