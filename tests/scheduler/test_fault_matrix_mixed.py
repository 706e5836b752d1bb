"""No job is stranded on a mixed fleet: the demo's simulated clusters, a Kubernetes cluster in Kueue mode and
a Cloud TPU cluster (both on their fake API servers), plus the two misconfigurations that used to strand work
for ever (a Kueue cluster without ``local_queue``, a TPU cluster without ``slices``: it offers no slot).

A varied batch is submitted (batch scripts, containers, TPU jobs, container jobs only the Kubernetes
cluster's GPUs can run, a job too big to start now) and the loop runs for 21 simulated minutes (past the
dispatch deadline and the start timeout), in rounds (``ROUNDS``) of: recover, a placement cycle with dispatch,
the clusters playing their part (Kueue admits, the kubelet starts pods, Google's queue provisions slices),
follow. Then every job is running (or done), pending with a reason, or failed with a cluster's words; none
is still being placed past its deadline; and what holds quota is exactly the jobs' current attempts.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from clusters.models import Cluster
from demo.fleet import seed_demo_fleet, sync_demo_fleet
from scheduler.models import Attempt, Job
from scheduler.placement import dispatch, snapshot
from scheduler.states import FINAL
from tests.clusters import kube_crds
from tests.clusters.factories import kubernetes_cluster, tpu_cluster
from tests.clusters.kube_server import TOKEN, KubeServer
from tests.clusters.tpu_server import TpuServer
from tests.scheduler.conftest import Fleet
from tests.scheduler.fault_harness import Scenario
from tests.scheduler.test_fault_matrix_kubernetes import GPU, add_gpu_nodes, play

pytestmark = pytest.mark.django_db

K8S_ONLY = "NVIDIA-H100-80GB-HBM3"  # the GPUs of the Kubernetes cluster's nodes, which no other cluster has
SCRIPT = "python train.py --resume"
#: The loop's rounds, in minutes: every minute at first (a slice takes a few reads to provision), then past
#: the dispatch deadline (10 min) and the start timeout (15 min).
ROUNDS = (0, 1, 2, 3, 4, 5, 8, 11, 16, 21)
TPU_HOST = {"host_cpu": 208_000, "host_memory_mib": 448 * 1024}


def test_no_job_is_stranded_on_a_mixed_fleet(
    fleet: Fleet, django_capture_on_commit_callbacks: Any, settings: Any, tmp_path: Path
) -> None:
    settings.VAR_DIR = tmp_path
    Cluster.objects.filter(slug__in=("east", "west")).delete()  # the demo's fleet instead
    seed_demo_fleet(fleet.org)
    sync_demo_fleet(fleet.org)
    s = Scenario(fleet, django_capture_on_commit_callbacks)
    with KubeServer(seed=False) as kube, TpuServer(page_size=50) as tpu:
        add_gpu_nodes(kube, K8S_ONLY)
        kube_crds.add_flavor(kube, "h100")  # Kueue's side of k8s-kueue: its LocalQueue, with room for all
        kube_crds.add_cluster_queue(kube, "cq-research", {"h100": {"cpu": "1000", "memory": "8Ti", GPU: "64"}})
        kube_crds.add_local_queue(kube, "research", "lq-research", "cq-research")
        queue: dict[str, Any] = {"kueue": True, "local_queue": "lq-research"}
        k8s = s.added(kubernetes_cluster(fleet.org, "k8s-kueue", kube.url, TOKEN, **queue), preference=90)
        no_queue = s.added(kubernetes_cluster(fleet.org, "k8s-no-queue", kube.url, TOKEN, kueue=True), 95)
        where: dict[str, Any] = {"project": tpu.project, "zone": tpu.zone, **TPU_HOST}
        gcp = s.added(tpu_cluster(fleet.org, "gcp-tpu", tpu.url, slices={"v5p-8": 3}, **where), preference=90)
        no_type = s.added(tpu_cluster(fleet.org, "gcp-tpu-no-type", tpu.url, **where), preference=95)

        jobs = {
            **{f"script-{i}": s.submit(name=f"script-{i}", image="", command=[], script=SCRIPT) for i in range(3)},
            **{f"container-{i}": s.submit(name=f"container-{i}") for i in range(3)},
            **{f"tpu-{i}": s.submit(name=f"tpu-{i}", tpu_type="v5p-8") for i in range(3)},
            **{f"k8s-only-{i}": s.submit(name=f"k8s-{i}", accelerator_types=[K8S_ONLY]) for i in range(2)},
            "gang": s.submit(name="gang", workers=4),
            "tpu-script": s.submit(name="tpu-script", tpu_type="v5p-8", image="", script=SCRIPT),
        }
        # A batch script on GPUs only Kubernetes has, which runs images only: no cluster can run it, and the
        # submission says why.
        with pytest.raises(ValidationError) as nowhere:
            s.submit(name="nowhere", accelerator_types=[K8S_ONLY], image="", command=[], script=SCRIPT)
        assert "needs a container image" in nowhere.value.message_dict["image"][0]

        start = timezone.now()
        for minute in ROUNDS:
            at = start + timedelta(minutes=minute)
            s.recover(at)
            s.cycle(at)
            play(kube)
            s.follow(at)
        end = start + timedelta(minutes=ROUNDS[-1])

        seen: dict[str, tuple[str, str, str]] = {}
        for key, job in jobs.items():
            job.refresh_from_db()
            seen[key] = (job.state, job.pending_reason, job.message or job.pending_message)
            attempt = job.attempts.filter(number=job.attempt).select_related("cluster").first()
            if job.state in (Job.State.RUNNING, Job.State.SUCCEEDED):
                continue
            if job.state in (Job.State.PENDING, Job.State.REQUEUED):
                assert job.pending_reason, (key, seen[key])
                assert job.pending_message, (key, seen[key])
            elif job.state == Job.State.FAILED:
                assert "refused" in job.message or "Cluster" in job.message, (key, seen[key])
            else:  # being placed: only within its deadlines
                assert job.state in (Job.State.ADMITTED, Job.State.PLACING), (key, seen[key])
                assert attempt is not None, (key, seen[key])
                assert attempt.outcome == Attempt.Outcome.ACTIVE, (key, seen[key])
                assert end - attempt.admitted_at < dispatch.DISPATCH_DEADLINE, (key, seen[key])
                taken = attempt.submitted_at
                limit = timedelta(seconds=attempt.cluster.start_timeout)
                assert taken is None or end - taken < limit, (key, seen[key])

        # Where the batch ran: each kind of work somewhere that runs it, none on the misconfigured clusters.
        ran = dict(Attempt.objects.filter(outcome=Attempt.Outcome.ACTIVE).values_list("job_id", "cluster__slug"))
        for key in ("k8s-only-0", "k8s-only-1"):  # there, or waiting for its two nodes with a reason
            assert ran.get(jobs[key].pk) in (k8s.slug, None), (key, seen[key])
        assert k8s.slug in {ran.get(jobs["k8s-only-0"].pk), ran.get(jobs["k8s-only-1"].pk)}, seen
        for key in ("script-0", "script-1", "script-2", "tpu-script"):
            assert ran.get(jobs[key].pk) not in (k8s.slug, no_queue.slug), (key, seen[key])
        assert not Attempt.objects.filter(cluster__in=(no_queue, no_type)).exclude(outcome=Attempt.Outcome.REFUSED)
        labels = {job["metadata"]["labels"].get("kueue.x-k8s.io/queue-name") for job in kube.jobs.values()}
        assert labels == {"lq-research"}, labels
        assert any(ran.get(jobs[f"tpu-{i}"].pk) == gcp.slug for i in range(3)), seen
        running = [k for k, (state, _, _) in seen.items() if state == Job.State.RUNNING]
        assert len(running) >= 8, seen

        # Quota and budget: held by the jobs' current attempts, and by nothing that ended.
        held = {w.id for w in snapshot.build(fleet.org)[0].running}
        active = {str(job_id) for job_id in ran}
        assert held == active, (held, active)
        assert all(Job.objects.get(pk=pk).state not in FINAL for pk in ran)
