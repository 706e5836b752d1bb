"""The fault-injection matrix on Google Cloud TPU: every fault driven through the real loop (submit, cycle,
dispatch, follow, recover, sync) against the local Cloud TPU API of ``tests/clusters/tpu_server.py``.

Two TPU clusters, each one project and zone of its own fake API: ``tpu`` (preferred) and ``tpu-b``, each
allowed one v5p-8 slice (``slices``). Jobs ask for a ``v5p-8`` slice. Google's queue is played by the
server: a queued resource is ACCEPTED, then ACTIVE (its slice made) on the next read. The workload's part is
played by its report: at the end of a scenario every running TPU job reports exit code 0 through its job
token, as its startup script would, and the follow round ends it (``finish``); a copy ran to its end when its
attempt succeeded on that report.

What Cloud TPU cannot do shapes some rows (``note``): it cannot signal a slice, so at a time limit or a drain
the slice is deleted when the grace ends; a slice starts whole, so the partial gang is a slice waiting for
capacity past the start timeout; a lost host shows as the slice suspended by the service, or as a slice
preempted under a queued resource that stays ACTIVE.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

from clusters import actions as cluster_actions
from clusters.models import Cluster
from scheduler.actions import checkpoints
from scheduler.models import Attempt, Job
from tests.clusters.factories import tpu_cluster
from tests.clusters.tpu_server import ApiError, TpuServer
from tests.scheduler.conftest import Fleet
from tests.scheduler.fault_harness import HOUR, Row, Scenario, events, record

pytestmark = pytest.mark.django_db

QUEUED = "queuedResources"
SLOT = "qm-v5p-8-1"


@pytest.fixture
def tpu() -> Iterator[tuple[TpuServer, TpuServer]]:
    with (
        TpuServer(progression=("ACCEPTED", "ACTIVE"), page_size=50) as server,
        TpuServer(zone="us-central2-b", progression=("ACCEPTED", "ACTIVE"), page_size=50) as other,
    ):
        yield server, other


class TpuScenario(Scenario):
    """The ``tpu`` cluster on one fake Cloud TPU API, preferred; ``tpu-b`` on another beside it."""

    backend = "tpu"

    def __init__(self, fleet: Fleet, capture: Any, servers: tuple[TpuServer, TpuServer], **options: Any) -> None:
        super().__init__(fleet, capture)
        self.server, self.other = servers
        Cluster.objects.filter(slug__in=("east", "west")).update(status=Cluster.Status.DISABLED)
        host: dict[str, Any] = {"host_cpu": 208_000, "host_memory_mib": 448 * 1024}
        where: dict[str, Any] = {"project": self.other.project, "zone": self.other.zone, "slices": {"v5p-8": 1}, **host}
        self.elsewhere = self.added(tpu_cluster(fleet.org, "tpu-b", self.other.url, **where), preference=0)
        options = {"project": self.server.project, "zone": self.server.zone, "slices": {"v5p-8": 1}, **host, **options}
        self.tpu = self.added(
            tpu_cluster(fleet.org, "tpu", self.server.url, **{k: v for k, v in options.items() if v}), 100
        )

    def submit(self, **fields: Any) -> Job:
        return super().submit(**{"tpu_type": "v5p-8", "accelerators": 1, **fields})

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

    def once_the_old_slice_is_gone(self, job: Job) -> None:
        """A job placed again on the slot its old slice held: the first submission finds the slot still held
        (the old queued resource is being deleted), a transient error; dispatch tries again 10 s later."""
        second = job.attempts.get(number=2)
        assert second.cluster == self.tpu, events(job)
        assert (second.backend_id, second.dispatch_tries) == ("", 1), events(job)
        assert second.dispatch_claimed_until is not None
        at = second.dispatch_claimed_until + timedelta(seconds=1)  # its backoff is over
        self.cycle(at)
        self.follow(at)
        self.follow(at)
        assert Job.objects.get(pk=job.pk).state == Job.State.RUNNING, events(job)

    def report(self, job: Job, code: int) -> None:
        """The job's startup script reports its program's exit code (worker 0 of its slice)."""
        job.refresh_from_db()
        checkpoints.report_exit(job, job.attempt, code)

    def finish(self) -> None:
        """Every running job's program exits 0 and reports it; the follow round ends it and deletes its slice."""
        for job in Job.objects.filter(team__organization=self.fleet.org, state=Job.State.RUNNING):
            self.report(job, 0)
        self.follow(self.later(HOUR))
        self.follow(self.later(HOUR))  # the deleted queued resources are gone

    def finished_there(self, attempt: Attempt) -> bool:
        """A copy ran to its end when it reported exit code 0 and its attempt succeeded on that report."""
        return (
            attempt.outcome == Attempt.Outcome.SUCCEEDED and attempt.reported_exit_code == 0 and not attempt.stop_reason
        )

    def slices(self, server: TpuServer | None = None) -> list[str]:
        """The queued resources that exist and are not being deleted."""
        queued = (server or self.server).queued_resources
        return sorted(name for name, qr in queued.items() if not qr.deleting)

    def refuse_elsewhere(self, error: ApiError) -> None:
        self.other.fail_requests("POST", QUEUED, error)


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
    s.refuse_elsewhere(ApiError(400, "the reservation has no capacity of that type", "FAILED_PRECONDITION"))
    return s.refused_by_every_cluster("refusal at submit (every cluster)", ("denied on reservation", "no capacity"))


