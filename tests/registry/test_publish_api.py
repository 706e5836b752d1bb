"""Publishing through the API: an upload (size and SHA-256 computed, a given checksum verified), a finished
job's latest checkpoint (copied from an import root, or recorded by location), version names; bad input is a
400 naming the field with nothing kept (no row, no bytes); everything audited."""

from __future__ import annotations

import io
import os
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from registry.models import Model, ModelVersion
from scheduler.models import Job
from tenancy.models import AuditLog
from tests.conftest import World
from tests.registry.conftest import Store, ended_job, sha, vision_model
from tests.scheduler.conftest import Fleet

pytestmark = pytest.mark.django_db

WEIGHTS = os.urandom(300_000)


def upload(api: Any, model: Model, data: bytes = WEIGHTS, user: str = "alice", **fields: Any) -> Any:
    body = {"file": SimpleUploadedFile("weights.safetensors", data), **fields}
    return api(user).post(f"/api/v1/models/{model.pk}/versions/", body, format="multipart")


def fields_of(response: Any) -> set[str]:
    assert response.status_code == 400, response.content
    return set(response.json()["error"]["fields"])


def test_create_a_model_and_list_it(world: World, api: Any) -> None:
    made = api("alice").post("/api/v1/models/", {"team": "vision", "name": "resnet", "description": "a net"})
    assert made.status_code == 201, made.content
    assert made.json()["team"] == "vision"
    assert made.json()["latest"] is None
    listed = api("lena").get("/api/v1/models/").json()["results"]
    assert [m["name"] for m in listed] == ["resnet"]
    assert AuditLog.objects.filter(action="model.created", target_id=str(made.json()["id"])).exists()
    again = api("lena").post("/api/v1/models/", {"team": "vision", "name": "resnet"})
    assert fields_of(again) == {"name"}
    assert fields_of(api("alice").post("/api/v1/models/", {"team": "vision", "name": "Bad Name!"})) == {"name"}
    assert fields_of(api("adam").post("/api/v1/models/", {"name": "resnet"})) == {"team"}  # admin: many teams


def test_upload_computes_size_and_checksum_and_numbers_versions(world: World, api: Any, store: Store) -> None:
    model = vision_model(world)
    first = upload(api, model, metrics='{"accuracy": 0.93, "loss": 1}', notes="first cut")
    assert first.status_code == 201, first.content
    body = first.json()
    assert (body["version"], body["size_bytes"], body["sha256"], body["stored"]) == (
        "1",
        len(WEIGHTS),
        sha(WEIGHTS),
        True,
    )
    assert body["metrics"] == {"accuracy": 0.93, "loss": 1}
    assert body["published_by"] == "alice"
    kept = store.root / str(world.org.pk) / sha(WEIGHTS)
    assert kept.read_bytes() == WEIGHTS
    assert body["artifact_uri"] == "upload:weights.safetensors"
    # The checksum given matches: accepted; the next number; the same bytes are kept once.
    second = upload(api, model, sha256=sha(WEIGHTS).upper())
    assert second.status_code == 201
    assert second.json()["version"] == "2"
    named = upload(api, model, b"other", version="v1.0-rc.1")
    assert named.status_code == 201
    assert named.json()["version"] == "v1.0-rc.1"
    assert upload(api, model, b"third").json()["version"] == "3"  # named versions do not count
    assert len(store.files()) == 3
    audited = AuditLog.objects.filter(action="model.version_published").order_by("pk")
    assert [e.changes["version"] for e in audited] == ["1", "2", "v1.0-rc.1", "3"]
    assert audited[0].changes["sha256"] == sha(WEIGHTS)
    latest = api("lena").get(f"/api/v1/models/{model.pk}/").json()["latest"]
    assert latest["version"] == "3"


