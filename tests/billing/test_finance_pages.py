"""Finance's pages: the month's costs (chargeback for finance: every team, adding up to the fleet's total;
showback for researchers and leads: their team only, nothing of another), a team's statement, and the price
book (cloud and on-prem rows added, changed and deleted through ``billing/actions/prices.py``, audited; bad rows back
with 400 and each message beside its field; nobody but finance and admins writes anything)."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from html import unescape
from typing import Any

import pytest
from django.core.cache import cache
from django.http import FileResponse
from django.test import Client
from openpyxl import load_workbook

from billing import attribution, columns
from billing.actions import metering, prices
from billing.models import Overhead, Price
from billing.web.costs import rate_text
from billing.web.forms import PriceForm
from clusters.models import Node
from governance.actions import budgets
from tenancy.models import AuditLog
from tests.billing.conftest import placed
from tests.scheduler.conftest import Fleet

pytestmark = pytest.mark.django_db

OCT = date(2026, 10, 1)
START = datetime(2026, 10, 6, 9, tzinfo=UTC)
COSTS = "/billing/?month=2026-10"


@pytest.fixture(autouse=True)
def fresh_cache() -> Iterator[None]:
    """Attributions are kept in the cache by organization and month; ids repeat between tests on SQLite."""
    cache.clear()
    yield
    cache.clear()


def price_the_fleet(fleet: Fleet, rate: str) -> None:
    """An on-demand price for every flavor of the fleet's clusters from September, set by finance; the
    simulated clusters say they are on-demand capacity."""
    for cluster in fleet.clusters.values():
        flavors = Node.objects.filter(cluster=cluster, accelerator__isnull=False).values_list("accelerator__name")
        for (flavor,) in set(flavors):
            row = {
                "cluster": cluster.slug,
                "flavor": flavor,
                "capacity_type": "on_demand",
                "hourly_rate": rate,
                "effective_from": "2026-09-01",
            }
            prices.set_price(fleet.user("fiona"), fleet.org, row)
        cluster.options = {**cluster.options, "capacity_type": "on_demand"}
        cluster.save(update_fields=["options"])


@pytest.fixture
def costed(fleet: Fleet) -> Fleet:
    """October: alice's segformer ran on 4 accelerators for 10 hours (Vision), bob's grasp-policy on 2 for 5
    (Robotics), at 2.50 an hour; 1,000.00 of support a month; a budget per team."""
    price_the_fleet(fleet, "2.5")
    placed(fleet, admitted=START, ended=START + timedelta(hours=10), accelerators=4, name="segformer")
    placed(fleet, username="bob", admitted=START, ended=START + timedelta(hours=5), accelerators=2, name="grasp-policy")
    prices.set_overhead(fleet.user("fiona"), fleet.org, {"name": "Support", "amount": "1000", "starts": "2026-01-01"})
    metering.meter_capacity(fleet.org, START)
    metering.meter(fleet.org, START + timedelta(days=1))
    adam, teams = fleet.user("adam"), fleet.world.teams
    budgets.set_budget(adam, teams["vision"], amount=500, reason="the month's plan")
    budgets.set_budget(adam, teams["robotics"], accelerator_hours=20, reason="the month's plan")
    return fleet


def signed_in(fleet: Fleet, username: str) -> Client:
    client = Client()
    client.force_login(fleet.world.users[username])
    return client


def found(pattern: str, body: str) -> str:
    """The first group of ``pattern`` in ``body``, which must match."""
    match = re.search(pattern, body, re.S)
    assert match is not None, pattern
    return match.group(1)


def text(html: str) -> str:
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


def number(value: str) -> Decimal:
    return Decimal(value.replace(",", ""))


def rows(body: str, testid: str) -> list[str]:
    return re.findall(rf'<tr[^>]*data-testid="{testid}"[^>]*>(.*?)</tr>', body, re.S)


def cell(row: str, name: str) -> Decimal:
    found = re.search(rf'data-cell="{name}"[^>]*>(.*?)</td>', row, re.S)
    assert found is not None, name
    return number(text(found.group(1)))


def figure(body: str, name: str) -> Decimal:
    found = re.search(rf'data-figure="{name}"><h2>.*?</h2><p class="figure">(.*?)</p>', body, re.S)
    assert found is not None, name
    return number(found.group(1))


def field_error(body: str, name: str) -> str:
    """The message shown beside the field ``name`` (its ``.field.invalid`` block)."""
    for block in re.findall(r'<div class="field invalid">(.*?)</div>', body, re.S):
        if f'name="{name}"' in block:
            return text(" ".join(re.findall(r'<small class="error"[^>]*>(.*?)</small>', block, re.S)))
    raise AssertionError(f"no error beside {name}")


def month(fleet: Fleet) -> attribution.Attribution:
    return attribution.attribute(fleet.org, OCT)


# --- chargeback and showback ---------------------------------------------------------------------------------


def test_finance_sees_every_team_and_the_teams_add_up_to_the_fleet_total(costed: Fleet) -> None:
    response = signed_in(costed, "fiona").get(COSTS)
    assert response.status_code == 200
    body = response.content.decode()
    teams = dict(re.findall(r'<tr data-testid="team-row" data-team="([\w-]+)">(.*?)</tr>', body, re.S))
    assert set(teams) == set(costed.world.teams) - {"intruders"}  # every team of the organization
    totals = {slug: cell(row, "total") for slug, row in teams.items()}
    assert totals["vision"] > totals["robotics"] > 0
    assert totals["language"] == 0
    unallocated = [cell(r, "total") for r in rows(body, "unallocated-row")]
    (fleet_row,) = rows(body, "fleet-total-row")
    fleet_total = cell(fleet_row, "total")
    assert sum(totals.values()) + sum(unallocated) == fleet_total == figure(body, "fleet-total")
    expected = month(costed)
    assert fleet_total == attribution.money(expected.fleet_total)
    # Usage at 2.50 an hour: Vision 40 accelerator-hours, Robotics 10; the support overhead on top.
    assert cell(teams["vision"], "usage") == Decimal("100.00")
    assert cell(teams["robotics"], "usage") == Decimal("25.00")
    assert figure(body, "shared-overhead") == Decimal("1000.00")
    assert fleet_total == figure(body, "capacity-cost") + figure(body, "shared-overhead")
    # Each team links to its statement and its downloads; the fleet summary is offered.
    assert f'href="/billing/teams/{costed.world.teams["robotics"].pk}/?month=2026-10"' in body
    assert "/api/v1/billing/statements/robotics.xlsx?month=2026-10&amp;organization=demo" in body
    assert "/api/v1/billing/fleet.xlsx?month=2026-10&amp;organization=demo" in body
    # The charts: cost by team per day (a trace per team that used anything), idle cost per day, budget burn.
    context = response.context
    assert sorted(t["name"] for t in context["cost_chart"]["data"]) == ["Robotics", "Vision"]
    assert len(context["cost_chart"]["data"][0]["x"]) == 31
    assert sum(sum(t["y"]) for t in context["cost_chart"]["data"]) == pytest.approx(float(sum(totals.values())))
    assert sum(context["idle_chart"]["data"][0]["y"]) == pytest.approx(
        float(attribution.money(sum(expected.idle_by_day.values())))
    )
    burn = [(r["label"], r["measure"]) for r in context["budget"]["rows"]]
    assert burn == [("Robotics · the team", "accelerator-hours"), ("Vision · the team", "money")]
    for chart in ("budget-burn-figure", "cost-chart-figure", "idle-chart-figure"):
        assert f'id="{chart}"' in body
    # Top jobs link to their pages; pools show the idle capacity; the rule is stated.
    jobs = rows(body, "job-cost")
    assert "segformer" in jobs[0]
    assert "grasp-policy" in jobs[1]
    assert re.search(r'href="/jobs/\d+/">segformer</a>', body)
    assert len(rows(body, "pool")) == len(expected.pools)
    assert "in proportion to their accelerator-hours" in body
    assert 'data-testid="unpriced-warning"' not in body


def test_the_fleet_summary_linked_from_the_page_adds_up_to_the_total_shown(costed: Fleet) -> None:
    client = signed_in(costed, "fiona")
    body = client.get(COSTS).content.decode()
    link = unescape(found(r'href="([^"]+fleet\.xlsx[^"]*)"', body))
    response = client.get(link)
    assert response.status_code == 200
    assert isinstance(response, FileResponse)
    book = load_workbook(io.BytesIO(b"".join(response.streaming_content)), read_only=True)  # type: ignore[arg-type]
    header, *lines = list(book["Teams"].iter_rows(values_only=True))
    total = header.index("total")
    teams = [row for row in lines if row[1] != "Fleet total"]
    (fleet_line,) = [row for row in lines if row[1] == "Fleet total"]
    assert (
        sum(Decimal(str(row[total])) for row in teams) == Decimal(str(fleet_line[total])) == figure(body, "fleet-total")
    )


def test_every_amount_column_is_the_same_on_the_page_in_the_download_and_in_the_api(costed: Fleet) -> None:
    """The amount columns are declared once (``billing/columns.py``): each team's figure under each of them is the
    same on the costs page, in the fleet summary's CSV and in the costs API, under the same title and name."""
    client = signed_in(costed, "fiona")
    body = client.get(COSTS).content.decode()
    page = dict(re.findall(r'<tr data-testid="team-row" data-team="([\w-]+)">(.*?)</tr>', body, re.S))
    headings = re.search(r'data-testid="team-costs".*?<thead>(.*?)</thead>', body, re.S)
    assert headings is not None
    shown_headings = re.findall(r'class="num">([^<]+)</th>', headings.group(1))
    assert [c.heading for c in columns.AMOUNTS] == shown_headings[: len(columns.AMOUNTS)]
    download: Any = client.get("/api/v1/billing/fleet.csv?month=2026-10&organization=demo")
    header, *lines = csv.reader(io.StringIO(b"".join(download.streaming_content).decode()))
    by_team = {line[1]: dict(zip(header, line, strict=True)) for line in lines}
    api = client.get("/api/v1/billing/costs/?month=2026-10&group_by=team").json()
    answered = {row["team_name"]: row for row in api["rows"]}
    names = {team.slug: team.name for team in costed.world.teams.values()}
    for slug in ("vision", "robotics"):
        name = names[slug]
        for column in columns.AMOUNTS:
            shown = cell(page[slug], column.key)
            assert Decimal(by_team[name][column.title]) == Decimal(answered[name][column.key]), (slug, column.key)
            places = Decimal("0.1") if column.unit == columns.HOURS else Decimal("0.01")
            assert shown == Decimal(answered[name][column.key]).quantize(places), (slug, column.key)