def no_slices(s: TpuScenario) -> Row:
    job = s.submit()
    s.cycle()
    attempt = job.attempts.get(number=1)
    assert attempt.cluster == s.elsewhere, events(job)  # tpu offers no slot: the engine never chose it
    assert not s.server.mutations(), "nothing was sent to tpu"
    s.follow()
    s.follow()
    s.finish()
    note = "a cluster without slices offers no slot of any shape: never chosen, nothing sent; ran on tpu-b"
    return s.row("no slices configured", job, note=note, state="succeeded", retries=0, copies=1)


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
    return s.row("transient error at submit", job, state="succeeded", retries=0, copies=1)


def partition(seconds: int, failed_syncs: int) -> Callable[[TpuScenario], Row]:
    def run(s: TpuScenario) -> Row:
        job = s.start()
        endpoint = s.cut_off(s.tpu)
        s.sync(s.tpu, failed_syncs)
        s.follow(s.later(seconds))
        s.recover(s.later(seconds))
        moved = seconds > s.tpu.failover_after
        if moved:
            s.cycle(s.later(seconds))  # restarted on tpu-b
            s.follow(s.later(seconds))
            s.follow(s.later(seconds))
        s.reconnect(s.tpu, endpoint)
        s.sync(s.tpu)
        s.follow(s.later(seconds))  # tpu answers: the old slice is deleted (its replacement runs) or kept
        if moved:
            assert not s.slices(), "the old slice was deleted"
        else:
            assert len(s.slices()) == 1
        s.finish()
        return s.row(f"cluster unreachable {_span(seconds)}", job, state="succeeded", retries=0, copies=1)

    return run


def slice_taken_back(s: TpuScenario) -> Row:
    job = s.start()
    (name,) = s.slices()
    s.server.suspend(name, "SERVICE")  # Cloud TPU took the slice back (spot preemption, maintenance)
    s.follow()
    first = job.attempts.get(number=1)
    assert first.reason == "preempted_by_cluster", events(job)
    assert s.server.queued_resources[first.backend_id].deleting, "the suspended queued resource is deleted"
    s.place_again(job)
    s.once_the_old_slice_is_gone(job)
    s.finish()
    note = "the queued resource SUSPENDED by the service: preempted by the cluster, no retry spent"
    return s.row("node lost mid-run (slice taken back)", job, note=note, state="succeeded", retries=0, copies=1)


def slice_broken(s: TpuScenario) -> Row:
    job = s.start()
    s.server.break_node(SLOT, "TERMINATED", "The TPU host failed")  # the queued resource stays ACTIVE
    s.follow()
    first = job.attempts.get(number=1)
    assert (first.reason, first.outcome) == ("node_failed", Attempt.Outcome.LOST), events(job)
    assert "its slice qm-v5p-8-1 is TERMINATED" in first.message
    assert s.server.queued_resources[first.backend_id].deleting, "the queued resource over the broken slice is deleted"
    s.place_again(job)
    s.once_the_old_slice_is_gone(job)
    s.finish()
    note = "a slice TERMINATED under an ACTIVE queued resource: its node failed, a retry spent, the old one deleted"
    return s.row("node lost mid-run (slice broken)", job, note=note, state="succeeded", retries=1, copies=1)


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
    note = "the queued resource FAILED with INVALID_ARGUMENT: a late refusal, placed elsewhere"
    return s.row("bad image or script", job, note=note, state="succeeded", retries=0, copies=1)


