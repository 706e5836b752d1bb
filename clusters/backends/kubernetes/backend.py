"""The Kubernetes backend: one API server through the official ``kubernetes`` client.

Configuration:
- ``endpoint``: the API server's URL, e.g. ``https://10.0.0.1:6443``;
- ``credentials["token"]``: a bearer token (a service account's); ``credentials["ca_cert"]``: the PEM CA
  bundle that signed the server's certificate (else the system roots), or ``options["insecure_skip_tls_verify"]``;
- ``options["namespace"]`` (``default``): where Jobs go; ``options["kueue"]``: the cluster runs Kueue, so
  Jobs and RayJobs are created suspended in a LocalQueue, unpinned, and Kueue admits them (docs/kueue.md): the
  LocalQueue is ``options["local_queues"][<the job's Quartermaster queue>]``, else ``options["local_queue"]``
  (with neither, ``submit`` refuses the job), and ``status`` reads Kueue's ``Workload`` back (``kueue.py``);
- ``options["ray_image"]`` (``rayjobs.DEFAULT_RAY_IMAGE``): the image of a Ray job that names none;
- ``options["accelerator_resource"]`` (``nvidia.com/gpu``): what a worker's accelerators are requested as;
  ``zone_label``/``block_label``/``rack_label`` and ``accelerator_resources``: see ``nodes.py``;
- ``options["heartbeat_stale_seconds"]`` (120): how old a node's heartbeat may be. The heartbeat is its Lease
  in ``kube-node-lease``, renewed every ~10 s; a token that may not list leases leaves the Ready condition's
  ``lastHeartbeatTime``, refreshed only every five minutes while nothing changes, and five minutes more are
  allowed.

``submit`` classifies refusals (docs/backends.md): a Job the API server rejects as invalid (400, 422), a
namespace that does not exist (404) or an admission policy's denial (403 from a webhook or a
ValidatingAdmissionPolicy) is ``InvalidJob``; 401 and an RBAC 403 are ``AuthenticationFailed``; 429, 5xx, an
exceeded ResourceQuota and no answer are transient. ``status`` reads the Job and its pods (``jobs.job_status``).

A job's ``backend_id`` is its Job's name (``jobs.job_name``), in ``options["namespace"]``; a Ray job's
(``JobSpec.kind == "ray"``) is ``rayjob/`` and its KubeRay RayJob's name (``rayjobs.py``). ``JobSpec.script``
(for Slurm) and ``spot`` mean nothing here: the container runs ``command`` (else its image's entrypoint), and
whether capacity is spot is a property of the nodes the job was placed on.

``logs`` reads a worker's pod log (``podlogs.py``: which pod and container, and paging by timestamps); the
service account then needs pods/log get in the namespace, and jobs get for a Ray job's submitter.

The service account needs, cluster-wide: nodes get/list/patch, pods list, pods/eviction create; leases list in
``kube-node-lease`` (optional, for prompt heartbeats); in the namespace: jobs create/get/delete, pods delete
(``signal``); rayjobs create/get/delete (``ray.io``) for Ray jobs; in Kueue mode, workloads list
(``kueue.x-k8s.io``; without it ``status`` cannot give Kueue's words, only the Job's); for elastic pools
(``provisioning.py``) podtemplates create/delete and provisioningrequests create/list/delete
(``autoscaling.x-k8s.io``).

Size: one backend, one API: Jobs, RayJobs, Kueue workloads, pod logs, evictions and node patches, each with the
API's own error shapes; the RayJob half (``_submit_rayjob``, ``_rayjob_status``, ``_cancel_rayjob``) would split out
first.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from http import HTTPStatus
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from clusters.backends.base import (
    ELASTIC_POOL,
    LOG_LIMIT,
    AcceleratorInfo,
    AuthenticationFailed,
    Backend,
    BackendError,
    BadResponse,
    DryRun,
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
from clusters.backends.kubernetes import kueue, podlogs, provisioning, rayjobs
from clusters.backends.kubernetes.jobs import (
    JOB_ID_ANNOTATION,
    JOB_LABEL,
    KUEUE_QUEUE_LABEL,
    job_manifest,
    job_name,
    job_status,
)
from clusters.backends.kubernetes.nodes import NodeLabels, health_signals, node_info, pod_usage

#: Annotation holding why Quartermaster cordoned a node.
CORDON_REASON_ANNOTATION = "quartermaster.io/cordon-reason"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"
NODE_LEASE_NAMESPACE = "kube-node-lease"
PAGE = 500  # objects per list call; large clusters page through ``continue``


class KubernetesBackend(Backend):
    kind = "kubernetes"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._api: client.ApiClient | None = None

    # the client

    def _client(self) -> client.ApiClient:
        if self._api is None:
            # No proxy from the environment: the connection must go to the address the policy checked.
            config = client.Configuration(host=self.endpoint.rstrip("/"), proxy="")
            token = self.credentials.get("token")
            if token:
                config.api_key = {"BearerToken": token}
                config.api_key_prefix = {"BearerToken": "Bearer"}
            if self.credentials.get("ca_cert"):
                config.ca_cert_data = self.credentials["ca_cert"]
            if self._flag("insecure_skip_tls_verify"):
                config.verify_ssl = False
            # One retry for a refused connection; none for reads, so a timeout costs one ``timeout``.
            config.retries = urllib3.Retry(total=1, read=0, redirect=0)
            api = client.ApiClient(config)
            self.destinations.confine_pool_manager(api.rest_client.pool_manager)
            self._api = api
        return self._api

    def _core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self._client())

    def _batch(self) -> client.BatchV1Api:
        return client.BatchV1Api(self._client())

    def _custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self._client())

    @property
    def namespace(self) -> str:
        return str(self.options.get("namespace") or "default")

    def _flag(self, name: str) -> bool:
        """A yes/no option, strictly: JSON true/false, or the words (a typo must not turn Kueue on)."""
        value = self.options.get(name, False)
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false", "yes", "no", "1", "0", ""):
            return value.strip().lower() in ("true", "yes", "1")
        raise BackendError(f"option {name} is {value!r}; use true or false")

    def _seconds(self, name: str, default: float) -> float:
        value = self.options.get(name, default)
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            seconds = -1
        if not 0 < seconds < 10**9:  # also refuses NaN and infinity
            raise BackendError(f"option {name} is {value!r}; use a number of seconds above 0")
        return seconds

    @contextmanager
    def _calling(self, what: str) -> Iterator[None]:
        """Turn what the client raises into the backend's errors, saying what we were doing."""
        try:
            yield
        except ApiException as e:
            raise self._api_error(e, what) from e
        except (urllib3.exceptions.HTTPError, OSError) as e:
            refused = not_allowed(e, f"the API server at {self.endpoint}")
            if refused is not None:
                raise refused from e
            reason = getattr(e, "reason", None) or e
            if isinstance(reason, urllib3.exceptions.SSLError):
                raise Unreachable(
                    f"TLS with the API server at {self.endpoint} failed {what}: {reason} (is the cluster's CA "
                    "certificate set?)"
                ) from e
            raise Unreachable(f"the API server at {self.endpoint} did not answer {what}: {reason}") from e
        except ValueError as e:  # not JSON, or an object the client's models reject (pydantic)
            raise BadResponse(f"the API server at {self.endpoint} answered {what} with {invalid(e)}") from e

    @contextmanager
    def _deleting(self, what: str) -> Iterator[None]:
        """``_calling`` for a deletion: an object that is gone already (404) is deleted."""
        with self._calling(what):
            try:
                yield
            except ApiException as e:
                if e.status != HTTPStatus.NOT_FOUND:
                    raise

    def _api_error(self, e: ApiException, what: str) -> BackendError:
        status = e.status or 0
        message, detail = status_message(e), answer_body(e)
        if status == 0:  # raised by the client itself: TLS failures and unsupported content types
            if "SSL" in message:
                return Unreachable(
                    f"TLS with the API server at {self.endpoint} failed {what}: {message}", detail=detail
                )
            return BadResponse(f"the API server at {self.endpoint} answered {what} with {message}", detail=detail)
        if status == 401:
            return AuthenticationFailed(
                f"the API server at {self.endpoint} refused the token {what} ({message})", detail=detail
            )
        if status == 403 and "exceeded quota" in message:  # a namespace ResourceQuota: frees as jobs end
            return BackendError(f"the API server refused {what}: {message}", detail=detail)
        if status == 403:
            return AuthenticationFailed(
                f"the API server at {self.endpoint} forbade {what}: {message} (grant the token's service account "
                "that permission)",
                detail=detail,
            )
        if status == 404:
            return NotFound(f"{message} ({what})", detail=detail)
        if status == 429 or status >= 500:
            return Unreachable(
                f"the API server at {self.endpoint} is unavailable {what}: HTTP {status} {message}", detail=detail
            )
        return Refused(f"the API server refused {what}: HTTP {status} {message}", detail=detail)

    # reads

    def inventory(self) -> Inventory:
        labels_used = NodeLabels.from_options(self.options)
        nodes = self._nodes()
        # What is in use is what the bound, unfinished pods request (as the scheduler counts it).
        usage = pod_usage(
            self._list_pages(
                self._core().list_pod_for_all_namespaces,
                "listing the pods in use",
                field_selector="status.phase!=Succeeded,status.phase!=Failed",
            ),
            labels_used.accelerator_resources,
        )
        infos: list[NodeInfo] = []
        models: dict[str, AcceleratorInfo] = {}
        leases = self._leases()
        for node in nodes:
            if provisioning.released(node):  # given back: out of the fleet until the autoscaler removes it
                continue
            name = node.metadata.name if node.metadata else ""
            info, accelerator = node_info(node, labels_used, usage.get(name), leases.get(name))
            infos.append(info)
            if accelerator is not None:
                models.setdefault(accelerator.model, accelerator)
        return Inventory(nodes=tuple(infos), accelerators=tuple(models.values()))

    def health(self) -> tuple[HealthSignal, ...]:
        stale_after = timedelta(seconds=self._seconds("heartbeat_stale_seconds", 120))
        nodes, leases = self._nodes(), self._leases()
        now = datetime.now(UTC)
        return tuple(
            signal
            for node in nodes
            if not provisioning.released(node)
            for signal in health_signals(
                node, now, stale_after, leases.get(node.metadata.name if node.metadata else "")
            )
        )

    def _leases(self) -> dict[str, datetime]:
        """When each node's kubelet last renewed its Lease: the heartbeat, every ~10 s. A token that may not read
        ``kube-node-lease`` (or a cluster without it) leaves only the slower Ready condition; that is no error."""
        try:
            leases = self._list_pages(
                client.CoordinationV1Api(self._client()).list_namespaced_lease,
                "listing node leases",
                namespace=NODE_LEASE_NAMESPACE,
            )
        except (AuthenticationFailed, NotFound) as e:
            if isinstance(e.__cause__, ApiException) and e.__cause__.status in (403, 404):
                return {}
            raise  # 401: the token itself is refused
        return {
            lease.metadata.name: lease.spec.renew_time
            for lease in leases
            if lease.metadata is not None and lease.spec is not None and lease.spec.renew_time is not None
        }

    def _nodes(self) -> list[Any]:
        return self._list_pages(self._core().list_node, "listing nodes")

    def _list_pages(self, list_call: Callable[..., Any], what: str, **selectors: str) -> list[Any]:
        """Every item of a list call, ``PAGE`` at a time (large clusters answer in pages through ``continue``)."""
        items: list[Any] = []
        page: str | None = None
        with self._calling(what):
            while True:
                listed = list_call(limit=PAGE, _continue=page, _request_timeout=self.timeout, **selectors)
                items.extend(listed.items or [])
                page = listed.metadata.var_continue if listed.metadata is not None else None
                if not page:
                    return items

    def status(self, backend_id: str) -> JobStatus:
        if rayjobs.is_rayjob(backend_id):
            return self._rayjob_status(backend_id)
        with self._calling(f"reading job {backend_id}"):
            job = self._batch().read_namespaced_job(backend_id, self.namespace, _request_timeout=self.timeout)
        with self._calling(f"listing the pods of job {backend_id}"):
            pods = self._core().list_namespaced_pod(
                self.namespace, label_selector=f"{JOB_LABEL}={backend_id}", _request_timeout=self.timeout
            )
        status = job_status(backend_id, job, list(pods.items or []))
        meta = job.metadata
        queue = ((meta.labels if meta else None) or {}).get(KUEUE_QUEUE_LABEL)
        if meta is None or queue is None or status.state not in (JobState.PENDING, JobState.RUNNING):
            return status  # outside Kueue, or ended: the Job's own conditions say how
        return self._with_kueue(status, meta.uid or "", queue)

    def _rayjob_status(self, backend_id: str) -> JobStatus:
        name = rayjobs.name_of(backend_id)
        rayjob = self._read_rayjob(name)
        cluster = str((rayjob.get("status") or {}).get("rayClusterName") or "")
        pods: list[Any] = []
        if cluster:
            with self._calling(f"listing the pods of Ray cluster {cluster}"):
                listed = self._core().list_namespaced_pod(
                    self.namespace, label_selector=f"{rayjobs.CLUSTER_LABEL}={cluster}", _request_timeout=self.timeout
                )
            pods = list(listed.items or [])
        status = rayjobs.rayjob_status(backend_id, rayjob, pods)
        meta = rayjob.get("metadata") or {}
        queue = (meta.get("labels") or {}).get(KUEUE_QUEUE_LABEL)
        if queue is None or status.state not in (JobState.PENDING, JobState.RUNNING):
            return status
        return self._with_kueue(status, str(meta.get("uid") or ""), queue)

    def _read_rayjob(self, name: str) -> dict[str, Any]:
        with self._calling(f"reading RayJob {name}"):
            rayjob = self._custom().get_namespaced_custom_object(
                rayjobs.GROUP, rayjobs.VERSION, self.namespace, rayjobs.PLURAL, name, _request_timeout=self.timeout
            )
        if not isinstance(rayjob, dict):
            raise BadResponse(f"the API server answered reading RayJob {name} with something that is no object")
        return rayjob

    def _with_kueue(self, status: JobStatus, uid: str, queue: str) -> JobStatus:
        """``status`` (of a job not yet ended) with Kueue's word on it: pending with Kueue's reason until Kueue
        admits it, then as its pods say; evicted, as Kueue's eviction reason says (``kueue.verdict``)."""
        try:
            workload = self._workload(uid)
        except _KueueUnreadable:
            return status
        verdict = kueue.verdict(workload, queue)
        if verdict.admitted:
            return status
        return replace(
            status,
            state=verdict.state,
            message=verdict.message,
            reason=verdict.reason,
            exit_code=None,
            workers_running=0 if verdict.state is JobState.PENDING else status.workers_running,
        )

    def _workload(self, uid: str) -> dict[str, Any] | None:
        """Kueue's Workload for the object with ``uid``, found as Kueue labels it (``kueue.x-k8s.io/job-uid``),
        else by its owner reference; None when there is none yet. ``_KueueUnreadable`` when the cluster serves no
        Workloads or the token may not read them: then the Job's own status is all there is to say."""
        api = self._custom()
        try:
            with self._calling("listing Kueue workloads"):
                listed = api.list_namespaced_custom_object(
                    kueue.GROUP,
                    kueue.VERSION,
                    self.namespace,
                    kueue.WORKLOADS,
                    label_selector=f"{kueue.JOB_UID_LABEL}={uid}",
                    _request_timeout=self.timeout,
                )
                items = _items(listed)
                if not items:  # a Workload Kueue did not label (made by hand, an old Kueue): its owner says
                    listed = api.list_namespaced_custom_object(
                        kueue.GROUP, kueue.VERSION, self.namespace, kueue.WORKLOADS, _request_timeout=self.timeout
                    )
                    items = _items(listed)
        except (AuthenticationFailed, NotFound) as e:
            if isinstance(e.__cause__, ApiException) and e.__cause__.status in (403, 404):
                raise _KueueUnreadable from e  # no Kueue CRDs, or no right to read them
            raise
        mine = [w for w in items if kueue.owned_by(w, uid)]
        return mine[-1] if mine else None

    def logs(
        self, backend_id: str, worker: str = "", *, offset: str = "", tail: int | None = None, limit: int = LOG_LIMIT
    ) -> LogChunk:
        after = podlogs.position(offset) if offset else None
        pod, container, ended_job = self._log_pod(backend_id, worker)
        name = pod.metadata.name if pod is not None else ""
        where = f"pod {self.namespace}/{name}, container {container}" if name else ""
        started, previous, ended = podlogs.container_state(pod, container) if pod is not None else (False, False, False)
        if not started:  # not created or not started yet: nothing to read, unless it never will
            if pod is None and ended_job:
                raise LogsUnavailable(
                    f"the pods of {backend_id} are gone (Kubernetes deletes a pod's log with the pod): its output "
                    "for that worker cannot be read any more"
                )
            return LogChunk("", offset, False, ended, worker, where)
        asked = limit
        while True:
            query: dict[str, Any] = {"container": container, "timestamps": True, "limit_bytes": asked}
            if previous:
                query["previous"] = True
            if after is not None:
                query["since_seconds"] = podlogs.since_seconds(after, time.time())
            elif tail is not None:
                query["tail_lines"] = max(tail, 1)  # tail 0: the last line, for its position only
            with self._calling(f"reading the log of pod {name}"):
                answer: Any = self._core().read_namespaced_pod_log(
                    name, self.namespace, _preload_content=False, _request_timeout=self.timeout, **query
                )
                raw = answer.data  # bytes as sent: the client would otherwise turn JSON-looking lines into reprs
            page = podlogs.page(raw, asked, after, limit)
            # A second's worth of lines read before may fill the page: ask for more until something is new.
            if page.text or not page.cut or after is None or asked >= limit * 16:
                break
            asked *= 2
        if after is None and tail == 0:  # nothing to show, only where the output ends now
            page = podlogs.Page("", page.position, False)
        next_offset = str(page.position) if page.position is not None else offset
        complete = ended and not previous and not page.cut
        return LogChunk(page.text, next_offset, page.cut, complete, worker, where)

    def _log_pod(self, backend_id: str, worker: str) -> tuple[Any, str, bool]:
        """(the pod or None, its container, whether the job is over) of ``worker`` of the job (``podlogs``)."""
        if rayjobs.is_rayjob(backend_id):
            return self._ray_log_pod(backend_id, worker)
        index = worker or "0"
        if not index.isdigit():
            raise NotFound(f"job {backend_id}'s workers are numbered from 0, not {worker!r}")
        with self._calling(f"reading job {backend_id}"):
            job = self._batch().read_namespaced_job(backend_id, self.namespace, _request_timeout=self.timeout)
        workers = (job.spec.completions if job.spec else None) or 1
        if int(index) >= workers:
            raise NotFound(f"job {backend_id} has workers 0 to {workers - 1}, not {worker!r}")
        pods = self._pods(f"{JOB_LABEL}={backend_id}", f"the pods of job {backend_id}")
        ended = job_status(backend_id, job, pods).state not in (JobState.PENDING, JobState.RUNNING)
        return podlogs.job_pod(pods, index), podlogs.WORKER_CONTAINER, ended

    def _ray_log_pod(self, backend_id: str, worker: str) -> tuple[Any, str, bool]:
        name = rayjobs.name_of(backend_id)
        rayjob = self._read_rayjob(name)
        status = rayjob.get("status") or {}
        ended = str(status.get("jobDeploymentStatus") or "") in ("Complete", "Failed", "ValidationFailed")
        if worker in ("", "submitter"):
            pods = self._pods(f"{podlogs.JOB_NAME_LABEL}={name}", f"the submitter pods of RayJob {name}")
            return podlogs.newest(pods), podlogs.SUBMITTER_CONTAINER, ended
        if worker != "head" and not worker.isdigit():
            raise NotFound(f"a Ray job's output is the submitter's, the head's or a worker's by index, not {worker!r}")
        cluster = str(status.get("rayClusterName") or "")
        node_type = "head" if worker == "head" else "worker"
        pods = (
            self._pods(f"{rayjobs.CLUSTER_LABEL}={cluster},{rayjobs.NODE_TYPE_LABEL}={node_type}", "Ray pods")
            if cluster
            else []
        )
        pods.sort(key=lambda pod: pod.metadata.name or "")
        index = 0 if worker == "head" else int(worker)
        groups = ((rayjob.get("spec") or {}).get("rayClusterSpec") or {}).get("workerGroupSpecs") or []
        workers = sum(int(group.get("replicas") or 0) for group in groups if isinstance(group, dict))
        if worker != "head" and index >= workers:
            raise NotFound(f"RayJob {name} has {workers} Ray workers, numbered from 0; not {worker!r}")
        pod = pods[index] if index < len(pods) else None
        return pod, f"ray-{node_type}", ended or (pod is None and bool(status.get("endTime")))

    def _pods(self, selector: str, what: str) -> list[Any]:
        with self._calling(f"listing {what}"):
            listed = self._core().list_namespaced_pod(
                self.namespace, label_selector=selector, _request_timeout=self.timeout
            )
        return list(listed.items or [])

    def find(self, job_id: str) -> str | None:
        for backend_id in (job_name(job_id), rayjobs.BACKEND_PREFIX + rayjobs.rayjob_name(job_id)):
            try:
                self.status(backend_id)
            except NotFound:
                continue
            if backend_id == job_name(job_id) and not self._ours(backend_id, job_id):
                continue  # KubeRay's submitter Job, named as the RayJob it runs for
            return backend_id
        return None

    def _ours(self, name: str, job_id: str) -> bool:
        """Whether the Job ``name`` was created for Quartermaster job ``job_id`` (not, say, a RayJob's submitter)."""
        with self._calling(f"reading job {name}"):
            job = self._batch().read_namespaced_job(name, self.namespace, _request_timeout=self.timeout)
        return ((job.metadata.annotations if job.metadata else None) or {}).get(JOB_ID_ANNOTATION) == job_id

    # writes

    def submit(self, spec: JobSpec) -> str | DryRun:
        if spec.kind == "session":  # docs/jobs.md, "Interactive sessions": Slurm's for now
            raise InvalidJob(f"job {spec.id}: interactive sessions run on Slurm clusters; this is Kubernetes")
        if spec.kind == "service":  # docs/jobs.md, "Service replicas": Slurm and the simulated cluster, for now
            raise InvalidJob(f"job {spec.id}: service replicas run on Slurm clusters; this is Kubernetes")
        local_queue = kueue.local_queue(spec, self.options) if self._flag("kueue") else ""
        accelerator_resource = str(self.options.get("accelerator_resource", "nvidia.com/gpu"))
        if spec.kind == "ray":
            return self._submit_rayjob(spec, local_queue, accelerator_resource)
        manifest = job_manifest(
            spec, namespace=self.namespace, local_queue=local_queue, accelerator_resource=accelerator_resource
        )
        name = str(manifest["metadata"]["name"])
        if self.dry_run:
            return DryRun("submit", name, {"namespace": self.namespace, "job": manifest})
        try:
            body = client.V1Job.model_validate(manifest)
        except ValueError as e:  # a field the client's models do not know: our bug, caught before sending
            raise BackendError(f"job {spec.id}: the Job we built is not valid: {e}") from e
        with self._calling(f"creating job {name}"):
            try:
                self._batch().create_namespaced_job(self.namespace, body, _request_timeout=self.timeout)
            except ApiException as e:
                refusal = self._refusal(e, name)
                if refusal is not None:
                    raise refusal from e
                if e.status != 409:  # AlreadyExists: submitted before
                    raise
                self._check_same_job(name, spec.id)
        return name

    def _submit_rayjob(self, spec: JobSpec, local_queue: str, accelerator_resource: str) -> str | DryRun:
        image = str(self.options.get("ray_image") or rayjobs.DEFAULT_RAY_IMAGE)
        manifest = rayjobs.rayjob_manifest(
            spec,
            namespace=self.namespace,
            local_queue=local_queue,
            accelerator_resource=accelerator_resource,
            image=image,
        )
        name = str(manifest["metadata"]["name"])
        backend_id = rayjobs.BACKEND_PREFIX + name
        if self.dry_run:
            return DryRun("submit", backend_id, {"namespace": self.namespace, "rayjob": manifest})
        with self._calling(f"creating RayJob {name}"):
            try:
                self._custom().create_namespaced_custom_object(
                    rayjobs.GROUP,
                    rayjobs.VERSION,
                    self.namespace,
                    rayjobs.PLURAL,
                    manifest,
                    _request_timeout=self.timeout,
                )
            except ApiException as e:
                if e.status == 404:  # no such namespace, or no RayJob resource at all
                    raise InvalidJob(
                        f"cannot create RayJob {name} in namespace {self.namespace}: {status_message(e)} (is KubeRay "
                        "installed, serving ray.io/v1 RayJobs?)"
                    ) from e
                refusal = self._refusal(e, name)
                if refusal is not None:
                    raise refusal from e
                if e.status != 409:  # AlreadyExists: submitted before
                    raise
                existing = self._read_rayjob(name)
                annotations = (existing.get("metadata") or {}).get("annotations") or {}
                if annotations.get(JOB_ID_ANNOTATION) != spec.id:
                    raise Refused(
                        f"a RayJob named {name} already exists in namespace {self.namespace} and was not created "
                        f"for Quartermaster job {spec.id}"
                    ) from e
        return backend_id

    def _refusal(self, e: ApiException, name: str) -> InvalidJob | None:
        """``InvalidJob`` when the API server refused to create the Job for good: invalid (400, 422), no such
        namespace (404), or denied by an admission webhook or policy (403 that is not RBAC's). None for
        anything waiting may mend, or that is about the credentials rather than the job."""
        status, message = e.status or 0, status_message(e)
        if status in (400, 422):
            return InvalidJob(f"the API server refused job {name} as invalid: {message}", detail=answer_body(e))
        if status == 404:
            return InvalidJob(f"cannot create job {name} in namespace {self.namespace}: {message}")
        denied = "denied" in message or "admission" in message.lower()
        authorization = " cannot " in message and " resource " in message  # RBAC's or an authorizer's words
        if status == 403 and denied and not authorization and "exceeded quota" not in message:
            return InvalidJob(f"an admission policy refused job {name}: {message}", detail=answer_body(e))
        return None

    def _check_same_job(self, name: str, job_id: str) -> None:
        """After a 409: the Job of that name must be the one an earlier ``submit`` of this id created."""
        with self._calling(f"reading the existing job {name}"):
            existing = self._batch().read_namespaced_job(name, self.namespace, _request_timeout=self.timeout)
        annotations = (existing.metadata.annotations if existing.metadata else None) or {}
        if annotations.get(JOB_ID_ANNOTATION) != job_id:
            raise Refused(
                f"a Job named {name} already exists in namespace {self.namespace} and was not created "
                f"for Quartermaster job {job_id}"
            )

    def cancel(self, backend_id: str) -> DryRun | None:
        if rayjobs.is_rayjob(backend_id):
            return self._cancel_rayjob(rayjobs.name_of(backend_id))
        if self.dry_run:  # read it, so that cancelling an unknown job fails as it would for real
            with self._calling(f"reading job {backend_id}"):
                self._batch().read_namespaced_job(backend_id, self.namespace, _request_timeout=self.timeout)
            return DryRun("cancel", backend_id, {"namespace": self.namespace, "propagationPolicy": "Background"})
        with self._calling(f"deleting job {backend_id}"):
            self._batch().delete_namespaced_job(
                backend_id, self.namespace, propagation_policy="Background", _request_timeout=self.timeout
            )
        return None

    def _cancel_rayjob(self, name: str) -> DryRun | None:
        """Delete the RayJob: KubeRay stops the Ray job, and the garbage collector deletes its Ray cluster and
        submitter with it."""
        if self.dry_run:
            self._read_rayjob(name)
            return DryRun("cancel", rayjobs.BACKEND_PREFIX + name, {"namespace": self.namespace})
        with self._calling(f"deleting RayJob {name}"):
            self._custom().delete_namespaced_custom_object(
                rayjobs.GROUP,
                rayjobs.VERSION,
                self.namespace,
                rayjobs.PLURAL,
                name,
                propagation_policy="Background",
                _request_timeout=self.timeout,
            )
        return None

    def signal(self, backend_id: str, grace_seconds: int) -> DryRun | None:
        """Delete the Job's pods with ``grace_seconds`` as their grace period: the kubelet sends SIGTERM now and
        SIGKILL when it ends. The Job stays, so ``status`` still reads how the workers ended (a worker that
        exits 0 after checkpointing completes its index); ``cancel`` removes it. Deleting the Job itself
        would not do: the garbage collector deletes its pods with their own default grace, not this one.

        A RayJob is not signalled: KubeRay would start a Ray cluster's deleted pods again, and a Ray job's
        entrypoint learns of nothing from its workers' SIGTERM. Whoever asked cancels it when the grace ends."""
        if rayjobs.is_rayjob(backend_id):
            self._read_rayjob(rayjobs.name_of(backend_id))
            return DryRun("signal", backend_id, {"pods": []}) if self.dry_run else None
        with self._calling(f"reading job {backend_id}"):
            self._batch().read_namespaced_job(backend_id, self.namespace, _request_timeout=self.timeout)
        with self._calling(f"listing the pods of job {backend_id}"):
            pods = self._core().list_namespaced_pod(
                self.namespace, label_selector=f"{JOB_LABEL}={backend_id}", _request_timeout=self.timeout
            )
        names = [
            pod.metadata.name
            for pod in pods.items or []
            if pod.metadata is not None
            and pod.metadata.name
            and pod.metadata.deletion_timestamp is None
            and (pod.status is None or pod.status.phase not in ("Succeeded", "Failed"))
        ]
        if self.dry_run:
            return DryRun("signal", backend_id, {"grace_period_seconds": grace_seconds, "pods": names})
        for name in names:
            with self._deleting(f"deleting pod {name} of job {backend_id} with a grace period"):
                self._core().delete_namespaced_pod(
                    name, self.namespace, grace_period_seconds=grace_seconds, _request_timeout=self.timeout
                )
        return None

    def cordon(self, node: str, reason: str) -> DryRun | None:
        patch = {"spec": {"unschedulable": True}, "metadata": {"annotations": {CORDON_REASON_ANNOTATION: reason}}}
        if self.dry_run:
            return self._dry_run_on_node("cordon", node, {"patch": patch})
        self._patch_node(node, patch, "cordoning")
        return None

    def resume(self, node: str) -> DryRun | None:
        # null removes a field in a merge patch: the node looks as if it had never been cordoned.
        patch = {"spec": {"unschedulable": None}, "metadata": {"annotations": {CORDON_REASON_ANNOTATION: None}}}
        if self.dry_run:
            return self._dry_run_on_node("resume", node, {"patch": patch})
        self._patch_node(node, patch, "uncordoning")
        return None

    # elastic pools (provisioning.py)

    def provision(
        self, pool: str, count: int, capacity_type: str, lead_time: int, accelerators: int = 0, flavor: str = ""
    ) -> Provisioned:
        """A ``ProvisioningRequest`` for ``count`` nodes of the pool (``options["provisioning_class"]``, default
        cluster-autoscaler's all-or-nothing class) and its ``PodTemplate``, in the backend's namespace."""
        if count < 1:
            raise Refused("ask for one node or more")
        if self.dry_run:
            raise Refused("a dry run asks for no node")
        name = provisioning.request_name(pool)
        resource = str(self.options.get("accelerator_resource") or "nvidia.com/gpu")
        klass = str(self.options.get("provisioning_class") or provisioning.DEFAULT_CLASS)
        template = provisioning.pod_template(name, pool, accelerators, resource)
        request = provisioning.provisioning_request(name, pool, count, klass)
        with self._calling(f"creating the PodTemplate {name}"):
            body = client.V1PodTemplate.model_validate(template)
            self._core().create_namespaced_pod_template(self.namespace, body, _request_timeout=self.timeout)
        try:
            with self._calling(f"creating the ProvisioningRequest {name}"):
                try:
                    self._custom().create_namespaced_custom_object(
                        provisioning.GROUP,
                        provisioning.VERSION,
                        self.namespace,
                        provisioning.PLURAL,
                        request,
                        _request_timeout=self.timeout,
                    )
                except ApiException as e:
                    if e.status == HTTPStatus.NOT_FOUND:
                        raise Refused(
                            f"the cluster at {self.endpoint} serves no ProvisioningRequest API ({provisioning.GROUP}"
                            f"/{provisioning.VERSION}): run cluster-autoscaler with provisioning requests enabled"
                        ) from e
                    raise
        except BackendError:
            self._delete_template(name)
            raise
        return Provisioned((), time.time() + lead_time, unnamed=count)

    def release(self, nodes: Sequence[str]) -> None:
        """Cordon the nodes and mark them released (the autoscaler removes them once empty); the finished
        ProvisioningRequests and their PodTemplates go."""
        if self.dry_run:
            return
        stamp = datetime.now(UTC).isoformat(timespec="seconds")
        reason = "released by Quartermaster: its elastic pool no longer needs it"
        for node in nodes:
            annotations = {provisioning.RELEASED: stamp, CORDON_REASON_ANNOTATION: reason}
            self._patch_node(
                node, {"spec": {"unschedulable": True}, "metadata": {"annotations": annotations}}, "releasing"
            )
        with self._calling("listing the ProvisioningRequests"):
            try:
                listed = self._custom().list_namespaced_custom_object(
                    provisioning.GROUP,
                    provisioning.VERSION,
                    self.namespace,
                    provisioning.PLURAL,
                    label_selector=ELASTIC_POOL,
                    _request_timeout=self.timeout,
                )
            except ApiException as e:
                if e.status == HTTPStatus.NOT_FOUND:  # none was ever made here
                    return
                raise
        for request in _items(listed):
            if provisioning.finished(request):
                name = request["metadata"]["name"]
                with self._deleting(f"deleting the ProvisioningRequest {name}"):
                    self._custom().delete_namespaced_custom_object(
                        provisioning.GROUP,
                        provisioning.VERSION,
                        self.namespace,
                        provisioning.PLURAL,
                        name,
                        _request_timeout=self.timeout,
                    )
                self._delete_template(name)

    def _delete_template(self, name: str) -> None:
        with self._deleting(f"deleting the PodTemplate {name}"):
            self._core().delete_namespaced_pod_template(name, self.namespace, _request_timeout=self.timeout)

    def _dry_run_on_node(self, action: str, node: str, detail: dict[str, Any]) -> DryRun:
        """What ``action`` would do; reading the node first, so a dry run on an unknown node fails as a real one."""
        with self._calling(f"reading node {node}"):
            self._core().read_node(node, _request_timeout=self.timeout)
        return DryRun(action, node, detail)

    def _patch_node(self, node: str, patch: dict[str, Any], what: str) -> None:
        with self._calling(f"{what} node {node}"):
            self._core().patch_node(node, patch, _content_type=STRATEGIC_MERGE_PATCH, _request_timeout=self.timeout)

    def drain(self, node: str, reason: str) -> DryRun | None:
        """Cordon, then evict every pod on the node but DaemonSet and mirror (static) pods, honouring
        PodDisruptionBudgets: like ``kubectl drain --ignore-daemonsets --delete-emptydir-data --force``,
        without waiting for the pods to go. Pods a budget protects stay; ``Refused`` names them."""
        if self.dry_run:
            pods = [f"{namespace}/{name}" for namespace, name in self._evictable_pods(node)]
            return self._dry_run_on_node("drain", node, {"reason": reason, "evict": pods})
        self.cordon(node, reason)
        refused = []
        for namespace, name in self._evictable_pods(node):
            refusal = self._evict(namespace, name, node)
            if refusal:
                refused.append(f"{namespace}/{name} ({refusal})")
        if refused:
            raise Refused(
                f"node {node} is cordoned, but {len(refused)} pod(s) could not be evicted: {'; '.join(refused)}"
            )
        return None

    def _evict(self, namespace: str, name: str, node: str) -> str | None:
        """Evict one pod; the disruption budget's words when one forbids it (HTTP 429)."""
        eviction = client.V1Eviction(
            api_version="policy/v1", kind="Eviction", metadata=client.V1ObjectMeta(name=name, namespace=namespace)
        )
        with self._calling(f"evicting pod {namespace}/{name} from node {node}"):
            try:
                self._core().create_namespaced_pod_eviction(name, namespace, eviction, _request_timeout=self.timeout)
            except ApiException as e:
                if e.status == 429:
                    return status_message(e)
                if e.status != 404:  # 404: gone already
                    raise
        return None

    def _evictable_pods(self, node: str) -> list[tuple[str, str]]:
        """(namespace, name) of the pods a drain evicts: not DaemonSet-owned (the DaemonSet would put them back),
        not mirror pods (the kubelet runs them from files), not finished or already being deleted."""
        pods = self._list_pages(
            self._core().list_pod_for_all_namespaces,
            f"listing the pods on node {node}",
            field_selector=f"spec.nodeName={node}",
        )
        evictable = []
        for pod in pods:
            meta = pod.metadata
            if meta is None or not meta.name or not meta.namespace:
                raise BadResponse(f"the API server listed a pod on node {node} without a name and namespace")
            if MIRROR_POD_ANNOTATION in (meta.annotations or {}) or meta.deletion_timestamp is not None:
                continue
            if any(owner.kind == "DaemonSet" for owner in meta.owner_references or []):
                continue
            if pod.status is not None and pod.status.phase in ("Succeeded", "Failed"):
                continue
            evictable.append((meta.namespace, meta.name))
        return evictable