@pytest.mark.parametrize("username", ["alice", "lena"])
def test_a_member_of_vision_sees_only_visions_figures(costed: Fleet, username: str) -> None:
    response = signed_in(costed, username).get(COSTS)
    assert response.status_code == 200
    body = response.content.decode()
    for other in ("Robotics", "robotics", "grasp-policy", "bob", "Language", "Fleet total", "Support"):
        # as a word: a random CSRF token may hold "bob"
        assert not re.search(rf"\b{other}\b", body), other
    (vision,) = re.findall(r'<tr data-testid="team-row" data-team="([\w-]+)">', body)
    assert vision == "vision"
    whole = month(costed)
    mine = attribution.visible_to(costed.user(username), whole).totals()
    assert figure(body, "total") == attribution.money(mine["total"])
    assert figure(body, "usage") == Decimal("100.00")
    # Vision's total is what finance sees for it, but the fleet's figures are not on the page.
    assert 'data-testid="pools"' not in body
    assert 'data-testid="fleet-downloads"' not in body
    assert "/api/v1/billing/fleet." not in body
    assert "/api/v1/billing/statements/vision.csv?month=2026-10&amp;organization=demo" in body
    context = response.context
    assert [t["name"] for t in context["cost_chart"]["data"]] == ["(no project)"]
    assert [r["label"] for r in context["budget"]["rows"]] == ["Vision · the team"]
    assert [j["name"] for j in context["jobs"]] == ["segformer"]
    assert "segformer" in body


