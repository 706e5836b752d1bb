"""API representations of jobs, in the units people use (cores, GiB, a fraction of an accelerator, a
duration such as ``2h``), and their conversion to ``submission.JobRequest`` (millicores, MiB, milli, seconds).

The request serializer checks types and resolves names (team, project, tier, clusters) among what the user
may see; everything else about a request (ranges, whether it can ever fit) is ``actions.validate``'s, so
the web form, the API and the ``qm`` CLI refuse the same things with the same words. Both are asked at once
(``checked_request``): a request with a field of the wrong type has its other fields judged by the action
too, so one answer names every bad field.

Size: the job's API shapes, the submission and every read of a job, attempt and event; what a running job reports
with its token (checkpoints, progress, exit, sessions, endpoints) would split out first.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.exceptions import PermissionDenied
from rest_framework.settings import api_settings

from clusters.models import Cluster
from common.api.serializers import (
    MONEY,
    RefField,
    StrictCharField,
    StrictFloatField,
    StrictIntegerField,
    StrictSerializer,
    find,
)
from common.validation import check_max_length, message_of
from governance.models import PriorityTier
from scheduler import actions, costs, submission
from scheduler.actions import teams_for_submission, tiers_for
from scheduler.attempts import checkpoint_counts, reason_words, state_words
from scheduler.models import Attempt, Checkpoint, Dependency, Job, JobEvent, Progress
from scheduler.states import PLACED
from scheduler.submission import DURATION_HELP, FIELDS, JobRequest, Unit, parse_duration
from tenancy.models import Project, Team
from tenancy.scoping import Action


class DurationField(serializers.Field):  # type: ignore[type-arg]
    default_error_messages = {"invalid": DURATION_HELP}

    def to_internal_value(self, data: Any) -> int:
        try:
            return parse_duration(data)
        except ValueError:
            self.fail("invalid")
            raise  # unreachable: fail() raises

    def to_representation(self, value: int) -> int:
        return value


extend_schema_field({"oneOf": [{"type": "integer"}, {"type": "string", "example": "2h"}]})(DurationField)


def amount(unit: Unit, **kwargs: Any) -> serializers.DecimalField:
    """A field typed in people's units (cores, GiB, a fraction), with the unit's bounds."""
    return serializers.DecimalField(
        max_digits=unit.digits, decimal_places=unit.places, min_value=unit.low, max_value=unit.high, **kwargs
    )


def text(name: str, **kwargs: Any) -> StrictCharField:
    """A text field of the job request, with its length limit (``submission.FIELDS``)."""
    return StrictCharField(max_length=submission.limit(name), **kwargs)


def _strings(**kwargs: Any) -> serializers.ListField:
    return serializers.ListField(child=StrictCharField(max_length=200), required=False, **kwargs)


class KindField(serializers.ChoiceField):
    """A job's kind as people submit it: a service replica is refused with where services are made."""

    def to_internal_value(self, data: Any) -> Any:
        if data == Job.Kind.SERVICE:
            raise serializers.ValidationError(submission.SERVICE_ELSEWHERE)
        return super().to_internal_value(data)


