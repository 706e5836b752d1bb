"""Rollouts: phases advance only when the phase is healthy; the failure threshold pauses and rolls back (each
device's desired state back to what it ran); offline devices catch up and hold a phase back only for their
grace; starting is validated field by field; another team's rollouts are 404 and untouchable."""

from __future__ import annotations

import html
import json
import re
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from edge import tasks
from edge.actions import rollouts
from edge.models import Device, DeviceDeployment, DeviceGroup, Rollout
from registry.models import ModelVersion
from tenancy.models import AuditLog
from tests.conftest import World, api_client
from tests.edge.test_devices import enrolled, group_of, make_version

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _store(settings: Any, tmp_path: Any) -> None:
    settings.ARTIFACT_ROOT = str(tmp_path / "artifacts")


class Fleet:
    """A group of enrolled devices, each with its own client, all running ``v1``."""

    def __init__(self, world: World, count: int, *, kinds: tuple[str, ...] = ("Jetson AGX Orin",)) -> None:
        self.world = world
        self.group = group_of(world)
        team = world.teams["vision"]
        self.v1 = make_version(team, b"weights one", version="1")
        self.v2 = make_version(team, b"weights two", version="2")
        self.clients: dict[str, APIClient] = {}
        for index in range(count):
            device, client = enrolled(world, self.group, f"robot-{index:02d}")
            Device.objects.filter(pk=device.pk).update(hardware={"accelerator": kinds[index % len(kinds)]})
            self.clients[device.name] = client
            self.report(device.name, "healthy", self.v1)

    def report(self, name: str, status: str, version: ModelVersion | None, **extra: Any) -> dict[str, Any]:
        body: dict[str, Any] = {"status": status, "version_id": version.pk if version else None, **extra}
        if status == "healthy" and version is not None:
            body["running"] = {"version_id": version.pk, "sha256": version.sha256}
        answer = self.clients[name].post("/api/v1/edge/report", body, format="json")
        assert answer.status_code == 200, answer.json()
        return dict(answer.json())

    def desired(self, name: str) -> dict[str, Any]:
        return dict(self.clients[name].get("/api/v1/edge/desired").json())

    def targeted(self, rollout: Rollout) -> list[str]:
        return sorted(DeviceDeployment.objects.filter(rollout=rollout).values_list("device__name", flat=True))

    def start(self, **options: Any) -> Rollout:
        return rollouts.start_rollout(self.world.users["lena"], self.group, self.v2, **options)


def fresh(rollout: Rollout) -> Rollout:
    return Rollout.objects.get(pk=rollout.pk)


def test_phases_advance_only_when_the_phase_is_healthy(world: World) -> None:
    fleet = Fleet(world, 4)
    rollout = fleet.start(phases=[{"canary": 1}, {"percent": 50}, {"percent": 100}])
    [canary] = fleet.targeted(rollout)
    assert fleet.desired(canary)["desired"]["version_id"] == fleet.v2.pk
    others = [n for n in fleet.clients if n != canary]
    assert all(fleet.desired(n)["desired"] is None for n in others)
    assert all(fleet.desired(n)["rollout"] is None for n in others)
    # Downloading, verifying, switched: not healthy yet, no next phase.
    for status in ("downloading", "verifying", "switched"):
        fleet.report(canary, status, fleet.v2)
        tasks.advance_rollouts()
        assert fleet.targeted(rollout) == [canary]
    fleet.report(canary, "healthy", fleet.v2)
    rollout = fresh(rollout)
    assert rollout.current_phase == 1
    wave = fleet.targeted(rollout)
    assert len(wave) == 2  # 50% of 4, cumulative
    [second] = [n for n in wave if n != canary]
    fleet.report(second, "downloading", fleet.v2)
    assert fresh(rollout).current_phase == 1
    fleet.report(second, "healthy", fleet.v2)
    rollout = fresh(rollout)
    assert rollout.current_phase == 2
    assert len(fleet.targeted(rollout)) == 4
    for name in fleet.clients:
        if name not in wave:
            fleet.report(name, "healthy", fleet.v2)
    rollout = fresh(rollout)
    assert rollout.state == "completed"
    assert rollout.ended_at is not None
    assert set(DeviceDeployment.objects.filter(rollout=rollout).values_list("state", flat=True)) == {"healthy"}
    kinds = list(rollout.events.values_list("kind", flat=True))
    assert kinds == ["started", "phase", "phase", "phase", "completed"]


