"""A faithful local Cloud TPU v2 REST server, for the TPU backend's tests.

It answers the paths, query parameters and JSON shapes that ``google-cloud-tpu``'s ``tpu_v2`` REST
transport sends and parses (``google/cloud/tpu_v2/services/tpu/transports/rest_base.py`` holds the URI
templates; ``types/cloud_tpu.py`` the messages): lowerCamelCase fields, enums as names, or as numbers when
the request says ``$alt=json;enum-encoding=int`` (the client always does), list pages with
``nextPageToken``, long-running ``Operation``s, and errors as ``{"error": {"code", "message", "status"}}``.

Only what the backend uses is served: accelerator types and nodes (list, get, patch), queued resources
(create, get, list, delete) and operations (get). A queued resource moves one state along ``progression`` on every
GET, so a test follows it from ACCEPTED to ACTIVE deterministically; reaching ACTIVE creates its nodes.
Everything it was asked is kept in ``requests``.

As the API documents it (cloud.google.com/tpu/docs/reference/rest/v2/projects.locations.queuedResources and
.../projects.locations.nodes#Node):
- ``tpu.nodeSpec`` is a list: a queued resource of several entries provisions several slices together
  (multislice), all of them or none; each entry names its ``parent`` and ``nodeId``;
- a node gives either ``acceleratorType`` (``v5p-32``) or ``acceleratorConfig`` (``type`` and
  ``topology``, ``V5P`` and ``2x2x4``), not both; the slice made reports both;
- a queued resource goes through ACCEPTED, WAITING_FOR_RESOURCES and PROVISIONING to ACTIVE, or to FAILED
  with ``failedData.error``, a ``google.rpc.Status`` (``fail``; e.g. code 8 RESOURCE_EXHAUSTED when there is
  no capacity); a node id that is taken fails it with ALREADY_EXISTS (6) when it is provisioned;
- a slice under an ACTIVE queued resource may be preempted or repaired while the queued resource stays
  ACTIVE (``break_node``);
- ``PATCH`` of a node (UpdateNode) takes ``updateMask``, the fields to replace (description, tags, labels,
  metadata, networkConfig.enableExternalIps; any other is INVALID_ARGUMENT), replaces each named field as a
  whole (a map too: what the body leaves out of ``metadata`` is gone), and answers an ``Operation`` whose
  ``response`` is the updated node once done.

``MetadataServer`` plays the GCE metadata server of one TPU VM host (what its processes read at
``http://metadata.google.internal/computeMetadata/v1/``): the slice's metadata as instance attributes, with
the host's ``agent-worker-number``; only with ``Metadata-Flavor: Google``; ``recursive=true`` gives them as
JSON, and ``wait_for_change=true`` (with ``last_etag``, ``timeout_sec``) holds the answer until they change, as
the real server's long poll does; every answer has an ``ETag``.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

# Enum numbers from google/cloud/tpu/v2/cloud_tpu.proto.
NODE_STATE = {
    "STATE_UNSPECIFIED": 0,
    "CREATING": 1,
    "READY": 2,
    "RESTARTING": 3,
    "REIMAGING": 4,
    "DELETING": 5,
    "REPAIRING": 6,
    "STOPPED": 8,
    "STOPPING": 9,
    "STARTING": 10,
    "PREEMPTED": 11,
    "TERMINATED": 12,
    "HIDING": 13,
    "HIDDEN": 14,
    "UNHIDING": 15,
    "UNKNOWN": 16,
}
NODE_HEALTH = {
    "HEALTH_UNSPECIFIED": 0,
    "HEALTHY": 1,
    "TIMEOUT": 3,
    "UNHEALTHY_TENSORFLOW": 4,
    "UNHEALTHY_MAINTENANCE": 5,
}
API_VERSION = {"API_VERSION_UNSPECIFIED": 0, "V1_ALPHA1": 1, "V1": 2, "V2_ALPHA1": 3, "V2": 4}
ACCELERATOR_CONFIG_TYPE = {"TYPE_UNSPECIFIED": 0, "V2": 2, "V3": 4, "V4": 7, "V5LITE_POD": 9, "V5P": 10, "V6E": 11}
QR_STATE = {
    "STATE_UNSPECIFIED": 0,
    "CREATING": 1,
    "ACCEPTED": 2,
    "PROVISIONING": 3,
    "FAILED": 4,
    "DELETING": 5,
    "ACTIVE": 6,
    "SUSPENDING": 7,
    "SUSPENDED": 8,
    "WAITING_FOR_RESOURCES": 9,
}
STATE_INITIATOR = {"STATE_INITIATOR_UNSPECIFIED": 0, "USER": 1, "SERVICE": 2}
SYMPTOM_TYPE = {
    "SYMPTOM_TYPE_UNSPECIFIED": 0,
    "LOW_MEMORY": 1,
    "OUT_OF_MEMORY": 2,
    "EXECUTE_TIMED_OUT": 3,
    "MESH_BUILD_FAIL": 4,
    "HBM_OUT_OF_MEMORY": 5,
    "PROJECT_ABUSE": 6,
}

# google.rpc.Code names for the HTTP statuses this server answers.
STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ALREADY_EXISTS",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}

# RFC 1035 label: what the API accepts as a queued resource id.
RESOURCE_ID = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
PATH = re.compile(
    r"^/v2/projects/(?P<project>[^/]+)/locations/(?P<zone>[^/]+)"
    r"/(?P<collection>acceleratorTypes|nodes|queuedResources|operations)(?:/(?P<id>[^/:]+))?$"
)
NOW = "2026-11-21T09:00:00Z"
EMPTY = {"@type": "type.googleapis.com/google.protobuf.Empty"}
#: What UpdateNode may change (``update_mask`` paths, as the JSON API spells them).
UPDATABLE = frozenset({"description", "tags", "labels", "metadata", "networkConfig.enableExternalIps"})
PROGRESSION = ("ACCEPTED", "WAITING_FOR_RESOURCES", "PROVISIONING", "ACTIVE")


class ApiError(Exception):
    """An error answer: HTTP ``code`` and the ``google.rpc.Code`` name (``status``; by default the usual one
    for the HTTP code: 400 is INVALID_ARGUMENT, though FAILED_PRECONDITION is 400 too)."""

    def __init__(self, code: int, message: str, status: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status or STATUS_NAMES.get(code, "UNKNOWN")


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    body: Any
    headers: dict[str, str]  # names in lower case


@dataclass
class QueuedResource:
    """A stored queued resource: its JSON (enums as names) and where it is in ``progression``."""

    body: dict[str, Any]
    step: int = 0
    deleting: bool = False
    fixed_state: str = ""  # FAILED or SUSPENDED once a test set it; progression stops
    provisioned: bool = False  # its slices were made (once: a slice deleted later does not come back)
    deleted_at: int = 0  # the number of the request that deleted it: it is gone two requests later


def _accelerator_type(project: str, zone: str, name: str, kind: str, topology: str) -> dict[str, Any]:
    return {
        "name": f"projects/{project}/locations/{zone}/acceleratorTypes/{name}",
        "type": name,
        "acceleratorConfigs": [{"type": kind, "topology": topology}],
    }


def _endpoints(count: int, base: int) -> list[dict[str, Any]]:
    return [{"ipAddress": f"10.0.{base}.{i + 2}", "port": 8470} for i in range(count)]


@dataclass
class TpuServer:
    """One project and zone of Cloud TPU. Use as a context manager; ``url`` is the endpoint."""

    project: str = "qm-test"
    zone: str = "us-east5-a"
    #: When set, every request must carry ``Authorization: Bearer <token>`` (else 401).
    token: str | None = None
    #: When set, every request is answered with this status and raw body instead (malformed answers).
    canned: tuple[int, bytes] | None = None
    #: Seconds to wait before answering (a slow or hung API).
    delay: float = 0.0
    #: Items per list page; small, so the client has to follow ``nextPageToken``.
    page_size: int = 2
    #: Whether create and delete answer with an Operation already done.
    operations_done: bool = False
    progression: tuple[str, ...] = PROGRESSION
    accelerator_types: dict[str, dict[str, Any]] = field(default_factory=dict)
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    queued_resources: dict[str, QueuedResource] = field(default_factory=dict)
    operations: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)
    #: (method, collection) -> [error, answers left or None]: requests refused or failed (``fail_requests``).
    failing: dict[tuple[str, str], list[Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._lock = threading.Condition()
        self._responses: dict[str, dict[str, Any]] = {}
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        if not self.accelerator_types and not self.nodes:
            self.seed()

    # life cycle
    def __enter__(self) -> TpuServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        server = self

        class Handler(_Handler):
            tpu = server

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), name="tpu-server", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    @property
    def url(self) -> str:
        assert self._httpd is not None, "start the server first"
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def parent(self) -> str:
        return f"projects/{self.project}/locations/{self.zone}"

    # seed data
    def seed(self) -> None:
        p, z = self.project, self.zone
        for name, kind, topology in (
            ("v4-8", "V4", "2x2x1"),
            ("v5p-8", "V5P", "2x2x1"),
            ("v5p-16", "V5P", "2x2x2"),
            ("v5p-32", "V5P", "2x2x4"),
            ("v5litepod-8", "V5LITE_POD", "2x4"),
            ("v6e-8", "V6E", "2x4"),
        ):
            self.accelerator_types[name] = _accelerator_type(p, z, name, kind, topology)
        self.add_node(
            "train-a",
            acceleratorType="v5p-16",
            acceleratorConfig={"type": "V5P", "topology": "2x2x2"},
            state="READY",
            health="HEALTHY",
            labels={"team": "vision", "env": "prod"},
            networkEndpoints=_endpoints(2, 1),
        )
        self.add_node(
            "train-b",
            acceleratorType="v5p-8",
            acceleratorConfig={"type": "V5P", "topology": "2x2x1"},
            state="REPAIRING",
            health="UNHEALTHY_MAINTENANCE",
            healthDescription="The TPU had a maintenance event at 2026-11-21T08:40:00Z",
            labels={"team": "speech"},
            networkEndpoints=_endpoints(1, 2),
            symptoms=[
                {
                    "createTime": "2026-11-21T08:41:00Z",
                    "symptomType": "HBM_OUT_OF_MEMORY",
                    "details": "HBM usage above capacity",
                    "workerId": "0",
                }
            ],
        )
        # No acceleratorConfig: the chip count comes from the type's name.
        self.add_node(
            "serve-c",
            acceleratorType="v6e-8",
            state="READY",
            health="HEALTHY",
            networkEndpoints=_endpoints(1, 3),
            schedulingConfig={"spot": True},
        )

    def add_node(self, name: str, **fields: Any) -> dict[str, Any]:
        node: dict[str, Any] = {
            "name": f"{self.parent}/nodes/{name}",
            "runtimeVersion": "v2-alpha-tpuv5",
            "createTime": NOW,
            "apiVersion": "V2",
            "id": str(1000 + len(self.nodes)),
            **fields,
        }
        self.nodes[name] = node
        return node

    # test hooks
    def fail(self, qr_id: str, message: str, code: int = 8) -> None:
        """The queued resource FAILED with a ``google.rpc.Status``: ``code`` 8 RESOURCE_EXHAUSTED (no capacity),
        9 FAILED_PRECONDITION, 3 INVALID_ARGUMENT, ..."""
        qr = self.queued_resources[qr_id]
        qr.fixed_state = "FAILED"
        qr.body["state"] = {"state": "FAILED", "failedData": {"error": {"code": code, "message": message}}}

    def advance(self, qr_id: str) -> None:
        """Time passes for a queued resource: it goes through the rest of ``progression`` (reaching ACTIVE makes its
        slices), as the API's does whether or not anyone reads it."""
        with self._lock:
            for _ in self.progression:
                self._advance(qr_id)

    def break_node(self, node_id: str, state: str = "PREEMPTED", description: str = "") -> None:
        """A slice goes bad under its queued resource (preempted, repairing, terminated); the queued resource
        stays ACTIVE, as the API's does."""
        node = self.nodes[node_id]
        node["state"] = state
        if description:
            node["healthDescription"] = description

    def suspend(self, qr_id: str, initiator: str) -> None:
        qr = self.queued_resources[qr_id]
        qr.fixed_state = "SUSPENDED"
        qr.body["state"] = {"state": "SUSPENDED", "suspendedData": {}, "stateInitiator": initiator}

    def fail_requests(self, method: str, collection: str, error: ApiError, times: int | None = None) -> None:
        """Answer ``method`` on ``collection`` (``queuedResources``, ``nodes`` ...) with ``error`` the next
        ``times`` times, or every time until ``heal``."""
        with self._lock:
            self.failing[(method, collection)] = [error, times]

    def heal(self) -> None:
        with self._lock:
            self.failing.clear()

    def _failure(self, method: str, path: str) -> ApiError | None:
        match = PATH.match(path)
        key = (method, match.group("collection") if match else "")
        entry = self.failing.get(key)
        if entry is None:
            return None
        error: ApiError = entry[0]
        left: int | None = entry[1]
        if left is not None:
            if left <= 1:
                del self.failing[key]
            else:
                entry[1] = left - 1
        return error

    def set_metadata(self, node_id: str, metadata: dict[str, str]) -> None:
        """The slice's owner changes its metadata (as ``gcloud compute tpus tpu-vm update`` would)."""
        with self._lock:
            self.nodes[node_id]["metadata"] = dict(metadata)
            self._lock.notify_all()

    def metadata(self, node_id: str) -> dict[str, str]:
        with self._lock:
            return dict(self.nodes[node_id].get("metadata", {}))

    def mutations(self) -> list[Recorded]:
        return [r for r in self.requests if r.method != "GET"]

    # request handling (called under the lock)
    def _purge(self) -> None:
        """Deletion takes a while: a deleted queued resource is DELETING for the next request, then gone with
        its slices (whatever is asked meanwhile)."""
        for qr_id, qr in list(self.queued_resources.items()):
            if qr.deleting and len(self.requests) - qr.deleted_at >= 2:
                del self.queued_resources[qr_id]
                for spec in qr.body["tpu"]["nodeSpec"]:
                    node = self.nodes.get(spec["nodeId"])
                    if node is not None and node.get("queuedResource") == qr.body["name"]:
                        del self.nodes[spec["nodeId"]]

    def handle(self, method: str, path: str, query: dict[str, str], body: Any) -> tuple[int, Any]:
        self._purge()
        match = PATH.match(path)
        if match is None:
            raise ApiError(404, f"The requested URL {path} was not found on this server.")
        project, zone, collection, item = match.group("project", "zone", "collection", "id")
        if project != self.project:
            raise ApiError(403, f"Permission denied on resource project {project}.")
        if zone != self.zone:
            raise ApiError(400, f"Invalid location: {zone}")
        ints = query.get("$alt", "") == "json;enum-encoding=int"
        key = (method, collection, item is not None)
        if key == ("GET", "acceleratorTypes", False):
            return 200, self._page("acceleratorTypes", list(self.accelerator_types.values()), query)
        if key == ("GET", "acceleratorTypes", True):
            return 200, self._get(self.accelerator_types, "acceleratorTypes", item)
        if key == ("GET", "nodes", False):
            nodes = [_encode_node(n, ints) for n in self.nodes.values()]
            return 200, self._page("nodes", nodes, query)
        if key == ("GET", "nodes", True):
            return 200, _encode_node(self._get(self.nodes, "nodes", item), ints)
        if key == ("PATCH", "nodes", True):
            return 200, self._update_node(item, query, body, ints)
        if key == ("POST", "queuedResources", False):
            return 200, self._create_queued_resource(query, body, ints)
        if key == ("GET", "queuedResources", False):
            listed = [_encode_qr(qr.body, ints) for qr in self.queued_resources.values()]
            return 200, self._page("queuedResources", listed, query)
        if key == ("GET", "queuedResources", True):
            return 200, _encode_qr(self._advance(item), ints)
        if key == ("DELETE", "queuedResources", True):
            return 200, self._delete_queued_resource(item, query)
        if key == ("GET", "operations", True):
            operation = self._get(self.operations, "operations", item)
            operation["done"] = True  # finished by the time anyone asks
            operation.setdefault("response", self._responses.get(item) or EMPTY)
            return 200, operation
        raise ApiError(404, f"The requested URL {path} was not found on this server.")

    def _get(self, table: dict[str, dict[str, Any]], collection: str, item: str) -> dict[str, Any]:
        if item not in table:
            raise ApiError(404, f"Resource '{self.parent}/{collection}/{item}' was not found")
        return table[item]

    def _page(self, key: str, items: list[dict[str, Any]], query: dict[str, str]) -> dict[str, Any]:
        size = int(query.get("pageSize") or self.page_size)
        start = int(query.get("pageToken") or 0)
        page: dict[str, Any] = {key: items[start : start + size]}
        if start + size < len(items):
            page["nextPageToken"] = str(start + size)
        return page

    def _operation(self, verb: str, target: str, response: dict[str, Any] | None) -> dict[str, Any]:
        op_id = f"operation-{len(self.operations) + 1}"
        operation: dict[str, Any] = {
            "name": f"{self.parent}/operations/{op_id}",
            "metadata": {
                "@type": "type.googleapis.com/google.cloud.tpu.v2.OperationMetadata",
                "createTime": NOW,
                "target": target,
                "verb": verb,
                "cancelRequested": False,
                "apiVersion": "v2",
            },
            "done": self.operations_done,
        }
        self._responses[op_id] = response or EMPTY
        if self.operations_done:
            operation["response"] = self._responses[op_id]
        self.operations[op_id] = operation
        return operation

    def _update_node(self, item: str, query: dict[str, str], body: Any, ints: bool) -> dict[str, Any]:
        node = self._get(self.nodes, "nodes", item)
        paths = [p for p in query.get("updateMask", "").split(",") if p]
        if not paths:
            raise ApiError(400, "update_mask is required")
        unsupported = [p for p in paths if p not in UPDATABLE]
        if unsupported:
            raise ApiError(400, f"Invalid update_mask paths {unsupported}; supported: {sorted(UPDATABLE)}")
        if not isinstance(body, dict):
            raise ApiError(400, "Invalid JSON payload received.")
        for path in paths:
            if path == "networkConfig.enableExternalIps":
                node.setdefault("networkConfig", {})["enableExternalIps"] = bool(
                    body.get("networkConfig", {}).get("enableExternalIps", False)
                )
            elif path in body:
                node[path] = copy.deepcopy(body[path])
            else:
                node.pop(path, None)
        response = {"@type": "type.googleapis.com/google.cloud.tpu.v2.Node", **_encode_node(node, False)}
        return self._operation("update", node["name"], response)

    def _create_queued_resource(self, query: dict[str, str], body: Any, ints: bool) -> dict[str, Any]:
        qr_id = query.get("queuedResourceId", "")
        if not RESOURCE_ID.match(qr_id):
            raise ApiError(400, f"Invalid queued resource id {qr_id!r}: must match {RESOURCE_ID.pattern}")
        if not isinstance(body, dict):
            raise ApiError(400, "Invalid JSON payload received.")
        name = f"{self.parent}/queuedResources/{qr_id}"
        if qr_id in self.queued_resources:
            raise ApiError(409, f"Resource '{name}' already exists")
        specs = body.get("tpu", {}).get("nodeSpec", [])
        if not specs:
            raise ApiError(400, "tpu.node_spec: at least one node spec is required")
        seen: set[str] = set()
        for i, spec in enumerate(specs):
            self._check_node_spec(i, spec, seen)
        if "spot" in body and "guaranteed" in body:
            raise ApiError(400, "Only one of spot and guaranteed may be set")
        stored = _decode(copy.deepcopy(body))
        stored.update(name=name, createTime=NOW, state={"state": self.progression[0]})
        self.queued_resources[qr_id] = QueuedResource(body=stored)
        return self._operation("create", name, {"@type": _QR_TYPE, **_encode_qr(stored, ints)})

    def _check_node_spec(self, i: int, spec: dict[str, Any], seen: set[str]) -> None:
        node = spec.get("node", {})
        where = f"tpu.node_spec[{i}]"
        if spec.get("parent") != self.parent:
            raise ApiError(400, f"{where}.parent must be {self.parent}")
        node_id = spec.get("nodeId")
        if not node_id:
            raise ApiError(400, f"{where}.node_id is required")
        if node_id in seen:
            raise ApiError(400, f"{where}.node_id {node_id} is given twice")
        seen.add(node_id)
        if "acceleratorType" in node and "acceleratorConfig" in node:
            raise ApiError(400, f"{where}.node: give accelerator_type or accelerator_config, not both")
        if "acceleratorConfig" in node:
            config = node["acceleratorConfig"]
            wanted = (_name(ACCELERATOR_CONFIG_TYPE, config.get("type", 0)), config.get("topology"))
            if self._type_of_config(*wanted) is None:
                raise ApiError(400, f"Unknown accelerator config {wanted[0]} {wanted[1]} in {self.zone}")
        elif node.get("acceleratorType") not in self.accelerator_types:
            raise ApiError(400, f"Unknown accelerator type {node.get('acceleratorType')!r} in {self.zone}")
        if not node.get("runtimeVersion"):
            raise ApiError(400, f"{where}.node.runtime_version is required")

    def _type_of_config(self, kind: str, topology: str | None) -> str | None:
        for name, accelerator in self.accelerator_types.items():
            if {"type": kind, "topology": topology} in accelerator["acceleratorConfigs"]:
                return name
        return None

    def _advance(self, qr_id: str) -> dict[str, Any]:
        """The queued resource as it is now; the next GET sees it one state further."""
        qr = self.queued_resources.get(qr_id)
        if qr is None:
            raise ApiError(404, f"Resource '{self.parent}/queuedResources/{qr_id}' was not found")
        if qr.deleting:
            qr.body["state"] = {"state": "DELETING", "deletingData": {}}
            return copy.deepcopy(qr.body)
        if qr.fixed_state:
            return copy.deepcopy(qr.body)
        state = self.progression[min(qr.step, len(self.progression) - 1)]
        qr.body["state"] = {"state": state, _STATE_DATA.get(state, "acceptedData"): {}}
        if state == "ACTIVE":
            self._provision(qr)
        qr.step += 1
        return copy.deepcopy(qr.body)

    def _provision(self, qr: QueuedResource) -> None:
        """Make the queued resource's slices, all or none: a node id that is taken fails it (ALREADY_EXISTS)."""
        specs = qr.body["tpu"]["nodeSpec"]
        if qr.provisioned:
            return  # made on an earlier read
        taken = [s["nodeId"] for s in specs if s["nodeId"] in self.nodes]
        if taken:
            self.fail(_short(qr.body["name"]), f"Node {taken[0]} already exists", code=6)
            return
        qr.provisioned = True
        for n, spec in enumerate(specs):
            wanted = spec["node"]
            if "acceleratorConfig" in wanted:
                config = dict(wanted["acceleratorConfig"])
                accelerator_type = self._type_of_config(config["type"], config["topology"])
            else:
                accelerator_type = wanted["acceleratorType"]
                config = dict(self.accelerator_types[accelerator_type]["acceleratorConfigs"][0])
            chips = 1
            for d in config["topology"].split("x"):
                chips *= int(d)
            hosts = 1 if config["type"] in ("V5LITE_POD", "V6E") and chips <= 8 else max(1, chips // 4)
            self.add_node(
                spec["nodeId"],
                acceleratorType=accelerator_type,
                acceleratorConfig=config,
                runtimeVersion=wanted["runtimeVersion"],
                state="READY",
                health="HEALTHY",
                labels=wanted.get("labels", {}),
                metadata=wanted.get("metadata", {}),
                schedulingConfig=wanted.get("schedulingConfig", {}),
                networkEndpoints=_endpoints(hosts, 9 + n),
                queuedResource=qr.body["name"],
            )

    def _delete_queued_resource(self, qr_id: str, query: dict[str, str]) -> dict[str, Any]:
        qr = self.queued_resources.get(qr_id)
        if qr is None:
            raise ApiError(404, f"Resource '{self.parent}/queuedResources/{qr_id}' was not found")
        state = qr.body["state"]["state"]
        if state in ("ACTIVE", "PROVISIONING") and query.get("force") != "true":
            raise ApiError(400, f"Queued resource in state {state} has nodes; delete them first or use force")
        qr.deleting = True
        qr.deleted_at = len(self.requests)
        return self._operation("delete", qr.body["name"], None)


_QR_TYPE = "type.googleapis.com/google.cloud.tpu.v2.QueuedResource"
_STATE_DATA = {
    "CREATING": "creatingData",
    "ACCEPTED": "acceptedData",
    "PROVISIONING": "provisioningData",
    "ACTIVE": "activeData",
    "WAITING_FOR_RESOURCES": "acceptedData",  # the proto has no data message for this state
}


def _short(name: str) -> str:
    return name.rsplit("/", 1)[-1]


def _name(table: dict[str, int], value: Any) -> Any:
    """An enum given as a number (the client's encoding) turned back into its name."""
    if isinstance(value, int):
        return next((name for name, number in table.items() if number == value), value)
    return value


def _decode(body: dict[str, Any]) -> dict[str, Any]:
    for spec in body.get("tpu", {}).get("nodeSpec", []):
        node = spec.get("node", {})
        if "acceleratorConfig" in node:
            config = node["acceleratorConfig"]
            config["type"] = _name(ACCELERATOR_CONFIG_TYPE, config.get("type", 0))
    return body


def _enum(table: dict[str, int], value: str, ints: bool) -> Any:
    return table[value] if ints else value


def _encode_node(node: dict[str, Any], ints: bool) -> dict[str, Any]:
    out = copy.deepcopy(node)
    for key, table in (("state", NODE_STATE), ("health", NODE_HEALTH), ("apiVersion", API_VERSION)):
        if key in out:
            out[key] = _enum(table, out[key], ints)
    if "acceleratorConfig" in out:
        out["acceleratorConfig"]["type"] = _enum(ACCELERATOR_CONFIG_TYPE, out["acceleratorConfig"]["type"], ints)
    for symptom in out.get("symptoms", []):
        symptom["symptomType"] = _enum(SYMPTOM_TYPE, symptom["symptomType"], ints)
    return out


def _encode_qr(body: dict[str, Any], ints: bool) -> dict[str, Any]:
    out = copy.deepcopy(body)
    state = out.get("state", {})
    if "state" in state:
        state["state"] = _enum(QR_STATE, state["state"], ints)
    if "stateInitiator" in state:
        state["stateInitiator"] = _enum(STATE_INITIATOR, state["stateInitiator"], ints)
    for spec in out.get("tpu", {}).get("nodeSpec", []):
        config = spec.get("node", {}).get("acceleratorConfig")
        if config:
            config["type"] = _enum(ACCELERATOR_CONFIG_TYPE, config["type"], ints)
    return out


class _Handler(BaseHTTPRequestHandler):
    tpu: TpuServer
    protocol_version = "HTTP/1.1"
    # Keep-alive with headers and body in separate writes meets delayed ACKs: 40 ms a request without this.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def _serve(self, method: str) -> None:
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        server = self.tpu
        if server.delay:
            time.sleep(server.delay)
        with server._lock:
            headers = {k.lower(): v for k, v in self.headers.items()}
            server.requests.append(Recorded(method, url.path, query, body, headers))
            if server.canned is not None:
                self._send(*server.canned)
                return
            try:
                if server.token is not None and self.headers.get("Authorization") != f"Bearer {server.token}":
                    raise ApiError(
                        401,
                        "Request had invalid authentication credentials. Expected OAuth 2 access token, "
                        "login cookie or other valid authentication credential.",
                    )
                if isinstance(body, str):
                    raise ApiError(400, "Invalid JSON payload received.")
                failure = server._failure(method, url.path)
                if failure is not None:
                    raise failure
                status, payload = server.handle(method, url.path, query, body)
                server._lock.notify_all()  # a metadata server's long poll may be waiting for this change
            except ApiError as error:
                status = error.code
                payload = {"error": {"code": error.code, "message": error.message, "status": error.status}}
        self._send(status, json.dumps(payload).encode())

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class MetadataServer:
    """The metadata server of host ``worker`` of slice ``node_id`` (see the module's docstring). Use as a
    context manager; ``host`` is what ``GCE_METADATA_HOST`` names for the programs on that host."""

    def __init__(self, tpu: TpuServer, node_id: str, worker: int = 0) -> None:
        self.tpu, self.node_id, self.worker = tpu, node_id, worker
        self._httpd: ThreadingHTTPServer | None = None

    def __enter__(self) -> MetadataServer:
        server = self

        class Handler(_MetadataHandler):
            metadata = server

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, args=(0.05,), name="metadata", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    @property
    def host(self) -> str:
        assert self._httpd is not None, "start the server first"
        host, port = self._httpd.server_address[:2]
        return f"{host!s}:{port}"

    def attributes(self) -> dict[str, str]:
        """The instance attributes now (called under the TPU server's lock): the slice's metadata, and what the
        TPU VM's own agent adds for each host."""
        node = self.tpu.nodes.get(self.node_id, {})
        return {**node.get("metadata", {}), "agent-worker-number": str(self.worker)}

    def answer(self, key: str, query: dict[str, str]) -> tuple[int, str, str]:
        """(status, body, ETag) for ``instance/attributes/<key>`` ("" for all of them)."""
        wait = query.get("wait_for_change") == "true"
        last = query.get("last_etag", "")
        deadline = time.monotonic() + min(float(query.get("timeout_sec") or 60), 60)
        with self.tpu._lock:
            while True:
                attributes = self.attributes()
                value: Any = attributes if not key else attributes.get(key)
                text = json.dumps(value, sort_keys=True) if not key else (value or "")
                etag = _etag(text if value is not None else "\0")
                left = deadline - time.monotonic()
                if not wait or (last and last != etag) or left <= 0:
                    break
                last = last or etag  # without last_etag: until the next change
                self.tpu._lock.wait(min(left, 0.5))
        if value is None:
            return 404, "", etag
        return 200, text, etag


def _etag(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class _MetadataHandler(BaseHTTPRequestHandler):
    metadata: MetadataServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        prefix = "/computeMetadata/v1/instance/attributes/"
        if self.headers.get("Metadata-Flavor") != "Google":
            self._send(403, "Missing Metadata-Flavor:Google header.", "")
        elif not url.path.startswith(prefix):
            self._send(404, "not found", "")
        else:
            key = unquote(url.path[len(prefix) :])
            if not key and query.get("recursive") != "true":
                status, text, etag = self.metadata.answer("", query)
                text = "\n".join(sorted(json.loads(text))) + "\n" if status == 200 else text
                self._send(status, text, etag)
            else:
                self._send(*self.metadata.answer(key, query))

    def _send(self, status: int, text: str, etag: str) -> None:
        body = text.encode()
        self.send_response(status)
        self.send_header("Metadata-Flavor", "Google")
        self.send_header("Content-Type", "application/json" if text.startswith("{") else "application/text")
        if etag:
            self.send_header("ETag", etag)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