class JobSubmissionSerializer(StrictSerializer):
    """What a submission (and a preview) takes. Unknown fields are refused by name."""

    team = RefField(required=False, help_text="Slug or id; optional if you may submit to one team only.")
    project = RefField(required=False, allow_null=True, help_text="Slug or id.")
    name = text("name")
    accelerator_types = _strings(help_text="Any of these accelerator types; empty: any type.")
    accelerators = serializers.IntegerField(required=False, help_text=FIELDS["accelerators"].help)
    accelerator_fraction = amount(submission.FRACTION, required=False, help_text=FIELDS["accelerator_milli"].help)
    workers = serializers.IntegerField(required=False, help_text=FIELDS["workers"].help)
    cpu = amount(submission.CORES, required=False, help_text=FIELDS["cpu"].help)
    memory_gib = amount(submission.GIB, required=False, help_text=FIELDS["memory"].help)
    topology_level = StrictCharField(max_length=40, required=False, allow_blank=True)
    topology_mode = serializers.ChoiceField(choices=Job.TopologyMode.choices, required=False)
    time_limit = DurationField(help_text=DURATION_HELP)
    tier = StrictCharField(max_length=40, required=False, allow_null=True, help_text="A priority tier's name.")
    preemptible = serializers.BooleanField(required=False)
    spot = serializers.BooleanField(
        required=False,
        allow_null=True,
        help_text="It accepts spot capacity: cheaper, but the cloud may take it back (requeued from its checkpoint, "
        "no retry spent). Preemptible work only. Left out or null: as its priority tier says.",
    )
    checkpoint_location = text("checkpoint_location", required=False, allow_blank=True)
    data_locality = text("data_locality", required=False, allow_blank=True)
    clusters = _strings(help_text="Cluster slugs the job may run on; empty: any.")
    regions = _strings(help_text="Regions the job may run in; empty: any.")
    max_price_per_hour = serializers.DecimalField(
        max_digits=12,
        decimal_places=2,
        min_value=FIELDS["max_price_per_hour"].low,
        required=False,
        allow_null=True,
        help_text=FIELDS["max_price_per_hour"].help,
    )
    image = text("image", required=False, allow_blank=True)
    command = serializers.ListField(
        child=text("command", allow_blank=True, trim_whitespace=False), required=False, help_text=FIELDS["command"].help
    )
    script = text("script", required=False, allow_blank=True, trim_whitespace=False)
    env = serializers.DictField(child=text("env", allow_blank=True, trim_whitespace=False), required=False)
    secret_env = serializers.DictField(
        child=text("env", allow_blank=True, trim_whitespace=False),
        required=False,
        help_text="Environment values shown to nobody (tokens, passwords): stored encrypted, never in an answer "
        "(jobs list their names, secret_env_names), given to the job when it starts.",
    )
    secret_env_from = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        help_text="The id of a job you submitted whose secret values this one keeps (those not in secret_env): "
        "a clone. Only a job's submitter may reuse its secret values.",
    )
    max_retries = serializers.IntegerField(required=False, help_text=FIELDS["max_retries"].help)
    idempotency_key = text("idempotency_key", required=False, allow_blank=True)
    # A Ray job (kind "ray"): the workers are the fields above; the head and what it runs are these.
    kind = KindField(
        choices=[(k.value, k.label) for k in submission.PUBLIC_KINDS],
        required=False,
        help_text="job (default), ray or session (interactive).",
    )
    entrypoint = text("entrypoint", required=False, allow_blank=True, help_text=FIELDS["entrypoint"].help)
    runtime_env = serializers.JSONField(required=False, help_text=FIELDS["runtime_env"].help)
    head_cpu = amount(submission.HEAD_CORES, required=False, help_text=FIELDS["head_cpu"].help)
    head_memory_gib = amount(submission.HEAD_GIB, required=False, help_text=FIELDS["head_memory"].help)
    head_accelerators = serializers.IntegerField(required=False, help_text=FIELDS["head_accelerators"].help)
    tpu_type = text("tpu_type", required=False, allow_blank=True)
    tpu_topology = text("tpu_topology", required=False, allow_blank=True)
    # An interactive session (kind "session"): what it runs and after how long idle it ends.
    session_app = serializers.ChoiceField(
        choices=Job.SessionApp.choices, required=False, allow_blank=True, help_text=FIELDS["session_app"].help
    )
    session_idle_minutes = serializers.IntegerField(
        required=False, allow_null=True, help_text=FIELDS["session_idle_minutes"].help
    )

    #: Stand-ins for required fields that failed their checks, so that the rest can still be judged.
    STAND_INS: ClassVar[dict[str, Any]] = {"name": "stand-in", "time_limit": 3600}

    @property
    def actor(self) -> User:
        user = self.context["request"].user
        assert isinstance(user, User)
        return user

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """Resolve the names to objects the user may see; a name of another organization's object gets the
        same answer as one that does not exist."""
        errors: dict[str, str] = {}
        team = self._team(attrs.get("team"), errors)
        if team is not None:
            for resolve in (_project, _tier, _clusters):
                resolve(team, attrs, errors)
        if attrs.get("secret_env_from") is not None:
            number = attrs["secret_env_from"]
            attrs["secret_env_from"] = Job.objects.for_user(self.actor, Action.VIEW).filter(pk=number).first()
            if attrs["secret_env_from"] is None:
                errors["secret_env_from"] = f"No job {number}, or not one you may see."
        attrs["team"] = team
        errors.update(_head_only_for_ray(attrs))
        if errors:
            raise serializers.ValidationError(errors)
        return attrs

    def _team(self, ref: int | str | None, errors: dict[str, str]) -> Team | None:
        if ref is None:
            mine = teams_for_submission(self.actor)
            if not mine:
                raise PermissionDenied("You may not submit jobs to any team.")
            if len(mine) > 1:
                errors["team"] = f"Choose a team: {', '.join(t.slug for t in mine)}."
                return None
            return mine[0]
        visible = Team.objects.for_user(self.actor, Action.VIEW).select_related("organization")
        found: list[Team] = find(visible, ref)
        if not found:
            errors["team"] = f"No team {ref!r}."
            return None
        if len(found) > 1:
            errors["team"] = f"Several of your organizations have a team {ref!r}: give its id (a number)."
            return None
        return found[0]

    def checked_request(self, idempotency_header: str | None = None) -> JobRequest:
        """The request (``job_request``) if it is valid; else a ``ValidationError`` naming every bad field at
        once: this serializer's own errors and, where the rest can still be judged (the team is known),
        ``actions.validate``'s errors on the other fields, found with the failed fields left out (or, if
        required, given stand-ins). A field in error keeps this serializer's message."""
        if self.is_valid():
            return self.job_request(idempotency_header)
        errors = dict(self.errors)
        for name, messages in self._errors_of_the_rest().items():
            errors.setdefault(name, messages)
        raise serializers.ValidationError(errors)

    def _errors_of_the_rest(self) -> dict[str, Any]:
        if not isinstance(self.initial_data, Mapping):
            return {}
        errors: dict[str, Any] = {}
        failed = set(self.errors)
        while True:  # the fields' own checks, then the names they resolve: each round leaves out more
            if {"team", api_settings.NON_FIELD_ERRORS_KEY} & failed:
                return errors  # no team to judge the rest by
            rest = {name: value for name, value in self.initial_data.items() if name in self.fields}
            rest = {name: value for name, value in rest.items() if name not in failed}
            rest.update({name: value for name, value in self.STAND_INS.items() if name in failed})
            others = JobSubmissionSerializer(data=rest, context=self.context)
            try:
                if others.is_valid():
                    break
            except PermissionDenied:
                return errors
            fresh = {name: messages for name, messages in others.errors.items() if name not in failed}
            if not fresh:
                return errors
            errors.update(fresh)
            failed |= set(fresh)
        try:
            actions.validate(self.actor, others.job_request())
        except DjangoValidationError as error:
            if hasattr(error, "error_dict"):
                errors.update({API_FIELD_NAMES.get(k, k): v for k, v in error.message_dict.items() if k not in failed})
        except DjangoPermissionDenied:
            pass  # the fields are answered first; who may submit is the next request's answer
        return errors

    def job_request(self, idempotency_header: str | None = None) -> JobRequest:
        """The validated request in engine units; ``idempotency_header`` is the ``Idempotency-Key`` header."""
        data = self.validated_data
        key = data.get("idempotency_key", "")
        if idempotency_header is not None:
            if key and key != idempotency_header:
                raise serializers.ValidationError(
                    {"idempotency_key": ["The Idempotency-Key header and the idempotency_key field differ."]}
                )
            if problem := message_of(check_max_length, idempotency_header, submission.limit("idempotency_key")):
                raise serializers.ValidationError({"idempotency_key": [problem]})
            key = idempotency_header
        fields: dict[str, Any] = {name: data[name] for name in AS_GIVEN if data.get(name) is not None}
        for name, unit in PEOPLE_UNITS.items():
            if name in data:
                fields[unit.field] = unit.to_engine(data[name])
        return JobRequest(
            team=data["team"], name=data["name"], time_limit=data["time_limit"], idempotency_key=key, **fields
        )


