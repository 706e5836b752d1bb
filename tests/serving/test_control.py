"""The control loop with real replica processes on the simulated fleet: replicas follow the load up and down,
a dead replica is replaced, a bad revision is rolled back while the old one keeps answering; and the actions'
refusals (bad input names the field, nothing written; another team's service is untouchable)."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from prometheus_client import REGISTRY

from scheduler.models import Job
from serving import actions
from serving import load as counted
from serving.models import Replica, Revision, Service, ServiceSample
from tests.scheduler.conftest import Fleet
from tests.serving.harness import Plant, ready, service_fields, states

pytestmark = pytest.mark.django_db


def make(fleet: Fleet, **more: Any) -> Service:
    return actions.create_service(
        fleet.user("alice"), team=fleet.world.teams["vision"], name="chat", **service_fields(**more)
    )


def load(service: Service, requests: int, inflight: int = 0) -> None:
    """What the data plane would have counted over one tick (the endpoint's own tests send real requests)."""
    tally = counted.Tally()
    for _ in range(requests):
        tally.begin(service.pk, 0)
        tally.end(service.pk, 0, 12.0, error=False)
    counted.add(tally.take())


def test_a_service_starts_its_minimum_and_its_replica_becomes_ready(fleet: Fleet, plant: Plant) -> None:
    service = make(fleet, min_replicas=1)
    assert service.revision is not None
    assert service.revision.state == Revision.State.ACTIVE
    assert service.tier == fleet.tiers["urgent"] or service.tier is None or not service.tier.preemptible
    service = plant.settle(service, 2)
    [replica] = ready(service)
    job = replica.job
    assert job.kind == Job.Kind.SERVICE
    assert job.spread_group == f"service-{service.pk}"
    assert job.env["QM_SERVICE"] == "chat"
    assert job.env["QM_REVISION"] == "1"
    assert job.serve_health_path == "/healthz"
    assert job.serve_port == 0  # the service names no port: each replica is handed one
    attempt = job.attempts.get()
    assert replica.url == f"http://127.0.0.1:{attempt.serve_port}/"


def test_a_replica_whose_node_no_longer_has_its_address_gets_no_traffic(fleet: Fleet, plant: Plant) -> None:
    """Checked when used: the control loop takes a replica's address for the data plane only while it is still
    one of its node's as the inventory knows them (a node renumbered since the replica reported is not followed
    to an address that may now be another machine's)."""
    service = make(fleet, min_replicas=1)
    service = plant.settle(service, 2)
    [replica] = ready(service)
    node = replica.job.attempts.get().assignments.get().node
    node.addresses = ["10.44.0.9"]  # what a sync would now copy from the cluster
    node.save(update_fields=["addresses"])
    service = plant.tick(service)
    replica.refresh_from_db()
    assert replica.url == ""  # the data plane's table has only replicas with an address (serving/dataplane/source.py)
    node.addresses = ["127.0.0.1"]  # the inventory says so again: it is followed again
    node.save(update_fields=["addresses"])
    service = plant.tick(service)
    replica.refresh_from_db()
    assert replica.url.startswith("http://127.0.0.1:")


def test_replicas_follow_a_load_step_up_and_back_down(fleet: Fleet, plant: Plant) -> None:
    service = make(fleet, min_replicas=1, max_replicas=4, target=5.0, scale_up_window=10, scale_down_window=30)
    service = plant.settle(service, 2)
    assert len(ready(service)) == 1
    for _ in range(6):  # 90 requests per 5 s tick: 18 rps, four replicas' worth at 5 each
        load(service, 90)
        service = plant.tick(service)
    assert service.desired_replicas == 4
    service = plant.settle(service, 2)
    assert len(ready(service)) == 4
    for _ in range(3):  # load falls to one replica's worth: nothing happens within the down window
        load(service, 20)
        service = plant.tick(service)
    assert service.desired_replicas == 4
    for _ in range(8):
        load(service, 20)
        service = plant.tick(service)
    assert service.desired_replicas == 1
    service = plant.settle(service, 2)
    assert len(ready(service)) == 1
    assert states(service).get(Replica.State.DRAINING, 0) == 0
    stopped = Job.objects.filter(replica__service=service, state=Job.State.CANCELLED).count()
    assert stopped == 3
    sample = service.samples.order_by("-at").first()
    assert sample is not None
    assert sample.replicas_desired == 1


def test_a_dead_replica_is_replaced(fleet: Fleet, plant: Plant) -> None:
    service = make(fleet, min_replicas=2, max_replicas=2)
    service = plant.settle(service, 2)
    first, second = ready(service)
    plant.kill(first)
    for _ in range(6):
        service = plant.tick(service)
    replicas = ready(service)
    assert len(replicas) == 2
    assert first.pk not in [r.pk for r in replicas]
    assert second.pk in [r.pk for r in replicas]
    assert Replica.objects.get(pk=first.pk).state == Replica.State.GONE
    assert Job.objects.get(pk=first.job_id).state == Job.State.CANCELLED


def actions_counted(action: str) -> float:
    return REGISTRY.get_sample_value("qm_serving_actions_total", {"action": action}) or 0.0


def test_a_rolling_update_replaces_replicas_one_at_a_time(fleet: Fleet, plant: Plant) -> None:
    service = make(fleet, min_replicas=2, max_replicas=2)
    service = plant.settle(service, 2)
    promoted = actions_counted("promoted")
    actions.update_service(fleet.user("alice"), service, image="ghcr.io/lab/serve:2")
    most = 0
    for _ in range(12):
        service = plant.tick(service)
        live = service.replicas.exclude(state=Replica.State.GONE).count()
        most = max(most, live)
    assert most <= 3  # surge one
    service.refresh_from_db()
    assert service.revision is not None
    assert service.revision.number == 2
    assert [r.revision.number for r in ready(service)] == [2, 2]
    assert Revision.objects.get(service=service, number=1).state == Revision.State.SUPERSEDED
    assert actions_counted("promoted") == promoted + 1  # qm_serving_actions_total


def test_a_bad_revision_is_rolled_back(fleet: Fleet, plant: Plant) -> None:
    service = make(fleet, min_replicas=1, max_replicas=1)
    service = plant.settle(service, 2)
    plant.behaviour[2] = (500, 0.0)  # revision 2's health path answers 500
    rolled_back = actions_counted("rolled_back")
    actions.update_service(fleet.user("alice"), service, image="ghcr.io/lab/serve:broken")
    for _ in range(6):
        service = plant.tick(service)
    bad = Revision.objects.get(service=service, number=2)
    assert bad.state == Revision.State.FAILED
    assert "health check" in bad.reason
    assert service.revision is not None
    assert service.revision.number == 1
    assert [r.revision.number for r in ready(service)] == [1]
    assert not service.replicas.filter(revision=bad).exclude(state=Replica.State.GONE).exists()
    assert actions_counted("rolled_back") == rolled_back + 1


def test_stop_and_start(fleet: Fleet, plant: Plant) -> None:
    service = make(fleet, min_replicas=1)
    service = plant.settle(service, 2)
    actions.stop_service(fleet.user("alice"), service)
    service = plant.settle(service, 2)
    assert not service.replicas.exclude(state=Replica.State.GONE).exists()
    actions.start_service(fleet.user("alice"), service)
    service = plant.settle(service, 2)
    assert len(ready(service)) == 1


def test_rollback_rolls_out_the_revision_before(fleet: Fleet, plant: Plant) -> None:
    service = make(fleet, min_replicas=1, max_replicas=1)
    service = plant.settle(service, 2)
    actions.update_service(fleet.user("alice"), service, image="ghcr.io/lab/serve:2")
    service = plant.settle(service, 5)
    assert service.revision is not None
    assert service.revision.number == 2
    actions.rollback(fleet.user("alice"), service)
    service = plant.settle(service, 5)
    assert service.revision is not None
    assert service.revision.number == 3
    assert service.revision.image == "ghcr.io/lab/serve:1"


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"min_replicas": 3, "max_replicas": 2}, "min_replicas"),
        ({"max_replicas": 0}, "max_replicas"),
        ({"target": 0}, "target"),
        ({"metric": "vibes"}, "metric"),
        ({"health_path": "healthz"}, "health_path"),
        ({"port": 70000}, "port"),
        ({"min_replicas": 0}, "scale_to_zero_after"),
        ({"env": {"QM_SERVICE": "x"}}, "env"),
        ({"image": "", "command": []}, "command"),
        ({"colour": "blue"}, "colour"),
    ],
)
def test_bad_input_names_the_field_and_writes_nothing(fleet: Fleet, fields: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as refused:
        make(fleet, **fields)
    assert field in refused.value.message_dict
    assert not Service.objects.exists()


def test_bad_name_and_duplicate(fleet: Fleet) -> None:
    with pytest.raises(ValidationError) as refused:
        actions.create_service(fleet.user("alice"), team=fleet.world.teams["vision"], name="Chat API")
    assert "name" in refused.value.message_dict
    make(fleet)
    with pytest.raises(ValidationError) as refused:
        make(fleet)
    assert "already has a service" in refused.value.message_dict["name"][0]


def test_another_team_may_not_touch_a_service(fleet: Fleet) -> None:
    service = make(fleet)
    with pytest.raises(PermissionDenied):
        actions.scale(fleet.user("trent"), service, 1, 3)
    with pytest.raises(PermissionDenied):
        actions.stop_service(fleet.user("mallory"), service)
    with pytest.raises(PermissionDenied):
        actions.create_service(fleet.user("trent"), team=fleet.world.teams["vision"], name="x", **service_fields())
    service.refresh_from_db()
    assert service.max_replicas == 4
    assert service.state == Service.State.ACTIVE


def test_rps_counts_the_requests_that_arrive_not_only_those_answered(fleet: Fleet, plant: Plant) -> None:
    """A saturated service: requests reach the endpoint faster than its replica answers. The tick's rps is the
    load asked of it (the arrivals), so the autoscaler scales for the demand rather than the throughput."""
    service = make(fleet, min_replicas=1, max_replicas=4, target=5.0, scale_up_window=10, scale_down_window=30)
    service = plant.settle(service, 2)
    for _ in range(3):  # each 5 s tick: 90 arrive (18 rps, four replicas' worth), 10 are answered
        tally = counted.Tally()
        for _ in range(90):
            tally.begin(service.pk, 0)
        for _ in range(10):
            tally.end(service.pk, 0, 4000.0, error=False)
        counted.add(tally.take())
        service = plant.tick(service)
    sample = ServiceSample.objects.filter(service=service).order_by("-pk").first()
    assert sample is not None
    assert (sample.requests, sample.rps, sample.inflight) == (90, 18.0, 240)
    assert service.desired_replicas == 4


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"max_inflight": 0}, "max_inflight", "between 1 and 256, or none"),
        ({"max_inflight": 257}, "max_inflight", "between 1 and 256, or none"),
        ({"max_inflight": "many"}, "max_inflight", "whole number"),
        ({"max_rps": 0}, "max_rps", "between 1 and"),
    ],
)
def test_a_services_own_limits_stay_within_the_data_planes(
    fleet: Fleet, fields: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(ValidationError) as raised:
        make(fleet, **fields)
    assert words in " ".join(raised.value.message_dict[field])
    assert not Service.objects.exists()


def test_a_service_may_not_allow_itself_more_than_the_operators_rate(fleet: Fleet, settings: Any) -> None:
    settings.SERVE_MAX_RPS = 50
    with pytest.raises(ValidationError) as raised:
        make(fleet, max_rps=51)
    assert "between 1 and 50" in " ".join(raised.value.message_dict["max_rps"])
    service = make(fleet, max_rps=50, max_inflight=8)
    assert (service.max_rps, service.max_inflight) == (50, 8)
