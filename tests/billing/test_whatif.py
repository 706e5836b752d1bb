"""Capacity what-ifs: the replay of a job history on today's fleet and a changed one (``billing/whatif_replay.py``),
asking for one (``whatif.submit_what_if``: who may, each bad field named), and running one in the Celery task
(claimed once, progress to 1.0, failures stored, a crashed worker's claim taken over)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.utils import timezone

from billing import tasks, whatif_replay
from billing.actions import prices, whatif
from billing.models import Price, WhatIf
from clusters.capacity import CapacityType, capacity_type
from clusters.models import Cluster, Node
from governance.actions import quotas
from governance.models import FairShare, Queue
from scheduler.engine.model import Cluster as EngineCluster
from scheduler.engine.model import Node as EngineNode
from scheduler.engine.model import Queue as EngineQueue
from scheduler.models import Job
from scheduler.simulation import jobs as policies
from scheduler.simulation.events import SimJob, Simulation, fits_empty
from tenancy.models import AuditLog
from tests.billing import whatif_history as h
from tests.conftest import World, broker_down

pytestmark = pytest.mark.django_db


def _ask(world: World, cluster: Cluster, nodes: int, *, days: int = 3, user: str = "fiona") -> WhatIf:
    return whatif.submit_what_if(
        world.users[user], world.org, cluster=cluster.slug, flavor=h.H100, nodes=nodes, days=days
    )


# ---------------------------------------------------------------------------------------------- the replay


def test_more_nodes_on_a_crowded_history_wait_less(world: World) -> None:
    cluster, _ = h.cluster(world.org, nodes=2)
    h.crowded(world.teams["vision"], world.users["alice"], cluster)
    result = whatif_replay.what_if_result(world.org, "gpu", h.H100, 2, days=3)
    today, changed = result["today"], result["changed"]
    assert result["workload"]["jobs"] == 48
    assert today["jobs"] == changed["jobs"] == 48
    assert today["mean_wait_s"] > 3600  # two nodes serve half of the demand: a queue builds
    assert changed["mean_wait_s"] < today["mean_wait_s"]
    assert changed["p95_wait_s"] <= today["p95_wait_s"]
    assert changed["max_wait_s"] <= today["max_wait_s"]
    assert (today["accelerators"], changed["accelerators"]) == (16, 32)
    assert (today["flavor_accelerators"], changed["flavor_accelerators"]) == (16, 32)
    # Changed: no job waits, so all the work is inside the window but the last job's final half hour; today's
    # queue pushes more of it past the window's end.
    busy = 48 * 2 * 8 * 3600
    assert changed["utilisation"] == pytest.approx((busy - 1800 * 8) / (32 * 3 * 86400), abs=1e-4)
    assert 0 < today["utilisation"] < (busy - 1800 * 8) / (16 * 3 * 86400)
    assert result["change"] == {"cluster": "gpu", "flavor": h.H100, "nodes": 2, "template": "gpu/n00", "added": 2}
    assert len(result["days"]) == len(today["by_day"]["mean_wait_s"]) == len(today["by_day"]["utilisation"]) == 3
    assert today["never_fits"] == changed["never_fits"] == 0
    assert today["stuck"] == changed["stuck"] == 0


def test_quotas_are_replayed_so_nodes_beyond_a_queues_quota_do_not_shorten_its_wait(world: World) -> None:
    cluster, _ = h.cluster(world.org, nodes=2)
    h.crowded(world.teams["vision"], world.users["alice"], cluster)
    vision = Queue.objects.get(team=world.teams["vision"], project=None)
    quotas.set_quota(world.users["adam"], vision, flavor=h.H100, nominal=8, borrowing_limit=0, reason="one node")
    result = whatif_replay.what_if_result(world.org, "gpu", h.H100, 2, days=3)
    today, changed = result["today"], result["changed"]
    # Vision may hold one node's 8 accelerators, however many the fleet has: the queue is as long on four nodes.
    assert today["mean_wait_s"] > 3600
    assert changed["mean_wait_s"] == today["mean_wait_s"]
    assert changed["utilisation"] < today["utilisation"]
    # Quotas grown with the fleet (twice the accelerators: twice vision's quota) take the queue down.
    grown = whatif_replay.what_if_result(world.org, "gpu", h.H100, 2, days=3, grow_quotas=True)
    assert grown["change"]["quotas_times"] == 2.0
    assert grown["changed"]["mean_wait_s"] < today["mean_wait_s"]
    assert grown["today"] == today


def _price(world: World, cluster: Cluster, flavor: Any, rate: str, capacity: str | None = None) -> None:
    """A rate in the price book for ``flavor`` in ``cluster``: of the cluster's own capacity type, or ``capacity``."""
    asked = {
        "cluster": cluster.pk,
        "flavor": flavor.pk,
        "capacity_type": capacity or capacity_type({}, cluster.kind, cluster.options or {}),
        "hourly_rate": rate,
        "effective_from": "2000-01-01",
    }
    Price.objects.create(organization=world.org, updated_at=timezone.now(), **prices.clean_price(world.org, asked))