def test_the_threshold_pauses_and_rolls_back_to_each_devices_previous_version(world: World) -> None:
    fleet = Fleet(world, 4)
    rollout = fleet.start(phases=[{"canary": 2}, {"percent": 100}], failure_threshold=2)
    first, second = fleet.targeted(rollout)
    fleet.report(first, "unhealthy", fleet.v2, detail="health check failed",
                 running={"version_id": fleet.v1.pk, "sha256": fleet.v1.sha256})  # fmt: skip
    rollout = fresh(rollout)
    assert rollout.state == "running"
    assert rollout.failures == 1
    fleet.report(second, "checksum_mismatch", fleet.v2)
    rollout = fresh(rollout)
    assert rollout.state == "rolled_back"
    assert rollout.failures == 2
    assert "threshold" in rollout.reason
    for name in (first, second):
        assert fleet.desired(name)["desired"]["version_id"] == fleet.v1.pk
    assert Device.objects.get(name=first).health == "failing"
    # The others were never touched.
    assert len(fleet.targeted(rollout)) == 2
    # Reports after the end change nothing.
    fleet.report(first, "healthy", fleet.v1)
    assert fresh(rollout).state == "rolled_back"
    kinds = list(rollout.events.values_list("kind", flat=True))
    assert kinds[-3:] == ["failure", "paused", "rolled_back"]


def test_a_device_that_ran_nothing_gets_null_back(world: World) -> None:
    fleet = Fleet(world, 0)
    device, client = enrolled(world, fleet.group, "fresh-robot")
    fleet.clients[device.name] = client
    rollout = fleet.start(phases=[{"percent": 100}])
    assert fleet.desired("fresh-robot")["desired"]["version_id"] == fleet.v2.pk
    fleet.report("fresh-robot", "unhealthy", fleet.v2)
    assert fresh(rollout).state == "rolled_back"
    assert fleet.desired("fresh-robot")["desired"] is None


def test_a_percentage_threshold_and_three_failed_downloads(world: World) -> None:
    fleet = Fleet(world, 4)
    rollout = fleet.start(phases=[{"percent": 100}], failure_percent=50, auto_rollback=False)
    names = fleet.targeted(rollout)
    assert len(names) == 4
    for _ in range(2):
        fleet.report(names[0], "download_failed", fleet.v2)
    assert fresh(rollout).failures == 0  # two tries: not yet a failure
    fleet.report(names[0], "download_failed", fleet.v2)
    assert fresh(rollout).failures == 1
    fleet.report(names[1], "unhealthy", fleet.v2)  # 2 of 4: 50%
    rollout = fresh(rollout)
    assert rollout.state == "paused"  # no automatic rollback: paused for a person
    assert fleet.desired(names[2])["desired"]["version_id"] == fleet.v2.pk
    lena = api_client(world.users["lena"])
    answer = lena.post(f"/api/v1/rollouts/{rollout.pk}/rollback/", {"reason": "bad weights"})
    assert answer.status_code == 200, answer.json()
    assert answer.json()["state"] == "rolled_back"
    assert all(fleet.desired(n)["desired"]["version_id"] == fleet.v1.pk for n in names)
    again = lena.post(f"/api/v1/rollouts/{rollout.pk}/resume/")
    assert again.status_code == 400
    assert "state" in again.json()["error"]["fields"]


def test_an_offline_device_catches_up_and_holds_the_phase_only_for_its_grace(world: World) -> None:
    fleet = Fleet(world, 3)
    Device.objects.filter(name="robot-02").update(last_seen_at=timezone.now() - timedelta(hours=1))
    rollout = fleet.start(phases=[{"canary": 1}, {"percent": 100}], offline_grace=60)
    [canary] = fleet.targeted(rollout)
    assert canary != "robot-02"  # online devices are canaries first
    fleet.report(canary, "healthy", fleet.v2)
    rollout = fresh(rollout)
    assert rollout.current_phase == 1
    assert DeviceDeployment.objects.get(rollout=rollout, device__name="robot-02").state == "offline"
    [other] = [n for n in fleet.targeted(rollout) if n not in (canary, "robot-02")]
    fleet.report(other, "healthy", fleet.v2)
    # robot-02 is offline: it holds the last phase back for its grace, no longer.
    assert fresh(rollout).state == "running"
    DeviceDeployment.objects.filter(rollout=rollout).update(targeted_at=timezone.now() - timedelta(seconds=61))
    Rollout.objects.filter(pk=rollout.pk).update(phase_started_at=timezone.now() - timedelta(seconds=61))
    tasks.advance_rollouts()
    assert fresh(rollout).state == "completed"
    # It comes back: its desired state waited for it, it updates and reports.
    body = fleet.desired("robot-02")
    assert body["desired"]["version_id"] == fleet.v2.pk
    assert body["rollout"] == rollout.pk
    artifact = fleet.clients["robot-02"].get(body["desired"]["url"])
    assert artifact.status_code == 200
    fleet.report("robot-02", "healthy", fleet.v2)
    device = Device.objects.get(name="robot-02")
    assert device.running_version == fleet.v2
    assert device.health == "ok"


