"""The stable endpoint, with real replica processes: who may call it, what it forwards, load from threads that
the replica count follows, a replica killed while the endpoint keeps answering, a bad revision that never
answers a request, and a cold start from zero replicas."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.db import connections
from django.test import Client

from serving import actions
from serving.models import Replica, Service
from tenancy import actions as tenancy_actions
from tests.scheduler.conftest import Fleet
from tests.serving.harness import Plant, ready, service_fields

# Threads send the requests (each its own database connection): the test's writes must be committed.
pytestmark = pytest.mark.django_db(transaction=True)
URL = "/serve/demo/vision/chat/"


def make(fleet: Fleet, **more: Any) -> Service:
    return actions.create_service(
        fleet.user("alice"), team=fleet.world.teams["vision"], name="chat", **service_fields(**more)
    )


def client_of(fleet: Fleet, username: str | None) -> Client:
    if username is None:
        return Client()
    _, raw = tenancy_actions.issue_token(fleet.user(username), name="tests")
    return Client(HTTP_AUTHORIZATION=f"Bearer {raw}")


class Load:
    """``threads`` threads sending GETs to the endpoint until stopped; keeps every answer's status and body."""

    def __init__(self, client: Client, threads: int, path: str = "hello") -> None:
        self.client, self.path = client, path
        self.answers: list[tuple[int, str, str]] = []
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self.run) for _ in range(threads)]

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                response = self.client.get(URL + self.path)
                body = body_of(response)
                self.answers.append((response.status_code, body, response.headers.get("X-QM-Replica", "")))
        finally:
            connections.close_all()

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join()


@pytest.fixture
def alice(fleet: Fleet) -> Client:
    return client_of(fleet, "alice")


def body_of(response: Any) -> str:
    if response.streaming:
        return b"".join(response.streaming_content).decode()
    return str(response.content.decode())


def test_who_may_call_it_and_what_it_forwards(fleet: Fleet, plant: Plant, alice: Client) -> None:
    service = make(fleet)
    plant.settle(service, 2)
    [replica] = ready(service)
    response = alice.post(URL + "v1/chat?x=1", data=b"{}", content_type="application/json")
    assert response.status_code == 200
    assert body_of(response) == f"replica-{replica.pk}-r1 POST /v1/chat?x=1"
    assert response["X-QM-Replica"] == str(replica.pk)
    assert response["X-QM-Revision"] == "1"
    assert "Connection" not in response
    assert response["Content-Security-Policy"] == "sandbox"  # its pages cannot script the portal
    assert client_of(fleet, None).get(URL).status_code == 401
    assert client_of(fleet, "trent").get(URL).status_code == 404  # another organization's team
    assert client_of(fleet, "mallory").get(URL).status_code == 404
    assert Client(HTTP_AUTHORIZATION="Bearer qm_nonsense").get(URL).status_code == 401
    assert alice.get("/serve/demo/vision/nothing/").status_code == 404
    actions.update_service(fleet.user("alice"), service, public=True)
    assert client_of(fleet, None).get(URL + "x").status_code == 200
    actions.stop_service(fleet.user("alice"), service)
    stopped = alice.get(URL)
    assert stopped.status_code == 503
    assert "stopped" in stopped.json()["detail"]


def test_replicas_follow_load_from_threads(fleet: Fleet, plant: Plant, alice: Client) -> None:
    service = make(fleet, min_replicas=1, max_replicas=3, target=2.0, scale_up_window=10, scale_down_window=20)
    plant.settle(service, 2)
    seen: set[str] = set()
    with Load(alice, threads=4) as load:
        while service.desired_replicas < 3:  # each tick "lasts" 5 s of the control loop's clock
            time.sleep(0.5)
            service = plant.tick(service)
            assert len(load.answers) < 20_000
        service = plant.settle(service, 2)
        time.sleep(1.0)
        seen = {replica for _, _, replica in load.answers[-60:]}
    assert len(ready(service)) == 3
    assert len(seen) == 3  # the load is spread over the replicas
    assert {status for status, _, _ in load.answers} == {200}
    for _ in range(8):  # no load: back down once the down window has passed
        service = plant.tick(service)
    assert service.desired_replicas == 1
    sample = service.samples.filter(requests__gt=0).order_by("-at").first()
    assert sample is not None
    assert sample.p95_ms is not None


def test_a_killed_replica_is_replaced_and_the_endpoint_keeps_answering(
    fleet: Fleet, plant: Plant, alice: Client
) -> None:
    service = make(fleet, min_replicas=2, max_replicas=2)
    plant.settle(service, 2)
    first, _ = ready(service)
    with Load(alice, threads=2) as load:
        time.sleep(0.5)
        plant.kill(first)
        for _ in range(6):
            time.sleep(0.3)
            service = plant.tick(service)
        time.sleep(0.5)
    assert {status for status, _, _ in load.answers} == {200}
    assert len(ready(service)) == 2
    assert first.pk not in [r.pk for r in ready(service)]
    assert Replica.objects.get(pk=first.pk).state == Replica.State.GONE


def test_a_bad_revision_never_answers(fleet: Fleet, plant: Plant, alice: Client) -> None:
    service = make(fleet, min_replicas=1, max_replicas=1)
    plant.settle(service, 2)
    plant.behaviour[2] = (500, 0.0)
    with Load(alice, threads=2) as load:
        actions.update_service(fleet.user("alice"), service, image="ghcr.io/lab/serve:broken")
        for _ in range(6):
            time.sleep(0.2)
            service = plant.tick(service)
    assert load.answers
    assert {status for status, _, _ in load.answers} == {200}
    assert all(body.split()[0].endswith("-r1") for _, body, _ in load.answers)
    assert service.revision is not None
    assert service.revision.number == 1


@pytest.fixture
def quick_cold_start(settings: Any) -> None:
    settings.SERVE_COLD_START_SECONDS = 30


def test_scale_to_zero_and_a_cold_start(fleet: Fleet, plant: Plant, alice: Client, quick_cold_start: None) -> None:
    service = make(fleet, min_replicas=0, max_replicas=2, scale_to_zero_after=30)
    plant.settle(service, 1)  # never asked: no replica
    assert service.desired_replicas == 0
    assert not ready(service)
    answers: list[Any] = []

    def ask() -> None:
        try:
            answers.append(alice.get(URL + "cold"))
        finally:
            connections.close_all()

    waiting = threading.Thread(target=ask)
    waiting.start()
    for _ in range(40):  # the control loop, while the request waits
        time.sleep(0.25)
        service = plant.tick(service)
        if not waiting.is_alive():
            break
    waiting.join()
    assert answers[0].status_code == 200, body_of(answers[0])
    assert body_of(answers[0]).endswith("GET /cold")
    for _ in range(10):  # nothing more: back to zero after 30 s idle
        service = plant.tick(service)
    assert service.desired_replicas == 0
    assert not service.replicas.exclude(state=Replica.State.GONE).exists()


def test_at_zero_with_no_wait_it_answers_503_with_retry_after(fleet: Fleet, alice: Client, settings: Any) -> None:
    settings.SERVE_COLD_START_SECONDS = 0
    make(fleet, min_replicas=0, max_replicas=1, scale_to_zero_after=30)
    response = alice.get(URL)
    assert response.status_code == 503
    assert response["Retry-After"]
    assert "no replica ready" in response.json()["detail"]
