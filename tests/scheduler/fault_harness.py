"""The fault-injection matrix's harness, shared by every backend's file (``test_fault_matrix*.py``).

A ``Scenario`` drives one job through the real loop: ``actions.submit_job`` (through the ``fleet``),
``loop.run_cycle`` and ``dispatch.dispatch`` (``cycle``), ``follow.follow`` on every cluster of the
organization (``follow``), ``recover.recover`` and ``sync.sync_cluster``. A backend's scenario adds how its
cluster is made to misbehave and how the test plays the cluster's part (a kubelet, Google's queue, time).

``row`` reads back what became of the job: its end state, timeline, attempts, the retries it spent, whether
quota and budget were released (the engine's snapshot holds the current attempt only, and nothing once the
job ended), and how many copies ran to the end on their clusters. ``record`` writes it to
``test-artifacts/fault-matrix/`` (the session's summary prints the table, ``fault_table.py``) and checks
it against what the scenario expected.
"""

from __future__ import annotations

import json
import socket
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

import pytest

from clusters.actions import sync
from clusters.actions.sync import backend_for
from clusters.backends import simulated
from clusters.backends.base import BackendError, JobState, NotFound
from clusters.models import Cluster
from scheduler.models import Attempt, Job
from scheduler.placement import feasibility, follow, recover, snapshot
from tests.scheduler.conftest import Fleet
from tests.scheduler.fault_table import ARTIFACTS

HOUR = 3600


@dataclass
class Row:
    backend: str
    fault: str
    end_state: str = ""
    timeline: str = ""
    attempts: str = ""
    retries: int = 0
    released: bool = False
    copies_to_end: int = 0
    #: What differs on this backend (a fault it cannot have, what happens instead).
    note: str = ""
    expected: dict[str, Any] = field(default_factory=dict)


