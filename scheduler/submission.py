"""A job request: what someone asks to run, in the engine's units, whichever way it came (form, API, ``qm``),
and the one definition of its fields.

``FIELDS`` says, for each field, its bounds (in engine units), its length limit, its default and its help
text; ``CORES``, ``GIB`` and ``FRACTION`` convert the units people type (``parse_duration`` reads ``2h``);
``shape_errors`` is every check that needs neither the database nor the actor. The form
(``scheduler/web/forms.py``) and the API (``scheduler/api/serializers.py``) build their fields from these;
``scheduler.actions.validate`` calls ``shape_errors`` and adds what needs the database (team, tier,
clusters, whether it can ever fit). The ``qm`` CLI has no copy: it sends what the job file says and shows
the API's answer, which names an unknown field and the closest known one
(``common.validation.unknown_fields``).

Size: the one definition of a job request (``JobRequest``, ``Field``) and every check of its fields, by kind of work
(Ray, sessions, services); kept together so that one file says what a request may hold.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError

from clusters.backends.tpu.accelerators import UnknownAcceleratorType, check_shape, chips_in_topology, generation_of
from clusters.models import Cluster
from common.validation import check_max_length
from governance.models import PriorityTier
from scheduler.models import Job
from tenancy.models import Project, Team

MAX_WORKERS = 4096
MAX_TIME_LIMIT = 30 * 24 * 3600
MIN_TIME_LIMIT = 60
MAX_ACCELERATORS = 64
MAX_RETRIES = 20
#: The kinds a person submits (form, API, ``qm``); a service replica is made by ``serving`` alone.
PUBLIC_KINDS = (Job.Kind.JOB, Job.Kind.RAY, Job.Kind.SESSION)
SERVICE_ELSEWHERE = "Services are created at /api/v1/services/; a job's kind is job, ray or session."
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass
class JobRequest:
    """What a researcher asks for, in engine units (millicores, MiB, seconds); the form and the API
    convert from the units people type."""

    team: Team
    name: str
    time_limit: int
    tier: PriorityTier | None = None  # None: the organization's default tier
    project: Project | None = None
    accelerator_types: Sequence[str] = ()
    accelerators: int = 1
    accelerator_milli: int = 1000
    workers: int = 1
    cpu: int = 1000
    memory: int = 4096
    topology_level: str = ""
    topology_mode: str = Job.TopologyMode.REQUIRED
    preemptible: bool = True
    #: It accepts spot capacity: cheaper, but the cloud may take it back (then it is requeued from its checkpoint
    #: without spending a retry). Only preemptible work may. None: as its tier says (``PriorityTier.accepts_spot``).
    spot: bool | None = None
    checkpoint_location: str = ""
    #: Where its data lives: a cluster slug or a region of the organization; "": anywhere.
    data_locality: str = ""
    clusters: Sequence[Cluster] = ()
    regions: Sequence[str] = ()
    max_price_per_hour: Decimal | None = None
    image: str = ""
    command: Sequence[str] = ()
    script: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    #: Environment values shown to nobody (stored encrypted, handed to the cluster at dispatch).
    secret_env: Mapping[str, str] = field(default_factory=dict)
    #: A job of the actor's whose secret values this one keeps (a clone), for the names not in ``secret_env``.
    secret_env_from: Job | None = None
    max_retries: int = 3
    idempotency_key: str = ""
    #: ``Job.Kind``: a plain job, or a Ray job (a head and ``workers`` workers running ``entrypoint``).
    kind: str = Job.Kind.JOB
    entrypoint: str = ""
    runtime_env: Mapping[str, Any] = field(default_factory=dict)
    head_accelerators: int = 0
    head_cpu: int = 1000
    head_memory: int = 4096
    #: A Cloud TPU slice type (``v5p-32``) and, optionally, its topology (``2x2x4``): each worker is then one
    #: whole slice of that shape (``workers`` > 1: multislice). A valid type sets ``accelerator_types`` to its
    #: generation and ``accelerators`` to a slice's chips (``__post_init__``), so quotas count chips.
    tpu_type: str = ""
    tpu_topology: str = ""
    #: An interactive session (kind ``session``): what it runs ("": JupyterLab) and after how many minutes
    #: without activity it ends by itself (None: ``SESSION_IDLE_MINUTES``).
    session_app: str = ""
    session_idle_minutes: int | None = None
    #: A service replica (kind ``service``, made by ``serving`` only): its port (0: ``$PORT``) and health path.
    serve_port: int = 0
    serve_health_path: str = ""
    spread_group: str = ""

    def __post_init__(self) -> None:
        self.tpu_type, self.tpu_topology = self.tpu_type.strip(), self.tpu_topology.strip()
        if self.tpu_type:
            try:
                chips = check_shape(self.tpu_type, self.tpu_topology)
                model = generation_of(self.tpu_type).model
            except UnknownAcceleratorType:
                return  # ``check_tpu`` names what is wrong
            self.accelerator_types, self.accelerators, self.accelerator_milli = [model], chips, 1000


# --- the fields ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Field:
    """One field of a job request: its bounds in engine units (``out_of_range`` says so in words), its
    length limit if it is text, its default and its help text."""

    low: int | Decimal | None = None
    high: int | Decimal | None = None
    max_length: int | None = None
    default: Any = None
    help: str = ""
    out_of_range: str = ""


FIELDS: dict[str, Field] = {
    "name": Field(max_length=120, help="What the job is called in lists and its timeline."),
    "accelerators": Field(
        0,
        MAX_ACCELERATORS,
        default=1,
        help="Accelerators per worker (0 for CPU only).",
        out_of_range=f"Accelerators per worker must be between 0 and {MAX_ACCELERATORS}.",
    ),
    "accelerator_milli": Field(
        1,
        1000,
        default=1000,
        help="A share of one accelerator, e.g. 0.25 (with one accelerator per worker).",
        out_of_range="A share of an accelerator is between 1 and 1000 milli.",
    ),
    "workers": Field(
        1,
        MAX_WORKERS,
        default=1,
        help="Workers in the gang: all start together.",
        out_of_range=f"Workers must be between 1 and {MAX_WORKERS}.",
    ),
    "cpu": Field(1, default=1000, help="Cores per worker.", out_of_range="Ask for some CPU (at least 0.001 cores)."),
    "memory": Field(1, default=4096, help="GiB per worker.", out_of_range="Ask for some memory."),
    "time_limit": Field(
        MIN_TIME_LIMIT,
        MAX_TIME_LIMIT,
        help="Give seconds (3600) or a duration such as 90m, 2h, 1d or 1h30m.",
        out_of_range=f"The time limit must be between {MIN_TIME_LIMIT // 60} minute and {MAX_TIME_LIMIT // 86400} "
        "days.",
    ),
    "max_price_per_hour": Field(
        Decimal(0), help="For the whole job; empty: no limit.", out_of_range="The price limit cannot be negative."
    ),
    "checkpoint_location": Field(
        max_length=500, help="Where it saves checkpoints, e.g. s3://bucket/run. It resumes from there."
    ),
    "data_locality": Field(
        max_length=120,
        help="Where its data lives: a cluster or a region. It is placed there when it can be, else elsewhere.",
    ),
    "image": Field(max_length=500, help="A container image (and a command), or a batch script."),
    "command": Field(max_length=10_000, help="As in a shell: python train.py --lr 3e-4"),
    "script": Field(max_length=100_000, help="A batch script, instead of a container image."),
    "env": Field(max_length=10_000, help="Environment variables: names and values."),
    "max_retries": Field(
        0,
        MAX_RETRIES,
        default=3,
        help="Retries after a node or cluster failure.",
        out_of_range=f"Retries must be between 0 and {MAX_RETRIES}.",
    ),
    "idempotency_key": Field(max_length=80, help="Submitting again with the same key returns the first job."),
    "entrypoint": Field(
        max_length=10_000, help="The shell command the Ray job runs on its head, e.g. python train.py --epochs 3."
    ),
    "runtime_env": Field(
        max_length=20_000,
        help="Ray's runtime environment, a JSON object: pip, uv, env_vars, working_dir, py_modules, excludes, config.",
    ),
    "head_accelerators": Field(
        0,
        MAX_ACCELERATORS,
        default=0,
        help="Whole accelerators of the Ray head (0: it only coordinates).",
        out_of_range=f"The head's accelerators must be between 0 and {MAX_ACCELERATORS}.",
    ),
    "head_cpu": Field(1, default=1000, help="Cores of the Ray head.", out_of_range="Give the head some CPU."),
    "head_memory": Field(1, default=4096, help="GiB of the Ray head.", out_of_range="Give the head some memory."),
    "tpu_type": Field(
        max_length=40,
        help="A Cloud TPU slice type, e.g. v5p-32: each worker is one whole slice (several workers: multislice).",
    ),
    "tpu_topology": Field(max_length=20, help="The slice's shape, e.g. 2x2x4 (its chips must be the type's)."),
    "session_app": Field(
        max_length=20, help="What the session runs: jupyterlab (the default) or shell (a terminal in JupyterLab)."
    ),
    "session_idle_minutes": Field(
        1, help="After this many minutes without activity the session ends by itself (its files are kept)."
    ),
}

#: The API's (and job files') names of the fields given in other units than the engine's.
API_NAMES = {"accelerator_milli": "accelerator_fraction", "memory": "memory_gib", "head_memory": "head_memory_gib"}
#: The form's names of the fields given in other units than the engine's.
FORM_NAMES = {
    "cpu": "cpu_cores",
    "memory": "memory_gib",
    "head_cpu": "head_cpu_cores",
    "head_memory": "head_memory_gib",
    "time_limit": "time_limit_hours",
    "secret_env_from": "keep_secret_env",
    "range": "array_range",
    "grid": "array_grid",
    "max_running": "array_max_running",
}


@dataclass(frozen=True)
class Unit:
    """A field typed in people's units (cores, GiB, a fraction of one accelerator): ``per`` engine units
    each, at least ``low``, at most ``high``, with ``places`` decimals and ``digits`` in all."""

    field: str
    per: int
    low: Decimal
    high: Decimal
    places: int = 3
    digits: int = 12

    def to_engine(self, amount: Decimal) -> int:
        """``amount`` in engine units, rounded half up, and at least one."""
        return max(1, int((amount * self.per).to_integral_value(ROUND_HALF_UP)))

    def from_engine(self, value: int) -> Decimal:
        """``value`` in people's units, without trailing zeros (``4``, ``0.5``, never ``1E+2``)."""
        amount = (Decimal(value) / self.per).quantize(Decimal(1).scaleb(-self.places))
        whole = amount.to_integral_value()
        return whole if amount == whole else amount.normalize()


