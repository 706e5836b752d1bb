"""Google Cloud TPU backend: one project and zone, through the Cloud TPU v2 API over REST.

The cluster is the set of TPU slices (``nodes`` in the API) in ``options["project"]`` and
``options["zone"]``; a Quartermaster node is one slice. A job is a **queued resource** asking for one new
slice: it waits in Google's queue, is provisioned, and runs its startup script on every host of the slice.
A slice is whole: all its chips are allocatable unless it is broken (repairing, preempted, terminated), and
all are used when a Quartermaster job holds it (its ``quartermaster-job`` label).

A job's ``queue`` names either the slice (``v5p-8``) or a reservation to take it from (``lab-v5p``, or
``projects/…/reservations/lab-v5p``); a spot job gets the Spot tier, any other the Guaranteed tier, reserved
unless the cluster has no reservation. The startup script is the job's ``script``, else its ``image`` run
under Docker, else its ``command``, after its environment.

Options: ``project`` and ``zone`` (required); ``accelerator_type`` (the slice a job gets when its
``queue`` names none); ``reservation`` (the reservation reserved jobs use when their queue names none);
``reserved`` (default true; false: non-spot jobs ask for on-demand capacity); ``runtime_version`` (else the
generation's default in ``accelerators.py``); ``host_cpu`` and ``host_memory_mib`` (millicores and MiB of
one TPU VM host, which the API does not report; default 0).

Credentials (the cluster's encrypted secret, never options): ``service_account_json`` (the text of a
service-account key file; scoped to cloud-platform), or ``access_token`` (an OAuth 2 bearer token someone
else refreshes, e.g. from workload identity). None at all means anonymous requests, which only a local
server or emulator accepts; the endpoint is then e.g. ``http://127.0.0.1:8470`` (the client keeps an
``http://`` scheme as given and speaks plain HTTP; without a scheme it uses HTTPS). An empty endpoint is
``https://tpu.googleapis.com``.

What the TPU API lacks: it has no cordon, drain or resume (a slice belongs to whoever created it; nothing
else lands on it), so those only check that the slice exists and leave the stopping to Quartermaster's own
node state. It has no notion of a job finishing either: a queued resource is pending, then ACTIVE until
deleted, so ``status`` never says succeeded; the job's end comes from the workload itself. Nor can a job be
signalled: ``signal`` does nothing (whoever signalled stops the job when its grace ends).

Failures (docs/backends.md). ``submit`` raises ``InvalidJob`` for a job that cannot become a queued resource
(no accelerator type from its queue or the cluster, an unknown type, more chips than the slice, a spot job
in a reservation) and when the API refuses the create as invalid (INVALID_ARGUMENT, FAILED_PRECONDITION),
forbidden (PERMISSION_DENIED) or naming what does not exist (NOT_FOUND, e.g. the reservation); quota
(RESOURCE_EXHAUSTED), ABORTED, UNAVAILABLE, DEADLINE_EXCEEDED and INTERNAL are transient. ``status`` gives a
FAILED queued resource's words with ``Failure.UNSCHEDULABLE`` (no capacity) or ``Failure.INVALID``, and a
slice Cloud TPU took back (SUSPENDED by the service) as ``Failure.PREEMPTED``.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from functools import cached_property
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
from google.protobuf import json_format  # type: ignore[import-untyped]

from clusters.backends.base import (
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
    NodeInfo,
    NotFound,
    Refused,
    Unreachable,
    not_allowed,
)
from clusters.backends.tpu.accelerators import (
    GENERATIONS,
    UnknownAcceleratorType,
    chips,
    chips_in_topology,
    generation_of,
    split_type,
)
from common import outbound

DEFAULT_ENDPOINT = "https://tpu.googleapis.com"
SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
#: The label on every slice Quartermaster asks for; its value is the job id, as labels allow.
JOB_LABEL = "quartermaster-job"

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

# What the API accepts: queued resource ids are RFC 1035 labels; node ids are a little wider.
_QR_ID = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_NODE_ID = re.compile(r"^[A-Za-z0-9_.~+%-]+$")
#: A job queue that names a slice shape rather than a reservation.
_LOOKS_LIKE_TYPE = re.compile(r"^v[0-9]+[a-z]*-[0-9]+$")
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
        return Inventory(
            nodes=tuple(self._node_info(node) for node in nodes), accelerators=tuple(accelerators.values())
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
                accelerator_type = f"{prefix}-{topology}"
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
        # A slice is whole: usable entirely or not at all, and held entirely by the job that asked for it.
        usable = node.state not in BROKEN
        held = JOB_LABEL in node.labels
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
            schedulable=node.state not in UNSCHEDULABLE,
            labels=labels,
        )

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
        name = self._qr_name(backend_id)
        with self._calls(f"reading queued resource {_short(name)}"):
            queued = self.client.get_queued_resource(name=name, timeout=self.timeout)
        state, message, reason = self._job_state(queued.state)
        nodes: tuple[str, ...] = ()
        if queued.state.state == QrState.ACTIVE:
            nodes = tuple(spec.node_id for spec in queued.tpu.node_spec if spec.node_id)
        return JobStatus(backend_id=_short(name), state=state, message=message, nodes=nodes, reason=reason)

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
        qr_id = queued_resource_id(job_id)
        try:
            self.status(qr_id)
        except NotFound:
            return None
        return qr_id

    # writes
    def submit(self, spec: JobSpec) -> str | DryRun:
        qr_id = queued_resource_id(spec.id)
        name = f"{self.parent}/queuedResources/{qr_id}"
        queued = self._queued_resource(spec, qr_id)
        if self.dry_run:
            body = json_format.MessageToDict(tpu_v2.QueuedResource.pb(queued))
            return DryRun("submit", name, {"queued_resource_id": qr_id, "queued_resource": body})
        try:
            with self._calls(f"creating queued resource {qr_id}"):
                # The answer is a long-running operation; status() follows the queued resource instead.
                self.client.create_queued_resource(
                    parent=self.parent, queued_resource=queued, queued_resource_id=qr_id, timeout=self.timeout
                )
        except Refused as error:
            if _already_exists(error.__cause__):  # submitted before: that one is the job
                return qr_id
            if isinstance(error.__cause__, api_exceptions.BadRequest):  # INVALID_ARGUMENT, FAILED_PRECONDITION
                raise InvalidJob(str(error)) from error
            # RESOURCE_EXHAUSTED (quota), ABORTED (a concurrent change): waiting may mend them
            raise BackendError(str(error)) from error
        except (AuthenticationFailed, NotFound) as error:
            if isinstance(error.__cause__, api_exceptions.Forbidden | api_exceptions.NotFound):
                # PERMISSION_DENIED (e.g. on the reservation), NOT_FOUND (the reservation, the zone's type)
                raise InvalidJob(str(error)) from error
            raise
        return qr_id

    def _placement(self, spec: JobSpec) -> tuple[str, str]:
        """(accelerator type, reservation) of a job. Its queue names either (``v5p-8``, or a reservation,
        short or full); the cluster's options ``accelerator_type`` and ``reservation`` fill in the other."""
        accelerator_type = str(self.options.get("accelerator_type") or "")
        reservation = str(self.options.get("reservation") or "")
        queue = spec.queue.strip()
        if _LOOKS_LIKE_TYPE.match(queue):
            accelerator_type = queue
        elif queue:
            if spec.spot:
                raise InvalidJob(f"job {spec.id}: a spot job cannot use reservation {queue}")
            reservation = queue
        if not accelerator_type:
            raise InvalidJob(
                f"job {spec.id}: no TPU accelerator type: set the job's queue (e.g. v5p-8) "
                "or the cluster option accelerator_type"
            )
        if reservation and "/" not in reservation:
            reservation = f"{self.parent}/reservations/{reservation}"
        return accelerator_type, reservation

    def _queued_resource(self, spec: JobSpec, qr_id: str) -> tpu_v2.QueuedResource:
        accelerator_type, reservation = self._placement(spec)
        try:
            generation = generation_of(accelerator_type)
            slice_chips = chips(accelerator_type)
        except UnknownAcceleratorType as error:
            raise InvalidJob(f"job {spec.id}: {error}") from None
        wanted = spec.workers * spec.accelerators_per_worker
        if wanted > slice_chips:
            raise InvalidJob(f"job {spec.id} asks for {wanted} chips; a {accelerator_type} slice has {slice_chips}")
        # Spot, or guaranteed: from a reservation unless the cluster says it has none (on-demand).
        named_by_job = bool(spec.queue.strip()) and not _LOOKS_LIKE_TYPE.match(spec.queue.strip())
        reserved = not spec.spot and (named_by_job or _flag(self.options.get("reserved"), True))
        script = self._startup_script(spec)
        node = tpu_v2.Node(
            accelerator_type=accelerator_type,
            runtime_version=str(self.options.get("runtime_version") or generation.runtime_version),
            description=spec.name[:512],
            labels={JOB_LABEL: _label_value(spec.id)},
            metadata={"startup-script": script} if script else {},
            scheduling_config=tpu_v2.SchedulingConfig(reserved=True) if reserved else None,
        )
        queued = tpu_v2.QueuedResource(
            tpu=tpu_v2.QueuedResource.Tpu(
                node_spec=[tpu_v2.QueuedResource.Tpu.NodeSpec(parent=self.parent, node_id=qr_id, node=node)]
            ),
            reservation_name=reservation if reserved else "",
        )
        if spec.spot:
            queued.spot = tpu_v2.QueuedResource.Spot()
        else:
            queued.guaranteed = tpu_v2.QueuedResource.Guaranteed()
        return queued

    @staticmethod
    def _startup_script(spec: JobSpec) -> str:
        """What every host of the slice runs at boot: the job's script, else its image or command.

        The environment is exported first; an image runs under Docker with the host's network and devices,
        as TPU VMs expect."""
        for key in spec.env:
            if not _ENV_NAME.match(key):
                raise InvalidJob(f"job {spec.id}: {key!r} is not an environment variable name")
        exports = [f"export {key}={shlex.quote(value)}" for key, value in sorted(spec.env.items())]
        if spec.script:
            lines = spec.script.splitlines()
            if lines and lines[0].startswith("#!"):
                return "\n".join([lines[0], *exports, *lines[1:]]) + "\n"
            return "\n".join(["#!/bin/bash", *exports, *lines]) + "\n"
        if spec.image:
            env = [f"--env={key}" for key in sorted(spec.env)]
            run = ["docker", "run", "--rm", "--net=host", "--privileged", *env, spec.image, *spec.command]
            return "\n".join(["#!/bin/bash", *exports, shlex.join(run)]) + "\n"
        if spec.command:
            return "\n".join(["#!/bin/bash", *exports, shlex.join(spec.command)]) + "\n"
        return ""

    def cancel(self, backend_id: str) -> DryRun | None:
        name = self._qr_name(backend_id)
        if self.dry_run:
            return DryRun("cancel", name, {"force": True})
        with self._calls(f"deleting queued resource {_short(name)}"):
            # force: delete the slice too if it was provisioned, rather than refuse.
            self.client.delete_queued_resource(
                request=tpu_v2.DeleteQueuedResourceRequest(name=name, force=True), timeout=self.timeout
            )
        return None

    def signal(self, backend_id: str, grace_seconds: int) -> DryRun | None:
        """Nothing: Cloud TPU cannot signal the workload on a slice (there is no API to reach its processes).
        The queued resource is read, so signalling a job that does not exist fails as for other backends;
        whoever signalled cancels the job when ``grace_seconds`` have passed."""
        name = self._qr_name(backend_id)
        with self._calls(f"reading queued resource {_short(name)}"):
            self.client.get_queued_resource(name=name, timeout=self.timeout)
        if self.dry_run:
            return DryRun("signal", name, {"grace_seconds": grace_seconds, "cluster_change": "none: no way to signal"})
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