def _head_only_for_ray(attrs: dict[str, Any]) -> dict[str, str]:
    """A head's shape given for a job that is not a Ray job: refused by name rather than dropped."""
    if attrs.get("kind", Job.Kind.JOB) == Job.Kind.RAY:
        return {}
    given = [name for name in ("head_cpu", "head_memory_gib", "head_accelerators") if name in attrs]
    return dict.fromkeys(given, "Only a Ray job (kind ray) has a head.")


def _project(team: Team, attrs: dict[str, Any], errors: dict[str, str]) -> None:
    """The project named (a slug or an id) among the team's."""
    if attrs.get("project") is not None:
        ref = attrs["project"]
        projects = find(Project.objects.filter(team=team), ref)
        attrs["project"] = projects[0] if projects else None
        if not projects:
            errors["project"] = f"Team {team.slug} has no project {ref!r}."


def _tier(team: Team, attrs: dict[str, Any], errors: dict[str, str]) -> None:
    """The priority tier named among the organization's."""
    if attrs.get("tier") is not None:
        name = attrs["tier"]
        attrs["tier"] = PriorityTier.objects.filter(organization=team.organization_id, name=name).first()
        if attrs["tier"] is None:
            known = ", ".join(t.name for t in tiers_for(team)) or "none"
            errors["tier"] = f"No priority tier {name!r}. Known: {known}."