def test_a_what_if_prices_both_fleets_and_each_hour_of_waiting_saved(world: World) -> None:
    cluster, flavor = h.cluster(world.org, nodes=2)
    _price(world, cluster, flavor, "2.5000")
    h.crowded(world.teams["vision"], world.users["alice"], cluster)
    result = whatif_replay.what_if_result(world.org, "gpu", h.H100, 2, days=3)
    today, changed, priced = result["today"], result["changed"], result["priced"]
    # 16 (then 32) accelerators at 2.50 an hour for three days.
    assert today["cost"] == "2880.00"
    assert changed["cost"] == "5760.00"
    assert priced["currency"] == "USD"
    assert priced["extra_cost"] == "2880.00"
    saved = today["wait_hours"] - changed["wait_hours"]
    assert priced["wait_hours_saved"] == pytest.approx(saved, abs=0.01)
    assert saved > 0
    assert Decimal(priced["cost_per_wait_hour_saved"]) == (Decimal("2880") / Decimal(str(round(saved, 2)))).quantize(
        Decimal("0.01")
    )


def test_bought_nodes_arrive_after_the_lead_time_and_cost_from_then(world: World) -> None:
    cluster, flavor = h.cluster(world.org, nodes=2)
    _price(world, cluster, flavor, "2.5000")
    h.crowded(world.teams["vision"], world.users["alice"], cluster)
    now = timezone.now()
    at_once = whatif_replay.what_if_result(world.org, "gpu", h.H100, 2, days=3, now=now)
    later = whatif_replay.what_if_result(world.org, "gpu", h.H100, 2, days=3, now=now, lead_days=2)
    assert later["changed"]["cost"] == "3840.00"  # the two new nodes for the last of the three days
    assert later["change"]["arrives_s"] == 2 * 86400
    assert at_once["changed"]["mean_wait_s"] < later["changed"]["mean_wait_s"] <= later["today"]["mean_wait_s"]
    never = whatif_replay.what_if_result(world.org, "gpu", h.H100, 2, days=3, now=now, lead_days=3)
    assert never["change"]["arrives_s"] == 3 * 86400
    assert never["changed"]["cost"] == never["today"]["cost"]  # they arrive after the window: nothing changes
    assert never["changed"]["mean_wait_s"] == never["today"]["mean_wait_s"]
    assert never["priced"]["cost_per_wait_hour_saved"] is None


def test_reserved_nodes_cost_the_reserved_rate(world: World) -> None:
    cluster, flavor = h.cluster(world.org, nodes=2)
    _price(world, cluster, flavor, "2.5000")
    with pytest.raises(ValidationError, match="no reserved rate"):
        whatif.submit_what_if(world.users["paula"], world.org, cluster="gpu", flavor=h.H100, nodes=2, kind="reserve")
    _price(world, cluster, flavor, "1.2500", capacity=CapacityType.RESERVED)
    h.crowded(world.teams["vision"], world.users["alice"], cluster, jobs=6)
    asked = whatif.submit_what_if(
        world.users["paula"], world.org, cluster="gpu", flavor=h.H100, nodes=2, kind="reserve"
    )
    assert whatif.run(asked.pk) == "done"
    asked.refresh_from_db()
    # Today's 16 at 2.50 and 16 reserved at 1.25, for 30 days.
    assert asked.result["today"]["cost"] == "28800.00"
    assert asked.result["changed"]["cost"] == "43200.00"


