"""What people do to services: create, update (a new revision, rolled out), scale, stop, start, roll back.

One transaction each, authorized through ``tenancy/policy.py`` (``service.create`` on a team, ``service.change``
on a service), validated as a whole (a ``ValidationError`` naming every bad field, nothing written) and audited.
The program of a service is checked as the job request of one of its replicas (``replica_request``) by the
scheduler's own validation, feasibility included, so a service that could never place a replica is refused at
once with the engine's words. The control loop (``serving/actions/control.py``) does the rest after the commit.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max
from django.utils import timezone
from django.utils.text import slugify

from clusters.models import Cluster
from common import enqueue
from governance.models import PriorityTier
from registry.models import ModelVersion
from scheduler import actions as jobs
from scheduler import submission
from scheduler.models import Job
from scheduler.submission import JobRequest
from serving.models import Revision, Service
from tenancy import policy
from tenancy.actions import audit
from tenancy.models import Project, Team

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django.http import HttpRequest

#: What a revision is made of: a change of any of these rolls out a new revision.
PROGRAM_FIELDS = (
    "image",
    "command",
    "env",
    "port",
    "health_path",
    "accelerators",
    "accelerator_types",
    "cpu",
    "memory",
    "model_version",
)
#: How the autoscaler scales it (``serving/autoscale.py``): changed in place.
SCALING_FIELDS = (
    "min_replicas",
    "max_replicas",
    "metric",
    "target",
    "scale_to_zero_after",
    "scale_up_window",
    "scale_down_window",
)
#: The rest of a service that may change after it is made.
OTHER_FIELDS = ("tier", "clusters", "public", "max_inflight", "max_rps")
#: Defaults of a new service's fields (the models' defaults, in one place for the form and the API).
DEFAULTS: dict[str, Any] = {
    "project": None,
    "tier": None,
    "image": "",
    "command": [],
    "env": {},
    "port": 0,
    "health_path": "/",
    "accelerators": 0,
    "accelerator_types": [],
    "cpu": 1000,
    "memory": 2048,
    "model_version": None,
    "min_replicas": 1,
    "max_replicas": 1,
    "metric": Service.Metric.RPS,
    "target": 10.0,
    "scale_to_zero_after": None,
    "scale_up_window": 30,
    "scale_down_window": 300,
    "clusters": [],
    "public": False,
    "max_inflight": None,
    "max_rps": None,
}
#: A replica runs until it is stopped: its job's time limit is the longest a job may have.
REPLICA_TIME_LIMIT = submission.MAX_TIME_LIMIT
#: Retries of a replica's job after a node or cluster failure (the control loop replaces it after that).
REPLICA_RETRIES = 3
MAX_WINDOW = 3600
#: The most requests a second a service may allow itself where the operator sets no limit (``SERVE_MAX_RPS``).
MAX_RPS = 1_000_000
#: The scheduler's names of a replica request's fields, where they differ from a service's.
SCHEDULER_NAMES = {"serve_port": "port", "serve_health_path": "health_path", "time_limit": "tier"}


def max_replicas_limit() -> int:
    return int(getattr(settings, "SERVE_MAX_REPLICAS", 20))


# --- replicas as job requests -------------------------------------------------------------------------------


def default_tier(team: Team) -> PriorityTier | None:
    """The team's highest tier that is not preemptible (services are not preempted by batch work), if any:
    else None, the organization's default tier."""
    return next((tier for tier in jobs.tiers_for(team) if not tier.preemptible), None)


def model_env(version: ModelVersion | None) -> dict[str, str]:
    """What a replica is told of the model version it serves (``QM_MODEL_*``)."""
    if version is None:
        return {}
    return {
        "QM_MODEL_NAME": version.model.name,
        "QM_MODEL_VERSION": version.version,
        "QM_MODEL_URI": version.artifact_uri,
        "QM_MODEL_SHA256": version.sha256,
        # Where the replica fetches the bytes, with its own job token (``QM_JOB_TOKEN``), when the portal holds
        # them: the model server downloads and checks them before it answers its health check.
        **(
            {"QM_MODEL_URL": f"{settings.PUBLIC_URL}/api/v1/models/{version.model_id}/versions/{version.pk}/artifact"}
            if version.stored
            else {}
        ),
    }


def replica_env(service: Service, revision: Revision) -> dict[str, str]:
    """The environment a replica's program gets beyond its revision's own (``QM_`` names are reserved to us)."""
    return {"QM_SERVICE": service.name, "QM_REVISION": str(revision.number), **model_env(revision.model_version)}