CORES = Unit("cpu", 1000, Decimal("0.001"), Decimal(100_000), digits=10)
GIB = Unit("memory", 1024, Decimal("0.001"), Decimal(1_000_000))
HEAD_CORES = Unit("head_cpu", 1000, Decimal("0.001"), Decimal(100_000), digits=10)
HEAD_GIB = Unit("head_memory", 1024, Decimal("0.001"), Decimal(1_000_000))
FRACTION = Unit("accelerator_milli", 1000, Decimal("0.001"), Decimal(1), digits=4)

#: ``90m``, ``2h``, ``1d``, ``1h30m``: days, hours, minutes, seconds, each at most once and in that order.
DURATION = re.compile(r"^(?:(?P<d>\d+)d)?(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m)?(?:(?P<s>\d+)s)?$")
UNIT_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
DURATION_HELP = FIELDS["time_limit"].help


def parse_duration(value: object) -> int:
    """Seconds from an integer, a string of digits or a duration such as ``1h30m``; ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError(DURATION_HELP)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    text = value.strip().lower() if isinstance(value, str) else ""
    if text.isascii() and text.isdigit():
        return int(text)
    match = DURATION.match(text) if text.isascii() else None
    if text and match:
        return sum(int(amount) * UNIT_SECONDS[unit] for unit, amount in match.groupdict().items() if amount)
    raise ValueError(DURATION_HELP)


# --- the checks that need neither the database nor the actor -------------------------------------------


def check_bounds(name: str, value: Any) -> None:
    """``value`` within ``FIELDS[name]``'s bounds (code ``out_of_range``)."""
    spec = FIELDS[name]
    if (spec.low is not None and value < spec.low) or (spec.high is not None and value > spec.high):
        raise ValidationError(spec.out_of_range, code="out_of_range")


