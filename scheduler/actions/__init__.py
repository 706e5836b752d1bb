"""What people do to jobs: submit, cancel, clone; admins requeue. One transaction each, authorized,
validated (a ``ValidationError`` naming the field, nothing written), audited where it is privileged.

``submit_job`` is the one path for the web form, the API and the ``qm`` CLI alike. A request that can
never fit anywhere (more accelerators than any node or domain has, a type nobody offers, a topology no
domain has, more than the queue could ever get) is refused at once with the engine's own reason, found by
placing it on the idle fleet (``feasibility.check``).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from clusters.models import AcceleratorType, Cluster
from clusters.secrets import CredentialsError
from common import enqueue
from common.validation import check_max_length, message_of
from governance.models import PriorityTier, Queue
from scheduler import submission
from scheduler.actions import checkpoints, lifecycle
from scheduler.models import Attempt, Job
from scheduler.placement import feasibility
from scheduler.states import PLACED, WAITING
from scheduler.submission import JobRequest
from tenancy import policy
from tenancy.actions import audit
from tenancy.models import Project, Team

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django.http import HttpRequest

log = logging.getLogger(__name__)
#: The longest reason for a cancellation or an intervention.
MAX_REASON = 2000
S = Job.State


def teams_for_submission(actor: User) -> list[Team]:
    """Teams ``actor`` may submit jobs to: their own (researcher, lead), all of an organization they admin."""
    teams = policy.permitted(actor, "job.submit", Team.objects.select_related("organization"))
    return list(teams.distinct().order_by("name"))


def _open_to(team: Team) -> Q:
    """Tiers of the team's organization that name no teams (open to all) or name this one."""
    return Q(organization_id=team.organization_id) & (Q(teams=None) | Q(teams=team))


def may_use(team: Team, tier: PriorityTier) -> bool:
    """Whether ``team`` may submit under ``tier``."""
    return PriorityTier.objects.filter(_open_to(team), pk=tier.pk).exists()


def tiers_for(team: Team) -> list[PriorityTier]:
    """Priority tiers ``team`` may use, the highest first."""
    return list(PriorityTier.objects.filter(_open_to(team)).distinct().order_by("-value"))


def queue_for(team: Team, project: Project | None) -> Queue:
    """A project's own queue if it has one, else the team's queue (every team has one: ``governance.signals``)."""
    found = Queue.objects.filter(Q(project=None) | Q(project=project), team=team)
    queues: dict[int | None, Queue] = {q.project_id: q for q in found}
    queue = queues.get(project.pk if project is not None else None) or queues.get(None)
    if queue is None:
        raise ValidationError({"team": f"Team {team} has no queue; ask an admin of {team.organization} to add one."})
    return queue


def validate(actor: User, request: JobRequest) -> tuple[Queue, PriorityTier]:
    """Check everything about ``request``; raise ``ValidationError`` naming every bad field at once. What
    needs neither the database nor the actor is ``submission.shape_errors``'s; the rest is here."""
    team = request.team
    policy.require(actor, "job.submit", team)
    tier, errors = _tier(request)
    errors.update(_project_errors(request))
    errors.update(_type_errors(request))
    errors.update(_fleet_errors(request))
    errors.update(submission.shape_errors(request))
    errors.update(_secret_errors(actor, request))
    if errors:
        raise ValidationError(errors)
    assert tier is not None
    queue = queue_for(team, request.project)
    refusal = feasibility.check(team.organization, queue, tier, request, actor.pk)
    if refusal is not None:
        raise ValidationError({refusal.field: refusal.message})
    return queue, tier


def _tier(request: JobRequest) -> tuple[PriorityTier | None, dict[str, str]]:
    """The tier asked for (or the organization's default), and what is wrong with it."""
    team = request.team
    tier = request.tier
    if tier is None and request.kind == Job.Kind.SESSION:  # a session: the lowest tier the team may use
        tier = next(iter(reversed(tiers_for(team))), None)
    tier = tier or PriorityTier.objects.filter(organization=team.organization_id, is_default=True).first()
    if tier is None:
        return None, {"tier": "Choose a priority tier."}
    if not may_use(team, tier):
        return tier, {"tier": f"Team {team} may not use priority tier {tier}."}
    if request.spot and not (request.preemptible and tier.preemptible):
        what = "the job is not preemptible" if not request.preemptible else f"priority tier {tier} is not preemptible"
        return tier, {"spot": f"Only preemptible work may run on spot capacity (the cloud may take it back): {what}."}
    return tier, {}


