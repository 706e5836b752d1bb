"""The forecasts API: finance and admins of the organization read its forecasts; researchers and leads get a
403; another organization's people see nothing of it; a bad parameter is a 400 naming it."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from tests.billing.test_forecast_history import Lab, lab  # noqa: F401 - the fixture
from tests.conftest import api_client

URL = "/api/v1/forecasts/"


@pytest.fixture
def history(lab: Lab) -> Lab:  # noqa: F811 - the fixture imported above
    lab.history(70, timezone.now().date())
    return lab


@pytest.mark.parametrize("username", ["fiona", "adam"])
def test_finance_and_admins_read_each_flavors_forecast_and_backtest(history: Lab, api: Any, username: str):
    response = api(username).get(URL)
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["organization"], body["horizon"], body["period"], body["levels"]) == ("demo", "12w", "day", [80, 95])
    assert body["today"] == timezone.now().date().isoformat()
    flavors = {f["flavor"]: f for f in body["flavors"]}
    assert set(flavors) == {"A100", "H100"}
    h100 = flavors["H100"]
    assert h100["message"] == ""
    assert h100["model"] == "weighted Theta, 28-day median and seasonal naive"
    assert len(h100["weights"]) == 3
    assert sum(h100["weights"][0].values()) == pytest.approx(1.0)
    assert h100["verdict"]
    assert (h100["accelerators"], h100["capacity"]) == (16, 384.0)  # two nodes of 8, all day
    assert len(h100["history"]) == 70
    assert len(h100["forecast"]) == 84
    assert len(h100["weeks"]) == 12
    day = h100["history"][-1]
    assert day["capacity"] == 192.0
    assert day["used"] == day["demand"] > 0
    assert day["queued"] == 0
    point = h100["forecast"][0]
    assert point["start"] == body["today"]
    assert point["lower_95"] <= point["lower_80"] <= point["demand"] <= point["upper_80"] <= point["upper_95"]
    test = h100["backtest"]
    assert (test["origins"], test["stride"]) == (50, 1)
    assert [s["weeks"] for s in test["scores"]] == [1, 4, 12]
    four = test["scores"][1]
    assert four["wape"] is not None
    assert 0 <= four["coverage_80"] <= four["coverage_95"] <= 100
    assert test["message"] == ""
    [vision] = h100["teams"]
    assert vision["team"] == "Vision"  # the only team with demand: all of it
    assert [w["demand"] for w in vision["weeks"]] == pytest.approx([w["demand"] for w in h100["weeks"]], abs=0.01)
    assert flavors["A100"]["message"] == "not enough history (0 days; needs 14)"
    assert flavors["A100"]["forecast"] == []
    assert flavors["A100"]["backtest"]["message"]


def test_the_six_month_horizon_is_weekly_and_one_flavor_may_be_asked_for(history: Lab, api: Any):
    response = api("fiona").get(URL, {"horizon": "6m", "flavor": "H100"})
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["horizon"], body["period"]) == ("6m", "week")
    [h100] = body["flavors"]
    assert h100["flavor"] == "H100"
    assert len(h100["history"]) == 10
    assert len(h100["forecast"]) == 26
    assert h100["history"][-1]["capacity"] == 7 * 192.0
    assert h100["backtest"]["origins"] == 50  # the same forecast and backtest as the 12-week view
    twelve = api("fiona").get(URL, {"flavor": "H100"}).json()["flavors"][0]
    assert [w["demand"] for w in h100["weeks"][:12]] == [w["demand"] for w in twelve["weeks"]]


@pytest.mark.parametrize("username", ["alice", "bob", "lena", "trent"])
def test_researchers_and_leads_may_not_read_forecasts(history: Lab, api: Any, username: str):
    response = api(username).get(URL, {"horizon": "bogus"})  # refused before the parameters are judged
    assert response.status_code == 403
    assert "finance" in response.json()["error"]["message"]


def test_the_anonymous_are_asked_to_sign_in(history: Lab):
    assert api_client().get(URL).status_code == 401


def test_another_organizations_admin_sees_nothing_of_this_one(history: Lab, api: Any):
    response = api("mallory").get(URL)
    assert response.status_code == 200
    assert response.json()["organization"] == "rival"
    assert response.json()["flavors"] == []
    refused = api("mallory").get(URL, {"organization": "demo"})
    assert refused.status_code == 400
    assert list(refused.json()["error"]["fields"]) == ["organization"]
    unknown = api("mallory").get(URL, {"flavor": "H100"})  # the demo's flavor, not theirs
    assert unknown.status_code == 400
    assert "H100" in unknown.json()["error"]["fields"]["flavor"][0]
    assert "none" in unknown.json()["error"]["fields"]["flavor"][0]


@pytest.mark.parametrize(
    ("query", "fields"),
    [
        ({"horizon": "3m"}, ["horizon"]),
        ({"horizon": "12W"}, ["horizon"]),
        ({"flavor": "TPUv9"}, ["flavor"]),
        ({"horizon": "1y", "flavor": "TPUv9"}, ["flavor", "horizon"]),
        ({"organization": "nowhere"}, ["organization"]),
    ],
)
def test_a_bad_parameter_is_a_400_naming_it(history: Lab, api: Any, query: dict[str, str], fields: list[str]):
    response = api("fiona").get(URL, query)
    assert response.status_code == 400, response.content
    assert sorted(response.json()["error"]["fields"]) == fields


def test_the_schema_documents_the_endpoint(api: Any):
    response = api("adam").get("/api/schema/")
    if response.status_code == 404:
        pytest.skip("no schema endpoint at this path")
    assert b"/api/v1/forecasts/" in response.content
