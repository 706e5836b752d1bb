"""Who reaches a model: its team and the organization's finance and admins see it; another team, another
organization get a 404 for the model, its versions and its bytes, through the API and the pages alike; the
policy decides who publishes and deletes. And the artifact download: whole, or one range (206)."""

from __future__ import annotations

import io
import os
from typing import Any

import pytest
from django.test import Client

from registry import actions
from registry.models import Model, ModelVersion
from tests.conftest import World
from tests.registry.conftest import Store, sha, vision_model

pytestmark = pytest.mark.django_db

DATA = os.urandom(100_000)


@pytest.fixture
def version(world: World, store: Store) -> ModelVersion:
    model = vision_model(world)
    return actions.publish_upload(
        world.users["alice"], model, _stream(DATA), "w.bin", actions.Publication(metrics={"acc": 0.5})
    )


def _stream(data: bytes) -> Any:
    return io.BytesIO(data)


def urls(v: ModelVersion) -> list[str]:
    base = f"/api/v1/models/{v.model_id}/"
    return [base, f"{base}versions/", f"{base}versions/{v.pk}/", f"{base}versions/{v.pk}/artifact"]


def page(world: World, user: str) -> Client:
    client = Client()
    client.force_login(world.users[user])
    return client


@pytest.mark.parametrize("user", ["alice", "lena", "fiona", "adam"])
def test_the_team_finance_and_admins_see_it(world: World, api: Any, version: ModelVersion, user: str) -> None:
    for url in urls(version):
        assert api(user).get(url).status_code == 200, url
    assert page(world, user).get(f"/models/{version.model_id}/").status_code == 200


@pytest.mark.parametrize("user", ["bob", "trent", "mallory"])
def test_another_team_or_organization_gets_404(world: World, api: Any, version: ModelVersion, user: str) -> None:
    for url in urls(version):
        assert api(user).get(url).status_code == 404, url
    posted = api(user).post(f"/api/v1/models/{version.model_id}/versions/", {"job": 1}, format="json")
    assert posted.status_code == 404
    assert api(user).delete(f"/api/v1/models/{version.model_id}/").status_code == 404
    assert api(user).get("/api/v1/models/").json()["results"] == []
    assert page(world, user).get(f"/models/{version.model_id}/").status_code == 404
    listing = page(world, user).get("/models/")
    assert b"resnet" not in listing.content
    assert Model.objects.count() == 1
    assert ModelVersion.objects.count() == 1


def test_finance_reads_but_may_not_publish(world: World, api: Any, version: ModelVersion) -> None:
    refused = api("fiona").post(
        f"/api/v1/models/{version.model_id}/versions/", {"job": 1, "metrics": "bad"}, format="json"
    )
    assert refused.status_code == 403  # before the body is judged
    assert api("fiona").post("/api/v1/models/", {"team": "vision", "name": "x"}).status_code == 403


def test_only_leads_and_admins_delete(
    world: World, api: Any, version: ModelVersion, store: Store, django_capture_on_commit_callbacks: Any
) -> None:
    url = f"/api/v1/models/{version.model_id}/"
    assert api("alice").delete(url).status_code == 403
    with django_capture_on_commit_callbacks(execute=True):
        assert api("lena").delete(url).status_code == 204
    assert not Model.objects.exists()
    assert not ModelVersion.objects.exists()
    assert store.files() == []  # no other version held the bytes


def test_download_whole_and_in_ranges(world: World, api: Any, version: ModelVersion) -> None:
    url = urls(version)[3]
    client = api("alice")
    whole = client.get(url)
    assert whole.status_code == 200
    assert b"".join(whole.streaming_content) == DATA
    assert whole["ETag"] == f'"{sha(DATA)}"'
    assert whole["Accept-Ranges"] == "bytes"
    assert whole["Content-Length"] == str(len(DATA))
    part = client.get(url, HTTP_RANGE="bytes=1000-1999")
    assert part.status_code == 206
    assert b"".join(part.streaming_content) == DATA[1000:2000]
    assert part["Content-Range"] == f"bytes 1000-1999/{len(DATA)}"
    rest = client.get(url, HTTP_RANGE="bytes=99000-")
    assert (rest.status_code, b"".join(rest.streaming_content)) == (206, DATA[99000:])
    tail = client.get(url, HTTP_RANGE="bytes=-10")
    assert (tail.status_code, b"".join(tail.streaming_content)) == (206, DATA[-10:])
    beyond = client.get(url, HTTP_RANGE=f"bytes={len(DATA)}-")
    assert (beyond.status_code, beyond["Content-Range"]) == (416, f"bytes */{len(DATA)}")
    stale = client.get(url, HTTP_RANGE="bytes=10-", HTTP_IF_RANGE='"0000"')
    assert stale.status_code == 200  # other bytes than the client's part: the whole file
    same = client.get(url, HTTP_RANGE="bytes=10-", HTTP_IF_RANGE=f'"{sha(DATA)}"')
    assert same.status_code == 206
    several = client.get(url, HTTP_RANGE="bytes=0-1,5-6")
    assert several.status_code == 200
    octet = client.get(url, HTTP_ACCEPT="application/octet-stream")
    assert octet.status_code == 200
    # A signed-in page session downloads too (the model page's link).
    assert page(world, "lena").get(url, HTTP_RANGE="bytes=0-9").status_code == 206
