"""The job page's utilization panel, a team's least efficient jobs (leads, finance, admins), and the demo
fleet's probe readings of running jobs, which go through the probe's own path."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from clusters.models import GpuSample, Node
from demo import utilization as demo_utilization
from scheduler.models import Attempt, Job
from tests.scheduler.conftest import Fleet
from tests.scheduler.test_utilization import hold, readings, sample


def signed_in(username: str) -> Client:
    client = Client()
    client.force_login(User.objects.get(username=username))
    return client


@pytest.fixture
def node(fleet: Fleet) -> Node:
    found: Node = Node.objects.filter(cluster=fleet.clusters["east"]).order_by("name")[0]
    return found


def test_the_job_page_loads_its_utilization_panel_with_a_chart(fleet: Fleet, node: Node) -> None:
    attempt = hold(fleet, node, list(range(8)))
    sample(node, range(60), readings(*[60] * 8))
    client = signed_in("alice")
    page = client.get(f"/jobs/{attempt.job_id}/")
    assert f'hx-get="/jobs/{attempt.job_id}/utilization/"'.encode() in page.content
    assert b"plotly-basic.min.js" in page.content
    panel = client.get(f"/jobs/{attempt.job_id}/utilization/")
    assert panel.status_code == 200
    text = panel.content.decode()
    assert "60.0 %" in text
    assert f'id="job-{attempt.job_id}-utilization-figure"' in text
    assert "GPU 7" in text  # a node held alone: its GPUs are drawn as the job's


def test_a_job_without_samples_says_it_is_unmeasured(fleet: Fleet, node: Node) -> None:
    attempt = hold(fleet, node, [0, 1])
    text = signed_in("alice").get(f"/jobs/{attempt.job_id}/utilization/").content.decode()
    assert "its utilization is unmeasured" in text
    assert "data-plotly" not in text


def test_a_lead_sees_the_teams_least_efficient_jobs_and_a_researcher_may_not(fleet: Fleet, node: Node) -> None:
    now = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)
    attempt = hold(fleet, node, list(range(8)), start=now)
    sample(node, range(90), readings(*[15] * 8), start=now)
    team = Job.objects.get(pk=attempt.job_id).team
    page = signed_in("lena").get(f"/jobs/efficiency/{team.pk}/")
    assert page.status_code == 200
    text = page.content.decode()
    assert f"/jobs/{attempt.job_id}/" in text
    assert "15.0 %" in text
    assert signed_in("alice").get(f"/jobs/efficiency/{team.pk}/").status_code == 403
    assert signed_in("fiona").get(f"/jobs/efficiency/{team.pk}/?days=30").status_code == 200
    assert signed_in("lena").get(f"/jobs/efficiency/{team.pk}/?days=365").status_code == 400


def test_the_demo_probes_report_running_jobs_through_the_probes_path(fleet: Fleet) -> None:
    job = fleet.submit(accelerators=8, name="demo-train")
    fleet.cycle()
    attempt = Attempt.objects.get(job=job)
    Attempt.objects.filter(pk=attempt.pk).update(started_at=timezone.now() - timedelta(minutes=5))
    at = timezone.now()
    assert demo_utilization.probe_running(fleet.org, at) == 1
    rows = list(GpuSample.objects.filter(node__in=attempt.assignments.values("node")).order_by("gpu"))
    assert [r.utilization for r in rows] == [demo_utilization.level(job.pk, g, at) for g in range(8)]
    node = Node.objects.get(pk=rows[0].node_id)
    assert node.probe_reported_at is not None  # recorded as a probe's report is


def test_a_demo_node_that_falls_idle_keeps_reporting_and_stays_healthy(fleet: Fleet) -> None:
    """A real probe goes on reporting when its node falls idle; the demo's does too (GPUs there, no activity,
    so no samples), and the health round does not fail the node for a quiet probe."""
    from clusters.actions import health

    job = fleet.submit(accelerators=8, name="demo-train")
    fleet.cycle()
    attempt = Attempt.objects.get(job=job)
    Attempt.objects.filter(pk=attempt.pk).update(started_at=timezone.now() - timedelta(minutes=5))
    node = Node.objects.get(pk=attempt.assignments.get().node_id)
    earlier = timezone.now() - timedelta(minutes=10)
    assert demo_utilization.probe_running(fleet.org, earlier) == 1
    samples = GpuSample.objects.count()
    Attempt.objects.filter(pk=attempt.pk).update(outcome=Attempt.Outcome.SUCCEEDED, ended_at=timezone.now())
    at = timezone.now()
    assert demo_utilization.probe_running(fleet.org, at) == 0  # nothing runs, the idle node still reports
    node.refresh_from_db()
    assert node.probe_reported_at == at
    assert GpuSample.objects.count() == samples  # no samples for GPUs no job holds
    health.check_cluster(node.cluster_id, at + timedelta(minutes=1))
    node.refresh_from_db()
    assert (node.healthy, node.state) == (True, Node.State.SCHEDULABLE)
    # A node whose probe never reported is left alone: it has no probe to go quiet.
    assert Node.objects.filter(cluster=node.cluster, probe_reported_at__isnull=True).exists()


def test_the_demo_history_gets_minute_samples_once(fleet: Fleet, node: Node) -> None:
    start = datetime(2026, 11, 20, 10, tzinfo=UTC)
    attempt = hold(fleet, node, [0, 1, 2, 3], start=start)
    Attempt.objects.filter(pk=attempt.pk).update(started_at=start)
    written = demo_utilization.seed_history_samples(fleet.org, start, start + timedelta(minutes=30))
    assert written == 30 * 8  # every GPU of the node, its free ones at 0 %
    assert demo_utilization.seed_history_samples(fleet.org, start, start + timedelta(minutes=30)) == 240
    assert GpuSample.objects.filter(node=node).count() == 240
    free: Any = GpuSample.objects.filter(node=node, gpu=7).first()
    assert (free.utilization, free.throttle_reasons) == (0.0, 1)


def test_a_job_with_its_first_readings_only_gets_markers_a_line_could_not_show() -> None:
    from scheduler.web.utilization import utilization_chart

    point = {"at": "2026-11-26T14:17:00Z", "utilization": 90.3}
    node = {"node": "h100-00000", "shared": False, "points": [point], "gpus": [{"index": 0, "points": [point]}]}
    chart = utilization_chart({"attempts": [{"number": 1, "nodes": [node]}]})
    assert [trace["mode"] for trace in chart["data"]] == ["lines+markers", "lines+markers"]
    node["points"] = [point, point, point]
    assert utilization_chart({"attempts": [{"number": 1, "nodes": [node]}]})["data"][0]["mode"] == "lines"
