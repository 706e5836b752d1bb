"""The Procurement page: finance and admins see each flavor's chart, the backtest's MAPE and coverage beside it,
the weeks demand may pass capacity and a link to the what-ifs; researchers and leads get a 403."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from django.utils.html import escape

from billing.forecast_history import forecast_organization
from billing.web.forecast import percent
from clusters.models import Node
from tests.billing.test_forecast_history import Lab, lab  # noqa: F401 - the fixture
from tests.conftest import World

URL = "/billing/capacity/"


@pytest.fixture
def history(lab: Lab) -> Lab:  # noqa: F811 - the fixture imported above
    lab.history(70, timezone.now().date())
    return lab


def client_for(world: World, username: str) -> Client:
    client = Client()
    client.force_login(world.users[username])
    return client


@pytest.mark.parametrize("username", ["fiona", "adam"])
def test_finance_sees_each_flavors_forecast_with_its_backtest_error(history: Lab, username: str):
    response = client_for(history.world, username).get(URL)
    assert response.status_code == 200
    html = response.content.decode()
    h100 = next(f for f in forecast_organization(history.org, "12w").flavors if f.flavor == "H100")
    four = h100.backtest.score(4)
    assert four is not None
    section = html[html.index('data-flavor="H100"') :]
    assert "Backtests from 50 origins" in section
    row = re.search(r"<th scope=\"row\">4 weeks</th><td>(\d+)</td><td>([^<]+)<", section)
    assert row is not None
    assert (int(row.group(1)), row.group(2).strip()) == (four.pairs, percent(four.wape))
    assert escape(h100.verdict) in section
    assert 'data-testid="team-forecasts"' in section
    # The chart's figure: history, both bands, the forecast and capacity.
    figure_id = re.search(r'data-plotly="([^"]+)"', section)
    assert figure_id is not None
    script = re.search(rf'<script id="{figure_id.group(1)}" type="application/json">(.+?)</script>', html, re.S)
    assert script is not None
    names = [trace["name"] for trace in json.loads(script.group(1))["data"]]
    assert names == [
        "95% upper",
        "95% interval",
        "80% upper",
        "80% interval",
        "Used",
        "Demand (used + queued)",
        "Forecast",
        "Capacity",
    ]
    assert 'href="/billing/what-ifs/"' in html
    assert "No forecast: not enough history (0 days; needs 14)" in html  # A100: nodes, no history
    assert "vendor/plotly/plotly-basic.min.js" in html


def test_weeks_where_demand_may_pass_capacity_are_listed(history: Lab):
    # The second node was busy all day too, and has left: today's fleet is 8 accelerators for twice that demand.
    Node.objects.filter(pk=history.nodes["H100"][1].pk).update(present=False)
    today = timezone.now().date()
    for i in range(1, 71):
        history.usage(today - timedelta(days=i), 86_400, 8000, node=1)  # another 192 hours a day
    response = client_for(history.world, "fiona").get(URL)
    html = response.content.decode()
    section = html[html.index('data-flavor="H100"') :]
    assert 'data-testid="shortfall-table"' in section
    assert "Weeks where demand may pass capacity" in section
    assert "the forecast" in section  # the mean itself passes 8 accelerators' 1,344 hours a week


def test_the_six_month_horizon_and_the_htmx_switch(history: Lab):
    client = client_for(history.world, "fiona")
    response = client.get(URL, {"horizon": "6m"})
    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-horizon="6m"' in html
    assert "Next 6 months" in html
    assert "accelerator-hours a week" in html
    partial = client.get(URL, {"horizon": "12w"}, HTTP_HX_REQUEST="true")
    assert partial.status_code == 200
    body = partial.content.decode()
    assert "<html" not in body
    assert 'data-horizon="12w"' in body
    assert 'data-testid="capacity-flavor"' in body


def test_a_bad_horizon_is_a_400_naming_it(history: Lab):
    response = client_for(history.world, "fiona").get(URL, {"horizon": "forever"})
    assert response.status_code == 400
    assert "horizon: &#x27;forever&#x27; is not one of 12w, 6m." in response.content.decode()


@pytest.mark.parametrize("username", ["alice", "bob", "lena"])
def test_researchers_and_leads_are_refused(history: Lab, username: str):
    assert client_for(history.world, username).get(URL).status_code == 403


def test_the_anonymous_are_sent_to_sign_in(history: Lab):
    response = Client().get(URL)
    assert response.status_code == 302
    assert "login" in response["Location"]


def test_another_organizations_admin_sees_only_their_own(history: Lab, world: World):
    html = client_for(world, "mallory").get(URL).content.decode()
    assert "Rival Labs" in html
    assert "Demo Research Lab" not in html
    assert 'data-flavor="H100"' not in html
    assert "No accelerator types with history, nodes or waiting jobs yet." in html


def test_the_page_reads_in_few_queries_once_fitted(history: Lab, django_assert_max_num_queries: Any):
    client = client_for(history.world, "fiona")
    client.get(URL)
    with django_assert_max_num_queries(8):  # the session, the user, their memberships: the forecast is cached
        assert client.get(URL).status_code == 200