def no_capacity(s: TpuScenario) -> Row:
    job = s.submit()
    s.cycle()
    (name,) = s.slices()
    s.server.fail(name, "There is no more capacity in the zone us-east5-a for v5p-8", code=8)  # RESOURCE_EXHAUSTED
    s.follow()
    first = job.attempts.get(number=1)
    assert (first.cluster, first.reason, first.outcome) == (s.tpu, "no_capacity", Attempt.Outcome.LOST), events(job)
    assert "no more capacity" in first.message
    assert not s.slices(), "the failed queued resource was deleted"
    s.place_again(job)
    assert job.attempts.get(number=2).cluster == s.elsewhere  # tpu avoided for a while
    s.finish()
    note = "the queued resource FAILED for want of capacity (RESOURCE_EXHAUSTED): re-routed, tpu avoided a while"
    return s.row("provisioning failed: no capacity", job, note=note, state="succeeded", retries=0, copies=1)


def reported_failure(s: TpuScenario) -> Row:
    job = s.start()
    s.report(job, 3)  # the program exited 3: worker 0's startup script says so
    s.follow()
    first = job.attempts.get(number=1)
    assert (first.reason, first.exit_code, first.outcome) == ("exit_code", 3, Attempt.Outcome.FAILED), events(job)
    assert s.server.queued_resources[first.backend_id].deleting, "its slice is deleted"
    s.follow()  # the old queued resource is gone, and the slot with it
    s.place_again(job)  # the retry, after its backoff, on the same slot
    s.once_the_old_slice_is_gone(job)
    s.finish()
    note = "exit code 3 reported through the job token: failed, its slice deleted, retried (a retry spent)"
    return s.row("reported failure (exit code)", job, note=note, state="succeeded", retries=1, copies=1)


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
    note = f"{note}; tpu avoided for a while, it ran on tpu-b"
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
    note = "Cloud TPU has no cordon: Quartermaster's node state keeps new work away; the job runs on"
    return s.row("cordon", job, note=note, state="succeeded", retries=0, copies=1)


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
    note = "no signal on TPU: the slice is deleted when the drain's grace ends; requeued, ran on tpu-b"
    return s.row("graceful drain", job, note=note, state="succeeded", retries=0, copies=1)


def _span(seconds: int) -> str:
    return f"{seconds // 60} min" if seconds >= 120 else f"{seconds} s"


FAULTS: dict[str, tuple[Callable[[TpuScenario], Row], dict[str, Any]]] = {
    "refused": (refused_at_submit, {}),
    "refused_everywhere": (refused_everywhere, {}),
    "no_slices": (no_slices, {"slices": None}),
    "transient": (transient_error, {}),
    "unreachable_30s": (partition(30, 1), {}),
    "unreachable_2min": (partition(120, 3), {}),
    "unreachable_15min": (partition(15 * 60 + 1, 3), {}),
    "node_lost": (slice_taken_back, {}),
    "slice_broken": (slice_broken, {}),
    "bad_image": (bad_image, {}),
    "no_capacity": (no_capacity, {}),
    "reported_failure": (reported_failure, {}),
    "partial_gang": (partial_gang, {}),
    "time_limit": (time_limit, {}),
    "cordon": (cordon, {}),
    "drain": (drain, {}),
}


@pytest.mark.parametrize("fault", FAULTS)
def test_fault_matrix_tpu(
    fleet: Fleet, django_capture_on_commit_callbacks: Any, tpu: tuple[TpuServer, TpuServer], fault: str
) -> None:
    scenario, options = FAULTS[fault]
    record(scenario(TpuScenario(fleet, django_capture_on_commit_callbacks, tpu, **options)), fault)
