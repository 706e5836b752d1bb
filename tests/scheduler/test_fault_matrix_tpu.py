"""The fault-injection matrix on Google Cloud TPU: every fault driven through the real loop (submit, cycle,
dispatch, follow, recover, sync) against the local Cloud TPU API of ``tests/clusters/tpu_server.py``.

The cluster ``tpu`` (slices of the fake project, ``accelerator_type`` v5p-8) is preferred; a simulated
cluster of v5p slices, ``sim-tpu``, runs what ``tpu`` will not (the fleet's H100 clusters are taken out of
the way). Jobs ask for 4 v5p chips. Google's queue is played by the server: a queued resource is ACCEPTED, then ACTIVE
on the next read.

What Cloud TPU cannot do shapes some rows (``note``): it never says a workload ended (a queued resource is
ACTIVE until deleted), so a job that stays on ``tpu`` ends the scenario *running*, and its copies are the
slices still ACTIVE; it cannot signal a slice, so at a time limit or a drain the slice is deleted when the
grace ends; a slice starts whole, so the partial gang is a slice waiting for capacity past the start
timeout; a lost host shows as the slice suspended by the service.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from clusters import actions as cluster_actions
from clusters.backends.base import BackendError, JobState, NotFound
from clusters.models import Cluster
from clusters.sync import backend_for
from scheduler.models import Attempt, Job
from tests.clusters.factories import simulated_cluster, tpu_cluster
from tests.clusters.tpu_server import ApiError, TpuServer
from tests.scheduler.conftest import Fleet
from tests.scheduler.fault_harness import HOUR, Row, Scenario, events, record

pytestmark = pytest.mark.django_db

QUEUED = "queuedResources"
ENDS_RUNNING = "Cloud TPU never says a workload ended: it stays running; copies = slices still ACTIVE"


@pytest.fixture
def tpu() -> Iterator[TpuServer]:
    with TpuServer(progression=("ACCEPTED", "ACTIVE"), page_size=50) as server:
        yield server


class TpuScenario(Scenario):
    """The ``tpu`` cluster on the fake Cloud TPU API, preferred; ``sim-tpu`` (simulated v5p slices) beside it."""

    backend = "tpu"

    def __init__(self, fleet: Fleet, capture: Any, server: TpuServer, **options: Any) -> None:
        super().__init__(fleet, capture)
        self.server = server
        Cluster.objects.filter(slug__in=("east", "west")).update(status=Cluster.Status.DISABLED)
        sim = simulated_cluster(fleet.org, "sim-tpu", fleet.state_dir, nodes=2, profile="tpu-slices", job_seconds=HOUR)
        self.elsewhere = self.added(sim, preference=0)
        options = {
            "project": server.project,
            "zone": server.zone,
            "accelerator_type": "v5p-8",
            "host_cpu": 208_000,
            "host_memory_mib": 448 * 1024,
            **options,
        }
        self.tpu = self.added(tpu_cluster(fleet.org, "tpu", server.url, **{k: v for k, v in options.items() if v}), 100)

    def submit(self, **fields: Any) -> Job:
        return super().submit(**{"accelerators": 4, "accelerator_types": ["v5p"], **fields})

    def start(self, **fields: Any) -> Job:
        """Submit, place, dispatch and follow until the slice is ACTIVE (Google's queue takes two reads)."""
        job = self.submit(**fields)
        self.cycle()
        self.follow()
        self.follow()
        assert Job.objects.get(pk=job.pk).state == Job.State.RUNNING, events(job)
        return job

    def place_again(self, job: Job) -> None:
        super().place_again(job)
        self.follow(job.not_before)  # a slice is ACTIVE on the second read

    def finish(self) -> None:
        """The simulated clusters' jobs run to their end; slices keep running (Cloud TPU says no more)."""
        self.fleet.run_for(HOUR + 1)
        self.follow(self.later(HOUR + 1))

    def finished_there(self, attempt: Attempt) -> bool:
        """On TPU: the slice is still ACTIVE (the copy that runs); elsewhere: it succeeded there."""
        if attempt.cluster_id != self.tpu.pk:
            return super().finished_there(attempt)
        if not attempt.backend_id:
            return False
        try:
            return backend_for(attempt.cluster).status(attempt.backend_id).state == JobState.RUNNING
        except (NotFound, BackendError):
            return False

    def slices(self) -> list[str]:
        """The queued resources that exist and are not being deleted."""
        return sorted(name for name, qr in self.server.queued_resources.items() if not qr.deleting)


# ------------------------------------------------------------------------------------------------ faults


def refused_at_submit(s: TpuScenario) -> Row:
    s.server.fail_requests("POST", QUEUED, ApiError(400, "Invalid runtime version tpu-ubuntu2204-base for v5p-8"))
    job = s.submit()
    s.cycle()  # tpu refuses: placed elsewhere
    s.place_again(job)
    first = job.attempts.get(number=1)
    assert (first.cluster, first.outcome) == (s.tpu, Attempt.Outcome.REFUSED), events(job)
    assert "Invalid runtime version" in first.message
    s.finish()
    return s.row("refusal at submit (one cluster)", job, state="succeeded", retries=0, copies=1)


def refused_everywhere(s: TpuScenario) -> Row:
    s.server.fail_requests(
        "POST", QUEUED, ApiError(403, "Permission 'tpu.queuedResources.create' denied on reservation")
    )
    s.refuse_on_simulated("account lab-x is not allowed here")
    return s.refused_by_every_cluster(
        "refusal at submit (every cluster)", ("denied on reservation", "not allowed here")
    )


def no_accelerator_type(s: TpuScenario) -> Row:
    job = s.submit()
    s.cycle()
    first = job.attempts.get(number=1)
    assert (first.cluster, first.outcome) == (s.tpu, Attempt.Outcome.REFUSED), events(job)
    assert "accelerator_type" in first.message
    assert not s.server.mutations(), "nothing was sent"
    s.place_again(job)
    s.finish()
    note = "cluster without accelerator_type: refused (InvalidJob naming it) before anything is sent; ran on sim-tpu"
    return s.row("no accelerator_type", job, note=note, state="succeeded", retries=0, copies=1)


def no_accelerator_type_alone(s: TpuScenario) -> Row:
    s.refuse_on_simulated("account lab-x is not allowed here")
    note = "every other cluster refuses too: failed with the clusters' words"
    fault = "no accelerator_type (no other cluster)"
    return s.refused_by_every_cluster(fault, ("accelerator_type", "not allowed here"), note)


def transient_error(s: TpuScenario) -> Row:
    s.server.fail_requests("POST", QUEUED, ApiError(503, "The service is currently unavailable."), times=2)
    job = s.submit()
    s.cycle()
    assert Attempt.objects.get(job=job).dispatch_tries == 1
    s.cycle(s.later(15))  # its 10 s backoff ran out: sent again, fails again
    assert Attempt.objects.get(job=job).dispatch_tries == 2
    s.cycle(s.later(40))  # after 20 s more: taken
    s.follow(s.later(40))
    s.follow(s.later(40))
    assert Attempt.objects.get(job=job).cluster == s.tpu
    s.finish()
    return s.row("transient error at submit", job, note=ENDS_RUNNING, state="running", retries=0, copies=1)


def partition(seconds: int, failed_syncs: int) -> Callable[[TpuScenario], Row]:
    def run(s: TpuScenario) -> Row:
        job = s.start()
        endpoint = s.cut_off(s.tpu)
        s.sync(s.tpu, failed_syncs)
        s.follow(s.later(seconds))
        s.recover(s.later(seconds))
        moved = seconds > s.tpu.failover_after
        if moved:
            s.cycle(s.later(seconds))  # restarted on sim-tpu
            s.follow(s.later(seconds))
        s.reconnect(s.tpu, endpoint)
        s.sync(s.tpu)
        s.follow(s.later(seconds))  # tpu answers: the old slice is deleted (its replacement runs) or kept
        s.finish()
        if moved:
            assert not s.slices(), "the old slice was deleted"
            return s.row(f"cluster unreachable {_span(seconds)}", job, state="succeeded", retries=0, copies=1)
        assert len(s.slices()) == 1
        note = ENDS_RUNNING
        return s.row(f"cluster unreachable {_span(seconds)}", job, note=note, state="running", retries=0, copies=1)

    return run


def node_lost(s: TpuScenario) -> Row:
    job = s.start()
    (name,) = s.slices()
    s.server.suspend(name, "SERVICE")  # Cloud TPU took the slice back (host failure, maintenance)
    s.follow()
    assert job.attempts.get(number=1).reason == "preempted_by_cluster", events(job)
    s.place_again(job)
    s.finish()
    note = "a lost host shows as the slice SUSPENDED by the service: preempted by the cluster, no retry spent"
    note = f"{note}. {ENDS_RUNNING}"
    return s.row("node lost mid-run", job, note=note, state="running", retries=0, copies=1)


def bad_image(s: TpuScenario) -> Row:
    job = s.submit()
    s.cycle()
    (name,) = s.slices()
    s.server.fail(name, "Runtime version tpu-vm-bad not found for v5p-8", code=3)
    s.follow()  # FAILED as invalid: cancelled there, placed elsewhere
    first = job.attempts.get(number=1)
    assert (first.cluster, first.reason) == (s.tpu, "invalid"), events(job)
    s.place_again(job)
    s.finish()
    note = "no exit code comes back from a slice: the queued resource FAILED (INVALID_ARGUMENT) is a late refusal"
    return s.row("bad image or script", job, note=note, state="succeeded", retries=0, copies=1)


def partial_gang(s: TpuScenario) -> Row:
    s.server.progression = ("ACCEPTED", "WAITING_FOR_RESOURCES")
    job = s.submit()
    s.cycle()
    s.follow()
    s.follow()
    assert Job.objects.get(pk=job.pk).state == Job.State.PLACING, events(job)
    s.follow(s.later(s.tpu.start_timeout + 1))  # requeued whole, its queued resource deleted
    assert not s.slices()
    s.server.progression = ("ACCEPTED", "ACTIVE")
    s.place_again(job)
    s.finish()
    assert job.attempts.get(number=2).cluster == s.elsewhere  # tpu did not start it in time: avoided for a while
    note = "a slice starts whole: one waiting for capacity past the start timeout is deleted, the job requeued whole"
    note = f"{note}; tpu avoided for a while, it ran on sim-tpu"
    return s.row("partial gang", job, note=note, state="succeeded", retries=0, copies=1)


def time_limit(s: TpuScenario) -> Row:
    job = s.start(time_limit=600)
    s.follow(s.later(601))  # at its limit: "signalled" (nothing can be), its tier's grace
    assert s.slices(), "the slice runs through the grace"
    grace = Job.objects.select_related("tier").get(pk=job.pk).tier.grace_seconds
    s.follow(s.later(601 + grace + 1))  # the grace is over: the slice is deleted
    assert not s.slices()
    note = "nothing can be signalled on TPU: the slice is deleted when the grace ends"
    return s.row("time limit reached", job, note=note, state="failed", retries=0, copies=0)


def cordon(s: TpuScenario) -> Row:
    job = s.start()
    node = job.attempts.get().assignments.get().node
    with s.capture(execute=True):
        cluster_actions.cordon_node(s.fleet.user("adam"), node, "fan noise")
    s.recover()
    s.finish()
    note = "Cloud TPU has no cordon: Quartermaster's node state keeps new work away; the job runs on. " + ENDS_RUNNING
    return s.row("cordon", job, note=note, state="running", retries=0, copies=1)


def drain(s: TpuScenario) -> Row:
    job = s.start()
    node = job.attempts.get().assignments.get().node
    with s.capture(execute=True):
        cluster_actions.drain_node(s.fleet.user("adam"), node, "PSU swap", grace_seconds=120)
    s.recover()  # "signalled": nothing can be, the slice runs through the grace
    assert s.slices()
    s.follow(s.later(121))  # the grace is over: deleted, requeued without a retry
    assert not s.slices()
    s.place_again(job)
    s.finish()
    note = "no signal on TPU: the slice is deleted when the drain's grace ends; requeued, ran on sim-tpu"
    return s.row("graceful drain", job, note=note, state="succeeded", retries=0, copies=1)


def _span(seconds: int) -> str:
    return f"{seconds // 60} min" if seconds >= 120 else f"{seconds} s"


FAULTS: dict[str, tuple[Callable[[TpuScenario], Row], dict[str, Any]]] = {
    "refused": (refused_at_submit, {}),
    "refused_everywhere": (refused_everywhere, {}),
    "no_accelerator_type": (no_accelerator_type, {"accelerator_type": ""}),
    "no_accelerator_type_alone": (no_accelerator_type_alone, {"accelerator_type": ""}),
    "transient": (transient_error, {}),
    "unreachable_30s": (partition(30, 1), {}),
    "unreachable_2min": (partition(120, 3), {}),
    "unreachable_15min": (partition(15 * 60 + 1, 3), {}),
    "node_lost": (node_lost, {}),
    "bad_image": (bad_image, {}),
    "partial_gang": (partial_gang, {}),
    "time_limit": (time_limit, {}),
    "cordon": (cordon, {}),
    "drain": (drain, {}),
}


@pytest.mark.parametrize("fault", FAULTS)
def test_fault_matrix_tpu(fleet: Fleet, django_capture_on_commit_callbacks: Any, tpu: TpuServer, fault: str) -> None:
    scenario, options = FAULTS[fault]
    record(scenario(TpuScenario(fleet, django_capture_on_commit_callbacks, tpu, **options)), fault)
