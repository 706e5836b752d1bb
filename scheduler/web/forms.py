"""Forms of the job pages. They take what people type (cores, GiB, hours and minutes, KEY=VALUE lines) and
turn it into a ``JobRequest``; ``scheduler.actions`` validates meaning and permission, and its errors come
back beside the fields here (``apply_action_errors``).

Size: the submit form holds every field of every kind of work (``JobForm``); the list filters (``JobListFilter``,
``QueueListFilter``) would split out first.
"""

from __future__ import annotations

import json
import shlex
import uuid
from decimal import Decimal
from typing import Any, ClassVar

from django import forms
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import QueryDict

from clusters.models import AcceleratorType, Cluster
from common import params
from common.types import AnyUser
from governance.models import PriorityTier
from scheduler import actions, submission
from scheduler.filters import JobFilter
from scheduler.models import Job
from scheduler.submission import JobRequest
from scheduler.sweeps import ArrayRequest
from tenancy.models import Project, Team
from tenancy.scoping import Action

#: Shares of one accelerator a worker may ask for, in milli (a fraction needs one accelerator per worker).
SHARES = [(1000, "Whole accelerators"), (500, "Half of one (0.5)"), (250, "A quarter of one (0.25)")]
#: Where an action names a field the form calls otherwise.
FORM_FIELD = submission.FORM_NAMES
FIELDS = submission.FIELDS


def whole(name: str, **kwargs: Any) -> forms.IntegerField:
    """A whole-number field of the job request, with its bounds, default and help (``submission.FIELDS``)."""
    spec = FIELDS[name]
    assert isinstance(spec.low, int)
    assert isinstance(spec.high, int)
    kwargs.setdefault("help_text", spec.help)
    return forms.IntegerField(min_value=spec.low, max_value=spec.high, initial=spec.default, **kwargs)


def amount(unit: submission.Unit, **kwargs: Any) -> forms.DecimalField:
    """A field typed in people's units (cores, GiB), with the unit's bounds."""
    return forms.DecimalField(
        min_value=unit.low, max_value=unit.high, decimal_places=unit.places, max_digits=unit.digits, **kwargs
    )


def text(name: str, **kwargs: Any) -> forms.CharField:
    """An optional text field of the job request, with its length limit."""
    return forms.CharField(max_length=FIELDS[name].max_length, required=False, **kwargs)


class SecretTextarea(forms.Textarea):
    """A text box that never shows its value back, not even to the person who typed it (a page sent again
    after an error, a cached page, a shoulder): what was typed must be typed again."""

    def format_value(self, value: Any) -> str | None:
        return None


class CheckboxList(forms.CheckboxSelectMultiple):
    """Checkboxes in a row (accelerator types, clusters, regions): few choices, several may be ticked."""

    def __init__(self) -> None:
        super().__init__(attrs={"class": "checks"})


class ChoicesForm(forms.Form):
    def _choices(self, name: str, choices: list[tuple[Any, str]]) -> None:
        """Set a choice field's choices (drawn per user, so at run time)."""
        field = self.fields[name]
        assert isinstance(field, forms.ChoiceField)
        field.choices = choices


#: Whether a job accepts spot capacity: as its tier says (empty), or as it says.
SPOT_CHOICES = [
    ("", "As its priority tier says"),
    ("yes", "It may run on spot capacity"),
    ("no", "Never on spot capacity"),
]