class _KueueUnreadable(Exception):
    """The cluster serves no Kueue Workloads, or the token may not list them."""


def _items(listed: Any) -> list[dict[str, Any]]:
    """The objects of a custom resource list (the client returns it as parsed JSON)."""
    items = listed.get("items") if isinstance(listed, dict) else None
    if not isinstance(items, list):
        raise BadResponse("the API server answered a list of custom resources with something that is no list")
    return [item for item in items if isinstance(item, dict)]


def invalid(e: ValueError) -> str:
    """What was wrong with an answer: the first field the client's models rejected, or the parse error."""
    if isinstance(e, ValidationError) and e.error_count():
        first = e.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        more = f" (and {e.error_count() - 1} more)" if e.error_count() > 1 else ""
        return f"an invalid {e.title}: {where}: {first['msg']}{more}"
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def _status(e: ApiException) -> dict[str, Any] | None:
    """The ``Status`` object an API error carries; None when its body is something else."""
    body = e.body.decode(errors="replace") if isinstance(e.body, bytes) else e.body
    try:
        status = json.loads(body) if body else None
    except ValueError:
        return None
    return status if isinstance(status, dict) and status.get("kind") == "Status" else None


def answer_body(e: ApiException) -> str:
    """An error's body when it is not a Kubernetes ``Status``: for the server's log (``BackendError.detail``),
    never the message."""
    if e.body is None or _status(e) is not None:
        return ""
    return e.body.decode(errors="replace") if isinstance(e.body, bytes) else str(e.body)


def status_message(e: ApiException) -> str:
    """The ``message`` of the ``Status`` object an API error carries, with the first cause's if any. Any other
    body is not repeated (it may be anything an endpoint answers): the status's standard phrase stands in."""
    if not e.status:  # raised by the client itself: its reason is its own words
        return str(e.reason or "the client failed")
    status = _status(e)
    if status is None or not status.get("message"):
        try:
            return HTTPStatus(e.status).phrase
        except ValueError:
            return f"HTTP {e.status}"
    message = str(status["message"])
    causes = (status.get("details") or {}).get("causes") or []
    if causes and isinstance(causes[0], dict) and causes[0].get("message"):
        message += f" {causes[0]['message']}"
    return message


__all__ = ["KubernetesBackend", "job_name"]
