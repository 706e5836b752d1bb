"""The Slurm backend: slurmrestd's REST API with JWT authentication, Slurm 22.05 to 25.11.

slurmrestd serves its API in one or more data parsers (``v0.0.38`` in 22.05; ``v0.0.40``-``v0.0.42`` in
24.11; ``v0.0.43`` in 25.05, ``v0.0.44`` in 25.11). The backend reads ``/openapi/v3`` once and speaks the
newest one both know (``versions.py`` holds everything that differs between them; this module does not).
Reads (nodes, jobs) and job writes (submit, cancel) go through slurmrestd; so do node state changes where
slurmrestd offers ``POST node/{name}`` (24.11 and later). Slurm 22.05 has no such call, so there cordon,
drain and resume run ``scontrol update`` with the same JWT (``SLURM_JWT``): the host needs an ``scontrol``
of the cluster's Slurm version and a ``slurm.conf`` naming the controller (``options["slurm_conf"]``), but
no munge key. Requeueing a drained node's jobs (``scontrol requeue``) and reading the network topology
(``scontrol show topology``) have no REST call in any version and always use ``scontrol``.

- ``endpoint``: slurmrestd's base URL, e.g. ``http://127.0.0.1:17080``.
- ``credentials``: ``user`` (sent as ``X-SLURM-USER-NAME``) and ``token`` (a Slurm JWT, e.g. from
  ``scontrol token username=...``).
- ``options``: ``partition`` (used when a job names no queue), ``workdir`` (jobs' working directory,
  default ``/tmp``), ``slurm_conf`` and ``scontrol`` (for node updates, requeues and the topology),
  ``topology`` (``scontrol``: read the cluster's topology/tree or topology/block into each node's
  domains; ``none``: report none; ``auto``, the default: ``scontrol`` where ``slurm_conf`` or ``scontrol``
  is set), ``gpu_models`` (GRES type to model name, e.g.
  ``{"h100": "H100-SXM-80GB"}``; the GRES type itself otherwise), ``accounts`` (a team's slug, or
  ``team/project``, to the Slurm account its jobs are charged to) and ``default_account``, ``qos`` (a
  tier's name to a Slurm QOS) and ``spot_qos`` (the QOS of spot jobs), ``container_runtime`` (``pyxis``
  or ``apptainer``: how a job with an image runs; see ``script.py``), ``apptainer`` (the apptainer
  program, default ``apptainer``) and ``api_version`` (a data parser to speak instead of negotiating),
  ``log_dir`` and ``log_mount`` (below); for interactive sessions (``session.py``) ``session_setup`` (the
  shell line that puts ``jupyter`` on PATH), ``session_dir`` (the shared directory a session without a
  checkpoint directory works in) and ``session_url`` (how browsers reach a node's port).

**Output.** With ``log_dir`` set (a directory of the cluster's shared filesystem, as the nodes see it), every
job's standard output and standard error go to ``<log_dir>/qm-<Slurm job id>.out`` (``standard_output`` and
``standard_error``, both to one file as Slurm's own default does, so lines keep the order they were written
in; a Ray job's heterogeneous components alike, and the batch script on the head's node holds the
entrypoint's output). ``logs`` reads that file page by page from the same directory as mounted on the
portal's machine: ``log_mount``, else ``log_dir`` itself. Slurm keeps one such file per job, not one per
worker (every ``srun`` task writes into it). Without ``log_dir`` jobs write where Slurm's default puts them
(``slurm-<id>.out`` in ``workdir``) and ``logs`` has nothing it can read.

Failures (docs/backends.md). ``submit`` raises ``InvalidJob`` when Slurm refuses the job itself (no such
partition or node, a configuration no node or partition offers, a bad feature, account or QOS) and when the
job cannot be expressed (nothing to run, an image without a container runtime); a Slurm error it does not
know is a plain ``BackendError``, which dispatch retries until its deadline. ``status`` names why a job
ended (``Failure``: exit code, OOM, time limit, node failure, preemption) and why a pending one will not
start (a pending reason Slurm will not clear by itself is ``Failure.INVALID``).

**Elastic pools** (docs/backends.md, Slurm, "Elastic pools"). A pool's nodes are cloud nodes of slurm.conf
(``State=CLOUD``) with the feature ``qm-pool-<pool>``, under Slurm's power saving (``ResumeProgram``,
``SuspendProgram``). ``provision`` powers up as many of the pool's powered-down nodes as asked
(``State=POWER_UP``: Slurm runs its ResumeProgram, which creates the instance; the node joins when its slurmd
registers) and ``release`` powers nodes down (``State=POWER_DOWN``, once idle). A cloud node out of service is
not in the inventory; one in service carries the label ``qm/elastic-pool``. On 22.05 the powered-down nodes are
listed only with ``PrivateData=cloud``.

Jobs are named ``qm-<JobSpec.id>``: that name is the idempotency key ``submit`` looks for. Slurm forgets a
finished job after ``MinJobAge`` (300 s by default), so a resubmission after that starts a new job.

Size: one backend, one API: slurmrestd's version negotiation, node and job reads, the job properties a request
becomes, scontrol for what the REST API cannot do, and Slurm's own error words; the request-building
(``_job_properties``, ``invalid_options``) would split out first.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import os
import subprocess
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import requests

from clusters.backends.base import (
    ELASTIC_POOL,
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
from clusters.backends.logpages import read_page, text
from clusters.backends.slurm import ray, session, versions
from clusters.backends.slurm.parse import expand_hostlist, failure, gpu_gres, job_state, topology
from clusters.backends.slurm.script import batch_script
from common import outbound

JOB_NAME_PREFIX = "qm-"
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"

# Node states and flags (as slurmrestd v0.0.38 spells them; versions.node words newer parsers' answers so)
# that make a node not ready or not schedulable.
NOT_READY_STATES = frozenset({"down", "unknown", "future", "error"})
NOT_READY_FLAGS = frozenset({"NOT_RESPONDING", "POWERED_DOWN", "POWERING_UP"})
UNSCHEDULABLE_FLAGS = frozenset({"DRAIN", "FAIL"})
#: A cloud node (State=CLOUD) with one of these flags is out of service: powered down, on its way up, asked to
#: power down or on its way there. It is no capacity, so the inventory leaves it out (docstring: Elastic pools).
POWER_FLAGS = frozenset({"POWERED_DOWN", "POWERING_UP", "POWER_DOWN", "POWERING_DOWN"})
#: The node feature that puts a node in an elastic pool of Quartermaster's: ``qm-pool-<pool>``.
POOL_FEATURE = "qm-pool-"

# Slurm error numbers (slurm_errno.h) that say more than "the cluster refused".
ESLURM_ACCESS_DENIED = 2002
ESLURM_USER_ID_MISSING = 2010
ESLURM_INVALID_JOB_ID = 2017
ESLURM_INVALID_NODE_NAME = 2018
ESLURM_ALREADY_DONE = 2021
#: Errors of a submission that are about the job itself: submitting it again here will not help.
JOB_REFUSALS = {
    2000: "ESLURM_INVALID_PARTITION_NAME",
    2004: "ESLURM_REQUESTED_NODES_NOT_IN_PARTITION",
    2005: "ESLURM_TOO_MANY_REQUESTED_CPUS",
    2006: "ESLURM_INVALID_NODE_COUNT",
    2014: "ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE",
    2015: "ESLURM_REQUESTED_PART_CONFIG_UNAVAILABLE",
    2018: "ESLURM_INVALID_NODE_NAME",
    2029: "ESLURM_INVALID_FEATURE",
    2045: "ESLURM_INVALID_ACCOUNT",
    2051: "ESLURM_INVALID_TIME_LIMIT",
    2066: "ESLURM_INVALID_QOS",
}
#: The same refusals in slurm_strerror's words, for errors whose number a slurmrestd version does not give.
JOB_REFUSAL_WORDS = (
    "Invalid partition name",
    "Invalid account",
    "Invalid qos specification",
    "Invalid feature",
    "Invalid node name",
    "Invalid generic resource",
    "Requested node configuration is not available",
    "Requested partition configuration not available",
    "Invalid time limit",
)
SLURM_PROTOCOL_AUTHENTICATION_ERROR = 1007  # 24.11: slurmctld rejected the JWT
SLURM_COMMUNICATIONS_ERRORS = range(1000, 1100)
SLURM_AUTH_ERRORS = range(6000, 6100)

# Slurm 22.05 reports a JWT that slurmctld rejects (wrong key, unknown user) and a controller that does not
# answer alike: HTTP 500 with error -1, "Unspecified error". A rejection comes back at once; a dead
# controller only after the client's connection retries (about 9 s in the lab). The time tells them apart.
REJECTION_SECONDS = 2.0

#: How long a negotiated data parser is reused by later backends of the same endpoint (a process-wide
#: cache: a backend lives for one sync or one dispatch, and ``/openapi/v3`` is 200-700 kB).
NEGOTIATED_SECONDS = 300.0
_negotiated: dict[str, tuple[float, str, bool]] = {}

T = TypeVar("T")


class SlurmBackend(Backend):
    kind = "slurm"

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
        super().__init__(endpoint, credentials, options, dry_run=dry_run, timeout=timeout, destinations=destinations)
        self._root = endpoint.rstrip("/")
        # Redirects are refused there, so the token headers never go anywhere but the endpoint.
        self._session = self.destinations.session()
        self._api: tuple[str, bool] | None = None  # (data parser, node updates over REST), once negotiated

    # ----------------------------------------------------------------------------------------- reads

    def inventory(self) -> Inventory:
        domains = self._topology()
        nodes = tuple(self._node_info(raw, domains) for raw in self._nodes() if _in_service(raw))
        models = sorted({node.accelerator for node in nodes if node.accelerator})
        return Inventory(nodes=nodes, accelerators=tuple(AcceleratorInfo(model=model) for model in models))

    def status(self, backend_id: str) -> JobStatus:
        raw = self._job(backend_id)
        state_text = _field(raw, "job_state", str, f"job {backend_id}")
        state = job_state(state_text)
        reason = raw.get("state_reason")
        reason = reason if isinstance(reason, str) and reason not in ("", "None") else ""
        parts = [state_text]
        if reason:
            parts.append(f"reason {reason}")
        exit_code = raw.get("exit_code")
        code: int | None = None
        if state in (JobState.SUCCEEDED, JobState.FAILED) and isinstance(exit_code, int):
            # a wait status: the exit code in the high byte, the signal that killed it in the low bits
            code, signal = exit_code >> 8, exit_code & 0x7F
            parts.append(f"exit code {code}" + (f" signal {signal}" if signal else ""))
            code = 128 + signal if signal else code
        nodes_text = raw.get("nodes")
        try:
            nodes = expand_hostlist(nodes_text) if isinstance(nodes_text, str) else ()
        except ValueError as exc:
            raise BadResponse(f"slurmrestd gave job {backend_id} an unreadable node list: {exc}") from exc
        why = failure(state_text, reason, code)
        return JobStatus(
            backend_id=backend_id,
            state=state,
            message=", ".join(parts),
            nodes=nodes,
            reason=why,
            exit_code=code if why == Failure.EXIT_CODE or (why and code) else None,
            dashboard_url=ray.dashboard_url(self.options, raw, nodes) if state is JobState.RUNNING else "",
        )

    def health(self) -> tuple[HealthSignal, ...]:
        """One ``ready`` signal per node: failing when Slurm has it down or not responding.

        A drain is a decision, not a symptom, so it never fails a check (a failing check would make the
        health policy drain the node again and never resume it); the passing signal of a drained node
        says who drained it and why. Inventory reports the same as ``schedulable`` and labels.
        """
        now = datetime.now(UTC)
        signals: list[HealthSignal] = []
        for raw in filter(_in_service, self._nodes()):
            node = self._node_info(raw)
            state = node.labels.get("state", "")
            flags = node.labels.get("state_flags", "")
            reason = node.labels.get("reason", "")
            if not node.ready:
                message = state + (f" ({flags})" if flags else "") + (f": {reason}" if reason else "")
            elif not node.schedulable:
                by = raw.get("reason_set_by_user")
                message = f"drained{f' by {by}' if isinstance(by, str) and by else ''}: {reason or 'no reason'}"
            else:
                message = ""
            signals.append(HealthSignal(node.name, "ready", node.ready, message, now))
        return tuple(signals)

    # ---------------------------------------------------------------------------------------- writes

    def submit(self, spec: JobSpec) -> str | DryRun:
        script, props = batch_script(spec, self.options), self._job_properties(spec)
        body = ray.submit_body(self.api_version, script, spec, props)  # a plain job's is versions.submit_body's
        existing = self._find_job(spec.id)
        if self.dry_run:
            detail: dict[str, Any] = dict(body)
            if existing is not None:
                detail["existing_job"] = existing
            return DryRun("submit", spec.id, detail)
        if existing is not None:
            return existing
        what = f"the nodes of job {spec.id} ({','.join(dict.fromkeys(spec.nodes))})" if spec.nodes else f"job {spec.id}"
        data = self._call("POST", "job/submit", body, what=what, submitting=True)
        job_id = data.get("job_id")
        if not isinstance(job_id, int) or isinstance(job_id, bool):
            raise BadResponse(f"slurmrestd accepted job {spec.id} but answered no job id (job_id={job_id!r})")
        return str(job_id)

    def find(self, job_id: str) -> str | None:
        return self._find_job(job_id)

    def logs(
        self, backend_id: str, worker: str = "", *, offset: str = "", tail: int | None = None, limit: int = LOG_LIMIT
    ) -> LogChunk:
        """A page of the job's output file (the module docstring's **Output**): the whole job's, as Slurm keeps
        one per job; ``head`` is a Ray job's, whose head runs the batch script."""
        job_id = _job_id(backend_id)
        mount = str(self.options.get("log_mount") or self.options.get("log_dir") or "")
        if not mount:
            raise LogsUnavailable(
                "this Slurm cluster has no log_dir option, so its jobs' output stays where Slurm's default puts it "
                "(slurm-<job id>.out in the job's working directory, on the cluster); an admin can set log_dir to a "
                "directory of the shared filesystem the portal reads (log_mount where it is mounted elsewhere)"
            )
        known = True  # whether slurmrestd said what it knows of the job
        try:
            raw: Mapping[str, Any] | None = self._job(backend_id)
        except NotFound:
            raw = None  # Slurm forgets a job MinJobAge after its end; its file stays
        except Unreachable:
            raw, known = None, False  # the file can still be read; whether the job ended is not known
        ray_job = raw is not None and str(raw.get("comment") or "").startswith(ray.COMMENT)
        if worker not in ("", "head") or (worker == "head" and raw is not None and not ray_job):
            raise NotFound(
                f"Slurm keeps one output file for job {backend_id}, with every worker's lines in it: ask for the "
                f"job's output (no worker){', or head' if ray_job else ''}, not worker {worker!r}"
            )
        path = Path(mount) / f"{JOB_NAME_PREFIX}{job_id}.out"
        if raw is not None:
            ended = job_state(str(raw.get("job_state", ""))) not in (JobState.PENDING, JobState.RUNNING)
        else:
            ended = known  # a job Slurm no longer knows has ended
        try:
            with path.open("rb") as file:
                size = os.fstat(file.fileno()).st_size
                data, _start, end = read_page(file, size, offset=offset, tail=tail, limit=limit)
        except FileNotFoundError:
            if not known:
                raise Unreachable(
                    f"there is no output file {path}, and slurmrestd did not answer about job {backend_id}"
                ) from None
            return self._no_output_file(backend_id, raw, path, worker)
        except OSError as exc:
            raise BackendError(f"cannot read job {backend_id}'s output {path}: {exc.strerror or exc}") from exc
        return LogChunk(text(data), str(end), end < size, ended and end >= size, worker, str(path))

    def _no_output_file(self, backend_id: str, raw: Mapping[str, Any] | None, path: Path, worker: str) -> LogChunk:
        """The answer for a job whose output file is not there (yet): an empty page while it waits to start or
        has just started (slurmd creates the file as the batch step starts, a moment after Slurm says RUNNING),
        else why there is none."""
        if raw is None:
            raise NotFound(f"Slurm does not know job {backend_id}, and there is no output file {path}")
        written = raw.get("standard_output")
        log_dir = str(self.options.get("log_dir") or "")
        ours = not isinstance(written, str) or not written or written.startswith(log_dir.rstrip("/") + "/")
        state = job_state(str(raw.get("job_state", "")))
        if state is JobState.PENDING or (state is JobState.RUNNING and ours):
            return LogChunk("", "0", False, False, worker, str(path))
        elsewhere = f" (Slurm says it writes to {written})" if isinstance(written, str) and written else ""
        raise LogsUnavailable(
            f"job {backend_id} has no output file {path}{elsewhere}: it was submitted before the cluster's log_dir "
            "was set, or the directory is not the one the nodes write to (check log_dir and log_mount)"
        )

    def cancel(self, backend_id: str) -> DryRun | None:
        if self.dry_run:
            self._job(backend_id)  # NotFound for a job Slurm does not know
            return DryRun("cancel", backend_id)
        self._call("DELETE", f"job/{_job_id(backend_id)}", what=f"job {backend_id}", ok_errors={ESLURM_ALREADY_DONE})
        return None

    def signal(self, backend_id: str, grace_seconds: int) -> DryRun | None:
        """SIGTERM to the job's processes (``DELETE job/{id}?signal=SIGTERM``); the job decides when to exit."""
        if self.dry_run:
            self._job(backend_id)
            return DryRun("signal", backend_id, {"signal": "SIGTERM", "grace_seconds": grace_seconds})
        path = f"job/{_job_id(backend_id)}?signal=SIGTERM"
        self._call("DELETE", path, what=f"job {backend_id}", ok_errors={ESLURM_ALREADY_DONE})
        return None

    def cordon(self, node: str, reason: str) -> DryRun | None:
        """Slurm's DRAIN state: no new jobs, running ones finish."""
        self._require_node(node)
        return self._update_node(node, "cordon", reason or "cordoned by Quartermaster")

    def drain(self, node: str, reason: str) -> DryRun | None:
        """DRAIN, then requeue the jobs running on the node, so it empties now instead of when they end.

        Slurm requeues finished batch jobs too: a job that ends between the listing and the requeue (a few
        milliseconds) runs again. A job submitted with requeue disabled makes this ``Refused``, node drained.
        """
        self._require_node(node)
        running = self._jobs_on(node)
        done = self._update_node(node, "drain", reason or "drained by Quartermaster", requeue=running)
        if done is None and running:
            try:
                self._scontrol("requeue", ",".join(running), what=f"the jobs on {node}")
            except Refused as exc:
                jobs = ", ".join(running)
                raise Refused(f"{node} is drained, but Slurm did not requeue its jobs {jobs}: {exc}") from exc
        return done

    def resume(self, node: str) -> DryRun | None:
        self._require_node(node)
        return self._update_node(node, "resume")

    # ------------------------------------------------------------------------------- elastic pools

    def provision(
        self, pool: str, count: int, capacity_type: str, lead_time: int, accelerators: int = 0, flavor: str = ""
    ) -> Provisioned:
        """Power up ``count`` of the pool's powered-down cloud nodes (fewer if it has fewer left; ``Refused`` when
        it has none). Up ``lead_time`` from now: the pool's own estimate of its ResumeProgram's time."""
        if count < 1:
            raise Refused("ask for one node or more")
        members = [raw for raw in self._nodes() if _pool(raw) == pool]
        if not members:
            raise Refused(f"Slurm has no node with the feature {POOL_FEATURE}{pool} (the pool's State=CLOUD nodes)")
        asleep = sorted(str(raw["name"]) for raw in members if _powered_down(raw))
        if not asleep:
            raise Refused(f"every node of pool {pool} ({len(members)}) is in service, on its way, or down")
        if self.dry_run:
            raise Refused("a dry run powers up no node")
        woken: list[str] = []
        for name in asleep[:count]:
            try:
                self._update_node(name, "power_up")
            except BackendError:
                if not woken:
                    raise
                break  # those asked for so far are on their way: the ask is for them
            woken.append(name)
        return Provisioned(tuple(woken), time.time() + lead_time)

    def release(self, nodes: Sequence[str]) -> None:
        """Power ``nodes`` down (Slurm runs its SuspendProgram once each is idle, which deletes the instance)."""
        if self.dry_run:
            return
        for name in nodes:
            self._update_node(name, "power_down")

    # ------------------------------------------------------------------------------- the API version

    @property
    def api_version(self) -> str:
        """The data parser spoken with this slurmrestd (negotiated once; ``options["api_version"]`` wins)."""
        return self._negotiate()[0]

    @property
    def rest_node_updates(self) -> bool:
        """Whether node states change over REST (``POST node/{name}``, 24.11 and later) or through scontrol."""
        return self._negotiate()[1]

    def _negotiate(self) -> tuple[str, bool]:
        if self._api is not None:
            return self._api
        forced = str(self.options.get("api_version") or "")
        if forced:
            if forced not in versions.SUPPORTED:
                raise BackendError(
                    f"options['api_version'] is {forced!r}; this backend speaks {', '.join(versions.SUPPORTED)}"
                )
            self._api = (forced, forced != versions.LEGACY)
            return self._api
        cached = _negotiated.get(self._root)
        if cached is not None and time.monotonic() - cached[0] < NEGOTIATED_SECONDS:
            self._api = cached[1:]
            return self._api
        user, token = self._credentials()
        url = f"{self._root}/openapi/v3"
        headers = {"X-SLURM-USER-NAME": user, "X-SLURM-USER-TOKEN": token}
        try:
            response = self._session.get(url, headers=headers, timeout=self.timeout)
        except requests.RequestException as exc:
            raise self._unreachable(exc, "GET /openapi/v3") from exc
        if response.status_code in (401, 403):
            raise AuthenticationFailed(
                f"slurmrestd at {self.endpoint} refused the credentials of user {user!r} (HTTP "
                f"{response.status_code}): check the token (scontrol token username=...) and that slurmrestd "
                "runs with rest_auth/jwt"
            )
        try:
            document = response.json()
        except ValueError:
            document = None
        if not isinstance(document, dict):
            what = "a body that is not JSON" if document is None else f"{type(document).__name__}, not a JSON object"
            raise BadResponse(
                f"slurmrestd answered GET /openapi/v3 (what it serves) with HTTP {response.status_code} and {what} "
                f"(is {self.endpoint} slurmrestd?)",
                detail=response.text,
            )
        if response.status_code != 200:
            raise BadResponse(
                f"slurmrestd answered GET /openapi/v3 (what it serves) with HTTP {response.status_code} (is "
                f"{self.endpoint} slurmrestd?)",
                detail=response.text,
            )
        served = versions.offered(document)
        chosen = versions.choose(served)
        if chosen is None:
            raise BadResponse(
                f"slurmrestd at {self.endpoint} serves the data parsers {', '.join(served) or 'none'}, and this "
                f"backend speaks {', '.join(versions.SUPPORTED)}: load one of those (slurmrestd -d / -s)"
            )
        self._api = (chosen, versions.updates_nodes(document, chosen))
        _negotiated[self._root] = (time.monotonic(), *self._api)
        return self._api

    # ------------------------------------------------------------------------------------- internals

    def _nodes(self) -> list[Mapping[str, Any]]:
        data = self._call("GET", "nodes")
        version = self.api_version
        raws = _field(data, "nodes", list, "GET nodes")
        return [versions.node(version, _mapping(raw, "GET nodes: a node")) for raw in raws]

    def _topology(self) -> Mapping[str, Mapping[str, str]]:
        """Each node's domains, widest level first, from ``scontrol show topology`` (no REST call says)."""
        how = str(self.options.get("topology") or "auto")
        if how == "auto":  # where the operators gave this cluster an scontrol, it is used
            how = "scontrol" if self.options.get("slurm_conf") or self.options.get("scontrol") else "none"
        if how == "none":
            return {}
        if how != "scontrol":
            raise BackendError(f"options['topology'] is {how!r}: it must be 'auto' (the default), 'scontrol' or 'none'")
        text = self._scontrol("show", "topology", what="the topology")
        try:
            return topology(text)[1]
        except ValueError as exc:
            raise BadResponse(f"scontrol show topology gave an unreadable answer: {exc}", detail=text) from exc

    def _node_info(self, raw: Mapping[str, Any], domains: Mapping[str, Mapping[str, str]] | None = None) -> NodeInfo:
        name = _field(raw, "name", str, "a node")
        where = f"node {name}"
        state = _field(raw, "state", str, where).lower()
        flags = [flag for flag in _field(raw, "state_flags", list, where, []) if isinstance(flag, str)]
        cpus = _field(raw, "cpus", int, where)
        alloc_cpus = _field(raw, "alloc_cpus", int, where, 0)
        memory = _field(raw, "real_memory", int, where)
        alloc_memory = _field(raw, "alloc_memory", int, where, 0)
        gpus = gpu_gres(_field(raw, "gres", str, where, ""))
        used = sum(count for _, count in gpu_gres(_field(raw, "gres_used", str, where, "")))
        total = sum(count for _, count in gpus)
        gres_type = next((kind for kind, _ in gpus if kind), "")
        models: Mapping[str, str] = self.options.get("gpu_models") or {}
        accelerator = models.get(gres_type, gres_type) if total else ""
        partitions = [part for part in _field(raw, "partitions", list, where, []) if isinstance(part, str)]
        reason = _field(raw, "reason", str, where, "")
        labels = {"state": state, "partition": ",".join(partitions)}
        if flags:
            labels["state_flags"] = ",".join(flags)
        pool = _pool(raw)
        if pool:
            labels[ELASTIC_POOL] = pool
        ready = state not in NOT_READY_STATES and not NOT_READY_FLAGS.intersection(flags)
        schedulable = not UNSCHEDULABLE_FLAGS.intersection(flags)
        if reason and not (ready and schedulable):  # 24.11 keeps the reason of a drain after the resume
            labels["reason"] = reason
        return NodeInfo(
            name=name,
            accelerator=accelerator,
            accelerators=total,
            # Slurm reserves nothing of a node from jobs unless told to (CoreSpecCount, MemSpecLimit, which
            # v0.0.38 does not report): all of it is allocatable, and jobs hold the "used" part.
            accelerators_allocatable=total,
            cpu=cpus * 1000,
            cpu_allocatable=cpus * 1000,
            memory=memory,
            memory_allocatable=memory,
            accelerators_used=min(used, total),
            cpu_used=min(alloc_cpus, cpus) * 1000,
            memory_used=min(alloc_memory, memory),
            ready=ready,
            schedulable=schedulable,
            labels=labels,
            topology=dict((domains or {}).get(name, {})),
            # NodeAddr and NodeHostname (each the node's name when slurm.conf leaves it out)
            addresses=tuple(
                dict.fromkeys(a for a in (_field(raw, k, str, where, "") for k in ("address", "hostname")) if a)
            ),
        )

    def _job(self, backend_id: str) -> Mapping[str, Any]:
        what = f"job {backend_id}"
        data = self._call("GET", f"job/{_job_id(backend_id)}", what=what)
        jobs = [versions.job(self.api_version, _mapping(raw, what)) for raw in _field(data, "jobs", list, what)]
        if not jobs:
            raise NotFound(f"Slurm does not know {what}")
        # an array or heterogeneous job answers several records; the one asked for carries the id
        return next((job for job in jobs if str(job.get("job_id")) == backend_id), jobs[0])

    def _jobs(self) -> list[Mapping[str, Any]]:
        data = self._call("GET", "jobs")
        version = self.api_version
        raws = _field(data, "jobs", list, "GET jobs")
        return [versions.job(version, _mapping(raw, "GET jobs: a job")) for raw in raws]

    def _find_job(self, qm_id: str) -> str | None:
        """The Slurm id of the job submitted for ``qm_id``, if Slurm still knows it."""
        name = JOB_NAME_PREFIX + qm_id
        found: list[int] = []
        for job in self._jobs():
            if job.get("name") != name:
                continue
            job_id = _field(job, "job_id", int, f"job {name}")
            # a submission Slurm rejected still leaves a FAILED record that never got nodes: not a job
            if job.get("job_state") == "FAILED" and not job.get("nodes"):
                continue
            found.append(job_id)
        return str(min(found)) if found else None

    def _jobs_on(self, node: str) -> list[str]:
        on_node: list[str] = []
        for job in self._jobs():
            if job_state(str(job.get("job_state", ""))) is not JobState.RUNNING:
                continue
            nodes = job.get("nodes")
            try:
                if isinstance(nodes, str) and node in expand_hostlist(nodes):
                    on_node.append(str(_field(job, "job_id", int, "a running job")))
            except ValueError as exc:
                raise BadResponse(f"slurmrestd gave job {job.get('job_id')} an unreadable node list: {exc}") from exc
        return on_node

    def _require_node(self, node: str) -> None:
        if not node or any(char in node for char in ", \n\t[]="):
            raise NotFound(f"{node!r} is not a Slurm node name")
        # 24.11 answers an unknown node with error 0 ("No error: Failure to query node") and no nodes
        data = self._call("GET", f"node/{node}", what=f"node {node}", ok_errors={0})
        if not _field(data, "nodes", list, f"node {node}", []):
            raise NotFound(f"Slurm does not know node {node}")

    def _update_node(self, node: str, action: str, reason: str = "", requeue: list[str] | None = None) -> DryRun | None:
        """DRAIN (with ``reason``), RESUME, POWER_UP or POWER_DOWN ``node``: over REST where slurmrestd offers it,
        else scontrol."""
        detail: dict[str, Any] = {}
        if self.rest_node_updates:
            detail["rest"] = versions.node_update(action, reason)
        else:
            state = f"State={versions.POWER.get(action) or ('RESUME' if action == 'resume' else 'DRAIN')}"
            detail["scontrol"] = ["update", f"NodeName={node}", state, *([f"Reason={reason}"] if reason else [])]
        if self.dry_run:
            if requeue:
                detail["requeue"] = requeue
            return DryRun(action, node, detail)
        try:
            if "rest" in detail:
                self._call("POST", f"node/{node}", detail["rest"], what=f"node {node}")
            else:
                self._scontrol(*detail["scontrol"], what=f"node {node}")
        except Refused as exc:
            # RESUME on a node that is neither drained nor down: it already is what resume asks for
            if action == "resume" and "Invalid node state specified" in str(exc):
                return None
            raise
        return None

    def _job_properties(self, spec: JobSpec) -> dict[str, Any]:
        """slurmrestd's job description for ``spec`` (its keys are sbatch's long options)."""
        if not spec.id or any(char.isspace() for char in spec.id):
            raise InvalidJob(f"job id {spec.id!r} must be non-empty and without spaces (it names the Slurm job)")
        if spec.workers < 1:
            raise InvalidJob(f"job {spec.id} has {spec.workers} workers; it needs at least one")
        if spec.nodes and len(spec.nodes) != spec.workers:
            raise InvalidJob(f"job {spec.id} names {len(spec.nodes)} nodes for {spec.workers} workers")
        if min(spec.accelerators_per_worker, spec.cpu_per_worker, spec.memory_per_worker, spec.time_limit) < 0:
            raise InvalidJob(f"job {spec.id} asks for a negative amount of something")
        environment = {"PATH": DEFAULT_PATH, **spec.env, "QM_JOB_ID": spec.id}
        if spec.image:
            environment["QM_IMAGE"] = spec.image
        environment.update(session.environment(spec))  # an interactive session's secret, for its app
        cpus_per_task = max(1, math.ceil(spec.cpu_per_worker / 1000))
        props: dict[str, Any] = {
            "name": JOB_NAME_PREFIX + spec.id,
            "comment": f"Quartermaster job {spec.id}: {spec.name}",
            "environment": environment,
            "current_working_directory": str(self.options.get("workdir") or "/tmp"),  # noqa: S108
            "tasks": spec.workers,
            "cpus_per_task": cpus_per_task,
        }
        log_dir = str(self.options.get("log_dir") or "")
        if log_dir:  # both streams to one file, in the order written (docstring: Output)
            props["standard_output"] = props["standard_error"] = f"{log_dir.rstrip('/')}/{JOB_NAME_PREFIX}%j.out"
        partition = spec.queue or self.options.get("partition")
        if partition:
            props["partition"] = partition
        if spec.nodes:
            per_node = Counter(spec.nodes)
            props["nodelist"] = ",".join(per_node)
            props["nodes"] = [len(per_node), len(per_node)]
            if len(set(per_node.values())) == 1:  # the same number of workers on every node
                props["tasks_per_node"] = spec.workers // len(per_node)
        if spec.accelerators_per_worker:
            props["gpus_per_task"] = str(spec.accelerators_per_worker)
        if spec.memory_per_worker:
            props["memory_per_cpu"] = math.ceil(spec.memory_per_worker / cpus_per_task)
        if spec.time_limit:
            props["time_limit"] = math.ceil(spec.time_limit / 60)
        account = self._account(spec)
        if account:
            props["account"] = account
        qos = self._qos(spec)
        if qos:
            props["qos"] = qos
        return props

    def _account(self, spec: JobSpec) -> str:
        """The Slurm account of ``spec``: ``accounts["team/project"]``, else ``accounts["team"]``, else
        ``default_account``; "" (Slurm's default for the user) when none is configured."""
        accounts: Mapping[str, str] = self.options.get("accounts") or {}
        if spec.team and spec.project and f"{spec.team}/{spec.project}" in accounts:
            return str(accounts[f"{spec.team}/{spec.project}"])
        if spec.team and spec.team in accounts:
            return str(accounts[spec.team])
        return str(self.options.get("default_account") or "")

    def _qos(self, spec: JobSpec) -> str:
        """The Slurm QOS of ``spec``: ``spot_qos`` for a spot job, else ``qos[tier]``; "" for the default."""
        if spec.spot and self.options.get("spot_qos"):
            return str(self.options["spot_qos"])
        tiers: Mapping[str, str] = self.options.get("qos") or {}
        return str(tiers.get(spec.tier, "")) if spec.tier else ""

    # ------------------------------------------------------------------------------- the two channels

    def _call(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        what: str = "",
        ok_errors: frozenset[int] | set[int] = frozenset(),
        submitting: bool = False,
    ) -> Mapping[str, Any]:
        """One slurmrestd request; its JSON object, or the matching ``BackendError``. ``submitting``: a job
        submission, whose refusals are ``InvalidJob`` (``_refusal``)."""
        user, token = self._credentials()
        url = f"{self._root}/slurm/{self.api_version}/{path}"
        call = f"{method} {path}"
        headers = {"X-SLURM-USER-NAME": user, "X-SLURM-USER-TOKEN": token}
        started = time.monotonic()
        try:
            response = self._session.request(method, url, json=body, headers=headers, timeout=self.timeout)
        except requests.RequestException as exc:
            raise self._unreachable(exc, call) from exc
        elapsed = time.monotonic() - started
        code = response.status_code
        if code in (401, 403):
            raise AuthenticationFailed(
                f"slurmrestd at {self.endpoint} refused the credentials of user {user!r} (HTTP {code}): "
                "check the token (scontrol token username=...) and that slurmrestd runs with rest_auth/jwt"
            )
        try:
            data = response.json()
        except ValueError:
            if code == 404:
                _negotiated.pop(self._root, None)  # the server may have changed: the next backend asks again
                raise BadResponse(
                    f"{url} is not served (HTTP 404): is {self.endpoint} slurmrestd, and still serving "
                    f"data parser {self.api_version}?",
                    detail=response.text,
                ) from None
            raise BadResponse(
                f"slurmrestd answered {call} with HTTP {code} and a body that is not JSON (is {self.endpoint} "
                "slurmrestd?)",
                detail=response.text,
            ) from None
        if not isinstance(data, dict):
            raise BadResponse(f"slurmrestd answered {call} with {type(data).__name__} instead of a JSON object")
        errors = versions.errors(self.api_version, data)
        if not isinstance(errors, list):
            raise BadResponse(f"slurmrestd answered {call} with 'errors' that is not a list")
        numbers = [_error_number(error) for error in errors]
        if errors and not set(numbers) <= set(ok_errors):
            refusal = self._refusal(data, what, errors, numbers) if submitting else None
            if refusal is not None:
                raise refusal
            error = self._error(call, what, errors, numbers, elapsed)
            if submitting and type(error) is Refused:
                # an error Slurm gave that says nothing known about the job: retried, never taken as final
                error = BackendError(str(error).replace("Slurm refused", "Slurm failed", 1))
            raise error
        if code >= 400 and not errors:
            raise BadResponse(f"slurmrestd answered {call} with HTTP {code} and no error", detail=response.text)
        return data

    def _refusal(self, data: Mapping[str, Any], what: str, errors: list[Any], numbers: list[int]) -> InvalidJob | None:
        """``InvalidJob`` when Slurm refused a submission for something about the job. Slurm may create the job
        and still answer such an error (a configuration the partition does not allow "now": the job would
        pend for ever, reason PartitionConfig): that job is cancelled, so nothing is left behind."""
        text = "; ".join(_error_text(error) for error in errors)
        if not set(numbers) & set(JOB_REFUSALS) and not any(
            words.lower() in text.lower() for words in JOB_REFUSAL_WORDS
        ):
            return None
        job_id = data.get("job_id")
        if isinstance(job_id, int) and not isinstance(job_id, bool) and job_id > 0:
            try:
                self._call("DELETE", f"job/{job_id}", what=f"job {job_id}", ok_errors={ESLURM_ALREADY_DONE})
            except BackendError as exc:
                text += f" (Slurm created it anyway as job {job_id}, and cancelling that failed: {exc})"
        return InvalidJob(f"Slurm refused {what}: {text}")

    def _unreachable(self, exc: requests.RequestException, call: str) -> BackendError:
        refused = not_allowed(exc, f"slurmrestd at {self.endpoint}")
        if refused is not None:
            return refused
        if isinstance(exc, requests.Timeout):
            return Unreachable(f"slurmrestd at {self.endpoint} did not answer {call} within {self.timeout:g} s")
        if isinstance(exc, requests.ConnectionError):
            return Unreachable(f"cannot connect to slurmrestd at {self.endpoint}: {_reason(exc)}")
        return Unreachable(f"cannot reach slurmrestd at {self.endpoint!r}: {exc}")

    def _error(self, call: str, what: str, errors: list[Any], numbers: list[int], elapsed: float) -> BackendError:
        text = "; ".join(_error_text(error) for error in errors)
        if ESLURM_INVALID_JOB_ID in numbers or ESLURM_INVALID_NODE_NAME in numbers:
            return NotFound(f"Slurm does not know {what or 'the job or node named'}: {text}")
        if ESLURM_ACCESS_DENIED in numbers or ESLURM_USER_ID_MISSING in numbers:
            return AuthenticationFailed(f"Slurm refused {call} for user {self.credentials.get('user')!r}: {text}")
        if SLURM_PROTOCOL_AUTHENTICATION_ERROR in numbers:
            return AuthenticationFailed(
                f"slurmctld rejected the token of user {self.credentials.get('user')!r} on {call} ({text}): is it "
                "signed with the cluster's JWT key, and for a user Slurm knows?"
            )
        if any(number in SLURM_AUTH_ERRORS for number in numbers):
            return AuthenticationFailed(f"Slurm rejected the credentials on {call}: {text}")
        if any(number in SLURM_COMMUNICATIONS_ERRORS for number in numbers):
            return Unreachable(f"slurmrestd at {self.endpoint} cannot reach slurmctld: {text}")
        if set(numbers) == {-1}:
            if elapsed < REJECTION_SECONDS:
                return AuthenticationFailed(
                    f"slurmctld rejected the token of user {self.credentials.get('user')!r} on {call} "
                    f"({text}): is it signed with the cluster's JWT key, and for a user Slurm knows?"
                )
            return Unreachable(f"slurmrestd at {self.endpoint} got no answer from slurmctld on {call}: {text}")
        return Refused(f"Slurm refused {call}: {text}")

    def _credentials(self) -> tuple[str, str]:
        user = self.credentials.get("user", "")
        token = self.credentials.get("token", "")
        if not user or not token:
            raise AuthenticationFailed("Slurm credentials need a 'user' and a 'token' (scontrol token username=...)")
        claims = _jwt_claims(token)
        expires = claims.get("exp")
        if isinstance(expires, int | float) and expires < time.time():
            when = datetime.fromtimestamp(expires, UTC).isoformat(timespec="seconds")
            raise AuthenticationFailed(f"the Slurm token of user {user!r} expired at {when}; issue a new one")
        return user, token

    def _scontrol(self, *args: str, what: str) -> str:
        """Run scontrol with the backend's JWT (node updates in 22.05, requeues, the topology); its output."""
        _, token = self._credentials()
        scontrol = str(self.options.get("scontrol") or "scontrol")
        env = {**os.environ, "SLURM_JWT": token}
        if self.options.get("slurm_conf"):
            env["SLURM_CONF"] = str(self.options["slurm_conf"])
        command = [scontrol, *args]
        try:
            done = subprocess.run(  # noqa: S603 (a fixed program; arguments are a list, never a shell line)
                command, capture_output=True, text=True, env=env, timeout=self.timeout, check=False
            )
        except FileNotFoundError as exc:
            raise BackendError(
                f"{scontrol} not found: Slurm 22.05 changes node states, and every version requeues jobs and "
                "reports its topology, only through scontrol, which must be installed where Quartermaster runs "
                "(options['scontrol'], options['slurm_conf'])"
            ) from exc
        except subprocess.TimeoutExpired as exc:
            raise Unreachable(f"scontrol {' '.join(args)} got no answer from slurmctld in {self.timeout:g} s") from exc
        if done.returncode == 0:
            return done.stdout
        text = (done.stderr or done.stdout).strip() or f"exit status {done.returncode}"
        if "Invalid node name" in text or "Invalid job id" in text:
            raise NotFound(f"Slurm does not know {what}: {text}")
        if "Unable to contact slurm controller" in text or "Connection refused" in text or "timed out" in text:
            raise Unreachable(f"scontrol cannot reach slurmctld: {text}")
        if "Zero Bytes were transmitted" in text or "Protocol authentication error" in text:
            raise AuthenticationFailed(f"slurmctld rejected the token on scontrol {args[0]}: {text}")
        if "Invalid user id" in text or "Access/permission denied" in text:
            raise AuthenticationFailed(f"Slurm refused scontrol {args[0]} for this token's user: {text}")
        raise Refused(f"scontrol {' '.join(args)} failed: {text}")


