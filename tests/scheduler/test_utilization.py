"""A job's GPU utilization from the probes' samples: attributed through its assignments (a node alone, a
node shared), hand-computed summaries, the API's scoping and parameters, and its query budget."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from clusters.actions import probe
from clusters.models import Node
from scheduler import utilization
from scheduler.models import Assignment, Attempt, Job
from tests.billing.conftest import placed
from tests.conftest import api_client
from tests.scheduler.conftest import Fleet

T0 = datetime(2026, 11, 20, 10, 0, tzinfo=UTC)


def readings(*utilization_by_gpu: float | None, power: float = 400.0, throttle: int = 0) -> tuple[Any, ...]:
    return tuple(
        probe.GpuReading(
            index=i,
            temperature_c=50,
            activity=probe.Activity(
                utilization=u,
                memory_used=40 * 2**30,
                memory_total=80 * 2**30,
                power_w=power,
                power_limit_w=700.0,
                sm_clock_mhz=1980,
                throttle_reasons=throttle,
            ),
        )
        for i, u in enumerate(utilization_by_gpu)
    )


def sample(node: Node, minutes: range, gpus: tuple[Any, ...], start: datetime = T0) -> None:
    for minute in minutes:
        probe.store_samples(node.pk, start + timedelta(minutes=minute, seconds=17), gpus)


def hold(fleet: Fleet, node: Node, gpus: list[int], *, start: datetime = T0, hours: float = 1.0) -> Attempt:
    """A job placed by a real cycle, then made to hold ``gpus`` of ``node`` from ``start`` for ``hours``."""
    attempt = placed(fleet, admitted=start, ended=start + timedelta(hours=hours), accelerators=len(gpus))
    Assignment.objects.filter(attempt=attempt).update(node=node, accelerators=[[g, 1000] for g in gpus])
    return attempt


@pytest.fixture
def node(fleet: Fleet) -> Node:
    found: Node = Node.objects.filter(cluster=fleet.clusters["east"]).order_by("name")[0]
    assert found.accelerators == 8
    return found


def test_a_job_alone_on_a_node_gets_its_gpus_mean_and_per_gpu_series(fleet: Fleet, node: Node) -> None:
    attempt = hold(fleet, node, list(range(8)))
    # Half the hour measured: four GPUs flat out, four idle. The other half has no samples at all.
    sample(node, range(30), readings(100, 100, 100, 100, 0, 0, 0, 0, throttle=0x4))
    answer = api_client(fleet.user("alice")).get(f"/api/v1/jobs/{attempt.job_id}/utilization/?step=600")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert body["summary"] == {
        "gpu_hours_allocated": 8.0,
        "gpu_hours_measured": 4.0,
        "gpu_hours_used": 2.0,
        "gpu_hours_unmeasured": 4.0,
        "mean_utilization": 50.0,
        # Energy: 4 measured GPU-hours at 400 W; the 4 unmeasured ones estimated at that mean.
        "energy_kwh_measured": 1.6,
        "mean_gpu_watts": 400.0,
        "energy_kwh_estimated": 1.6,
    }
    (series,) = body["attempts"][0]["nodes"]
    assert series["node"] == node.name
    assert series["shared"] is False
    assert [p["utilization"] for p in series["points"]] == [50.0, 50.0, 50.0]  # 10:00, 10:10, 10:20
    assert [g["index"] for g in series["gpus"]] == list(range(8))
    first = series["gpus"][0]["points"][0]
    assert first["utilization"] == 100.0
    assert first["power_w"] == 400.0
    assert first["memory_used_bytes"] == 40 * 2**30
    assert first["throttle_reasons"] == ["sw_power_cap"]


def test_a_shared_node_splits_its_busy_share_evenly_and_shows_no_gpus_as_a_jobs(fleet: Fleet, node: Node) -> None:
    busy = hold(fleet, node, [0, 1, 2, 3])
    lazy = hold(fleet, node, [4, 5, 6, 7])
    sample(node, range(60), readings(100, 100, 100, 100, 0, 0, 0, 0))
    for attempt in (busy, lazy):
        body = api_client(fleet.user("alice")).get(f"/api/v1/jobs/{attempt.job_id}/utilization/").json()
        # 4 busy GPU-hours over 8 held: each job is credited 50 % of its 4 GPU-hours.
        assert body["summary"]["mean_utilization"] == 50.0
        assert body["summary"]["gpu_hours_used"] == 2.0
        (series,) = body["attempts"][0]["nodes"]
        assert series["shared"] is True
        assert series["gpus"] == []


def test_gpus_nobody_holds_do_not_dilute_a_jobs_utilization(fleet: Fleet, node: Node) -> None:
    attempt = hold(fleet, node, [0, 1, 2, 3])
    sample(node, range(60), readings(80, 80, 80, 80, 0, 0, 0, 0))
    body = api_client(fleet.user("alice")).get(f"/api/v1/jobs/{attempt.job_id}/utilization/").json()
    assert body["summary"]["mean_utilization"] == 80.0  # 3.2 busy GPUs over the 4 it holds
    assert body["step_seconds"] == 60


def test_a_report_in_the_same_minute_averages_into_the_sample(fleet: Fleet, node: Node) -> None:
    probe.store_samples(node.pk, T0 + timedelta(seconds=5), readings(90, power=600.0, throttle=0x1))
    probe.store_samples(node.pk, T0 + timedelta(seconds=35), readings(30, power=200.0, throttle=0x20))
    probe.store_samples(node.pk, T0 + timedelta(seconds=50), (probe.GpuReading(0, 50),))  # an old probe: nothing
    (row,) = node_samples(node)
    assert (row.readings, row.utilization, row.power_w, row.throttle_reasons) == (2, 60.0, 400.0, 0x21)
    assert probe.throttle_names(row.throttle_reasons) == ["gpu_idle", "sw_thermal_slowdown"]


def node_samples(node: Node) -> list[Any]:
    from clusters.models import GpuSample

    return list(GpuSample.objects.filter(node=node))


def test_reading_a_jobs_series_is_a_few_queries_whatever_its_size(fleet: Fleet, node: Node) -> None:
    attempt = hold(fleet, node, list(range(8)), hours=6)
    sample(node, range(0, 360, 2), readings(*[70] * 8))
    client = api_client(fleet.user("alice"))
    with CaptureQueriesContext(connection) as queries:
        answer = client.get(f"/api/v1/jobs/{attempt.job_id}/utilization/")
    assert answer.status_code == 200
    assert answer.json()["summary"]["mean_utilization"] == 70.0
    samples = [q["sql"] for q in queries.captured_queries if "clusters_gpusample" in q["sql"]]
    assert len(samples) == 1
    assert len(queries.captured_queries) <= 10, [q["sql"][:80] for q in queries.captured_queries]


def test_another_teams_job_is_a_404(fleet: Fleet, node: Node) -> None:
    attempt = hold(fleet, node, [0])
    assert Job.objects.get(pk=attempt.job_id).team.slug != "intruders"
    assert api_client(fleet.user("mallory")).get(f"/api/v1/jobs/{attempt.job_id}/utilization/").status_code == 404
    assert api_client(fleet.user("alice")).get("/api/v1/jobs/99999999/utilization/").status_code == 404
    assert api_client(fleet.user("alice")).get("/api/v1/jobs/x/utilization/").status_code == 404
    assert api_client().get(f"/api/v1/jobs/{attempt.job_id}/utilization/").status_code == 401


@pytest.mark.parametrize(
    ("query", "name"),
    [("step=90", "step"), ("step=abc", "step"), ("step=0", "step"), ("step=864000", "step"), ("attempt=0", "attempt")],
)
def test_bad_parameters_are_a_400_naming_them(fleet: Fleet, node: Node, query: str, name: str) -> None:
    attempt = hold(fleet, node, [0])
    answer = api_client(fleet.user("alice")).get(f"/api/v1/jobs/{attempt.job_id}/utilization/?{query}")
    assert answer.status_code == 400
    assert name in answer.json()["error"]["fields"]


def test_one_attempt_only_and_a_job_never_placed(fleet: Fleet, node: Node) -> None:
    attempt = hold(fleet, node, list(range(8)))
    sample(node, range(60), readings(*[25] * 8))
    client = api_client(fleet.user("alice"))
    body = client.get(f"/api/v1/jobs/{attempt.job_id}/utilization/?attempt=2").json()
    assert body["attempts"] == []
    assert body["summary"]["gpu_hours_allocated"] == 0.0
    body = client.get(f"/api/v1/jobs/{attempt.job_id}/utilization/?attempt=1").json()
    assert body["summary"]["mean_utilization"] == 25.0


def test_least_efficient_jobs_rank_by_measured_utilization(fleet: Fleet, node: Node) -> None:
    busy = hold(fleet, node, [0, 1, 2, 3])
    other = Node.objects.filter(cluster=node.cluster).exclude(pk=node.pk).order_by("name").first()
    assert other is not None
    lazy = hold(fleet, other, list(range(8)))
    sample(node, range(60), readings(90, 90, 90, 90))
    sample(other, range(60), readings(*[10] * 8))
    team = Job.objects.get(pk=busy.job_id).team_id
    ranked = utilization.least_efficient([team], T0, T0 + timedelta(hours=1), limit=5, at=T0 + timedelta(hours=2))
    assert [e.job for e in ranked] == [lazy.job_id, busy.job_id]
    assert [round(100 * (e.share.utilization or 0)) for e in ranked] == [10, 90]


def test_a_hold_that_ends_inside_a_bucket_is_read_over_the_time_it_held(fleet: Fleet, node: Node) -> None:
    attempt = hold(fleet, node, list(range(8)), hours=12.5 / 60)  # 10:00 to 10:12:30
    sample(node, range(13), readings(*[80] * 8))  # the minutes 10:00 to 10:12
    body = api_client(fleet.user("alice")).get(f"/api/v1/jobs/{attempt.job_id}/utilization/?step=300").json()
    points = body["attempts"][0]["nodes"][0]["points"]
    # The last bucket (10:10-10:15) was held 150 s and read for 3 minutes: 80 %, not inflated by the 300 s.
    assert [p["utilization"] for p in points] == [80.0, 80.0, 80.0]
    assert body["summary"]["mean_utilization"] == 80.0


def test_per_gpu_series_are_asked_for_or_left_out(fleet: Fleet, node: Node) -> None:
    attempt = hold(fleet, node, list(range(8)))
    sample(node, range(10), readings(*[50] * 8))
    client = api_client(fleet.user("alice"))
    url = f"/api/v1/jobs/{attempt.job_id}/utilization/"
    assert len(client.get(url).json()["attempts"][0]["nodes"][0]["gpus"]) == 8  # one node: by default
    without = client.get(url, {"gpus": "false"}).json()
    assert without["attempts"][0]["nodes"][0]["gpus"] == []
    assert without["summary"]["mean_utilization"] == 50.0
    answer = client.get(url, {"gpus": "maybe"})
    assert answer.status_code == 400
    assert "gpus" in answer.json()["error"]["fields"]