def check_price(price: Decimal | None) -> None:
    if price is not None:
        check_bounds("max_price_per_hour", price)


def check_name(name: str) -> None:
    if not name.strip():
        raise ValidationError("Give the job a name.", code="required")
    check_max_length(name.strip(), limit("name"))


def check_share(request: JobRequest) -> None:
    """A share of an accelerator in bounds, and a fraction only of exactly one accelerator per worker."""
    check_bounds("accelerator_milli", request.accelerator_milli)
    if request.accelerator_milli < 1000 and request.accelerators != 1:
        raise ValidationError("A fraction of an accelerator needs exactly one accelerator per worker.", code="fraction")


def check_types(request: JobRequest) -> None:
    if request.accelerators == 0 and request.accelerator_types:
        raise ValidationError("A CPU-only job (0 accelerators) cannot ask for accelerator types.", code="cpu_only")


def check_topology_mode(mode: str) -> None:
    if mode not in Job.TopologyMode.values:
        raise ValidationError("Choose required or preferred.", code="invalid_choice")


def check_program(request: JobRequest) -> None:
    """Something to run (an image or a script), an image name of a sane length, a command of strings. A
    Ray job runs its entrypoint instead (``check_ray``); its image, if any, is the Ray image for Kubernetes."""
    if request.kind == Job.Kind.RAY:
        check_max_length(request.image, limit("image"))
        if request.script.strip():
            raise ValidationError("A Ray job runs its entrypoint, not a batch script.", code="ray_script")
        return
    if request.kind == Job.Kind.SESSION:
        if request.image.strip() or request.script.strip():
            raise ValidationError(
                "An interactive session runs its app on the node; leave the image and the script empty.",
                code="session_program",
            )
        return
    if request.kind == Job.Kind.SERVICE:
        if request.script.strip():
            raise ValidationError("A service replica runs its command; leave the script empty.", code="service_script")
        check_max_length(request.image, limit("image"))
        return  # its command is required (``check_service_command``); the image is optional
    if not request.image.strip() and not request.script.strip():
        raise ValidationError("Give a container image (and command) or a batch script.", code="required")
    check_max_length(request.image, limit("image"))


