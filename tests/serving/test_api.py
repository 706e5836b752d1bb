"""The services API: people's units in and out, rolling updates and state changes through the actions, 400s
naming each bad field with nothing written, another team's service a 404 whatever the verb."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone

from serving.models import Revision, Service, ServiceSample
from tenancy.models import AuditLog
from tests.scheduler.conftest import Fleet, fleet  # noqa: F401 - the fixture

URL = "/api/v1/services/"


def create(api: Any, username: str = "alice", **fields: Any) -> Any:
    body = {
        "team": "vision",
        "name": "chat-api",
        "image": "ghcr.io/lab/serve:1",
        "command": "python3 deploy/model_server.py --port $PORT",
        "health_path": "/health",
        "cpu": 0.5,
        "memory_gib": 1.5,
        "min_replicas": 1,
        "max_replicas": 4,
        "target": 20,
        **fields,
    }
    return api(username).post(URL, body, format="json")


def test_create_takes_peoples_units_and_answers_the_service(fleet: Fleet, api: Any) -> None:  # noqa: F811
    answer = create(api, project="detection", clusters=["east"], public=True)
    assert answer.status_code == 201, answer.json()
    body = answer.json()
    assert body["team"] == "vision"
    assert body["project"] == "detection"
    assert body["clusters"] == ["east"]
    assert body["endpoint"] == "http://127.0.0.1:8001/serve/demo/vision/chat-api/"  # at the data plane
    assert body["revision"]["number"] == 1
    assert body["revision"]["cpu"] == 0.5
    assert body["revision"]["memory_gib"] == 1.5
    assert body["revision"]["command"] == ["python3", "deploy/model_server.py", "--port", "$PORT"]
    service = Service.objects.get(pk=body["id"])
    assert service.revision is not None
    assert (service.revision.cpu, service.revision.memory) == (500, 1536)
    assert AuditLog.objects.filter(action="service.created").count() == 1
    listed = api("lena").get(URL).json()
    assert [s["name"] for s in listed["results"]] == ["chat-api"]


def test_bad_input_is_a_400_naming_every_field_and_writes_nothing(fleet: Fleet, api: Any) -> None:  # noqa: F811
    answer = create(api, cpu="lots", min_replicas=5, max_replicas=2, port=70000, tier="gold", colour="red")
    assert answer.status_code == 400
    fields = answer.json()["error"]["fields"]
    assert set(fields) == {"cpu", "tier", "colour"}  # types and names first: nothing reaches the action
    answer = create(api, min_replicas=5, max_replicas=2, port=70000, health_path="health", memory_gib=2)
    fields = answer.json()["error"]["fields"]
    assert answer.status_code == 400
    assert {"min_replicas", "port", "health_path"} <= set(fields)
    assert create(api, name="Not A Slug").json()["error"]["fields"].keys() == {"name"}
    assert create(api, team="intruders").json()["error"]["fields"] == {"team": ["No team 'intruders'."]}
    limits = create(api, max_inflight=0, max_rps="fast").json()["error"]["fields"]
    assert set(limits) == {"max_rps"}  # its type first
    assert "or none" in create(api, max_inflight=10**6).json()["error"]["fields"]["max_inflight"][0]
    assert not Service.objects.exists()


def test_a_service_sets_its_own_limits_and_drops_them(fleet: Fleet, api: Any) -> None:  # noqa: F811
    body = create(api, max_inflight=16, max_rps=40).json()
    assert (body["max_inflight"], body["max_rps"]) == (16, 40)
    changed = api("alice").patch(f"{URL}{body['id']}/", {"max_rps": None}, format="json")
    assert changed.status_code == 200, changed.json()
    assert (changed.json()["max_inflight"], changed.json()["max_rps"]) == (16, None)
    assert AuditLog.objects.filter(action="service.updated").latest("pk").changes == {"max_rps": None}


def test_change_rolls_out_a_new_revision_and_scale_stop_start(fleet: Fleet, api: Any) -> None:  # noqa: F811
    service_id = create(api).json()["id"]
    detail = f"{URL}{service_id}/"
    answer = api("alice").patch(detail, {"image": "ghcr.io/lab/serve:2", "memory_gib": 2}, format="json")
    assert answer.status_code == 200, answer.json()
    revisions = answer.json()["revisions"]
    assert [(r["number"], r["state"]) for r in revisions] == [(2, "rolling_out"), (1, "active")]
    assert api("alice").patch(detail, {"name": "other"}, format="json").json()["error"]["fields"] == {
        "name": ["Fixed once the service exists."]
    }
    scaled = api("lena").post(f"{detail}scale/", {"min_replicas": 2, "max_replicas": 6}, format="json")
    assert scaled.status_code == 200
    assert (scaled.json()["min_replicas"], scaled.json()["max_replicas"]) == (2, 6)
    bad = api("lena").post(f"{detail}scale/", {"min_replicas": 9, "max_replicas": 6}, format="json")
    assert bad.status_code == 400
    assert "min_replicas" in bad.json()["error"]["fields"]
    assert api("alice").post(f"{detail}stop/").json()["state"] == "stopped"
    assert api("alice").post(f"{detail}stop/").status_code == 409
    assert api("alice").post(f"{detail}start/").json()["state"] == "active"
    assert api("alice").delete(detail).json()["state"] == "stopped"
    rolled = api("alice").post(f"{detail}rollback/")
    assert rolled.status_code == 200
    assert Revision.objects.filter(service_id=service_id).count() >= 2


def test_permissions_and_tenancy(fleet: Fleet, api: Any) -> None:  # noqa: F811
    service_id = create(api).json()["id"]
    detail = f"{URL}{service_id}/"
    # bob is a researcher of another team of the organization; trent is of another organization
    for username in ("bob", "trent", "mallory"):
        client = api(username)
        assert client.get(detail).status_code == 404
        assert client.patch(detail, {"image": "x"}, format="json").status_code == 404
        assert client.post(f"{detail}stop/").status_code == 404
        assert client.delete(detail).status_code == 404
        assert client.get(f"{detail}replicas/").status_code == 404
        assert client.get(f"{detail}samples/").status_code == 404
    assert api("adam").get(detail).status_code == 200
    assert api("fiona").get(detail).status_code == 200
    assert api("fiona").post(f"{detail}stop/").status_code == 403
    assert Service.objects.get(pk=service_id).state == Service.State.ACTIVE


def test_replicas_and_samples_since(fleet: Fleet, api: Any) -> None:  # noqa: F811
    service_id = create(api).json()["id"]
    now = timezone.now()
    for minutes, rps in ((90, 1.0), (30, 5.0), (1, 7.5)):
        ServiceSample.objects.create(
            service_id=service_id, at=now - timedelta(minutes=minutes), requests=int(rps * 5), rps=rps, p95_ms=12.0
        )
    detail = f"{URL}{service_id}/"
    assert api("alice").get(f"{detail}replicas/").json() == []
    samples = api("alice").get(f"{detail}samples/").json()
    assert [s["rps"] for s in samples] == [5.0, 7.5]
    since = (now - timedelta(hours=2)).isoformat().replace("+00:00", "Z")
    assert len(api("alice").get(f"{detail}samples/", {"since": since}).json()) == 3
    bad = api("alice").get(f"{detail}samples/", {"since": "yesterday"})
    assert bad.status_code == 400
    assert "since" in bad.json()["error"]["fields"]
    assert api("alice").get(detail).json()["rps"] == 7.5
