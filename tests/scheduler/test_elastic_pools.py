"""An elastic pool on a simulated cloud, end to end (docs/scheduling.md §Elastic pools): a burst that the fleet
cannot hold asks the pool for nodes in the cycle's own transaction; the simulated cloud adds them after its lead
time; the jobs start there; once idle past the pool's release delay the nodes go back, down to its minimum; a
stock-out is a refusal with its reason; the monthly budget bounds what is asked; every step is in the audit log."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import Client
from django.utils import timezone

from clusters.actions import sync
from clusters.backends.simulated import backend as simulated
from clusters.models import Cluster, ElasticGrant, ElasticPool, Node
from scheduler import actions as job_actions
from scheduler.models import Attempt, Job, LoopState
from scheduler.placement import elastic
from tenancy.models import AuditLog
from tests.scheduler.conftest import Fleet
from tests.scheduler.pools import burst_pool, four_an_hour

pytestmark = pytest.mark.django_db


def pool(fleet: Fleet, **fields: object) -> ElasticPool:
    return burst_pool(fleet.clusters["east"], **fields)


def burst(fleet: Fleet, extra: int) -> list[Job]:
    """The fleet's six 8-GPU nodes full, and ``extra`` more such jobs waiting."""
    jobs = [fleet.submit(accelerators=8, name=f"fill-{i}") for i in range(6)]
    fleet.cycle()
    return jobs + [fleet.submit(accelerators=8, name=f"burst-{i}") for i in range(extra)]


def test_a_burst_grows_the_pool_runs_there_and_the_idle_nodes_go_back(fleet: Fleet) -> None:
    pool(fleet)
    jobs = burst(fleet, 2)
    fleet.cycle()
    (grant,) = ElasticGrant.objects.all()
    assert (grant.state, grant.count, sorted(grant.jobs)) == ("asked", 2, sorted(j.pk for j in jobs[6:]))
    waiting = Job.objects.get(pk=jobs[6].pk)
    assert "Capacity is being added for it: 2 more H100-SXM-80GB nodes of east/burst on east" in waiting.pending_message
    assert elastic.provision(grant.pk) == "coming"
    assert elastic.provision(grant.pk) == "coming"  # run twice: asked once
    grant.refresh_from_db()
    assert grant.nodes == ["h100-burst-0000", "h100-burst-0001"]
    fleet.cycle()  # the nodes are on their way: the jobs wait for them, nothing more is asked
    assert ElasticGrant.objects.count() == 1

    assert sync.sync_cluster(fleet.clusters["east"].pk).ok  # the cloud's nodes join the fleet
    assert elastic.settle()["up"] == 1
    fleet.cycle()
    placed = set(
        Attempt.objects.filter(job__in=jobs[6:], outcome="active").values_list("assignments__node__name", flat=True)
    )
    assert placed == {"h100-burst-0000", "h100-burst-0001"}
    assert ElasticGrant.objects.count() == 1  # nothing more asked

    # The work ends; the nodes stay their release delay, then go back (no minimum kept).
    fleet.run_for(7200)
    fleet.follow()
    assert not Attempt.objects.filter(job__in=jobs[6:], outcome="active").exists()
    assert elastic.settle(timezone.now() + timedelta(seconds=60))["released"] == 0  # not idle long enough
    assert elastic.settle(timezone.now() + timedelta(seconds=700))["released"] == 2
    grant.refresh_from_db()
    assert grant.state == "released"
    assert sync.sync_cluster(fleet.clusters["east"].pk).ok
    assert not Node.objects.filter(cluster=fleet.clusters["east"], name__startswith="h100-burst", present=True).exists()
    actions = list(
        AuditLog.objects.filter(action__startswith="elastic.").order_by("pk").values_list("action", flat=True)
    )
    assert actions == ["elastic.asked", "elastic.granted", "elastic.released"]
    # The cluster's page says what was asked, for which jobs (to its admins), at what cost, and when it went back.
    admin = Client()
    admin.force_login(fleet.user("adam"))
    page = admin.get(f"/clusters/{fleet.clusters['east'].pk}/").content.decode()
    assert 'data-testid="elastic-grants"' in page
    assert f'href="/jobs/{jobs[6].pk}/"' in page
    assert 'data-state="released"' in page
    researcher = Client()
    researcher.force_login(fleet.user("bob"))
    assert (
        f'href="/jobs/{jobs[6].pk}/"' not in researcher.get(f"/clusters/{fleet.clusters['east'].pk}/").content.decode()
    )


