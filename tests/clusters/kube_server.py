"""A small, faithful Kubernetes API server for the backend's tests: stdlib ``http.server`` in a thread.

It serves what the Kubernetes backend uses, with the real API's paths, verbs, status codes and ``Status``
error bodies (``kind: Status, apiVersion: v1, status: Failure, reason, code, message, details``):

- ``GET /api/v1/nodes`` (``limit``/``continue`` paging), ``GET``/``PATCH /api/v1/nodes/{name}``;
  PATCH takes ``application/merge-patch+json`` and ``application/strategic-merge-patch+json``, both as
  RFC 7386 merge patches (null deletes a key). That is exact for the maps and scalars patched here; a
  strategic merge of a list with a merge key (taints, say) is not modelled, and other patch types get 415;
- ``GET /api/v1/pods`` and ``/api/v1/namespaces/{ns}/pods`` with ``fieldSelector`` (``spec.nodeName``,
  ``metadata.name``, ``metadata.namespace``, ``status.phase``) and ``labelSelector`` (``=``, ``==``,
  ``!=``, existence);
- ``DELETE /api/v1/namespaces/{ns}/pods/{name}`` with ``gracePeriodSeconds``: a positive grace marks the pod
  terminating (``deletionTimestamp``, ``deletionGracePeriodSeconds``) and returns it, as the API server does
  while the kubelet stops it; 0 removes it at once; 404 for an unknown pod;
- ``POST /api/v1/namespaces/{ns}/pods/{name}/eviction``: 201 and the pod is gone; 429 when a
  PodDisruptionBudget matching the pod allows no disruption (the budget's allowance is spent on success);
  404 for an unknown pod;
- ``POST``/``GET /apis/batch/v1/namespaces/{ns}/jobs``, ``GET``/``DELETE .../jobs/{name}``: 201, 409
  AlreadyExists, 404 NotFound, 422 Invalid for a bad name; DELETE records ``propagationPolicy`` and, unless
  it is ``Orphan``, removes the Job's pods (what the garbage collector would do);
- ``GET /api/v1/namespaces/{ns}/pods/{name}/log``: the text tests put in with ``add_log`` (timestamped by the
  "kubelet" as they are added), as ``text/plain``; ``container`` (required when the pod has several: 400;
  one not in the pod: 400), ``previous`` (the instance before the last restart: 400 when there is none),
  ``timestamps`` (each line prefixed with its RFC 3339 time, nanoseconds trimmed as Go writes them),
  ``sinceSeconds`` / ``sinceTime`` (not both: 400), ``tailLines`` (applied before) and ``limitBytes`` (cut
  after, mid-line if it falls there), as the kubelet serves them; 404 for no pod, 400 while the container waits
  to start;
- ``GET /apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases``: the kubelets' heartbeats (403 when
  ``forbid_leases``);
- ``POST``/``GET /api/v1/namespaces/{ns}/podtemplates``, ``GET``/``DELETE .../podtemplates/{name}`` (201, 409, 404);
- bearer tokens: a wrong or missing one is 401; a read-only one is 403 on anything but GET;
- the custom resources of Kueue (``kueue.x-k8s.io/v1beta1``: ResourceFlavor, ClusterQueue, LocalQueue,
  Workload), KubeRay (``ray.io/v1``: RayJob) and cluster-autoscaler (``autoscaling.x-k8s.io/v1``:
  ProvisioningRequest) under their CRD paths: list (``labelSelector``), create (201,
  409 AlreadyExists, 422 for what the CRD's schema refuses), get, delete (404 NotFound; the garbage collector
  deletes what the object owns); and the steps their controllers take, in ``kube_crds.py``. With
  ``kueue_installed``, ``kuberay_installed`` or ``provisioning_installed`` False their paths are unknown to the
  server (404, as on a cluster without the CRDs).

No controllers run: tests move Jobs along by editing ``server.jobs`` under ``server.lock``, and give pods the
statuses a kubelet and scheduler would write with ``add_job_pod(..., status=...)`` and the helpers
``waiting``, ``terminated``, ``unschedulable`` and ``disrupted`` (the shapes of ``PodStatus``). Every request is
logged in ``server.requests`` as (method, path with query, content type, JSON body or None).
"""

from __future__ import annotations

import copy
import json
import re
import ssl
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.clusters import kube_crds
from tests.clusters.kube_fleet import seed_fleet, timestamp

TOKEN = "s3cret-token"
READONLY_TOKEN = "read-only-token"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
MERGE_PATCHES = ("application/merge-patch+json", "application/strategic-merge-patch+json")


class ApiError(Exception):
    """Answered as a Kubernetes ``Status`` object."""

    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


