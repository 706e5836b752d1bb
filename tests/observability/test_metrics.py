"""``/metrics``: the events counted where they happen (the loop's phases, admissions and starts by tier,
preemptions by cause, dispatch failures and endings by backend), the database's state computed at scrape time,
the API's latency by route template; who may read it; the processes' files added up in multiprocess mode; a
failing collector reported, never a 500."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from clusters.backends import simulated
from observability import exposition
from scheduler.models import Job, LoopState
from tests.observability.conftest import free_port
from tests.scheduler.conftest import Fleet, fleet  # noqa: F401 - the fleet fixture

Labels = dict[str, str]


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def scrape(client: Client | None = None, **headers: Any) -> dict[str, list[tuple[Labels, float]]]:
    response = (client or Client()).get("/metrics", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    samples: dict[str, list[tuple[Labels, float]]] = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples


def only(samples: list[tuple[Labels, float]], **labels: str) -> float:
    return sum(v for have, v in samples if all(have.get(k) == w for k, w in labels.items()))


def test_jobs_through_the_loop_are_counted_and_the_database_state_scraped(fleet: Fleet) -> None:  # noqa: F811
    counted = {
        "cycles": value("qm_placement_cycles_total", result="applied"),
        "engine": value("qm_placement_cycle_phase_seconds_count", phase="engine"),
        "admitted": value("qm_job_admission_wait_seconds_count", tier="normal", within_quota="true"),
        "admitted_fast": value("qm_job_admission_wait_seconds_bucket", tier="normal", within_quota="true", le="60.0"),
        "started": value("qm_job_start_wait_seconds_count", tier="normal"),
        "ran": value("qm_job_submission_to_running_seconds_count", tier="normal"),
        "preempted": value("qm_preemptions_total", cause="priority"),
        "ended": value("qm_attempts_ended_total", backend="simulated", outcome="preempted", reason="preempted"),
    }
    low = [fleet.submit(accelerators=8, name=f"low-{i}", checkpoint_location="s3://ckpt/low") for i in range(6)]
    fleet.cycle()
    fleet.follow()
    assert Job.objects.filter(pk__in=[j.pk for j in low], state=Job.State.RUNNING).count() == 6
    fleet.submit(accelerators=8, name="urgent", tier=fleet.tiers["high"])
    assert fleet.cycle().preempted == 1
    victim = Job.objects.get(state=Job.State.PREEMPTING)
    deadline = victim.attempts.get().stop_deadline
    assert deadline is not None
    fleet.follow(deadline + timedelta(seconds=1))

    assert value("qm_placement_cycles_total", result="applied") == counted["cycles"] + 2
    assert value("qm_placement_cycle_phase_seconds_count", phase="engine") == counted["engine"] + 2
    assert value("qm_job_admission_wait_seconds_count", tier="normal", within_quota="true") == counted["admitted"] + 6
    fast = value("qm_job_admission_wait_seconds_bucket", tier="normal", within_quota="true", le="60.0")
    assert fast == counted["admitted_fast"] + 6
    assert value("qm_job_start_wait_seconds_count", tier="normal") == counted["started"] + 6
    assert value("qm_job_submission_to_running_seconds_count", tier="normal") == counted["ran"] + 6
    assert value("qm_preemptions_total", cause="priority") == counted["preempted"] + 1
    ended = value("qm_attempts_ended_total", backend="simulated", outcome="preempted", reason="preempted")
    assert ended == counted["ended"] + 1

    samples = scrape()
    assert only(samples["qm_jobs"], state="running") == 5
    assert only(samples["qm_jobs"], state="requeued") == 1
    assert only(samples["qm_jobs"], state="pending") == 1
    assert only(samples["qm_jobs"]) == 7
    assert len(samples["qm_jobs"]) == len(Job.State)  # every state, zeros included
    assert only(samples["qm_queue_depth"], organization=fleet.org.slug) == 2
    assert only(samples["qm_queue_depth"], reason="waiting_for_preemption") >= 1
    assert only(samples["qm_nodes"], backend="simulated", state="schedulable", health="healthy") == 6
    ages = samples["qm_cluster_sync_age_seconds"]
    assert sorted(labels["cluster"] for labels, _ in ages) == ["east", "west"]
    assert all(0 <= age < 600 for _, age in ages)
    assert only(samples["qm_placement_loop_silence_seconds"], organization=fleet.org.slug) < 60
    assert [labels["organization"] for labels, _ in samples["qm_meter_lag_seconds"]] == sorted(
        [fleet.org.slug, "rival"]
    )
    assert {labels["collector"]: up for labels, up in samples["qm_metrics_collector_up"]} == {
        "scheduler": 1,
        "clusters": 1,
        "billing": 1,
        "governance": 1,
    }
    # No label names a job or a user: every label value is from a bounded set.
    for name, rows in samples.items():
        if name.startswith("qm_"):
            for labels, _ in rows:
                assert not {str(j.pk) for j in low} & set(labels.values()) or name == "qm_jobs", (name, labels)
                assert "alice" not in labels.values()


def test_dispatch_failures_are_counted_by_backend_and_class(fleet: Fleet) -> None:  # noqa: F811
    before = value("qm_dispatch_failures_total", backend="simulated", failure_class="permanent")
    refused = value("qm_attempts_ended_total", backend="simulated", outcome="refused", reason="refused")
    for cluster in fleet.clusters.values():
        simulated.inject(cluster.endpoint, "submit_refused", state_file=cluster.options["state_file"])
    fleet.submit(accelerators=8)
    fleet.cycle()
    assert value("qm_dispatch_failures_total", backend="simulated", failure_class="permanent") == before + 1
    assert value("qm_attempts_ended_total", backend="simulated", outcome="refused", reason="refused") == refused + 1


def test_a_loop_that_stopped_while_jobs_wait_is_silent(fleet: Fleet) -> None:  # noqa: F811
    jobs = [fleet.submit(accelerators=8) for _ in range(7)]  # the fleet holds six: the last waits
    fleet.cycle()
    job = Job.objects.get(pk__in=[j.pk for j in jobs], state=Job.State.PENDING)
    assert only(scrape()["qm_placement_loop_silence_seconds"], organization=fleet.org.slug) < 60
    # The loop stopped two minutes ago; the job has waited since before.
    LoopState.objects.filter(organization=fleet.org).update(last_cycle_at=fleet.later(-120))
    Job.objects.filter(pk=job.pk).update(state_changed_at=fleet.later(-300))
    assert 120 <= only(scrape()["qm_placement_loop_silence_seconds"], organization=fleet.org.slug) < 130


def test_requests_are_timed_by_route_template_and_status_class(world: Any) -> None:
    client = Client()
    client.force_login(world.users["alice"])
    job_route = value("qm_http_request_duration_seconds_count", route="/jobs/<id:pk>/", method="GET", status="4xx")
    unmatched = value("qm_http_request_duration_seconds_count", route="unmatched", method="GET", status="4xx")
    assert client.get("/jobs/987654/").status_code == 404
    assert client.get("/no/such/page/").status_code == 404
    assert (
        value("qm_http_request_duration_seconds_count", route="/jobs/<id:pk>/", method="GET", status="4xx")
        == job_route + 1
    )
    assert (
        value("qm_http_request_duration_seconds_count", route="unmatched", method="GET", status="4xx") == unmatched + 1
    )


def test_metrics_answer_this_host_only_without_a_token(db: Any, settings: Any) -> None:
    settings.METRICS_TOKEN = ""
    assert Client().get("/metrics").status_code == 200  # the test client is 127.0.0.1
    refused = Client().get("/metrics", REMOTE_ADDR="10.1.2.3")
    assert refused.status_code == 403
    assert b"METRICS_TOKEN" in refused.content
    assert Client().post("/metrics").status_code == 405
    # Scraped by its address over plain HTTP, in production too: neither the host check nor the redirect.
    settings.SECURE_SSL_REDIRECT = True
    by_address = Client().get("/metrics", HTTP_HOST="10.0.0.7:8000")
    assert by_address.status_code == 200
    assert b"qm_jobs" in by_address.content


def test_metrics_with_a_token_need_it_from_everyone(db: Any, settings: Any) -> None:
    settings.METRICS_TOKEN = "scrape-me"
    missing = Client().get("/metrics")
    assert missing.status_code == 401
    assert missing["WWW-Authenticate"] == 'Bearer realm="metrics"'
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    remote = Client().get("/metrics", REMOTE_ADDR="10.1.2.3", HTTP_AUTHORIZATION="Bearer scrape-me")
    assert remote.status_code == 200
    assert b"qm_jobs" in remote.content


def test_a_failing_collector_is_reported_and_the_others_still_answer(
    db: Any, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    def broken(now: Any) -> Any:
        raise RuntimeError("the billing tables are gone")

    collectors = tuple((name, broken if name == "billing" else f) for name, f in exposition.COLLECTORS)
    monkeypatch.setattr(exposition, "COLLECTORS", collectors)
    samples = scrape()
    assert {labels["collector"]: up for labels, up in samples["qm_metrics_collector_up"]}["billing"] == 0
    assert "qm_meter_lag_seconds" not in samples
    assert "qm_jobs" in samples
    assert "the billing metrics collector failed" in caplog.text


def test_every_process_writes_its_files_and_one_scrape_adds_them_up(db: Any, tmp_path: Path) -> None:
    """Three processes (as two workers and beat would) count into PROMETHEUS_MULTIPROC_DIR; a fourth, the web
    app, renders /metrics from the files, with the database's state."""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "PYTHONPATH": str(settings.BASE_DIR)}
    count = "from common import metrics; metrics.CYCLES.labels('applied').inc({n}); metrics.LOOP_LAST_RUN.set({n})"
    for n in (1, 2, 4):
        subprocess.run([sys.executable, "-c", count.format(n=n)], env=env, check=True)
    assert len(list(tmp_path.glob("*.db"))) >= 3
    database = connection.settings_dict
    postgresql = connection.vendor == "postgresql"
    # The test database (PostgreSQL: the same server; SQLite's in memory cannot be shared, so a file without
    # tables: then the collectors fail, and say so).
    env["DATABASE_URL"] = (
        f"postgres://{database['USER']}@{database['HOST']}:{database['PORT']}/{database['NAME']}"
        if postgresql
        else f"sqlite:///{tmp_path / 'empty.sqlite3'}"
    )
    render = (
        "import django, sys; django.setup(); from observability.exposition import render; "
        "sys.stdout.write(render().decode())"
    )
    env["DJANGO_SETTINGS_MODULE"] = "portal.settings"
    result = subprocess.run(
        [sys.executable, "-c", render],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    samples = {
        s.name: s.value
        for family in text_string_to_metric_families(result.stdout)
        for s in family.samples
        if not s.labels or s.labels == {"result": "applied"}
    }
    assert samples["qm_placement_cycles_total"] == 7
    assert samples["qm_placement_loop_last_run_timestamp_seconds"] == 4  # the latest of the processes ("max")
    assert ("qm_jobs{" in result.stdout) is postgresql
    assert 'qm_metrics_collector_up{collector="scheduler"} ' + ("1.0" if postgresql else "0.0") in result.stdout


def test_a_pod_without_a_web_server_serves_its_processes_metrics_with_the_token(tmp_path: Path) -> None:
    """``serve_metrics``, the worker and beat pods' sidecar: the events of the processes beside it, behind the
    token; refused to start beyond this host without one."""
    env = {
        **os.environ,
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path),
        "PYTHONPATH": str(settings.BASE_DIR),
        "DJANGO_SETTINGS_MODULE": "portal.settings",
    }
    subprocess.run(
        [sys.executable, "-c", "from common import metrics; metrics.PREEMPTIONS.labels('priority').inc(5)"],
        env=env,
        check=True,
    )
    assert all(socket.gethostname().replace("_", "-") in p.name for p in tmp_path.glob("*.db"))
    manage = [sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), "serve_metrics"]
    refused = subprocess.run([*manage, "--bind", "0.0.0.0"], env=env, capture_output=True, text=True, check=False)  # noqa: S104
    assert refused.returncode != 0
    assert "set METRICS_TOKEN" in refused.stderr

    port = free_port()
    server = subprocess.Popen(
        [*manage, "--port", str(port)], env={**env, "METRICS_TOKEN": "pod-token"}, stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        assert server.stdout.readline().startswith(f"serving metrics on http://127.0.0.1:{port}/metrics")
        url = f"http://127.0.0.1:{port}/metrics"
        with pytest.raises(urllib.error.HTTPError) as refused_scrape:
            urllib.request.urlopen(url, timeout=10)
        assert refused_scrape.value.code == 401
        request = urllib.request.Request(url, headers={"Authorization": "Bearer pod-token"})
        with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310
            text = answer.read().decode()
        assert 'qm_preemptions_total{cause="priority"} 5.0' in text
        assert "qm_jobs" not in text  # the database's state is the web app's
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_each_background_loop_records_its_rounds(db: Any) -> None:
    """Serving's control loop, the notification outbox and edge rollouts each time a round and say when it
    finished (``qm_loop_round_finished_timestamp_seconds``: what ServingControlSilent and BackgroundLoopSilent
    read)."""
    from common import metrics
    from edge.tasks import advance_rollouts
    from notifications.actions import outbox
    from serving.actions import control

    before = {loop: value("qm_loop_round_seconds_count", loop=loop) for loop in metrics.LOOPS}
    started = time.time()
    control.tick_all()
    outbox.collect()
    advance_rollouts()
    for loop in metrics.LOOPS:
        assert value("qm_loop_round_seconds_count", loop=loop) == before[loop] + 1, loop
        assert value("qm_loop_round_finished_timestamp_seconds", loop=loop) >= started, loop
