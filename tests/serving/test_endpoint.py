"""The stable endpoint, answered by the data plane (``serving/dataplane/``) with real replica processes: who may
call it and what it forwards, load from threads that the replica count follows, a replica killed while the
endpoint keeps answering, a bad revision that never answers a request, a cold start from zero replicas, and the
bounds on waiting: each service's requests in flight, its queue, all queues together, its rate."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Any

import pytest
import requests
from django.db import connections
from prometheus_client import REGISTRY

from scheduler.models import Attempt
from serving import actions, dataplane, load
from serving.dataplane.table import Limits
from serving.models import Replica, Service
from tenancy import actions as tenancy_actions
from tenancy.models import ServiceAccount
from tests.scheduler.conftest import Fleet
from tests.serving.harness import Plane, Plant, ready, service_fields

# The data plane reads the database from threads of its own: the test's writes must be committed.
pytestmark = pytest.mark.django_db(transaction=True)
PATH = "/serve/demo/vision/chat/"


def make(fleet: Fleet, **more: Any) -> Service:
    return actions.create_service(
        fleet.user("alice"), team=fleet.world.teams["vision"], name="chat", **service_fields(**more)
    )


class Caller:
    """Someone calling the endpoint over HTTP: with a fresh API token of ``username``, or none."""

    def __init__(self, plane: Plane, fleet: Fleet, username: str | None = None, *, token: str | None = None) -> None:
        self.base = plane.url + PATH
        self.session = requests.Session()
        if username is not None:
            _, token = tenancy_actions.issue_token(fleet.user(username), name="tests")
        if token is not None:
            self.session.headers["Authorization"] = f"Bearer {token}"

    def get(self, path: str = "", **kwargs: Any) -> requests.Response:
        return self.session.get(self.base + path, timeout=60, **kwargs)

    def post(self, path: str = "", **kwargs: Any) -> requests.Response:
        return self.session.post(self.base + path, timeout=60, **kwargs)


class Load:
    """``threads`` threads sending GETs to the endpoint until stopped; keeps every answer's status, body and
    replica."""

    def __init__(self, caller: Caller, threads: int, path: str = "hello") -> None:
        self.caller, self.path = caller, path
        self.answers: list[tuple[int, str, str]] = []
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self.run) for _ in range(threads)]

    def run(self) -> None:
        session = requests.Session()
        session.headers.update(self.caller.session.headers)
        while not self.stopping.is_set():
            response = session.get(self.caller.base + self.path, timeout=60)
            self.answers.append((response.status_code, response.text, response.headers.get("X-QM-Replica", "")))

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join()


@pytest.fixture
def alice(plane: Plane, fleet: Fleet) -> Caller:
    return Caller(plane, fleet, "alice")


def test_who_may_call_it_and_what_it_forwards(fleet: Fleet, plant: Plant, plane: Plane, alice: Caller) -> None:
    service = make(fleet)
    plant.settle(service, 2)
    [replica] = ready(service)
    response = alice.post("v1/chat?x=1", data=b"{}", headers={"Content-Type": "application/json", "Cookie": "a=b"})
    assert response.status_code == 200
    assert response.text == f"replica-{replica.pk}-r1 POST /v1/chat?x=1"
    assert response.headers["X-QM-Replica"] == str(replica.pk)
    assert response.headers["X-QM-Revision"] == "1"
    assert response.headers["Content-Security-Policy"] == "sandbox"  # its pages cannot script the portal
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert Caller(plane, fleet).get().status_code == 401
    assert Caller(plane, fleet, "trent").get().status_code == 404  # another organization's team
    assert Caller(plane, fleet, "mallory").get().status_code == 404
    assert Caller(plane, fleet, token="qm_nonsense").get().status_code == 401
    assert Caller(plane, fleet, token="two words").get().status_code == 401
    nothing = requests.get(plane.url + "/serve/demo/vision/nothing/", headers=alice.session.headers, timeout=10)
    assert nothing.status_code == 404
    actions.update_service(fleet.user("alice"), service, public=True)
    time.sleep(0.3)  # the data plane's next table
    assert Caller(plane, fleet).get("x").status_code == 200
    assert Caller(plane, fleet, token="qm_nonsense").get().status_code == 401  # a token shown must be good
    actions.stop_service(fleet.user("alice"), service)
    time.sleep(0.3)
    stopped = alice.get()
    assert stopped.status_code == 503
    assert "stopped" in stopped.json()["detail"]
    assert stopped.headers["Retry-After"]


def test_every_answer_is_measured_by_who_gave_it(fleet: Fleet, plant: Plant, plane: Plane, alice: Caller) -> None:
    """``qm_dataplane_request_duration_seconds`` counts each answer by status class and by who answered (a replica
    relayed, or the data plane itself); its table's last load is a gauge (the DataPlaneTableStale alert)."""

    def answered(status: str, by: str) -> float:
        labels = {"status": status, "by": by}
        return REGISTRY.get_sample_value("qm_dataplane_request_duration_seconds_count", labels) or 0.0

    service = make(fleet)
    plant.settle(service, 2)
    before = {key: answered(*key) for key in (("2xx", "replica"), ("4xx", "plane"))}
    for _ in range(3):
        assert alice.get("x").status_code == 200
    assert Caller(plane, fleet).get().status_code == 401
    assert answered("2xx", "replica") == before[("2xx", "replica")] + 3
    assert answered("4xx", "plane") == before[("4xx", "plane")] + 1
    loaded = REGISTRY.get_sample_value("qm_dataplane_table_loaded_timestamp_seconds")
    assert loaded is not None
    assert time.time() - loaded < 5
    assert REGISTRY.get_sample_value("qm_dataplane_waiting_requests") == 0