def not_found(resource: str, name: str, group: str = "") -> ApiError:
    qualified = f"{resource}.{group}" if group else resource
    details = {"name": name, "kind": resource, **({"group": group} if group else {})}
    return ApiError(404, "NotFound", f'{qualified} "{name}" not found', details)


def success(code: int, details: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code}
    if details is not None:
        body["details"] = details
    return body


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, null removes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def parse_selector(selector: str) -> list[tuple[str, str, str | None]]:
    """``a=b,c!=d,e,!f`` as (key, operator, value) terms."""
    terms: list[tuple[str, str, str | None]] = []
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            terms.append((key.strip(), "!=", value.strip()))
        elif "==" in term or "=" in term:
            key, value = term.split("==", 1) if "==" in term else term.split("=", 1)
            terms.append((key.strip(), "=", value.strip()))
        elif term.startswith("!"):
            terms.append((term[1:].strip(), "!", None))
        else:
            terms.append((term, "exists", None))
    return terms


def matches(values: dict[str, Any], terms: list[tuple[str, str, str | None]]) -> bool:
    for key, operator, value in terms:
        present = key in values
        if operator == "=" and values.get(key) != value:
            return False
        if operator == "!=" and present and values.get(key) == value:
            return False
        if (operator == "exists" and not present) or (operator == "!" and present):
            return False
    return True


POD_FIELDS = {
    "spec.nodeName": lambda pod: pod.get("spec", {}).get("nodeName", ""),
    "metadata.name": lambda pod: pod["metadata"]["name"],
    "metadata.namespace": lambda pod: pod["metadata"]["namespace"],
    "status.phase": lambda pod: pod.get("status", {}).get("phase", ""),
}


