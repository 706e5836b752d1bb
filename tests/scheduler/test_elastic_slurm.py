"""An elastic pool on real Slurm (docs/backends.md, Slurm, "Elastic pools"), on each lab: the lab's two cloud nodes
(``State=CLOUD``, feature ``qm-pool-burst``, under Slurm's power saving) are the pool. A burst the fixed node
cannot hold asks the pool for two nodes; Slurm powers them up (its ResumeProgram starts their slurmd); they
join the fleet labelled with the pool and priced as it is; the burst runs there as real Slurm jobs; once idle
past the pool's release delay they are powered down again (SuspendProgram), within the pool's budget, every
decision in the audit log and on the cluster's page.

Like the fault matrix, the test keeps to lab-node1 of the fixed nodes (the others cordoned on Quartermaster's
side only); its jobs are batch scripts that wait for a gate file."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.test import Client
from django.utils import timezone

from clusters.actions import sync
from clusters.actions.sync import backend_for
from clusters.backends.base import ELASTIC_POOL, Refused
from clusters.backends.slurm.parse import expand_hostlist
from clusters.elastic import spend
from clusters.models import Cluster, ElasticGrant, Node
from scheduler.models import Attempt, Job
from scheduler.placement import elastic, feasibility, follow
from tenancy.models import AuditLog
from tests.clusters.factories import slurm_cluster
from tests.clusters.slurm_lab import CLOUD_NODES, SlurmLab
from tests.scheduler.conftest import Fleet
from tests.scheduler.pools import H100, burst_pool, four_an_hour

pytestmark = [pytest.mark.django_db, pytest.mark.slurm]

FIXED = "lab-node1"


def wait(what: str, ready: Callable[[], bool], seconds: float = 60, seen: Callable[[], object] = str) -> None:
    """Until ``ready``; else fail with what ``seen`` says of it."""
    deadline = time.monotonic() + seconds
    while not ready():
        assert time.monotonic() < deadline, f"{what}: not after {seconds} s: {seen()}"
        time.sleep(0.5)


def power(lab: SlurmLab) -> dict[str, str]:
    """The cloud nodes' states in sinfo's compact words: ``idle~`` powered down, ``idle#`` powering up, ``idle%``
    powering down, ``idle!`` asked to power down, ``idle`` / ``mix`` / ``alloc`` in service."""
    out = lab.command("sinfo", "--noheader", "-N", f"--nodes={','.join(CLOUD_NODES)}", "--format=%N %t")
    return dict(line.split() for line in out.splitlines() if line.strip())


@pytest.fixture
def at_rest(slurm_lab: SlurmLab) -> Iterator[SlurmLab]:
    """The lab's cloud nodes powered down before the test and after it (whatever it left)."""

    def rest() -> None:
        slurm_lab.settle(*CLOUD_NODES)
        up = [name for name, state in power(slurm_lab).items() if not state.endswith(("~", "%", "!"))]
        if up:
            slurm_lab.backend().release(up)
        wait("the cloud nodes powered down", lambda: all(s.endswith("~") for s in power(slurm_lab).values()))

    rest()
    yield slurm_lab
    rest()


