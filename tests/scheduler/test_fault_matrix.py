"""The fault-injection matrix on the simulated backend: every fault, driven through the real dispatch, follow
and recover code against a cluster that injects it, with the job's end state, its timeline, the retries it
spent, that quota and budget were released, and that exactly one copy ran to the end.

The harness (``fault_harness.py``) is shared with the other backends' files (``test_fault_matrix_*.py``).
Each scenario writes its row to ``test-artifacts/fault-matrix/``; the session's summary prints the table
(``conftest.pytest_terminal_summary``), which is the matrix recorded in the issue's notes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from clusters import actions as cluster_actions
from clusters.backends import simulated
from clusters.models import Cluster
from scheduler.models import Attempt, Job
from tests.scheduler.conftest import Fleet
from tests.scheduler.fault_harness import HOUR, Row, record
from tests.scheduler.fault_harness import Scenario as BaseScenario

pytestmark = pytest.mark.django_db


class Scenario(BaseScenario):
    """One fault on the ``fleet``'s two simulated clusters: east (4 nodes, preferred) and west (2 nodes)."""

    backend = "simulated"

    def __init__(self, fleet: Fleet, capture: Any) -> None:
        super().__init__(fleet, capture)
        Cluster.objects.filter(slug="east").update(preference=100)
        Cluster.objects.filter(slug="west").update(preference=0)
        self.east = Cluster.objects.get(slug="east")
        self.west = Cluster.objects.get(slug="west")

    def inject(self, cluster: Cluster, fault: str, **params: Any) -> None:
        simulated.inject(cluster.endpoint, fault, state_file=cluster.options["state_file"], **params)

    def clear(self, cluster: Cluster, fault: str = "") -> None:
        simulated.clear(cluster.endpoint, fault, state_file=cluster.options["state_file"])

    def finish(self, job: Job) -> None:
        """Let the clusters' jobs run to their end (an hour) and follow them."""
        self.fleet.run_for(HOUR + 1)
        self.follow(self.fleet.later(HOUR + 1))


# ------------------------------------------------------------------------------------------------ faults


def refused_at_submit(s: Scenario) -> Row:
    s.inject(s.east, "submit_refused", message="partition gpu-a has no such QOS")
    job = s.submit()
    s.cycle()  # east refuses: placed elsewhere
    s.place_again(job)
    assert job.attempts.get(number=1).outcome == Attempt.Outcome.REFUSED
    s.finish(job)
    return s.row("refusal at submit (one cluster)", job, state="succeeded", retries=0, copies=1)


def refused_everywhere(s: Scenario) -> Row:
    s.inject(s.east, "submit_refused", message="partition gpu-a has no such QOS")
    s.inject(s.west, "submit_refused", message="account lab-x is not allowed here")
    job = s.submit()
    s.cycle()
    s.place_again(job)
    s.cycle()
    job.refresh_from_db()
    assert "not allowed here" in job.message or "no such QOS" in job.message
    return s.row("refusal at submit (every cluster)", job, state="failed", retries=0, copies=0)


def transient_error(s: Scenario) -> Row:
    s.inject(s.east, "submit_error", times=2)
    job = s.submit()
    s.cycle()
    assert Attempt.objects.get(job=job).dispatch_tries == 1
    s.cycle(s.fleet.later(15))  # its 10 s backoff ran out: sent again, fails again
    assert Attempt.objects.get(job=job).dispatch_tries == 2
    s.cycle(s.fleet.later(40))  # after 20 s more: taken
    s.follow(s.fleet.later(40))
    s.finish(job)
    return s.row("transient error at submit", job, state="succeeded", retries=0, copies=1)


