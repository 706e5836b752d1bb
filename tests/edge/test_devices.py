"""Devices: enrolment with a one-time token, the credential, the desired state's long poll, artifact ranges,
reports and the fleet, people's API for devices, groups and tokens, and tenancy (another team's devices are
404 and untouchable)."""

from __future__ import annotations

import hashlib
import io
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from edge.actions import devices, rollouts
from edge.models import Device, DeviceEvent, DeviceGroup, EnrolmentToken
from registry import artifacts
from registry.models import Model, ModelVersion
from tenancy import actions as tenancy_actions
from tenancy.models import AuditLog, Team
from tests.conftest import World, api_client

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _store(settings: Any, tmp_path: Any) -> None:
    settings.ARTIFACT_ROOT = str(tmp_path / "artifacts")


def make_version(team: Team, data: bytes, name: str = "pick-place", version: str = "1") -> ModelVersion:
    size, digest = artifacts.store(team.organization_id, io.BytesIO(data))
    model, _ = Model.objects.get_or_create(team=team, name=name, defaults={"created_at": timezone.now()})
    return ModelVersion.objects.create(
        model=model,
        version=version,
        artifact_uri=f"upload:{name}-{version}.bin",
        size_bytes=size,
        sha256=digest,
        stored=True,
        published_at=timezone.now(),
    )


def group_of(world: World, team: str = "vision", name: str = "lab-a") -> DeviceGroup:
    return devices.create_group(world.users["lena"], world.teams[team], name=name)


def token_for(world: World, group: DeviceGroup, hours: int | None = None) -> str:
    return devices.issue_enrolment_token(world.users["lena"], group, hours=hours)[1]


def enrol(token: str, name: str = "robot-07", **extra: Any) -> Any:
    body = {"token": token, "name": name, "hardware": {"accelerator": "Jetson AGX Orin", "memory_mb": 32768},
            "software": {"os": "Ubuntu 22.04", "agent": "1.0.0"}, **extra}  # fmt: skip
    return APIClient().post("/api/v1/edge/enrol", body, format="json")


def body(response: Any) -> bytes:
    return b"".join(response.streaming_content)