def test_a_stock_out_is_a_refusal_with_its_reason_and_the_pool_keeps_its_minimum(fleet: Fleet) -> None:
    east = fleet.clusters["east"]
    pool(fleet, min_nodes=1)
    simulated.inject(east.endpoint, "stockout", state_file=east.options["state_file"], left=1)
    burst(fleet, 2)
    fleet.cycle()
    (grant,) = ElasticGrant.objects.all()
    assert elastic.provision(grant.pk) == "coming"
    grant.refresh_from_db()
    assert grant.count == 1  # the cloud had one left
    sync.sync_cluster(east.pk)
    elastic.settle()
    fleet.cycle()  # one more job waits: asked again, refused
    refused = ElasticGrant.objects.exclude(pk=grant.pk).get()
    assert elastic.provision(refused.pk) == "refused"
    refused.refresh_from_db()
    assert "stock-out" in refused.message
    # everything ends; the pool keeps its one node however long it idles
    fleet.run_for(7200)
    fleet.follow()
    assert elastic.settle(timezone.now() + timedelta(days=1))["released"] == 0


def test_an_ask_whose_nodes_left_by_themselves_stops_costing(fleet: Fleet) -> None:
    east = fleet.clusters["east"]
    pool(fleet)
    burst(fleet, 1)
    fleet.cycle()
    (grant,) = ElasticGrant.objects.all()
    elastic.provision(grant.pk)
    assert sync.sync_cluster(east.pk).ok
    assert elastic.settle()["up"] == 1
    grant.refresh_from_db()
    # the cloud takes the node back (a spot reclaim, a cluster's own power saving): it leaves the inventory
    simulated.SimulatedBackend(east.endpoint, {}, east.options).release(grant.nodes)
    assert sync.sync_cluster(east.pk).ok
    seen = Node.objects.get(cluster=east, name=grant.nodes[0]).last_seen_at
    assert elastic.settle(timezone.now() + timedelta(hours=5))["released"] == 0  # nothing of ours to give back
    grant.refresh_from_db()
    assert (grant.state, grant.released_at) == ("released", seen)  # it cost until it was last seen, not 5 h more
    record = AuditLog.objects.filter(action="elastic.released").get()
    assert "left the fleet by themselves" in record.reason


def test_a_pool_node_no_ask_holds_goes_back_once_nothing_runs_there_and_no_ask_is_on_its_way(fleet: Fleet) -> None:
    """A stray: a node of the pool that the cloud gave outside any ask (an answer that came after its ask was
    refused, a node the cluster powered up by itself). It costs money and no budget counts it, so it goes back as
    soon as it is idle, but never under work, and not while an ask that it may be for is on its way."""
    east = fleet.clusters["east"]
    pool(fleet)
    cloud = simulated.SimulatedBackend(east.endpoint, {}, east.options)
    (stray,) = cloud.provision("burst", 1, "on_demand", 0).nodes
    assert sync.sync_cluster(east.pk).ok
    jobs = burst(fleet, 1)
    fleet.cycle()  # the free stray holds the seventh job: nothing is asked
    assert not ElasticGrant.objects.exists()
    assert Attempt.objects.get(job=jobs[6], outcome="active").assignments.get().node.name == stray
    assert elastic.settle(timezone.now() + timedelta(days=1))["released"] == 0  # busy

    fleet.run_for(7200)
    fleet.follow()
    assert elastic.settle(timezone.now() + timedelta(seconds=60))["released"] == 0  # our work there ended just now
    coming = ElasticGrant.objects.create(  # an ask of the pool on its way, its node not named: the stray may be it
        pool=ElasticPool.objects.get(name="burst"),
        count=1,
        state=ElasticGrant.State.COMING,
        asked_at=timezone.now(),
        up_at=timezone.now() + timedelta(hours=1),
    )
    assert elastic.settle(timezone.now() + timedelta(seconds=700))["released"] == 0
    coming.refresh_from_db()
    assert coming.nodes == [stray]  # and it was: claimed for the ask (a cloud that names no node)
    coming.delete()
    assert elastic.settle(timezone.now() + timedelta(seconds=700))["released"] == 1
    assert sync.sync_cluster(east.pk).ok
    assert not Node.objects.filter(cluster=east, name=stray, present=True).exists()
    record = AuditLog.objects.filter(action="elastic.released").get()
    assert record.reason == f"idle for 10 min or more; {stray} held by no ask of the pool"


