"""Fifty real device agents (``deploy/edge_agent.py``, one process each) against a live portal on loopback.

The scenario is ``benchmarks/rollout.py``'s (``manage.py bench_rollout`` times the same): agents enrol with
one-time tokens into two groups; some are stopped until the portal counts them offline, some are killed in the
middle of a download and started again; a good version rolls out to both groups through a canary and three
waves; then a good version goes to one group while a version whose health check fails goes to the other, whose
rollout pauses and rolls back. What each agent runs is read from its own state directory.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.utils import timezone

from benchmarks import rollout
from edge.actions import devices as edge_devices
from edge.actions import rollouts as edge_rollouts
from edge.models import Device, RolloutState
from registry import artifacts
from registry.models import Model
from tests.edge.agent_fleet import FaultyLink

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]
WHOLE = [{"percent": 100}]


@pytest.fixture
def portal(live_server: Any, settings: Any, tmp_path: Path) -> str:
    settings.ARTIFACT_ROOT = tmp_path / "artifacts"
    settings.EDGE_POLL_SECONDS = 2  # offline after 6 s unseen, so a stopped agent drops out within a phase
    return str(live_server.url)


def test_fifty_agents_roll_out_in_phases_resume_catch_up_and_roll_back_a_bad_version(
    portal: str, tmp_path: Path
) -> None:
    team, lead = rollout.make_team("agents")
    result = rollout.run(portal, tmp_path / "fleet", team, lead, devices=50, size=3 << 20, rate=1536 << 10)

    # The good version went through the canary and every wave to every device, in both groups.
    assert result.rollouts["v1 to lab-a"] == result.rollouts["v1 to lab-b"] == "completed"
    assert result.phases_seen["v1 to lab-a"][-1] == result.phases_seen["v1 to lab-b"][-1] == 3
    # The bad version: its rollout stopped and rolled back; nobody runs it, in the portal's view or the agents'.
    assert result.rollouts["v3 (bad) to lab-b"] == "rolled_back"
    assert result.rollouts["v2 to lab-a"] == "completed"
    assert 2 <= result.bad_reached < 25
    assert result.on_bad == []
    # Every device runs a verified version: its current file hashes to the SHA-256 its state says it runs.
    assert result.unverified == []
    assert {name: label for name, label in result.running.items() if name.endswith(("0", "2", "4", "6", "8"))} == {
        f"robot-{i:02d}": "detector 2" for i in range(0, 50, 2)
    }
    assert {name: label for name, label in result.running.items() if int(name[-2:]) % 2} == {
        f"robot-{i:02d}": "detector 1" for i in range(1, 50, 2)
    }
    # Agents killed in the middle of a download resumed from the bytes they had kept.
    assert result.killed
    for name in result.killed:
        assert any(start > 0 for start in result.resumed[name]), (name, result.resumed[name])
    # The agents that were offline for a phase caught up (they run what their group runs, checked above) and
    # the portal saw each agent's last report.
    assert len(result.offline) == 4
    assert Device.objects.filter(team=team, health="ok").count() == 50


def one_agent(name: str, server: str, tmp_path: Path, link: str | None = None) -> tuple[Any, Any, Any, rollout.Agent]:
    """A team with one device group and one agent (not started) enrolling into it through ``link`` or directly."""
    team, lead = rollout.make_team(name)
    group = edge_devices.create_group(lead, team, name="bench")
    _, token = edge_devices.issue_enrolment_token(lead, group)
    options = ["--poll-wait", "2", "--backoff-max", "1"]
    agent = rollout.Agent(tmp_path, "robot-00", "bench", link or server, token, options)
    return team, lead, group, agent


def test_an_agent_never_switches_to_bytes_that_do_not_match_the_version(portal: str, tmp_path: Path) -> None:
    team, lead, group, agent = one_agent("checksum", portal, tmp_path)
    model = Model.objects.create(team=team, name="detector", created_at=timezone.now(), created_by=lead)
    v1 = rollout.publish(team, lead, model, "1", os.urandom(1 << 20))
    v2 = rollout.publish(team, lead, model, "2", os.urandom(1 << 20))
    artifacts.path_for(v2).write_bytes(os.urandom(v2.size_bytes))  # the stored bytes rot after publishing
    beat = rollout.Beat()
    beat.start()
    agent.start()
    try:
        rollout.wait_for(
            "the agent to enrol", lambda: Device.objects.filter(team=team, last_status="idle").exists(), 30
        )
        first = edge_rollouts.start_rollout(lead, group, v1, phases=WHOLE)
        rollout.wait_for("version 1", lambda: rollout.state_of(first) == RolloutState.COMPLETED, 60)
        second = edge_rollouts.start_rollout(lead, group, v2, phases=WHOLE)
        rollout.wait_for("the rollback", lambda: rollout.state_of(second) == RolloutState.ROLLED_BACK, 60)
        rollout.wait_for("the agent's report", lambda: Device.objects.get(team=team).last_status == "healthy", 30)
    finally:
        agent.end()
        beat.stop()
        time.sleep(3)  # the portal's held poll runs out
    assert "checksum mismatch for detector version 2" in agent.log
    assert "reported checksum_mismatch for version id" in agent.log
    assert agent.verified() == (v1.sha256, True)
    assert not (agent.folder / "versions" / v2.sha256).exists()
    assert list((agent.folder / "partial").iterdir()) == []
    device = Device.objects.get(team=team)
    assert device.running_version == v1
    assert device.events.filter(status="checksum_mismatch", version=v2).count() == 1


def test_an_agent_resumes_cut_downloads_and_rides_out_a_lost_link(portal: str, tmp_path: Path) -> None:
    link = FaultyLink(int(urlsplit(portal).port or 80))
    link.cut_after = 1_300_000  # each response breaks off after 1.3 MB: a 3 MB version takes three tries
    team, lead, group, agent = one_agent("link", portal, tmp_path, link=link.url)
    model = Model.objects.create(team=team, name="detector", created_at=timezone.now(), created_by=lead)
    v1 = rollout.publish(team, lead, model, "1", os.urandom(3_000_000))
    v2 = rollout.publish(team, lead, model, "2", os.urandom(1 << 20))
    beat = rollout.Beat()
    beat.start()
    agent.start()
    try:
        rollout.wait_for(
            "the agent to enrol", lambda: Device.objects.filter(team=team, last_status="idle").exists(), 30
        )
        first = edge_rollouts.start_rollout(lead, group, v1, phases=WHOLE)
        rollout.wait_for("version 1", lambda: rollout.state_of(first) == RolloutState.COMPLETED, 60)
        assert link.cuts == 2
        starts = agent.resumed_at()
        assert len(starts) == 2, starts
        assert 0 < starts[0] < starts[1] < v1.size_bytes, starts
        assert agent.log.count("reported download_failed") == 2  # under the portal's three

        link.cut_after = None
        link.go_down()  # out of range: the held poll breaks, new connections are refused
        time.sleep(3)
        second = edge_rollouts.start_rollout(lead, group, v2, phases=WHOLE)
        time.sleep(3)
        assert agent.process is not None
        assert agent.process.poll() is None  # still running, retrying
        assert agent.log.count("retrying in") >= 2
        assert agent.running_sha() == v1.sha256
        link.come_back()
        rollout.wait_for("version 2 after the link came back", lambda: rollout.state_of(second) == "completed", 60)
        rollout.wait_for("the agent's state", lambda: agent.state().get("health") == "healthy", 10)
    finally:
        agent.end()
        beat.stop()
        link.close()
        time.sleep(3)
    assert agent.verified() == (v2.sha256, True)
    assert {p.name for p in (agent.folder / "versions").iterdir()} == {v1.sha256, v2.sha256}  # v1 kept for rollback


def test_an_agent_killed_during_its_health_check_checks_again_after_a_restart(portal: str, tmp_path: Path) -> None:
    team, lead, group, agent = one_agent("restart", portal, tmp_path)
    # The first health check hangs (the robot loses power during it); later ones pass at once.
    marker = tmp_path / "first-check"
    script = tmp_path / "check.py"
    script.write_text(
        f"import pathlib, time\nfirst = pathlib.Path({str(marker)!r})\n"
        "if not first.exists():\n    first.touch()\n    time.sleep(60)\n"
    )
    agent.argv += ["--health-command", f"{sys.executable} {script}"]
    model = Model.objects.create(team=team, name="detector", created_at=timezone.now(), created_by=lead)
    v1 = rollout.publish(team, lead, model, "1", os.urandom(1 << 20))
    beat = rollout.Beat()
    beat.start()
    agent.start()
    try:
        rollout.wait_for(
            "the agent to enrol", lambda: Device.objects.filter(team=team, last_status="idle").exists(), 30
        )
        first = edge_rollouts.start_rollout(lead, group, v1, phases=WHOLE)
        rollout.wait_for("the first health check", marker.exists, 30)
        agent.kill()
        assert agent.state()["health"] == "switched"  # switched to, not yet found healthy
        assert rollout.state_of(first) == RolloutState.RUNNING
        agent.start()
        rollout.wait_for("version 1", lambda: rollout.state_of(first) == RolloutState.COMPLETED, 60)
    finally:
        agent.end()
        beat.stop()
        time.sleep(3)
    assert agent.verified() == (v1.sha256, True)
    assert agent.state()["health"] == "healthy"
    assert agent.log.count(f"health check: {sys.executable}") == 2
    assert agent.log.count("downloading 1048576 bytes") == 1  # the verified file was kept, not fetched again