def partition(seconds: int, failed_syncs: int) -> Callable[[Scenario], Row]:
    def run(s: Scenario) -> Row:
        job = s.start(regions=[])
        s.inject(s.east, "unreachable")
        s.sync(s.east, failed_syncs)
        s.follow(s.fleet.later(seconds))
        s.recover(s.fleet.later(seconds))
        if seconds > s.east.failover_after:
            s.cycle(s.fleet.later(seconds))  # restarted on west
            s.follow(s.fleet.later(seconds))
        s.clear(s.east)
        s.sync(s.east)
        s.follow(s.fleet.later(seconds))  # east answers: the old copy is stopped (its replacement runs)
        s.finish(job)
        return s.row(f"cluster unreachable {_span(seconds)}", job, state="succeeded", retries=0, copies=1)

    return run


def node_lost(s: Scenario) -> Row:
    s.inject(s.east, "node_lost", after=60)
    job = s.start()
    s.clear(s.east)  # later jobs run cleanly
    s.fleet.run_for(61)
    s.follow(s.fleet.later(61))
    s.place_again(job)
    s.finish(job)
    return s.row("node lost mid-run", job, state="succeeded", retries=1, copies=1)


def bad_image(s: Scenario) -> Row:
    s.inject(s.east, "image_pull", message='pull access denied for "lab/train", repository does not exist')
    job = s.submit()
    s.cycle()
    s.follow()  # east cannot pull it: placed elsewhere
    s.place_again(job)
    s.finish(job)
    return s.row("bad image (one cluster)", job, state="succeeded", retries=0, copies=1)


def partial_gang(s: Scenario) -> Row:
    s.inject(s.east, "partial_gang", running=1)
    job = s.submit(workers=2)
    s.cycle()
    s.clear(s.east)
    s.follow()
    assert Job.objects.get(pk=job.pk).state == Job.State.PLACING  # one of two workers: not running
    s.follow(s.fleet.later(s.east.start_timeout + 1))  # requeued whole
    s.place_again(job)
    s.finish(job)
    return s.row("partial gang", job, state="succeeded", retries=0, copies=1)


def time_limit(s: Scenario) -> Row:
    job = s.start(time_limit=600)
    s.follow(s.fleet.later(601))  # signalled, its tier's grace
    s.fleet.run_for(10)  # it checkpointed and exited
    s.follow(s.fleet.later(611))
    return s.row("time limit reached", job, state="failed", retries=0, copies=0)


def cordon(s: Scenario) -> Row:
    job = s.start()
    node = job.attempts.get().assignments.get().node
    with s.capture(execute=True):
        cluster_actions.cordon_node(s.fleet.user("adam"), node, "fan noise")
    s.recover()
    s.finish(job)
    return s.row("cordon", job, state="succeeded", retries=0, copies=1)


def drain(s: Scenario) -> Row:
    job = s.start()
    node = job.attempts.get().assignments.get().node
    with s.capture(execute=True):
        cluster_actions.drain_node(s.fleet.user("adam"), node, "PSU swap", grace_seconds=120)
    s.recover()  # signalled
    s.fleet.run_for(10)
    s.follow(s.fleet.later(10))  # it checkpointed and exited: requeued
    s.place_again(job)
    s.finish(job)
    return s.row("graceful drain", job, state="succeeded", retries=0, copies=1)


def _span(seconds: int) -> str:
    return f"{seconds // 60} min" if seconds >= 120 else f"{seconds} s"


FAULTS: dict[str, Callable[[Scenario], Row]] = {
    "refused": refused_at_submit,
    "refused_everywhere": refused_everywhere,
    "transient": transient_error,
    "unreachable_30s": partition(30, 1),
    "unreachable_2min": partition(120, 3),
    "unreachable_15min": partition(15 * 60 + 1, 3),
    "node_lost": node_lost,
    "bad_image": bad_image,
    "partial_gang": partial_gang,
    "time_limit": time_limit,
    "cordon": cordon,
    "drain": drain,
}


@pytest.mark.parametrize("fault", FAULTS)
def test_fault_matrix_simulated(fleet: Fleet, django_capture_on_commit_callbacks: Any, fault: str) -> None:
    record(FAULTS[fault](Scenario(fleet, django_capture_on_commit_callbacks)), fault)