def _clusters(team: Team, attrs: dict[str, Any], errors: dict[str, str]) -> None:
    """The clusters named (slugs) among the organization's."""
    if attrs.get("clusters"):
        org = team.organization_id
        slugs = list(dict.fromkeys(attrs["clusters"]))
        found = {c.slug: c for c in Cluster.objects.filter(organization=org, slug__in=slugs)}
        if missing := [slug for slug in slugs if slug not in found]:
            known = ", ".join(Cluster.objects.filter(organization=org).values_list("slug", flat=True))
            errors["clusters"] = f"No cluster {', '.join(missing)}. Known: {known or 'none'}."
        attrs["clusters"] = [found[slug] for slug in slugs if slug in found]


#: Fields in people's units: the API's name and the unit it converts from.
PEOPLE_UNITS = {
    "accelerator_fraction": submission.FRACTION,
    "cpu": submission.CORES,
    "memory_gib": submission.GIB,
    "head_cpu": submission.HEAD_CORES,
    "head_memory_gib": submission.HEAD_GIB,
}
#: What ``job_request`` gives apart from the other fields (required, or taken from a header too).
GIVEN_APART = ("team", "name", "time_limit", "idempotency_key")
#: Fields that go to ``JobRequest`` as they are: every field of the serializer the request has by the same name,
#: but those in people's units and those given apart. A new request field the API takes is declared once, above.
_REQUEST_FIELDS = {f.name for f in dataclasses.fields(JobRequest)}
AS_GIVEN = tuple(
    name
    for name in JobSubmissionSerializer._declared_fields
    if name in _REQUEST_FIELDS and name not in PEOPLE_UNITS and name not in GIVEN_APART
)
#: ``actions.validate`` names JobRequest's fields; the API's names for those in other units.
API_FIELD_NAMES = submission.API_NAMES


class CancelSerializer(serializers.Serializer[Any]):
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=actions.MAX_REASON)


class InterventionSerializer(serializers.Serializer[Any]):
    """An admin's force-preempt or requeue: why, for the job's timeline and the audit log."""

    reason = StrictCharField(max_length=actions.MAX_REASON)


class PreviewSerializer(serializers.Serializer[Any]):
    cost_per_hour = serializers.FloatField(allow_null=True, help_text="Of the placement it would get.")
    starts_now = serializers.BooleanField()
    estimated_start = serializers.DateTimeField(allow_null=True)
    reason = serializers.CharField(help_text="Why it would wait (a pending reason code); empty if it starts now.")
    message = serializers.CharField()


class NodeShareSerializer(serializers.Serializer[Any]):
    name = serializers.CharField()
    workers = serializers.IntegerField()
    accelerators = serializers.ListField(
        child=serializers.ListField(child=serializers.IntegerField()), help_text="[index, milli] pairs."
    )


