"""An elastic pool on Kubernetes, end to end through the loop against the faithful API server of
``tests/clusters/kube_server.py`` (docs/backends.md, Kubernetes, "Elastic pools"): a burst the fixed node cannot
hold asks the pool; the backend sends the cluster's autoscaler a ``ProvisioningRequest`` (and its
``PodTemplate``) and pins nothing; cluster-autoscaler's step (``kube_crds.autoscale``) adds the nodes; they join
the fleet, are taken for the ask as they come, and the burst runs there; once idle they are cordoned and marked
released, left out of the inventory, and the autoscaler's scale-down removes them. A stock-out and a cluster
without the ProvisioningRequest API are refusals with their reasons."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from clusters.actions import sync
from clusters.backends.base import ELASTIC_POOL
from clusters.backends.kubernetes import provisioning
from clusters.models import Cluster, ElasticGrant, Node
from scheduler import actions as job_actions
from scheduler.models import Attempt, Job
from scheduler.placement import elastic, feasibility, follow
from tenancy.models import AuditLog
from tests.clusters import kube_crds
from tests.clusters.factories import kubernetes_cluster
from tests.clusters.kube_fleet import add_node
from tests.clusters.kube_server import TOKEN, KubeServer
from tests.scheduler.conftest import Fleet
from tests.scheduler.pools import H100, burst_pool, four_an_hour

pytestmark = pytest.mark.django_db

NS = "research"
#: What GPU feature discovery labels a new GPU node with once it runs.
DISCOVERED = {"nvidia.com/gpu.product": H100, "nvidia.com/gpu.count": "8"}


@pytest.fixture
def kube() -> Iterator[KubeServer]:
    with KubeServer(seed=False) as server:
        capacity = {"cpu": "96", "memory": "1048576Mi", "nvidia.com/gpu": "8", "pods": "110"}
        add_node(server, "gpu-1", DISCOVERED, capacity=capacity, allocatable=capacity, heartbeat=datetime.now(UTC))
        yield server


@pytest.fixture
def k8s(fleet: Fleet, kube: KubeServer) -> Cluster:
    """The cluster on the fake API server, alone in the fleet, with a pool ``burst`` of two 8-GPU nodes priced
    at 4.00 an accelerator-hour."""
    Cluster.objects.filter(slug__in=["east", "west"]).update(status=Cluster.Status.DISABLED)
    cluster = kubernetes_cluster(fleet.org, "k8s", kube.url, TOKEN)
    feasibility.forget(fleet.org)
    pool = burst_pool(
        cluster, node_cpu=96_000, node_memory=1_048_576, max_nodes=2, lead_time=60, monthly_budget=Decimal("500")
    )
    four_an_hour(pool)
    return cluster


def burst(fleet: Fleet) -> list[Job]:
    """Three 8-GPU jobs: the first fills gpu-1, the other two wait, and the pool is asked for two nodes."""
    jobs = [fleet.submit(name=f"burst-{i}", accelerators=8, cpu=4000, memory=8192, time_limit=1800) for i in range(3)]
    fleet.cycle()
    return jobs


def test_a_burst_asks_the_autoscaler_and_released_nodes_leave_the_fleet(
    fleet: Fleet, kube: KubeServer, k8s: Cluster
) -> None:
    jobs = burst(fleet)
    (grant,) = ElasticGrant.objects.all()
    assert (grant.state, grant.count) == ("asked", 2)
    assert elastic.provision(grant.pk) == "coming"
    grant.refresh_from_db()
    assert (grant.count, grant.nodes) == (2, [])  # the autoscaler names no node
    (request,) = kube.custom["provisioningrequests"].values()
    name = request["metadata"]["name"]
    assert request["spec"] == {
        "provisioningClassName": provisioning.DEFAULT_CLASS,
        "podSets": [{"count": 2, "podTemplateRef": {"name": name}}],
    }
    placeholder = kube.pod_templates[(NS, name)]["template"]["spec"]
    assert placeholder["nodeSelector"] == {ELASTIC_POOL: "burst"}
    assert placeholder["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu": "8"}
    # only the job on gpu-1 was sent: nothing is pinned to a node that does not exist
    assert [n for j in kube.jobs.values() for n in _pinned_to(j)] == ["gpu-1"]

    later = timezone.now() + timedelta(seconds=61)
    assert elastic.settle(later)["up"] == 0  # nothing has joined yet
    added = kube_crds.autoscale(kube)
    for node in added:  # the node's GPU feature discovery labels it once it runs
        kube.nodes[node]["metadata"]["labels"].update(DISCOVERED)
    assert sync.sync_cluster(k8s.pk).ok
    assert elastic.settle(later)["up"] == 1
    grant.refresh_from_db()
    assert sorted(grant.nodes) == sorted(added)
    joined = Node.objects.get(cluster=k8s, name=added[0])
    assert (joined.labels[ELASTIC_POOL], joined.labels["quartermaster.io/capacity-type"]) == ("burst", "on_demand")

    fleet.cycle()  # the burst lands on the new nodes, pinned to them now that they exist
    placed = Attempt.objects.filter(job__in=jobs[1:], outcome="active")
    assert sorted(placed.values_list("assignments__node__name", flat=True)) == sorted(added)
    pinned = {n for j in kube.jobs.values() for n in _pinned_to(j)}
    assert set(added) <= pinned <= set(kube.nodes)

    for job in jobs:
        job_actions.cancel_job(fleet.user("alice"), Job.objects.get(pk=job.pk), "done with the burst")
    follow.follow(k8s.pk)
    assert elastic.settle(timezone.now() + timedelta(seconds=700))["released"] == 2
    for node in added:
        assert kube.nodes[node]["spec"]["unschedulable"] is True
        assert provisioning.RELEASED in kube.nodes[node]["metadata"]["annotations"]
    assert not kube.custom["provisioningrequests"]  # finished: tidied away, with its template
    assert not kube.pod_templates
    assert sync.sync_cluster(k8s.pk).ok  # released nodes are no longer in the inventory
    assert not Node.objects.filter(cluster=k8s, name__in=added, present=True).exists()
    assert sorted(kube_crds.scale_down(kube)) == sorted(added)
    grant.refresh_from_db()
    assert grant.state == "released"
    assert list(
        AuditLog.objects.filter(action__startswith="elastic.").order_by("pk").values_list("action", flat=True)
    ) == ["elastic.asked", "elastic.granted", "elastic.released"]


def test_a_stock_out_and_a_cluster_without_the_api_are_refusals_with_their_reasons(
    fleet: Fleet, kube: KubeServer, k8s: Cluster
) -> None:
    burst(fleet)
    (grant,) = ElasticGrant.objects.all()
    assert elastic.provision(grant.pk) == "coming"
    assert kube_crds.autoscale(kube, stock=1) == []  # all or nothing: two asked, one left
    (request,) = kube.custom["provisioningrequests"].values()
    assert request["status"]["conditions"][-1]["type"] == "Failed"
    # nothing joins: past its time and the grace after it, the ask counts as refused, and may be asked again
    assert elastic.settle(timezone.now() + timedelta(seconds=60 + 31 * 60)) == {"asked": 0, "up": 0, "released": 0}
    grant.refresh_from_db()
    assert (grant.state, grant.message) == ("refused", "2 node(s) had not joined the fleet 30 min after they were due")
    assert not kube.custom["provisioningrequests"]  # the failed request is tidied away, with its template
    assert not kube.pod_templates

    kube.provisioning_installed = False
    fleet.cycle()
    again = ElasticGrant.objects.exclude(pk=grant.pk).get()
    assert elastic.provision(again.pk) == "refused"
    again.refresh_from_db()
    assert "serves no ProvisioningRequest API" in again.message
    assert not kube.pod_templates  # the template of the request that could not be made is not left behind


def _pinned_to(job: dict[str, object]) -> list[str]:
    """The nodes a Job's pods are pinned to: by host name, or by node affinity."""
    spec = job["spec"]["template"]["spec"]  # type: ignore[index]
    if "kubernetes.io/hostname" in spec.get("nodeSelector", {}):
        return [spec["nodeSelector"]["kubernetes.io/hostname"]]
    terms = spec.get("affinity", {}).get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution", {})
    return [v for term in terms.get("nodeSelectorTerms", []) for e in term["matchExpressions"] for v in e["values"]]