def test_a_checksum_that_does_not_match_keeps_nothing(world: World, api: Any, store: Store) -> None:
    model = vision_model(world)
    refused = upload(api, model, sha256=sha(b"something else"))
    assert fields_of(refused) == {"sha256"}
    assert sha(WEIGHTS) in refused.json()["error"]["fields"]["sha256"][0]
    assert not ModelVersion.objects.exists()
    assert store.files() == []
    # Bytes another version holds stay when a second upload of them is refused.
    assert upload(api, model).status_code == 201
    assert fields_of(upload(api, model, size_bytes=5)) == {"size_bytes"}
    assert len(store.files()) == 1
    assert ModelVersion.objects.count() == 1


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"metrics": "[1, 2]"}, "metrics"),
        ({"metrics": '{"accuracy": "high"}'}, "metrics"),
        ({"metrics": '{"ok": true}'}, "metrics"),
        ({"metrics": "{not json"}, "metrics"),
        ({"version": "1/2"}, "version"),
        ({"version": "x" * 65}, "version"),
        ({"sha256": "abc"}, "sha256"),
        ({"colour": "blue"}, "colour"),
        ({"job": 987654}, "job"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_keeps_nothing(
    world: World, api: Any, store: Store, fields: dict[str, Any], named: str
) -> None:
    model = vision_model(world)
    assert named in fields_of(upload(api, model, **fields))
    assert not ModelVersion.objects.exists()
    assert store.files() == []


def test_a_version_name_is_unique_in_its_model(world: World, api: Any, store: Store) -> None:
    model = vision_model(world)
    assert upload(api, model, version="7").status_code == 201
    assert fields_of(upload(api, model, b"new bytes", version="7")) == {"version"}
    assert len(store.files()) == 1
    assert upload(api, model, b"new bytes").json()["version"] == "8"
    # Another model may have a version 7.
    assert upload(api, vision_model(world, "other"), version="7").status_code == 201


def test_neither_file_nor_job(world: World, api: Any) -> None:
    model = vision_model(world)
    refused = api("alice").post(f"/api/v1/models/{model.pk}/versions/", {"version": "1"})
    assert fields_of(refused) == {"file", "job"}


def test_publish_from_a_job_copies_a_readable_checkpoint(world: World, api: Any, store: Store, fleet: Fleet) -> None:
    checkpoint = store.own / "run-7" / "step-500.pt"
    checkpoint.parent.mkdir()
    checkpoint.write_bytes(WEIGHTS)
    job = ended_job(fleet, str(checkpoint))
    model = vision_model(world)
    made = api("lena").post(
        f"/api/v1/models/{model.pk}/versions/", {"job": job.pk, "metrics": {"success_rate": 0.81}}, format="json"
    )
    assert made.status_code == 201, made.content
    body = made.json()
    assert (body["stored"], body["sha256"], body["size_bytes"], body["source_job"]) == (
        True,
        sha(WEIGHTS),
        len(WEIGHTS),
        job.pk,
    )
    assert body["source_checkpoint"] == f"{checkpoint} (step 500)"  # the latest, not the first
    assert (store.root / str(world.org.pk) / sha(WEIGHTS)).read_bytes() == WEIGHTS
    entry = AuditLog.objects.get(action="model.version_published")
    assert entry.changes["source_job"] == job.pk
    assert entry.actor == world.users["lena"]
    # file:// names the same file.
    linked = ended_job(fleet, f"file://{checkpoint}")
    again = api("lena").post(f"/api/v1/models/{model.pk}/versions/", {"job": linked.pk}, format="json")
    assert (again.json()["stored"], again.json()["version"]) == (True, "2")


def test_a_job_publishes_no_other_teams_file(world: World, api: Any, store: Store, fleet: Fleet) -> None:
    """The import root is shared: a vision job that reports robotics' file (or the organization's, or another
    organization's, or a link to one from its own part) as its checkpoint publishes none of its bytes."""
    theirs = {}
    for where in ("demo/robotics", "demo", "rival/intruders"):
        area = store.imports / where
        area.mkdir(parents=True, exist_ok=True)
        theirs[where] = area / "weights.pt"
        theirs[where].write_bytes(f"{where}'s weights".encode())
    (store.own / "borrowed.pt").symlink_to(theirs["demo/robotics"])
    model = vision_model(world)
    for location in [*(str(p) for p in theirs.values()), str(store.own / "borrowed.pt")]:
        job = ended_job(fleet, location)
        page = Client()
        page.force_login(world.users["alice"])
        assert page.get(f"/models/publish/?job={job.pk}").context["importable"] is False
        made = api("alice").post(
            f"/api/v1/models/{model.pk}/versions/",
            {"job": job.pk, "sha256": sha(location.encode()), "size_bytes": 1},
            format="json",
        )
        assert made.status_code == 201, made.content
        assert (made.json()["stored"], made.json()["download_url"]) == (False, None), location
    assert store.files() == []  # not one byte of theirs in the store


def test_a_checkpoint_the_portal_cannot_read_is_recorded_by_location(
    world: World, api: Any, store: Store, fleet: Fleet, tmp_path: Any
) -> None:
    outside = tmp_path / "elsewhere.pt"
    outside.write_bytes(b"secret of the server")
    (store.own / "link.pt").symlink_to(outside)  # a link out of the import root does not count
    model = vision_model(world)
    for location in ("s3://bucket/run/step-500", str(outside), str(store.own / "link.pt"), "relative/x.pt"):
        job = ended_job(fleet, location)
        given = sha(location.encode())
        made = api("alice").post(
            f"/api/v1/models/{model.pk}/versions/",
            {"job": job.pk, "sha256": given, "size_bytes": 123},
            format="json",
        )
        assert made.status_code == 201, made.content
        body = made.json()
        assert (body["stored"], body["sha256"], body["size_bytes"], body["download_url"]) == (False, given, 123, None)
        assert body["artifact_uri"] == location
    assert store.files() == []
    # Its bytes cannot be downloaded: the portal does not hold them.
    version = ModelVersion.objects.filter(model=model).first()
    assert version is not None
    assert api("alice").get(f"/api/v1/models/{model.pk}/versions/{version.pk}/artifact").status_code == 404


def test_which_jobs_may_be_published_from(world: World, api: Any, store: Store, fleet: Fleet) -> None:
    model = vision_model(world)

    def publish(job: Job) -> Any:
        return api("alice").post(f"/api/v1/models/{model.pk}/versions/", {"job": job.pk}, format="json")

    running = ended_job(fleet, "s3://b/ckpt", state=Job.State.RUNNING)
    assert fields_of(publish(running)) == {"job"}
    assert "running" in publish(running).json()["error"]["fields"]["job"][0]
    no_checkpoint = ended_job(fleet, None)
    assert fields_of(publish(no_checkpoint)) == {"job"}
    failed_with_checkpoint = ended_job(fleet, "s3://b/ckpt", state=Job.State.FAILED)
    assert publish(failed_with_checkpoint).status_code == 201
    other_team = fleet.submit("bob", team="robotics")
    Job.objects.filter(pk=other_team.pk).update(state=Job.State.SUCCEEDED)
    assert fields_of(api("adam").post(f"/api/v1/models/{model.pk}/versions/", {"job": other_team.pk})) == {"job"}
    # Alice cannot see robotics' job: named the same way as one that does not exist.
    assert fields_of(publish(other_team)) == {"job"}
    assert ModelVersion.objects.count() == 1


def test_an_upload_may_name_the_job_it_came_from(world: World, api: Any, store: Store, fleet: Fleet) -> None:
    job = ended_job(fleet, None, state=Job.State.RUNNING)
    model = vision_model(world)
    made = upload(api, model, job=str(job.pk))
    assert made.status_code == 201
    assert made.json()["source_job"] == job.pk
    assert made.json()["stored"] is True


def test_too_large_an_upload_keeps_nothing(world: World, api: Any, store: Store, settings: Any) -> None:
    settings.ARTIFACT_MAX_BYTES = 1000
    model = vision_model(world)
    assert fields_of(upload(api, model, io.BytesIO(b"x" * 1001).read())) == {"file"}
    assert store.files() == []
    assert not ModelVersion.objects.exists()


def test_publish_by_name_makes_the_model_with_its_first_version_or_neither(
    world: World, api: Any, store: Store, fleet: Fleet
) -> None:
    """``models/publish/``: a new name makes the model and its version in one step; a refused version leaves
    no empty model behind; a known name adds a version to that model."""
    job = ended_job(fleet, "s3://bucket/run-1/step-500")
    refused = api("alice").post(
        "/api/v1/models/publish/", {"team": "vision", "name": "detr", "job": job.pk, "version": "a/b"}
    )
    assert fields_of(refused) == {"version"}
    bad_bytes = {"team": "vision", "name": "detr", "file": SimpleUploadedFile("w.bin", WEIGHTS), "sha256": "0" * 64}
    assert fields_of(api("alice").post("/api/v1/models/publish/", bad_bytes, format="multipart")) == {"sha256"}
    assert not Model.objects.filter(name="detr").exists()
    assert store.files() == []

    made = api("alice").post("/api/v1/models/publish/", {"name": "detr", "job": job.pk, "metrics": {"map": 0.4}})
    assert made.status_code == 201, made.content  # alice is in one team: vision
    assert (made.json()["model_name"], made.json()["version"], made.json()["stored"]) == ("detr", "1", False)
    model = Model.objects.get(team=world.teams["vision"], name="detr")
    assert AuditLog.objects.filter(action="model.created", target_id=str(model.pk)).exists()
    body = {"team": "vision", "name": "detr", "file": SimpleUploadedFile("w.bin", WEIGHTS), "sha256": sha(WEIGHTS)}
    again = api("lena").post("/api/v1/models/publish/", body, format="multipart")
    assert again.status_code == 201, again.content
    assert (again.json()["model"], again.json()["version"], again.json()["stored"]) == (model.pk, "2", True)
    assert Model.objects.filter(name="detr").count() == 1


def test_publish_by_name_in_another_teams_name_is_refused_and_makes_nothing(
    world: World, api: Any, fleet: Fleet
) -> None:
    job = ended_job(fleet, "s3://bucket/run-1/step-500")
    assert fields_of(api("alice").post("/api/v1/models/publish/", {"team": "heist", "name": "x", "job": job.pk})) == {
        "team"
    }
    assert fields_of(
        api("mallory").post("/api/v1/models/publish/", {"team": "vision", "name": "x", "job": job.pk})
    ) == {"team"}
    assert fields_of(api("alice").post("/api/v1/models/publish/", {"team": "vision", "job": job.pk})) == {"name"}
    assert not Model.objects.exists()