def replica_request(service: Service, revision: Revision, name: str = "") -> JobRequest:
    """The job request of one replica of ``revision``: quotas, budgets, tiers and placement apply to it as to
    any job. (Its ``QM_*`` environment is added to the job after submission: users may not set those names.)"""
    return JobRequest(
        kind=Job.Kind.SERVICE,
        team=service.team,
        project=service.project,
        name=name or f"{service.name}-r{revision.number}",
        tier=service.tier,
        image=revision.image,
        command=list(revision.command),
        env=dict(revision.env),
        serve_port=revision.port,
        serve_health_path=revision.health_path,
        spread_group=service.spread_group,
        clusters=list(service.clusters.all()) if service.pk else [],
        accelerators=revision.accelerators,
        accelerator_types=list(revision.accelerator_types),
        cpu=revision.cpu,
        memory=revision.memory,
        time_limit=REPLICA_TIME_LIMIT,
        max_retries=REPLICA_RETRIES,
        preemptible=False,
    )


def submit_replica(service: Service, revision: Revision, name: str) -> Job:
    """Submit one replica's job as the service's creator (the control loop calls it). ``ValidationError``
    when the scheduler refuses it (a quota, a budget, nowhere to place it)."""
    request = replica_request(service, revision, name)
    with transaction.atomic():
        job, _ = jobs.submit_job(service.created_by, request)
        env = {**job.env, **replica_env(service, revision)}
        Job.objects.filter(pk=job.pk).update(env=env)
        job.env = env
    return job


# --- validation ---------------------------------------------------------------------------------------------


def _int_error(value: Any, name: str, low: int, high: int | None = None) -> str:
    if isinstance(value, bool) or not isinstance(value, int):
        return f"Give {name} as a whole number."
    if value < low or (high is not None and value > high):
        return (
            f"{name.capitalize()} must be between {low} and {high}."
            if high is not None
            else (f"{name.capitalize()} must be at least {low}.")
        )
    return ""


def scaling_errors(fields: Mapping[str, Any]) -> dict[str, str]:
    """What is wrong with a service's scaling fields (all of them given), by field."""
    errors: dict[str, str] = {}
    limit = max_replicas_limit()
    for name, words, low, high in (
        ("min_replicas", "the minimum of replicas", 0, limit),
        ("max_replicas", "the maximum of replicas", 1, limit),
        ("scale_up_window", "the scale-up window (seconds)", 0, MAX_WINDOW),
        ("scale_down_window", "the scale-down window (seconds)", 0, MAX_WINDOW),
    ):
        if error := _int_error(fields[name], words, low, high):
            errors[name] = error
    if not errors.keys() & {"min_replicas", "max_replicas"} and fields["min_replicas"] > fields["max_replicas"]:
        errors["min_replicas"] = "The minimum of replicas cannot be above the maximum."
    if fields["metric"] not in Service.Metric.values:
        errors["metric"] = f"Choose a metric: {', '.join(Service.Metric.values)}."
    target = fields["target"]
    if isinstance(target, bool) or not isinstance(target, int | float) or not math.isfinite(target) or target <= 0:
        errors["target"] = "The target per replica must be a number above 0."
    after = fields["scale_to_zero_after"]
    if after is not None and (error := _int_error(after, "the idle time before scaling to zero", 1, 30 * 86400)):
        errors["scale_to_zero_after"] = error
    if fields["min_replicas"] == 0 and after is None and "min_replicas" not in errors:
        errors["scale_to_zero_after"] = "A service that may scale to zero says after how many idle seconds."
    return errors


def program_errors(team: Team, fields: Mapping[str, Any]) -> dict[str, str]:
    """What is wrong with a revision's fields that the scheduler does not check, by field."""
    errors: dict[str, str] = {}
    if error := _int_error(fields["port"], "the port", 0, 65535):
        errors["port"] = error
    path = fields["health_path"]
    if not isinstance(path, str) or not path.startswith("/") or len(path) > 200 or any(c.isspace() for c in path):
        errors["health_path"] = "The health path starts with / and has no spaces (at most 200 characters)."
    if not isinstance(fields["command"], list | tuple):
        errors["command"] = "The command is a list of strings."
    if not isinstance(fields["env"], Mapping):
        errors["env"] = "The environment is an object of names to strings."
    if not isinstance(fields["accelerator_types"], list | tuple):
        errors["accelerator_types"] = "Give the accelerator types as a list of names."
    version = fields["model_version"]
    if version is not None:
        if not isinstance(version, ModelVersion) or version.model.team_id != team.pk:
            errors["model_version"] = "Choose a version of one of the team's models."
        elif not version.stored:
            errors["model_version"] = f"Model version {version} has no stored artifact; replicas load only stored ones."
    return errors


