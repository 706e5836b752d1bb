"""Each role's home page (``portal/home.py``): a researcher's running and waiting jobs with the engine's reasons,
their failures of the week and their spend this month; a lead's quota and budgets; finance's month so far; an
admin's fleet health, SLOs and what is firing. Real jobs placed by real cycles, metered and priced; and never
a job, team or cluster of someone else's."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from html import unescape
from typing import Any

import pytest
from django.core.cache import cache
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from billing import attribution
from clusters import actions as cluster_actions
from clusters.models import Cluster, Drain, Node
from governance.actions import budgets, quotas
from observability import slo
from scheduler import actions
from scheduler.models import Attempt, Job
from tests.billing.test_finance_pages import OCT, START, costed  # noqa: F401 - the fixture: a priced, metered October
from tests.scheduler.conftest import Fleet, fleet  # noqa: F401 - the fixture costed builds on

pytestmark = pytest.mark.django_db

H100 = "H100-SXM-80GB"
#: A week into the metered October of ``costed``.
NOW = datetime(2026, 10, 7, 12, tzinfo=UTC)


@pytest.fixture(autouse=True)
def fresh_cache() -> Iterator[None]:
    cache.clear()
    yield
    cache.clear()


def home(lab: Fleet, username: str) -> str:
    client = Client()
    client.force_login(lab.user(username))
    response = client.get("/")
    assert response.status_code == 200
    return response.content.decode()


def section(body: str, testid: str) -> str:
    match = re.search(rf'<section class="home-section" data-testid="{testid}">(.*?)</section>', body, re.S)
    assert match is not None, testid
    return match.group(1)


def text(html: str) -> str:
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


def figure(body: str, testid: str) -> str:
    match = re.search(rf'data-testid="{testid}">([^<]*)<', body)
    assert match is not None, testid
    return match.group(1).strip()


def number(value: str) -> Decimal:
    return Decimal(value.replace(",", ""))


@pytest.fixture
def at_work(costed: Fleet, monkeypatch: pytest.MonkeyPatch) -> Fleet:  # noqa: F811
    """``costed``'s October, and on top: quotas for Vision and Robotics; alice's job running, one too big to start now
    (waiting, with the engine's reason), a failure two days ago and one ten days ago; bob's jobs, one failed
    two days ago too. The clock then stands at ``NOW``."""
    lab = costed
    quotas.set_quota(lab.user("adam"), actions.queue_for(lab.world.teams["vision"], None), flavor=H100,
                     nominal=8, reason="Q4 plan")  # fmt: skip
    quotas.set_quota(lab.user("adam"), actions.queue_for(lab.world.teams["robotics"], None), flavor=H100,
                     nominal=8, reason="Q4 plan")  # fmt: skip
    running = lab.submit(name="resnet-sweep", accelerators=4)
    waiting = lab.submit(name="llm-pretrain", accelerators=8)
    lab.submit("bob", name="bobs-secret-job", accelerators=1)
    lab.cycle()
    for name, user, days in (("tokenizer-crash", "alice", 2), ("old-crash", "alice", 10), ("bobs-crash", "bob", 2)):
        job = lab.submit(user, name=name, accelerators=1)
        actions.cancel_job(lab.user(user), job, "test")  # out of the placement loop's way
        Job.objects.filter(pk=job.pk).update(
            state=Job.State.FAILED, finished_at=NOW - timedelta(days=days), message=f"{name}: exit code 137"
        )
    assert Job.objects.get(pk=running.pk).state in {"admitted", "placing", "running"}
    assert Job.objects.get(pk=waiting.pk).state == "pending"
    monkeypatch.setattr(timezone, "now", lambda: NOW)
    return lab


def test_a_researcher_sees_their_jobs_with_reasons_failures_and_spend(at_work: Fleet) -> None:
    work = section(home(at_work, "alice"), "home-work")
    shown = text(work)
    waiting = Job.objects.get(name="llm-pretrain")
    assert "resnet-sweep" in shown
    assert "llm-pretrain" in shown
    assert waiting.pending_reason, "the engine gave the waiting job a reason"
    row = re.search(rf'<tr data-job="{waiting.pk}">(.*?)</tr>', work, re.S)
    assert row is not None
    assert waiting.pending_message.split(".")[0] in unescape(row.group(1))
    assert figure(work, "active-count") == str(Job.objects.filter(submitted_by__username="alice",
                                                                  state__in=["pending", "admitted", "placing",
                                                                             "running"]).count())  # fmt: skip
    assert "tokenizer-crash" in shown
    assert "exit code 137" in shown
    assert "old-crash" not in shown, "a failure older than seven days is not recent"
    assert figure(work, "failure-count") == "1"
    assert "bobs-secret-job" not in shown
    assert "bobs-crash" not in shown
    # Spend: what the October attribution charges alice and her team (the costs page's figures).
    month = attribution.attribute(at_work.org, OCT)
    vision = at_work.world.teams["vision"].pk
    mine = sum(line.total for line in month.lines if line.user == at_work.user("alice").pk)
    team = sum(line.total for line in month.lines if line.team == vision)
    assert mine > 0
    assert number(figure(work, "spend-mine")) == attribution.money(mine)
    assert number(figure(work, "spend-teams")) == attribution.money(team)
    assert 'href="/jobs/new/"' in work


def test_a_lead_sees_quota_in_use_and_budget_against_their_limits(at_work: Fleet) -> None:
    body = home(at_work, "lena")
    team = section(body, "home-team-vision")
    assert "home-team-robotics" not in body
    quota = text(re.search(r'data-testid="quota-usage">(.*?)</table>', team, re.S).group(1))  # type: ignore[union-attr]
    running = Job.objects.get(name="resnet-sweep")
    assert f"{running.accelerators} / 8" in quota
    assert H100 in quota
    budget = text(re.search(r'data-testid="budget-standing">(.*?)</table>', team, re.S).group(1))  # type: ignore[union-attr]
    segformer = Attempt.objects.get(job__name="segformer")
    used = (segformer.cost_per_hour * 10).quantize(Decimal("0.01"))
    assert f"{used:f}".rstrip("0").rstrip(".") in budget
    assert "/ 500" in budget
    assert f'href="/teams/{at_work.world.teams["vision"].pk}/quotas/"' in team
    assert "coming soon" not in body
    # lena also researches: her own work section, with nothing of alice's.
    assert "resnet-sweep" not in text(section(body, "home-work"))


def test_finance_sees_the_month_so_far_its_forecast_and_the_costliest_teams(at_work: Fleet) -> None:
    body = home(at_work, "fiona")
    assert "home-work" not in body
    assert "home-fleet" not in body
    finance = section(body, "home-finance")
    month = attribution.attribute(at_work.org, OCT)
    assert number(figure(finance, "cost-to-date")) == attribution.money(month.fleet_total)
    elapsed = (NOW - datetime(2026, 10, 1, tzinfo=UTC)) / timedelta(days=31)
    expected = round(month.capacity_cost / elapsed) + month.overhead
    assert number(figure(finance, "forecast")) == attribution.money(expected)
    teams = re.findall(r"<tr><td><a [^>]*>([^<]+)</a></td>", finance)
    assert teams[:2] == ["Vision", "Robotics"]
    assert 'data-testid="download-csv"' in finance
    assert "/api/v1/billing/fleet.csv?month=2026-10" in finance


def test_an_admin_sees_fleet_health_slos_firing_alerts_and_budget_alerts(at_work: Fleet) -> None:
    lab = at_work
    node = Node.objects.filter(cluster=lab.clusters["west"]).order_by("name").first()
    assert node is not None
    cluster_actions.cordon_node(lab.user("adam"), node, "fan noise")
    Node.objects.filter(pk=node.pk).update(healthy=False)
    # A node drained to the end stays out of service until it is resumed: listed too.
    drained = Node.objects.filter(cluster=lab.clusters["west"]).order_by("name")[1]
    Drain.objects.create(
        node=drained, reason="XID 79", kind=Drain.Kind.DRAIN, state=Drain.State.DRAINED, finished_at=NOW, automatic=True
    )
    Cluster.objects.filter(pk=lab.clusters["east"].pk).update(last_sync_at=NOW - timedelta(hours=1))
    Cluster.objects.filter(pk=lab.clusters["west"].pk).update(last_sync_at=NOW - timedelta(seconds=30))
    raised = budgets.raise_alerts(NOW)  # Robotics used 10 of its 20 accelerator-hours: 50%
    assert raised
    body = home(lab, "adam")
    assert "home-work" not in body
    assert "home-finance" not in body
    admin = section(body, "home-fleet")
    for page in ("cluster-list", "slo", "audit-log", "org-quotas", "price-book", "identity"):  # an admin's jobs
        assert f'href="{reverse(page)}"' in admin, page
    assert figure(admin, "clusters-synced") == f"{Cluster.objects.filter(status='healthy').count()} / 2"
    assert figure(admin, "unhealthy") == "1"
    assert "fan noise" in text(admin)
    assert node.name in admin
    assert "XID 79" in text(admin)
    assert drained.name in admin
    firing = text(re.search(r'data-testid="firing">(.*?)</ul>', admin, re.S).group(1))  # type: ignore[union-attr]
    assert "ClusterSyncStale" in firing
    assert "Cluster east" in firing
    assert "Cluster west" not in firing
    assert all(standing.slo.title in text(admin) for standing in slo.standings(lab.org, NOW))
    alerts = text(re.search(r'data-testid="budget-alerts">(.*?)</ul>', admin, re.S).group(1))  # type: ignore[union-attr]
    assert raised[0].message in alerts
    assert 'data-testid="heartbeat"' in admin


def test_nobody_sees_another_organization_on_their_home(at_work: Fleet) -> None:
    rival_lead = home(at_work, "trent")
    assert "Vision" not in text(rival_lead)
    assert "resnet-sweep" not in rival_lead
    section(rival_lead, "home-team-intruders")
    rival_admin = home(at_work, "mallory")
    shown = section(rival_admin, "home-fleet")
    assert "Rival Labs" in rival_admin
    assert "east" not in text(shown)
    assert "Demo" not in text(shown)
    assert figure(shown, "clusters-synced") == "0 / 0"


def test_the_home_page_reads_a_fixed_number_of_queries(
    fleet: Fleet,  # noqa: F811
    django_assert_max_num_queries: Any,
) -> None:
    """As many queries for a lead with three jobs as with thirty (the attribution's cache emptied each time)."""
    client = Client()
    client.force_login(fleet.user("lena"))
    for i in range(3):
        fleet.submit("lena", name=f"few-{i}")
    cache.clear()
    with django_assert_max_num_queries(60) as few:
        assert client.get("/").status_code == 200
    for i in range(27):
        fleet.submit("lena", name=f"many-{i}", accelerators=i % 3)
    fleet.cycle()
    cache.clear()
    with django_assert_max_num_queries(len(few.captured_queries)):
        assert client.get("/").status_code == 200
