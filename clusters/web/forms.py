"""Forms of the cluster pages. They validate shape; the actions validate meaning and permission."""

from __future__ import annotations

import json
import re
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.db.models import QuerySet

from clusters.actions import CLEAR, LIMITS, MAX_GRACE, MAX_REASON, PREFERENCE, SECRET_OPTION, TIMEOUT_SECONDS
from clusters.actions.elastic import CAPACITY_TYPES
from clusters.actions.elastic import MAX_NAME as POOL_NAME
from clusters.actions.elastic import MOST as POOL_MOST
from clusters.backends import kinds
from clusters.backends.kinds import Credential
from clusters.capacity import CapacityType
from clusters.models import AcceleratorType, Cluster, ElasticPool
from common import params
from common.web.forms import apply_errors
from tenancy.models import Organization


class ReasonForm(forms.Form):
    """Drain or resume a node: the reason goes to the audit log and to the people whose jobs move."""

    reason = forms.CharField(
        max_length=MAX_REASON,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Shown in the audit log and to the people whose jobs this moves.",
    )


#: A duration as people type it: seconds, or a number with a unit (``90s``, ``10m``, ``2h``, ``1d``).
DURATION = re.compile(r"\s*([0-9]{1,9})\s*([smhd]?)\s*", re.IGNORECASE)
UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