def test_the_monthly_budget_bounds_what_is_asked(fleet: Fleet) -> None:
    burst_pool = pool(fleet, monthly_budget=Decimal("100"))
    four_an_hour(burst_pool)
    # a node costs 8 x 4.00 = 32.00 an hour: 100.00 buys three node-hours, and the pool has already spent 40.00
    ElasticGrant.objects.create(
        pool=burst_pool,
        count=1,
        state=ElasticGrant.State.RELEASED,
        cost_per_hour=Decimal(32),
        asked_at=timezone.now() - timedelta(hours=2),
        up_at=timezone.now() - timedelta(hours=2),
        released_at=timezone.now() - timedelta(hours=2) + timedelta(minutes=75),
    )
    burst(fleet, 3)
    fleet.cycle()
    asked = ElasticGrant.objects.get(state="asked")
    # 60.00 left: a node held for its job's hour and 10 idle minutes costs 37.33; one node more, not three
    assert asked.count == 1
    assert asked.cost_per_hour == Decimal(32)
    assert Cluster.objects.get(pk=fleet.clusters["east"].pk)  # the cluster itself is untouched


def test_a_pool_node_that_took_work_while_being_closed_is_not_released(fleet: Fleet) -> None:
    burst_pool = pool(fleet)
    jobs = burst(fleet, 1)
    fleet.cycle()
    grant = ElasticGrant.objects.get()
    elastic.provision(grant.pk)
    sync.sync_cluster(fleet.clusters["east"].pk)
    elastic.settle()
    fleet.cycle()  # the job runs on the pool's node
    (name,) = Attempt.objects.filter(job=jobs[6], outcome="active").values_list("assignments__node__name", flat=True)
    generation = snapshot_generation(fleet)
    assert elastic._closed_for_release(burst_pool, [name]) == []  # it holds work: opened again
    node = Node.objects.get(cluster=fleet.clusters["east"], name=name)
    assert node.state == Node.State.SCHEDULABLE
    assert snapshot_generation(fleet) == generation + 1  # a cycle built before cannot apply
    assert elastic.settle(timezone.now() + timedelta(days=1))["released"] == 0


def snapshot_generation(fleet: Fleet) -> int:
    return LoopState.objects.get(organization=fleet.org).generation


def test_the_budget_keeps_work_it_cannot_pay_for_off_a_pool_node_and_lets_shorter_work_on(fleet: Fleet) -> None:
    burst_pool = pool(fleet, monthly_budget=Decimal("60"))
    four_an_hour(burst_pool)
    (first,) = burst(fleet, 1)[6:]
    fleet.cycle()
    grant = ElasticGrant.objects.get()
    assert grant.hold == 3600 + 600  # its job's hour, then the pool's release delay
    assert elastic.provision(grant.pk) == "coming"
    assert sync.sync_cluster(fleet.clusters["east"].pk).ok
    assert elastic.settle()["up"] == 1
    first.refresh_from_db()
    job_actions.cancel_job(fleet.user("alice"), first)  # the node it was asked for is up, and idle
    # 32.00 a node-hour: the idle node is paid for 10 minutes more (5.33); the 54.67 left pays for about 1.7 hours
    # more of it, not for three days
    long = fleet.submit(accelerators=8, name="three-days", time_limit=3 * 86400)
    fleet.cycle()
    assert not Attempt.objects.filter(job=long).exists()
    long.refresh_from_db()
    assert long.state == "pending"
    assert ElasticGrant.objects.count() == 1  # nor is a node asked for it: the budget cannot pay for one
    short = fleet.submit(accelerators=8, name="an-hour", time_limit=3600)
    fleet.cycle()
    assert list(
        Attempt.objects.filter(outcome="active", job=short).values_list("assignments__node__name", flat=True)
    ) == ["h100-burst-0000"]
