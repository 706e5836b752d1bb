"""TPU slices as the unit, end to end: a job asking for a slice type is checked at submission, placed by the
engine on a slot of that shape, provisioned on exactly that slot (one queued resource; several slices for
multislice), and ended by the exit code its startup script reports through the job token; another team's
slice is never used. The real loop (``actions.submit_job``, the cycle, dispatch, follow) against the local
Cloud TPU API of ``tests/clusters/tpu_server.py``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from clusters.actions.sync import sync_cluster
from clusters.models import Cluster
from scheduler.actions import checkpoints
from scheduler.models import Attempt, Job
from scheduler.placement import feasibility
from tests.clusters.factories import tpu_cluster
from tests.clusters.tpu_server import TpuServer
from tests.scheduler.conftest import Fleet
from tests.scheduler.fault_harness import Scenario, events
from tests.scheduler.test_checkpoints import as_job

pytestmark = pytest.mark.django_db

SLICES = {"v5p-32/2x2x4": 2, "v5p-8": 1}


@pytest.fixture
def tpu() -> Iterator[TpuServer]:
    with TpuServer(progression=("ACCEPTED", "ACTIVE"), page_size=50) as server:
        server.nodes["train-a"]["labels"]["quartermaster-team"] = "speech"  # lent to another team than alice's
        yield server


@pytest.fixture
def s(fleet: Fleet, django_capture_on_commit_callbacks: Any, tpu: TpuServer) -> Scenario:
    Cluster.objects.filter(slug__in=("east", "west")).update(status=Cluster.Status.DISABLED)
    scenario = Scenario(fleet, django_capture_on_commit_callbacks)
    options: dict[str, Any] = {"project": tpu.project, "zone": tpu.zone, "slices": SLICES, "host_cpu": 208_000}
    scenario.added(tpu_cluster(fleet.org, "tpu", tpu.url, **options), preference=100)
    return scenario


def submit(s: Scenario, **fields: Any) -> Job:
    return s.fleet.submit(**{"accelerators": 1, "accelerator_types": [], **fields})


def report(job: Job, code: int) -> None:
    attempt = Attempt.objects.get(job=job, number=Job.objects.get(pk=job.pk).attempt)
    answer = as_job(checkpoints.token_for(attempt)).post(f"/api/v1/jobs/{job.pk}/report/", {"exit_code": code})
    assert answer.status_code == 201, answer.content


def test_a_v5p_32_job_runs_on_the_v5p_32_slice_the_engine_chose(s: Scenario, tpu: TpuServer) -> None:
    job = submit(s, tpu_type="v5p-32")
    assert (job.accelerator_types, job.accelerators, job.tpu_type) == (["v5p"], 16, "v5p-32")  # quotas count chips
    s.cycle()
    attempt = job.attempts.get()
    (assignment,) = attempt.assignments.select_related("node")
    assert assignment.node.name == "qm-v5p-32-2x2x4-1"  # the engine chose the slot
    assert attempt.backend_id, (events(job), attempt.message, attempt.dispatch_tries)
    (spec,) = tpu.queued_resources[attempt.backend_id].body["tpu"]["nodeSpec"]
    assert spec["nodeId"] == "qm-v5p-32-2x2x4-1"  # and exactly that was provisioned
    assert spec["node"]["acceleratorConfig"] == {"type": "V5P", "topology": "2x2x4"}
    s.follow()
    s.follow()
    assert Job.objects.get(pk=job.pk).state == Job.State.RUNNING, events(job)
    assert tpu.nodes["qm-v5p-32-2x2x4-1"]["labels"]["quartermaster-job"] == attempt.backend_key

    report(job, 0)  # the startup script's curl, from the slice's worker 0
    s.follow()
    job.refresh_from_db()
    assert job.state == Job.State.SUCCEEDED, events(job)
    attempt.refresh_from_db()
    assert (attempt.outcome, attempt.exit_code, attempt.cleanup_pending) == (Attempt.Outcome.SUCCEEDED, 0, False)
    assert tpu.queued_resources[attempt.backend_id].deleting  # what it ran on is deleted
    assert [r.query.get("force") for r in tpu.mutations() if r.method == "DELETE"] == ["true"]


def test_multislice_of_two_is_one_queued_resource_of_two_slices(s: Scenario, tpu: TpuServer) -> None:
    job = submit(s, tpu_type="v5p-32", tpu_topology="2x2x4", workers=2)
    s.cycle()
    attempt = job.attempts.get()
    nodes = sorted(attempt.assignments.values_list("node__name", flat=True))
    assert nodes == ["qm-v5p-32-2x2x4-1", "qm-v5p-32-2x2x4-2"]
    specs = tpu.queued_resources[attempt.backend_id].body["tpu"]["nodeSpec"]
    assert sorted(spec["nodeId"] for spec in specs) == nodes
    s.follow()
    s.follow()
    assert Job.objects.get(pk=job.pk).state == Job.State.RUNNING, events(job)
    assert {name for name in nodes if name in tpu.nodes} == set(nodes)

    other = submit(s, tpu_type="v5p-32")  # both v5p-32 slots are held: it waits
    s.cycle()
    other.refresh_from_db()
    assert other.state == Job.State.PENDING, events(other)
    assert not other.attempts.exists()
    assert other.pending_message.startswith("A v5p-32 slice in tpu is reserved for it from about")  # not "v5p"


def test_a_reported_failure_fails_the_attempt_and_deletes_its_slices(s: Scenario, tpu: TpuServer) -> None:
    job = submit(s, tpu_type="v5p-8", max_retries=0)
    s.cycle()
    s.follow()
    s.follow()
    report(job, 2)
    s.follow()
    job.refresh_from_db()
    assert job.state == Job.State.FAILED, events(job)
    assert "exited with code 2" in job.message
    attempt = job.attempts.get()
    assert (attempt.outcome, attempt.reason, attempt.exit_code) == (Attempt.Outcome.FAILED, "exit_code", 2)
    assert tpu.queued_resources[attempt.backend_id].deleting


def test_another_teams_slice_is_never_used(s: Scenario, tpu: TpuServer) -> None:
    """``train-a`` is an idle v5p-16 slice its owner lends to team speech (docs/backends.md, "Slices lent to a
    team"): it is speech's capacity alone, so a v5p-16 job of alice's (team vision) is refused at submission (no
    slot of that shape, no slice lent to vision), and nothing is provisioned or given a job. ``serve-c``, a slice
    nobody lent, is not Quartermaster's at all: cordoned, no chips offered."""
    nodes = Cluster.objects.get(slug="tpu").nodes
    lent = nodes.get(name="train-a")
    assert (lent.state, lent.accelerators_allocatable, lent.labels["qm/lent-to"]) == ("schedulable", 8, "speech")
    unlent = nodes.get(name="serve-c")
    assert (unlent.state, unlent.accelerators_allocatable) == (unlent.State.CORDONED, 0)
    with pytest.raises(ValidationError) as refused:
        submit(s, tpu_type="v5p-16")
    assert "tpu_type" in refused.value.message_dict, refused.value.message_dict
    assert "No v5p-16 slice exists" in refused.value.message_dict["tpu_type"][0]  # the shape asked for
    assert not Job.objects.exists()
    assert tpu.mutations() == []