def test_removing_nodes_below_what_a_job_needs_shows_it_never_fits(world: World) -> None:
    cluster, _ = h.cluster(world.org, nodes=3)
    team, alice = world.teams["vision"], world.users["alice"]
    start = timezone.now() - timedelta(hours=6)
    gang = h.job(team, alice, start, workers=3, where=cluster)  # 24 accelerators: all three nodes
    small = h.job(team, alice, start + timedelta(minutes=5), where=cluster)
    result = whatif_replay.what_if_result(world.org, "gpu", h.H100, -1, days=1)
    assert result["today"]["never_fits"] == 0
    assert result["changed"]["never_fits"] == 1
    assert result["changed"]["never_fits_jobs"] == [gang.pk]
    assert result["changed"]["jobs"] == 1  # the small one still runs
    assert result["change"]["removed"] == ["gpu/n02"]  # the last by name goes first
    assert small.pk not in result["changed"]["never_fits_jobs"]


def test_jobs_keep_to_the_accelerator_types_they_asked_for(world: World) -> None:
    h.cluster(world.org, "h100", nodes=1)
    a100, _ = h.cluster(world.org, "a100", nodes=1, flavor="A100")
    team, alice = world.teams["vision"], world.users["alice"]
    start = timezone.now() - timedelta(hours=10)
    for i in range(4):
        h.job(team, alice, start + timedelta(minutes=i), where=a100, accelerator_types=["A100"])
    nowhere = h.job(team, alice, start, where=a100, accelerator_types=["TPU-v9"])
    result = whatif_replay.what_if_result(world.org, "h100", h.H100, 1, days=1)
    for side in ("today", "changed"):
        figures = result[side]
        assert figures["jobs"] == 4
        assert figures["flavor_utilisation"] == 0.0  # nothing ran on H100, though it sat idle
        assert figures["utilisation"] > 0
        assert figures["never_fits_jobs"] == [nowhere.pk]
    # One A100 node: the four jobs of 8 run one after another, whatever is added to H100.
    assert result["today"]["mean_wait_s"] == result["changed"]["mean_wait_s"] > 0


def test_the_workload_counts_what_ran_and_leaves_out_what_never_did(world: World) -> None:
    cluster, _ = h.cluster(world.org, nodes=4)
    team, alice = world.teams["vision"], world.users["alice"]
    now = timezone.now()
    h.job(team, alice, now - timedelta(hours=5), where=cluster, ran=3600)
    h.job(team, alice, now - timedelta(hours=5), ran=None, state=Job.State.CANCELLED)
    h.job(team, alice, now - timedelta(hours=5), ran=None, state=Job.State.PENDING, time_limit=1800)
    h.job(team, alice, now - timedelta(days=3), where=cluster)  # before the window
    running = h.job(team, alice, now - timedelta(hours=2), where=cluster, state=Job.State.RUNNING)
    running.attempts.update(ended_at=None, outcome="active")
    rules = whatif_replay.governance(world.org, whatif_replay.today_fleet(world.org).every_flavor)
    workload = whatif_replay.history(world.org, now - timedelta(days=1), now, rules.queues)
    assert workload.left_out == 1
    assert workload.at_limit == 1
    durations = sorted(round(j.duration) for j in workload.jobs)
    assert durations == [1800, 3600, 7200]  # the pending one at its limit, the running one until now
    assert {j.queue for j in workload.jobs} == {"vision"}
    assert {j.tier for j in workload.jobs} == {"normal"}
    assert all(0 < j.submitted < 86400 for j in workload.jobs)
    assert rules.tiers
    assert rules.half_life == FairShare.DEFAULT_HALF_LIFE  # the organization's memory, as the loop keeps it


def test_the_replay_sees_each_job_as_the_placement_loop_does(world: World) -> None:
    cluster, _ = h.cluster(world.org, nodes=1)
    team, alice = world.teams["vision"], world.users["alice"]
    now = timezone.now()
    job = h.job(team, alice, now - timedelta(hours=3), where=cluster)
    Job.objects.filter(pk=job.pk).update(max_price_per_hour=12.5, spread_group="svc", preemptible=True)
    job.tier.preemptible = False
    job.tier.save()
    rules = whatif_replay.governance(world.org, whatif_replay.today_fleet(world.org).every_flavor)
    [replayed] = whatif_replay.history(world.org, now - timedelta(days=1), now, rules.queues).jobs
    request = replayed.request
    assert request is not None
    assert request.id == str(job.pk)
    # What the simulator's own fields cannot say travels in the engine's view of the job.
    assert (request.max_price_per_hour, request.spread_group, request.team) == (12.5, "svc", "vision")
    assert request.preemptible is False  # its tier is not preemptible, as the placement loop reads it
    assert (replayed.workers, replayed.accelerators, replayed.time_limit) == (1, 8, 4 * 3600)


