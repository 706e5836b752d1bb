"""The control loop: every few seconds, for each service (docs/services.md §The control loop):

1. **Follow** its replicas' jobs: a replica whose job ended (failed, cancelled, lost for good) is gone; a
   running one's address is its attempt's ``serve_url``.
2. **Probe** each replica with an address: ``GET <url><health_path>`` through the outbound policy for replicas.
   A 2xx makes it ready; ``UNHEALTHY_AFTER`` failures in a row make a ready replica unhealthy (it is replaced),
   and a starting one whose program answers but not 2xx that often, or that is not ready within
   ``SERVE_STARTUP_SECONDS``, failed.
3. **Measure** what the data plane counted since the last tick (``load.take_load``) and write a sample.
4. **Scale**: ``autoscale.decide`` from the sample and the recommendations of the windows.
5. **Reconcile**: submit missing replicas (jobs of kind ``service``), stop surplus ones (not ready first, then
   the newest), replace unhealthy ones; or, while a new revision rolls out, bring up one new replica at a time
   and drain one old replica as each becomes ready; a new replica that fails rolls the revision back.

A tick is idempotent and takes one service at a time (a cache lock per service: two workers never tick the
same service at once; a crashed one's lock runs out). Every step reads the state it acts on afresh.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from datetime import datetime, timedelta

import requests
from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from common import metrics, outbound
from scheduler import actions as jobs
from scheduler import utilization
from scheduler.actions import replicas as replica_jobs
from scheduler.models import Attempt, Job
from scheduler.states import PLACED, WAITING
from serving import actions, autoscale, load
from serving.models import Replica, Revision, Service, ServiceSample

log = logging.getLogger(__name__)

#: Health checks failed in a row that make a replica unhealthy.
UNHEALTHY_AFTER = 3
PROBE_TIMEOUT = 2.0
LOCK_SECONDS = 60
#: The tick's period, assumed for the first sample's rate (the beat's schedule).
TICK_SECONDS = 5.0
LIVE = (Replica.State.STARTING, Replica.State.READY, Replica.State.UNHEALTHY)
R = Replica.State


def _setting(name: str, default: int) -> int:
    return int(getattr(settings, name, default))


def tick_all(now: datetime | None = None) -> int:
    """Tick every service that is active or still has replicas; returns how many were ticked."""
    ids = Service.objects.filter(
        Q(state=Service.State.ACTIVE) | Q(replicas__state__in=[*LIVE, R.DRAINING])
    ).values_list("pk", flat=True)
    done = 0
    with metrics.LoopRound("serving"):
        for service_id in sorted(set(ids)):
            done += tick_service(service_id, now)
    return done


def tick_service(service_id: int, now: datetime | None = None) -> bool:
    """One tick of one service; False when another process holds its lock (or it no longer exists)."""
    lock = f"serving:lock:{service_id}"
    if not cache.add(lock, 1, timeout=LOCK_SECONDS):
        return False
    try:
        service = Service.objects.select_related("team", "created_by", "revision").filter(pk=service_id).first()
        if service is None:
            return False
        now = now or timezone.now()
        replicas = follow(service)
        probe(service, replicas, now)
        sample = measure(service, replicas, now)
        reconcile(service, now, sample)
        return True
    finally:
        cache.delete(lock)


# --- 1. follow ------------------------------------------------------------------------------------------------


def follow(service: Service) -> list[Replica]:
    """The service's replicas that are not gone, each with its job's address (while it is still one of its node's
    on the port it was handed, as the inventory knows them now); those whose job ended are gone."""
    replicas = list(service.replicas.exclude(state=R.GONE).select_related("job", "revision"))
    running = {
        a.job_id: _checked(a)
        for a in Attempt.objects.filter(
            job__in=[r.job_id for r in replicas], outcome=Attempt.Outcome.ACTIVE
        ).select_related("cluster")
        if a.serve_url
    }
    kept = []
    for replica in replicas:
        job = replica.job
        if job.state not in WAITING | PLACED:
            Replica.objects.filter(pk=replica.pk).update(state=R.GONE)
            replica.state = R.GONE
            log.info("service %s: replica %s gone (job %s %s)", service.name, replica.pk, job.pk, job.state)
            continue
        url = running.get(job.pk, "") if job.state == Job.State.RUNNING else ""
        if url != replica.url:
            replica.url = url
            Replica.objects.filter(pk=replica.pk).update(url=url)
        kept.append(replica)
    return kept


def _checked(attempt: Attempt) -> str:
    """The attempt's reported address, or "" when it is no longer where the replica may be (its node's addresses
    changed since it reported)."""
    try:
        replica_jobs.check_address(attempt, attempt.serve_url)
    except ValidationError as refused:
        log.warning("job %s: its replica's address %s is not used: %s", attempt.job_id, attempt.serve_url, refused)
        return ""
    return attempt.serve_url


# --- 2. probe -------------------------------------------------------------------------------------------------


def probe(service: Service, replicas: Sequence[Replica], now: datetime) -> None:
    """Health-check every replica with an address; move it ready, unhealthy or failed (see the module)."""
    session = outbound.for_replicas().session()
    startup = timedelta(seconds=_setting("SERVE_STARTUP_SECONDS", 600))
    try:
        for replica in replicas:
            if replica.state not in LIVE:
                continue
            healthy, answered = _check(session, replica) if replica.url else (False, False)
            changes: dict[str, object] = {"last_probe_at": now} if replica.url else {}
            if healthy:
                changes.update(probe_failures=0, state=R.READY)
                if replica.ready_at is None:
                    changes["ready_at"] = now
            elif replica.state == R.STARTING:
                failures = replica.probe_failures + 1 if answered else replica.probe_failures
                changes["probe_failures"] = failures
                if failures >= UNHEALTHY_AFTER or now - replica.created_at > startup:
                    changes["state"] = R.UNHEALTHY
            elif replica.url:
                failures = replica.probe_failures + 1
                changes["probe_failures"] = failures
                if failures >= UNHEALTHY_AFTER:
                    changes["state"] = R.UNHEALTHY
            if changes:
                Replica.objects.filter(pk=replica.pk).update(**changes)
                for name, value in changes.items():
                    setattr(replica, name, value)
    finally:
        session.close()


def _check(session: requests.Session, replica: Replica) -> tuple[bool, bool]:
    """(healthy, answered): whether its health path answered 2xx, and whether it answered at all."""
    path = replica.revision.health_path or "/"
    try:
        response = session.get(replica.url.rstrip("/") + path, timeout=PROBE_TIMEOUT, allow_redirects=False)
    except (requests.RequestException, outbound.PolicyRefusal) as error:
        log.info("replica %s: health check failed: %s", replica.pk, outbound.explain(error) or error)
        return False, outbound.explain(error) is not None
    response.close()
    return 200 <= response.status_code < 300, True


# --- 3 and 4. measure and scale -------------------------------------------------------------------------------


def measure(service: Service, replicas: Sequence[Replica], now: datetime) -> ServiceSample:
    """Take the endpoint's counters, decide the desired count, and write both as this tick's sample."""
    measured = load.take_load(service.pk)
    last = service.samples.order_by("-at").first()
    seconds = (now - last.at).total_seconds() if last is not None and last.at < now else TICK_SECONDS
    rps = measured.requests / max(seconds, 0.001)
    ready = [r for r in replicas if r.state == R.READY]
    if measured.requests or measured.inflight or measured.demand:
        service.last_request_at = now
    total = {
        Service.Metric.RPS: rps,
        Service.Metric.INFLIGHT: float(measured.inflight),
        Service.Metric.GPU: gpu_total(ready, now),
    }[Service.Metric(service.metric)]
    idle = (now - service.last_request_at).total_seconds() if service.last_request_at else None
    if idle is None:  # never asked: idle since it was made
        idle = (now - service.created_at).total_seconds()
    current = service.desired_replicas if service.state == Service.State.ACTIVE else 0
    window = max(service.scale_up_window, service.scale_down_window)
    history = [
        (at.timestamp(), recommended)
        for at, recommended in service.samples.filter(at__gte=now - timedelta(seconds=window), at__lt=now).values_list(
            "at", "recommended"
        )
    ]
    scaling = autoscale.Scaling(
        min_replicas=service.min_replicas,
        max_replicas=service.max_replicas,
        target=service.target,
        scale_up_window=service.scale_up_window,
        scale_down_window=service.scale_down_window,
        scale_to_zero_after=service.scale_to_zero_after,
    )
    seen = autoscale.Observation(
        now=now.timestamp(), total=total, current=current, idle_for=idle, demand=measured.demand
    )
    decision = autoscale.decide(scaling, seen, history)
    desired = decision.desired if service.state == Service.State.ACTIVE else 0
    if desired != service.desired_replicas:
        log.info("service %s: %s -> %s replicas (%s)", service.name, service.desired_replicas, desired, decision.reason)
    service.desired_replicas = desired
    Service.objects.filter(pk=service.pk).update(desired_replicas=desired, last_request_at=service.last_request_at)
    return ServiceSample.objects.create(
        service=service,
        at=now,
        requests=measured.requests,
        rps=rps,
        inflight=measured.inflight,
        p50_ms=measured.p50_ms,
        p95_ms=measured.p95_ms,
        errors=measured.errors,
        replicas_ready=len(ready),
        replicas_desired=desired,
        recommended=decision.recommended,
    )


def gpu_total(ready: Sequence[Replica], now: datetime) -> float:
    """The ready replicas' GPU utilization over the last five minutes, in percent, summed over them (a replica
    with no reading counts 0)."""
    attempts = list(
        Attempt.objects.filter(job__in=[r.job_id for r in ready], outcome=Attempt.Outcome.ACTIVE).select_related("job")
    )
    if not attempts:
        return 0.0
    since = now - timedelta(minutes=5)
    shares = utilization.measure(utilization.holds_of_attempts(attempts, now), since, now, step=60, at=now)
    per_attempt: dict[int, list[float]] = {}
    for (attempt, _node, _start), (_share, node_u) in shares.items():
        if node_u is not None:
            per_attempt.setdefault(attempt, []).append(node_u)
    return sum(100 * sum(values) / len(values) for values in per_attempt.values())


# --- 5. reconcile ---------------------------------------------------------------------------------------------


def reconcile(service: Service, now: datetime, sample: ServiceSample | None = None) -> None:
    """Make the replicas match the desired count and the revision rolling out (see the module)."""
    current = service.revision
    if current is None:
        return
    rolling = service.revisions.filter(state=Revision.State.ROLLING_OUT).order_by("-number").first()
    replicas = list(service.replicas.filter(state__in=[*LIVE, R.DRAINING]).select_related("job", "revision"))
    _finish_draining(service, [r for r in replicas if r.state == R.DRAINING], now)
    live = [r for r in replicas if r.state in LIVE]
    # Replicas of revisions neither current nor rolling out (a superseded or failed rollout's): stopped.
    keep = {current.pk} | ({rolling.pk} if rolling else set())
    for replica in [r for r in live if r.revision_id not in keep]:
        _stop(service, replica, now, "its revision is no longer wanted")
    live = [r for r in live if r.revision_id in keep]
    want = service.desired_replicas if service.state == Service.State.ACTIVE else 0
    if rolling is not None and _rollout_failed(service, rolling, [r for r in live if r.revision_id == rolling.pk]):
        live = [r for r in live if r.revision_id != rolling.pk]
        rolling = None
    # Unhealthy replicas are replaced: stopped here, submitted again below.
    for replica in [r for r in live if r.state == R.UNHEALTHY]:
        _stop(service, replica, now, "it failed its health checks", drain=False)
    live = [r for r in live if r.state != R.UNHEALTHY]
    old = [r for r in live if r.revision_id == current.pk]
    if rolling is None:
        _converge(service, current, old, want, now)
        return
    new = [r for r in live if r.revision_id == rolling.pk]
    new_ready = [r for r in new if r.state == R.READY]
    if want == 0 or (not old and len(new_ready) >= want):
        _promote(service, current, rolling)
        _converge(service, rolling, new, want, now)
        return
    remaining = sorted(old, key=_stop_order)
    while remaining and len(remaining) + len(new_ready) > want:  # each new ready replica retires an old one
        _stop(service, remaining.pop(0), now, f"replaced by revision {rolling.number}")
    if not remaining and len(new_ready) >= want:
        _promote(service, current, rolling)
        return
    # Surge 1: one new replica starting at a time, and never more than one above the wanted count (draining
    # replicas included: they still hold their capacity).
    draining = service.replicas.filter(state=R.DRAINING).count()
    if len(new) == len(new_ready) and len(new_ready) < want and len(remaining) + len(new) + draining <= want:
        _submit(service, rolling, len(remaining) + len(new))


def _stop_order(replica: Replica) -> tuple[bool, float]:
    """Which replica to stop first: not ready ones, then the newest."""
    return (replica.state == R.READY, -replica.created_at.timestamp())


def _converge(service: Service, revision: Revision, live: list[Replica], want: int, now: datetime) -> None:
    if len(live) < want:
        for i in range(want - len(live)):
            if not _submit(service, revision, len(live) + i):
                break
        return
    for replica in sorted(live, key=_stop_order)[: len(live) - want]:
        _stop(service, replica, now, "fewer replicas are wanted")


def _submit(service: Service, revision: Revision, index: int) -> bool:
    """Submit one replica of ``revision``; False (the reason kept on the service) when the scheduler refuses."""
    number = service.replicas.count() + 1
    try:
        with transaction.atomic():
            job = actions.submit_replica(service, revision, f"{service.name}-r{revision.number}-{number}")
            Replica.objects.create(service=service, revision=revision, job=job, created_at=job.submitted_at)
    except ValidationError as error:
        words = "; ".join(f"{k}: {' '.join(v)}" for k, v in error.message_dict.items())
        Service.objects.filter(pk=service.pk).update(message=f"Could not start a replica: {words}")
        log.warning("service %s: replica refused: %s", service.name, words)
        return False
    metrics.SERVING_ACTIONS.labels("started").inc()
    if service.message:
        Service.objects.filter(pk=service.pk).update(message="")
        service.message = ""
    return True


def _stop(service: Service, replica: Replica, now: datetime, why: str, *, drain: bool = True) -> None:
    """Stop a replica: a ready one drains first (the endpoint sends it nothing new), others stop at once."""
    if drain and replica.state == R.READY:
        Replica.objects.filter(pk=replica.pk).update(state=R.DRAINING, drain_started_at=now)
        replica.state = R.DRAINING
        metrics.SERVING_ACTIONS.labels("drained").inc()
        log.info("service %s: draining replica %s: %s", service.name, replica.pk, why)
        return
    _cancel(service, replica, why)


def _finish_draining(service: Service, draining: Sequence[Replica], now: datetime) -> None:
    grace = timedelta(seconds=_setting("SERVE_DRAIN_SECONDS", 30))
    busy = load.replicas_busy([r.pk for r in draining])
    for replica in draining:
        if replica.pk not in busy or (replica.drain_started_at and now - replica.drain_started_at >= grace):
            _cancel(service, replica, "drained")


def _cancel(service: Service, replica: Replica, why: str) -> None:
    Replica.objects.filter(pk=replica.pk).update(state=R.GONE)
    replica.state = R.GONE
    job = Job.objects.get(pk=replica.job_id)
    if job.state in WAITING | PLACED:
        with contextlib.suppress(ValidationError):  # it ended meanwhile
            jobs.cancel_job(service.created_by, job, f"Replica of service {service.name} stopped: {why}.")
    metrics.SERVING_ACTIONS.labels("stopped").inc()
    log.info("service %s: stopped replica %s: %s", service.name, replica.pk, why)


def _rollout_failed(service: Service, rolling: Revision, new: Sequence[Replica]) -> bool:
    """Roll ``rolling`` back when one of its replicas failed (unhealthy, or its job ended): its replicas are
    stopped, it is marked failed with the reason, and the current revision stays."""
    bad = [r for r in new if r.state == R.UNHEALTHY]
    ended = service.replicas.filter(revision=rolling, state=R.GONE).exclude(job__state__in=[Job.State.CANCELLED])
    if not bad and not ended.exists():
        return False
    if bad:
        reason = (
            f"Rolled back: replica {bad[0].pk} of revision {rolling.number} failed its health check "
            f"({rolling.health_path}) {bad[0].probe_failures} times or was not ready in time."
        )
    else:
        job = ended.select_related("job").first().job  # type: ignore[union-attr]
        reason = f"Rolled back: the job of a replica of revision {rolling.number} ended {job.state}: {job.message}"
    with transaction.atomic():
        Revision.objects.filter(pk=rolling.pk).update(state=Revision.State.FAILED, reason=reason)
        Service.objects.filter(pk=service.pk).update(message=reason)
    for replica in new:
        _cancel(service, replica, "its revision was rolled back")
    metrics.SERVING_ACTIONS.labels("rolled_back").inc()
    log.warning("service %s: %s", service.name, reason)
    return True


def _promote(service: Service, current: Revision, rolling: Revision) -> None:
    with transaction.atomic():
        Revision.objects.filter(pk=current.pk).update(state=Revision.State.SUPERSEDED)
        Revision.objects.filter(pk=rolling.pk).update(state=Revision.State.ACTIVE, reason="")
        Service.objects.filter(pk=service.pk).update(revision=rolling)
    service.revision = rolling
    metrics.SERVING_ACTIONS.labels("promoted").inc()
    log.info("service %s: revision %s rolled out", service.name, rolling.number)


def prune_samples(now: datetime | None = None) -> int:
    days = _setting("SERVICE_SAMPLE_DAYS", 14)
    cutoff = (now or timezone.now()) - timedelta(days=days)
    deleted, _ = ServiceSample.objects.filter(at__lt=cutoff).delete()
    return deleted
