"""The job page's output panel (``/jobs/{id}/output/``, ``scheduler/output.py``): the last lines of a worker's
output from the simulated cluster, a worker picker, earlier lines and paging from the start, a follower that
adds new lines while the job runs and stops when its output ends; a job not handed to a cluster yet; what the
cluster says shown in the panel; bad parameters a 400 naming them; another team's job a 404."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from clusters.backends.simulated import backend as simulated
from scheduler import output
from scheduler.models import Job
from tests.scheduler.conftest import Fleet

pytestmark = pytest.mark.django_db


def running(fleet: Fleet, **fields: Any) -> Job:
    job = fleet.submit("alice", **fields)
    fleet.cycle()
    fleet.follow()
    job.refresh_from_db()
    assert job.state == Job.State.RUNNING, job.state
    return job


def panel(fleet: Fleet, job: Job, username: str = "alice", **query: Any) -> Any:
    client = Client()
    client.force_login(fleet.user(username))
    return client.get(f"/jobs/{job.pk}/output/", query)


def shown(body: str) -> list[str]:
    """The lines in the panel ``body``."""
    return body.split("<pre>")[1].split("</pre>")[0].strip().splitlines()


def follower(body: str) -> str:
    """The query of the follower in ``body`` ("" when there is none)."""
    found = re.search(r'class="follower" hx-get="[^"?]*\?([^"]*)"', body)
    return found.group(1).replace("&amp;", "&") if found else ""


def test_the_page_loads_the_panel_and_the_panel_shows_the_last_lines_and_follows(fleet: Fleet) -> None:
    job = running(fleet, workers=2)
    client = Client()
    client.force_login(fleet.user("alice"))
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert f'hx-get="/jobs/{job.pk}/output/"' in page

    response = panel(fleet, job)
    assert response.status_code == 200
    body = response.content.decode()
    first = job.attempts.get().assignments.order_by("pk").first()
    assert first is not None
    node = first.node.name
    assert f"worker 0 of 2 started on node {node}" in body
    assert 'data-testid="output-worker"' in body
    assert '<option value="1">worker 1</option>' in body
    assert "Following: new lines appear here" in body
    assert "The whole output" in body  # a few lines: no earlier ones
    query = follower(body)
    assert "follow=1" in query
    assert "offset=" in query

    # Nothing new yet: the follower's step adds nothing and goes on following.
    step = Client()
    step.force_login(fleet.user("alice"))
    quiet = step.get(f"/jobs/{job.pk}/output/?{query}").content.decode()
    assert "<pre>" not in quiet
    assert follower(quiet) == query
    # The job runs on: the step adds the new lines only, then a follower with the next offset.
    fleet.run_for(1800)
    grown = step.get(f"/jobs/{job.pk}/output/?{query}").content.decode()
    assert "progress 40%" in grown
    assert "started on node" not in grown
    assert follower(grown) not in ("", query)
    # It ends: the last lines, the status says so, and no follower.
    fleet.run_for(3600)
    last = step.get(f"/jobs/{job.pk}/output/?{follower(grown)}").content.decode()
    assert "finished: exit code 0" in last
    assert "progress 40%" not in last
    assert follower(last) == ""
    assert 'hx-swap-oob="true"' in last
    assert "The output has ended." in last


def test_a_picked_worker_and_paging_back_and_forth(fleet: Fleet, monkeypatch: pytest.MonkeyPatch) -> None:
    job = running(fleet, workers=2)
    fleet.run_for(3600)
    fleet.follow()
    one = panel(fleet, job, worker="1").content.decode()
    assert "worker 1 of 2 started" in one
    assert "worker 0 of 2" not in one
    assert '<option value="1" selected>' in one
    assert follower(one) == ""
    assert "The output has ended." in one

    # Three lines at a time: the last three, then "earlier lines" doubles them until the whole output shows.
    monkeypatch.setattr(output, "TAIL", 3)
    last = panel(fleet, job).content.decode()
    assert len(shown(last)) == 3
    assert "finished: exit code 0" in shown(last)[-1]
    assert "tail=6" in last
    assert 'data-testid="output-start"' in last
    earlier = panel(fleet, job, tail=6).content.decode()
    assert shown(earlier) == shown(panel(fleet, job, tail=12).content.decode())[-6:]
    whole = panel(fleet, job, tail=24).content.decode()
    assert "job submitted with 2 worker(s)" in shown(whole)[0]
    assert "The whole output" in whole
    assert 'data-testid="output-earlier"' not in whole
    # Pages of 400 bytes from the start: "next lines" goes on from the offset the cluster gave.
    monkeypatch.setattr(output, "LIMIT", 400)
    cut = panel(fleet, job, tail=24).content.decode()
    assert "The whole output" not in cut  # the bytes ran out before the lines: not the start
    assert 'data-testid="output-start"' in cut
    pages = [panel(fleet, job, start=1).content.decode()]
    while found := re.search(r'href="[^"?]*\?([^"]*)" [^>]*data-testid="output-next"', pages[-1]):
        query = dict(part.split("=") for part in found.group(1).replace("&amp;", "&").split("&"))
        assert "offset" in query
        pages.append(panel(fleet, job, **query).content.decode())
        assert len(pages) < 10
    assert len(pages) > 1  # 400 bytes hold only part of it
    assert [line for page in pages for line in shown(page)] == shown(whole)
    assert "The output has ended." in pages[-1]


def test_a_job_not_handed_to_a_cluster_polls_the_panel_until_it_is(fleet: Fleet) -> None:
    job = fleet.submit("alice")
    body = panel(fleet, job).content.decode()
    assert "No output yet" in body
    assert f'hx-get="/jobs/{job.pk}/output/' in body
    assert "every 5s" in body
    fleet.cycle()
    fleet.follow()
    assert "started on node" in panel(fleet, job).content.decode()


def test_what_the_cluster_says_is_shown_in_the_panel(fleet: Fleet) -> None:
    job = running(fleet)
    cluster = job.attempts.select_related("cluster").get().cluster
    no_worker = panel(fleet, job, worker="7")
    assert no_worker.status_code == 200
    assert "workers 0 to 0" in no_worker.content.decode()
    simulated.inject(cluster.endpoint, "unreachable", state_file=cluster.options["state_file"])
    down = panel(fleet, job).content.decode()
    assert "does not answer" in down
    assert "every 5s" in down  # tried again while the job runs


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"tail": "0"}, "tail"),
        ({"tail": "10001"}, "tail"),
        ({"tail": "٣"}, "tail"),
        ({"offset": "12", "tail": "5"}, "tail"),
        ({"offset": "a b"}, "offset"),
        ({"worker": "../etc"}, "worker"),
        ({"attempt": "x"}, "attempt"),
    ],
)
def test_bad_parameters_are_a_400_naming_them(fleet: Fleet, query: dict[str, str], field: str) -> None:
    job = running(fleet)
    response = panel(fleet, job, **query)
    assert response.status_code == 400
    assert field in response.content.decode()


def test_an_attempt_the_job_does_not_have_is_a_404(fleet: Fleet) -> None:
    assert panel(fleet, running(fleet), attempt=5).status_code == 404


@pytest.mark.parametrize("username", ["bob", "mallory"])
def test_another_teams_job_output_is_a_404(fleet: Fleet, username: str) -> None:
    job = running(fleet)
    response = panel(fleet, job, username)
    assert response.status_code == 404
    assert "started on node" not in response.content.decode()