def placement_errors(actor: User, service: Service, revision: Revision) -> dict[str, str]:
    """The scheduler's verdict on one replica's job request (its shape, the tier, the clusters, whether it
    could ever be placed), under the service's field names."""
    try:
        jobs.validate(actor, replica_request(service, revision))
    except ValidationError as error:
        return {SCHEDULER_NAMES.get(k, k): " ".join(v) for k, v in error.message_dict.items()}
    return {}


def other_errors(team: Team, fields: Mapping[str, Any]) -> dict[str, str]:
    errors: dict[str, str] = {}
    tier = fields.get("tier")
    if tier is not None and (not isinstance(tier, PriorityTier) or not jobs.may_use(team, tier)):
        errors["tier"] = f"Team {team} may not use this priority tier."
    clusters = fields.get("clusters", [])
    if any(not isinstance(c, Cluster) or c.organization_id != team.organization_id for c in clusters):
        errors["clusters"] = "Choose clusters of the team's organization."
    if not isinstance(fields.get("public", False), bool):
        errors["public"] = "Public is true or false."
    errors.update(limit_errors(fields))
    return errors


def limits_allowed() -> tuple[int, int]:
    """The most a service may set: requests in flight, and requests a second (the operator's limit where there is
    one, else ``MAX_RPS``)."""
    rps = int(getattr(settings, "SERVE_MAX_RPS", 0))
    return int(getattr(settings, "SERVE_MAX_INFLIGHT", 256)), rps or MAX_RPS


def limit_errors(fields: Mapping[str, Any]) -> dict[str, str]:
    """What is wrong with a service's own limits at the data plane (None: the operator's)."""
    inflight, rps = limits_allowed()
    errors: dict[str, str] = {}
    for name, words, high in (
        ("max_inflight", "requests at its replicas at once", inflight),
        ("max_rps", "requests a second", rps),
    ):
        value = fields.get(name)
        if value is not None and (error := _int_error(value, words, 1, high)):
            errors[name] = f"{error.rstrip('.')}, or none (the data plane's own limit)."
    return errors


def _unknown(fields: Mapping[str, Any], allowed: Iterable[str]) -> None:
    extra = sorted(set(fields) - set(allowed))
    if extra:
        raise ValidationError(dict.fromkeys(extra, "Not a field of a service."))


def _revision_of(service: Service, fields: Mapping[str, Any], number: int, actor: User, now: Any) -> Revision:
    return Revision(
        service=service,
        number=number,
        image=str(fields["image"]).strip(),
        command=list(fields["command"]),
        env=dict(fields["env"]),
        port=fields["port"],
        health_path=fields["health_path"],
        accelerators=fields["accelerators"],
        accelerator_types=list(fields["accelerator_types"]),
        cpu=fields["cpu"],
        memory=fields["memory"],
        model_version=fields["model_version"],
        created_by=actor,
        created_at=now,
    )


def program_of(revision: Revision) -> dict[str, Any]:
    """A revision's program fields, as ``create_service`` and ``update_service`` take them."""
    return {name: getattr(revision, name) for name in PROGRAM_FIELDS}


def scaling_of(service: Service) -> dict[str, Any]:
    return {name: getattr(service, name) for name in SCALING_FIELDS}


# --- the actions ----------------------------------------------------------------------------------------------