def _project_errors(request: JobRequest) -> dict[str, str]:
    project, team = request.project, request.team
    if project is not None and (project.team_id != team.pk or project.archived):
        return {"project": f"Project {project.name} is not an active project of team {team}."}
    return {}


def _type_errors(request: JobRequest) -> dict[str, str]:
    """Accelerator types the organization does not know."""
    if not request.accelerator_types:
        return {}
    types = AcceleratorType.objects.filter(organization=request.team.organization_id)
    known = set(types.values_list("name", flat=True))
    if unknown := [t for t in request.accelerator_types if t not in known]:
        return {
            "accelerator_types": f"Unknown accelerator type(s): {', '.join(unknown)}. "
            f"Known: {', '.join(sorted(known)) or 'none'}."
        }
    return {}


def _fleet_errors(request: JobRequest) -> dict[str, str]:
    """Clusters, regions and topology levels the organization's usable clusters do not have."""
    errors: dict[str, str] = {}
    org = request.team.organization
    clusters = Cluster.objects.filter(organization=org).exclude(status=Cluster.Status.DISABLED)
    foreign = [c for c in request.clusters if c.organization_id != org.pk or c.status == Cluster.Status.DISABLED]
    if foreign:
        errors["clusters"] = f"Not a usable cluster of {org}: {', '.join(c.name for c in foreign)}."
    regions = set(clusters.values_list("region", flat=True)) if request.regions else set()
    if bad := [r for r in request.regions if r not in regions]:
        errors["regions"] = f"Unknown region(s): {', '.join(bad)}. Known: {', '.join(sorted(regions)) or 'none'}."
    if near := request.data_locality.strip():
        places = {*clusters.values_list("slug", flat=True), *clusters.values_list("region", flat=True)}
        if near not in places:
            errors["data_locality"] = f"{near!r} is neither a cluster nor a region of {org}."
    if request.topology_level:
        levels = {level for row in clusters.values_list("levels", flat=True) for level in row}
        if request.topology_level not in levels:
            errors["topology_level"] = (
                f"No cluster has a {request.topology_level!r} level. Known: {', '.join(sorted(levels)) or 'none'}."
            )
    return errors


def _secret_errors(actor: User, request: JobRequest) -> dict[str, str]:
    """Secret values the actor may not reuse (``secret_env_of``), or names both secret and not."""
    try:
        secrets = secret_env_of(actor, request)
    except ValidationError as error:
        return {k: " ".join(v) for k, v in error.message_dict.items()}
    if both := sorted(set(secrets) & set(request.env)):
        return {"secret_env": f"{', '.join(both)}: both secret and not; give each name in one of them."}
    return {}


def secret_env_of(actor: User, request: JobRequest) -> dict[str, str]:
    """The secret values the job will have: those given, and the rest of ``secret_env_from``'s. Only the
    submitter of a job may reuse its secret values: anyone else who could clone it (a teammate, a lead, an
    admin) would choose what the copy runs, and so could print them."""
    source = request.secret_env_from
    if source is None or not source.secret_env_names:
        return dict(request.secret_env)
    if source.submitted_by_id != actor.pk:
        raise ValidationError(
            {"secret_env_from": f"Only the submitter of job #{source.pk} may reuse its secret values; give them again."}
        )
    try:
        kept = source.secret_env()
    except CredentialsError:
        raise ValidationError(
            {
                "secret_env_from": f"The secret values of job #{source.pk} cannot be read any more (the key changed); "
                "give them again."
            }
        ) from None
    return {**kept, **request.secret_env}


def spot_of(request: JobRequest, tier: PriorityTier) -> bool:
    """Whether the job accepts spot capacity: as it says, else as its tier says (preemptible work only)."""
    if request.spot is not None:
        return request.spot
    return tier.accepts_spot and tier.preemptible and request.preemptible