def test_todays_fleet_is_the_nodes_that_take_work(world: World) -> None:
    cluster, _ = h.cluster(world.org, nodes=4)
    Node.objects.filter(cluster=cluster, name="n01").update(state=Node.State.DRAINED)
    Node.objects.filter(cluster=cluster, name="n02").update(healthy=False)
    Node.objects.filter(cluster=cluster, name="n03").update(present=False)
    fleet = whatif_replay.today_fleet(world.org)
    assert [n.name for n in fleet.nodes] == ["gpu/n00"]
    changed, change = whatif_replay.changed_fleet(fleet, "gpu", h.H100, 2)
    assert change == {"template": "gpu/n00", "added": 2}
    added = [n for n in changed.nodes if n.name not in {"gpu/n00"}]
    assert [n.name for n in added] == ["gpu/what-if-1", "gpu/what-if-2"]
    assert all(n.topology == ("r0",) and n.accel_count == 8 and n.flavor == h.H100 for n in added)
    with pytest.raises(ValidationError) as refused:
        whatif_replay.changed_fleet(fleet, "gpu", h.H100, -2)
    assert set(refused.value.message_dict) == {"nodes"}
    with pytest.raises(ValidationError) as refused:
        whatif_replay.changed_fleet(fleet, "gpu", "A100", 1)
    assert set(refused.value.message_dict) == {"flavor"}


# ----------------------------------------------------------------------------- the simulator's new fields


def _sim_fleet() -> tuple[tuple[EngineCluster, ...], tuple[EngineNode, ...]]:
    clusters = (EngineCluster("a", "r"), EngineCluster("b", "r"))
    nodes = (
        EngineNode("a/1", "a", "big", (1000,) * 8, 64_000, 1 << 19, 64_000, 1 << 19),
        EngineNode("b/1", "b", "small", (1000,) * 2, 64_000, 1 << 19, 64_000, 1 << 19),
    )
    return clusters, nodes


def test_fits_empty_judges_only_the_nodes_a_job_accepts() -> None:
    _, nodes = _sim_fleet()
    assert fits_empty(nodes, SimJob("x", 0, 10, accelerators=4))
    assert not fits_empty(nodes, SimJob("x", 0, 10, accelerators=4, flavors=("small",)))
    assert not fits_empty(nodes, SimJob("x", 0, 10, accelerators=4, clusters=("b",)))
    assert fits_empty(nodes, SimJob("x", 0, 10, accelerators=2, flavors=("small",), clusters=("b",)))


@pytest.mark.parametrize("policy", ["quartermaster", "fifo"])
def test_policies_place_a_job_only_on_the_flavor_and_cluster_it_accepts(policy: str) -> None:
    clusters, nodes = _sim_fleet()
    work = [SimJob(f"j{i}", i, 100, accelerators=2, flavors=("small",), clusters=("b",)) for i in range(3)]
    chosen = (
        policies.Quartermaster(clusters, queues=(EngineQueue("default", None, flavors=("big", "small")),))
        if policy == "quartermaster"
        else policies.fifo()
    )
    simulation = Simulation(clusters, nodes, work, chosen, cycle_seconds=0, keep_runs=True)
    outcome = simulation.run()
    assert not outcome.stuck
    assert not outcome.never_fits
    assert simulation.runs is not None
    assert {(r[3], r[4]) for r in simulation.runs} == {("b", "small")}
    # One 2-accelerator node for three jobs: they run one after another.
    assert sorted(r.first_start or 0 for r in outcome.records.values()) == [0, 100, 200]


# ------------------------------------------------------------------------------------------ asking for one


@pytest.mark.parametrize("user", ["alice", "lena", "mallory", "trent"])
def test_only_finance_and_admins_of_the_organization_ask(world: World, user: str) -> None:
    cluster, _ = h.cluster(world.org)
    with pytest.raises(PermissionDenied):
        whatif.submit_what_if(world.users[user], world.org, cluster=cluster.slug, flavor=h.H100, nodes=1)
    assert not WhatIf.objects.exists()