def check_command(command: Sequence[Any]) -> None:
    if any(not isinstance(part, str) for part in command):
        raise ValidationError("The command is a list of strings.", code="invalid")


def check_env(env: Mapping[str, Any]) -> None:
    """Environment names that are valid and not reserved, and values that are strings (never quoting a value:
    it may be secret)."""
    for key, value in env.items():
        if not ENV_NAME.match(str(key)) or str(key).startswith("QM_"):
            raise ValidationError(
                f"{key!r} is not a valid environment variable name (QM_ names are reserved).", code="env_name"
            )
        if not isinstance(value, str):
            raise ValidationError(f"The value of {key} must be a string.", code="env_value")


def check_tpu_type(request: JobRequest) -> None:
    """A TPU type of a generation we know and a size it comes in (``clusters/backends/tpu/accelerators.py``)."""
    if request.tpu_type:
        check_max_length(request.tpu_type, limit("tpu_type"))
        try:
            check_shape(request.tpu_type)
        except UnknownAcceleratorType as error:
            message = f"{error}. Give a Cloud TPU type such as v5p-32 or v5litepod-8."
            raise ValidationError(message, code="tpu_type") from None


def check_tpu_topology(request: JobRequest) -> None:
    """A topology only with a type, like ``2x2x4``, of as many chips as the type's slice."""
    if not request.tpu_topology:
        return
    check_max_length(request.tpu_topology, limit("tpu_topology"))
    if not request.tpu_type:
        raise ValidationError("A TPU topology needs a TPU type (tpu_type) too.", code="tpu_topology")
    try:
        chips_in_topology(request.tpu_topology)
        generation_of(request.tpu_type)
    except UnknownAcceleratorType as error:
        if "topology" in str(error):
            raise ValidationError(f"{error}.", code="tpu_topology") from None
        return  # the type is wrong: ``check_tpu_type`` says so
    try:
        check_shape(request.tpu_type, request.tpu_topology)
    except UnknownAcceleratorType as error:
        raise ValidationError(f"{error}.", code="tpu_topology") from None


