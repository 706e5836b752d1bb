"""Spot capacity (docs/scheduling.md §Disruption): a job accepts spot or not; only jobs that do are placed on spot
nodes (a node's capacity-type labels say it), and they are sent as spot where the cluster tells spot work apart;
only preemptible work may ask."""

from __future__ import annotations

import pytest
from django.test import Client

from clusters.models import Node
from scheduler.models import Job
from scheduler.placement import dispatch, feasibility
from tests.conftest import api_client
from tests.scheduler.conftest import Fleet
from tests.scheduler.test_pages import form_data

pytestmark = pytest.mark.django_db


def spot_east(fleet: Fleet) -> None:
    """The east cluster's nodes are spot capacity, as Karpenter labels them; west's are not."""
    for node in Node.objects.filter(cluster=fleet.clusters["east"]):
        Node.objects.filter(pk=node.pk).update(labels={**(node.labels or {}), "karpenter.sh/capacity-type": "spot"})
    feasibility.forget(fleet.org)


def test_only_a_job_that_accepts_spot_is_placed_on_spot_nodes_and_it_is_sent_as_spot(fleet: Fleet) -> None:
    spot_east(fleet)
    careful = [fleet.submit(accelerators=8, name=f"careful-{i}") for i in range(4)]
    fleet.cycle()
    placed = [j for j in careful if Job.objects.get(pk=j.pk).state != Job.State.PENDING]
    assert len(placed) == 2  # west's two nodes; east's four are spot
    assert {j.attempts.get().cluster.slug for j in placed} == {"west"}
    thrifty = fleet.submit(accelerators=8, name="thrifty", spot=True)
    fleet.cycle()
    attempt = thrifty.attempts.get()
    assert attempt.cluster.slug == "east"
    assert dispatch.spec_for(attempt).spot


def test_only_preemptible_work_may_ask_for_spot(fleet: Fleet) -> None:
    lena = api_client(fleet.user("alice"))
    body = {"name": "cheap", "image": "ghcr.io/lab/train:1", "command": ["python"], "time_limit": "1h", "spot": True}
    done = lena.post("/api/v1/jobs/", body, format="json")
    assert done.status_code == 201, done.json()
    assert done.json()["spot"] is True
    refused = lena.post("/api/v1/jobs/", {**body, "preemptible": False}, format="json")
    assert refused.status_code == 400
    assert set(refused.json()["error"]["fields"]) == {"spot"}
    assert "Only preemptible work may run on spot capacity" in str(refused.json())


def test_a_tier_may_accept_spot_for_its_jobs_unless_they_say_otherwise(fleet: Fleet) -> None:
    adam = api_client(fleet.user("adam"))
    tier = {"name": "normal", "value": 50, "is_default": True, "accepts_spot": True, "reason": "cheap by default"}
    changed = adam.post("/api/v1/tiers/", tier, format="json")
    assert changed.status_code == 200, changed.json()
    assert changed.json()["accepts_spot"] is True
    refused = adam.post(
        "/api/v1/tiers/", {**tier, "name": "urgent", "value": 1000, "preemptible": False}, format="json"
    )
    assert refused.status_code == 400
    assert set(refused.json()["error"]["fields"]) == {"accepts_spot"}

    alice = api_client(fleet.user("alice"))
    body = {"name": "cheap", "image": "ghcr.io/lab/train:1", "command": ["python"], "time_limit": "1h"}
    assert alice.post("/api/v1/jobs/", body, format="json").json()["spot"] is True  # as its tier says
    assert alice.post("/api/v1/jobs/", {**body, "spot": False}, format="json").json()["spot"] is False
    assert alice.post("/api/v1/jobs/", {**body, "preemptible": False}, format="json").json()["spot"] is False
    # The form: "as its priority tier says" unless the researcher picks
    page = Client()
    page.force_login(fleet.user("alice"))
    form = form_data(fleet, name="from-the-form", spot="")
    assert page.post("/jobs/new/", form).status_code == 302
    assert page.post("/jobs/new/", {**form, "name": "not-on-spot", "spot": "no"}).status_code == 302
    assert dict(Job.objects.filter(name__in=["from-the-form", "not-on-spot"]).values_list("name", "spot")) == {
        "from-the-form": True,
        "not-on-spot": False,
    }