class KubeServer:
    """The cluster's state plus the HTTP server in front of it. Use as a context manager, or start/stop."""

    def __init__(self, *, now: datetime | None = None, seed: bool = True, tls: ssl.SSLContext | None = None) -> None:
        self.tls = tls  # serve HTTPS with this server-side context
        self.lock = threading.RLock()
        self.nodes: dict[str, dict[str, Any]] = {}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.pdbs: dict[tuple[str, str], dict[str, Any]] = {}
        #: Node leases in kube-node-lease, by node name; ``forbid_leases`` answers 403 to listing them.
        self.leases: dict[str, dict[str, Any]] = {}
        self.forbid_leases = False
        self.jobs: dict[tuple[str, str], dict[str, Any]] = {}
        self.requests: list[tuple[str, str, str, Any]] = []
        self.deleted_jobs: list[dict[str, Any]] = []
        self.deleted_custom: list[dict[str, Any]] = []
        #: (method, path) -> (status, content type, raw body): answer this instead, for malformed replies.
        self.canned: dict[tuple[str, str], tuple[int, str, bytes]] = {}
        #: (method, path) -> [error, answers left or None]: requests refused or failed for a while (``fail_requests``).
        self.failing: dict[tuple[str, str], list[Any]] = {}
        self.resource_version = 1000
        #: Custom resources by plural (``kube_crds.RESOURCES``), each by (namespace or "", name).
        self.custom: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}
        #: A Job's or RayJob's spec before Kueue admitted it (by uid), put back when Kueue evicts it.
        self.kueue_originals: dict[str, dict[str, Any]] = {}
        self.kueue_installed = True
        self.kuberay_installed = True
        self.provisioning_installed = True
        self.pod_templates: dict[tuple[str, str], dict[str, Any]] = {}
        #: Pod logs by (namespace, pod, container, previous): (when the kubelet stamped it, the line), oldest first.
        self.pod_logs: dict[tuple[str, str, str, bool], list[tuple[datetime, str]]] = {}
        if seed:
            seed_fleet(self, now or datetime.now(UTC))
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # lifecycle

    def start(self) -> KubeServer:
        handler = type("Handler", (_Handler,), {"kube": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        if self.tls is not None:
            self._httpd.socket = self.tls.wrap_socket(self._httpd.socket, server_side=True)
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.02,), name="kube-api", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> KubeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._httpd is not None, "start the server first"
        host, port = self._httpd.server_address[:2]
        return f"{'https' if self.tls else 'http'}://{host!s}:{port}"

    def fail_requests(self, method: str, path: str, error: ApiError, times: int | None = None) -> None:
        """Answer ``method path`` with ``error`` the next ``times`` times, or every time until ``heal``."""
        with self.lock:
            self.failing[(method, path)] = [error, times]

    def heal(self) -> None:
        """Answer everything normally again."""
        with self.lock:
            self.failing.clear()

    def _failure(self, method: str, path: str) -> ApiError | None:
        entry = self.failing.get((method, path))
        if entry is None:
            return None
        error: ApiError = entry[0]
        left: int | None = entry[1]
        if left is not None:
            if left <= 1:
                del self.failing[(method, path)]
            else:
                entry[1] = left - 1
        return error

    def mutations(self) -> list[tuple[str, str, str, Any]]:
        return [r for r in self.requests if r[0] != "GET"]

    def _bump(self, obj: dict[str, Any]) -> None:
        self.resource_version += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.resource_version)

    # the API: each returns (status, JSON body) or raises ApiError

    def handle(self, method: str, path: str, query: dict[str, str], body: Any, content_type: str) -> tuple[int, Any]:
        for pattern, handlers in ROUTES:
            match = pattern.fullmatch(path)
            if match:
                handler = handlers.get(method)
                if handler is None:
                    raise ApiError(405, "MethodNotAllowed", f"the server does not allow this method on {path}")
                with self.lock:
                    return handler(self, query=query, body=body, content_type=content_type, **match.groupdict())
        raise ApiError(404, "NotFound", "the server could not find the requested resource")

    def list_nodes(self, query: dict[str, str], **_: Any) -> tuple[int, Any]:
        return 200, self._page("NodeList", [self.nodes[n] for n in sorted(self.nodes)], query)

    def _page(self, kind: str, items: list[dict[str, Any]], query: dict[str, str]) -> dict[str, Any]:
        """A list object, cut to ``limit`` items with an opaque ``continue`` token when more remain."""
        start = int(query.get("continue") or 0)
        limit = int(query.get("limit") or 0) or len(items)
        meta: dict[str, Any] = {"resourceVersion": str(self.resource_version)}
        if start + limit < len(items):
            meta["continue"] = str(start + limit)
        return {"kind": kind, "apiVersion": "v1", "metadata": meta, "items": items[start : start + limit]}

    def get_node(self, name: str, **_: Any) -> tuple[int, Any]:
        if name not in self.nodes:
            raise not_found("nodes", name)
        return 200, {"kind": "Node", "apiVersion": "v1", **self.nodes[name]}

    def patch_node(self, name: str, body: Any, content_type: str, **_: Any) -> tuple[int, Any]:
        if content_type not in MERGE_PATCHES:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types include: "
                f"{', '.join(MERGE_PATCHES)} (this test server models no others; asked for {content_type!r})",
            )
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "a merge patch must be a JSON object")
        if name not in self.nodes:
            raise not_found("nodes", name)
        patched = merge_patch(self.nodes[name], body)
        if patched.get("metadata", {}).get("name") != name:
            raise ApiError(422, "Invalid", f'Node "{name}" is invalid: metadata.name: may not be changed')
        unschedulable = patched.get("spec", {}).get("unschedulable")
        if unschedulable is not None and not isinstance(unschedulable, bool):
            raise ApiError(400, "BadRequest", "spec.unschedulable: expected a boolean")
        self.nodes[name] = patched
        self._bump(patched)
        return 200, {"kind": "Node", "apiVersion": "v1", **patched}

    def list_pods(self, query: dict[str, str], namespace: str | None = None, **_: Any) -> tuple[int, Any]:
        fields = parse_selector(query.get("fieldSelector", ""))
        for key, operator, _value in fields:
            if key not in POD_FIELDS or operator not in ("=", "!="):
                raise ApiError(400, "BadRequest", f'field label not supported: "{key}"')
        labels = parse_selector(query.get("labelSelector", ""))
        items = []
        for (ns, _name), pod in sorted(self.pods.items()):
            if namespace is not None and ns != namespace:
                continue
            if not matches({key: get(pod) for key, get in POD_FIELDS.items()}, fields):
                continue
            if not matches(pod["metadata"].get("labels", {}), labels):
                continue
            items.append(pod)
        return 200, self._page("PodList", items, query)

    def evict(self, namespace: str, name: str, body: Any, **_: Any) -> tuple[int, Any]:
        # A missing kind/apiVersion is defaulted from the endpoint, as the real decoder does.
        if not isinstance(body, dict) or body.get("kind", "Eviction") != "Eviction":
            raise ApiError(400, "BadRequest", "the body must be an Eviction")
        if body.get("metadata", {}).get("name") != name:
            raise ApiError(400, "BadRequest", "name in URL does not match name in Eviction object")
        pod = self.pods.get((namespace, name))
        if pod is None:
            raise not_found("pods", name)
        if pod.get("status", {}).get("phase") not in ("Succeeded", "Failed"):
            labels = pod["metadata"].get("labels", {})
            for (ns, pdb_name), pdb in sorted(self.pdbs.items()):
                selector = pdb["spec"].get("selector", {}).get("matchLabels", {})
                if ns != namespace or not selector or not matches(labels, parse_selector(_as_selector(selector))):
                    continue
                status = pdb["status"]
                if status["disruptionsAllowed"] <= 0:
                    cause = (
                        f"The disruption budget {pdb_name} needs {status['desiredHealthy']} healthy pods "
                        f"and has {status['currentHealthy']} currently"
                    )
                    raise ApiError(
                        429,
                        "TooManyRequests",
                        "Cannot evict pod as it would violate the pod's disruption budget.",
                        {"causes": [{"reason": "DisruptionBudget", "message": cause}]},
                    )
                status["disruptionsAllowed"] -= 1
                status["currentHealthy"] -= 1
        del self.pods[(namespace, name)]
        return 201, success(201)

    def create_job(self, namespace: str, body: Any, **_: Any) -> tuple[int, Any]:
        if not isinstance(body, dict) or body.get("kind") != "Job" or body.get("apiVersion") != "batch/v1":
            raise ApiError(400, "BadRequest", "the body must be a batch/v1 Job")
        meta = body.setdefault("metadata", {})
        name = meta.get("name", "")
        if meta.get("namespace", namespace) != namespace:
            raise ApiError(
                400,
                "BadRequest",
                "the namespace of the provided object does not match the namespace sent on the request",
            )
        if not name or len(name) > 63 or not DNS_LABEL.match(name):
            raise ApiError(
                422,
                "Invalid",
                f'Job.batch "{name}" is invalid: metadata.name: Invalid value: "{name}": a lowercase RFC 1123 label',
                {"name": name, "group": "batch", "kind": "Job"},
            )
        if (namespace, name) in self.jobs:
            raise ApiError(
                409,
                "AlreadyExists",
                f'jobs.batch "{name}" already exists',
                {"name": name, "group": "batch", "kind": "jobs"},
            )
        uid = str(uuid.uuid4())
        meta.update(namespace=namespace, uid=uid, creationTimestamp=timestamp(datetime.now(UTC)))
        spec = body.setdefault("spec", {})
        # What the API server's defaulting adds: a selector on the controller uid, the same labels on pods.
        generated = {"batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": name}
        spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
        template_meta = spec.setdefault("template", {}).setdefault("metadata", {})
        template_meta["labels"] = {**template_meta.get("labels", {}), **generated}
        spec.setdefault("suspend", False)
        spec.setdefault("backoffLimit", 6)
        body["status"] = {}
        self._bump(body)
        self.jobs[(namespace, name)] = body
        return 201, body

    def list_leases(self, namespace: str, query: dict[str, str], **_: Any) -> tuple[int, Any]:
        if self.forbid_leases:
            raise ApiError(
                403,
                "Forbidden",
                'leases.coordination.k8s.io is forbidden: User "system:serviceaccount:quartermaster:qm" cannot '
                f'list resource "leases" in API group "coordination.k8s.io" in the namespace "{namespace}"',
                {"group": "coordination.k8s.io", "kind": "leases"},
            )
        items = [self.leases[n] for n in sorted(self.leases)] if namespace == "kube-node-lease" else []
        page = self._page("LeaseList", items, query)
        page["apiVersion"] = "coordination.k8s.io/v1"
        return 200, page

    def list_jobs(self, namespace: str, **_: Any) -> tuple[int, Any]:
        items = [job for (ns, _name), job in sorted(self.jobs.items()) if ns == namespace]
        meta = {"resourceVersion": str(self.resource_version)}
        return 200, {"kind": "JobList", "apiVersion": "batch/v1", "metadata": meta, "items": items}

    def get_job(self, namespace: str, name: str, **_: Any) -> tuple[int, Any]:
        if (namespace, name) not in self.jobs:
            raise not_found("jobs", name, "batch")
        return 200, self.jobs[(namespace, name)]

    def delete_job(self, namespace: str, name: str, query: dict[str, str], body: Any, **_: Any) -> tuple[int, Any]:
        if (namespace, name) not in self.jobs:
            raise not_found("jobs", name, "batch")
        policy = query.get("propagationPolicy") or (body or {}).get("propagationPolicy") or "Orphan"
        job = self.jobs.pop((namespace, name))
        uid = job["metadata"]["uid"]
        if policy != "Orphan":  # the garbage collector removes the Job's pods
            for key, pod in list(self.pods.items()):
                if any(o.get("uid") == uid for o in pod["metadata"].get("ownerReferences", [])):
                    del self.pods[key]
        kube_crds.garbage_collect(self, uid)  # its Workload goes whatever the policy: Kueue's own finalizer
        job["metadata"]["deletedWith"] = policy  # not a real field: lets tests see the policy
        self.deleted_jobs.append(job)
        return 200, success(200, {"name": name, "group": "batch", "kind": "jobs", "uid": uid})

    # custom resources (Kueue, KubeRay)

    def _custom_store(self, group: str, plural: str) -> tuple[str, bool, dict[tuple[str, str], dict[str, Any]]]:
        known = kube_crds.RESOURCES.get((group, plural))
        installed = {
            kube_crds.KUEUE: self.kueue_installed,
            kube_crds.RAY: self.kuberay_installed,
            kube_crds.AUTOSCALING: self.provisioning_installed,
        }[group]
        if known is None or not installed:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        kind, namespaced = known
        return kind, namespaced, self.custom.setdefault(plural, {})

    def list_custom(
        self, group: str, plural: str, query: dict[str, str], namespace: str = "", **_: Any
    ) -> tuple[int, Any]:
        kind, _namespaced, store = self._custom_store(group, plural)
        labels = parse_selector(query.get("labelSelector", ""))
        items = [
            obj
            for (ns, _name), obj in sorted(store.items())
            if (not namespace or ns == namespace) and matches(obj["metadata"].get("labels") or {}, labels)
        ]
        page = self._page(f"{kind}List", items, query)
        page["apiVersion"] = kube_crds.VERSIONS[group]
        return 200, page

    def create_custom(self, group: str, plural: str, body: Any, namespace: str = "", **_: Any) -> tuple[int, Any]:
        kind, _namespaced, store = self._custom_store(group, plural)
        version = kube_crds.VERSIONS[group]
        if not isinstance(body, dict) or body.get("kind") != kind or body.get("apiVersion") != version:
            raise ApiError(400, "BadRequest", f"the body must be a {version} {kind}")
        meta = body.setdefault("metadata", {})
        name = meta.get("name", "")
        if meta.get("namespace", namespace) != namespace:
            raise ApiError(
                400,
                "BadRequest",
                "the namespace of the provided object does not match the namespace sent on the request",
            )
        problem = kube_crds.validate(kind, body, name)
        if not name or not DNS_LABEL.match(name) or problem:
            why = problem or f'metadata.name: Invalid value: "{name}": a lowercase RFC 1123 label'
            raise ApiError(
                422,
                "Invalid",
                f'{kind}.{group} "{name}" is invalid: {why}',
                {"name": name, "group": group, "kind": kind},
            )
        if (namespace, name) in store:
            raise ApiError(
                409,
                "AlreadyExists",
                f'{plural}.{group} "{name}" already exists',
                {"name": name, "group": group, "kind": plural},
            )
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=timestamp(datetime.now(UTC)), generation=1)
        if namespace:
            meta["namespace"] = namespace
        body.setdefault("status", {})
        self._bump(body)
        store[(namespace, name)] = body
        return 201, body

    def get_custom(self, group: str, plural: str, name: str, namespace: str = "", **_: Any) -> tuple[int, Any]:
        _kind, _namespaced, store = self._custom_store(group, plural)
        if (namespace, name) not in store:
            raise not_found(plural, name, group)
        return 200, store[(namespace, name)]

    def delete_custom(
        self, group: str, plural: str, name: str, query: dict[str, str], body: Any, namespace: str = "", **_: Any
    ) -> tuple[int, Any]:
        _kind, _namespaced, store = self._custom_store(group, plural)
        if (namespace, name) not in store:
            raise not_found(plural, name, group)
        obj = store.pop((namespace, name))
        uid = obj["metadata"]["uid"]
        policy = query.get("propagationPolicy") or (body or {}).get("propagationPolicy") or "Background"
        if policy != "Orphan":
            kube_crds.garbage_collect(self, uid)
            if obj["kind"] == "RayJob":
                kube_crds._delete_ray_cluster(self, obj)
        obj["metadata"]["deletedWith"] = policy  # not a real field: lets tests see the policy
        self.deleted_custom.append(obj)
        return 200, success(200, {"name": name, "group": group, "kind": plural, "uid": uid})

    def create_pod_template(self, namespace: str, body: Any, **_: Any) -> tuple[int, Any]:
        if not isinstance(body, dict) or body.get("kind") != "PodTemplate" or body.get("apiVersion") != "v1":
            raise ApiError(400, "BadRequest", "the body must be a v1 PodTemplate")
        meta = body.setdefault("metadata", {})
        name = meta.get("name", "")
        if not name or not DNS_LABEL.match(name) or not (body.get("template") or {}).get("spec", {}).get("containers"):
            raise ApiError(422, "Invalid", f'PodTemplate "{name}" is invalid', {"name": name, "kind": "PodTemplate"})
        if (namespace, name) in self.pod_templates:
            raise ApiError(409, "AlreadyExists", f'podtemplates "{name}" already exists', {"name": name})
        meta.update(namespace=namespace, uid=str(uuid.uuid4()), creationTimestamp=timestamp(datetime.now(UTC)))
        self._bump(body)
        self.pod_templates[(namespace, name)] = body
        return 201, body

    def get_pod_template(self, namespace: str, name: str, **_: Any) -> tuple[int, Any]:
        if (namespace, name) not in self.pod_templates:
            raise not_found("podtemplates", name)
        return 200, self.pod_templates[(namespace, name)]

    def delete_pod_template(self, namespace: str, name: str, **_: Any) -> tuple[int, Any]:
        if (namespace, name) not in self.pod_templates:
            raise not_found("podtemplates", name)
        gone = self.pod_templates.pop((namespace, name))
        return 200, gone

    def delete_pod(self, namespace: str, name: str, query: dict[str, str], body: Any, **_: Any) -> tuple[int, Any]:
        pod = self.pods.get((namespace, name))
        if pod is None:
            raise not_found("pods", name)
        grace = query.get("gracePeriodSeconds") or (body or {}).get("gracePeriodSeconds")
        if grace is not None and int(grace) == 0:
            del self.pods[(namespace, name)]
            return 200, {"kind": "Pod", "apiVersion": "v1", **pod}
        meta = pod["metadata"]
        meta.setdefault("deletionTimestamp", timestamp(datetime.now(UTC)))
        spec_grace = pod.get("spec", {}).get("terminationGracePeriodSeconds", 30)
        meta["deletionGracePeriodSeconds"] = int(grace) if grace is not None else spec_grace
        self._bump(pod)
        return 200, {"kind": "Pod", "apiVersion": "v1", **pod}

    def add_log(
        self,
        namespace: str,
        pod: str,
        *lines: str,
        container: str = "",
        previous: bool = False,
        at: datetime | None = None,
        step: timedelta = timedelta(0),
    ) -> None:
        """Lines the container wrote (each ends with a line break), stamped ``at`` (now), each ``step`` after the
        one before: a zero step is one write of several lines, which the runtime stamps alike. ``container``
        defaults to the pod's only or first container."""
        with self.lock:
            spec = self.pods[(namespace, pod)].get("spec", {})
            name = container or (spec.get("containers") or [{"name": "worker"}])[0]["name"]
            stamp = at or datetime.now(UTC)
            log = self.pod_logs.setdefault((namespace, pod, name, previous), [])
            for line in lines:
                log.append((stamp, line))
                stamp += step

    def pod_log(self, namespace: str, name: str, query: dict[str, str], **_: Any) -> tuple[int, Any]:
        pod = self.pods.get((namespace, name))
        if pod is None:
            raise not_found("pods", name)
        container = _log_container(pod, query.get("container", ""))
        previous = query.get("previous") == "true"
        if previous and (namespace, name, container, True) not in self.pod_logs:
            raise ApiError(400, "BadRequest", f'previous terminated container "{container}" in pod "{name}" not found')
        if not previous:
            waiting = _waiting_reason(pod, container)
            if waiting:
                raise ApiError(
                    400, "BadRequest", f'container "{container}" in pod "{name}" is waiting to start: {waiting}'
                )
        if "sinceSeconds" in query and "sinceTime" in query:
            raise ApiError(400, "BadRequest", "at most one of `sinceTime` or `sinceSeconds` may be specified")
        for key in ("sinceSeconds", "limitBytes"):
            if key in query and int(query[key]) < 1:
                raise ApiError(
                    422, "Invalid", f'PodLogOptions "{name}" is invalid: {key}: Invalid value: must be greater than 0'
                )
        if "tailLines" in query and int(query["tailLines"]) < 0:
            raise ApiError(422, "Invalid", f'PodLogOptions "{name}" is invalid: tailLines: Invalid value: must be >= 0')
        lines = list(self.pod_logs.get((namespace, name, container, previous), []))
        if "sinceSeconds" in query:
            since = datetime.now(UTC) - timedelta(seconds=int(query["sinceSeconds"]))
            lines = [(stamp, line) for stamp, line in lines if stamp >= since]
        elif "sinceTime" in query:
            since = datetime.fromisoformat(query["sinceTime"].replace("Z", "+00:00"))
            lines = [(stamp, line) for stamp, line in lines if stamp >= since]
        if "tailLines" in query:
            tail = int(query["tailLines"])
            lines = lines[len(lines) - tail :] if tail else []
        stamped = query.get("timestamps") == "true"
        text = "".join((f"{rfc3339_nano(stamp)} " if stamped else "") + line for stamp, line in lines).encode()
        if "limitBytes" in query:
            text = text[: int(query["limitBytes"])]
        return 200, PlainText(text)

    def add_job_pod(
        self,
        namespace: str,
        job_name: str,
        index: int,
        node: str,
        phase: str = "Running",
        status: dict[str, Any] | None = None,
    ) -> None:
        """A pod of a created Job, as the Job controller would make it, bound to ``node`` (none when ``node`` is
        empty: the scheduler has not placed it). ``status`` replaces its ``PodStatus`` (``phase`` otherwise)."""
        job = self.jobs[(namespace, job_name)]
        name = f"{job_name}-{index}-x{index:04d}"
        labels = dict(job["spec"]["template"]["metadata"].get("labels", {}))
        labels["batch.kubernetes.io/job-completion-index"] = str(index)
        owner = {"apiVersion": "batch/v1", "kind": "Job", "name": job_name, "uid": job["metadata"]["uid"]}
        self.pods[(namespace, name)] = {
            "metadata": {"name": name, "namespace": namespace, "labels": labels, "ownerReferences": [owner]},
            "spec": {**copy.deepcopy(job["spec"]["template"]["spec"]), **({"nodeName": node} if node else {})},
            "status": status if status is not None else {"phase": phase},
        }