class JobForm(ChoicesForm):
    """Submit a job (or a clone of one). Most fields have a sensible initial value; the name and what to run
    are left to the action to ask for, so the preview can judge the rest before they are typed."""

    user: User

    team = forms.TypedChoiceField(coerce=int)
    project = forms.TypedChoiceField(coerce=int, required=False, empty_value=None)
    name = text("name")
    tier = forms.TypedChoiceField(coerce=int, required=False, empty_value=None, label="Priority tier")
    preemptible = forms.BooleanField(
        required=False,
        initial=True,
        help_text="Higher-priority work may stop it (it resumes from its checkpoint); never in a non-preemptible tier.",
    )
    spot = forms.TypedChoiceField(
        choices=SPOT_CHOICES,
        coerce=lambda value: value == "yes",
        required=False,
        empty_value=None,
        label="Spot capacity",
        help_text="Spot capacity is cheaper, but the cloud may take it back (the job resumes from its checkpoint, no "
        "retry spent). Preemptible work only.",
    )

    accelerator_types = forms.MultipleChoiceField(
        required=False, widget=CheckboxList(), label="Accelerator types", help_text="Any of these; none ticked: any."
    )
    accelerators = whole("accelerators", label="Accelerators per worker", help_text="")
    accelerator_milli = forms.TypedChoiceField(
        coerce=int, choices=SHARES, initial=1000, label="Share", help_text="A fraction needs 1 accelerator per worker."
    )
    workers = whole("workers", help_text="A gang: all start together.")
    tpu_type = text("tpu_type", label="TPU slice type", help_text=FIELDS["tpu_type"].help)
    tpu_topology = text("tpu_topology", label="TPU topology", help_text=FIELDS["tpu_topology"].help)
    cpu_cores = amount(submission.CORES, initial=4, label="CPU cores per worker")
    memory_gib = amount(submission.GIB, initial=16, label="Memory per worker (GiB)")

    topology_level = forms.ChoiceField(required=False, label="Keep workers within one")
    topology_mode = forms.ChoiceField(
        choices=Job.TopologyMode.choices, initial=Job.TopologyMode.REQUIRED, label="How strictly"
    )
    clusters = forms.TypedMultipleChoiceField(
        coerce=int, required=False, widget=CheckboxList(), help_text="Only these; none ticked: any."
    )
    regions = forms.MultipleChoiceField(
        required=False, widget=CheckboxList(), help_text="Only these; none ticked: any."
    )
    max_price_per_hour = forms.DecimalField(
        required=False,
        min_value=FIELDS["max_price_per_hour"].low,
        max_digits=12,
        decimal_places=2,
        label="Max price per hour",
        help_text=FIELDS["max_price_per_hour"].help,
    )

    time_limit_hours = forms.IntegerField(
        min_value=0, max_value=submission.MAX_TIME_LIMIT // 3600, initial=1, label="Time limit: hours"
    )
    time_limit_minutes = forms.IntegerField(min_value=0, max_value=59, initial=0, label="minutes")
    max_retries = whole("max_retries", label="Retries", help_text="After a node or cluster failure.")
    checkpoint_location = text("checkpoint_location", help_text=FIELDS["checkpoint_location"].help)
    data_locality = text("data_locality", label="Data near", help_text=FIELDS["data_locality"].help)

    image = text("image", label="Container image")
    command = forms.CharField(
        max_length=5000, required=False, help_text="As in a shell: python train.py --lr 3e-4", label="Command"
    )
    script = text(
        "script",
        label="or a batch script",
        strip=False,
        widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false"}),
    )
    env = forms.CharField(
        max_length=20_000,
        required=False,
        label="Environment variables",
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false", "placeholder": "KEY=VALUE, one a line"}),
    )
    secret_env = forms.CharField(
        max_length=20_000,
        required=False,
        label="Secret environment variables",
        strip=False,
        widget=SecretTextarea(
            attrs={"rows": 2, "spellcheck": "false", "autocomplete": "off", "placeholder": "KEY=VALUE, one a line"}
        ),
        help_text="Tokens, passwords: stored encrypted, shown to nobody (you neither: type them again after an "
        "error), given to the job when it starts.",
    )
    # --- a Ray job (kind "ray"): its entrypoint, runtime environment and head; the workers are the above ---
    kind = forms.ChoiceField(
        choices=[(k.value, k.label) for k in submission.PUBLIC_KINDS],
        initial=Job.Kind.JOB,
        required=False,
        label="Kind",
        widget=forms.RadioSelect(attrs={"class": "checks"}),
        help_text="A Ray job starts a Ray cluster (a head and the workers) and runs its entrypoint on it; an "
        "interactive session runs JupyterLab, which you open from its page.",
    )
    entrypoint = text("entrypoint", label="Entrypoint", help_text=FIELDS["entrypoint"].help)
    runtime_env = forms.CharField(
        max_length=FIELDS["runtime_env"].max_length,
        required=False,
        label="Runtime environment (JSON)",
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false", "placeholder": '{"pip": ["numpy"]}'}),
        help_text=FIELDS["runtime_env"].help,
    )
    head_cpu_cores = amount(submission.HEAD_CORES, initial=1, required=False, label="Head CPU cores")
    head_memory_gib = amount(submission.HEAD_GIB, initial=4, required=False, label="Head memory (GiB)")
    head_accelerators = whole("head_accelerators", required=False, label="Head accelerators")

    # --- an array / sweep (optional): many tasks of this request, each with its index and parameters -------
    array_range = forms.CharField(
        max_length=2000,
        required=False,
        label="Array of tasks",
        widget=forms.TextInput(attrs={"placeholder": "0-99, 0-99:2 or 1,5,10-12"}),
        help_text="Run this job as many tasks, one per index (QM_ARRAY_INDEX). Leave empty for one job.",
    )
    array_grid = forms.CharField(
        max_length=20_000,
        required=False,
        label="or a sweep over parameters",
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false", "placeholder": "lr = 0.1, 0.01\ndepth = 2, 4"}),
        help_text="One parameter a line, its values after = separated by commas: a task for every combination, "
        "each with QM_PARAM_<NAME> in its environment.",
    )
    array_max_running = forms.IntegerField(
        required=False, min_value=1, label="At most running at once", help_text="Empty: no limit."
    )

    # --- an interactive session (kind "session"): what it runs and when it ends by itself ---------------------
    session_app = forms.ChoiceField(
        choices=Job.SessionApp.choices,
        initial=Job.SessionApp.JUPYTERLAB,
        required=False,
        label="App",
        widget=forms.RadioSelect(attrs={"class": "checks"}),
        help_text=FIELDS["session_app"].help,
    )
    session_idle_minutes = forms.IntegerField(
        min_value=1, required=False, label="Ends after idle (minutes)", help_text=FIELDS["session_idle_minutes"].help
    )

    #: The job this form clones (its secret values are kept if its submitter ticks ``keep_secret_env``).
    secret_env_from = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput())
    keep_secret_env = forms.BooleanField(required=False, initial=True, label="Keep its secret values")
    idempotency_key = text("idempotency_key", widget=forms.HiddenInput())
    #: The team the project and tier choices were drawn for: the preview redraws them when the team changes.
    choices_team = forms.CharField(max_length=20, required=False, widget=forms.HiddenInput())

    def __init__(self, user: User, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.user = user
        self.teams = {team.pk: team for team in actions.teams_for_submission(user)}
        orgs = {team.organization_id for team in self.teams.values()}
        self._choices("team", [(pk, str(team)) for pk, team in self.teams.items()])
        self.chosen_team = self._chosen_team()

        types = AcceleratorType.objects.filter(organization__in=orgs).order_by("name")
        self._choices("accelerator_types", [(t.name, t.name) for t in types])
        clusters = list(
            Cluster.objects.filter(organization__in=orgs).exclude(status=Cluster.Status.DISABLED).order_by("name")
        )
        self.cluster_rows = {c.pk: c for c in clusters}
        self._choices("clusters", [(c.pk, f"{c.name} ({c.region})") for c in clusters])
        self._choices("regions", [(r, r) for r in sorted({c.region for c in clusters})])
        levels = sorted({str(level) for c in clusters for level in c.levels or []})
        self._choices(
            "topology_level",
            [("", "anywhere")] + [(level, level.replace("_", " ")) for level in levels],
        )
        self._team_choices()
        #: The team changed since the page drew its project and tier menus: they are drawn again for the new
        #: team (the preview swaps them in), and what was chosen from the old menus is dropped.
        self.redrawn = self.is_bound and str(self.data.get("choices_team", "")) != str(self.initial["choices_team"])
        if self.redrawn:
            data = self.data.copy() if isinstance(self.data, QueryDict) else QueryDict(mutable=True)
            data["project"] = ""
            data["tier"] = str(self.initial.get("tier") or "")
            data["choices_team"] = str(self.initial["choices_team"])
            self.data = data
        milli = self["accelerator_milli"].value()
        try:
            share = params.optional_integer(milli, "accelerator_milli", low=1, high=1000)
        except params.BadParameter:
            share = None  # the field itself says what is wrong with it
        if share is not None and share not in dict(SHARES):
            # A cloned job with a share the menu does not offer keeps it.
            self._choices("accelerator_milli", [*SHARES, (share, f"{share / 1000:g} of one")])
        self.cloned = cloned = self._cloned()
        if not (cloned and cloned.secret_env_names):
            del self.fields["keep_secret_env"]  # nothing to keep
        #: Whether the clone may keep the cloned job's secret values (``actions.secret_env_of``'s rule); for
        #: anyone else the box is not shown, and a forged tick is refused by the action.
        self.keeps_secrets = bool(cloned and cloned.secret_env_names and cloned.submitted_by_id == user.pk)
        if not self.is_bound and not self.initial.get("idempotency_key"):
            self.initial["idempotency_key"] = uuid.uuid4().hex

    def _chosen_team(self) -> Team | None:
        raw = self.data.get("team") if self.is_bound else self.initial.get("team")
        first = next(iter(self.teams.values()), None)
        if raw in (None, ""):
            return first
        # Not one of the user's teams: none is chosen, and the team field says so (it offers only theirs).
        pk = params.as_id(raw if isinstance(raw, int) else str(raw))
        return self.teams.get(pk) if pk is not None else None

    def _cloned(self) -> Job | None:
        """The job this form clones, if the user may see it."""
        raw = self.data.get("secret_env_from") if self.is_bound else self.initial.get("secret_env_from")
        pk = params.as_id(str(raw)) if raw not in (None, "") else None
        return Job.objects.for_user(self.user, Action.VIEW).filter(pk=pk).first() if pk is not None else None

    def _team_choices(self) -> None:
        """Projects and tiers of the chosen team (tiers: only those it may use)."""
        team = self.chosen_team
        projects: QuerySet[Project] = Project.objects.none()
        tiers: list[PriorityTier] = []
        if team is not None:
            projects = Project.objects.for_user(self.user, Action.VIEW).filter(team=team, archived=False)
            tiers = actions.tiers_for(team)
        self._choices("project", [("", "(none: the team's queue)")] + [(p.pk, p.name) for p in projects])
        default = next((t for t in tiers if t.is_default), None)
        self._choices(
            "tier", [(t.pk, f"{t.name} ({t.value}{'' if t.preemptible else ', not preemptible'})") for t in tiers]
        )
        if default is not None and not self.initial.get("tier"):
            self.initial["tier"] = default.pk
        self.tiers = {t.pk: t for t in tiers}
        self.initial["choices_team"] = team.pk if team else ""

    # --- cleaning ---------------------------------------------------------------------------------------

    def clean_command(self) -> list[str]:
        try:
            return shlex.split(self.cleaned_data["command"])
        except ValueError as error:
            raise ValidationError(f"Cannot read the command: {error} (check the quotes).") from None

    def clean_runtime_env(self) -> dict[str, Any]:
        """JSON text to an object (its keys and values are the action's to judge: ``check_runtime_env``)."""
        text = self.cleaned_data["runtime_env"].strip()
        if not text:
            return {}
        try:
            value = json.loads(text)
        except ValueError as error:
            raise ValidationError(f"Not JSON: {error}.") from None
        if not isinstance(value, dict):
            raise ValidationError('The runtime environment is a JSON object, e.g. {"pip": ["numpy"]}.')
        return value

    def clean_env(self) -> dict[str, str]:
        return env_lines(self.cleaned_data["env"])

    def clean_secret_env(self) -> dict[str, str]:
        return env_lines(self.cleaned_data["secret_env"], secret=True)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        hours, minutes = cleaned.get("time_limit_hours"), cleaned.get("time_limit_minutes")
        if hours is not None and minutes is not None:
            cleaned["time_limit"] = hours * 3600 + minutes * 60
        return cleaned

    #: Stand-ins for fields that failed the form's own checks, so that the action can still judge the rest
    #: and every error is shown at once (its errors on these fields are then dropped: ``apply_action_errors``).
    STAND_INS: ClassVar[dict[str, Any]] = {
        "project": None,
        "name": "",
        "tier": None,
        "preemptible": True,
        "spot": None,
        "accelerator_types": [],
        "accelerators": 1,
        "accelerator_milli": 1000,
        "workers": 1,
        "cpu_cores": Decimal(1),
        "memory_gib": Decimal(1),
        "topology_level": "",
        "topology_mode": Job.TopologyMode.PREFERRED,
        "clusters": [],
        "regions": [],
        "max_price_per_hour": None,
        "time_limit": 3600,
        "max_retries": 3,
        "checkpoint_location": "",
        "data_locality": "",
        "image": "",
        "command": [],
        "script": "",
        "env": {},
        "secret_env": {},
        "secret_env_from": None,
        "keep_secret_env": False,
        "idempotency_key": "",
        "kind": Job.Kind.JOB,
        "entrypoint": "",
        "runtime_env": {},
        "head_cpu_cores": Decimal(1),
        "head_memory_gib": Decimal(4),
        "head_accelerators": 0,
        "tpu_type": "",
        "tpu_topology": "",
        "session_app": "",
        "session_idle_minutes": None,
    }

    def job_request(self, *, placeholders: bool = False) -> tuple[JobRequest, list[str]]:
        """The request the form describes (call after ``is_valid``; a field that failed is replaced by its
        stand-in). With ``placeholders``, a missing name or program is filled in (so the rest can be judged
        before they are typed) and named in the list."""
        data = {**self.STAND_INS, **self.cleaned_data}
        assert self.chosen_team is not None
        missing: list[str] = []
        name, image, script = data["name"], data["image"], data["script"]
        if placeholders and not name.strip():
            name = "preview"
            missing.append("a name")
        ray = data["kind"] == Job.Kind.RAY
        head_cpu, head_memory = data["head_cpu_cores"], data["head_memory_gib"]
        entrypoint = data["entrypoint"] if ray else ""
        if placeholders and ray and not entrypoint.strip():
            entrypoint = "preview"
            missing.append("an entrypoint")
        session = data["kind"] == Job.Kind.SESSION
        if placeholders and not ray and not session and not image.strip() and not script.strip():
            image = "preview"
            missing.append("a container image or a batch script")
        project = Project.objects.filter(pk=data["project"]).first() if data.get("project") else None
        request = JobRequest(
            team=self.chosen_team,
            project=project,
            name=name,
            time_limit=data["time_limit"],
            tier=self.tiers.get(data["tier"]) if data.get("tier") else None,
            accelerator_types=list(data["accelerator_types"]),
            accelerators=data["accelerators"],
            accelerator_milli=data["accelerator_milli"],
            workers=data["workers"],
            cpu=submission.CORES.to_engine(data["cpu_cores"]),
            memory=submission.GIB.to_engine(data["memory_gib"]),
            topology_level=data["topology_level"],
            topology_mode=data["topology_mode"],
            preemptible=data["preemptible"],
            spot=data["spot"],
            checkpoint_location=data["checkpoint_location"],
            data_locality=data["data_locality"],
            clusters=[self.cluster_rows[pk] for pk in data["clusters"]],
            regions=list(data["regions"]),
            max_price_per_hour=data["max_price_per_hour"],
            image=image,
            command=data["command"],
            script=script,
            env=data["env"],
            secret_env=data["secret_env"],
            secret_env_from=self.cloned if data["keep_secret_env"] else None,
            max_retries=data["max_retries"],
            idempotency_key=data["idempotency_key"],
            kind=data["kind"] or Job.Kind.JOB,
            entrypoint=entrypoint,
            runtime_env=data["runtime_env"] if ray else {},
            head_cpu=FIELDS["head_cpu"].default if head_cpu is None else submission.HEAD_CORES.to_engine(head_cpu),
            head_memory=FIELDS["head_memory"].default
            if head_memory is None
            else submission.HEAD_GIB.to_engine(head_memory),
            head_accelerators=data["head_accelerators"] or 0,
            tpu_type=data["tpu_type"],
            tpu_topology=data["tpu_topology"],
            session_app=data["session_app"] if session else "",
            session_idle_minutes=data["session_idle_minutes"] if session else None,
        )
        if data.get("project") and project is None:
            self.add_error("project", "Choose a project of the team.")
        return request, missing

    def clean_array_grid(self) -> dict[str, list[Any]]:
        """``name = v1, v2`` lines as a grid; values that read as JSON (numbers, true/false) are kept as such."""
        grid: dict[str, list[Any]] = {}
        for number, line in enumerate(str(self.cleaned_data.get("array_grid") or "").splitlines(), start=1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            name, sep, values = line.partition("=")
            if not sep or not name.strip() or not values.strip():
                raise ValidationError(f"Line {number} is not name = value, value, ...: {line.strip()[:60]!r}.")
            grid[name.strip()] = [_value(v.strip()) for v in values.split(",") if v.strip()]
        return grid

    @property
    def is_array(self) -> bool:
        """Whether the form asks for an array of tasks rather than one job."""
        return bool(str(self.data.get("array_range", "")).strip() or str(self.data.get("array_grid", "")).strip())

    def array_request(self, job: JobRequest) -> ArrayRequest:
        data = self.cleaned_data
        return ArrayRequest(
            job=job,
            range=data.get("array_range") or "",
            grid=data.get("array_grid") or {},
            max_running=data.get("array_max_running"),
        )

    def apply_action_errors(self, exc: ValidationError) -> None:
        """An action's errors beside the fields they name (cpu is typed as cores here, and so on), except on
        fields that already failed the form's checks (the action saw their stand-ins, not what was typed)."""
        errors = exc.message_dict if hasattr(exc, "error_dict") else {"__all__": exc.messages}
        failed = set(self.errors)
        if "time_limit_minutes" in failed:
            failed.add("time_limit_hours")
        for name, messages in errors.items():
            field = FORM_FIELD.get(name, name)
            if field in failed:
                continue
            for message in messages:
                self.add_error(field if field in self.fields else None, message)


def _value(text: str) -> Any:
    """A parameter value typed in the form: a number or true/false as such, anything else as text."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, int | float | bool) else text


def env_lines(text: str, *, secret: bool = False) -> dict[str, str]:
    """KEY=VALUE lines (blank ones and # comments skipped) as a mapping. A line that is not KEY=VALUE is
    quoted in the error, unless it is meant to be secret."""
    env: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            shown = "" if secret else f": {line.strip()[:60]!r}"
            raise ValidationError(f"Line {number} is not KEY=VALUE{shown}.")
        env[key.strip()] = value
    return env


def initial_from_job(job: Job) -> dict[str, Any]:
    """A job's fields (``actions.clone_request``) in the units the form asks for."""
    values = actions.clone_request(job)
    seconds = int(values.pop("time_limit"))
    return {
        **values,
        "cpu_cores": submission.CORES.from_engine(values.pop("cpu")),
        "memory_gib": submission.GIB.from_engine(values.pop("memory")),
        "time_limit_hours": seconds // 3600,
        "time_limit_minutes": seconds % 3600 // 60,
        "command": shlex.join(values["command"]),
        "env": "\n".join(f"{key}={value}" for key, value in values["env"].items()),
        "runtime_env": json.dumps(values["runtime_env"], indent=1) if values["runtime_env"] else "",
        "head_cpu_cores": submission.HEAD_CORES.from_engine(values.pop("head_cpu")),
        "head_memory_gib": submission.HEAD_GIB.from_engine(values.pop("head_memory")),
        "spot": "yes" if values["spot"] else "no",
    }


class CancelForm(forms.Form):
    reason = forms.CharField(
        max_length=actions.MAX_REASON,
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Optional; kept in the job's timeline and the audit log.",
    )


class InterventionForm(forms.Form):
    """An admin's force-preempt or requeue: the reason is required (the action says so too)."""

    reason = forms.CharField(
        max_length=actions.MAX_REASON,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Required; kept in the job's timeline and the audit log.",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("auto_id", "intervene_%s")  # beside the cancel form on one page: ids of its own
        super().__init__(*args, **kwargs)


class JobListFilter(ChoicesForm):
    """The job list's filters: the list's queryset is already scoped; these narrow it. The list opens on active
    work: without a ``state`` in the query it shows the active jobs; ``state=`` (empty: "all states") shows all,
    ``state=finished`` the finished ones. The API's filter (``scheduler.filters.JobFilter``) keeps no default."""

    q = forms.CharField(required=False, max_length=120, label="Name contains")
    state = forms.ChoiceField(required=False)
    team = forms.TypedChoiceField(coerce=int, required=False, empty_value=None)
    project = forms.TypedChoiceField(coerce=int, required=False, empty_value=None)
    tier = forms.TypedChoiceField(coerce=int, required=False, empty_value=None)
    mine = forms.BooleanField(required=False, label="Mine only")

    ACTIVE, FINISHED = "active", "finished"

    def __init__(self, user: AnyUser, data: QueryDict | None = None, *args: Any, **kwargs: Any) -> None:
        if data is not None and "state" not in data:
            data = data.copy()
            data["state"] = self.ACTIVE
        super().__init__(data, *args, **kwargs)
        self.user = user
        self._choices(
            "state",
            [
                ("", "all states"),
                (self.ACTIVE, "active (waiting or placed)"),
                (self.FINISHED, "finished"),
                *Job.State.choices,
            ],
        )
        teams = Team.objects.for_user(user, Action.VIEW).order_by("name")
        self._choices("team", [("", "any team"), *((t.pk, t.name) for t in teams)])
        projects = Project.objects.for_user(user, Action.VIEW).select_related("team").order_by("team__name", "name")
        self._choices("project", [("", "any project"), *((p.pk, f"{p.team.name} / {p.name}") for p in projects)])
        tiers = PriorityTier.objects.for_user(user, Action.VIEW)
        self._choices("tier", [("", "any tier"), *((t.pk, t.name) for t in tiers)])

    def filter(self, jobs: QuerySet[Job]) -> QuerySet[Job]:
        """Narrow ``jobs`` through the FilterSet the API uses too (``scheduler.filters.JobFilter``)."""
        data = self.cleaned_data
        state = data.get("state") or ""
        tier = data.get("tier")
        query = {
            "q": data.get("q") or "",
            "state": "final" if state == self.FINISHED else state,
            "team": "" if data.get("team") is None else str(data["team"]),
            "project": "" if data.get("project") is None else str(data["project"]),
            "tier": "" if tier is None else dict(self.fields["tier"].choices)[tier],  # type: ignore[attr-defined]
            "submitted_by": self.user.get_username() if data.get("mine") else "",
        }
        narrowed: QuerySet[Job] = JobFilter(query, queryset=jobs).qs
        return narrowed


class QueueListFilter(ChoicesForm):
    """The queue list's filter: one team's queues (the list's queryset is already scoped)."""

    team = forms.TypedChoiceField(coerce=int, required=False, empty_value=None)

    def __init__(self, user: AnyUser, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        teams = Team.objects.for_user(user, Action.VIEW).order_by("name")
        self._choices("team", [("", "any team"), *((t.pk, t.name) for t in teams)])