# ------------------------------------------------------------------------------------------- helpers


def _features(raw: Mapping[str, Any]) -> list[str]:
    """A node's features (``features``: a comma-separated string in v0.0.38's words)."""
    text = raw.get("features")
    return [f for f in text.split(",") if f] if isinstance(text, str) else []


def _pool(raw: Mapping[str, Any]) -> str:
    """The elastic pool a node is in (its feature ``qm-pool-<pool>``), "" for none."""
    return next((f.removeprefix(POOL_FEATURE) for f in _features(raw) if f.startswith(POOL_FEATURE)), "")


def _flags(raw: Mapping[str, Any]) -> set[str]:
    return {flag for flag in raw.get("state_flags") or () if isinstance(flag, str)}


def _in_service(raw: Mapping[str, Any]) -> bool:
    """Whether a node is capacity: every node but a cloud node powered down, or on its way up or down."""
    flags = _flags(raw)
    return "CLOUD" not in flags or not POWER_FLAGS.intersection(flags)


def _powered_down(raw: Mapping[str, Any]) -> bool:
    """A cloud node at rest that may be powered up: powered down, idle (not down after a failed resume), not
    drained, and not asked to power down again."""
    flags = _flags(raw)
    return (
        {"CLOUD", "POWERED_DOWN"} <= flags
        and not flags & (UNSCHEDULABLE_FLAGS | {"POWER_DOWN", "POWERING_DOWN", "POWERING_UP"})
        and str(raw.get("state", "")).lower() == "idle"
    )