def limit(name: str) -> int:
    """The length limit of text field ``name``."""
    most = FIELDS[name].max_length
    assert most is not None
    return most


# --- Ray jobs ------------------------------------------------------------------------------------------

#: The keys of Ray's runtime environment a job may give, and what each must be. Left out: ``conda`` (needs
#: conda on the nodes), ``container``/``image_uri`` (a container per worker: on Kubernetes the job's image
#: is the container, on Slurm the cluster's runtime decides) and ``java_jars``/``nsight`` (not for Python
#: work here). Ray itself checks the values further when the job starts.
RUNTIME_ENV_KEYS = {
    "pip": "a list of requirements, or an object with packages (a list) and pip_check or pip_version",
    "uv": "a list of requirements, or an object with packages (a list)",
    "env_vars": "an object of environment variable names and string values",
    "working_dir": "a path on the cluster's nodes or a URI (s3://, gs://, https://...zip)",
    "py_modules": "a list of paths or URIs",
    "excludes": "a list of file patterns",
    "config": "an object with setup_timeout_seconds (a whole number) or eager_install (true or false)",
}


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _runtime_env_value_ok(key: str, value: Any) -> bool:
    if key in ("pip", "uv"):
        if isinstance(value, dict):
            return _strings(value.get("packages")) and set(value) <= {"packages", "pip_check", "pip_version"}
        return _strings(value)
    if key == "env_vars":
        return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())
    if key == "working_dir":
        return isinstance(value, str) and bool(value.strip())
    if key in ("py_modules", "excludes"):
        return _strings(value)
    return (
        isinstance(value, dict)
        and set(value) <= {"setup_timeout_seconds", "eager_install"}
        and all(isinstance(v, bool) == (k == "eager_install") and isinstance(v, int) for k, v in value.items())
    )


def check_runtime_env(request: JobRequest) -> None:
    """Ray's runtime environment: only for a Ray job; a JSON object of the keys ``RUNTIME_ENV_KEYS`` knows,
    each of the right shape, environment names valid and not reserved."""
    env = request.runtime_env
    if not isinstance(env, Mapping):
        raise ValidationError('The runtime environment is a JSON object, e.g. {"pip": ["numpy"]}.', code="invalid")
    if not env:
        return
    if request.kind != Job.Kind.RAY:
        raise ValidationError("Only a Ray job (kind ray) has a runtime environment.", code="not_ray")
    if unknown := sorted(str(k) for k in env if k not in RUNTIME_ENV_KEYS):
        raise ValidationError(
            f"Unknown runtime environment key(s): {', '.join(unknown)}. Known: {', '.join(RUNTIME_ENV_KEYS)}.",
            code="runtime_env_key",
        )
    for key, value in env.items():
        if not _runtime_env_value_ok(key, value):
            raise ValidationError(f"runtime_env.{key} must be {RUNTIME_ENV_KEYS[key]}.", code="runtime_env_value")
    check_env(env.get("env_vars", {}))
    check_max_length(json.dumps(env), limit("runtime_env"))


def check_ray(request: JobRequest) -> None:
    """A Ray job has an entrypoint (and no command); another job has neither entrypoint nor head."""
    if request.kind not in Job.Kind.values:
        raise ValidationError(f"Choose a kind: {', '.join(Job.Kind.values)}.", code="invalid_choice")
    if request.kind != Job.Kind.RAY:
        if request.entrypoint.strip():
            raise ValidationError("Only a Ray job (kind ray) has an entrypoint.", code="not_ray")
        return
    if not request.entrypoint.strip():
        raise ValidationError(
            "A Ray job needs an entrypoint: the command it runs, e.g. python main.py.", code="required"
        )
    if "\0" in request.entrypoint:
        raise ValidationError("The entrypoint cannot hold a NUL character.", code="invalid")
    check_max_length(request.entrypoint, limit("entrypoint"))


def check_ray_command(request: JobRequest) -> None:
    if request.kind == Job.Kind.RAY and request.command:
        raise ValidationError("A Ray job runs its entrypoint; leave the command empty.", code="ray_command")