@pytest.mark.parametrize("username", ["fiona", "alice"])
def test_the_costs_page_reads_a_fixed_number_of_queries(
    costed: Fleet, username: str, django_assert_max_num_queries: Any
) -> None:
    client = signed_in(costed, username)
    # The month's allocation reads about ten (price book, usage, capacity, names, overhead, the corrections of
    # closed months booked in it, the currency, the price book's power for energy where nothing was read, the grid
    # intensities) when not kept, and whether the month is closed two more.
    with django_assert_max_num_queries(31):
        assert client.get(COSTS).status_code == 200


def test_another_organization_sees_nothing_of_this_one(costed: Fleet) -> None:
    client = signed_in(costed, "mallory")
    response = client.get(COSTS)
    assert response.status_code == 200  # her own organization's month: nothing in it
    body = response.content.decode()
    for other in ("Vision", "Robotics", "segformer", "grasp-policy", "Support", "Demo"):
        assert other not in body, other
    assert "Rival Labs" in body
    assert "Nothing to chart for October 2026." in body
    assert client.get("/billing/").status_code == 200  # this month, by default
    assert client.get(f"{COSTS}&organization=demo").status_code == 404
    for team in ("vision", "robotics"):
        assert client.get(f"/billing/teams/{costed.world.teams[team].pk}/?month=2026-10").status_code == 404