def invalid_options(options: Mapping[str, Any]) -> str:
    """What is wrong with a Slurm cluster's options, in words ("" when nothing), for the admin forms."""
    for key, example in (
        ("gpu_models", '{"h100": "H100-SXM-80GB"}'),
        ("accounts", '{"physics": "phys", "physics/lhc": "phys-lhc"} (team, or team/project, to account)'),
        ("qos", '{"standard": "normal", "urgent": "high"} (tier to QOS)'),
    ):
        value = options.get(key, {})
        if not isinstance(value, dict) or not all(isinstance(v, str) and v for v in value.values()):
            noun = "GRES types to models" if key == "gpu_models" else "names to Slurm names"
            return f"{key} maps {noun}, e.g. {example}."
    for key in ("log_dir", "log_mount", "session_dir"):
        value = options.get(key, "")
        if not isinstance(value, str) or (value and not value.startswith("/")):
            return f"{key} is an absolute directory path, e.g. /shared/qm-logs."
    if options.get("session_url"):
        try:
            session.url_template(options)
        except InvalidJob as error:
            return f"{str(error)[0].upper()}{str(error)[1:]}, e.g. https://nodes.example.org/{{node}}/{{port}}/."
    for key in ("default_account", "spot_qos", "partition", "api_version"):
        if not isinstance(options.get(key, ""), str):
            return f"{key} is a name (a string)."
    version = options.get("api_version", "")
    if version and version not in versions.SUPPORTED:
        return f"api_version must be one of {', '.join(versions.SUPPORTED)} (or left out: it is negotiated)."
    if options.get("topology", "auto") not in ("auto", "scontrol", "none"):
        return "topology must be auto, scontrol or none."
    return ""