def device_client(credential: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Device {credential}")
    return client


def enrolled(world: World, group: DeviceGroup, name: str = "robot-07") -> tuple[Device, APIClient]:
    answer = enrol(token_for(world, group), name)
    assert answer.status_code == 201, answer.json()
    return Device.objects.get(pk=answer.json()["device"]), device_client(answer.json()["credential"])


def test_enrol_once_then_the_token_is_used(world: World) -> None:
    group = group_of(world)
    token = token_for(world, group)
    first = enrol(token)
    assert first.status_code == 201
    body = first.json()
    assert body["name"] == "robot-07"
    assert body["credential"].startswith("qmdev_")
    device = Device.objects.get(pk=body["device"])
    assert device.group == group
    assert device.team == world.teams["vision"]
    assert device.hardware["accelerator"] == "Jetson AGX Orin"
    assert body["credential"] not in device.credential_hash  # only its hash is kept
    again = enrol(token, name="robot-08")
    assert again.status_code == 400
    assert "already used" in again.json()["error"]["fields"]["token"][0]
    assert Device.objects.count() == 1


def test_expired_and_unknown_tokens_are_refused(world: World) -> None:
    group = group_of(world)
    token = token_for(world, group, hours=1)
    EnrolmentToken.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    answer = enrol(token)
    assert answer.status_code == 400
    assert "expired" in answer.json()["error"]["fields"]["token"][0]
    assert enrol("qmenrol_nonsense").status_code == 400
    assert enrol(token_for(world, group), name="../etc").json()["error"]["fields"].keys() == {"name"}
    assert Device.objects.count() == 0


def test_re_enrolling_a_name_replaces_the_credential_and_keeps_history(world: World) -> None:
    group = group_of(world)
    device, old = enrolled(world, group)
    assert old.get("/api/v1/edge/desired").status_code == 200
    again, new = enrolled(world, group)
    assert again.pk == device.pk
    assert old.get("/api/v1/edge/desired").status_code == 401
    assert new.get("/api/v1/edge/desired").status_code == 200
    assert list(DeviceEvent.objects.filter(device=device).values_list("status", flat=True)) == [
        "re-enrolled",
        "enrolled",
    ]


def test_a_token_takes_over_no_device_of_another_group_nor_a_revoked_one(world: World) -> None:
    """Any unused token of a team used to re-enrol any device of the team by its name: moved to the token's
    group, its revocation cleared. Now a group's token re-enrols only its own group's devices, and a revoked
    device comes back only by a token its lead issued for it (audited)."""
    lab_a, lab_b = group_of(world), group_of(world, name="lab-b")
    robot, _ = enrolled(world, lab_a, "robot-07")
    refused = enrol(token_for(world, lab_b), "robot-07")  # another group's token: no move, no new credential
    assert refused.status_code == 400
    assert "another group" in refused.json()["error"]["fields"]["name"][0]
    devices.revoke_device(world.users["lena"], robot)
    for token in (token_for(world, lab_a), token_for(world, lab_b)):  # a revoked one: not by any group's token
        answer = enrol(token, "robot-07")
        assert answer.status_code == 400
        assert "revoked" in answer.json()["error"]["fields"]["name"][0]
    robot.refresh_from_db()
    assert (robot.group, robot.revoked_at is not None) == (lab_a, True)
    assert EnrolmentToken.objects.filter(used_at__isnull=False).count() == 1  # the refusals used no token

    # The lead restores it: a token for that device alone, which enrols no other name.
    issued = APIClient()
    _, raw = tenancy_actions.issue_token(world.users["lena"], name="tests")
    issued.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    made = issued.post("/api/v1/enrolment-tokens/", {"device": robot.pk}, format="json")
    assert made.status_code == 201, made.json()
    assert (made.json()["device"], made.json()["group"]) == (robot.pk, lab_a.pk)
    assert enrol(made.json()["token"], "robot-99").status_code == 400  # not another device
    back = enrol(made.json()["token"], "robot-07")
    assert back.status_code == 201, back.json()
    robot.refresh_from_db()
    assert (robot.group, robot.revoked_at) == (lab_a, None)
    audited = list(AuditLog.objects.filter(action__startswith="device.").values_list("action", flat=True))
    assert "device.reenrolment_allowed" in audited
    assert AuditLog.objects.get(action="device.reenrolled").changes["restored"] is True
    # A researcher may not issue it; another team's device is not found.
    alice = api_client(world.users["alice"])
    assert alice.post("/api/v1/enrolment-tokens/", {"device": robot.pk}, format="json").status_code == 403
    trent = api_client(world.users["trent"])
    assert trent.post("/api/v1/enrolment-tokens/", {"device": robot.pk}, format="json").status_code == 400


def test_bad_missing_and_revoked_credentials_are_401(world: World) -> None:
    group = group_of(world)
    device, client = enrolled(world, group)
    assert APIClient().get("/api/v1/edge/desired").status_code == 401
    assert device_client("qmdev_wrong").get("/api/v1/edge/desired").status_code == 401
    # A person's token does not reach the devices' endpoints.
    assert api_client(world.users["lena"]).get("/api/v1/edge/desired").status_code == 401
    assert client.get("/api/v1/edge/desired").status_code == 200
    devices.revoke_device(world.users["lena"], device)
    answer = client.get("/api/v1/edge/desired")
    assert answer.status_code == 401
    assert answer.json()["error"]["status"] == 401


def test_desired_state_and_bad_parameters(world: World) -> None:
    group = group_of(world)
    _device, client = enrolled(world, group)
    body = client.get("/api/v1/edge/desired").json()
    assert body["desired"] is None
    assert body["rollout"] is None
    assert body["poll_seconds"] == 10
    answer = client.get("/api/v1/edge/desired", {"wait": "61"})
    assert answer.status_code == 400
    assert "wait" in answer.json()["error"]["fields"]
    # Nothing changes: the long poll answers the same revision after its wait.
    started = time.monotonic()
    same = client.get("/api/v1/edge/desired", {"known": body["revision"], "wait": "1"}).json()
    assert time.monotonic() - started >= 0.9
    assert same["revision"] == body["revision"]


@pytest.mark.django_db(transaction=True)
def test_the_long_poll_answers_when_the_desired_state_changes(world: World) -> None:
    group = group_of(world)
    _device, client = enrolled(world, group)
    version = make_version(world.teams["vision"], b"weights v1")
    known = client.get("/api/v1/edge/desired").json()["revision"]

    def change() -> None:
        time.sleep(1.0)
        try:
            rollouts.start_rollout(world.users["lena"], group, version)
        finally:
            connection.close()

    thread = threading.Thread(target=change)
    thread.start()
    started = time.monotonic()
    body = client.get("/api/v1/edge/desired", {"known": known, "wait": "20"}).json()
    waited = time.monotonic() - started
    thread.join()
    assert 0.5 < waited < 10
    assert body["revision"] != known
    assert body["desired"] == {
        "model": "pick-place",
        "version_id": version.pk,
        "version": "1",
        "sha256": version.sha256,
        "size_bytes": version.size_bytes,
        "url": f"/api/v1/edge/artifacts/{version.pk}",
    }
    assert body["rollout"] is not None


def test_artifacts_whole_and_in_ranges(world: World) -> None:
    group = group_of(world)
    _device, client = enrolled(world, group)
    data = bytes(range(256)) * 1000
    version = make_version(world.teams["vision"], data)
    url = f"/api/v1/edge/artifacts/{version.pk}"
    assert client.get(url).status_code == 404  # not its desired version yet
    rollouts.start_rollout(world.users["lena"], group, version)
    whole = client.get(url)
    assert whole.status_code == 200
    assert body(whole) == data
    assert whole["Content-Length"] == str(len(data))
    assert whole["ETag"] == f'"{version.sha256}"'
    assert whole["Accept-Ranges"] == "bytes"
    tail = client.get(url, HTTP_RANGE="bytes=1000-")
    assert tail.status_code == 206
    assert body(tail) == data[1000:]
    assert tail["Content-Range"] == f"bytes 1000-{len(data) - 1}/{len(data)}"
    middle = client.get(url, HTTP_RANGE="bytes=10-19")
    assert middle.status_code == 206
    assert body(middle) == data[10:20]
    assert middle["Content-Length"] == "10"
    refused = client.get(url, HTTP_RANGE=f"bytes={len(data)}-")
    assert refused.status_code == 416
    assert refused["Content-Range"] == f"bytes */{len(data)}"
    assert hashlib.sha256(data).hexdigest() == version.sha256
    # Another team's version, even by its id, is not this device's.
    other = make_version(world.teams["robotics"], b"theirs", name="arm")
    assert client.get(f"/api/v1/edge/artifacts/{other.pk}").status_code == 404


def test_a_report_updates_the_fleet(world: World) -> None:
    group = group_of(world)
    device, client = enrolled(world, group)
    version = make_version(world.teams["vision"], b"weights")
    report = {
        "status": "healthy",
        "version_id": version.pk,
        "running": {"version_id": version.pk, "sha256": version.sha256},
        "previous": None,
        "detail": "serving",
        "hardware": {"accelerator": "Jetson AGX Orin", "memory_mb": 65536},
        "software": {"os": "Ubuntu 24.04", "agent": "1.0.1"},
        "connectivity": {"network": "wifi", "rtt_ms": 12},
    }
    answer = client.post("/api/v1/edge/report", report, format="json")
    assert answer.status_code == 200, answer.json()
    assert answer.json()["revision"] == Device.objects.get(pk=device.pk).revision_tag
    device.refresh_from_db()
    assert device.running_version == version
    assert device.last_status == "healthy"
    assert device.health == "ok"
    assert device.connectivity == {"network": "wifi", "rtt_ms": 12}
    assert device.software["agent"] == "1.0.1"
    lena = api_client(world.users["lena"])
    listed = lena.get("/api/v1/devices/", {"group": group.pk}).json()["results"]
    assert [(d["name"], d["online"], d["running"]["version_id"]) for d in listed] == [("robot-07", True, version.pk)]
    page = lena.get("/api/v1/devices/", {"online": "false"}).json()["results"]
    assert page == []
    # Bad input: 400 naming the field, nothing changed.
    for bad, field in [
        ({"status": "exploded"}, "status"),
        ({"status": "healthy", "running": {"version_id": 999999}}, "running.version_id"),
        ({"status": "healthy", "detail": "x" * 501}, "detail"),
        ({"status": "healthy", "surprise": 1}, "surprise"),
    ]:
        refused = client.post("/api/v1/edge/report", bad, format="json")
        assert refused.status_code == 400, bad
        fields = refused.json()["error"]["fields"]
        assert field in fields or field.split(".")[0] in fields, (bad, fields)
    device.refresh_from_db()
    assert device.running_version == version
    assert device.last_detail == "serving"


def test_people_api_groups_tokens_devices(world: World) -> None:
    lena = api_client(world.users["lena"])
    made = lena.post("/api/v1/device-groups/", {"team": world.teams["vision"].pk, "name": "site-b", "kind": "site"})
    assert made.status_code == 201, made.json()
    group = made.json()["id"]
    issued = lena.post("/api/v1/enrolment-tokens/", {"group": group, "hours": 2})
    assert issued.status_code == 201, issued.json()
    token = issued.json()["token"]
    assert token.startswith("qmenrol_")
    listed = lena.get("/api/v1/enrolment-tokens/").json()["results"]
    assert "token" not in listed[0]  # shown once
    assert enrol(token, "arm-1").status_code == 201
    device = Device.objects.get(name="arm-1")
    detail = lena.get(f"/api/v1/devices/{device.pk}/").json()
    assert detail["hardware"]["memory_mb"] == 32768
    assert detail["group"]["name"] == "site-b"
    # A researcher sees the fleet but may not issue tokens or revoke.
    alice = api_client(world.users["alice"])
    assert alice.get(f"/api/v1/devices/{device.pk}/").status_code == 200
    assert alice.post("/api/v1/enrolment-tokens/", {"group": group}).status_code == 403
    assert alice.post(f"/api/v1/devices/{device.pk}/revoke/").status_code == 403
    assert lena.post(f"/api/v1/devices/{device.pk}/revoke/").status_code == 200
    assert Device.objects.get(pk=device.pk).revoked_at is not None


def test_another_teams_devices_are_404_and_untouchable(world: World) -> None:
    group = group_of(world)
    device, _client = enrolled(world, group)
    for outsider in ("bob", "trent", "mallory"):
        api = api_client(world.users[outsider])
        assert api.get(f"/api/v1/devices/{device.pk}/").status_code == 404
        assert api.delete(f"/api/v1/devices/{device.pk}/").status_code == 404
        assert api.post(f"/api/v1/devices/{device.pk}/revoke/").status_code == 404
        assert api.get(f"/api/v1/device-groups/{group.pk}/").status_code == 404
        assert api.post("/api/v1/enrolment-tokens/", {"group": group.pk}).status_code == 400
        assert device.name not in str(api.get("/api/v1/devices/").json())
    assert Device.objects.get(pk=device.pk).revoked_at is None
    # The organization's admin sees it (and may revoke).
    assert api_client(world.users["adam"]).get(f"/api/v1/devices/{device.pk}/").status_code == 200


def test_the_fleet_pages(world: World, client: Any) -> None:
    group = group_of(world)
    device, device_api = enrolled(world, group)
    device_api.post("/api/v1/edge/report", {"status": "idle", "connectivity": {"network": "5g"}}, format="json")
    client.force_login(world.users["lena"])
    page = client.get("/devices/", {"group": group.pk})
    assert page.status_code == 200
    text = page.content.decode()
    assert "robot-07" in text
    assert "1 online" in text
    assert "1 healthy" in text
    detail = client.get(f"/devices/{device.pk}/").content.decode()
    assert "Jetson AGX Orin" in detail
    assert "5g" in detail
    assert "enrolled" in detail
    issued = client.post("/devices/tokens/new", {"group": group.pk, "hours": "2"})
    assert issued.status_code == 200
    assert "qmenrol_" in issued.content.decode()
    assert client.post("/devices/tokens/new", {"group": group.pk, "hours": "0"}).status_code == 400
    assert client.post(f"/devices/{device.pk}/revoke/").status_code == 302
    assert Device.objects.get(pk=device.pk).revoked_at is not None
    client.force_login(world.users["trent"])
    assert client.get(f"/devices/{device.pk}/").status_code == 404
    assert "robot-07" not in client.get("/devices/").content.decode()
    assert client.post(f"/devices/{device.pk}/revoke/").status_code == 404