class DurationField(forms.Field):
    """Whole seconds, typed as seconds or with a unit (``600``, ``10m``, ``2h``) within ``low``..``high``."""

    widget = forms.TextInput

    def __init__(self, *, low: int, high: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.low, self.high = low, high

    def to_python(self, value: Any) -> int | None:
        text = str(value).strip() if value is not None else ""
        if not text:
            return None
        match = DURATION.fullmatch(text)
        if match is None:
            raise ValidationError("Give seconds, or a number with a unit: 90s, 10m, 2h, 1d.", code="invalid")
        seconds = int(match.group(1)) * UNIT_SECONDS[match.group(2).lower()]
        if not self.low <= seconds <= self.high:
            raise ValidationError(f"From {self.low} to {self.high} seconds.", code="out_of_range")
        return seconds


class DrainForm(ReasonForm):
    """Drain a node: the reason, and how long its running jobs get to checkpoint (else each job's tier grace)."""

    grace_seconds = DurationField(
        low=0,
        high=MAX_GRACE,
        required=False,
        label="Grace (optional)",
        help_text="How long running jobs get to checkpoint before they move: seconds or e.g. 10m. "
        "Empty: each job's tier grace.",
    )


class SecretInput(forms.PasswordInput):
    """A credential field: typed in, never rendered back (not even after an error)."""

    def __init__(self, attrs: dict[str, Any] | None = None) -> None:
        super().__init__({"autocomplete": "off", **(attrs or {})}, render_value=False)


class SecretTextarea(forms.Textarea):
    """A multi-line credential (a CA bundle, a key file): typed or pasted in, never rendered back."""

    def get_context(self, name: str, value: Any, attrs: dict[str, Any] | None) -> dict[str, Any]:
        return super().get_context(name, None, {"autocomplete": "off", "spellcheck": "false", **(attrs or {})})


def credential_fields() -> dict[str, dict[str, str]]:
    """Per kind, its credential fields: form field (``<kind>_<key>``) -> the key its backend reads, as its
    descriptor names them (``clusters.backends.kinds``)."""
    return {
        kind.name: {f"{kind.name}_{credential.key}": credential.key for credential in kind.credentials}
        for kind in kinds.every()
        if kind.credentials
    }


def _credential_field(credential: Credential) -> forms.CharField:
    if credential.multiline:
        widget: forms.Widget = SecretTextarea(attrs={"rows": 3})
    else:
        widget = SecretInput(attrs={"type": "text"}) if credential.visible else SecretInput()
    return forms.CharField(
        label=credential.label,
        required=False,
        max_length=credential.max_length,
        widget=widget,
        help_text=credential.help_text,
    )


def _shown(options: Any) -> Any:
    """Options as the edit form shows them: a secret put there by mistake (older rows; the actions refuse
    new ones) is hidden, and saving asks for it to be moved to the credentials."""
    if not isinstance(options, dict):
        return options
    return {key: "(hidden)" if SECRET_OPTION.search(str(key)) else value for key, value in options.items()}


class ClusterForm(forms.Form):
    """Register or edit a cluster. Credentials are write-only: left empty, the stored ones are kept; the
    page says only whether there are any. On edit the kind is fixed and only its credentials are asked."""

    name = forms.CharField(max_length=LIMITS["name"])
    slug = forms.SlugField(max_length=LIMITS["slug"], required=False, help_text="Left empty, it is made from the name.")
    kind = forms.ChoiceField(choices=kinds.choices)
    endpoint = forms.CharField(
        max_length=LIMITS["endpoint"],
        required=False,
        help_text="The API URL: slurmrestd, the Kubernetes API server, or https://tpu.googleapis.com. "
        "Empty for a simulated cluster.",
    )
    region = forms.CharField(max_length=LIMITS["region"])
    levels = forms.CharField(
        max_length=400,
        required=False,
        help_text="Topology level names, widest first, separated by commas, e.g. block, rack.",
    )
    options = forms.CharField(
        required=False,
        max_length=20_000,
        widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false"}),
        help_text="A JSON object, e.g. "
        + "; ".join(f"{kind.label}: {kind.options_example}" for kind in kinds.every() if kind.options_example)
        + ".",
    )
    preference = forms.IntegerField(
        min_value=PREFERENCE[0],
        max_value=PREFERENCE[1],
        initial=50,
        help_text="0-100: how much the scheduler prefers this cluster.",
    )
    failover_after = DurationField(
        low=TIMEOUT_SECONDS[0],
        high=TIMEOUT_SECONDS[1],
        required=False,
        initial="15m",
        label="Fail over after",
        help_text="How long the cluster may stay silent before its running jobs restart elsewhere: "
        "seconds or e.g. 15m, 2h (a minute to a week).",
    )
    start_timeout = DurationField(
        low=TIMEOUT_SECONDS[0],
        high=TIMEOUT_SECONDS[1],
        required=False,
        initial="15m",
        label="Start timeout",
        help_text="How long a job may take to have every worker running before it is requeued whole: "
        "seconds or e.g. 15m (a minute to a week).",
    )
    clear_credentials = forms.BooleanField(
        required=False, label="Clear the stored credentials", help_text="Removes them; nothing else is changed."
    )

    def __init__(
        self,
        *args: Any,
        cluster: Cluster | None = None,
        organizations: QuerySet[Organization] | None = None,
        simulated: bool = False,
        **kwargs: Any,
    ) -> None:
        """``simulated``: whether the kinds offered include a simulated cluster (the installation's operators
        only, where it runs them)."""
        if cluster is not None and "initial" not in kwargs:
            kwargs["initial"] = {
                "name": cluster.name,
                "slug": cluster.slug,
                "kind": cluster.kind,
                "endpoint": cluster.endpoint,
                "region": cluster.region,
                "levels": ", ".join(cluster.levels or []),
                "options": json.dumps(_shown(cluster.options), indent=1, sort_keys=True),
                "preference": cluster.preference,
                "failover_after": cluster.failover_after,
                "start_timeout": cluster.start_timeout,
            }
        super().__init__(*args, **kwargs)
        for kind in kinds.every():  # each kind's credentials, as its descriptor asks for them
            for credential in kind.credentials:
                self.fields[f"{kind.name}_{credential.key}"] = _credential_field(credential)
        self.order_fields([name for name in self.fields if name != "clear_credentials"])
        self.cluster = cluster
        self.organizations = organizations
        if organizations is not None and organizations.count() > 1:
            # Only admins of several organizations are asked which one (superusers, mostly).
            self.fields["organization"] = forms.ModelChoiceField(queryset=organizations, to_field_name="slug")
            self.order_fields(["organization"])
        if cluster is None:
            del self.fields["clear_credentials"]
            if not simulated:
                offered = self.fields["kind"]
                assert isinstance(offered, forms.ChoiceField)
                offered.choices = [(k.name, k.label) for k in kinds.every() if not k.operators_only]
        else:
            del self.fields["kind"]  # fixed once registered
            for name, fields in credential_fields().items():
                for field in fields if name != cluster.kind else ():
                    del self.fields[field]

    def setting_fields(self) -> list[forms.BoundField]:
        """The cluster's settings (not its credentials), for the template."""
        names = (
            "organization",
            "name",
            "slug",
            "kind",
            "endpoint",
            "region",
            "levels",
            "options",
            "preference",
            "failover_after",
            "start_timeout",
        )
        return [self[name] for name in names if name in self.fields]

    def credential_groups(self) -> list[tuple[str, list[forms.BoundField]]]:
        """(kind label, its credential fields) for the template, one fieldset per kind."""
        return [
            (kinds.get(kind).label, [self[f] for f in fields])
            for kind, fields in credential_fields().items()
            if all(f in self.fields for f in fields)
        ]

    def clean_levels(self) -> list[str]:
        return [level.strip() for level in self.cleaned_data["levels"].split(",") if level.strip()]

    def clean_options(self) -> Any:
        text = self.cleaned_data["options"].strip()
        if not text:
            return {}
        try:
            return params.parse_json(text, "options")
        except params.BadParameter as bad:
            raise forms.ValidationError(bad.reason) from None

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        kind = self.cluster.kind if self.cluster is not None else cleaned.get("kind")
        for other, fields in credential_fields().items():
            for field in fields if other != kind else ():
                if field in self.fields and (cleaned.get(field) or "").strip():
                    self.add_error(field, f"Only for {kinds.get(other).label} clusters; this one is not.")
        return cleaned

    def organization(self) -> Organization:
        """The organization a new cluster is registered in."""
        if "organization" in self.fields:
            chosen: Organization = self.cleaned_data["organization"]
            return chosen
        assert self.organizations is not None
        only: Organization = self.organizations.get()
        return only

    def settings(self) -> dict[str, Any]:
        """The cluster's fields for ``create_cluster`` / ``update_cluster``."""
        names = ("name", "slug", "endpoint", "region", "levels", "options", "preference")
        values = {name: self.cleaned_data[name] for name in names}
        for name in ("failover_after", "start_timeout"):  # empty: as it was (15 minutes for a new cluster)
            if self.cleaned_data.get(name) is not None:
                values[name] = self.cleaned_data[name]
        if "kind" in self.fields:
            values["kind"] = self.cleaned_data["kind"]
        return values

    def credentials(self) -> dict[str, str] | str | None:
        """What was typed for the cluster's kind (``CLEAR`` when asked to clear; None when nothing)."""
        if self.cleaned_data.get("clear_credentials"):
            return CLEAR
        kind = self.cluster.kind if self.cluster is not None else self.cleaned_data["kind"]
        given = {key: self.cleaned_data[field] for field, key in credential_fields().get(kind, {}).items()}
        return {key: value for key, value in given.items() if value.strip()} or None

    def apply_errors(self, exc: ValidationError) -> None:
        """An action's errors beside their fields. The actions name the credentials as a whole: that
        error goes to the kind's first credential field."""
        if hasattr(exc, "error_dict") and "credentials" in exc.error_dict:
            kind = self.cluster.kind if self.cluster is not None else self.cleaned_data.get("kind", "")
            field = next((f for f in credential_fields().get(kind, {}) if f in self.fields), "credentials")
            errors = dict(exc.error_dict)
            errors[field] = errors.pop("credentials")
            exc = ValidationError(errors)
        apply_errors(self, exc)


class DateTimeLocalInput(forms.DateTimeInput):
    input_type = "datetime-local"

    def __init__(self) -> None:
        super().__init__(format="%Y-%m-%dT%H:%M")


class MaintenanceForm(forms.Form):
    """Plan a maintenance window on some nodes of a cluster (all of them when none are named)."""

    starts_at = forms.DateTimeField(label="Starts (UTC)", widget=DateTimeLocalInput())
    ends_at = forms.DateTimeField(label="Ends (UTC)", widget=DateTimeLocalInput())
    drain_ahead_minutes = forms.IntegerField(
        min_value=0, max_value=7 * 24 * 60, initial=60, help_text="How long before the start the nodes are drained."
    )
    reason = forms.CharField(max_length=MAX_REASON, widget=forms.Textarea(attrs={"rows": 2}))
    nodes = forms.CharField(
        required=False,
        max_length=20_000,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Node names separated by commas or spaces; empty for every node of the cluster.",
    )

    def clean_nodes(self) -> list[str]:
        names = re.split(r"[\s,]+", self.cleaned_data["nodes"].strip())
        return list(dict.fromkeys(name for name in names if name))


class ProbeTokenForm(forms.Form):
    name = forms.CharField(max_length=80, help_text="What the token is for, e.g. the rack or image using it.")


class ElasticPoolForm(forms.Form):
    """Add or change an elastic pool, in people's units (cores, GiB; durations as 10m, 2h); the action checks the
    values (``clusters.actions.elastic``)."""

    name = forms.CharField(max_length=POOL_NAME, help_text="A short name, unique in the cluster, e.g. h100-spot.")
    flavor = forms.ChoiceField(label="Accelerator type")
    capacity_type = forms.ChoiceField(
        choices=[(value, CapacityType(value).label) for value in CAPACITY_TYPES], initial=CapacityType.ON_DEMAND
    )
    node_accelerators = forms.IntegerField(min_value=1, label="Accelerators a node")
    node_cpu = forms.DecimalField(
        min_value=Decimal("0.001"), max_digits=12, decimal_places=3, label="Cores a node", help_text="For jobs."
    )
    node_memory_gib = forms.DecimalField(
        min_value=Decimal("0.001"), max_digits=14, decimal_places=3, label="GiB a node", help_text="For jobs."
    )
    min_nodes = forms.IntegerField(min_value=0, initial=0, label="Fewest nodes", help_text="Kept once up.")
    max_nodes = forms.IntegerField(min_value=1, label="Most nodes")
    lead_time = DurationField(
        low=0, high=POOL_MOST["lead_time"], initial="10m", help_text="From asking the cloud to a node in service."
    )
    idle_release = DurationField(
        low=0,
        high=POOL_MOST["idle_release"],
        initial="30m",
        label="Released after idle",
        help_text="How long a node stays without work before it is given back.",
    )
    monthly_budget = forms.DecimalField(
        required=False,
        min_value=0,
        max_digits=14,
        decimal_places=2,
        help_text="In the price book's currency; empty for no budget.",
    )
    enabled = forms.BooleanField(
        required=False, initial=True, help_text="Off: nothing more is asked of it; its nodes still go back once idle."
    )

    def __init__(self, *args: Any, cluster: Cluster, pool: ElasticPool | None = None, **kwargs: Any) -> None:
        if pool is not None and "initial" not in kwargs:
            kwargs["initial"] = {
                "name": pool.name,
                "flavor": pool.accelerator.name,
                "capacity_type": pool.capacity_type,
                "node_accelerators": pool.node_accelerators,
                "node_cpu": Decimal(pool.node_cpu) / 1000,
                "node_memory_gib": (Decimal(pool.node_memory) / 1024).quantize(Decimal("0.001")),
                "min_nodes": pool.min_nodes,
                "max_nodes": pool.max_nodes,
                "lead_time": pool.lead_time,
                "idle_release": pool.idle_release,
                "monthly_budget": pool.monthly_budget,
                "enabled": pool.enabled,
            }
        super().__init__(*args, **kwargs)
        flavor = self.fields["flavor"]
        assert isinstance(flavor, forms.ChoiceField)
        names = AcceleratorType.objects.filter(organization=cluster.organization_id).values_list("name", flat=True)
        flavor.choices = [(name, name) for name in names.order_by("name")]

    def settings(self) -> dict[str, Any]:
        """The pool's fields for ``create_pool`` / ``change_pool``, in the model's units (millicores, MiB)."""
        values = {name: self.cleaned_data[name] for name in self.fields if name != "node_memory_gib"}
        values["node_cpu"] = int((values["node_cpu"] * 1000).to_integral_value(ROUND_HALF_UP))
        values["node_memory"] = int((self.cleaned_data["node_memory_gib"] * 1024).to_integral_value(ROUND_HALF_UP))
        return values

    def apply_errors(self, exc: ValidationError) -> None:
        """An action's errors beside their fields (node_memory is the form's node_memory_gib)."""
        if hasattr(exc, "error_dict") and "node_memory" in exc.error_dict:
            errors = dict(exc.error_dict)
            errors["node_memory_gib"] = errors.pop("node_memory")
            exc = ValidationError(errors)
        apply_errors(self, exc)