def test_a_teams_statement_is_for_its_members_and_finance(costed: Fleet) -> None:
    robotics = f"/billing/teams/{costed.world.teams['robotics'].pk}/?month=2026-10"
    vision = f"/billing/teams/{costed.world.teams['vision'].pk}/?month=2026-10"
    assert signed_in(costed, "alice").get(robotics).status_code == 404
    assert signed_in(costed, "lena").get(robotics).status_code == 404
    response = signed_in(costed, "fiona").get(robotics)
    assert response.status_code == 200
    body = response.content.decode()
    (line,) = rows(body, "statement-line")
    assert "grasp-policy" in body
    assert "bob" in line
    (total,) = rows(body, "statement-total")
    robotics_total = next(r for r in month(costed).rollup(["team"]) if r["team_name"] == "Robotics")["total"]
    assert cell(total, "total") == cell(line, "total") == attribution.money(robotics_total)
    assert "of the fleet" in body  # finance sees the team's share of the fleet
    mine = signed_in(costed, "alice").get(vision)
    assert mine.status_code == 200
    body = mine.content.decode()
    assert "Robotics" not in body
    assert "of the fleet" not in body
    assert "/api/v1/billing/statements/vision.xlsx?month=2026-10&amp;organization=demo" in body
    parts = [t["name"] for t in mine.context["chart"]["data"]]
    assert parts == ["Usage", "Idle capacity share", "Shared overhead share"]


@pytest.mark.parametrize("value", ["2026-13", "October", "1999-12", "2026-1-1"])
def test_a_bad_month_is_a_400_naming_it(costed: Fleet, value: str) -> None:
    client = signed_in(costed, "fiona")
    for path in ("/billing/", f"/billing/teams/{costed.world.teams['vision'].pk}/"):
        response = client.get(path, {"month": value})
        assert response.status_code == 400
        body = response.content.decode()
        assert "month:" in text(body)
        assert 'id="month-error"' in body
        assert 'data-testid="team-costs"' not in body


def test_unpriced_hours_are_flagged_with_a_link_to_the_price_book(fleet: Fleet) -> None:
    placed(fleet, admitted=START, ended=START + timedelta(hours=2), accelerators=1)
    metering.meter_capacity(fleet.org, START)
    metering.meter(fleet.org, START + timedelta(hours=3))
    body = signed_in(fleet, "fiona").get(COSTS).content.decode()
    warning = text(found(r'data-testid="unpriced-warning">(.*?)</div>', body))
    assert warning.startswith("2.0 accelerator-hours have no price")
    assert 'href="/billing/prices/"' in body
    assert "no price" in text(" ".join(rows(body, "pool")))


def test_anonymous_visitors_are_sent_to_sign_in(world: Any) -> None:
    for path in ("/billing/", "/billing/prices/", "/billing/teams/1/"):
        response = Client().get(path)
        assert response.status_code == 302
        assert response["Location"].startswith("/login/")