def test_a_burst_powers_up_the_labs_cloud_nodes_and_they_power_down_once_idle(fleet: Fleet, at_rest: SlurmLab) -> None:
    lab = at_rest
    Cluster.objects.filter(slug__in=["east", "west"]).update(status=Cluster.Status.DISABLED)
    lab.settle(FIXED)
    cluster = slurm_cluster(
        fleet.org, "slurm", lab.endpoint, lab.token, **{**lab.options, "gpu_models": {"h100": H100}}
    )
    feasibility.forget(fleet.org)
    Node.objects.filter(cluster=cluster).exclude(name=FIXED).update(state=Node.State.CORDONED)
    # powered down, the cloud nodes are no capacity: not in the fleet
    assert not Node.objects.filter(cluster=cluster, name__in=CLOUD_NODES).exists()
    pool = burst_pool(
        cluster, node_cpu=32_000, node_memory=256_000, max_nodes=2, lead_time=30, monthly_budget=Decimal("500")
    )
    four_an_hour(pool)
    power_log = lab.lab / "log" / "power.log"  # what the lab's ResumeProgram and SuspendProgram were asked
    seen = power_log.stat().st_size if power_log.exists() else 0
    gate = Path(lab.options["workdir"]) / f"qm-elastic-gate-{time.time_ns()}"
    script = f"while [ ! -e {gate} ]; do sleep 0.2; done\necho ran on $SLURMD_NODENAME\n"
    jobs = [
        fleet.submit(
            name=f"burst-{i}",
            accelerators=8,
            cpu=4000,
            memory=8192,
            time_limit=1800,
            image="",
            command=[],
            script=script,
        )
        for i in range(3)
    ]
    try:
        fleet.cycle()  # the first fills lab-node1; the other two wait, and the pool is asked for two nodes
        (grant,) = ElasticGrant.objects.all()
        assert (grant.state, grant.count, sorted(grant.jobs)) == ("asked", 2, sorted(j.pk for j in jobs[1:]))
        assert "Capacity is being added for it" in Job.objects.get(pk=jobs[2].pk).pending_message

        assert elastic.provision(grant.pk) == "coming"  # scontrol update / POST node: State=POWER_UP
        grant.refresh_from_db()
        assert grant.nodes == list(CLOUD_NODES)
        wait("the cloud nodes in service", lambda: set(power(lab).values()) == {"idle"})
        assert sync.sync_cluster(cluster.pk).ok
        joined = Node.objects.filter(cluster=cluster, name__in=CLOUD_NODES, present=True)
        pooled = {n.name: (n.labels[ELASTIC_POOL], n.labels["quartermaster.io/capacity-type"]) for n in joined}
        assert pooled == dict.fromkeys(CLOUD_NODES, ("burst", "on_demand"))
        assert elastic.settle(timezone.now() + timedelta(seconds=31))["up"] == 1
        with pytest.raises(Refused, match=r"every node of pool burst \(2\) is in service, on its way, or down"):
            backend_for(cluster).provision("burst", 1, "on_demand", 30)  # a stock-out, in Slurm's terms
        with pytest.raises(Refused, match="Slurm has no node with the feature qm-pool-other"):
            backend_for(cluster).provision("other", 1, "on_demand", 30)

        fleet.cycle()  # the burst lands on the new nodes, and is sent to Slurm there
        placed = Attempt.objects.filter(job__in=jobs[1:], outcome="active")
        assert sorted(placed.values_list("assignments__node__name", flat=True)) == list(CLOUD_NODES)
        backend = backend_for(cluster)

        def running_there() -> bool:
            statuses = [backend.status(a.backend_id) for a in placed]
            return sorted(n for s in statuses for n in s.nodes) == list(CLOUD_NODES)

        wait("the burst running on the cloud nodes", running_there)
        gate.touch()
        wait(
            "the jobs done",
            lambda: (
                follow.follow(cluster.pk),
                all(Job.objects.get(pk=j.pk).state == Job.State.SUCCEEDED for j in jobs),
            )[1],
            seconds=90,
            seen=lambda: Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("pk", "state"),
        )

        # Idle, but not for the pool's release delay: they stay; past it they are powered down.
        assert elastic.settle(timezone.now() + timedelta(seconds=60))["released"] == 0
        assert elastic.settle(timezone.now() + timedelta(seconds=700))["released"] == 2
        grant.refresh_from_db()
        assert grant.state == "released"
        wait("the cloud nodes powered down", lambda: all(s.endswith("~") for s in power(lab).values()))
        assert sync.sync_cluster(cluster.pk).ok
        assert not Node.objects.filter(cluster=cluster, name__in=CLOUD_NODES, present=True).exists()
        asked = [line.split()[1:] for line in power_log.read_bytes()[seen:].decode().splitlines()]
        # each node resumed, then suspended, once (Slurm asks for one node or a host list of several at a time)
        for node in CLOUD_NODES:
            assert [what for what, hosts in asked if node in expand_hostlist(hosts)] == ["resume", "suspend"], asked

        # Within budget, and every decision on the record and on the cluster's page.
        (spent,) = spend([pool], timezone.now() + timedelta(seconds=700)).values()
        assert Decimal(0) < spent.spent <= Decimal(500)  # the monthly budget
        assert list(
            AuditLog.objects.filter(action__startswith="elastic.").order_by("pk").values_list("action", flat=True)
        ) == ["elastic.asked", "elastic.granted", "elastic.released"]
        admin = Client()
        admin.force_login(fleet.user("adam"))
        page = admin.get(f"/clusters/{cluster.pk}/").content.decode()
        assert 'data-state="released"' in page
        assert all(f'href="/jobs/{j.pk}/"' in page for j in jobs[1:])
    finally:
        gate.touch()
        for attempt in Attempt.objects.filter(job__in=jobs).exclude(backend_id=""):
            backend_for(cluster).cancel(attempt.backend_id)
        gate.unlink(missing_ok=True)
