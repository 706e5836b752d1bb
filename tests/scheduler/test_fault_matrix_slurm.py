"""The fault-injection matrix on Slurm: every fault driven through the real loop (submit, cycle, dispatch,
follow, recover, sync) against each real Slurm lab, 22.05 and 24.11 (``tests/clusters/slurm_lab.py``); the
rows are the backend ``slurm-22.05`` and ``slurm-24.11``. And a job that asks for one topology domain (a
leaf switch on 22.05's tree, a block on 24.11) runs in one, from the engine's choice to Slurm's nodes.

The cluster ``slurm`` (the lab's four 8-GPU nodes) is preferred; the fleet's simulated ``west`` runs what
Slurm will not (``east`` is taken out of the way). Jobs are batch scripts (no image) that wait for a gate
file in the lab's work directory: the scenario opens the gate when the job is to finish, so real jobs run
exactly as long as the scenario wants. A partition is the cluster's endpoint pointed at a closed port for
its duration; a refusal is Slurm's own (an invalid partition). Cordon and drain are Slurm's DRAIN on a
lab node (scontrol on 22.05, ``POST node/{name}`` on 24.11), resumed at the end.

The Ray rows run real Ray (``deploy/slurm-lab/ray-venv.sh``; on 24.11 inside the lab's root filesystem): the
entrypoint runs remote tasks, then waits for the gate and exits with the code the row asks for. A cancelled
Ray job leaves none of its Ray processes behind; one whose worker's node goes down (lab-node1, the matrix's
own node, set DOWN on the lab: the head is on lab-node3) is requeued by Slurm itself.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from clusters import actions as cluster_actions
from clusters.actions.sync import backend_for
from clusters.backends.base import JobState
from clusters.backends.slurm import ray as slurm_ray
from clusters.backends.slurm.backend import SlurmBackend
from clusters.models import Cluster, Node
from scheduler import actions
from scheduler.models import Attempt, Job
from scheduler.states import FINAL
from tests.clusters.factories import slurm_cluster
from tests.clusters.slurm_lab import SlurmLab
from tests.clusters.test_slurm_ray import RAY_OPTIONS, needs_ray
from tests.scheduler.conftest import Fleet
from tests.scheduler.fault_harness import HOUR, Row, Scenario, events, record, skipped

pytestmark = [pytest.mark.django_db, pytest.mark.slurm]

MATRIX_NODE = "lab-node1"
#: The Ray rows' entrypoint: remote tasks on the Ray cluster, then it waits for the gate (argv[1]) and exits
#: with argv[2].
RAY_PROGRAM = """import os, sys, time
import ray
ray.init()
@ray.remote(num_cpus=1, scheduling_strategy="SPREAD")
def where():
    time.sleep(0.5)
    return ray.get_runtime_context().get_node_id()