# --- the price book ------------------------------------------------------------------------------------------

ON_PREM = {
    "cluster": "east",
    "flavor": "",
    "capacity_type": "on_prem",
    "effective_from": "2026-12-01",
    "purchase_price": "250000",
    "accelerators_per_node": "8",
    "depreciation_months": "48",
    "power_kw": "10.2",
    "energy_price": "0.15",
    "hosting_per_month": "1200",
    "hourly_rate": "",
    "note": "the new racks",
}


def flavor_of(fleet: Fleet) -> str:
    found = Node.objects.filter(cluster__organization=fleet.org, accelerator__isnull=False)
    return str(found.values_list("accelerator__name", flat=True).first())


def book() -> list[tuple[Any, ...]]:
    return list(Price.objects.order_by("pk").values_list("pk", "capacity_type", "effective_from", "rate"))


def audited() -> int:
    """Audit entries other than sign-ins."""
    return AuditLog.objects.exclude(action__startswith="auth.").count()


def test_finance_adds_a_cloud_and_an_on_prem_price(fleet: Fleet) -> None:
    client = signed_in(fleet, "fiona")
    flavor = flavor_of(fleet)
    assert client.get("/billing/prices/").status_code == 200
    cloud = {
        "organization": fleet.org.pk,
        "cluster": "west",
        "flavor": flavor,
        "capacity_type": "spot",
        "effective_from": "2026-11-01",
        "hourly_rate": "1.25",
        "note": "",
    }
    response = client.post("/billing/prices/", {**cloud, **dict.fromkeys(prices.ON_PREM_FIELDS, "")})
    assert response.status_code == 302
    spot = Price.objects.get(capacity_type="spot")
    assert response["Location"] == f"/billing/prices/#price-{spot.pk}"
    assert spot.rate == Decimal("1.25")
    assert spot.updated_by == fleet.user("fiona")

    response = client.post("/billing/prices/", {**ON_PREM, "flavor": flavor, "organization": fleet.org.pk})
    assert response.status_code == 302
    owned = Price.objects.get(capacity_type="on_prem")
    derived = prices.on_prem_rate(Decimal(250000), 8, 48, Decimal("10.2"), Decimal("0.15"), Decimal(1200))
    assert owned.rate == derived
    page = client.get("/billing/prices/")
    body = page.content.decode()
    row = found(rf'<tr id="price-{owned.pk}"[^>]*>(.*?)</tr>', body)
    assert text(found(r'data-cell="rate">(.*?)</td>', row)) == rate_text(derived)
    assert "the new racks" in text(row)
    assert text(found(r'data-cell="inputs">(.*?)</span>', row)) == (
        "250,000.00 a node over 48 months; 10.200 kW at 0.1500 a kWh; hosting 1,200.00 a month; 8 accelerators a node"
    )
    assert "1.25" in text(found(rf'<tr id="price-{spot.pk}"[^>]*>(.*?)</tr>', body))
    assert set(AuditLog.objects.filter(action="price.created").values_list("target_id", flat=True)) == {
        str(spot.pk),
        str(owned.pk),
    }


def test_a_bad_on_prem_row_comes_back_with_400_and_each_message_by_its_field(fleet: Fleet) -> None:
    before, entries = book(), audited()
    bad = {**ON_PREM, "flavor": flavor_of(fleet), "depreciation_months": "", "power_kw": "-1"}
    response = signed_in(fleet, "fiona").post("/billing/prices/", bad)
    assert response.status_code == 400
    body = response.content.decode()
    assert field_error(body, "depreciation_months") == "This field is required for an on-prem price."
    assert field_error(body, "power_kw")
    assert 'value="250000"' in body  # what was typed is kept
    assert re.search(r'<details class="disclosure" id="price-new" open', body)
    assert (book(), audited()) == (before, entries)