def create_service(actor: User, *, team: Team, name: str, http: HttpRequest | None = None, **given: Any) -> Service:
    """Create a service (active, revision 1) in ``team``; its replicas start at the control loop's next tick."""
    policy.require(actor, "service.create", team)
    _unknown(given, DEFAULTS)
    fields = {**DEFAULTS, **given}
    errors: dict[str, str] = {}
    name = str(name or "").strip()
    if not name or slugify(name) != name or len(name) > 60:
        errors["name"] = "A service's name is lower-case letters, digits and dashes (at most 60), e.g. chat-api."
    elif Service.objects.filter(team=team, name=name).exists():
        errors["name"] = f"Team {team} already has a service named {name}."
    project = fields["project"]
    if project is not None and (not isinstance(project, Project) or project.team_id != team.pk):
        errors["project"] = "Choose a project of the team."
    errors.update(scaling_errors(fields))
    errors.update(program_errors(team, fields))
    errors.update(other_errors(team, fields))
    if errors:
        raise ValidationError(errors)
    now = timezone.now()
    service = Service(
        team=team,
        project=project,
        name=name,
        created_by=actor,
        created_at=now,
        tier=fields["tier"] or default_tier(team),
        public=fields["public"],
        max_inflight=fields["max_inflight"],
        max_rps=fields["max_rps"],
        **{k: fields[k] for k in SCALING_FIELDS},
    )
    revision = _revision_of(service, fields, 1, actor, now)
    revision.state = Revision.State.ACTIVE
    if errors := placement_errors(actor, service, revision):
        raise ValidationError(errors)
    with transaction.atomic():
        service.save(force_insert=True)
        service.clusters.set(fields["clusters"])
        revision.service = service
        revision.save(force_insert=True)
        Service.objects.filter(pk=service.pk).update(revision=revision)
        service.revision = revision
        audit.record(
            "service.created",
            actor=actor,
            target=service,
            organization=team.organization,
            changes={"revision": 1, "image": revision.image, **_audit_scaling(service)},
            request=http,
        )
        transaction.on_commit(lambda: tick_later(service.pk))
    return service


def _audit_scaling(service: Service) -> dict[str, Any]:
    return {name: getattr(service, name) for name in ("min_replicas", "max_replicas", "metric", "target")}


def update_service(actor: User, service: Service, *, http: HttpRequest | None = None, **given: Any) -> Service:
    """Change a service. A change of its program (``PROGRAM_FIELDS``) makes a new revision, rolled out one
    replica at a time by the control loop (a rollout still in progress is replaced by it); the rest changes
    in place."""
    policy.require(actor, "service.change", service)
    _unknown(given, (*PROGRAM_FIELDS, *SCALING_FIELDS, *OTHER_FIELDS))
    current = service.revision
    assert current is not None
    latest = service.revisions.order_by("-number").first() or current
    program = {**program_of(latest), **{k: v for k, v in given.items() if k in PROGRAM_FIELDS}}
    scaling = {**scaling_of(service), **{k: v for k, v in given.items() if k in SCALING_FIELDS}}
    other: dict[str, Any] = {
        "tier": service.tier,
        "clusters": list(service.clusters.all()),
        "public": service.public,
        "max_inflight": service.max_inflight,
        "max_rps": service.max_rps,
    }
    other.update({k: v for k, v in given.items() if k in OTHER_FIELDS})
    errors = {**scaling_errors(scaling), **program_errors(service.team, program), **other_errors(service.team, other)}
    if errors:
        raise ValidationError(errors)
    changed_program = program != program_of(latest)
    now = timezone.now()
    for name, value in {
        **scaling,
        "tier": other["tier"] or default_tier(service.team),
        "public": other["public"],
        "max_inflight": other["max_inflight"],
        "max_rps": other["max_rps"],
    }.items():
        setattr(service, name, value)
    revision = None
    if changed_program:
        number = (service.revisions.aggregate(n=Max("number"))["n"] or 0) + 1
        revision = _revision_of(service, program, number, actor, now)
        if errors := placement_errors(actor, service, revision):
            raise ValidationError(errors)
    with transaction.atomic():
        locked = Service.objects.select_for_update().get(pk=service.pk)
        service.desired_replicas = locked.desired_replicas
        service.state = locked.state
        service.last_request_at = locked.last_request_at
        service.save()
        service.clusters.set(other["clusters"])
        changes: dict[str, Any] = {
            k: v for k, v in given.items() if k in SCALING_FIELDS or k in ("public", "max_inflight", "max_rps")
        }
        if revision is not None:
            _supersede_rollout(service, f"Replaced by revision {revision.number} before its rollout finished.")
            if service.state == Service.State.ACTIVE:
                revision.state = Revision.State.ROLLING_OUT
                revision.reason = f"Rolling out, from revision {current.number}."
            else:  # no replicas to replace: it is what the service runs when started
                revision.state = Revision.State.ACTIVE
                Revision.objects.filter(pk=current.pk).update(state=Revision.State.SUPERSEDED)
            revision.save(force_insert=True)
            if revision.state == Revision.State.ACTIVE:
                Service.objects.filter(pk=service.pk).update(revision=revision)
                service.revision = revision
            changes["revision"] = [current.number, revision.number]
        audit.record(
            "service.updated",
            actor=actor,
            target=service,
            organization=service.team.organization,
            changes=changes,
            request=http,
        )
        transaction.on_commit(lambda: tick_later(service.pk))
    return service


