"""Allocated-but-idle cost: usage split by the probes' utilization into busy, allocated idle and unmeasured
parts, per line, team and job, on the database, in the statements (CSV and XLSX); checked against sums
done by hand."""

from __future__ import annotations

import csv
import io
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from openpyxl import load_workbook

from billing import attribution
from billing.actions import metering
from clusters.models import Node
from scheduler.models import Assignment, Job
from tests.billing.test_attribution import price_everything
from tests.conftest import api_client
from tests.scheduler.conftest import Fleet
from tests.scheduler.test_utilization import hold, readings, sample

T0 = datetime(2026, 11, 20, 10, tzinfo=UTC)
NOV = date(2026, 11, 1)


@pytest.fixture
def month(fleet: Fleet) -> dict[str, Any]:
    """At 2.00 a GPU-hour:

    - ``whole``: Vision, all 8 GPUs of node 1 for 2 h (32.00); the first hour read at 75 %, the second not
      read at all. Measured 8 GPU-h, busy 6: allocated idle 32.00 x 2/16 = 4.00, unmeasured 32.00 x 8/16 = 16.00.
    - ``busy`` (Vision) and ``lazy`` (Robotics): GPUs 0-3 and 4-7 of node 2 for 1 h (8.00 each); GPUs 0-3
      at 100 %, 4-7 at 0 %. The node's 4 busy GPU-h are shared over the 8 held: each 50 %, 4.00 idle.
    """
    price_everything(fleet, "2")
    one, two = Node.objects.filter(cluster=fleet.clusters["east"]).order_by("name")[:2]
    jobs = {
        "whole": hold(fleet, one, list(range(8)), hours=2),
        "busy": hold(fleet, two, [0, 1, 2, 3]),
    }
    lazy = hold(fleet, two, [0, 1, 2, 3])  # placed as Vision's, then moved to Robotics and GPUs 4-7 below
    Job.objects.filter(pk=lazy.job_id).update(team=fleet.world.teams["robotics"], submitted_by=fleet.user("bob"))
    Assignment.objects.filter(attempt=lazy).update(accelerators=[[g, 1000] for g in (4, 5, 6, 7)])
    jobs["lazy"] = lazy
    sample(one, range(60), readings(*[75] * 8))
    sample(two, range(60), readings(100, 100, 100, 100, 0, 0, 0, 0))
    metering.meter(fleet.org, T0 + timedelta(hours=3))
    return {"fleet": fleet, **{name: attempt.job_id for name, attempt in jobs.items()}}


def test_each_teams_usage_is_split_into_busy_allocated_idle_and_unmeasured(month: dict[str, Any]) -> None:
    result = attribution.attribute(month["fleet"].org, NOV)
    teams = {row["team_name"]: row for row in result.rollup(["team"])}
    vision, robotics = teams["Vision"], teams["Robotics"]
    assert (vision["usage"], vision["allocated_idle"], vision["unmeasured"]) == (4000, 800, 1600)
    assert (robotics["usage"], robotics["allocated_idle"], robotics["unmeasured"]) == (800, 400, 0)
    # Vision: 12 GPU-h measured (8 + 4), 8 busy (6 + 2).
    assert (vision["measured_milli_seconds"], vision["busy_milli_seconds"]) == (12 * 3_600_000, 8 * 3_600_000)
    assert robotics["utilization"] == 0.5
    # Parts of usage, not charges: the fleet's identity is untouched.
    assert sum(row["total"] for row in teams.values()) + result.unallocated == result.fleet_total
    assert result.job_split(month["whole"], 3200) == (400, 1600)
    assert result.job_split(month["busy"], 800) == (400, 0)


def test_a_month_without_samples_is_all_unmeasured_never_idle(fleet: Fleet) -> None:
    price_everything(fleet, "2")
    node = Node.objects.filter(cluster=fleet.clusters["east"]).order_by("name").first()
    assert node is not None
    hold(fleet, node, [0, 1])
    metering.meter(fleet.org, T0 + timedelta(hours=2))
    vision = attribution.attribute(fleet.org, NOV).rollup(["team"])[0]
    assert (vision["usage"], vision["allocated_idle"], vision["unmeasured"]) == (400, 0, 400)
    assert vision["utilization"] is None


def test_the_csv_statement_carries_the_columns_and_they_add_up(month: dict[str, Any]) -> None:
    client = api_client(month["fleet"].user("lena"))
    response: Any = client.get("/api/v1/billing/statements/vision.csv", {"month": "2026-11"})
    assert response.status_code == 200
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    *lines, total = rows
    assert total["allocated idle (part of usage)"] == "8.00"
    assert total["unmeasured (part of usage)"] == "16.00"
    assert total["measured GPU utilization"] == "0.6667"
    assert sum(Decimal(r["allocated idle (part of usage)"]) for r in lines) == Decimal("8.00")