nodes = len(set(ray.get([where.remote() for _ in range(8)])))
print("qm-ray-tasks-ran-on", nodes, "node(s), greeting", os.environ.get("GREETING"), flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.2)
sys.exit(int(sys.argv[2]))
"""
#: Ray takes 10-25 s to come up on the lab's shared 2 cores; a Ray job's steps are given this long.
RAY_SECONDS = 180


class SlurmScenario(Scenario):
    """The ``slurm`` cluster on the lab, preferred; ``west`` (simulated) beside it."""

    backend = "slurm"

    def __init__(self, fleet: Fleet, capture: Any, lab: SlurmLab, **options: Any) -> None:
        super().__init__(fleet, capture)
        self.lab = lab
        self.backend = f"slurm-{lab.version}"
        Cluster.objects.filter(slug="east").update(status=Cluster.Status.DISABLED)
        Cluster.objects.filter(slug="west").update(preference=0)
        self.west = Cluster.objects.get(slug="west")
        # The lab's GPUs as the simulated clusters' type (one price, one queue): the preference decides.
        options = {**lab.options, "gpu_models": {"h100": "H100-SXM-80GB"}, **options}
        # The matrix's nodes (a Ray head's too) empty on Slurm before the first sync: an earlier test's job
        # may still be completing there, and the engine would see them busy.
        lab.settle(MATRIX_NODE, "lab-node3")
        cluster = slurm_cluster(fleet.org, "slurm", lab.endpoint, lab.token, **options)
        self.slurm = self.added(cluster, preference=100)
        # Other tests share the lab and assert what runs on lab-node2..4 (test_slurm_backend): the matrix
        # keeps to lab-node1, the others cordoned on Quartermaster's side only.
        Node.objects.filter(cluster=self.slurm).exclude(name=MATRIX_NODE).update(state=Node.State.CORDONED)
        self.gate = Path(lab.options["workdir"]) / f"qm-matrix-gate-{time.time_ns()}"
        self.taken_out: list[str] = []

    def submit_ray(self, exit_code: int = 0, **fields: Any) -> Job:
        """A Ray job (a head and one worker of 1 GPU) whose entrypoint (``RAY_PROGRAM``) runs until the gate
        opens, then exits ``exit_code``."""
        needs_ray(self.lab)
        program = self.gate.with_name(f"{self.gate.name}-ray.py")
        program.write_text(RAY_PROGRAM)
        ray = {
            "kind": "ray",
            "script": "",
            "entrypoint": f"python {program} {self.gate} {exit_code}",
            "runtime_env": {"env_vars": {"GREETING": "matrix"}},
            "workers": 1,
            "cpu": 2000,
            "memory": 2048,
            "head_cpu": 1000,
            "head_memory": 2048,
        }
        return self.submit(**{**ray, **fields})

    def output(self, job: Job) -> str:
        """The job's output on the lab (its latest attempt's), "" before there is any."""
        attempt = job.attempts.order_by("number").last()
        path = Path(self.lab.options["workdir"]) / f"slurm-{attempt.backend_id if attempt else ''}.out"
        return path.read_text() if attempt and attempt.backend_id and path.exists() else ""

    def until_tasks_ran(self, job: Job, earlier: str = "") -> str:
        """Follow a Ray job until its entrypoint says where its remote tasks ran (every Ray node joined,
        the entrypoint runs and waits for the gate); returns the script's line of how long Ray took to be up.
        ``earlier``: the output of an earlier run of the same Slurm job (requeued), which only what follows
        it, or a new file, may answer."""
        deadline = time.monotonic() + RAY_SECONDS
        while "qm-ray-tasks-ran-on" not in (output := self.output(job).removeprefix(earlier)):
            self.follow()
            job.refresh_from_db()
            assert job.state not in FINAL, (events(job), output[-2000:])
            assert time.monotonic() < deadline, (events(job), output[-2000:])
            time.sleep(1)
        return next(line for line in output.splitlines() if line.startswith("qm: Ray is up"))

    def submit(self, **fields: Any) -> Job:
        # A batch script that runs until the gate opens; SIGTERM: it checkpoints and exits.
        script = f"trap 'echo checkpointed; exit 0' TERM\nwhile [ ! -e {self.gate} ]; do sleep 0.2 & wait $!; done\n"
        return super().submit(**{"accelerators": 1, "image": "", "command": [], "script": script, **fields})

    def start(self, **fields: Any) -> Job:
        job = self.submit(**fields)
        self.cycle()
        self.until(job, lambda j: j.state == Job.State.RUNNING)
        time.sleep(0.5)  # let bash install its trap
        return job

    def until(self, job: Job, done: Callable[[Job], bool], seconds: float = 20, at: Any = None) -> None:
        """Follow the clusters until ``done(job)`` (Slurm's jobs move in real time)."""
        deadline = time.monotonic() + seconds
        while True:
            self.follow(at)
            job.refresh_from_db()
            if done(job):
                return
            assert time.monotonic() < deadline, self.stuck(job)
            time.sleep(0.3)

    def stuck(self, job: Job) -> str:
        """What a scenario that waited in vain shows: the job's events, Slurm's word on its attempt and the
        end of the attempt's output."""
        attempt = job.attempts.order_by("number").last()
        there = backend_for(self.slurm).status(attempt.backend_id) if attempt and attempt.backend_id else None
        return f"{events(job)}\nSlurm: {there}\noutput:\n{self.output(job)[-3000:]}"

    def place_again(self, job: Job, *, wait: bool = True) -> None:
        """Place a requeued job and (``wait``) follow it until it runs or ends."""
        job.refresh_from_db()
        self.cycle(job.not_before)
        if wait:
            self.until(job, lambda j: j.state == Job.State.RUNNING or j.state in FINAL, at=job.not_before)

    def finish(self, job: Job, seconds: float = 20) -> None:
        """Open the gate (Slurm's copies end) and let the simulated clusters' hour pass."""
        self.gate.touch()
        self.fleet.run_for(HOUR + 1)
        self.until(job, lambda j: j.state in FINAL, seconds=seconds, at=self.later(HOUR + 1))

    def node_of(self, job: Job) -> Node:
        return job.attempts.get(outcome=Attempt.Outcome.ACTIVE).assignments.get().node

    def ends_there(self, backend_id: str, seconds: float = 10) -> JobState:
        """How Slurm ended the job, waiting for it to end."""
        deadline = time.monotonic() + seconds
        while (state := backend_for(self.slurm).status(backend_id).state) in (JobState.RUNNING, JobState.PENDING):
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
        return state

    def drained_there(self, name: str) -> bool:
        """Whether Slurm itself has the node in its DRAIN state (no new jobs)."""
        info = next(n for n in backend_for(self.slurm).inventory().nodes if n.name == name)
        return "DRAIN" in info.labels.get("state_flags", "").upper() or "drain" in info.labels["state"]

    def put_back(self) -> None:
        """Resume the lab nodes the scenario cordoned or drained (at once: other tests share them), and let
        what it left running there end."""
        backend = backend_for(Cluster.objects.get(pk=self.slurm.pk))
        resumed = set()
        while self.taken_out:
            resumed.add(name := self.taken_out.pop())
            backend.resume(name)
        # Just after a resume Slurm shows the node not responding (idle*) until slurmctld pings it: wait,
        # or the next scenario's sync would find it down and place its job elsewhere.
        deadline = time.monotonic() + 10
        while resumed and time.monotonic() < deadline:
            nodes = [n for n in backend.inventory().nodes if n.name in resumed]
            if all(n.ready and n.schedulable for n in nodes):
                break
            time.sleep(0.2)
        self.gate.touch()

    def close(self) -> None:
        """At the end of a test: its nodes back, and whatever of its jobs is still on the lab cancelled (a
        test that failed half-way leaves them running, and the next test waits for their nodes)."""
        self.put_back()
        backend = backend_for(Cluster.objects.get(pk=self.slurm.pk))
        for backend_id in (
            Attempt.objects.filter(cluster=self.slurm).exclude(backend_id="").values_list("backend_id", flat=True)
        ):
            with contextlib.suppress(Exception):  # ended and forgotten by Slurm: nothing to cancel
                backend.cancel(backend_id)


# ------------------------------------------------------------------------------------------------ faults


def refused_at_submit(s: SlurmScenario) -> Row:
    job = s.submit()
    s.cycle()  # Slurm refuses the partition: placed elsewhere
    s.place_again(job)
    first = job.attempts.get(number=1)
    assert (first.cluster, first.outcome) == (s.slurm, Attempt.Outcome.REFUSED), events(job)
    assert "Invalid partition" in first.message
    s.finish(job)
    return s.row("refusal at submit (one cluster)", job, state="succeeded", retries=0, copies=1)


def refused_everywhere(s: SlurmScenario) -> Row:
    s.refuse_on_simulated("account lab-x is not allowed here")
    job = s.submit()
    s.cycle()
    s.place_again(job, wait=False)  # west refuses too
    s.cycle()
    job.refresh_from_db()
    assert job.state == Job.State.FAILED, events(job)
    assert "Invalid partition" in job.message or "not allowed here" in job.message, job.message
    return s.row("refusal at submit (every cluster)", job, state="failed", retries=0, copies=0)


def transient_error(s: SlurmScenario) -> Row:
    endpoint = s.cut_off(s.slurm)  # slurmrestd does not answer for the first two tries
    job = s.submit()
    s.cycle()
    s.cycle(s.later(15))
    assert Attempt.objects.get(job=job).dispatch_tries == 2
    s.reconnect(s.slurm, endpoint)
    s.cycle(s.later(40))  # after 20 s more: taken
    s.until(job, lambda j: j.state == Job.State.RUNNING, at=s.later(40))
    assert Attempt.objects.get(job=job).cluster == s.slurm
    s.finish(job)
    return s.row("transient error at submit", job, state="succeeded", retries=0, copies=1)


def partition(seconds: int, failed_syncs: int) -> Callable[[SlurmScenario], Row]:
    def run(s: SlurmScenario) -> Row:
        job = s.start()
        endpoint = s.cut_off(s.slurm)
        s.sync(s.slurm, failed_syncs)
        s.follow(s.later(seconds))
        s.recover(s.later(seconds))
        moved = seconds > s.slurm.failover_after
        if moved:
            s.cycle(s.later(seconds))  # restarted on west
            s.follow(s.later(seconds))
        s.reconnect(s.slurm, endpoint)
        s.sync(s.slurm)
        s.follow(s.later(seconds))  # slurm answers: the old copy is cancelled (its replacement runs) or kept
        if moved:  # scancel'd: Slurm ends it within moments
            old = job.attempts.get(number=1)
            assert s.ends_there(old.backend_id) == JobState.CANCELLED, events(job)
        s.finish(job)
        return s.row(f"cluster unreachable {_span(seconds)}", job, state="succeeded", retries=0, copies=1)

    return run


def bad_script(s: SlurmScenario) -> Row:
    job = s.submit(script="echo 'no such file: data/train.bin' >&2\nexit 3\n", max_retries=0)
    s.cycle()
    s.until(job, lambda j: j.state in FINAL)
    assert "exited with code 3" in job.message, events(job)
    note = "the script exits 3 on the lab: failed with its exit code (no retries left)"
    return s.row("bad script (exit code)", job, note=note, state="failed", retries=0, copies=0)


def time_limit(s: SlurmScenario) -> Row:
    job = s.start(time_limit=600)
    s.follow(s.later(601))  # signalled (scancel --signal=TERM), its tier's grace
    s.until(job, lambda j: j.state in FINAL, at=s.later(611))  # it caught SIGTERM, checkpointed and exited
    return s.row("time limit reached", job, state="failed", retries=0, copies=0)


def cordon(s: SlurmScenario) -> Row:
    job = s.start()
    node = s.node_of(job)
    with s.capture(execute=True):
        cluster_actions.cordon_node(s.fleet.user("adam"), node, "fan noise")
    s.taken_out.append(node.name)
    assert s.drained_there(node.name)
    s.recover()
    s.follow()
    assert Job.objects.get(pk=job.pk).state == Job.State.RUNNING, events(job)
    s.put_back()  # the lab's node resumed; the job finishes
    s.finish(job)
    how = "scontrol State=DRAIN" if s.lab.version == "22.05" else "POST node/{name} DRAIN"
    return s.row("cordon", job, note=f"{how}: the job runs on", state="succeeded", retries=0, copies=1)


def drain(s: SlurmScenario) -> Row:
    job = s.start()
    node = s.node_of(job)
    with s.capture(execute=True):
        cluster_actions.drain_node(s.fleet.user("adam"), node, "PSU swap", grace_seconds=120)
    s.taken_out.append(node.name)
    assert s.drained_there(node.name)
    s.recover()  # signalled: it catches SIGTERM, checkpoints and exits 0
    s.until(job, lambda j: j.state not in (Job.State.RUNNING, Job.State.PREEMPTING))
    s.put_back()
    s.gate.unlink()  # the next copy runs until the gate opens again
    s.place_again(job)
    s.finish(job)
    note = "the script checkpoints on SIGTERM and exits 0: requeued all the same (ran on west: lab-node1 drained)"
    return s.row("graceful drain", job, note=note, state="succeeded", retries=0, copies=1)


def ray_processes(attempt: Attempt) -> dict[int, str]:
    """The processes of the Ray cluster of ``attempt`` (pid: name): every Ray process of the job keeps its
    files under the job's own directory (``qm-ray-<Slurm job>-<attempt>``, ``clusters/backends/slurm/ray.py``),
    which its command line names (raylet's ``--session_dir``, gcs_server's ``--session-dir``, ...)."""
    mark = f"/qm-ray-{attempt.backend_id}-{slurm_ray.ray_dir_name(attempt.backend_key)}/".encode()
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and mark in (entry / "cmdline").read_bytes():
                found[int(entry.name)] = (entry / "comm").read_text().strip()
        except OSError:  # it ended meanwhile
            continue
    return found


def ray_succeeds(s: SlurmScenario) -> Row:
    job = s.submit_ray(0)
    s.cycle()
    up = s.until_tasks_ran(job)
    s.finish(job, seconds=RAY_SECONDS)
    attempt = job.attempts.get()
    assert attempt.dashboard_url.startswith("http://127.0.0.1:"), events(job)
    assert "qm-ray-tasks-ran-on 1 node(s), greeting matrix" in s.output(job), s.output(job)[-2000:]
    note = f"head and worker on {MATRIX_NODE}, remote tasks run; {up.removeprefix('qm: ')}"
    return s.row("Ray job", job, note=note, state="succeeded", retries=0, copies=1)


def ray_entrypoint_fails(s: SlurmScenario) -> Row:
    job = s.submit_ray(4, max_retries=0)
    s.cycle()
    s.until_tasks_ran(job)
    s.finish(job, seconds=RAY_SECONDS)
    assert "exited with code 4" in job.message, events(job)
    note = "the entrypoint exits 4: the job fails with its code (no retries left)"
    return s.row("Ray job, entrypoint exits non-zero", job, note=note, state="failed", retries=0, copies=0)


def ray_cancelled(s: SlurmScenario) -> Row:
    job = s.submit_ray(0)
    s.cycle()
    s.until_tasks_ran(job)
    attempt = job.attempts.get()
    backend_id = attempt.backend_id
    running = ray_processes(attempt)
    assert {"raylet", "gcs_server"} <= set(running.values()), running
    with s.capture(execute=True):
        actions.cancel_job(s.fleet.user("alice"), job, "matrix")
    assert s.ends_there(backend_id, seconds=30) == JobState.CANCELLED, events(job)
    deadline = time.monotonic() + 30  # KillWait (5 s), then Slurm kills what is left
    while (left := ray_processes(attempt)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, f"Ray processes of job {backend_id} left after scancel: {left}"
    note = f"scancel: none of its {len(running)} Ray processes (raylet, gcs_server, ...) remain"
    return s.row("Ray job cancelled while running", job, note=note, state="cancelled", retries=0, copies=0)


def ray_worker_node_lost(s: SlurmScenario) -> Row:
    # The worker (30 cores) and the head (4) do not fit one 32-core node: the head goes to lab-node3 (not
    # lab-node2, where test_slurm_backend counts what its own job uses).
    Node.objects.filter(cluster=s.slurm, name="lab-node3").update(state=Node.State.SCHEDULABLE)
    job = s.submit_ray(0, cpu=30000, head_cpu=4000)
    s.cycle()
    attempt = job.attempts.get()
    assert attempt.cluster == s.slurm, events(job)
    assert attempt.assignments.get(workers=1).node.name == MATRIX_NODE, events(job)
    s.until_tasks_ran(job)
    assert "qm-ray-tasks-ran-on 2 node(s), greeting matrix" in s.output(job), s.output(job)[-2000:]
    running = ray_processes(attempt)
    first_run = s.output(job)
    # The worker's node is lost: Slurm sets it DOWN, kills the job everywhere and requeues it itself (JobRequeue,
    # Slurm's default), to start again after a delay (BeginTime). The lab's slurmd still answers, so the node
    # is back in service at once (ReturnToService=2).
    backend = backend_for(s.slurm)
    assert isinstance(backend, SlurmBackend)
    backend._scontrol("update", f"NodeName={MATRIX_NODE}", "State=DOWN", "Reason=qm matrix: lost", what=MATRIX_NODE)
    s.taken_out.append(MATRIX_NODE)
    deadline = time.monotonic() + 30
    while (state := backend.status(attempt.backend_id).state) == JobState.RUNNING and time.monotonic() < deadline:
        time.sleep(0.2)
    assert state == JobState.PENDING, state
    while (left := ray_processes(attempt)) and time.monotonic() < deadline + 30:
        time.sleep(0.5)
    assert not left, f"Ray processes of job {attempt.backend_id} left after its node was lost: {left}"
    s.put_back()
    s.gate.unlink()  # the copy Slurm runs again waits for the gate again
    # Slurm would wait about two minutes (BeginTime) before it starts the job again; the lab does not.
    backend._scontrol("update", f"JobId={attempt.backend_id}", "StartTime=now", what=f"job {attempt.backend_id}")
    # the Ray cluster starts again, on the same nodes, under the same Slurm job
    s.until_tasks_ran(job, earlier=first_run)
    s.finish(job, seconds=RAY_SECONDS)
    note = (
        f"head on lab-node3, worker on {MATRIX_NODE} set DOWN: Slurm kills it ({len(running)} Ray processes, none "
        "left) and requeues it itself; it runs again as the same Slurm job, Quartermaster shows it running throughout"
    )
    return s.row("Ray job, worker's node lost", job, note=note, state="succeeded", retries=0, copies=1)


def _span(seconds: int) -> str:
    return f"{seconds // 60} min" if seconds >= 120 else f"{seconds} s"


FAULTS: dict[str, tuple[Callable[[SlurmScenario], Row], dict[str, Any]]] = {
    "refused": (refused_at_submit, {"partition": "no-such-partition"}),
    "refused_everywhere": (refused_everywhere, {"partition": "no-such-partition"}),
    "transient": (transient_error, {}),
    "unreachable_30s": (partition(30, 1), {}),
    "unreachable_2min": (partition(120, 3), {}),
    "unreachable_15min": (partition(15 * 60 + 1, 3), {}),
    "bad_script": (bad_script, {}),
    "time_limit": (time_limit, {}),
    "cordon": (cordon, {}),
    "drain": (drain, {}),
    "ray": (ray_succeeds, RAY_OPTIONS),
    "ray_entrypoint_fails": (ray_entrypoint_fails, RAY_OPTIONS),
    "ray_cancelled": (ray_cancelled, RAY_OPTIONS),
    "ray_worker_node_lost": (ray_worker_node_lost, RAY_OPTIONS),
}
NOT_HERE = {
    "partial_gang": ("partial gang", "Slurm starts an allocation whole: no job runs in part"),
    "node_lost": (
        "node lost mid-run",
        "downing a node of the lab, which other sessions' tests share, is left to test_slurm_backend",
    ),
}


@pytest.mark.parametrize("fault", FAULTS)
def test_fault_matrix_slurm(
    fleet: Fleet, django_capture_on_commit_callbacks: Any, slurm_lab: SlurmLab, fault: str
) -> None:
    scenario, options = FAULTS[fault]
    s = SlurmScenario(fleet, django_capture_on_commit_callbacks, slurm_lab, **options)
    try:
        record(scenario(s), fault)
    finally:
        s.close()


def test_a_job_asking_for_one_topology_domain_runs_in_one(
    fleet: Fleet, django_capture_on_commit_callbacks: Any, slurm_lab: SlurmLab
) -> None:
    """The sync names the cluster's levels from Slurm's topology; the engine keeps the two workers in one
    domain of the narrowest level (a leaf switch, a block); Slurm runs them on exactly those nodes."""
    s = SlurmScenario(fleet, django_capture_on_commit_callbacks, slurm_lab)
    try:
        assert s.slurm.levels == list(slurm_lab.spec.levels)  # ["spine", "leaf"] or ["block"], not typed in
        level = slurm_lab.spec.levels[-1]
        # lab-node2 out (on Quartermaster's side): of the domains {1, 2} and {3, 4}, only {3, 4} can hold two
        # workers of 5 GPUs (one per node); lab-node1 with lab-node3 would be two domains
        Node.objects.filter(cluster=s.slurm).update(state=Node.State.SCHEDULABLE)
        Node.objects.filter(cluster=s.slurm, name="lab-node2").update(state=Node.State.CORDONED)
        job = s.submit(workers=2, accelerators=5, topology_level=level)
        s.cycle()
        s.until(job, lambda j: j.state == Job.State.RUNNING)
        attempt = job.attempts.get(outcome=Attempt.Outcome.ACTIVE)
        assert attempt.cluster == s.slurm, events(job)
        chosen = sorted(attempt.assignments.values_list("node__name", flat=True))
        assert chosen == ["lab-node3", "lab-node4"], chosen
        ran = backend_for(s.slurm).status(attempt.backend_id)
        assert ran.nodes == ("lab-node3", "lab-node4"), ran
        s.finish(job)
        assert Job.objects.get(pk=job.pk).state == Job.State.SUCCEEDED, events(job)
    finally:
        s.close()


@pytest.mark.parametrize("fault", NOT_HERE)
def test_fault_matrix_slurm_not_here(fault: str) -> None:
    name, reason = NOT_HERE[fault]
    skipped("slurm", fault, name, reason)