def test_a_service_accounts_scope_decides_what_it_may_send(fleet: Fleet, plant: Plant, plane: Plane) -> None:
    service = make(fleet)
    plant.settle(service, 2)
    vision, lena = fleet.world.teams["vision"], fleet.user("lena")
    callers = {}
    for scope in ServiceAccount.Scope:
        _, raw = tenancy_actions.create_service_account(lena, vision, name=f"caller-{scope}", scope=scope)
        callers[scope] = Caller(plane, fleet, token=raw)
    assert {scope: c.get("x").status_code for scope, c in callers.items()} == dict.fromkeys(ServiceAccount.Scope, 200)
    posted = {scope: c.post("x", data=b"{}").status_code for scope, c in callers.items()}
    assert posted == {ServiceAccount.Scope.READ: 403, ServiceAccount.Scope.SUBMIT: 200, ServiceAccount.Scope.ADMIN: 200}
    assert "scoped 'read-only'" in callers[ServiceAccount.Scope.READ].post("x").json()["detail"]


def test_the_portal_answers_no_inference_request(fleet: Fleet, settings: Any) -> None:
    settings.SERVE_PUBLIC_URL = "https://serve.example.org"
    answer = fleet_client(fleet).post(PATH + "v1/predict", data=b"{}", content_type="application/json")
    assert answer.status_code == 404
    assert answer.json()["endpoint"] == "https://serve.example.org/serve/demo/vision/chat/v1/predict"


def fleet_client(fleet: Fleet) -> Any:
    from django.test import Client

    _, raw = tenancy_actions.issue_token(fleet.user("alice"), name="tests")
    return Client(HTTP_AUTHORIZATION=f"Bearer {raw}")


def test_replicas_follow_load_from_threads(fleet: Fleet, plant: Plant, alice: Caller) -> None:
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
    time.sleep(0.3)  # the data plane's last counts added
    for _ in range(8):  # no load: back down once the down window has passed
        service = plant.tick(service)
    assert service.desired_replicas == 1
    sample = service.samples.filter(requests__gt=0).order_by("-at").first()
    assert sample is not None
    assert sample.p95_ms is not None


