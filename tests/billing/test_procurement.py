"""The procurement role: it reads forecasts, keeps the capacity plan and asks for what-ifs, and sees no team's
work (jobs, usage, costs, services): no model's rows are shown to it but those named here."""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.test import Client
from django.utils import timezone

from billing.models import CapacityChange, WhatIf, WhatIfStudy
from scheduler.models import Job
from tenancy.models import Organization
from tenancy.scoping import Action, Role
from tests.billing.test_forecast_history import Lab, lab  # noqa: F401 - the fixture
from tests.conftest import api_client

#: The only models whose rows procurement may read: its organization, the capacity plan, what-ifs and their studies.
PROCUREMENT_READS = {Organization, CapacityChange, WhatIf, WhatIfStudy}


def test_no_model_shows_its_rows_to_procurement_but_the_planning_ones():
    readable = set()
    for model in apps.get_models():
        tenancy = getattr(model, "Tenancy", None)
        if tenancy is None:
            continue
        if Role.PROCUREMENT in tenancy.policy.get(Action.VIEW, frozenset()):
            readable.add(model)
    assert readable == PROCUREMENT_READS


def test_procurement_reads_forecasts_plans_and_asks_what_ifs(lab: Lab):  # noqa: F811
    lab.history(70, timezone.now().date())
    lab.job(lab.running["H100"].job.submitted_at, types=["H100"], state=Job.State.PENDING)
    paula = lab.world.users["paula"]
    api = api_client(paula)
    forecasts = api.get("/api/v1/forecasts/")
    assert forecasts.status_code == 200, forecasts.content
    h100 = next(f for f in forecasts.json()["flavors"] if f["flavor"] == "H100")
    assert [t["team"] for t in h100["teams"]] == ["Vision"]  # a team's part by its name, never its jobs
    body = {"flavor": "H100", "kind": "order", "accelerators": 16, "ordered_on": "2027-01-04", "lead_days": 60}
    assert api.post("/api/v1/capacity-plan/", body, format="json").status_code == 201
    asked = api.post(
        "/api/v1/what-ifs/",
        {"organization": "demo", "cluster": lab.cluster.pk, "flavor": lab.flavors["H100"].pk, "nodes": 2, "days": 7},
        format="json",
    )
    assert asked.status_code == 201, asked.content
    page = Client()
    page.force_login(paula)
    home = page.get("/").content.decode()
    assert 'data-testid="home-procurement"' in home
    assert "the next 12 weeks" in home
    assert page.get("/billing/capacity/").status_code == 200
    assert page.get("/billing/capacity/plan/").status_code == 200


def test_procurement_sees_no_jobs_costs_or_price_book(lab: Lab):  # noqa: F811
    lab.history(10, timezone.now().date())
    paula = lab.world.users["paula"]
    api: Any = api_client(paula)
    job = Job.objects.first()
    assert job is not None
    assert api.get("/api/v1/jobs/").json()["results"] == []
    assert api.get(f"/api/v1/jobs/{job.pk}/").status_code == 404
    assert api.get("/api/v1/teams/").json()["results"] == []
    assert api.get("/api/v1/prices/").json()["results"] == []
    assert api.get("/api/v1/billing/fleet.csv", {"organization": "demo"}).status_code == 403
    assert api.get("/api/v1/billing/meter/", {"organization": "demo"}).status_code == 403
    page = Client()
    page.force_login(paula)
    assert page.get("/billing/prices/").status_code == 403
    assert page.get(f"/jobs/{job.pk}/").status_code == 404