def _supersede_rollout(service: Service, reason: str) -> None:
    Revision.objects.filter(service=service, state__in=[Revision.State.ROLLING_OUT, Revision.State.PENDING]).update(
        state=Revision.State.SUPERSEDED, reason=reason
    )


def scale(
    actor: User,
    service: Service,
    min_replicas: int | None = None,
    max_replicas: int | None = None,
    *,
    http: HttpRequest | None = None,
    **more: Any,
) -> Service:
    """Change how a service scales: its bounds, and any other of ``SCALING_FIELDS``."""
    _unknown(more, SCALING_FIELDS)
    given = dict(more)
    if min_replicas is not None:
        given["min_replicas"] = min_replicas
    if max_replicas is not None:
        given["max_replicas"] = max_replicas
    return update_service(actor, service, http=http, **given)


def _set_state(actor: User, service: Service, state: str, verb: str, http: HttpRequest | None) -> Service:
    policy.require(actor, "service.change", service)
    with transaction.atomic():
        locked = Service.objects.select_for_update().get(pk=service.pk)
        if locked.state == state:
            raise ValidationError({"state": f"Service {service.name} is {locked.get_state_display().lower()} already."})
        Service.objects.filter(pk=service.pk).update(state=state, message="")
        audit.record(
            f"service.{verb}",
            actor=actor,
            target=service,
            organization=service.team.organization,
            changes={"state": [locked.state, state]},
            request=http,
        )
        transaction.on_commit(lambda: tick_later(service.pk))
    service.refresh_from_db()
    return service


def stop_service(actor: User, service: Service, *, http: HttpRequest | None = None) -> Service:
    """Stop every replica (the control loop cancels their jobs); the service and its revisions stay."""
    return _set_state(actor, service, Service.State.STOPPED, "stopped", http)


def start_service(actor: User, service: Service, *, http: HttpRequest | None = None) -> Service:
    """Run a stopped service again, at its minimum of replicas (or at zero until a request comes)."""
    return _set_state(actor, service, Service.State.ACTIVE, "started", http)


def rollback(actor: User, service: Service, *, http: HttpRequest | None = None) -> Service:
    """Undo the last change of program: abandon a rollout in progress (its replicas are stopped), or else roll
    out again the revision before the current one (as a new revision, numbered next)."""
    policy.require(actor, "service.change", service)
    current = service.revision
    assert current is not None
    who = actor.get_username()
    with transaction.atomic():
        Service.objects.select_for_update().get(pk=service.pk)
        rolling = service.revisions.filter(state=Revision.State.ROLLING_OUT).order_by("-number").first()
        if rolling is not None:
            Revision.objects.filter(pk=rolling.pk).update(
                state=Revision.State.FAILED, reason=f"Rolled back by {who} during its rollout."
            )
            changes: dict[str, Any] = {"revision": [rolling.number, current.number]}
        else:
            previous = (
                service.revisions.filter(number__lt=current.number, state=Revision.State.SUPERSEDED)
                .order_by("-number")
                .first()
            )
            if previous is None:
                raise ValidationError({"revision": f"Service {service.name} has no earlier revision to roll back to."})
            number = (service.revisions.aggregate(n=Max("number"))["n"] or 0) + 1
            revision = _revision_of(service, program_of(previous), number, actor, timezone.now())
            active = service.state == Service.State.ACTIVE
            revision.state = Revision.State.ROLLING_OUT if active else Revision.State.ACTIVE
            revision.reason = f"Rollback to revision {previous.number} by {who}."
            revision.save(force_insert=True)
            if not active:
                Revision.objects.filter(pk=current.pk).update(state=Revision.State.SUPERSEDED)
                Service.objects.filter(pk=service.pk).update(revision=revision)
            changes = {"revision": [current.number, revision.number], "rollback_to": previous.number}
        audit.record(
            "service.rolled_back",
            actor=actor,
            target=service,
            organization=service.team.organization,
            changes=changes,
            request=http,
        )
        transaction.on_commit(lambda: tick_later(service.pk))
    service.refresh_from_db()
    return service


def tick_later(service_id: int) -> None:
    """Run the control loop for one service soon (after a change; the beat runs it anyway)."""
    enqueue.send("serving.tasks.control_service", service_id)


__all__ = [
    "DEFAULTS",
    "PROGRAM_FIELDS",
    "SCALING_FIELDS",
    "create_service",
    "default_tier",
    "replica_request",
    "rollback",
    "scale",
    "start_service",
    "stop_service",
    "submit_replica",
    "update_service",
]