class AttemptSerializer(serializers.ModelSerializer[Attempt]):
    """One attempt, for the job's detail. ``checkpoints`` is counted from the context's
    ``checkpoint_counts`` (the job's kept checkpoints by attempt), read once for all its attempts."""

    cluster: serializers.SlugRelatedField[Cluster] = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    cost = serializers.SerializerMethodField()
    # "" where there is none: declared so (a blank choice; text, not a URI), as the answer holds it.
    stop_reason = serializers.ChoiceField(choices=Attempt.Stop.choices, allow_blank=True, read_only=True)
    dashboard_url = serializers.CharField(
        read_only=True, help_text='The cluster\'s page of it (a Ray dashboard); "" if none.'
    )
    nodes = serializers.SerializerMethodField()
    state = serializers.SerializerMethodField(help_text="Where it stands or how it ended, in words.")
    ended_because = serializers.SerializerMethodField(
        help_text="Why it ended or is being stopped, in words: the reason, the cluster's message, the exit code."
    )
    checkpoints = serializers.SerializerMethodField(help_text="Checkpoints it reported (of those the job keeps).")

    class Meta:
        model = Attempt
        fields = [
            "number",
            "cluster",
            "flavor",
            "cost_per_hour",
            "cost",
            "admitted_at",
            "submitted_at",
            "started_at",
            "ended_at",
            "outcome",
            "state",
            "reason",
            "message",
            "exit_code",
            "dashboard_url",
            "ended_because",
            "stop_reason",
            "unknown_since",
            "borrowing",
            "backfilled",
            "nodes",
            "checkpoints",
        ]
        read_only_fields = fields

    @extend_schema_field(MONEY)
    def get_cost(self, attempt: Attempt) -> str:
        return str(costs.attempt_cost(attempt))

    @extend_schema_field(NodeShareSerializer(many=True))
    def get_nodes(self, attempt: Attempt) -> list[dict[str, Any]]:
        return [
            {"name": a.node.name, "workers": a.workers, "accelerators": a.accelerators}
            for a in attempt.assignments.all()
        ]

    def get_state(self, attempt: Attempt) -> str:
        return state_words(attempt)

    def get_ended_because(self, attempt: Attempt) -> str:
        return reason_words(attempt)

    def get_checkpoints(self, attempt: Attempt) -> int:
        counts = self.context.get("checkpoint_counts")
        if counts is None:
            return Checkpoint.objects.filter(job_id=attempt.job_id, attempt=attempt.number).count()
        return int(counts[attempt.number])


class CheckpointSerializer(serializers.ModelSerializer[Checkpoint]):
    class Meta:
        model = Checkpoint
        fields = ["attempt", "location", "step", "reported_at"]
        read_only_fields = fields


class CheckpointReportSerializer(StrictSerializer):
    """What a job reports: where its checkpoint is and, optionally, how far it got. The rest of the checks
    (a location on one line, at most 500 characters; a step not below 0) are ``checkpoints.report``'s."""

    location = StrictCharField(allow_blank=True, trim_whitespace=False, help_text="Where the checkpoint is.")
    step = StrictIntegerField(
        required=False, allow_null=True, default=None, help_text="How far it got: a step, an epoch, a count."
    )


class ProgressReportSerializer(StrictSerializer):
    """How far one worker got (``checkpoints.report_progress`` checks the ranges)."""

    worker = StrictIntegerField(
        required=False, default=0, help_text="The worker's index among the job's nodes (its node rank); 0 by default."
    )
    step = StrictIntegerField(help_text="Steps it has made (a count that only grows).")
    step_seconds = StrictFloatField(
        required=False,
        allow_null=True,
        default=None,
        help_text="Its own seconds per step lately: compute, without the wait for its peers, where it can tell.",
    )


class ProgressSerializer(serializers.ModelSerializer[Progress]):
    class Meta:
        model = Progress
        fields = ["attempt", "worker", "step", "step_seconds", "reported_at"]
        read_only_fields = fields


class ExitReportSerializer(StrictSerializer):
    """What a job reports when its program ends: the exit code (``checkpoints.report_exit`` checks its range)."""

    exit_code = StrictIntegerField(help_text="The program's exit code, 0 to 255 (128 + n: killed by signal n).")


class SessionReportSerializer(StrictSerializer):
    """What an interactive session's program reports (``sessions.report`` checks the address)."""

    url = serializers.CharField(
        required=False, max_length=2000, help_text="Where the session's app listens, e.g. http://10.0.0.7:8888/."
    )
    ended = serializers.ChoiceField(
        choices=[("idle", "idle")], required=False, help_text="idle: the app stopped itself after its idle time."
    )