def test_a_big_slice_asks_for_all_its_chips(s: Scenario) -> None:
    """A v5p-256 is 128 chips, past the cap on accelerators per worker (64), which counts GPUs in a host: a
    TPU job asks for its slices' chips whatever their number (here, on a cluster without such slices, it is
    refused as never fitting, naming the type)."""
    with pytest.raises(ValidationError) as refused:
        submit(s, tpu_type="v5p-256")
    assert list(refused.value.message_dict) == ["tpu_type"], refused.value.message_dict
    assert "No v5p-256 slice exists" in refused.value.message_dict["tpu_type"][0]
    assert "accelerators" not in refused.value.message_dict["tpu_type"][0]
    Cluster.objects.filter(slug="tpu").update(
        options={**Cluster.objects.get(slug="tpu").options, "slices": {"v5p-256": 1}}
    )
    sync_cluster(Cluster.objects.get(slug="tpu").pk)
    feasibility.forget(s.fleet.org)
    job = submit(s, tpu_type="v5p-256")
    assert (job.accelerators, job.accelerator_types) == (128, ["v5p"])
    s.cycle()
    assert job.attempts.get().assignments.get().node.name == "qm-v5p-256-1"


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"tpu_type": "v9x-8"}, "tpu_type", "no chip-count rule for TPU generation 'v9x'"),
        ({"tpu_type": "tpu-big"}, "tpu_type", "is not <generation>-<size>"),
        ({"tpu_type": "v5p-33"}, "tpu_type", "a v5p size counts TensorCores, two a chip, so it is even"),
        ({"tpu_type": "v5p-32", "tpu_topology": "2x2x2"}, "tpu_topology", "a v5p-32 slice has 16"),
        ({"tpu_type": "v5p-32", "tpu_topology": "2by2"}, "tpu_topology", "is not like 2x2x1"),
        ({"tpu_topology": "2x2x4"}, "tpu_topology", "needs a TPU type"),
    ],
)
def test_a_bad_tpu_request_is_refused_naming_the_field(
    s: Scenario, fields: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        submit(s, **fields)
    assert words in " ".join(refused.value.message_dict[field])


def test_the_api_refuses_an_unknown_tpu_type_with_a_400_naming_it(s: Scenario) -> None:
    client = APIClient()
    client.force_authenticate(s.fleet.user("alice"))
    body = {"name": "t", "time_limit": "1h", "image": "ghcr.io/lab/jax:1", "tpu_type": "v9x-8"}
    answer = client.post("/api/v1/jobs/", body, format="json")
    assert answer.status_code == 400, answer.content
    assert "no chip-count rule" in " ".join(answer.json()["error"]["fields"]["tpu_type"])
    body["tpu_type"] = "v5p-8"
    answer = client.post("/api/v1/jobs/", body, format="json")
    assert answer.status_code == 201, answer.content
    assert (answer.json()["tpu_type"], answer.json()["accelerators"], answer.json()["accelerator_types"]) == (
        "v5p-8",
        4,
        ["v5p"],
    )


def test_the_job_page_says_which_slices_it_asked_for(s: Scenario) -> None:
    job = submit(s, tpu_type="v5p-32", tpu_topology="2x2x4", workers=2)
    client = Client()
    client.force_login(s.fleet.user("alice"))
    page = client.get(reverse("job-detail", args=[job.pk]))
    assert page.status_code == 200
    assert "2 slices of v5p-32 (2x2x4)" in page.content.decode()
    assert "multislice" in page.content.decode()
