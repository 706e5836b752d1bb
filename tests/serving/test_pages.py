"""The service pages: the list with replicas, load and cost; the form's 400 naming each field and writing
nothing; the page's endpoint, replicas, revisions and buttons; another team's service a 404."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone

from scheduler.models import Attempt
from serving import actions
from serving.models import Replica, Revision, Service, ServiceSample
from tests.scheduler.conftest import Fleet, fleet  # noqa: F401 - the fixture
from tests.scheduler.test_pages import signed_in

pytestmark = pytest.mark.django_db

FORM = {
    "team": "",
    "project": "",
    "name": "chat-api",
    "image": "ghcr.io/lab/serve:1",
    "command": "python3 deploy/model_server.py --port $PORT",
    "env": "MODE=fast",
    "port": "0",
    "health_path": "/health",
    "accelerators": "0",
    "cpu": "0.5",
    "memory_gib": "1",
    "min_replicas": "1",
    "max_replicas": "4",
    "metric": "rps",
    "target": "20",
    "scale_to_zero_after": "",
    "model_version": "",
}


def make(fleet: Fleet, **fields: Any) -> Service:  # noqa: F811
    given = {
        "image": "ghcr.io/lab/serve:1",
        "command": ["python3", "serve.py"],
        "cpu": 500,
        "memory": 1024,
        "max_replicas": 4,
        **fields,
    }
    return actions.create_service(fleet.user("alice"), team=fleet.world.teams["vision"], name="chat-api", **given)


def test_the_form_creates_a_service_and_refuses_bad_input_by_field(fleet: Fleet) -> None:  # noqa: F811
    client = signed_in(fleet, "alice")
    assert client.get("/services/new/").status_code == 200
    form = {**FORM, "team": str(fleet.world.teams["vision"].pk)}
    bad = client.post("/services/new/", {**form, "cpu": "many", "min_replicas": "9", "env": "NOEQUALS"})
    assert bad.status_code == 400
    errors = bad.context["form"].errors
    assert set(errors) >= {"cpu", "env"}
    bad = client.post("/services/new/", {**form, "min_replicas": "9", "health_path": "health"})
    assert bad.status_code == 400
    assert set(bad.context["form"].errors) >= {"min_replicas", "health_path"}
    assert not Service.objects.exists()
    made = client.post("/services/new/", form)
    service = Service.objects.get()
    assert made.status_code == 302
    assert made["Location"] == f"/services/{service.pk}/"
    assert service.revision is not None
    assert (service.revision.cpu, service.revision.env) == (500, {"MODE": "fast"})


def test_the_list_and_the_page_show_replicas_load_and_cost(fleet: Fleet) -> None:  # noqa: F811
    service = make(fleet)
    assert service.revision is not None
    job = fleet.submit(name="chat-api-r1", time_limit=3600)
    replica = Replica.objects.create(
        service=service, revision=service.revision, job=job, state=Replica.State.READY, created_at=timezone.now()
    )
    fleet.cycle()
    assert Attempt.objects.filter(job=job).update(cost_per_hour=Decimal("2.5")) == 1
    now = timezone.now()
    ServiceSample.objects.create(service=service, at=now - timedelta(seconds=5), requests=500, rps=12.5, p95_ms=40)
    page = signed_in(fleet, "lena").get("/services/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "chat-api" in text
    assert "12.5" in text
    assert "40 ms" in text
    page = signed_in(fleet, "alice").get(f"/services/{service.pk}/")
    text = page.content.decode()
    assert page.status_code == 200
    assert "http://127.0.0.1:8001/serve/demo/vision/chat-api/" in text  # at the data plane
    assert 'data-testid="service-chart"' in text
    assert "service-load-figure" in text
    assert f'data-replica="{replica.pk}"' in text
    assert page.context["summary"].cost_per_hour == Decimal("2.50")
    assert page.context["last_hour"].requests == 500
    assert 'data-revision="1"' in text
    assert "Roll back" in text


def test_buttons_change_the_service_and_edit_rolls_out(fleet: Fleet) -> None:  # noqa: F811
    service = make(fleet)
    client = signed_in(fleet, "alice")
    edit = client.get(f"/services/{service.pk}/edit/")
    assert edit.status_code == 200
    data = {**edit.context["form"].initial, "image": "ghcr.io/lab/serve:2", "public": ""}
    data = {k: v for k, v in data.items() if v is not None}
    assert client.post(f"/services/{service.pk}/edit/", data).status_code == 302
    assert service.revisions.get(number=2).state == Revision.State.ROLLING_OUT
    bad = client.post(f"/services/{service.pk}/scale/", {"min_replicas": "5", "max_replicas": "2"})
    assert bad.status_code == 400
    assert "min_replicas" in bad.context["scale_form"].errors
    assert client.post(f"/services/{service.pk}/scale/", {"min_replicas": "2", "max_replicas": "5"}).status_code == 302
    assert client.post(f"/services/{service.pk}/stop/").status_code == 302
    assert client.post(f"/services/{service.pk}/stop/").status_code == 400  # stopped already
    assert client.post(f"/services/{service.pk}/start/").status_code == 302
    service.refresh_from_db()
    assert (service.state, service.min_replicas, service.max_replicas) == ("active", 2, 5)


def test_another_teams_service_is_a_404_and_others_may_not_change(fleet: Fleet) -> None:  # noqa: F811
    service = make(fleet)
    bob = signed_in(fleet, "bob")
    for path in ("", "edit/"):
        assert bob.get(f"/services/{service.pk}/{path}").status_code == 404
    for path in ("scale/", "stop/", "start/", "rollback/"):
        assert bob.post(f"/services/{service.pk}/{path}").status_code == 404
    fiona = signed_in(fleet, "fiona")
    assert fiona.get(f"/services/{service.pk}/").status_code == 200
    assert "Roll back" not in fiona.get(f"/services/{service.pk}/").content.decode()
    assert fiona.post(f"/services/{service.pk}/stop/").status_code == 403
    assert fiona.get(f"/services/{service.pk}/edit/").status_code == 403
    assert Service.objects.get(pk=service.pk).state == Service.State.ACTIVE
    assert "chat-api" not in bob.get("/services/").content.decode()