def test_canaries_spread_across_hardware_kinds() -> None:
    devices = [Device(pk=i, name=f"d{i}", hardware={"accelerator": "orin" if i < 3 else "xavier"}) for i in range(6)]
    chosen = rollouts.targets(devices, set(), {"canary": 2}, online={0, 1, 2, 3, 4, 5})
    assert sorted(str(d.hardware["accelerator"]) for d in chosen) == ["orin", "xavier"]
    offline_first = rollouts.targets(devices, set(), {"canary": 1}, online={5})
    assert [d.pk for d in offline_first] == [5]
    wave = rollouts.targets(devices, {0, 3}, {"percent": 50}, online=set())
    assert len(wave) == 1  # 50% of 6 is 3, two already
    assert len(rollouts.targets(devices, {0}, {"percent": 100}, online=set())) == 5


def test_starting_is_validated_field_by_field(world: World) -> None:
    fleet = Fleet(world, 2)
    lena = api_client(world.users["lena"])
    base: dict[str, Any] = {"group": fleet.group.pk, "version": fleet.v2.pk}
    cases: list[tuple[dict[str, Any], str]] = [
        ({"phases": [{"percent": 50}]}, "phases"),
        ({"phases": [{"percent": 50}, {"canary": 1}, {"percent": 100}]}, "phases"),
        ({"phases": [{"percent": 60}, {"percent": 40}, {"percent": 100}]}, "phases"),
        ({"phases": "all at once"}, "phases"),
        ({"failure_threshold": 0}, "failure_threshold"),
        ({"failure_threshold": 2, "failure_percent": 10}, "failure_threshold"),
        ({"failure_percent": 101}, "failure_percent"),
        ({"offline_grace": -1}, "offline_grace"),
        ({"surprise": True}, "surprise"),
    ]
    for extra, field in cases:
        answer = lena.post("/api/v1/rollouts/", {**base, **extra}, format="json")
        assert answer.status_code == 400, extra
        assert field in answer.json()["error"]["fields"], (extra, answer.json())
    unstored = ModelVersion.objects.create(
        model=fleet.v1.model, version="3", artifact_uri="s3://x/3", size_bytes=1, sha256="0" * 64,
        stored=False, published_at=timezone.now(),
    )  # fmt: skip
    answer = lena.post("/api/v1/rollouts/", {**base, "version": unstored.pk}, format="json")
    assert answer.status_code == 400
    assert "version" in answer.json()["error"]["fields"]
    empty = DeviceGroup.objects.create(team=world.teams["vision"], name="empty")
    answer = lena.post("/api/v1/rollouts/", {**base, "group": empty.pk}, format="json")
    assert answer.status_code == 400
    assert "no devices" in answer.json()["error"]["fields"]["group"][0]
    assert Rollout.objects.count() == 0
    started = lena.post("/api/v1/rollouts/", base, format="json")
    assert started.status_code == 201, started.json()
    assert started.json()["deployments"][0]["state"] == "updating"
    second = lena.post("/api/v1/rollouts/", base, format="json")
    assert second.status_code == 400
    assert "already has rollout" in second.json()["error"]["fields"]["group"][0]
    assert Rollout.objects.count() == 1
    # Another team's version, by its id: as if it did not exist.
    theirs = make_version(world.teams["robotics"], b"theirs", name="arm")
    answer = lena.post("/api/v1/rollouts/", {**base, "version": theirs.pk}, format="json")
    assert answer.status_code == 400
    assert "version" in answer.json()["error"]["fields"]