@pytest.mark.parametrize(
    ("values", "fields"),
    [
        ({"cluster": None, "flavor": None, "nodes": None, "days": None}, {"cluster", "flavor", "nodes"}),
        (
            {"cluster": "nowhere", "flavor": "TPU-v9", "nodes": "many", "days": "long"},
            {"cluster", "flavor", "nodes", "days"},
        ),
        ({"kind": "lease", "lead_days": -1}, {"kind", "lead_days"}),
        ({"kind": "reserve"}, {"kind"}),  # the price book has no reserved rate for the type in the cluster
        ({"nodes": -1, "lead_days": 30}, {"lead_days"}),
        ({"nodes": 0}, {"nodes"}),
        ({"nodes": -3}, {"nodes"}),  # the cluster has two
        ({"nodes": True}, {"nodes"}),
        ({"nodes": 10_001}, {"nodes"}),
        ({"days": 0}, {"days"}),
        ({"days": 91}, {"days"}),
        ({"flavor": "A100"}, {"flavor"}),  # a type of the organization, but the cluster has none to copy
        ({"cluster": "rival-gpu"}, {"cluster"}),  # another organization's
        ({"cluster": "off"}, {"cluster"}),  # disabled
    ],
)
def test_bad_values_are_named_and_nothing_is_written(world: World, values: dict[str, Any], fields: set[str]) -> None:
    h.cluster(world.org, nodes=2)
    h.cluster(world.org, "a100", nodes=1, flavor="A100")
    h.cluster(world.other_org, "rival-gpu")
    off, _ = h.cluster(world.org, "off")
    Cluster.objects.filter(pk=off.pk).update(status=Cluster.Status.DISABLED)
    asked = {"cluster": "gpu", "flavor": h.H100, "nodes": 1, "days": 30, **values}
    with pytest.raises(ValidationError) as refused:
        whatif.submit_what_if(world.users["fiona"], world.org, **asked)
    assert set(refused.value.message_dict) == fields
    assert not WhatIf.objects.exists()
    assert not AuditLog.objects.filter(action="what_if.requested").exists()


def test_asking_stores_audits_and_runs_it_after_the_commit(
    world: World, django_capture_on_commit_callbacks: Any
) -> None:
    cluster, _ = h.cluster(world.org, nodes=2)
    h.crowded(world.teams["vision"], world.users["alice"], cluster, jobs=12)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        what_if = _ask(world, cluster, 2, days=2)
        assert WhatIf.objects.get(pk=what_if.pk).status == WhatIf.Status.QUEUED
    assert len(callbacks) == 1  # Celery runs eagerly in the tests: the task ran at the commit
    what_if.refresh_from_db()
    assert what_if.status == WhatIf.Status.DONE
    assert what_if.progress == 1.0
    assert what_if.claimed_until is None
    assert what_if.finished_at is not None
    assert what_if.error == ""
    assert what_if.result["today"]["jobs"] == 12
    assert what_if.result["changed"]["jobs"] == 12
    entry = AuditLog.objects.get(action="what_if.requested")
    assert entry.actor == world.users["fiona"]
    assert entry.organization == world.org
    assert entry.changes == {"cluster": "gpu", "flavor": h.H100, "nodes": 2, "days": 2, "kind": "nodes", "lead_days": 0}


# ------------------------------------------------------------------------------------------- running one


def test_the_task_runs_it_once_and_progress_reaches_one(world: World) -> None:
    cluster, _ = h.cluster(world.org, nodes=2)
    h.crowded(world.teams["vision"], world.users["alice"], cluster, jobs=12)
    what_if = _ask(world, cluster, 1, days=2)
    assert tasks.run_what_if(what_if.pk) == "done"
    what_if.refresh_from_db()
    assert (what_if.status, what_if.progress) == (WhatIf.Status.DONE, 1.0)
    assert tasks.run_what_if(what_if.pk) == "skipped"  # done: a second delivery of the task does nothing


def test_progress_covers_both_replays_in_order(world: World) -> None:
    cluster, _ = h.cluster(world.org, nodes=2)
    h.crowded(world.teams["vision"], world.users["alice"], cluster, jobs=12)
    seen: list[float] = []
    whatif_replay.what_if_result(world.org, "gpu", h.H100, 1, days=2, progress=seen.append)
    assert seen == sorted(seen)
    assert seen[0] > 0
    assert 0.5 in seen
    assert seen[-1] == 1.0
    assert any(0 < f < 0.5 for f in seen)
    assert any(0.5 < f < 1 for f in seen)