def test_a_killed_replica_is_replaced_and_the_endpoint_keeps_answering(
    fleet: Fleet, plant: Plant, alice: Caller
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


class Dropper:
    """A replica that was killed mid-request, as its callers see it: on its port, every connection is read and
    closed with no answer."""

    def __init__(self, url: str) -> None:
        self.listener = socket.create_server(("127.0.0.1", int(url.rstrip("/").rsplit(":", 1)[1])))
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                connection, _ = self.listener.accept()
                with connection:
                    connection.recv(65536)

    def close(self) -> None:
        self.listener.close()


def test_a_request_a_replica_dropped_goes_to_another_only_if_it_may_be_sent_twice(
    fleet: Fleet, plant: Plant, alice: Caller
) -> None:
    service = make(fleet, min_replicas=2, max_replicas=2)
    plant.settle(service, 2)
    first, second = ready(service)
    plant.kill(first)
    dropper = Dropper(Attempt.objects.get(job=first.job, number=first.job.attempt).serve_url)
    try:
        gets = [alice.get("hello") for _ in range(4)]
        posts = [alice.post("hello") for _ in range(2)]
    finally:
        dropper.close()
    # Every GET is answered, by the replica still alive; of two POSTs one went to the dropped replica and is a 502
    # (it may have been acted on: it is not sent again).
    assert [(r.status_code, r.headers["X-QM-Replica"]) for r in gets] == [(200, str(second.pk))] * 4
    assert sorted(r.status_code for r in posts) == [200, 502]


def test_a_bad_revision_never_answers(fleet: Fleet, plant: Plant, alice: Caller) -> None:
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


def _limited(**changes: Any) -> Plane:
    """A data plane of its own, with the settings' limits but ``changes``."""
    return Plane(Limits(**{**dataplane.limits().__dict__, **changes}))


def test_scale_to_zero_and_a_cold_start(fleet: Fleet, plant: Plant) -> None:
    service = make(fleet, min_replicas=0, max_replicas=2, scale_to_zero_after=30)
    plant.settle(service, 1)  # never asked: no replica
    assert service.desired_replicas == 0
    assert not ready(service)
    answers: list[requests.Response] = []
    with _limited(cold_start_seconds=30.0) as plane:
        caller = Caller(plane, fleet, "alice")

        def ask() -> None:
            try:
                answers.append(caller.get("cold"))
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
    assert answers[0].status_code == 200, answers[0].text
    assert answers[0].text.endswith("GET /cold")
    for _ in range(10):  # nothing more: back to zero after 30 s idle
        service = plant.tick(service)
    assert service.desired_replicas == 0
    assert not service.replicas.exclude(state=Replica.State.GONE).exists()


def test_at_zero_with_no_wait_it_answers_503_with_retry_after(fleet: Fleet) -> None:
    make(fleet, min_replicas=0, max_replicas=1, scale_to_zero_after=30)
    with _limited(cold_start_seconds=0.0) as plane:
        response = Caller(plane, fleet, "alice").get()
    assert response.status_code == 503
    assert response.headers["Retry-After"]
    assert "no replica ready" in response.json()["detail"]


def _together(caller: Caller, count: int, path: str = "slow") -> list[requests.Response]:
    answers: list[requests.Response] = []
    threads = [threading.Thread(target=lambda: answers.append(caller.get(path))) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


def test_waiting_is_bounded_per_service_and_in_all(fleet: Fleet, plant: Plant) -> None:
    """Two at the replica at once, two more may wait a second: the rest are told at once to come back."""
    plant.behaviour[1] = (200, 0.5)
    service = make(fleet)
    plant.settle(service, 2)
    with _limited(max_inflight=2, queue_per_service=2, queue_seconds=5.0) as plane:
        started = time.monotonic()
        answers = _together(Caller(plane, fleet, "alice"), 8)
        took = time.monotonic() - started
    statuses = sorted(a.status_code for a in answers)
    assert statuses == [200] * 4 + [503] * 4, statuses
    assert all(a.headers["Retry-After"] for a in answers if a.status_code == 503)
    assert took < 2.5  # the two waiting went in turn; nobody waited out a timeout
    with _limited(max_inflight=1, queue_per_service=10, queue_total=1, queue_seconds=5.0) as plane:
        answers = _together(Caller(plane, fleet, "alice"), 4)
    assert sorted(a.status_code for a in answers) == [200, 200, 503, 503]  # the total bounds every queue
    del service


def test_a_request_waits_its_turn_no_longer_than_the_queue_allows(fleet: Fleet, plant: Plant) -> None:
    plant.behaviour[1] = (200, 2.0)
    service = make(fleet)
    plant.settle(service, 2)
    with _limited(max_inflight=1, queue_per_service=5, queue_seconds=0.5) as plane:
        answers = _together(Caller(plane, fleet, "alice"), 2)
    assert sorted(a.status_code for a in answers) == [200, 503]
    assert "busy" in next(a for a in answers if a.status_code == 503).json()["detail"]
    del service


def test_a_service_past_its_rate_is_told_when_to_come_back(fleet: Fleet, plant: Plant) -> None:
    service = make(fleet)
    plant.settle(service, 2)
    with _limited(max_rps=2.0, burst=2) as plane:
        caller = Caller(plane, fleet, "alice")
        statuses = [caller.get("x").status_code for _ in range(5)]
        limited = caller.get("x")
        time.sleep(1.1)
        again = caller.get("x")
        time.sleep(0.3)  # the data plane adds what it counted to the load every tenth of a second here
        measured = load.take_load(service.pk)
    assert (measured.requests, measured.errors) == (7, 0)  # the 429s are answers, not errors (the serving SLO)
    assert statuses[:2] == [200, 200]
    assert 429 in statuses
    assert limited.status_code == 429
    assert int(limited.headers["Retry-After"]) >= 1
    assert again.status_code == 200
    del service


def test_a_service_sets_its_own_limits_within_the_data_planes(fleet: Fleet, plant: Plant) -> None:
    """A service's own concurrency and rate (``max_inflight``, ``max_rps``) hold for it alone; changed, they take
    effect at the data plane's next table (none waits here: a request beyond is refused at once)."""
    plant.behaviour[1] = (200, 0.5)
    service = make(fleet, max_inflight=1)
    other = actions.create_service(
        fleet.user("alice"), team=fleet.world.teams["vision"], name="other", **service_fields(max_rps=1)
    )
    plant.settle(service, 2)
    plant.settle(other, 2)
    with _limited(queue_per_service=0) as plane:
        alice, elsewhere = Caller(plane, fleet, "alice"), Caller(plane, fleet, "alice")
        elsewhere.base = elsewhere.base.replace("/chat/", "/other/")
        assert sorted(a.status_code for a in _together(alice, 2)) == [200, 503]  # its own: one at a time
        statuses = [elsewhere.get("x").status_code for _ in range(3)]
        assert statuses[0] == 200
        assert 429 in statuses  # its own rate: one a second
        actions.update_service(fleet.user("alice"), service, max_inflight=None)
        time.sleep(0.3)  # the data plane's next table
        assert sorted(a.status_code for a in _together(alice, 2)) == [200, 200]  # the data plane's 256 again