def test_people_pause_resume_cancel(world: World) -> None:
    fleet = Fleet(world, 2)
    rollout = fleet.start(phases=[{"canary": 1}, {"percent": 100}])
    lena = api_client(world.users["lena"])
    assert lena.post(f"/api/v1/rollouts/{rollout.pk}/pause/", {"reason": "lunch"}).json()["state"] == "paused"
    [canary] = fleet.targeted(rollout)
    fleet.report(canary, "healthy", fleet.v2)
    assert fresh(rollout).current_phase == 0  # paused: no next phase
    assert lena.post(f"/api/v1/rollouts/{rollout.pk}/resume/").json()["state"] == "running"
    assert fresh(rollout).current_phase == 1
    assert lena.post(f"/api/v1/rollouts/{rollout.pk}/cancel/").json()["state"] == "cancelled"
    detail = lena.get(f"/api/v1/rollouts/{rollout.pk}/").json()
    assert [e["kind"] for e in detail["events"]][-1] == "cancelled"
    assert {"rollout.started", "rollout.paused", "rollout.resumed", "rollout.cancelled"} <= set(
        AuditLog.objects.values_list("action", flat=True)
    )


def test_another_teams_rollouts_are_404_and_untouchable(world: World) -> None:
    fleet = Fleet(world, 2)
    rollout = fleet.start()
    for outsider in ("bob", "trent", "mallory"):
        api = api_client(world.users[outsider])
        assert api.get(f"/api/v1/rollouts/{rollout.pk}/").status_code == 404
        for verb in ("pause", "resume", "cancel", "rollback"):
            assert api.post(f"/api/v1/rollouts/{rollout.pk}/{verb}/").status_code == 404
        answer = api.post("/api/v1/rollouts/", {"group": fleet.group.pk, "version": fleet.v2.pk}, format="json")
        assert answer.status_code == 400
        assert rollout.version.model.name not in str(api.get("/api/v1/rollouts/").json())
    # A researcher of the team sees it, may not change it.
    alice = api_client(world.users["alice"])
    assert alice.get(f"/api/v1/rollouts/{rollout.pk}/").status_code == 200
    assert alice.post(f"/api/v1/rollouts/{rollout.pk}/pause/").status_code == 403
    assert fresh(rollout).state == "running"


def test_the_rollout_pages(world: World, client: Any) -> None:
    fleet = Fleet(world, 2)
    client.force_login(world.users["lena"])
    form = client.get("/rollouts/new", {"group": fleet.group.pk, "version": fleet.v2.pk})
    assert form.status_code == 200
    bad = client.post("/rollouts/new", {"group": fleet.group.pk, "version": fleet.v2.pk, "phases": '[{"percent": 5}]'})
    assert bad.status_code == 400
    assert "100 percent" in bad.content.decode()
    made = client.post("/rollouts/new", {"group": fleet.group.pk, "version": fleet.v2.pk, "auto_rollback": "on",
                                         "failure_threshold": "1"})  # fmt: skip
    assert made.status_code == 302
    rollout = Rollout.objects.get()
    page = client.get(f"/rollouts/{rollout.pk}/").content.decode()
    assert "1 updating" in page
    assert "canary of 1" in page
    assert "Pause</button>" in page
    assert client.get("/rollouts/").status_code == 200
    assert client.post(f"/rollouts/{rollout.pk}/pause/").status_code == 302
    assert fresh(rollout).state == "paused"
    client.force_login(world.users["alice"])
    assert "Resume</button>" not in client.get(f"/rollouts/{rollout.pk}/").content.decode()
    assert client.post(f"/rollouts/{rollout.pk}/resume/").status_code == 403
    client.force_login(world.users["trent"])
    assert client.get(f"/rollouts/{rollout.pk}/").status_code == 404
    assert client.post(f"/rollouts/{rollout.pk}/cancel/").status_code == 404
    assert fresh(rollout).state == "paused"


def test_the_rollout_form_offers_the_default_phases_and_starts_with_them(world: World) -> None:
    fleet = Fleet(world, 2)
    page = Client()
    page.force_login(world.users["lena"])
    shown = page.get(f"/rollouts/new?group={fleet.group.pk}&version={fleet.v2.pk}")
    assert shown.status_code == 200
    found = re.search(r'<input name="phases" id="phases" value="([^"]*)"', shown.content.decode())
    assert found is not None
    field = html.unescape(found[1])
    assert json.loads(field) == rollouts.DEFAULT_PHASES  # the whole default, not a value the HTML cut short
    started = page.post("/rollouts/new", {"group": fleet.group.pk, "version": fleet.v2.pk, "phases": field})
    assert started.status_code == 302, started.content.decode()[-2000:]
    rollout = Rollout.objects.get()
    assert rollout.phases == rollouts.DEFAULT_PHASES