class Scenario:
    """One fault on the ``fleet``'s organization. Subclasses name their backend and say how a copy of the job
    is seen to have run to its end there (``finished_there``)."""

    backend = "simulated"

    def __init__(self, fleet: Fleet, capture: Any) -> None:
        self.fleet = fleet
        self.capture = capture

    def clusters(self) -> list[Cluster]:
        return list(Cluster.objects.filter(organization=self.fleet.org).order_by("pk"))

    def submit(self, **fields: Any) -> Job:
        return self.fleet.submit(**{"accelerators": 8, "time_limit": 2 * HOUR, **fields})

    def cycle(self, at: datetime | None = None) -> None:
        """A placement cycle, then every admitted attempt dispatched (what the on-commit tasks would do)."""
        with self.capture(execute=True):
            self.fleet.cycle(at)

    def follow(self, at: datetime | None = None) -> None:
        with self.capture(execute=True):
            for cluster in self.clusters():
                follow.follow(cluster.pk, at)

    def recover(self, at: datetime | None = None) -> dict[str, int]:
        with self.capture(execute=True):
            return recover.recover(self.fleet.org, at)

    def sync(self, cluster: Cluster, times: int = 1) -> None:
        for _ in range(times):
            sync.sync_cluster(cluster.pk)

    def added(self, cluster: Cluster, preference: int) -> Cluster:
        """A cluster the scenario added to the fleet, with its placement preference (0-100)."""
        Cluster.objects.filter(pk=cluster.pk).update(preference=preference)
        feasibility.forget(self.fleet.org)  # what the fleet can hold changed
        cluster.refresh_from_db()
        return cluster

    def cut_off(self, cluster: Cluster) -> str:
        """Point ``cluster`` at a closed port, so every call to it fails unreachable; returns its endpoint."""
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            closed = s.getsockname()[1]
        endpoint = cluster.endpoint
        Cluster.objects.filter(pk=cluster.pk).update(endpoint=f"http://127.0.0.1:{closed}")
        return endpoint

    def reconnect(self, cluster: Cluster, endpoint: str) -> None:
        Cluster.objects.filter(pk=cluster.pk).update(endpoint=endpoint)

    def refuse_on_simulated(self, message: str) -> None:
        """Every simulated cluster of the fleet refuses what is submitted to it, in ``message``'s words."""
        for cluster in Cluster.objects.filter(organization=self.fleet.org, kind="simulated"):
            state_file = cluster.options["state_file"]
            simulated.inject(cluster.endpoint, "submit_refused", state_file=state_file, message=message)

    def later(self, seconds: float) -> datetime:
        return self.fleet.later(seconds)

    def refused_by_every_cluster(self, fault: str, words: tuple[str, ...], note: str = "") -> Row:
        """Submit a job that every cluster refuses (the faults are set): it fails with one cluster's words."""
        job = self.submit()
        self.cycle()
        self.place_again(job)
        self.cycle()
        job.refresh_from_db()
        assert job.state == Job.State.FAILED, events(job)
        assert any(w in job.message for w in words), job.message
        return self.row(fault, job, note=note, state="failed", retries=0, copies=0)

    def start(self, **fields: Any) -> Job:
        """Submit, place, dispatch and see it running."""
        job = self.submit(**fields)
        self.cycle()
        self.play()
        self.follow()
        assert Job.objects.get(pk=job.pk).state == Job.State.RUNNING, events(job)
        return job

    def place_again(self, job: Job) -> None:
        """Place a requeued job (after its backoff, if any) and follow it."""
        job.refresh_from_db()
        self.cycle(job.not_before)
        self.play()
        self.follow(job.not_before)

    def play(self) -> None:
        """Play the clusters' part after a dispatch (start what they were given); nothing by default."""

    def attempt_on(self, job: Job, cluster: Cluster) -> Attempt:
        return Attempt.objects.get(job=job, cluster=cluster, outcome=Attempt.Outcome.ACTIVE)

    def finished_there(self, attempt: Attempt) -> bool:
        """Whether this attempt's copy ran to its end on its cluster: the cluster says it succeeded, and it was
        not a copy Quartermaster stopped (one that checkpoints on SIGTERM may exit 0 when interrupted)."""
        if not attempt.backend_id or attempt.stop_reason:
            return False
        try:
            return backend_for(attempt.cluster).status(attempt.backend_id).state == JobState.SUCCEEDED
        except (NotFound, BackendError):
            return False

    def row(self, fault: str, job: Job, note: str = "", **expected: Any) -> Row:
        job.refresh_from_db()
        attempts = list(job.attempts.select_related("cluster").order_by("number"))
        held = [w for w in snapshot.build(self.fleet.org)[0].running if w.id == str(job.pk)]
        active = [a for a in attempts if a.outcome == Attempt.Outcome.ACTIVE]
        return Row(
            backend=self.backend,
            fault=fault,
            end_state=job.state,
            timeline=" → ".join(job.events.order_by("pk").values_list("reason", flat=True)),
            attempts="; ".join(f"{a.number}@{a.cluster.slug}: {a.outcome} {a.reason}".strip() for a in attempts),
            retries=job.retries,
            # Quota and budget are held by the current attempt only, and by none once the job has ended.
            released=len(held) == len(active) <= 1
            and all(w.cluster == a.cluster.slug for w, a in zip(held, active, strict=True)),
            copies_to_end=sum(self.finished_there(a) for a in attempts),
            note=note,
            expected=expected,
        )


def record(row: Row, key: str) -> None:
    """Write the row for the table, then check it: the end state, the retries spent, quota and budget released,
    the copies that ran to the end. (Each scenario checks the words and the cluster's side itself.)"""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / f"{row.backend}-{key}.json").write_text(json.dumps(asdict(row)))
    expected = row.expected
    assert row.end_state == expected["state"], row
    assert row.retries == expected["retries"], row
    assert row.released, row
    assert row.copies_to_end == expected["copies"], row


def skipped(backend: str, key: str, fault: str, reason: str) -> None:
    """A fault that cannot happen on ``backend``: its row says why, and the test is skipped with that reason."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    row = Row(backend=backend, fault=fault, end_state="skipped", note=reason)
    (ARTIFACTS / f"{backend}-{key}.json").write_text(json.dumps(asdict(row)))
    pytest.skip(f"{fault} on {backend}: {reason}")


def events(job: Job) -> list[tuple[str, str]]:
    """The job's timeline with its words (for assertion messages)."""
    return list(job.events.order_by("pk").values_list("reason", "message"))
