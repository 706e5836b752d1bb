"""What-if pages: finance and admins ask through a form and follow a run (a partial polled while it runs, the
comparison once done); team roles get 403 on the list and 404 for a run, as does another organization."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client
from django.utils import timezone

from billing.actions import whatif
from billing.models import WhatIf
from clusters.models import Cluster
from tests.billing import whatif_history as h
from tests.conftest import World

pytestmark = pytest.mark.django_db
LIST = "/billing/what-ifs/"


def _client(world: World, username: str) -> Client:
    client = Client()
    client.force_login(world.users[username])
    return client


def _ask(world: World, cluster: Cluster, nodes: int = 2) -> WhatIf:
    return whatif.submit_what_if(world.users["fiona"], world.org, cluster=cluster, flavor=h.H100, nodes=nodes, days=2)


@pytest.mark.parametrize("user", ["fiona", "adam"])
def test_the_list_has_the_form_todays_fleet_and_the_runs(world: World, user: str) -> None:
    cluster, _ = h.cluster(world.org, nodes=3)
    _ask(world, cluster)
    page = _client(world, user).get(LIST)
    assert page.status_code == 200
    html = page.content.decode()
    assert 'data-testid="what-if-form"' in html
    assert 'name="nodes"' in html
    assert 'name="days"' in html
    assert re.search(r"<td>H100-SXM-80GB</td><td>3</td><td>24</td>", html)  # today's fleet
    assert "+2 H100-SXM-80GB nodes in gpu" in html
    assert "Queued" in html


@pytest.mark.parametrize("user", ["alice", "lena", "mallory"])
def test_others_are_refused_the_list_and_do_not_find_a_run(world: World, user: str) -> None:
    cluster, _ = h.cluster(world.org)
    what_if = _ask(world, cluster)
    client = _client(world, user)
    expected = 200 if user == "mallory" else 403  # mallory is an admin of her own organization
    assert client.get(LIST).status_code == expected
    assert client.get(f"{LIST}{what_if.pk}/").status_code == 404
    assert client.get(f"{LIST}{what_if.pk}/status/").status_code == 404
    if user == "mallory":
        assert "gpu" not in client.get(LIST).content.decode()


def test_asking_through_the_form_queues_a_run_and_shows_it(world: World) -> None:
    cluster, kind = h.cluster(world.org, nodes=2)
    client = _client(world, "fiona")
    answer = client.post(LIST, {"cluster": cluster.pk, "flavor": kind.pk, "nodes": "-1", "days": "14"})
    what_if = WhatIf.objects.get()
    assert answer.status_code == 302
    assert answer["Location"] == f"{LIST}{what_if.pk}/"
    assert (what_if.nodes, what_if.days, what_if.requested_by) == (-1, 14, world.users["fiona"])
    page = client.get(answer["Location"]).content.decode()
    assert "-1 H100-SXM-80GB node in gpu" in page
    assert f'hx-get="/billing/what-ifs/{what_if.pk}/status/"' in page
    assert "every 2s" in page
    assert "<progress" in page


def test_a_bad_form_answers_400_with_each_message_by_its_field(world: World) -> None:
    cluster, kind = h.cluster(world.org, nodes=2)
    client = _client(world, "fiona")
    answer = client.post(LIST, {"cluster": cluster.pk, "flavor": kind.pk, "nodes": "-5", "days": "30"})
    assert answer.status_code == 400
    assert "has 2 H100-SXM-80GB nodes in service; at most 2 can go" in answer.content.decode()
    answer = client.post(LIST, {"cluster": "", "flavor": kind.pk, "nodes": "x", "days": "200"})
    assert answer.status_code == 400
    form = answer.context["form"]
    assert set(form.errors) == {"cluster", "nodes", "days"}
    assert not WhatIf.objects.exists()


def test_the_status_partial_polls_while_running_and_shows_the_comparison_once_done(world: World) -> None:
    cluster, _ = h.cluster(world.org, nodes=2)
    h.crowded(world.teams["vision"], world.users["alice"], cluster, jobs=12)
    what_if = _ask(world, cluster)
    client = _client(world, "adam")
    WhatIf.objects.filter(pk=what_if.pk).update(status=WhatIf.Status.RUNNING, progress=0.42, started_at=timezone.now())
    partial = client.get(f"{LIST}{what_if.pk}/status/").content.decode()
    assert "hx-trigger" in partial
    assert 'value="42"' in partial
    assert "replaying on today's fleet" in partial
    WhatIf.objects.filter(pk=what_if.pk).update(status=WhatIf.Status.QUEUED, progress=0)
    assert whatif.run(what_if.pk) == "done"
    partial = client.get(f"{LIST}{what_if.pk}/status/").content.decode()
    assert "hx-trigger" not in partial  # done: the poll stops
    assert 'data-testid="what-if-comparison"' in partial
    assert "Mean queue wait" in partial
    found = re.search(rf'id="what-if-{what_if.pk}-chart"[^>]*>(.*?)</script>', partial, re.S)
    assert found is not None
    figure = json.loads(found[1])
    assert {t["name"] for t in figure["data"]} == {"Today's fleet", "Changed fleet"}
    today = next(t for t in figure["data"] if t["name"] == "Today's fleet" and t["xaxis"] == "x")
    changed = next(t for t in figure["data"] if t["name"] == "Changed fleet" and t["xaxis"] == "x")
    assert changed["y"][0] < today["y"][0]  # the mean wait, in hours
    page = client.get(f"{LIST}{what_if.pk}/").content.decode()
    assert "plotly-basic.min.js" in page
    assert "Utilisation of the fleet" in page


def test_a_failed_run_shows_its_error(world: World) -> None:
    cluster, _ = h.cluster(world.org, nodes=2)
    what_if = _ask(world, cluster, nodes=-2)
    Cluster.objects.filter(pk=cluster.pk).update(status=Cluster.Status.UNREACHABLE)
    assert whatif.run(what_if.pk) == "failed"
    page = _client(world, "fiona").get(f"{LIST}{what_if.pk}/").content.decode()
    assert 'data-testid="what-if-error"' in page
    assert "at most 0 can go" in page
    assert "hx-trigger" not in page