def ray_fields(request: JobRequest) -> dict[str, Any]:
    """The ``Job`` fields of a request's kind and Ray parts (the head's only for a Ray job)."""
    fields: dict[str, Any] = {"kind": request.kind}
    if request.kind == Job.Kind.RAY:
        fields.update(
            entrypoint=request.entrypoint.strip(),
            runtime_env=dict(request.runtime_env),
            head_accelerators=request.head_accelerators,
            head_cpu=request.head_cpu,
            head_memory=request.head_memory,
        )
    return fields


def ray_clone(job: Job) -> dict[str, Any]:
    """A job's kind, Ray and session parts as initial values for a new submission (``actions.clone_request``)."""
    return {
        "kind": job.kind,
        "session_app": job.session_app,
        "session_idle_minutes": job.session_idle_minutes,
        "entrypoint": job.entrypoint,
        "runtime_env": dict(job.runtime_env),
        "head_accelerators": job.head_accelerators,
        "head_cpu": job.head_cpu,
        "head_memory": job.head_memory,
    }


# --- interactive sessions ------------------------------------------------------------------------------


def check_session_app(request: JobRequest) -> None:
    """A session's app is one of ``Job.SessionApp``; another kind of job has none."""
    if request.kind != Job.Kind.SESSION:
        if request.session_app:
            raise ValidationError("Only an interactive session (kind session) runs an app.", code="not_session")
        return
    if request.session_app and request.session_app not in Job.SessionApp.values:
        raise ValidationError(f"Choose an app: {', '.join(Job.SessionApp.values)}.", code="invalid_choice")


def check_session_idle(request: JobRequest) -> None:
    """Idle minutes only for a session, from 1 to ``SESSION_MAX_IDLE_MINUTES``."""
    minutes = request.session_idle_minutes
    if minutes is None:
        return
    if request.kind != Job.Kind.SESSION:
        raise ValidationError("Only an interactive session (kind session) ends when idle.", code="not_session")
    most = settings.SESSION_MAX_IDLE_MINUTES
    if isinstance(minutes, bool) or not isinstance(minutes, int) or not 1 <= minutes <= most:
        raise ValidationError(f"A session's idle time is from 1 to {most} minutes.", code="out_of_range")


def check_session_shape(request: JobRequest) -> None:
    """A session is one worker, with no command and no Ray parts."""
    if request.kind != Job.Kind.SESSION:
        return
    if request.workers != 1:
        raise ValidationError("An interactive session is one worker.", code="session_workers")


def check_session_time(request: JobRequest) -> None:
    """A session's time limit is at most ``SESSION_MAX_HOURS``."""
    most = settings.SESSION_MAX_HOURS
    if request.kind == Job.Kind.SESSION and request.time_limit > most * 3600:
        raise ValidationError(
            f"An interactive session's time limit is at most {most} hour{'s' if most != 1 else ''}.",
            code="session_time_limit",
        )


def check_session_command(request: JobRequest) -> None:
    if request.kind == Job.Kind.SESSION and request.command:
        raise ValidationError("An interactive session runs its app; leave the command empty.", code="session_command")


def session_fields(request: JobRequest) -> dict[str, Any]:
    """The ``Job`` fields of a session (none for other jobs): its app (JupyterLab unless it names another) and
    its idle minutes (``SESSION_IDLE_MINUTES`` unless it gives some)."""
    if request.kind != Job.Kind.SESSION:
        return {}
    idle = request.session_idle_minutes
    return {
        "session_app": request.session_app or Job.SessionApp.JUPYTERLAB,
        "session_idle_minutes": settings.SESSION_IDLE_MINUTES if idle is None else idle,
    }


# --- service replicas ----------------------------------------------------------------------------------

#: The longest health path a replica may name (``Job.serve_health_path``).
HEALTH_PATH_MAX = Job._meta.get_field("serve_health_path").max_length or 200
SPREAD_GROUP_MAX = Job._meta.get_field("spread_group").max_length or 100


def check_service_port(request: JobRequest) -> None:
    """A port from 1 to 65535, or 0 (the cluster picks a free one and passes it as ``$PORT``); only a service
    replica serves on one."""
    port = request.serve_port
    if request.kind != Job.Kind.SERVICE:
        if port:
            raise ValidationError("Only a service replica (kind service) serves on a port.", code="not_service")
        return
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValidationError(
            "A port from 1 to 65535, or 0: the cluster picks one and passes it as $PORT.", code="port"
        )