def new_job(actor: User, request: JobRequest, queue: Queue, tier: PriorityTier, now: datetime) -> Job:
    """The unsaved, pending job of a validated ``request`` (its secret values not set yet)."""
    return Job(
        team=request.team,
        project=request.project,
        queue=queue,
        submitted_by=actor,
        name=request.name.strip(),
        idempotency_key=request.idempotency_key.strip(),
        accelerator_types=list(request.accelerator_types),
        accelerators=request.accelerators,
        accelerator_milli=request.accelerator_milli,
        workers=request.workers,
        cpu=request.cpu,
        memory=request.memory,
        topology_level=request.topology_level,
        topology_mode=request.topology_mode,
        time_limit=request.time_limit,
        tier=tier,
        preemptible=request.preemptible and tier.preemptible,
        spot=spot_of(request, tier),
        checkpoint_location=request.checkpoint_location.strip(),
        data_locality=request.data_locality.strip(),
        regions=list(request.regions),
        max_price_per_hour=request.max_price_per_hour,
        image=request.image.strip(),
        command=list(request.command),
        script=request.script,
        env=dict(request.env),
        max_retries=request.max_retries,
        **submission.ray_fields(request),
        **submission.session_fields(request),
        tpu_type=request.tpu_type,
        tpu_topology=request.tpu_topology,
        serve_port=request.serve_port,
        serve_health_path=request.serve_health_path,
        spread_group=request.spread_group,
        state=S.PENDING,
        state_changed_at=now,
        submitted_at=now,
    )


def submit_job(actor: User, request: JobRequest, *, http: HttpRequest | None = None) -> tuple[Job, bool]:
    """Create the job (pending) and wake the placement loop. Returns (job, created): a request repeating an
    idempotency key returns the job first created with it."""
    key = request.idempotency_key.strip()
    if key:
        existing = Job.objects.filter(submitted_by=actor, idempotency_key=key).first()
        if existing is not None:
            return existing, False
    queue, tier = validate(actor, request)
    secrets = secret_env_of(actor, request)
    now = timezone.now()
    try:
        with transaction.atomic():
            job = new_job(actor, request, queue, tier, now)
            job.set_secret_env(secrets)
            job.save(force_insert=True)
            if request.clusters:
                job.clusters.set(request.clusters)
            job.events.create(
                created_at=now,
                from_state="",
                to_state=S.PENDING,
                reason="submitted",
                actor=actor,
                message=(
                    f"Service replica submitted to queue {queue} by {actor.get_username()}: it runs until stopped."
                    if job.kind == Job.Kind.SERVICE
                    else f"Submitted to queue {queue} by {actor.get_username()}."
                ),
            )
            audit.record(
                "job.submitted",
                actor=actor,
                target=job,
                organization=request.team.organization,
                changes=submitted_fields(job),
                request=http,
            )
            transaction.on_commit(wake_loop)
    except IntegrityError:  # the same key raced in from another request: that one won
        existing = Job.objects.filter(submitted_by=actor, idempotency_key=key).first()
        if key and existing is not None:
            return existing, False
        raise
    return job, True


def submitted_fields(job: Job) -> dict[str, Any]:
    """What the audit log keeps of a submission: where it goes and what it asks for (never its environment,
    whose values may be secrets, nor its script)."""
    return {
        "queue": job.queue.name,
        "project": job.project.name if job.project else None,
        "tier": job.tier.name,
        "workers": job.workers,
        "accelerators": job.accelerators,
        "accelerator_types": list(job.accelerator_types),
        "time_limit_seconds": job.time_limit,
        "image": job.image,
    }


def wake_loop() -> None:
    """Run the placement loop soon. A burst of submissions wakes it at most once a second, and a broker or
    cache that is down costs nothing but the wait for the next beat: the job is already committed."""
    try:
        woken = cache.add("scheduler:loop-woken", 1, timeout=1)
    except Exception as error:  # noqa: BLE001 - any cache failure; the beat runs the loop anyway
        log.warning("could not wake the placement loop (the beat will run it): %s", error)
        return
    if woken:
        enqueue.send("scheduler.tasks.placement_cycle")