def test_the_xlsx_statement_says_the_rule_and_prices_each_jobs_idle_time(month: dict[str, Any]) -> None:
    client = api_client(month["fleet"].user("fiona"))
    response: Any = client.get("/api/v1/billing/statements/vision.xlsx", {"month": "2026-11"})
    book = load_workbook(io.BytesIO(b"".join(response.streaming_content)), read_only=True)
    summary: dict[Any, Any] = {row[0]: row[1] for row in book["Summary"].iter_rows(values_only=True)}
    assert Decimal(str(summary["Allocated idle (part of usage)"])) == Decimal("8.00")
    assert "never idle" in summary["Allocated idle and unmeasured"]
    header, *jobs = list(book["Jobs"].iter_rows(values_only=True))
    by_id = {row[0]: dict(zip(header, row, strict=True)) for row in jobs}
    whole = by_id[month["whole"]]
    assert Decimal(str(whole["usage"])) == Decimal("32.00")
    assert Decimal(str(whole["measured GPU utilization"])) == Decimal("0.75")
    assert Decimal(str(whole["allocated idle (part of usage)"])) == Decimal("4.00")
    assert Decimal(str(whole["unmeasured (part of usage)"])) == Decimal("16.00")

    response = client.get("/api/v1/billing/fleet.csv", {"month": "2026-11"})
    rows = {r["team"]: r for r in csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode()))}
    assert rows["Robotics"]["allocated idle (part of usage)"] == "4.00"
    assert rows["Fleet total"]["allocated idle (part of usage)"] == "12.00"


def test_energy_is_what_the_probes_read_and_the_unread_time_at_the_flavors_mean(month: dict[str, Any]) -> None:
    """Every reading is 400 W a GPU. ``whole``: its first hour read (8 GPU-h: 3.2 kWh), its second not (8 GPU-h at
    the month's mean for H100s, 400 W: 3.2 kWh estimated); ``busy`` and ``lazy``: 4 GPU-h read each (1.6 kWh)."""
    result = attribution.attribute(month["fleet"].org, NOV)
    teams = {row["team_name"]: row for row in result.rollup(["team"])}
    assert (teams["Vision"]["energy_wh"], teams["Vision"]["estimated_wh"]) == (8000, 3200)
    assert (teams["Robotics"]["energy_wh"], teams["Robotics"]["estimated_wh"]) == (1600, 0)
    assert result.job_energy[month["whole"]] == (6400, 3200, 0)  # no grid intensity set: no emissions
    assert result.job_energy[month["lazy"]] == (1600, 0, 0)

    client = api_client(month["fleet"].user("fiona"))
    response: Any = client.get("/api/v1/billing/statements/vision.csv", {"month": "2026-11"})
    *_, total = csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode()))
    assert (total["energy kWh"], total["of which estimated kWh"]) == ("8.000", "3.200")
    costs = client.get("/api/v1/billing/costs/", {"month": "2026-11", "group_by": "team"}).json()
    assert {r["team_name"]: r["energy_kwh"] for r in costs["rows"]} == {"Vision": "8.000", "Robotics": "1.600"}
    response = client.get("/api/v1/billing/statements/vision.xlsx", {"month": "2026-11"})
    book = load_workbook(io.BytesIO(b"".join(response.streaming_content)), read_only=True)
    header, *jobs = list(book["Jobs"].iter_rows(values_only=True))
    energy = {row[0]: Decimal(str(row[header.index("energy kWh")])) for row in jobs if row[0]}
    assert energy[month["whole"]] == Decimal("6.4")
    assert Decimal(str(jobs[-1][header.index("energy kWh")])) == Decimal("8.0")  # the total
    summary = {row[0]: row[1] for row in book["Summary"].iter_rows(values_only=True)}
    assert Decimal(str(summary["Energy (kWh)"])) == Decimal("8.0")


def test_emissions_are_the_energy_at_the_regions_grid_intensity(month: dict[str, Any]) -> None:
    fleet = month["fleet"]
    client = api_client(fleet.user("fiona"))
    bad = client.post("/api/v1/grid-intensities/", {"region": "", "grams_per_kwh": "-1"}, format="json")
    assert bad.status_code == 400
    assert set(bad.json()["error"]["fields"]) >= {"region", "grams_per_kwh", "effective_from"}
    assert (
        api_client(fleet.user("lena"))
        .post("/api/v1/grid-intensities/", {"region": "x", "effective_from": "2026-11-01", "grams_per_kwh": "1"})
        .status_code
        == 403
    )
    region = fleet.clusters["east"].region
    body = {"region": region, "effective_from": "2026-11-01", "grams_per_kwh": "250"}
    assert client.post("/api/v1/grid-intensities/", body, format="json").status_code == 201
    # Vision: 8.0 kWh (3.2 of it estimated) on east at 250 g/kWh: 2 kg; Robotics 1.6 kWh: 0.4 kg.
    costs = client.get("/api/v1/billing/costs/", {"month": "2026-11", "group_by": "team"}).json()
    assert {r["team_name"]: r["emissions_kg"] for r in costs["rows"]} == {"Vision": "2.000", "Robotics": "0.400"}
    response: Any = client.get("/api/v1/billing/statements/vision.csv", {"month": "2026-11"})
    *_, total = csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode()))
    assert total["emissions kg CO2e"] == "2.000"
    assert attribution.attribute(fleet.org, NOV).job_energy[month["whole"]] == (6400, 3200, 1600)