def check_service_health(request: JobRequest) -> None:
    """A health path that starts with ``/`` (printable, no spaces), only for a service replica."""
    path = request.serve_health_path
    if request.kind != Job.Kind.SERVICE:
        if path:
            raise ValidationError("Only a service replica (kind service) has a health path.", code="not_service")
        return
    if not path.startswith("/") or not path.isascii() or not path.isprintable() or " " in path or "#" in path:
        raise ValidationError("A path that starts with /, e.g. /healthz (no spaces).", code="health_path")
    check_max_length(path, HEALTH_PATH_MAX)


def check_service_command(request: JobRequest) -> None:
    """A service replica runs a command (its program, serving HTTP until it is stopped), as one worker."""
    if request.kind != Job.Kind.SERVICE:
        return
    if not request.command or not any(part.strip() for part in request.command if isinstance(part, str)):
        raise ValidationError(
            "A service replica needs a command: the program that serves HTTP, e.g. python3 -m http.server.",
            code="required",
        )


def check_service_shape(request: JobRequest) -> None:
    if request.kind == Job.Kind.SERVICE and request.workers != 1:
        raise ValidationError("A service replica is one worker.", code="service_workers")


def check_spread_group(request: JobRequest) -> None:
    check_max_length(request.spread_group, SPREAD_GROUP_MAX)


#: The checks of one field each: (field, check of the request). Later checks of a field win over earlier.
CHECKS: tuple[tuple[str, Callable[[JobRequest], None]], ...] = (
    ("name", lambda r: check_name(r.name)),
    # A TPU job's accelerators are its slice's chips (``JobRequest.__post_init__``), which may pass the cap.
    ("accelerators", lambda r: None if r.tpu_type else check_bounds("accelerators", r.accelerators)),
    ("accelerator_milli", check_share),
    ("accelerator_types", check_types),
    ("workers", lambda r: check_bounds("workers", r.workers)),
    ("cpu", lambda r: check_bounds("cpu", r.cpu)),
    ("memory", lambda r: check_bounds("memory", r.memory)),
    ("time_limit", lambda r: check_bounds("time_limit", r.time_limit)),
    ("topology_mode", lambda r: check_topology_mode(r.topology_mode)),
    ("max_price_per_hour", lambda r: check_price(r.max_price_per_hour)),
    ("data_locality", lambda r: check_max_length(r.data_locality, limit("data_locality"))),
    ("image", check_program),
    ("command", lambda r: check_command(r.command)),
    ("env", lambda r: check_env(r.env)),
    ("secret_env", lambda r: check_env(r.secret_env)),
    ("max_retries", lambda r: check_bounds("max_retries", r.max_retries)),
    ("idempotency_key", lambda r: check_max_length(r.idempotency_key, limit("idempotency_key"))),
    ("command", check_ray_command),
    ("entrypoint", check_ray),
    ("runtime_env", check_runtime_env),
    ("head_accelerators", lambda r: check_bounds("head_accelerators", r.head_accelerators)),
    ("head_cpu", lambda r: check_bounds("head_cpu", r.head_cpu)),
    ("head_memory", lambda r: check_bounds("head_memory", r.head_memory)),
    ("tpu_type", check_tpu_type),
    ("tpu_topology", check_tpu_topology),
    ("session_app", check_session_app),
    ("session_idle_minutes", check_session_idle),
    ("workers", check_session_shape),
    ("time_limit", check_session_time),
    ("command", check_session_command),
    ("serve_port", check_service_port),
    ("serve_health_path", check_service_health),
    ("command", check_service_command),
    ("workers", check_service_shape),
    ("spread_group", check_spread_group),
)


def shape_errors(request: JobRequest) -> dict[str, str]:
    """What is wrong with ``request`` that neither the database nor the actor is needed to see, by field
    (``JobRequest``'s names)."""
    errors: dict[str, str] = {}
    for name, check in CHECKS:
        try:
            check(request)
        except ValidationError as error:
            errors[name] = " ".join(error.messages)
    return errors
