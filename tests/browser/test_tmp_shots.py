from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page

from clusters import actions as cluster_actions
from clusters.models import Cluster
from scheduler import actions, checkpoints, submission
from scheduler.models import Attempt
from scheduler.placement import dispatch, follow, loop, recover
from tests.browser.conftest import sign_in_as
from tests.browser.test_jobs import governed, shot  # noqa: F401

pytestmark = pytest.mark.browser


def test_shots(page: Page, governed: dict[str, Cluster], demo: Any) -> None:
    from django.contrib.auth.models import User

    alice = User.objects.get(username="alice")
    team = actions.teams_for_submission(alice)[0]
    request = submission.JobRequest(team=team, name="llama-ft", time_limit=7200, image="ghcr.io/lab/train:1",
                                    command=["python", "train.py"], accelerators=8, checkpoint_location="s3://ckpt/llama")
    job, _ = actions.submit_job(alice, request)
    for _ in range(2):
        loop.run_cycle(demo)
        for pk in Attempt.objects.filter(outcome="active", backend_id="").values_list("pk", flat=True):
            dispatch.dispatch(pk)
        for c in governed.values():
            follow.follow(c.pk)
    job.refresh_from_db()
    first = job.attempts.get()
    checkpoints.report(job, first.number, "s3://ckpt/llama/step-1200", 1200)
    node = first.assignments.first().node
    cluster_actions.drain_node(User.objects.get(username="adam"), node, "PSU swap", grace_seconds=0)
    recover.recover(demo)
    from django.utils import timezone
    from datetime import timedelta
    for c in governed.values():
        follow.follow(c.pk, timezone.now() + timedelta(seconds=5))
    loop.run_cycle(demo)
    for pk in Attempt.objects.filter(outcome="active", backend_id="").values_list("pk", flat=True):
        dispatch.dispatch(pk)
    for c in governed.values():
        follow.follow(c.pk)
    sign_in_as(page, "alice")
    page.goto(f"/jobs/{job.pk}/")
    shot(page, "tmp-job-attempts")
    page.goto("/logout/") if False else None
    page.context.clear_cookies()
    sign_in_as(page, "adam")
    page.goto(f"/clusters/nodes/{node.pk}/")
    shot(page, "tmp-node")
    page.goto(f"/clusters/{node.cluster.pk}/")
    shot(page, "tmp-cluster")