class PlainText(bytes):
    """An answer that is text, not JSON (a pod log)."""


def rfc3339_nano(stamp: datetime) -> str:
    """Go's ``time.RFC3339Nano`` in UTC: trailing zeros of the fraction trimmed, no fraction when it is zero
    (Python keeps microseconds: the nanoseconds' last three digits are zero)."""
    fraction = f"{stamp.microsecond:06d}000".rstrip("0")
    return stamp.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S") + (f".{fraction}" if fraction else "") + "Z"


def _log_container(pod: dict[str, Any], container: str) -> str:
    """The container whose log is asked for: the one named, which must be the pod's, or its only one."""
    name = pod["metadata"]["name"]
    containers = [c["name"] for c in pod.get("spec", {}).get("containers", [])]
    if not container:
        if len(containers) != 1:
            raise ApiError(
                400,
                "BadRequest",
                f"a container name must be specified for pod {name}, choose one of: [{' '.join(containers)}]",
            )
        return str(containers[0])
    if container not in containers:
        raise ApiError(400, "BadRequest", f"container {container} is not valid for pod {name}")
    return container


def _waiting_reason(pod: dict[str, Any], container: str) -> str:
    """Why ``container`` has not started ("" once it has), as the kubelet refuses its log meanwhile."""
    status = pod.get("status", {})
    for state in status.get("containerStatuses") or []:
        if state.get("name") == container:
            waiting = (state.get("state") or {}).get("waiting")
            return str(waiting.get("reason") or "ContainerCreating") if waiting else ""
    return "" if status.get("phase") in ("Running", "Succeeded", "Failed") else "ContainerCreating"