class EndpointReportSerializer(StrictSerializer):
    """What a service replica's program reports (``replicas.report`` checks the address)."""

    url = serializers.CharField(max_length=2000, help_text="Where the replica listens, e.g. http://10.0.0.7:8123/.")


class SessionLinkSerializer(serializers.Serializer[Any]):
    url = serializers.CharField(
        help_text="Opens the session once, within 2 minutes (a one-time code in it): for its submitter's eyes only."
    )


class ExitReportedSerializer(serializers.ModelSerializer[Attempt]):
    attempt = serializers.IntegerField(source="number")
    exit_code = serializers.IntegerField(source="reported_exit_code")

    class Meta:
        model = Attempt
        fields = ["attempt", "exit_code", "reported_at"]
        read_only_fields = fields


def _current(job: Job) -> Attempt | None:
    """The attempt holding capacity now (from the prefetched attempts), if the job is placed."""
    if job.state not in PLACED:
        return None
    return next((a for a in job.attempts.all() if a.number == job.attempt), None)


class JobListSerializer(serializers.ModelSerializer[Job]):
    team: serializers.SlugRelatedField[Team] = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    project: serializers.SlugRelatedField[Project] = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    queue: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(slug_field="name", read_only=True)
    tier: serializers.SlugRelatedField[PriorityTier] = serializers.SlugRelatedField(slug_field="name", read_only=True)
    submitted_by: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )
    accelerator_fraction = serializers.SerializerMethodField()
    cluster = serializers.SerializerMethodField(help_text="Where it runs now (its current placement).")
    cost_so_far = serializers.SerializerMethodField(help_text="Price per hour x hours held, over all attempts.")

    class Meta:
        model = Job
        fields = [
            "id",
            "name",
            "team",
            "project",
            "queue",
            "tier",
            "submitted_by",
            "state",
            "state_changed_at",
            "submitted_at",
            "started_at",
            "finished_at",
            "pending_reason",
            "pending_message",
            "queue_position",
            "estimated_start",
            "accelerator_types",
            "accelerators",
            "accelerator_fraction",
            "workers",
            "cluster",
            "cost_so_far",
            "array",
            "array_index",
        ]
        read_only_fields = fields
        extra_kwargs = {
            "pending_reason": {"help_text": "Why it waits (a pending reason code); empty unless it is waiting."},
            "queue_position": {
                "help_text": "Its place among the jobs waiting, as of the last cycle: 1 is the next to be considered."
            },
            "estimated_start": {
                "help_text": "When it should start, by running jobs' time limits and the queue ahead; null: unbounded."
            },
        }

    def get_accelerator_fraction(self, job: Job) -> float:
        return job.accelerator_milli / 1000

    def get_cluster(self, job: Job) -> str | None:
        current = _current(job)
        return current.cluster.slug if current else None

    @extend_schema_field(MONEY)
    def get_cost_so_far(self, job: Job) -> str:
        return str(costs.cost_so_far(job))


class PlacementSerializer(serializers.Serializer[Any]):
    attempt = serializers.IntegerField(source="number")
    cluster = serializers.CharField(source="cluster.slug")
    flavor = serializers.CharField()
    nodes = serializers.SerializerMethodField()
    cost_per_hour = serializers.DecimalField(max_digits=12, decimal_places=4)
    admitted_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    borrowing = serializers.BooleanField()

    @extend_schema_field(NodeShareSerializer(many=True))
    def get_nodes(self, attempt: Attempt) -> list[dict[str, Any]]:
        return AttemptSerializer().get_nodes(attempt)


class DependencySerializer(serializers.ModelSerializer[Dependency]):
    class Meta:
        model = Dependency
        fields = ["kind", "on_job", "on_array"]
        read_only_fields = fields


