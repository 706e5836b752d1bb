"""A real Prometheus (Debian's) scrapes a live portal with the shipped rules loaded: the metrics arrive, a
recording rule of an SLO evaluates over jobs driven through the loop, and ``LoopSilent`` fires once the loop
stops while a job waits. Scrapes and evaluations run every second; the test waits for each answer (up to a
deadline), it times nothing."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.conf import settings

from scheduler.models import Job, LoopState
from tests.observability.conftest import free_port, prometheus_binary
from tests.scheduler.conftest import Fleet, fleet  # noqa: F401 - the fleet fixture

RULES = Path(settings.BASE_DIR) / "deploy" / "prometheus" / "rules.yml"
DEADLINE = 90.0


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - our own local Prometheus
        return json.loads(response.read())


def wait_for(what: str, found: Callable[[], Any]) -> Any:
    """Ask until ``found`` answers something true; fail after the deadline saying what never came."""
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        answer = found()
        if answer:
            return answer
        time.sleep(0.5)
    pytest.fail(f"Prometheus never showed {what} within {DEADLINE:.0f} s")


@pytest.fixture
def prometheus(live_server: Any, tmp_path: Path, settings: Any) -> Iterator[str]:
    settings.METRICS_TOKEN = ""  # scraped from this host: answered without a token
    settings.VAR_DIR = tmp_path / "var"
    binary = prometheus_binary("prometheus")
    target = f"127.0.0.1:{urllib.parse.urlsplit(live_server.url).port}"
    config = {
        # A scrape may take its interval (the timeout is at most the interval): /metrics runs every collector against
        # the database, over a second under CI's load, and a timed-out scrape is the target down.
        "global": {"scrape_interval": "5s", "scrape_timeout": "5s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [
            {"job_name": "quartermaster", "metrics_path": "/metrics", "static_configs": [{"targets": [target]}]}
        ],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = (tmp_path / "prometheus.log").open("w")
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for("itself ready", lambda: _ready(url) or process.poll() is not None)
        assert process.poll() is None, (tmp_path / "prometheus.log").read_text()
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as response:  # noqa: S310
            return bool(response.status == 200)
    except OSError:
        return False


def query(url: str, promql: str) -> list[dict[str, Any]]:
    answer = get(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}")
    assert answer["status"] == "success", answer
    return list(answer["data"]["result"])


def test_prometheus_scrapes_the_portal_evaluates_the_slos_and_fires_when_the_loop_stops(
    prometheus: str,
    fleet: Fleet,  # noqa: F811
) -> None:
    wait_for(
        "the portal's target up",
        lambda: [r for r in query(prometheus, 'up{job="quartermaster"}') if r["value"][1] == "1"],
    )

    # A first admission makes the histogram's series (a series appears with its first observation: Prometheus
    # takes no increase from a series it had not seen, so the SLO's rate starts once it has scraped it).
    jobs = [fleet.submit(accelerators=8, name="train-0")]
    fleet.cycle()
    wait_for(
        "the admission histogram",
        lambda: query(prometheus, 'qm_job_admission_wait_seconds_count{within_quota="true"}'),
    )
    jobs += [fleet.submit(accelerators=8, name=f"train-{i}") for i in range(1, 7)]  # five more fit; one waits
    fleet.cycle()
    fleet.follow()
    assert Job.objects.filter(state=Job.State.RUNNING).count() == 6

    running = wait_for(
        "the running jobs",
        lambda: [r for r in query(prometheus, 'qm_jobs{state="running"}') if r["value"][1] == "6"],
    )
    assert running[0]["metric"]["job"] == "quartermaster"
    depth = wait_for("the queue depth", lambda: query(prometheus, 'sum(qm_queue_depth{organization="demo"})'))
    assert depth[0]["value"][1] == "1"
    # The recording rule: admissions within the minute, none late: an error ratio of 0.
    ratio = wait_for(
        "the admission SLO's error ratio",
        lambda: [
            r for r in query(prometheus, 'qm_slo:error_ratio:rate5m{slo="admission"}') if r["value"][1] not in ("NaN",)
        ],
    )
    assert float(ratio[0]["value"][1]) == 0.0
    assert not [
        a for a in get(f"{prometheus}/api/v1/alerts")["data"]["alerts"] if a["labels"]["alertname"] == "LoopSilent"
    ]

    # The loop stops: its last cycle two minutes ago, the seventh job waiting since before.
    waiting = Job.objects.get(pk__in=[j.pk for j in jobs], state=Job.State.PENDING)
    LoopState.objects.filter(organization=fleet.org).update(last_cycle_at=fleet.later(-120))
    Job.objects.filter(pk=waiting.pk).update(state_changed_at=fleet.later(-300))

    def loop_silent() -> list[dict[str, Any]]:
        alerts = get(f"{prometheus}/api/v1/alerts")["data"]["alerts"]
        return [a for a in alerts if a["labels"]["alertname"] == "LoopSilent" and a["state"] == "firing"]

    firing = wait_for("LoopSilent firing", loop_silent)
    assert firing[0]["labels"]["organization"] == "demo"
    assert firing[0]["labels"]["severity"] == "page"
    assert firing[0]["annotations"]["runbook_url"] == "docs/runbook.md#loopsilent"
