"""The service form (new and edit): text fields as people type them, turned into the request
``serving/submission.py`` reads (the API's body), so the pages and the API refuse the same things in the same
words. Errors come back by the request's field names, which are this form's."""

from __future__ import annotations

import shlex
from typing import Any

from django import forms

from registry.models import ModelVersion
from scheduler.actions import tiers_for
from serving.models import Service
from tenancy.models import Team

ENV_HELP = "One NAME=value per line."


class ServiceForm(forms.Form):
    team = forms.ChoiceField(required=False)
    project = forms.CharField(required=False, help_text="A project's slug (optional).")
    name = forms.CharField(max_length=60, help_text="Lower-case letters, digits and dashes, e.g. chat-api.")
    image = forms.CharField(max_length=500, required=False, help_text="The container image.")
    command = forms.CharField(
        max_length=2000, required=False, help_text="e.g. python3 deploy/model_server.py --port $PORT"
    )
    env = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False, help_text=ENV_HELP)
    port = forms.CharField(initial="0", help_text="0: the program takes $PORT.")
    health_path = forms.CharField(initial="/health", help_text="Probed for a 200.")
    accelerators = forms.CharField(initial="0", help_text="Per replica.")
    cpu = forms.CharField(label="CPU (cores)", initial="1", help_text="Per replica.")
    memory_gib = forms.CharField(label="Memory (GiB)", initial="2", help_text="Per replica.")
    min_replicas = forms.CharField(initial="1", help_text="0 lets it scale to zero.")
    max_replicas = forms.CharField(initial="4")
    metric = forms.ChoiceField(choices=Service.Metric.choices, initial=Service.Metric.RPS)
    target = forms.CharField(initial="10", help_text="The metric's value one replica should carry.")
    scale_to_zero_after = forms.CharField(
        required=False, label="Scale to zero after (s)", help_text="Idle seconds before the last replica stops."
    )
    model_version = forms.ChoiceField(required=False, label="Model version", help_text="From the registry.")
    tier = forms.ChoiceField(
        required=False,
        label="Priority tier",
        help_text="Default: the team's highest tier that is not preempted, else the organization's default.",
    )
    public = forms.BooleanField(required=False, help_text="The endpoint answers without an API token.")
    max_inflight = forms.CharField(
        required=False,
        label="Requests at once",
        help_text="At its replicas at the same time; more wait their turn. Empty: the data plane's limit.",
    )
    max_rps = forms.CharField(
        required=False,
        label="Requests a second",
        help_text="More are told to come back later (429). Empty: the data plane's limit, if any.",
    )

    def __init__(self, *args: Any, teams: list[Team], service: Service | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.service = service
        team_ids = [t.pk for t in teams] if service is None else [service.team_id]
        team_field, version_field, tier_field = self.fields["team"], self.fields["model_version"], self.fields["tier"]
        assert isinstance(team_field, forms.ChoiceField)
        assert isinstance(version_field, forms.ChoiceField)
        assert isinstance(tier_field, forms.ChoiceField)
        tiers = {t.name: t for team in (teams if service is None else [service.team]) for t in tiers_for(team)}
        tier_field.choices = [("", "default")] + [
            (t.name, f"{t.name}{'' if t.preemptible else ' (not preempted)'}") for t in tiers.values()
        ]
        team_field.choices = [(str(t.pk), t.name) for t in teams]
        versions = ModelVersion.objects.filter(model__team_id__in=team_ids, stored=True).select_related("model")
        version_field.choices = [("", "none")] + [
            (str(v.pk), f"{v.model.name} {v.version}") for v in versions.order_by("model__name", "-published_at")
        ]
        if service is not None:
            for fixed in ("team", "project", "name"):
                del self.fields[fixed]

    def request(self) -> tuple[dict[str, Any], dict[str, list[str]]]:
        """The form's values as the request's (the API's) body, and what this form itself finds wrong (lines
        of the environment that are not NAME=value), to be shown with the request's own errors."""
        data = self.cleaned_data
        body: dict[str, Any] = {}
        for name in ("image", "command", "port", "health_path", "accelerators", "cpu", "memory_gib"):
            body[name] = data[name]
        for name in ("min_replicas", "max_replicas", "metric", "target"):
            body[name] = data[name]
        body["scale_to_zero_after"] = data["scale_to_zero_after"] or None
        body["model_version"] = data["model_version"] or None
        body["public"] = bool(data["public"])
        body["max_inflight"] = data["max_inflight"] or None
        body["max_rps"] = data["max_rps"] or None
        body["tier"] = data["tier"] or None
        env: dict[str, str] = {}
        errors: dict[str, list[str]] = {}
        for line in data["env"].splitlines():
            if line.strip():
                name, sep, value = line.strip().partition("=")
                if not sep or not name:
                    errors.setdefault("env", []).append(f"Not NAME=value: {line.strip()!r}.")
                env[name] = value
        body["env"] = env
        if self.service is None:
            body["name"] = data["name"]
            body["team"] = data["team"] or None
            body["project"] = data["project"] or None
        return body, errors

    def add_errors(self, errors: dict[str, list[str]]) -> None:
        for name, messages in errors.items():
            self.add_error(name if name in self.fields else None, " ".join(messages))


def initial_of(service: Service) -> dict[str, Any]:
    """An edit form's starting values: the newest revision's program and the service's scaling."""
    revision = service.revisions.order_by("-number").first() or service.revision
    assert revision is not None
    return {
        "image": revision.image,
        "command": shlex.join(revision.command),
        "env": "\n".join(f"{k}={v}" for k, v in revision.env.items()),
        "port": revision.port,
        "health_path": revision.health_path,
        "accelerators": revision.accelerators,
        "cpu": f"{revision.cpu / 1000:g}",
        "memory_gib": f"{revision.memory / 1024:g}",
        "model_version": revision.model_version_id or "",
        "min_replicas": service.min_replicas,
        "max_replicas": service.max_replicas,
        "metric": service.metric,
        "target": f"{service.target:g}",
        "scale_to_zero_after": service.scale_to_zero_after or "",
        "public": service.public,
        "max_inflight": service.max_inflight or "",
        "max_rps": service.max_rps or "",
        "tier": service.tier.name if service.tier else "",
    }


class ScaleForm(forms.Form):
    min_replicas = forms.CharField()
    max_replicas = forms.CharField()