def cancel_job(actor: User, job: Job, reason: str = "", *, http: HttpRequest | None = None) -> Job:
    """Cancel a waiting or placed job. Researchers cancel their own jobs; leads and admins any of the team's."""
    held = policy.granted(actor, job, "job.change", "job.cancel")
    if "job.cancel" not in held:  # a teammate of the owner is told who may cancel it; anyone else, no more
        raise policy.refusal("job.cancel" if "job.change" in held else "job.change", job)
    reason = (reason or "").strip()[:2000]
    now = timezone.now()
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        if locked.state not in WAITING | PLACED:
            state = locked.get_state_display().lower()
            raise ValidationError({"state": f"Job #{job.pk} is {state}; nothing to cancel."})
        message = f"Cancelled by {actor.get_username()}" + (f": {reason}" if reason else ".")
        attempt = cancel_locked(locked, message, actor, now)
        audit.record(
            "job.cancelled",
            actor=actor,
            target=locked,
            organization=job.team.organization,
            changes={"state": [job.state, S.CANCELLED]},
            reason=reason,
            request=http,
        )
        if attempt is not None:
            attempt_id = attempt.pk
            transaction.on_commit(lambda: cleanup_later(attempt_id))
    job.refresh_from_db()
    return job


def cancel_locked(locked: Job, message: str, actor: User | None, now: datetime) -> Attempt | None:
    """Cancel a locked, active job (its current attempt too); returns that attempt, whose cleanup on its
    cluster the caller queues after the commit (``cleanup_later``)."""
    attempt = None
    if locked.state in PLACED:
        attempt = Attempt.objects.filter(job=locked, number=locked.attempt, outcome=Attempt.Outcome.ACTIVE).first()
        if attempt is not None:
            Attempt.objects.filter(pk=attempt.pk).update(
                outcome=Attempt.Outcome.CANCELLED, ended_at=now, cleanup_pending=attempt.may_run_on_cluster
            )
    lifecycle.move(locked, S.CANCELLED, "cancelled", message, actor=actor, at=now, finished_at=now, message=message)
    return attempt


def cleanup_later(attempt_id: int) -> None:
    """Queue the cancellation of an attempt on its cluster (call it after the commit)."""
    enqueue.send("scheduler.tasks.cleanup_attempt", attempt_id)


def clone_request(job: Job) -> dict[str, Any]:
    """The fields of ``job`` as initial values for a new submission (the form's "clone"). Its secret values
    are not among them: a clone by the job's submitter keeps them by reference (``secret_env_from``) without
    their ever being shown; anyone else's clone has to be given them again (``secret_env_of``)."""
    return {
        "secret_env_from": job.pk,
        "team": job.team_id,
        "project": job.project_id,
        "name": f"{job.name} (copy)"[:120],
        "accelerator_types": list(job.accelerator_types),
        "accelerators": job.accelerators,
        "accelerator_milli": job.accelerator_milli,
        "workers": job.workers,
        "cpu": job.cpu,
        "memory": job.memory,
        "topology_level": job.topology_level,
        "topology_mode": job.topology_mode,
        "time_limit": job.time_limit,
        "tier": job.tier_id,
        "preemptible": job.preemptible,
        "spot": job.spot,
        "checkpoint_location": job.checkpoint_location,
        "data_locality": job.data_locality,
        "clusters": list(job.clusters.values_list("pk", flat=True)),
        "regions": list(job.regions),
        "max_price_per_hour": job.max_price_per_hour,
        "image": job.image,
        "command": list(job.command),
        "script": job.script,
        "env": dict(job.env),
        "max_retries": job.max_retries,
        **submission.ray_clone(job),
        "tpu_type": job.tpu_type,
        "tpu_topology": job.tpu_topology,
    }


# --- on-call: force-preempt and requeue --------------------------------------------------------------------

#: Where a job holds capacity and may be told to stop (a preempting job is stopping already).
PREEMPTABLE = PLACED - {S.PREEMPTING}


def _intervention(actor: User, job: Job, reason: str, what: str) -> str:
    """The checks both on-call actions make first; the reason, which they require, stripped."""
    policy.require(actor, f"job.{what}", job)
    reason = (reason or "").strip()
    if not reason:
        raise ValidationError({"reason": f"Say why you {what} it (kept in its timeline and the audit log)."})
    if len(reason) > MAX_REASON:
        raise ValidationError({"reason": message_of(check_max_length, reason, MAX_REASON)})
    return reason