def test_only_finance_and_admins_keep_the_book(fleet: Fleet) -> None:
    price_the_fleet(fleet, "2")
    row = Price.objects.first()
    assert row is not None
    before, entries = book(), audited()
    for username in ("alice", "lena", "bob"):
        client = signed_in(fleet, username)
        assert client.get("/billing/prices/").status_code == 403
        assert client.post("/billing/prices/", {**ON_PREM, "flavor": flavor_of(fleet)}).status_code == 403
        assert client.get(f"/billing/prices/{row.pk}/").status_code == 404
        assert client.post(f"/billing/prices/{row.pk}/", {**ON_PREM}).status_code == 404
        assert client.post(f"/billing/prices/{row.pk}/delete/").status_code == 404
        overhead = {"name": "x", "amount": "1", "starts": "2026-10"}
        assert client.post("/billing/prices/overhead/", overhead).status_code == 403
    mallory = signed_in(fleet, "mallory")
    assert mallory.get("/billing/prices/").status_code == 200  # her own (empty) book
    assert "east" not in mallory.get("/billing/prices/").content.decode()
    assert mallory.post(f"/billing/prices/{row.pk}/delete/").status_code == 404
    assert (book(), audited(), Overhead.objects.count()) == (before, entries, 0)
    assert signed_in(fleet, "adam").get("/billing/prices/").status_code == 200


def test_an_edit_and_a_delete_are_audited(fleet: Fleet) -> None:
    price_the_fleet(fleet, "2")
    row = Price.objects.first()
    assert row is not None
    client = signed_in(fleet, "fiona")
    form = client.get(f"/billing/prices/{row.pk}/")
    assert form.status_code == 200
    assert 'value="2"' in form.content.decode()
    changed = {**PriceForm.initial_of(row), "hourly_rate": "2.75"}
    bad = client.post(f"/billing/prices/{row.pk}/", {**changed, "hourly_rate": "-1"})
    assert bad.status_code == 400
    assert field_error(bad.content.decode(), "hourly_rate")
    response = client.post(f"/billing/prices/{row.pk}/", changed)
    assert response.status_code == 302
    row.refresh_from_db()
    assert row.rate == Decimal("2.75")
    entry = AuditLog.objects.get(action="price.changed")
    assert entry.actor == fleet.user("fiona")
    assert [Decimal(v) for v in entry.changes["rate"]] == [Decimal(2), Decimal("2.75")]

    confirm = client.get(f"/billing/prices/{row.pk}/delete/")
    assert confirm.status_code == 200
    assert "csrfmiddlewaretoken" in confirm.content.decode()
    assert client.post(f"/billing/prices/{row.pk}/delete/").status_code == 302
    assert not Price.objects.filter(pk=row.pk).exists()
    assert AuditLog.objects.filter(action="price.deleted", target_id=str(row.pk)).count() == 1


def test_shared_overhead_is_added_changed_and_deleted_from_the_same_page(fleet: Fleet) -> None:
    client = signed_in(fleet, "fiona")
    bad = client.post("/billing/prices/overhead/", {"name": "", "amount": "-5", "starts": "2026-10"})
    assert bad.status_code == 400
    body = bad.content.decode()
    assert field_error(body, "name") == "This field is required."
    assert field_error(body, "amount")
    assert Overhead.objects.count() == 0
    added = client.post("/billing/prices/overhead/", {"name": "Storage", "amount": "1200.50", "starts": "2026-10"})
    assert added.status_code == 302
    row = Overhead.objects.get()
    assert (row.amount, row.starts, row.ends) == (Decimal("1200.50"), date(2026, 10, 1), None)
    assert "Storage" in client.get("/billing/prices/").content.decode()
    changed = client.post(
        f"/billing/prices/overhead/{row.pk}/",
        {"name": "Storage", "amount": "900", "starts": "2026-10", "ends": "2026-12"},
    )
    assert changed.status_code == 302
    row.refresh_from_db()
    assert (row.amount, row.ends) == (Decimal("900.00"), date(2026, 12, 1))
    assert client.post(f"/billing/prices/overhead/{row.pk}/delete/").status_code == 302
    actions = AuditLog.objects.filter(action__startswith="overhead.").order_by("pk").values_list("action", flat=True)
    assert list(actions) == ["overhead.created", "overhead.changed", "overhead.deleted"]