def waiting(reason: str, message: str = "", image: str = "ghcr.io/acme/train:1.4") -> dict[str, Any]:
    """A pending pod whose container waits (``ErrImagePull``, ``ImagePullBackOff``, ``CreateContainerError``)."""
    state = {"waiting": {"reason": reason, **({"message": message} if message else {})}}
    return {"phase": "Pending", "containerStatuses": [_container(image, state, ready=False)]}


def terminated(exit_code: int, reason: str = "Error", image: str = "ghcr.io/acme/train:1.4") -> dict[str, Any]:
    """A pod whose container ended: ``Failed`` unless it exited 0 (reason ``OOMKilled`` with 137 for OOM)."""
    state = {"terminated": {"exitCode": exit_code, "reason": reason, "startedAt": "2026-11-21T12:00:00Z"}}
    phase = "Succeeded" if exit_code == 0 else "Failed"
    return {"phase": phase, "containerStatuses": [_container(image, state, ready=False)]}


def unschedulable(message: str) -> dict[str, Any]:
    """A pod the scheduler cannot place: ``PodScheduled`` False, reason ``Unschedulable``, its words."""
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
    return {"phase": "Pending", "conditions": [condition]}


def disrupted(reason: str, message: str, exit_code: int = 143) -> dict[str, Any]:
    """A pod the cluster ended: ``DisruptionTarget`` True with ``reason`` (``PreemptionByScheduler``,
    ``DeletionByTaintManager``, ...), then killed."""
    status = terminated(exit_code)
    status["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": reason, "message": message}]
    return status


