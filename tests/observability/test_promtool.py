"""The shipped Prometheus rules: generated from the SLO definitions (the committed files are what the command
writes), valid to ``promtool check rules``, and proven by ``promtool test rules`` with the unit-test series of
deploy/prometheus/tests/ (each alert firing when it should and not when it should not)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from django.conf import settings
from django.core.management import call_command

from observability import rules, slo
from tests.observability.conftest import prometheus_binary

DEPLOY = Path(settings.BASE_DIR) / "deploy"
RULES = DEPLOY / "prometheus" / "rules.yml"


def test_the_committed_rules_and_dashboard_are_the_generated_ones(tmp_path: Path) -> None:
    call_command("write_observability_config", into=str(tmp_path))
    for path in ("deploy/prometheus/rules.yml", "deploy/grafana/quartermaster.json"):
        assert (tmp_path / path).read_text() == (Path(settings.BASE_DIR) / path).read_text(), (
            f"{path} is stale: run manage.py write_observability_config and commit it"
        )


def test_promtool_checks_the_rules() -> None:
    result = subprocess.run(
        [prometheus_binary("promtool"), "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 48 rules found" in result.stdout


def test_promtool_unit_tests_pass() -> None:
    tests = sorted(str(p) for p in (DEPLOY / "prometheus" / "tests").glob("*.yml"))
    assert len(tests) == 2
    result = subprocess.run(
        [prometheus_binary("promtool"), "test", "rules", *tests], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == len(tests)


def test_every_alert_is_unit_tested_and_has_its_runbook_section() -> None:
    alerts = {rule["alert"] for group in rules.rules()["groups"] for rule in group["rules"] if "alert" in rule}
    assert alerts == {s.alert for s in slo.SLOS} | {
        "LoopSilent",
        "ClusterSyncStale",
        "MeterLagging",
        "DataPlaneTableStale",
        "ServingControlSilent",
        "BackgroundLoopSilent",
        "NotificationsGivenUp",
        "MetricsScrapeFailing",
    }
    tested = set()
    for path in (DEPLOY / "prometheus" / "tests").glob("*.yml"):
        for case in yaml.safe_load(path.read_text())["tests"]:
            tested |= {check["alertname"] for check in case["alert_rule_test"] if check["exp_alerts"]}
    assert tested == alerts
    runbook = (Path(settings.BASE_DIR) / "docs" / "runbook.md").read_text()
    for alert in alerts:
        assert f"\n## {alert}\n" in runbook, f"docs/runbook.md has no section for {alert}"


def test_each_burn_alert_pairs_a_long_and_a_short_window_at_the_workbooks_rates() -> None:
    group = rules.rules()["groups"][0]
    assert group["name"] == "quartermaster-slo-admission"
    assert [r["record"] for r in group["rules"][:5]] == [f"qm_slo:error_ratio:rate{w}" for w in rules.WINDOWS]
    burns = group["rules"][5:]
    assert [(r["labels"]["severity"], r["labels"]["window"]) for r in burns] == [
        ("page", "1h"),
        ("page", "6h"),
        ("ticket", "3d"),
    ]
    assert burns[0]["expr"].split("\nand\n") == [
        'qm_slo:error_ratio:rate1h{slo="admission"} > 0.144',
        'qm_slo:error_ratio:rate5m{slo="admission"} > 0.144\n',
    ]
    assert all(r["annotations"]["runbook_url"] == "docs/runbook.md#sloadmissionbudgetburn" for r in burns)


def test_the_dashboard_queries_every_metric_family() -> None:
    text = json.dumps(rules.dashboard())
    for family in (
        "qm_placement_cycle_phase_seconds",
        "qm_jobs",
        "qm_queue_depth",
        "qm_job_admission_wait_seconds",
        "qm_job_start_wait_seconds",
        "qm_dispatch_failures_total",
        "qm_attempts_ended_total",
        "qm_preemptions_total",
        "qm_cluster_sync_age_seconds",
        "qm_nodes",
        "qm_meter_lag_seconds",
        "qm_budget_used_ratio",
        "qm_http_request_duration_seconds",
        "qm_loop_round_finished_timestamp_seconds",
        "qm_loop_round_seconds",
        "qm_serving_actions_total",
        "qm_notifications_total",
        "qm_edge_rollout_moves_total",
    ):
        assert family in text


# Only the compose file's: Debian builds Prometheus without the Kubernetes discovery that kubernetes.yml uses.
@pytest.mark.parametrize("config", ["prometheus.yml"])
def test_the_shipped_scrape_configuration_is_valid(config: str, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("a-token\n")
    text = (DEPLOY / "prometheus" / config).read_text()
    text = re.sub(r"credentials_file: \S+", f"credentials_file: {token}", text).replace("- rules.yml", f"- {RULES}")
    (tmp_path / config).write_text(text)
    result = subprocess.run(
        [prometheus_binary("promtool"), "check", "config", str(tmp_path / config)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "job_name: quartermaster" in text