def test_progress_is_written_at_most_twice_a_second(world: World) -> None:
    cluster, _ = h.cluster(world.org, nodes=2)
    what_if = _ask(world, cluster, 1)
    token = whatif.claim(what_if.pk)
    progress = whatif.Progress(WhatIf.objects.filter(pk=what_if.pk, started_at=token))
    progress(0.1)
    progress(0.2)  # too soon after the last write: skipped
    assert WhatIf.objects.get(pk=what_if.pk).progress == 0.1
    progress(0.3, force=True)
    assert WhatIf.objects.get(pk=what_if.pk).progress == 0.3


def test_a_live_claim_is_left_alone_and_a_crashed_one_is_taken_over(world: World) -> None:
    cluster, _ = h.cluster(world.org, nodes=2)
    h.crowded(world.teams["vision"], world.users["alice"], cluster, jobs=6)
    what_if = _ask(world, cluster, 1, days=1)
    now = timezone.now()
    WhatIf.objects.filter(pk=what_if.pk).update(
        status=WhatIf.Status.RUNNING, started_at=now, claimed_until=now + timedelta(minutes=5), progress=0.3
    )
    assert whatif.run(what_if.pk) == "skipped"  # another worker holds it
    assert WhatIf.objects.get(pk=what_if.pk).progress == 0.3
    WhatIf.objects.filter(pk=what_if.pk).update(claimed_until=now - timedelta(seconds=1))  # that worker died
    assert whatif.requeue_stale() == [what_if.pk]  # the beat hands it on (eager: it runs here)
    what_if.refresh_from_db()
    assert (what_if.status, what_if.progress) == (WhatIf.Status.DONE, 1.0)
    assert what_if.started_at is not None
    assert what_if.started_at > now


def test_a_run_that_lost_its_claim_writes_nothing(world: World) -> None:
    cluster, _ = h.cluster(world.org, nodes=2)
    what_if = _ask(world, cluster, 1, days=1)
    token = whatif.claim(what_if.pk)
    assert token is not None
    assert whatif.claim(what_if.pk) is None
    held = WhatIf.objects.filter(pk=what_if.pk, status=WhatIf.Status.RUNNING, started_at=token)
    progress = whatif.Progress(held)
    progress(0.2)
    assert WhatIf.objects.get(pk=what_if.pk).progress == 0.2
    later = timezone.now() + timedelta(seconds=whatif.CLAIM_SECONDS + 1)
    assert whatif.claim(what_if.pk, now=later) is not None  # its claim ran out; another worker took it
    with pytest.raises(whatif.ClaimLost):
        progress(0.4, force=True)


def test_a_change_the_fleet_no_longer_allows_fails_with_the_reason(world: World) -> None:
    cluster, _ = h.cluster(world.org, nodes=2)
    what_if = _ask(world, cluster, -2)
    Node.objects.filter(cluster=cluster, name="n00").update(state=Node.State.CORDONED)
    assert tasks.run_what_if(what_if.pk) == "failed"
    what_if.refresh_from_db()
    assert what_if.status == WhatIf.Status.FAILED
    assert what_if.claimed_until is None
    assert what_if.error.startswith("nodes: Cluster gpu has 1")
    assert what_if.result == {}


def test_what_ifs_abandoned_for_a_day_are_given_up(world: World) -> None:
    cluster, _ = h.cluster(world.org, nodes=2)
    what_if = _ask(world, cluster, 1)
    WhatIf.objects.filter(pk=what_if.pk).update(created_at=timezone.now() - timedelta(days=2))
    assert whatif.requeue_stale() == []
    what_if.refresh_from_db()
    assert what_if.status == WhatIf.Status.FAILED
    assert "Given up" in what_if.error


def test_a_lost_task_is_sent_again_but_not_at_every_beat(world: World) -> None:
    cluster, _ = h.cluster(world.org, nodes=2)
    what_if = _ask(world, cluster, 1)
    assert whatif.requeue_stale() == []  # just asked for: its task is on its way
    WhatIf.objects.filter(pk=what_if.pk).update(created_at=timezone.now() - timedelta(minutes=5))
    with broker_down():  # a lost task
        assert whatif.requeue_stale() == [what_if.pk]
        assert whatif.requeue_stale() == []  # sent a moment ago: a long queue for a worker piles up no copies
        later = timezone.now() + whatif.RESEND_AFTER + timedelta(seconds=1)
        assert whatif.requeue_stale(now=later) == [what_if.pk]
    assert WhatIf.objects.get(pk=what_if.pk).status == WhatIf.Status.QUEUED
    assert tasks.run_what_if(what_if.pk) == "done"  # a queued row is taken whatever its resend time