def _sentence(text: str) -> str:
    return text if text.endswith((".", "!", "?")) else f"{text}."


def preempt_job(actor: User, job: Job, reason: str, *, http: HttpRequest | None = None) -> Job:
    """Force-preempt a placed job (on-call), as the loop preempts its victims: it is told to checkpoint and
    exit within its tier's grace period, stopped when that ends, and requeued to resume from its checkpoint
    (``dispatch``). A preemption is not the job's failure: its retries are untouched. Admins only; this
    overrides the job's being non-preemptible, which only keeps the scheduler from choosing it."""
    reason = _intervention(actor, job, reason, "preempt")
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        frm = locked.state
        message = f"Preempted by {actor.get_username()}: {_sentence(reason)}"
        _stop(locked, "preempted_by_admin", message, actor=actor, detail={"reason": reason})
        audit.record(
            "job.preempted",
            actor=actor,
            target=locked,
            organization=job.team.organization,
            changes={"state": [frm, S.PREEMPTING]},
            reason=reason,
            request=http,
        )
    job.refresh_from_db()
    return job


def stop_and_requeue(job: Job, reason_code: str, message: str) -> Job:
    """What the system does to restart a placed job from its last checkpoint (a hung job, ``scheduler/watch``):
    as a preemption, it is told to checkpoint and exit within its tier's grace, stopped when that ends, and
    requeued without spending a retry. A job no longer placed is left alone."""
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        if locked.state in PREEMPTABLE:
            _stop(locked, reason_code, message)
    job.refresh_from_db()
    return job


def _stop(
    locked: Job, reason_code: str, message: str, *, actor: User | None = None, detail: dict[str, Any] | None = None
) -> None:
    """Move a locked, placed job to preempting with its tier's grace (``stop_deadline``); signal it after commit."""
    if locked.state not in PREEMPTABLE:
        state = locked.get_state_display().lower()
        raise ValidationError({"state": f"Job #{locked.pk} is {state}; only a placed or running job can be preempted."})
    now = timezone.now()
    grace = PriorityTier.objects.values_list("grace_seconds", flat=True).get(pk=locked.tier_id)
    deadline = now + timedelta(seconds=grace)
    Attempt.objects.filter(job=locked, number=locked.attempt, outcome=Attempt.Outcome.ACTIVE).update(
        stop_deadline=deadline
    )
    text = f"{message} It has {grace} s to checkpoint and exit."
    lifecycle.move(
        locked,
        S.PREEMPTING,
        reason_code,
        text,
        actor=actor,
        detail={"deadline": deadline.isoformat(), **(detail or {})},
        at=now,
    )
    job_id = locked.pk
    transaction.on_commit(lambda: _signal_later(job_id))


def _signal_later(job_id: int) -> None:
    enqueue.send("scheduler.tasks.signal_job", job_id)


def requeue_job(actor: User, job: Job, reason: str, *, http: HttpRequest | None = None) -> Job:
    """Put a failed job (one out of retries, say, after its cluster was mended) back in its queue at once,
    to be placed again and resume from its checkpoint. That is one more try, outside the retry policy: its
    retries are not given back, so should it fail again it stays failed. Admins only."""
    reason = _intervention(actor, job, reason, "requeue")
    now = timezone.now()
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        if locked.state != S.FAILED:
            state = locked.get_state_display().lower()
            raise ValidationError({"state": f"Job #{job.pk} is {state}; only a failed job can be requeued."})
        where = checkpoints.resume_from(locked)
        resume = f" It resumes from {where}." if where else ""
        message = f"Requeued by {actor.get_username()}: {_sentence(reason)} One more try.{resume}"
        lifecycle.move(
            locked,
            S.REQUEUED,
            "requeued_by_admin",
            message,
            actor=actor,
            detail={"reason": reason},
            at=now,
            not_before=None,
            finished_at=None,
        )
        audit.record(
            "job.requeued",
            actor=actor,
            target=locked,
            organization=job.team.organization,
            changes={"state": [S.FAILED, S.REQUEUED]},
            reason=reason,
            request=http,
        )
        transaction.on_commit(wake_loop)
    job.refresh_from_db()
    return job