def _job_id(backend_id: str) -> str:
    if not backend_id.isdigit():
        raise NotFound(f"{backend_id!r} is not a Slurm job id (Slurm's ids are numbers)")
    return backend_id


def _field(obj: Mapping[str, Any], key: str, kind: type[T], where: str, default: T | None = None) -> T:
    """``obj[key]`` checked to be a ``kind``; a missing key is ``default``, or ``BadResponse`` without one."""
    value = obj.get(key)
    if value is None and default is not None:
        return default
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        shown = "missing" if value is None else f"a {type(value).__name__}"
        raise BadResponse(f"slurmrestd's answer for {where} has {key!r} {shown}, expected a {kind.__name__}")
    return value


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise BadResponse(f"slurmrestd's answer for {where} is a {type(value).__name__}, not an object")
    return value


def _error_number(error: Any) -> int:
    if isinstance(error, dict):
        # v0.0.38 names the number differently depending on which part of slurmrestd failed
        for key in ("error_number", "errno", "error_code"):
            if isinstance(error.get(key), int):
                return int(error[key])
    return -1


def _error_text(error: Any) -> str:
    if not isinstance(error, dict):
        return str(error)
    parts = [str(error[key]) for key in ("error", "description") if error.get(key)]
    return ": ".join(parts) or json.dumps(error)


def _reason(exc: requests.ConnectionError) -> str:
    text = str(exc)
    for known in ("Connection refused", "Name or service not known", "No route to host", "timed out"):
        if known in text:
            return known.lower()
    return text


def _jwt_claims(token: str) -> Mapping[str, Any]:
    """The token's claims, read without checking the signature (only Slurm holds the key)."""
    parts = token.split(".")
    if len(parts) != 3:
        raise AuthenticationFailed("the Slurm token is not a JWT (expected three dot-separated parts)")
    try:
        payload = base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4))
        claims = json.loads(payload)
    except (binascii.Error, ValueError) as exc:
        raise AuthenticationFailed("the Slurm token is not a JWT (its claims do not decode)") from exc
    if not isinstance(claims, dict):
        raise AuthenticationFailed("the Slurm token is not a JWT (its claims are not an object)")
    return claims


__all__ = ["InvalidJob", "SlurmBackend"]  # InvalidJob: the base contract's, importable here as before
