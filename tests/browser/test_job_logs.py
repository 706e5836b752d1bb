"""The job page's output panel in Chromium: a running job's last lines per worker, new lines appearing while
it runs without the page reloading, and following stopping when the job's output ends. The simulated cluster
writes the output (its lines follow the job's simulated clock, which the test moves on)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from clusters.models import Cluster
from demo.jobs import A100, seed_governance
from scheduler import actions, submission
from scheduler.models import Attempt, Job
from tests.browser.conftest import sign_in_as

pytestmark = pytest.mark.browser

SHOTS = Path(os.environ.get("QM_SHOTS") or Path(__file__).resolve().parents[2] / "test-artifacts" / "browser")
#: The follower polls every 3 s: new lines show within this.
FOLLOW_MS = 8_000


def shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def run_for(state_dir: Path, seconds: float) -> None:
    """Move the simulated clusters' jobs ``seconds`` on (their clock is the wall clock)."""
    for path in state_dir.glob("*.json"):
        if not path.read_text().strip():
            continue
        state = json.loads(path.read_text())
        for job in state["jobs"].values():
            job["submitted"] -= seconds
        path.write_text(json.dumps(state))


def running_job(demo: Any) -> Job:
    """Alice's two-worker A100 job, placed, handed to the simulated cluster and seen running."""
    from django.contrib.auth.models import User

    from scheduler.placement import dispatch, follow, loop

    alice = User.objects.get(username="alice")
    request = submission.JobRequest(
        team=actions.teams_for_submission(alice)[0],
        name="bert-pretrain",
        time_limit=1000,
        accelerator_types=[A100],
        accelerators=8,
        workers=2,
        image="ghcr.io/demo/nlp:1",
        command=["python", "pretrain.py"],
    )
    job, _ = actions.submit_job(alice, request)
    loop.run_cycle(demo)
    for attempt_id in Attempt.objects.filter(job=job).values_list("pk", flat=True):
        dispatch.dispatch(attempt_id)
    for cluster in Cluster.objects.filter(organization=demo):
        follow.follow(cluster.pk)
    job.refresh_from_db()
    assert job.state == Job.State.RUNNING, (job.state, job.pending_message)
    return job


def test_the_output_panel_follows_a_running_job_and_stops_when_it_ends(
    page: Page, fleet: dict[str, Cluster], demo: Any, settings: Any
) -> None:
    seed_governance(demo)
    job = running_job(demo)
    state_dir = Path(settings.VAR_DIR) / "simulated"
    last = job.attempts.get().assignments.order_by("pk").last()
    assert last is not None
    node = last.node.name

    sign_in_as(page, "alice")
    page.goto(f"/jobs/{job.pk}/")
    output = page.get_by_test_id("output")
    lines = output.get_by_test_id("output-lines")
    expect(lines).to_contain_text("worker 0 of 2 started on node")
    expect(output.get_by_test_id("output-status")).to_contain_text("Following")
    expect(output.get_by_test_id("output-source")).to_contain_text("attempt 1 on A100 Slurm partition")
    # A marker the page keeps only as long as it is not reloaded.
    page.evaluate("window.qmNotReloaded = true")

    # The worker picker: worker 1's own lines, on its own node, still following.
    output.get_by_test_id("output-worker").select_option("1")
    expect(lines).to_contain_text(f"worker 1 of 2 started on node {node}")
    expect(lines).not_to_contain_text("worker 0 of 2")
    expect(output.get_by_test_id("output-status")).to_contain_text("Following")
    shot(page, "job-output-following")

    # The job runs on: its new lines appear below the first ones without a reload.
    run_for(state_dir, 450)
    expect(lines).to_contain_text("worker 1 progress 40%", timeout=FOLLOW_MS)
    expect(lines).to_contain_text("started on node")  # the first lines are still there
    assert page.evaluate("window.qmNotReloaded") is True
    assert lines.inner_text().count("started on node") == 1  # appended, not repeated

    # It ends: the last lines appear, the panel says so and stops asking.
    run_for(state_dir, 1000)
    expect(lines).to_contain_text("worker 1 finished: exit code 0", timeout=FOLLOW_MS)
    expect(output.get_by_test_id("output-status")).to_have_text("The output has ended.", timeout=FOLLOW_MS)
    expect(page.get_by_test_id("output-follower")).to_have_count(0)
    assert page.evaluate("window.qmNotReloaded") is True
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url) if "/output/" in request.url else None)
    page.wait_for_timeout(4_000)
    assert asked == []
    shot(page, "job-output-ended")

    # Paging back: with the whole output shown, the panel says so; "Last lines" is there after a page.
    expect(output.get_by_test_id("output-at-start")).to_be_visible()
    assert re.search(r"progress 90%", lines.inner_text())


def test_another_teams_job_output_is_not_shown(page: Page, fleet: dict[str, Cluster], demo: Any) -> None:
    seed_governance(demo)
    job = running_job(demo)
    sign_in_as(page, "bob")
    response = page.goto(f"/jobs/{job.pk}/output/")
    assert response is not None
    assert response.status == 404
    expect(page.locator("body")).not_to_contain_text("started on node")