def _container(image: str, state: dict[str, Any], *, ready: bool) -> dict[str, Any]:
    return {"name": "worker", "image": image, "imageID": "", "ready": ready, "restartCount": 0, "state": state}


def _as_selector(match_labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in match_labels.items())


CORE = "/api/v1"
BATCH = "/apis/batch/v1/namespaces/(?P<namespace>[^/]+)/jobs"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/(?P<namespace>[^/]+)/leases"
GROUPS = "(?P<group>kueue\\.x-k8s\\.io|ray\\.io|autoscaling\\.x-k8s\\.io)/(?:v1beta1|v1)"
CUSTOM = f"/apis/{GROUPS}/namespaces/(?P<namespace>[^/]+)/(?P<plural>[a-z]+)"
CLUSTER_CUSTOM = f"/apis/{GROUPS}/(?P<plural>resourceflavors|clusterqueues)"
ROUTES: list[tuple[re.Pattern[str], dict[str, Callable[..., tuple[int, Any]]]]] = [
    (re.compile(f"{CORE}/nodes"), {"GET": KubeServer.list_nodes}),
    (re.compile(f"{CORE}/nodes/(?P<name>[^/]+)"), {"GET": KubeServer.get_node, "PATCH": KubeServer.patch_node}),
    (re.compile(f"{CORE}/pods"), {"GET": KubeServer.list_pods}),
    (re.compile(f"{CORE}/namespaces/(?P<namespace>[^/]+)/pods"), {"GET": KubeServer.list_pods}),
    (re.compile(f"{CORE}/namespaces/(?P<namespace>[^/]+)/pods/(?P<name>[^/]+)"), {"DELETE": KubeServer.delete_pod}),
    (re.compile(f"{CORE}/namespaces/(?P<namespace>[^/]+)/pods/(?P<name>[^/]+)/eviction"), {"POST": KubeServer.evict}),
    (re.compile(f"{CORE}/namespaces/(?P<namespace>[^/]+)/pods/(?P<name>[^/]+)/log"), {"GET": KubeServer.pod_log}),
    (re.compile(BATCH), {"GET": KubeServer.list_jobs, "POST": KubeServer.create_job}),
    (re.compile(f"{CORE}/namespaces/(?P<namespace>[^/]+)/podtemplates"), {"POST": KubeServer.create_pod_template}),
    (
        re.compile(f"{CORE}/namespaces/(?P<namespace>[^/]+)/podtemplates/(?P<name>[^/]+)"),
        {"GET": KubeServer.get_pod_template, "DELETE": KubeServer.delete_pod_template},
    ),
    (
        re.compile("/apis/coordination.k8s.io/v1/namespaces/(?P<namespace>[^/]+)/leases"),
        {"GET": KubeServer.list_leases},
    ),
    (re.compile(f"{BATCH}/(?P<name>[^/]+)"), {"GET": KubeServer.get_job, "DELETE": KubeServer.delete_job}),
    (re.compile(CUSTOM), {"GET": KubeServer.list_custom, "POST": KubeServer.create_custom}),
    (re.compile(f"{CUSTOM}/(?P<name>[^/]+)"), {"GET": KubeServer.get_custom, "DELETE": KubeServer.delete_custom}),
    (re.compile(CLUSTER_CUSTOM), {"GET": KubeServer.list_custom, "POST": KubeServer.create_custom}),
    (re.compile(f"{CLUSTER_CUSTOM}/(?P<name>[^/]+)"), {"GET": KubeServer.get_custom}),
]


