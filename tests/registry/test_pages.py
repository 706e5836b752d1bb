"""The registry's pages: the models list and a model's versions, and publishing from a finished job's page in
one click (its defaults) or an upload; the form shows the actions' messages beside the fields."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from registry.models import Model, ModelVersion
from scheduler.models import Job
from tests.conftest import World
from tests.registry.conftest import Store, ended_job, sha
from tests.scheduler.conftest import Fleet

pytestmark = pytest.mark.django_db


def page(world: World, user: str = "alice") -> Client:
    client = Client()
    client.force_login(world.users[user])
    return client


def test_one_click_from_a_finished_job(world: World, store: Store, fleet: Fleet) -> None:
    checkpoint = store.own / "final.pt"
    checkpoint.write_bytes(b"weights")
    job = ended_job(fleet, str(checkpoint))
    client = page(world)
    detail = client.get(f"/jobs/{job.pk}/")
    assert f'/models/publish/?job={job.pk}"'.encode() in detail.content
    form = client.get(f"/models/publish/?job={job.pk}")
    assert form.status_code == 200
    assert b"copies its bytes" in form.content
    assert b"resnet-run" in form.content
    initial = form.context["form"].initial
    published = client.post(
        f"/models/publish/?job={job.pk}",
        {"team": initial["team"], "model": initial["model"], "version": "", "metrics": "", "notes": ""},
    )
    assert published.status_code == 302
    version = ModelVersion.objects.get()
    assert (version.model.name, version.version, version.sha256, version.stored) == (
        "resnet-run",
        "1",
        sha(b"weights"),
        True,
    )
    assert version.source_job_id == job.pk
    listing = client.get("/models/")
    assert b"resnet-run" in listing.content
    assert f"/jobs/{job.pk}/".encode() in listing.content
    versions = client.get(published["Location"])
    assert sha(b"weights")[:12].encode() in versions.content
    assert f"/api/v1/models/{version.model_id}/versions/{version.pk}/artifact".encode() in versions.content


def test_an_active_job_has_no_publish_button(world: World, fleet: Fleet) -> None:
    job = fleet.submit("alice", team="vision")
    assert b"/models/publish/" not in page(world).get(f"/jobs/{job.pk}/").content


def test_bad_input_is_shown_beside_the_field_and_nothing_is_kept(world: World, store: Store, fleet: Fleet) -> None:
    job = ended_job(fleet, "s3://b/ckpt")
    client = page(world)
    team = world.teams["vision"].pk
    bad = client.post(f"/models/publish/?job={job.pk}", {"team": team, "model": "m", "metrics": '{"acc": "x"}'})
    assert bad.status_code == 400
    assert bad.context["form"].errors["metrics"]
    no_json = client.post(f"/models/publish/?job={job.pk}", {"team": team, "model": "m", "metrics": "{"})
    assert no_json.context["form"].errors["metrics"]
    running = ended_job(fleet, "s3://b/ckpt", state=Job.State.RUNNING)
    refused = client.post(f"/models/publish/?job={running.pk}", {"team": team, "model": "m"})
    assert refused.status_code == 400
    assert "running" in str(refused.context["form"].non_field_errors())
    assert not Model.objects.exists()  # the new model went with the refused version
    assert store.files() == []


def test_upload_from_the_page(world: World, store: Store) -> None:
    client = page(world)
    done = client.post(
        "/models/publish/",
        {
            "team": world.teams["vision"].pk,
            "model": "detector",
            "version": "v2",
            "metrics": '{"map": 0.41}',
            "file": SimpleUploadedFile("d.onnx", b"onnx bytes"),
        },
    )
    assert done.status_code == 302
    version = ModelVersion.objects.get()
    assert (version.version, version.metrics, version.artifact_uri) == ("v2", {"map": 0.41}, "upload:d.onnx")


def test_another_teams_job_is_a_404_and_finance_may_not_publish(world: World, fleet: Fleet, store: Store) -> None:
    job = ended_job(fleet, "s3://b/ckpt")
    assert page(world, "bob").get(f"/models/publish/?job={job.pk}").status_code == 404
    assert page(world, "trent").get(f"/models/publish/?job={job.pk}").status_code == 404
    assert page(world, "fiona").get(f"/models/publish/?job={job.pk}").status_code == 403
    assert page(world, "fiona").get("/models/").status_code == 200
    assert page(world).get("/models/publish/?job=abc").status_code == 400


def test_the_navigation_links_models_for_team_members(world: World) -> None:
    assert b'href="/models/"' in page(world).get("/").content
    assert b'href="/models/"' not in page(world, "fiona").get("/").content