class JobSerializer(JobListSerializer):
    clusters: serializers.SlugRelatedField[Cluster] = serializers.SlugRelatedField(
        slug_field="slug", many=True, read_only=True
    )
    session_app = serializers.ChoiceField(
        choices=Job.SessionApp.choices, allow_blank=True, read_only=True, help_text='The app of a session; "" else.'
    )
    cpu = serializers.SerializerMethodField(help_text="Cores per worker.")
    memory_gib = serializers.SerializerMethodField(help_text="GiB per worker.")
    head_cpu = serializers.SerializerMethodField(help_text="Cores of the Ray head (a Ray job).")
    head_memory_gib = serializers.SerializerMethodField(help_text="GiB of the Ray head (a Ray job).")
    placement = serializers.SerializerMethodField()
    attempts = serializers.SerializerMethodField()
    last_checkpoint = serializers.SerializerMethodField(help_text="The latest checkpoint it reported, if any.")
    dependencies = serializers.SerializerMethodField(help_text="What it waits for (a pipeline).")
    secret_env_names = serializers.ListField(
        child=serializers.CharField(),
        read_only=True,
        help_text="Names of its secret environment values (never the values).",
    )
    session_ready = serializers.SerializerMethodField(
        help_text="An interactive session that runs and has said where it listens: its submitter opens it with "
        "GET .../session/ (qm open) or /jobs/{id}/open/ in the portal."
    )

    class Meta(JobListSerializer.Meta):
        fields = [
            *JobListSerializer.Meta.fields,
            "cpu",
            "memory_gib",
            "topology_level",
            "topology_mode",
            "time_limit",
            "preemptible",
            "spot",
            "checkpoint_location",
            "data_locality",
            "clusters",
            "regions",
            "max_price_per_hour",
            "image",
            "command",
            "script",
            "env",
            "secret_env_names",
            "kind",
            "entrypoint",
            "runtime_env",
            "head_cpu",
            "head_memory_gib",
            "head_accelerators",
            "max_retries",
            "tpu_type",
            "tpu_topology",
            "session_app",
            "session_idle_minutes",
            "session_ready",
            "retries",
            "attempt",
            "not_before",
            "message",
            "idempotency_key",
            "cloned_from",
            "placement",
            "attempts",
            "last_checkpoint",
            "array_params",
            "on_dependency_failure",
            "dependencies",
        ]
        read_only_fields = fields

    @extend_schema_field(DependencySerializer(many=True))
    def get_dependencies(self, job: Job) -> list[dict[str, Any]]:
        if not getattr(job, "has_dependencies", True):  # the view's annotation: none, no query needed
            return []
        return list(DependencySerializer(job.dependencies.order_by("pk"), many=True).data)

    def get_cpu(self, job: Job) -> float:
        return job.cpu / 1000

    def get_session_ready(self, job: Job) -> bool:
        current = _current(job) if job.kind == Job.Kind.SESSION and job.state == Job.State.RUNNING else None
        return current is not None and bool(current.session_url)

    def get_head_cpu(self, job: Job) -> float:
        return job.head_cpu / 1000

    def get_head_memory_gib(self, job: Job) -> float:
        return round(job.head_memory / 1024, 3)

    def get_memory_gib(self, job: Job) -> float:
        return round(job.memory / 1024, 3)

    @extend_schema_field(PlacementSerializer(allow_null=True))
    def get_placement(self, job: Job) -> dict[str, Any] | None:
        current = _current(job)
        return PlacementSerializer(current).data if current else None

    @extend_schema_field(AttemptSerializer(many=True))
    def get_attempts(self, job: Job) -> list[dict[str, Any]]:
        context = {**self.context, "checkpoint_counts": checkpoint_counts(job.checkpoints.all())}
        return list(AttemptSerializer(job.attempts.all(), many=True, context=context).data)

    @extend_schema_field(CheckpointSerializer(allow_null=True))
    def get_last_checkpoint(self, job: Job) -> dict[str, Any] | None:
        # The job's checkpoints, newest first: prefetched so by the view (and at most ``checkpoints.KEEP``).
        latest = max(job.checkpoints.all(), key=lambda c: (c.reported_at, c.pk), default=None)
        return dict(CheckpointSerializer(latest).data) if latest else None


class JobEventSerializer(serializers.ModelSerializer[JobEvent]):
    actor: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = JobEvent
        fields = ["id", "created_at", "from_state", "to_state", "reason", "message", "attempt", "actor", "detail"]
        read_only_fields = fields
