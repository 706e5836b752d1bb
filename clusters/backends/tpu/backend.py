"""Google Cloud TPU backend: one project and zone, through the Cloud TPU v2 API over REST.

**Slices are the unit.** A Quartermaster node on a TPU cluster is one slice (a ``node`` in the API), or the
capacity to provision one: the option ``slices`` (``{"v5p-32": 2, "v5litepod-8/2x4": 4}``, a type and
optionally its topology) says how many slices of each shape Quartermaster may hold at once in this project
and zone (its reservation or quota). ``inventory`` reports one node per **slot**: ``qm-v5p-32-1``,
``qm-v5p-32-2``, ... (``qm-<type>[-<topology>]-<n>``), with the shape's chips, labels
``tpu/accelerator-type``, ``tpu/topology`` (where the shape names one) and ``tpu/provisioned=false``, ready
and schedulable. A slot whose slice exists *is* that slice (the slice is created under the slot's name), so
the engine (which keeps a job of a shape to nodes of that shape, ``scheduler/engine/nodes.py``
``NodeTable.shaped``) chooses the slots, and the backend provisions exactly what it chose.

Existing slices that Quartermaster did not make (no ``quartermaster-job`` label, not a slot) are reported for
the fleet's view and health, **unschedulable** and with no allocatable chips: they belong to whoever made
them (so a job asking for a shape only such slices have is refused at submission, as never fitting) — unless
their owner **lends** one to a team: labels it ``quartermaster-team=<team slug>`` and runs Quartermaster's
slice agent (``deploy/tpu_agent.py``) on its hosts. Such a slice is reported schedulable with its chips and
the label ``qm/lent-to`` (``base.LENT_TO``), so the engine places that team's jobs of its shape there and no
one else's, and busy while it runs one. A job is given a lent slice through the slice's metadata (UpdateNode,
the owner's own keys kept): ``quartermaster-run`` (the job's backend id) and ``quartermaster-script`` (the same
program a provisioned slice's startup script runs, exit report included); the agent on each host reads them
from its metadata server's long poll and runs the program. ``signal`` adds ``quartermaster-stop`` (the agents
send SIGTERM); ``cancel`` removes the keys (the agents stop the program, SIGKILL after their grace); an owner
who removes them takes the slice back, which the job sees as preempted. Quartermaster's own slices carry
``quartermaster-job`` (the job id) and ``quartermaster-team`` (the team's slug).

A job's backend id names what it runs on (``Run``): ``qm-42`` a queued resource, ``qm-42=lab-a`` a lent slice
alone, ``qm-42:lab-a`` both (a multislice job over a slot and a lent slice; the lent slices are told first, so a
submission cut short between the two is found unfinished and completed). On its slots a job is a **queued
resource** with one ``node_spec`` entry per slot, each a slice of the job's type and
topology under the chosen slot's name (``workers`` > 1: multislice, a gang of slices in this zone). It waits
in Google's queue, is provisioned, and each slice runs the startup script on every host. The startup script
is the job's ``script``, else its ``image`` run under Docker, else its ``command``, after its environment; it
then reports the program's exit code through the job's token (``POST /api/v1/jobs/{id}/report/``, docs/jobs.md):
worker 0 of the first slice reports whatever its code, worker 0 of every other slice only a failure, so the
first failure of any slice is what comes back, and success once the first slice (which a multislice program
cannot finish without the others) exits 0. A spot job gets the Spot tier, any other the Guaranteed tier,
reserved unless the cluster has no reservation; a job's ``queue`` may name the reservation.

An elastic pool's slices (``provision``) are queued resources of one slice each, labelled ``quartermaster-pool``;
their startup script starts the slice agent, and they run any team's jobs of their shape as lent slices do.

Options: ``project`` and ``zone`` (required); ``slices`` (above; none: nothing can be placed here);
``reservation`` (the reservation reserved jobs use); ``reserved`` (default true; false: non-spot jobs ask for
on-demand capacity); ``runtime_version`` (else the generation's default in ``accelerators.py``);
``host_cpu`` and ``host_memory_mib`` (millicores and MiB of one TPU VM host, which the API does not report;
default 0). The option ``accelerator_type`` of earlier versions (every job got one new slice of it) is gone:
a job names its own type, and what may be provisioned is ``slices``.

Credentials (the cluster's encrypted secret, never options): ``service_account_json`` (the text of a
service-account key file; scoped to cloud-platform), or ``access_token`` (an OAuth 2 bearer token someone
else refreshes, e.g. from workload identity). None at all means anonymous requests, which only a local
server or emulator accepts; the endpoint is then e.g. ``http://127.0.0.1:8470`` (the client keeps an
``http://`` scheme as given and speaks plain HTTP; without a scheme it uses HTTPS). An empty endpoint is
``https://tpu.googleapis.com``.

What the TPU API lacks: it has no cordon, drain or resume (a slice belongs to whoever created it; nothing
else lands on it), so those only check that the slice exists and leave the stopping to Quartermaster's own
node state. It has no notion of a job finishing either: a queued resource is pending, then ACTIVE until
deleted, so ``status`` never says succeeded; the job's end comes from the workload's report. Nor can a job
be signalled: ``signal`` does nothing (whoever signalled stops the job when its grace ends). Nor does it keep a
program's output: ``logs`` finds the job (``NotFound`` if there is none) and raises ``LogsUnavailable`` saying
where the output may be instead.

Failures (docs/backends.md). ``submit`` raises ``InvalidJob`` for a job that cannot become a queued resource
(no TPU type, an unknown type, a topology that is not the type's, nodes that are not free slots of the job's
shape, a spot job in a reservation) and when the API refuses the create as invalid (INVALID_ARGUMENT,
FAILED_PRECONDITION), forbidden (PERMISSION_DENIED) or naming what does not exist (NOT_FOUND, e.g. the
reservation); a slot whose previous slice is still being deleted, quota (RESOURCE_EXHAUSTED), ABORTED,
UNAVAILABLE, DEADLINE_EXCEEDED and INTERNAL are transient. ``status`` gives a FAILED queued resource's words
with ``Failure.UNSCHEDULABLE`` (no capacity) or ``Failure.INVALID``, a slice Cloud TPU took back (SUSPENDED by
the service) as ``Failure.PREEMPTED``, and an ACTIVE queued resource one of whose slices is broken
(preempted, terminated, repairing, gone) as ``Failure.NODE_LOST``.

Size: one backend speaks one API, and Cloud TPU's is wide: queued resources with their slices, spot and
reservations, lent slices, elastic pools' slices, start-up scripts, and the failure modes each has; the pure
parsing of names and slices above ``TpuBackend`` would split out first (issue 32 item 4 makes each backend kind
one folder with its descriptor).
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import shlex
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any

import requests
from google.api_core import exceptions as api_exceptions
from google.auth import exceptions as auth_exceptions
from google.auth.credentials import AnonymousCredentials, Credentials
from google.auth.transport.requests import AuthorizedSession
from google.auth.transport.requests import Request as AuthRequest
from google.cloud import tpu_v2
from google.cloud.tpu_v2.services.tpu.transports import TpuRestTransport
from google.oauth2 import credentials as oauth2_credentials
from google.oauth2 import service_account
from google.protobuf import field_mask_pb2, json_format  # type: ignore[import-untyped]

from clusters.backends.base import (
    ELASTIC_POOL,
    LENT_TO,
    LOG_LIMIT,
    AcceleratorInfo,
    AuthenticationFailed,
    Backend,
    BackendError,
    BadResponse,
    DryRun,
    Failure,
    HealthSignal,
    InvalidJob,
    Inventory,
    JobSpec,
    JobState,
    JobStatus,
    LogChunk,
    LogsUnavailable,
    NodeInfo,
    NotFound,
    Provisioned,
    Refused,
    Unreachable,
    not_allowed,
)
from clusters.backends.tpu.accelerators import (
    GENERATIONS,
    UnknownAcceleratorType,
    check_shape,
    chips,
    chips_in_topology,
    generation_of,
    shape_of,
    split_type,
    type_for,
    type_of_model,
)
from common import outbound

DEFAULT_ENDPOINT = "https://tpu.googleapis.com"
SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
#: The label on every slice Quartermaster asks for; its value is the job id, as labels allow.
JOB_LABEL = "quartermaster-job"
#: The team a slice is for: the job's team on Quartermaster's slices (see the module's docstring).
TEAM_LABEL = "quartermaster-team"
#: A slice's metadata while it runs a job of Quartermaster's on a slice lent to a team (``deploy/tpu_agent.py``
#: on its hosts reads them): the run (the job's backend id), its program, and a request to stop.
RUN_KEY = "quartermaster-run"
SCRIPT_KEY = "quartermaster-script"
STOP_KEY = "quartermaster-stop"
#: The label of a slice an elastic pool asked for: its pool. Such a slice takes any team's jobs of its shape, told
#: through its metadata like a lent slice, by the agent its startup script installs (``pool_startup_script``).
POOL_LABEL = "quartermaster-pool"
#: The slice agent, as a pool slice's startup script carries it to every host.
AGENT = Path(__file__).resolve().parents[3] / "deploy" / "tpu_agent.py"
#: Where a TPU VM reads which host of its slice it is (0 is the first), from inside the VM: its metadata server
#: (``GCE_METADATA_HOST`` where set, as Google's libraries honour it).
WORKER_NUMBER_URL = (
    "http://${GCE_METADATA_HOST:-metadata.google.internal}/computeMetadata/v1/instance/attributes/agent-worker-number"
)

State = tpu_v2.Node.State
Health = tpu_v2.Node.Health
QrState = tpu_v2.QueuedResourceState.State

#: Slices on their way out or under repair: no new work should be placed there.
UNSCHEDULABLE = frozenset(
    {
        State.DELETING,
        State.REPAIRING,
        State.STOPPING,
        State.STOPPED,
        State.PREEMPTED,
        State.TERMINATED,
        State.HIDING,
        State.HIDDEN,
    }
)
#: Slices whose chips cannot be used at all until Cloud TPU fixes or replaces them.
BROKEN = frozenset({State.REPAIRING, State.PREEMPTED, State.TERMINATED, State.UNKNOWN})
HEALTHY = frozenset({Health.HEALTHY, Health.HEALTH_UNSPECIFIED})

#: Queued-resource states as job states; SUSPENDING and SUSPENDED depend on who suspended (``_job_state``).
JOB_STATES = {
    QrState.STATE_UNSPECIFIED: JobState.UNKNOWN,
    QrState.CREATING: JobState.PENDING,
    QrState.ACCEPTED: JobState.PENDING,
    QrState.WAITING_FOR_RESOURCES: JobState.PENDING,
    QrState.PROVISIONING: JobState.PENDING,
    QrState.ACTIVE: JobState.RUNNING,
    QrState.FAILED: JobState.FAILED,
    QrState.DELETING: JobState.CANCELLED,
}

#: google.rpc.Code numbers of a failed queued resource that mean "no capacity": RESOURCE_EXHAUSTED, UNAVAILABLE.
NO_CAPACITY_CODES = frozenset({8, 14})

#: ``AcceleratorConfig.Type`` to the accelerator-type prefix, for a slice that gives only its config.
CONFIG_PREFIXES = {"V2": "v2", "V3": "v3", "V4": "v4", "V5LITE_POD": "v5litepod", "V5P": "v5p", "V6E": "v6e"}
CONFIG_TYPES = {prefix: config for config, prefix in CONFIG_PREFIXES.items()}

# What the API accepts: queued resource ids are RFC 1035 labels; node ids are a little wider.
_QR_ID = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_NODE_ID = re.compile(r"^[A-Za-z0-9_.~+%-]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TRUE = frozenset({"1", "true", "yes", "on"})


def queued_resource_id(job_id: str) -> str:
    """A DNS-safe queued resource id for a job id, the same every time (so resubmitting finds it).

    ``42`` -> ``qm-42``; an id that had to be changed (upper case, other characters, too long) gets a
    short hash of the original, so ``Job_1`` and ``job-1`` do not meet.
    """
    slug = re.sub(r"[^a-z0-9]+", "-", job_id.lower()).strip("-")
    name = f"qm-{slug}" if slug else "qm"
    if slug == job_id and len(name) <= 63:
        return name
    digest = hashlib.sha256(job_id.encode()).hexdigest()[:8]
    return f"{name[: 63 - 9].rstrip('-')}-{digest}"


@dataclass(frozen=True, slots=True)
class Slot:
    """Room for one slice Quartermaster may provision: its node name, type and topology ("": the API's)."""

    name: str
    accelerator_type: str
    topology: str

    @property
    def shape(self) -> str:
        return shape_of(self.accelerator_type, self.topology)


@dataclass(frozen=True, slots=True)
class Run:
    """What a job runs on, as its backend id says: its queued resource (for the slots it was given), and the
    slices lent to its team it was given. ``qm-42``: a queued resource only; ``qm-42:train-a,train-b``: a
    queued resource and two lent slices; ``qm-42=train-a``: a lent slice only (no queued resource exists)."""

    qr_id: str
    provisioned: bool = True
    lent: tuple[str, ...] = ()

    @property
    def backend_id(self) -> str:
        if not self.lent:
            return self.qr_id
        return f"{self.qr_id}{':' if self.provisioned else '='}{','.join(self.lent)}"

    @classmethod
    def parse(cls, backend_id: str) -> Run | None:
        """The run of a backend id (a queued resource's full name too); None for what is not one."""
        short = _short(backend_id) if "/queuedResources/" in backend_id else backend_id
        for mark, provisioned in ((":", True), ("=", False)):
            if mark in short:
                qr_id, _, names = short.partition(mark)
                lent = tuple(names.split(","))
                if not _QR_ID.match(qr_id) or not all(_NODE_ID.match(n) for n in lent):
                    return None
                return cls(qr_id, provisioned, lent)
        return cls(short) if _QR_ID.match(short) else None


def parse_slices(option: Any) -> tuple[Slot, ...]:
    """The slots of the ``slices`` option (``{"v5p-32": 2, "v5p-32/4x2x2": 1}``), in a stable order;
    ``BackendError`` naming what is wrong with it."""
    if option in (None, ""):
        return ()
    if not isinstance(option, Mapping):
        raise BackendError('the TPU option slices is a mapping of slice shape to count, e.g. {"v5p-32": 2}')
    slots: list[Slot] = []
    for shape, count in sorted(option.items()):
        accelerator_type, _, topology = str(shape).partition("/")
        try:
            check_shape(accelerator_type, topology)
        except UnknownAcceleratorType as error:
            raise BackendError(f"the TPU option slices: {error}") from None
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= 1000:
            raise BackendError(f"the TPU option slices: the count of {shape} must be a whole number 0-1000")
        stem = f"qm-{accelerator_type}-{topology}" if topology else f"qm-{accelerator_type}"
        slots.extend(Slot(f"{stem}-{n}", accelerator_type, topology) for n in range(1, count + 1))
    return tuple(slots)


def hosts_of(accelerator_type: str, chip_count: int) -> int:
    """TPU VM hosts in a slice not yet made (the API counts them once it exists): 4 chips a host, except that
    v5e and v6e slices of up to 8 chips are one host."""
    if accelerator_type.startswith(("v5litepod", "v6e")) and chip_count <= 8:
        return 1
    return max(1, chip_count // 4)


def _label_value(value: str) -> str:
    return re.sub(r"[^a-z0-9_-]", "-", value.lower())[:63]


def _short(name: str) -> str:
    return name.rsplit("/", 1)[-1]


def _flag(value: Any, default: bool) -> bool:
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in _TRUE


def _already_exists(error: BaseException | None) -> bool:
    """409 is ALREADY_EXISTS or ABORTED (a concurrent change); only the error body's status tells them apart."""
    if isinstance(error, api_exceptions.AlreadyExists):
        return True
    if not isinstance(error, api_exceptions.Conflict) or error.response is None:
        return False
    try:
        status = error.response.json()["error"]["status"]
    except (ValueError, KeyError, TypeError):
        return False
    return bool(status == "ALREADY_EXISTS")


def _said(error: api_exceptions.GoogleAPICallError) -> tuple[str, str]:
    """(the error's message for the message, the answer's body for the log). api_core makes a body that is
    not JSON the error's message: that is not repeated, whatever answered."""
    response = error.response
    if isinstance(response, requests.Response):
        try:
            response.json()
        except ValueError:
            return "(an answer that is not JSON)", str(error.message)
    return str(error.message), ""


def _enum_name(value: Any) -> str:
    return str(getattr(value, "name", value))


class TpuBackend(Backend):
    kind = "tpu"

    def __init__(
        self,
        endpoint: str,
        credentials: Mapping[str, str] | None = None,
        options: Mapping[str, Any] | None = None,
        *,
        dry_run: bool = False,
        timeout: float = 10.0,
        destinations: outbound.Policy | None = None,
    ) -> None:
        super().__init__(
            endpoint or DEFAULT_ENDPOINT,
            credentials,
            options,
            dry_run=dry_run,
            timeout=timeout,
            destinations=destinations,
        )
        self.project = str(self.options.get("project") or "")
        self.zone = str(self.options.get("zone") or "")
        if not self.project or not self.zone:
            raise BackendError("a TPU cluster needs the options project and zone (e.g. us-east5-a)")
        self.parent = f"projects/{self.project}/locations/{self.zone}"
        self.slots = parse_slices(self.options.get("slices"))
        self.slot_names = {slot.name: slot for slot in self.slots}

    # the client
    @cached_property
    def client(self) -> tpu_v2.TpuClient:
        with self._calls("connecting"):
            # The REST transport as TpuClient(transport="rest") builds it, then confined to the outbound policy:
            # its session (every API call) and the session google-auth refreshes tokens with (a service
            # account's token_uri, which comes from the key the admin pasted).
            transport = TpuRestTransport(
                host=self.endpoint, credentials=self._google_credentials(), always_use_jwt_access=True
            )
            session: AuthorizedSession = transport._session
            self.destinations.confine(session)
            session._auth_request = AuthRequest(self.destinations.session())
            return tpu_v2.TpuClient(transport=transport)

    def _google_credentials(self) -> Credentials:
        given = self.credentials
        if given.get("service_account_json"):
            try:
                info = json.loads(given["service_account_json"])
                key: Credentials = service_account.Credentials.from_service_account_info(info, scopes=SCOPES)  # type: ignore[no-untyped-call]
                return key
            except (ValueError, TypeError, KeyError) as error:
                # The message names what is missing, never the key itself.
                raise AuthenticationFailed(
                    f"{self._where}: service_account_json is not a service-account key file: {error}"
                ) from None
        if given.get("access_token"):
            return oauth2_credentials.Credentials(token=given["access_token"])  # type: ignore[no-untyped-call]
        if given:
            raise AuthenticationFailed(
                f"{self._where}: unknown credential fields {', '.join(sorted(given))}; "
                "give service_account_json or access_token"
            )
        return AnonymousCredentials()  # type: ignore[no-untyped-call]

    @property
    def _where(self) -> str:
        return f"Cloud TPU API at {self.endpoint} (project {self.project}, zone {self.zone})"

    @contextmanager
    def _calls(self, doing: str) -> Iterator[None]:
        """Turn the client's, google-auth's and requests' exceptions into the backend's."""
        where = self._where
        hint = "" if self.credentials else " (no credentials configured: requests are anonymous)"
        try:
            yield
        except (api_exceptions.Unauthorized, api_exceptions.Forbidden) as error:
            said, detail = _said(error)
            raise AuthenticationFailed(
                f"{where} refused the credentials while {doing}: HTTP {error.code} {said}{hint}", detail=detail
            ) from error
        except api_exceptions.NotFound as error:
            said, detail = _said(error)
            raise NotFound(f"{where}: not found while {doing}: {said}", detail=detail) from error
        except api_exceptions.ClientError as error:  # 400, 409, 412, 429: understood and refused
            said, detail = _said(error)
            raise Refused(f"{where} refused {doing}: HTTP {error.code} {said}", detail=detail) from error
        except (
            api_exceptions.BadGateway,
            api_exceptions.ServiceUnavailable,
            api_exceptions.GatewayTimeout,
        ) as error:
            said, detail = _said(error)
            raise Unreachable(f"{where} is unavailable ({doing}): HTTP {error.code} {said}", detail=detail) from error
        except api_exceptions.GoogleAPICallError as error:
            said, detail = _said(error)
            raise BackendError(f"{where} failed while {doing}: HTTP {error.code} {said}", detail=detail) from error
        except json_format.ParseError as error:
            raise BadResponse(
                f"{where} answered something that is not a TPU API response ({doing})", detail=str(error)
            ) from error
        except auth_exceptions.TransportError as error:
            refused = not_allowed(error, f"{where}: the token endpoint")
            if refused is not None:
                raise refused from error
            raise Unreachable(f"{where}: could not reach the token endpoint while {doing}: {error}") from error
        except auth_exceptions.RefreshError as error:
            # A 401 makes the client refresh its token; an access token given as is cannot be refreshed. The
            # token endpoint's answer is in the error's text: the log's, not the message's.
            raise AuthenticationFailed(
                f"{where} refused the token while {doing}, and it could not be refreshed{hint}", detail=str(error)
            ) from error
        except auth_exceptions.GoogleAuthError as error:
            raise AuthenticationFailed(f"{where}: credentials rejected while {doing}: {error}{hint}") from error
        except requests.exceptions.RequestException as error:
            refused = not_allowed(error, where)
            if refused is not None:
                raise refused from error
            raise Unreachable(f"{where} did not answer while {doing}: {type(error).__name__}: {error}") from error

    def _qr_name(self, backend_id: str) -> str:
        if backend_id.startswith(f"{self.parent}/queuedResources/"):
            backend_id = _short(backend_id)
        if not _QR_ID.match(backend_id):
            raise NotFound(f"{self._where}: {backend_id!r} is not a queued resource id")
        return f"{self.parent}/queuedResources/{backend_id}"

    def _node_name(self, node: str) -> str:
        if not _NODE_ID.match(node):
            raise NotFound(f"{self._where}: {node!r} is not a TPU node name")
        return f"{self.parent}/nodes/{node}"

    # reads
    def inventory(self) -> Inventory:
        with self._calls("listing accelerator types"):
            types = [t.type_ for t in self.client.list_accelerator_types(parent=self.parent, timeout=self.timeout)]
        with self._calls("listing TPU nodes"):
            nodes = list(self.client.list_nodes(parent=self.parent, timeout=self.timeout))
        accelerators: dict[str, AcceleratorInfo] = {}
        for accelerator_type in types:
            try:
                prefix, _ = split_type(accelerator_type)
            except UnknownAcceleratorType as error:
                raise BadResponse(f"{self._where}: {error}") from None
            generation = GENERATIONS.get(prefix)
            model = generation.model if generation else prefix
            accelerators.setdefault(
                model,
                AcceleratorInfo(
                    model=model,
                    memory_gib=generation.hbm_gib if generation else 0,
                    generation=f"tpu-{model}",
                    interconnect="ici",
                ),
            )
        reported = [self._node_info(node) for node in nodes]
        existing = {info.name for info in reported}
        free = [self._slot_info(slot) for slot in self.slots if slot.name not in existing]
        for slot in self.slots:  # what may be provisioned counts, whether or not the zone lists it
            generation = generation_of(slot.accelerator_type)
            accelerators.setdefault(
                generation.model, AcceleratorInfo(generation.model, generation.hbm_gib, generation.generation, "ici")
            )
        return Inventory(nodes=tuple(reported + free), accelerators=tuple(accelerators.values()))

    def _slot_info(self, slot: Slot) -> NodeInfo:
        """A free slot: the slice it would become, idle, ready and schedulable."""
        count = check_shape(slot.accelerator_type, slot.topology)
        hosts = hosts_of(slot.accelerator_type, count)
        cpu = hosts * int(self.options.get("host_cpu") or 0)
        memory = hosts * int(self.options.get("host_memory_mib") or 0)
        labels = {
            "tpu/accelerator-type": slot.accelerator_type,
            "tpu/provisioned": "false",
            "tpu/hosts": str(hosts),
        }
        if slot.topology:
            labels["tpu/topology"] = slot.topology
        return NodeInfo(
            name=slot.name,
            accelerator=generation_of(slot.accelerator_type).model,
            accelerators=count,
            accelerators_allocatable=count,
            cpu=cpu,
            cpu_allocatable=cpu,
            memory=memory,
            memory_allocatable=memory,
            topology={"zone": self.zone, "slice": slot.name},
            labels=labels,
        )

    def _slice(self, node: tpu_v2.Node) -> tuple[str, str, int]:
        """(model, accelerator type, chips) of a slice."""
        name = _short(node.name)
        topology = node.accelerator_config.topology if "accelerator_config" in node else ""
        try:
            if node.accelerator_type:
                prefix, _ = split_type(node.accelerator_type)
                accelerator_type = node.accelerator_type
            elif topology:
                config_type = _enum_name(node.accelerator_config.type_)
                if config_type not in CONFIG_PREFIXES:
                    raise UnknownAcceleratorType(f"accelerator config type {config_type}")
                prefix = CONFIG_PREFIXES[config_type]
                accelerator_type = type_for(prefix, chips_in_topology(topology))
            else:
                raise BadResponse(f"{self._where}: node {name} reports no accelerator type")
            count = chips_in_topology(topology) if topology else chips(accelerator_type)
        except UnknownAcceleratorType as error:
            raise BadResponse(f"{self._where}: node {name}: {error}") from None
        generation = GENERATIONS.get(prefix)
        return (generation.model if generation else prefix), accelerator_type, count

    def _node_info(self, node: tpu_v2.Node) -> NodeInfo:
        name = _short(node.name)
        if not name:
            raise BadResponse(f"{self._where} listed a node without a name")
        model, accelerator_type, count = self._slice(node)
        hosts = max(1, len(node.network_endpoints))
        cpu = hosts * int(self.options.get("host_cpu") or 0)
        memory = hosts * int(self.options.get("host_memory_mib") or 0)
        labels = dict(node.labels)
        labels.update(
            {
                "tpu/accelerator-type": accelerator_type,
                "tpu/state": _enum_name(node.state),
                "tpu/health": _enum_name(node.health),
                "tpu/runtime-version": node.runtime_version,
                "tpu/hosts": str(hosts),
            }
        )
        if node.scheduling_config.spot or node.scheduling_config.preemptible:
            labels["tpu/spot"] = "true"
        if node.scheduling_config.reserved:
            labels["tpu/reserved"] = "true"
        if node.queued_resource:
            labels["tpu/queued-resource"] = _short(node.queued_resource)
        if "accelerator_config" in node and node.accelerator_config.topology:
            labels["tpu/topology"] = node.accelerator_config.topology
        # A slice is whole: usable entirely or not at all, and held entirely by the job that asked for it. One
        # Quartermaster did not make has nothing to offer it, ever (not a cordon that may be lifted), unless its
        # owner lends it to a team: then it is that team's (``LENT_TO``), and busy while it runs one of its jobs.
        lent, pool = self._lent_to(node), self._pool_of(node)
        told = bool(lent or pool)  # given its jobs through its metadata, by the agent on its hosts
        running = node.metadata.get(RUN_KEY, "") if told else ""
        held = JOB_LABEL in node.labels or bool(running)
        ours = self._ours(node)
        usable = (ours or told) and node.state not in BROKEN
        labels["tpu/provisioned"] = "true"
        if running:
            labels["tpu/running"] = running
        if lent:
            labels[LENT_TO] = lent
            labels["tpu/owner"] = f"lent to team {lent}: its jobs run through Quartermaster's agent"
        elif pool:
            labels[ELASTIC_POOL] = pool
            labels["tpu/owner"] = f"elastic pool {pool}: jobs run through Quartermaster's agent"
        elif not ours:
            labels["tpu/owner"] = "not Quartermaster: never scheduled"
        return NodeInfo(
            name=name,
            accelerator=model,
            accelerators=count,
            accelerators_allocatable=count if usable else 0,
            cpu=cpu,
            cpu_allocatable=cpu if usable else 0,
            memory=memory,
            memory_allocatable=memory if usable else 0,
            accelerators_used=count if held else 0,
            cpu_used=cpu if held else 0,
            memory_used=memory if held else 0,
            topology={"zone": self.zone, "slice": name},
            ready=node.state == State.READY,
            schedulable=(ours or told) and node.state not in UNSCHEDULABLE,
            labels=labels,
            # its hosts' internal addresses, and external ones where the slice has them
            addresses=tuple(
                dict.fromkeys(
                    address
                    for endpoint in node.network_endpoints
                    for address in (endpoint.ip_address, endpoint.access_config.external_ip)
                    if address
                )
            ),
        )

    def _ours(self, node: tpu_v2.Node) -> bool:
        """Whether a slice is one Quartermaster made for a job (its label, or a slot's name)."""
        return JOB_LABEL in node.labels or _short(node.name) in self.slot_names

    def _lent_to(self, node: tpu_v2.Node) -> str:
        """The team a slice Quartermaster did not make is lent to (its ``quartermaster-team`` label), else ""."""
        if self._ours(node) or POOL_LABEL in node.labels:
            return ""
        return str(node.labels.get(TEAM_LABEL, ""))

    def _pool_of(self, node: tpu_v2.Node) -> str:
        """The elastic pool a slice was asked for (its ``quartermaster-pool`` label), else ""."""
        return "" if self._ours(node) else str(node.labels.get(POOL_LABEL, ""))

    def health(self) -> tuple[HealthSignal, ...]:
        with self._calls("listing TPU nodes"):
            nodes = list(self.client.list_nodes(parent=self.parent, timeout=self.timeout))
        signals: list[HealthSignal] = []
        for node in nodes:
            name = _short(node.name)
            state = _enum_name(node.state)
            signals.append(HealthSignal(name, "ready", node.state == State.READY, f"state {state}"))
            healthy = node.health in HEALTHY and not node.health_description
            message = node.health_description or f"health {_enum_name(node.health)}"
            signals.append(HealthSignal(name, "tpu_health", healthy, message))
            for symptom in node.symptoms:
                observed: datetime | None = symptom.create_time if "create_time" in symptom else None
                detail = f"{_enum_name(symptom.symptom_type)} on worker {symptom.worker_id or '?'}: {symptom.details}"
                signals.append(HealthSignal(name, "tpu_symptom", False, detail, observed_at=observed))
        return tuple(signals)

    def status(self, backend_id: str) -> JobStatus:
        run = self._run(backend_id)
        state, message, reason = JobState.RUNNING, f"running on lent slice(s) {', '.join(run.lent)}", ""
        nodes: tuple[str, ...] = ()
        if run.provisioned:
            name = self._qr_name(run.qr_id)
            with self._calls(f"reading queued resource {run.qr_id}"):
                queued = self.client.get_queued_resource(name=name, timeout=self.timeout)
            state, message, reason = self._job_state(queued.state)
            if queued.state.state == QrState.ACTIVE:
                nodes = tuple(spec.node_id for spec in queued.tpu.node_spec if spec.node_id)
                broken = self._broken(nodes)
                if broken:
                    state, message, reason = JobState.FAILED, f"ACTIVE, but {broken}", Failure.NODE_LOST
        if run.lent and state in (JobState.PENDING, JobState.RUNNING):
            trouble = self._lent_trouble(run)
            if trouble is not None:
                state, message, reason = JobState.FAILED, trouble[0], trouble[1]
            nodes += run.lent
        return JobStatus(backend_id=run.backend_id, state=state, message=message, nodes=nodes, reason=reason)

    def _run(self, backend_id: str) -> Run:
        run = Run.parse(backend_id)
        if run is None:
            raise NotFound(f"{self._where}: {backend_id!r} is not a queued resource id or a run on lent slices")
        return run

    def _lent_trouble(self, run: Run) -> tuple[str, str] | None:
        """(words, ``Failure`` code) for the first lent slice of a run that can no longer run it: gone, broken
        or stopped (``NODE_LOST``), or taken back by its owner, whose metadata no longer names the run
        (``PREEMPTED``); None while every one of them still runs it."""
        for node_id in run.lent:
            try:
                with self._calls(f"reading TPU node {node_id}"):
                    node = self.client.get_node(name=self._node_name(node_id), timeout=self.timeout)
            except NotFound:
                return f"its lent slice {node_id} is gone", Failure.NODE_LOST
            if node.state == State.PREEMPTED and self._pool_of(node):  # a spot pool's slice Cloud TPU took back
                return f"Cloud TPU took back its pool slice {node_id} (spot)", Failure.PREEMPTED
            if node.state in BROKEN or node.state in UNSCHEDULABLE:
                said = f": {node.health_description}" if node.health_description else ""
                return f"its lent slice {node_id} is {_enum_name(node.state)}{said}", Failure.NODE_LOST
            if node.metadata.get(RUN_KEY, "") != run.backend_id:
                return f"the owner of slice {node_id} took it back (its metadata no longer names this job)", (
                    Failure.PREEMPTED
                )
        return None

    def logs(
        self, backend_id: str, worker: str = "", *, offset: str = "", tail: int | None = None, limit: int = LOG_LIMIT
    ) -> LogChunk:
        self.status(backend_id)  # NotFound for no such queued resource, as for every other backend
        raise LogsUnavailable(
            "Cloud TPU keeps no output of the programs it runs: the API Quartermaster reads has none to give. The "
            "output is on the slice's TPU VMs (and in Cloud Logging where the project sends the VMs' logs there): "
            "have the program write what you need to its checkpoint bucket, or to standard output for Cloud Logging."
        )

    def _broken(self, nodes: tuple[str, ...]) -> str:
        """Words for the first slice of an ACTIVE queued resource that is broken or gone ("" if none is): the
        queued resource stays ACTIVE while Cloud TPU repairs or has preempted a slice under it."""
        for node_id in nodes:
            try:
                with self._calls(f"reading TPU node {node_id}"):
                    node = self.client.get_node(name=self._node_name(node_id), timeout=self.timeout)
            except NotFound:
                return f"its slice {node_id} is gone"
            if node.state in BROKEN:
                said = f": {node.health_description}" if node.health_description else ""
                return f"its slice {node_id} is {_enum_name(node.state)}{said}"
        return ""

    @staticmethod
    def _job_state(state: tpu_v2.QueuedResourceState) -> tuple[JobState, str, str]:
        """(state, words, ``Failure`` code) of a queued resource's state."""
        value = state.state
        name = _enum_name(value)
        if value in (QrState.SUSPENDING, QrState.SUSPENDED):
            if state.state_initiator == tpu_v2.QueuedResourceState.StateInitiator.USER:
                return JobState.CANCELLED, f"{name}: the slice was released at the user's request", ""
            words = f"{name}: Cloud TPU took the slice back (spot preemption or maintenance)"
            return JobState.FAILED, words, Failure.PREEMPTED
        if value == QrState.FAILED:
            error = state.failed_data.error if "failed_data" in state else None
            said = error.message if error is not None else ""
            code = error.code if error is not None else 0
            reason = Failure.UNSCHEDULABLE if code in NO_CAPACITY_CODES else Failure.INVALID
            return JobState.FAILED, f"{name}: {said}" if said else name, reason
        if value not in JOB_STATES:
            return JobState.UNKNOWN, f"unrecognised queued resource state {name}", ""
        return JOB_STATES[value], name, ""

    def find(self, job_id: str) -> str | None:
        """The run of a job submitted before: the lent slices whose metadata names it (they were told first,
        and name the whole run), and its queued resource; None when the run is not all there (submitting again
        completes it)."""
        qr_id = queued_resource_id(job_id)
        with self._calls("listing TPU nodes"):
            nodes = list(self.client.list_nodes(parent=self.parent, timeout=self.timeout))
        named = (Run.parse(node.metadata.get(RUN_KEY, "")) for node in nodes if self._lent_to(node))
        run = next((found for found in named if found is not None and found.qr_id == qr_id), Run(qr_id))
        if run.provisioned:
            try:
                with self._calls(f"reading queued resource {qr_id}"):
                    self.client.get_queued_resource(name=self._qr_name(qr_id), timeout=self.timeout)
            except NotFound:
                return None
        return run.backend_id

    # writes
    def submit(self, spec: JobSpec) -> str | DryRun:
        if spec.kind == "session":  # docs/jobs.md, "Interactive sessions": Slurm's for now
            raise InvalidJob(f"job {spec.id}: interactive sessions run on Slurm clusters; this is Cloud TPU")
        if spec.kind == "service":  # docs/jobs.md, "Service replicas": Slurm and the simulated cluster, for now
            raise InvalidJob(f"job {spec.id}: service replicas run on Slurm clusters; this is Cloud TPU")
        qr_id = queued_resource_id(spec.id)
        chosen = self._chosen(spec)
        slots = [(index, where) for index, where in chosen if isinstance(where, Slot)]
        lent = [(index, where) for index, where in chosen if isinstance(where, tpu_v2.Node)]
        run = Run(qr_id, bool(slots), tuple(_short(node.name) for _, node in lent))
        queued = self._queued_resource(spec, slots, len(chosen)) if slots else None
        scripts = {_short(node.name): self._startup_script(spec, index, len(chosen)) for index, node in lent}
        for _, node in lent:
            holder = node.metadata.get(RUN_KEY, "")
            if holder and holder != run.backend_id:  # its last job's end has not been cleaned up yet: soon free
                raise BackendError(f"job {spec.id}: lent slice {_short(node.name)} still runs {holder}")
        if self.dry_run:
            detail: dict[str, Any] = {"queued_resource_id": qr_id if queued is not None else ""}
            if queued is not None:
                detail["queued_resource"] = json_format.MessageToDict(tpu_v2.QueuedResource.pb(queued))
            if lent:
                detail["lent_slices"] = {name: {RUN_KEY: run.backend_id} for name in run.lent}
            return DryRun("submit", f"{self.parent}/queuedResources/{qr_id}", detail)
        # The lent slices first: their metadata names the whole run, so a submission cut short after them is
        # found unfinished (``find``) and completed, never half-run.
        for _, node in lent:
            self._assign(node, run, scripts[_short(node.name)])
        if queued is not None:
            try:
                self._create(qr_id, queued)
            except InvalidJob:
                self._release(run)
                raise
        return run.backend_id

    def _create(self, qr_id: str, queued: tpu_v2.QueuedResource) -> None:
        try:
            with self._calls(f"creating queued resource {qr_id}"):
                # The answer is a long-running operation; status() follows the queued resource instead.
                self.client.create_queued_resource(
                    parent=self.parent, queued_resource=queued, queued_resource_id=qr_id, timeout=self.timeout
                )
        except Refused as error:
            if _already_exists(error.__cause__):  # submitted before: that one is the job
                return
            if isinstance(error.__cause__, api_exceptions.BadRequest):  # INVALID_ARGUMENT, FAILED_PRECONDITION
                raise InvalidJob(str(error)) from error
            # RESOURCE_EXHAUSTED (quota), ABORTED (a concurrent change): waiting may mend them
            raise BackendError(str(error)) from error
        except (AuthenticationFailed, NotFound) as error:
            if isinstance(error.__cause__, api_exceptions.Forbidden | api_exceptions.NotFound):
                # PERMISSION_DENIED (e.g. on the reservation), NOT_FOUND (the reservation, the zone's type)
                raise InvalidJob(str(error)) from error
            raise

    def _assign(self, node: tpu_v2.Node, run: Run, script: str) -> None:
        """Tell a lent slice's agent to run the job: its metadata gets the run and the program, the owner's own
        keys kept (the API replaces the whole map)."""
        if node.metadata.get(RUN_KEY, "") == run.backend_id:
            return  # told before this submission was cut short
        metadata = {k: v for k, v in node.metadata.items() if k not in (RUN_KEY, SCRIPT_KEY, STOP_KEY)}
        metadata.update({RUN_KEY: run.backend_id, SCRIPT_KEY: script})
        self._set_metadata(_short(node.name), metadata)

    def _release(self, run: Run, stop: bool = False) -> None:
        """Take the run off its lent slices (their agents stop its program), or with ``stop`` only ask the
        program to stop (``STOP_KEY``: SIGTERM, to checkpoint and exit). A slice gone, or given to another
        run since, is left alone."""
        for node_id in run.lent:
            try:
                with self._calls(f"reading TPU node {node_id}"):
                    node = self.client.get_node(name=self._node_name(node_id), timeout=self.timeout)
            except NotFound:
                continue
            if node.metadata.get(RUN_KEY, "") != run.backend_id:
                continue
            metadata = dict(node.metadata)
            if stop:
                metadata[STOP_KEY] = "term"
            else:
                for key in (RUN_KEY, SCRIPT_KEY, STOP_KEY):
                    metadata.pop(key, None)
            self._set_metadata(node_id, metadata)

    def _set_metadata(self, node_id: str, metadata: Mapping[str, str]) -> None:
        node = tpu_v2.Node(name=self._node_name(node_id), metadata=dict(metadata))
        with self._calls(f"updating the metadata of TPU node {node_id}"):
            # Waited for: until it is done, a read of the slice may still show its old metadata.
            operation = self.client.update_node(
                node=node, update_mask=field_mask_pb2.FieldMask(paths=["metadata"]), timeout=self.timeout
            )
            operation.result(timeout=self.timeout)  # type: ignore[no-untyped-call]

    def _reservation(self, spec: JobSpec) -> str:
        """The reservation a job's slices come from: its queue (short or full) or the cluster's option."""
        reservation = str(self.options.get("reservation") or "")
        queue = spec.queue.strip()
        if queue:
            if spec.spot:
                raise InvalidJob(f"job {spec.id}: a spot job cannot use reservation {queue}")
            reservation = queue
        return self._reservation_path(reservation)

    def _reservation_path(self, reservation: str) -> str:
        """A reservation's full name, given its short one or its full one ("": none)."""
        return f"{self.parent}/reservations/{reservation}" if reservation and "/" not in reservation else reservation

    def _chosen(self, spec: JobSpec) -> list[tuple[int, Slot | tpu_v2.Node]]:
        """What the engine chose for the job (``spec.nodes``, one per slice, in slice order): free slots of the
        job's shape, or slices of its shape lent to its team; ``InvalidJob`` (or a transient ``BackendError``)
        saying which is not."""
        if not spec.tpu_type:
            raise InvalidJob(f"job {spec.id}: a TPU cluster runs jobs that name a TPU type (tpu_type, e.g. v5p-32)")
        try:
            check_shape(spec.tpu_type, spec.tpu_topology)
        except UnknownAcceleratorType as error:
            raise InvalidJob(f"job {spec.id}: {error}") from None
        names = list(spec.nodes)
        if len(names) != spec.workers or len(set(names)) != len(names):
            given = ", ".join(names) or "none"
            raise InvalidJob(
                f"job {spec.id}: {spec.workers} slice(s) need as many different slots; it was given {given}"
            )
        with self._calls("listing TPU nodes"):
            existing = {_short(n.name): n for n in self.client.list_nodes(parent=self.parent, timeout=self.timeout)}
        wanted = shape_of(spec.tpu_type, spec.tpu_topology)
        chosen: list[tuple[int, Slot | tpu_v2.Node]] = []
        for index, name in enumerate(names):
            node = existing.get(name)
            slot = self.slot_names.get(name)
            if slot is None and node is not None and (self._lent_to(node) or self._pool_of(node)):
                chosen.append((index, self._lent_slice(spec, node, wanted)))
                continue
            if slot is None:
                why = "an existing slice Quartermaster did not make" if node is not None else "no slot"
                raise InvalidJob(
                    f"job {spec.id}: {name} is {why}; it runs only on the slots of the option slices, "
                    "on slices lent to its team and on its elastic pools' slices"
                )
            other_topology = bool(spec.tpu_topology and slot.topology and slot.topology != spec.tpu_topology)
            if slot.accelerator_type != spec.tpu_type or other_topology:
                raise InvalidJob(f"job {spec.id} asks for {wanted} slices; slot {name} is {slot.shape}")
            holder = node.labels.get(JOB_LABEL, "") if node is not None else ""
            if node is not None and holder != _label_value(spec.id):
                # The slice of the job that held the slot before is still being deleted: it is free soon.
                raise BackendError(f"job {spec.id}: slot {name} still holds the slice of job {holder or '?'}")
            chosen.append((index, Slot(name, slot.accelerator_type, spec.tpu_topology or slot.topology)))
        return chosen

    def _lent_slice(self, spec: JobSpec, node: tpu_v2.Node, wanted: str) -> tpu_v2.Node:
        """A slice lent to a team or of an elastic pool, checked to be lent to the job's team (a pool's takes any
        team's), of its shape, and up."""
        name = _short(node.name)
        team = self._lent_to(node)
        if team and team != _label_value(spec.team):
            raise InvalidJob(f"job {spec.id}: slice {name} is lent to team {team}, not to team {spec.team or '?'}")
        _, accelerator_type, _ = self._slice(node)
        topology = node.accelerator_config.topology if "accelerator_config" in node else ""
        if accelerator_type != spec.tpu_type or (spec.tpu_topology and topology != spec.tpu_topology):
            raise InvalidJob(
                f"job {spec.id} asks for {wanted} slices; slice {name} is {shape_of(accelerator_type, topology)}"
            )
        if node.state != State.READY:  # it may be back soon (restarting, repaired): not for good
            raise BackendError(f"job {spec.id}: lent slice {name} is {_enum_name(node.state)}, not READY")
        return node

    def _queued_resource(self, spec: JobSpec, slots: list[tuple[int, Slot]], total: int) -> tpu_v2.QueuedResource:
        """The queued resource of a job's slots (each with its slice's index among the job's ``total``)."""
        reservation = self._reservation(spec)
        generation = generation_of(spec.tpu_type)
        # Spot, or guaranteed: from a reservation unless the cluster says it has none (on-demand).
        reserved = not spec.spot and (bool(spec.queue.strip()) or _flag(self.options.get("reserved"), True))
        labels = {JOB_LABEL: _label_value(spec.id)}
        if spec.team:
            labels[TEAM_LABEL] = _label_value(spec.team)
        node_specs = []
        for index, slot in slots:
            script = self._startup_script(spec, index, total)
            node = tpu_v2.Node(
                runtime_version=str(self.options.get("runtime_version") or generation.runtime_version),
                description=spec.name[:512],
                labels=labels,
                metadata={"startup-script": script} if script else {},
                scheduling_config=tpu_v2.SchedulingConfig(reserved=True) if reserved else None,
            )
            if slot.topology:  # the API takes a type or a config (type and topology), not both
                prefix, _ = split_type(slot.accelerator_type)
                node.accelerator_config = tpu_v2.AcceleratorConfig(type_=CONFIG_TYPES[prefix], topology=slot.topology)
            else:
                node.accelerator_type = slot.accelerator_type
            node_specs.append(tpu_v2.QueuedResource.Tpu.NodeSpec(parent=self.parent, node_id=slot.name, node=node))
        queued = tpu_v2.QueuedResource(
            tpu=tpu_v2.QueuedResource.Tpu(node_spec=node_specs), reservation_name=reservation if reserved else ""
        )
        if spec.spot:
            queued.spot = tpu_v2.QueuedResource.Spot()
        else:
            queued.guaranteed = tpu_v2.QueuedResource.Guaranteed()
        return queued

    @staticmethod
    def _startup_script(spec: JobSpec, index: int = 0, slices: int = 1) -> str:
        """What every host of slice ``index`` runs at boot: the job's environment, then its script, else its
        image under Docker (with the host's network and devices, as TPU VMs expect), else its command; then
        the exit code goes to Quartermaster through the job's token (``QM_JOB_TOKEN``, when it has one): from
        worker 0 of the first slice whatever it is, from worker 0 of the others only a failure."""
        for key in spec.env:
            if not _ENV_NAME.match(key):
                raise InvalidJob(f"job {spec.id}: {key!r} is not an environment variable name")
        if not (spec.script or spec.image or spec.command):
            return ""
        exports = [f"export {key}={shlex.quote(value)}" for key, value in sorted(spec.env.items())]
        exports.append(f"export QM_SLICE={index} QM_SLICES={slices}")
        if spec.script:
            end = "QM_PROGRAM_" + hashlib.sha256(spec.script.encode()).hexdigest()[:16]
            shebang = spec.script.startswith("#!")
            run = [
                'program="$(mktemp)"',
                f"cat > \"$program\" <<'{end}'",
                *spec.script.splitlines(),
                end,
                'chmod +x "$program"',
                '"$program"' if shebang else 'bash "$program"',
            ]
        elif spec.image:
            env = [f"--env={key}" for key in sorted(spec.env)] + ["--env=QM_SLICE", "--env=QM_SLICES"]
            run = [shlex.join(["docker", "run", "--rm", "--net=host", "--privileged", *env, spec.image, *spec.command])]
        else:
            run = [shlex.join(spec.command)]
        report = [
            "code=$?",
            f'worker="$(curl -sf --max-time 5 -H \'Metadata-Flavor: Google\' "{WORKER_NUMBER_URL}" || echo 0)"',
            'if [ -n "${QM_JOB_TOKEN:-}" ] && [ "$worker" = 0 ] && { [ "$code" != 0 ] || [ "$QM_SLICE" = 0 ]; }; then',
            '  curl -sS --max-time 30 --retry 5 --retry-all-errors -X POST -H "Authorization: Bearer $QM_JOB_TOKEN" \\',
            '    -H \'Content-Type: application/json\' --data "{\\"exit_code\\": $code}" \\',
            '    "${QM_API_URL%/}/api/v1/jobs/${QM_JOB_ID%%-*}/report/" || true',
            "fi",
            'exit "$code"',
        ]
        return "\n".join(["#!/bin/bash", *exports, *run, *report]) + "\n"

    def cancel(self, backend_id: str) -> DryRun | None:
        """Delete the job's queued resource (and its slices), and take the job off its lent slices (their
        agents stop its program, SIGTERM then SIGKILL)."""
        run = self._run(backend_id)
        name = self._qr_name(run.qr_id)
        if self.dry_run:
            detail: dict[str, Any] = {"force": True} if run.provisioned else {}
            if run.lent:
                detail["lent_slices"] = list(run.lent)
            return DryRun("cancel", name, detail)
        self._release(run)
        if run.provisioned:
            with self._calls(f"deleting queued resource {run.qr_id}"):
                # force: delete the slice too if it was provisioned, rather than refuse.
                self.client.delete_queued_resource(
                    request=tpu_v2.DeleteQueuedResourceRequest(name=name, force=True), timeout=self.timeout
                )
        return None

    def signal(self, backend_id: str, grace_seconds: int) -> DryRun | None:
        """On lent slices, ask the program to stop (their agents send it SIGTERM, to checkpoint and exit). On
        Quartermaster's own slices nothing: Cloud TPU cannot signal the workload on a slice (there is no API to
        reach its processes). The queued resource is read, so signalling a job that does not exist fails as for
        other backends; whoever signalled cancels the job when ``grace_seconds`` have passed."""
        run = self._run(backend_id)
        name = self._qr_name(run.qr_id)
        if run.provisioned:
            with self._calls(f"reading queued resource {run.qr_id}"):
                self.client.get_queued_resource(name=name, timeout=self.timeout)
        if self.dry_run:
            change = "SIGTERM through the lent slices' agents" if run.lent else "none: no way to signal"
            return DryRun("signal", name, {"grace_seconds": grace_seconds, "cluster_change": change})
        self._release(run, stop=True)
        return None

    # The TPU API has no cordon, drain or resume: a slice runs only what its owner starts on it, so there
    # is nothing to stop landing there. Quartermaster's own node state keeps the placement loop away; these
    # check the slice exists so a typo is an error, and change nothing on the cluster.
    def cordon(self, node: str, reason: str) -> DryRun | None:
        return self._node_noop("cordon", node, {"reason": reason})

    def drain(self, node: str, reason: str) -> DryRun | None:
        return self._node_noop("drain", node, {"reason": reason})

    def resume(self, node: str) -> DryRun | None:
        return self._node_noop("resume", node, {})

    def _node_noop(self, action: str, node: str, detail: dict[str, str]) -> DryRun | None:
        name = self._node_name(node)
        if self.dry_run:
            return DryRun(action, name, {**detail, "cluster_change": "none: Cloud TPU has no such operation"})
        with self._calls(f"reading TPU node {node} to {action} it"):
            self.client.get_node(name=name, timeout=self.timeout)
        return None

    # elastic pools (docs/backends.md, Cloud TPU, "Elastic pools")
    def provision(
        self, pool: str, count: int, capacity_type: str, lead_time: int, accelerators: int = 0, flavor: str = ""
    ) -> Provisioned:
        """``count`` slices of the type the pool's flavor (a TPU generation) and ``accelerators`` chips name, each
        a queued resource of one slice under the same name (``qm-pool-<pool>-<8 hex>-<n>``): Spot, or Guaranteed
        from the cluster's reservation for a reserved pool, else on demand. Each slice's startup script starts
        the slice agent (``pool_startup_script``). A refusal part-way keeps the slices already asked for."""
        if count < 1:
            raise Refused("ask for one node or more")
        if self.dry_run:
            raise Refused("a dry run asks for no node")
        try:
            accelerator_type = type_of_model(flavor, accelerators)
        except UnknownAcceleratorType as error:
            raise Refused(f"pool {pool}: {error}") from None
        stem = f"qm-pool-{re.sub(r'[^a-z0-9-]', '-', pool)}"[:44].rstrip("-") + f"-{secrets.token_hex(4)}"
        script = pool_startup_script()
        names: list[str] = []
        for n in range(1, count + 1):
            qr_id = f"{stem}-{n}"
            try:
                self._create(qr_id, self._pool_slice(pool, qr_id, accelerator_type, capacity_type, script))
            except BackendError:
                if names:
                    break  # what was asked stays asked; the pool may ask again for the rest
                raise
            names.append(qr_id)
        return Provisioned(tuple(names), time.time() + lead_time)

    def _pool_slice(
        self, pool: str, qr_id: str, accelerator_type: str, capacity_type: str, script: str
    ) -> tpu_v2.QueuedResource:
        reservation = self._reservation_path(
            str(self.options.get("reservation") or "") if capacity_type == "reserved" else ""
        )
        node = tpu_v2.Node(
            runtime_version=str(self.options.get("runtime_version") or generation_of(accelerator_type).runtime_version),
            description=f"Quartermaster's elastic pool {pool}",
            accelerator_type=accelerator_type,
            labels={POOL_LABEL: _label_value(pool)},
            metadata={"startup-script": script},
            scheduling_config=tpu_v2.SchedulingConfig(reserved=True) if reservation else None,
        )
        spec = tpu_v2.QueuedResource.Tpu.NodeSpec(parent=self.parent, node_id=qr_id, node=node)
        queued = tpu_v2.QueuedResource(tpu=tpu_v2.QueuedResource.Tpu(node_spec=[spec]), reservation_name=reservation)
        if capacity_type == "spot":
            queued.spot = tpu_v2.QueuedResource.Spot()
        else:
            queued.guaranteed = tpu_v2.QueuedResource.Guaranteed()
        return queued

    def release(self, nodes: Sequence[str]) -> None:
        """Delete the queued resources of pool slices ``nodes`` (each slice its own), slices and all; with none,
        the pools' queued resources that failed (a stock-out) go."""
        if self.dry_run:
            return
        names = list(nodes)
        if not names:
            with self._calls("listing queued resources"):
                listed = list(self.client.list_queued_resources(parent=self.parent, timeout=self.timeout))
            names = [
                _short(q.name)
                for q in listed
                if _short(q.name).startswith("qm-pool-") and q.state.state == QrState.FAILED
            ]
        for qr_id in names:
            request = tpu_v2.DeleteQueuedResourceRequest(name=self._qr_name(qr_id), force=True)
            try:
                with self._calls(f"deleting queued resource {qr_id}"):
                    self.client.delete_queued_resource(request=request, timeout=self.timeout)
            except NotFound:
                continue  # gone already


def pool_startup_script() -> str:
    """What every host of a pool slice runs at boot: the slice agent (``deploy/tpu_agent.py``, carried whole),
    written to ``$QM_AGENT_DIR`` (default ``/opt/quartermaster``) and started as a systemd unit that outlives the
    script (``KillMode=process``, as the agent asks), or in the background where there is no systemd."""
    agent = AGENT.read_text()
    end = "QM_AGENT_" + hashlib.sha256(agent.encode()).hexdigest()[:16]
    lines = [
        "#!/bin/bash",
        'dir="${QM_AGENT_DIR:-/opt/quartermaster}"',
        'mkdir -p "$dir"',
        f"cat > \"$dir/tpu_agent.py\" <<'{end}'",
        agent.rstrip("\n"),
        end,
        "if command -v systemd-run >/dev/null 2>&1; then",
        "  systemd-run --unit=quartermaster-agent --property=KillMode=process --property=Restart=always \\",
        '    python3 "$dir/tpu_agent.py" --state-dir "$dir/state"',
        "else",
        '  nohup python3 "$dir/tpu_agent.py" --state-dir "$dir/state" >> "$dir/agent.log" 2>&1 &',
        "fi",
    ]
    return "\n".join(lines) + "\n"