class _Handler(BaseHTTPRequestHandler):
    kube: KubeServer
    protocol_version = "HTTP/1.1"  # keep-alive, as the client's urllib3 pool expects

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def _serve(self, method: str) -> None:
        url = urlsplit(self.path)
        query = {key: values[-1] for key, values in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        with self.kube.lock:
            self.kube.requests.append((method, self.path, content_type, body))
            canned = self.kube.canned.get((method, url.path))
            failure = self.kube._failure(method, url.path)
        if failure is not None:
            self._reply(failure.code, json.dumps(failure.status()).encode(), "application/json")
            return
        if canned is not None:
            self._reply(canned[0], canned[2], canned[1])
            return
        try:
            self._authorize(method, url.path)
            if isinstance(body, str):
                raise ApiError(400, "BadRequest", "the request body is not JSON")
            status, answer = self.kube.handle(method, url.path, query, body, content_type)
        except ApiError as e:
            status, answer = e.code, e.status()
        if isinstance(answer, PlainText):
            self._reply(status, bytes(answer), "text/plain")
            return
        self._reply(status, json.dumps(answer).encode(), "application/json")

    def _authorize(self, method: str, path: str) -> None:
        token = (self.headers.get("Authorization") or "").removeprefix("Bearer ").strip()
        if token == TOKEN:
            return
        if token == READONLY_TOKEN:
            if method == "GET":
                return
            raise ApiError(
                403,
                "Forbidden",
                f'{path} is forbidden: User "system:serviceaccount:quartermaster:read-only" cannot '
                f"{method.lower()} this resource",
            )
        raise ApiError(401, "Unauthorized", "Unauthorized")

    def _reply(self, status: int, payload: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
