"""An elastic pool on Cloud TPU, end to end through the loop against the local Cloud TPU API of
``tests/clusters/tpu_server.py`` (docs/backends.md, Cloud TPU, "Elastic pools"): a TPU job the cluster's own slots
cannot hold asks the pool, whose nodes are slices of the type its flavor and chips name; the backend asks Cloud TPU
for each as a queued resource of one slice, whose startup script starts the slice agent; once ACTIVE the slice
joins the fleet as the pool's, the job is given it through its metadata, and once idle the queued resource is
deleted. A stock-out is a refusal, and the failed queued resource is tidied away. The startup script, run as a
TPU VM would run it, starts an agent that runs a job it is given."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from clusters.actions import elastic as pool_actions
from clusters.backends.base import ELASTIC_POOL
from clusters.backends.tpu.backend import AGENT, POOL_LABEL, RUN_KEY, SCRIPT_KEY, pool_startup_script
from clusters.models import AcceleratorType, Cluster, ElasticGrant, Node
from scheduler import actions as job_actions
from scheduler.models import Attempt, Job
from scheduler.placement import elastic
from tenancy.models import AuditLog
from tests.clusters.factories import tpu_cluster
from tests.clusters.test_tpu_agent import until
from tests.clusters.tpu_server import MetadataServer, TpuServer, _endpoints
from tests.scheduler.conftest import Fleet
from tests.scheduler.fault_harness import Scenario, events
from tests.scheduler.pools import H100, burst_pool, four_an_hour

pytestmark = pytest.mark.django_db

HOST_CPU, HOST_MEMORY = 208_000, 458_752  # one v5p host's millicores and MiB


@pytest.fixture
def tpu() -> Iterator[TpuServer]:
    with TpuServer(progression=("ACCEPTED", "WAITING_FOR_RESOURCES", "ACTIVE"), page_size=50) as server:
        yield server


@pytest.fixture
def s(fleet: Fleet, django_capture_on_commit_callbacks: Any, tpu: TpuServer) -> Scenario:
    """The TPU cluster alone in the fleet, one v5p-8 slot of its own, and a pool ``burst`` of up to two v5p-8 slices
    (v5p, 4 chips) at 4.00 a chip-hour."""
    Cluster.objects.filter(slug__in=("east", "west")).update(status=Cluster.Status.DISABLED)
    scenario = Scenario(fleet, django_capture_on_commit_callbacks)
    options: dict[str, Any] = {
        "project": tpu.project,
        "zone": tpu.zone,
        "slices": {"v5p-8": 1},
        "host_cpu": HOST_CPU,
        "host_memory_mib": HOST_MEMORY,
    }
    cluster = scenario.added(tpu_cluster(fleet.org, "tpu", tpu.url, **options), preference=100)
    v5p = AcceleratorType.objects.get(organization=fleet.org, name="v5p")
    pool = burst_pool(
        cluster,
        accelerator=v5p,
        node_accelerators=4,
        node_cpu=HOST_CPU,
        node_memory=HOST_MEMORY,
        max_nodes=2,
        lead_time=60,
        monthly_budget=Decimal("500"),
    )
    four_an_hour(pool)
    return scenario


def submit(s: Scenario, name: str) -> Job:
    return s.fleet.submit(name=name, tpu_type="v5p-8", accelerators=1, accelerator_types=[])


def test_a_tpu_job_the_slots_cannot_hold_gets_a_pool_slice_as_a_queued_resource_released_once_idle(
    s: Scenario, tpu: TpuServer
) -> None:
    first = submit(s, "first")
    s.cycle()
    second = submit(s, "second")
    s.cycle()  # the one slot is taken: the pool is asked for a slice
    assert Job.objects.get(pk=second.pk).state == Job.State.PENDING
    (grant,) = ElasticGrant.objects.all()
    assert (grant.state, grant.count) == ("coming", 1)  # the ask's task ran as the cycle committed
    (name,) = grant.nodes  # Cloud TPU is told the slice's name: the ask names its node
    assert name.startswith("qm-pool-burst-")
    (spec,) = tpu.queued_resources[name].body["tpu"]["nodeSpec"]
    assert spec["nodeId"] == name
    assert spec["node"]["acceleratorType"] == "v5p-8"
    assert spec["node"]["labels"] == {POOL_LABEL: "burst"}
    assert AGENT.read_text() in spec["node"]["metadata"]["startup-script"]
    assert "guaranteed" in tpu.queued_resources[name].body  # on demand: not spot, from no reservation
    assert "spot" not in tpu.queued_resources[name].body

    later = timezone.now() + timedelta(seconds=61)
    assert elastic.settle(later)["up"] == 0  # waiting for resources: nothing has joined
    tpu.advance(name)
    s.sync(Cluster.objects.get(slug="tpu"))
    joined = Node.objects.get(cluster__slug="tpu", name=name)
    assert (joined.labels[ELASTIC_POOL], joined.accelerators, joined.state) == ("burst", 4, Node.State.SCHEDULABLE)
    assert elastic.settle(later)["up"] == 1

    s.cycle()  # the second job lands on the pool's slice, told through its metadata
    attempt = Attempt.objects.get(job=second, outcome="active")
    assert attempt.assignments.get().node.name == name, events(second)
    assert attempt.backend_id.endswith(f"={name}")
    assert tpu.metadata(name)[RUN_KEY] == attempt.backend_id
    assert "python train.py" in tpu.metadata(name)[SCRIPT_KEY]
    s.follow()
    assert Job.objects.get(pk=second.pk).state == Job.State.RUNNING, events(second)

    for job in (first, second):
        job_actions.cancel_job(s.fleet.user("alice"), Job.objects.get(pk=job.pk), "done with the burst")
    s.follow()
    assert RUN_KEY not in tpu.metadata(name)  # the job is off the slice
    assert elastic.settle(timezone.now() + timedelta(seconds=700))["released"] == 1
    assert tpu.queued_resources[name].deleting
    s.sync(Cluster.objects.get(slug="tpu"), times=2)  # the deletion takes a request or two
    assert name not in tpu.nodes
    assert not Node.objects.filter(cluster__slug="tpu", name=name, present=True).exists()
    grant.refresh_from_db()
    assert grant.state == "released"
    assert list(
        AuditLog.objects.filter(action__startswith="elastic.").order_by("pk").values_list("action", flat=True)
    ) == ["elastic.asked", "elastic.granted", "elastic.released"]


def test_a_stock_out_is_a_refusal_and_its_failed_queued_resource_is_deleted(s: Scenario, tpu: TpuServer) -> None:
    submit(s, "first")
    s.cycle()
    submit(s, "second")
    s.cycle()
    (grant,) = ElasticGrant.objects.all()
    (name,) = grant.nodes
    tpu.fail(name, "There is no more capacity in the zone us-central2-b")
    assert elastic.settle(timezone.now() + timedelta(seconds=60 + 31 * 60)) == {"asked": 0, "up": 0, "released": 0}
    grant.refresh_from_db()
    assert (grant.state, grant.message) == ("refused", f"{name} had not joined the fleet 30 min after they were due")
    assert tpu.queued_resources[name].deleting  # tidied away with the refusal


def test_a_tpu_pool_must_name_a_slice_type(s: Scenario) -> None:
    cluster = Cluster.objects.get(slug="tpu")
    with pytest.raises(ValidationError) as refused:
        pool_actions.create_pool(
            s.fleet.user("adam"),
            cluster,
            name="odd",
            flavor=H100,
            node_accelerators=8,
            node_cpu=HOST_CPU,
            node_memory=HOST_MEMORY,
            max_nodes=1,
        )
    assert refused.value.message_dict["node_accelerators"] == [
        f"On a TPU cluster a node is a slice: '{H100}' is not a TPU generation (v2, v3, v4, v5p, v5e, v6e)."
    ]


def test_the_startup_script_starts_an_agent_that_runs_what_the_slice_is_given(tpu: TpuServer, tmp_path: Path) -> None:
    """The script as a TPU VM runs it at boot (as root there; here in a folder of the test's, with a
    ``systemd-run`` that starts the unit's command in the background): the agent it writes and starts runs the
    program the slice's metadata names."""
    tpu.add_node(
        "qm-pool-burst-0a1b2c3d-1",
        acceleratorType="v5p-8",
        state="READY",
        health="HEALTHY",
        labels={POOL_LABEL: "burst"},
        metadata={"startup-script": pool_startup_script()},
        networkEndpoints=_endpoints(1, 7),
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "systemd-run"
    fake.write_text(
        '#!/bin/bash\nwhile [ "${1#--}" != "$1" ]; do shift; done\n'
        '"$@" > "$QM_AGENT_DIR/unit.log" 2>&1 &\necho $! > "$QM_AGENT_DIR/unit.pid"\n'
    )
    fake.chmod(0o755)
    home = tmp_path / "agent"
    done = tmp_path / "ran"
    with MetadataServer(tpu, "qm-pool-burst-0a1b2c3d-1") as metadata:
        env = {
            **os.environ,
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "QM_AGENT_DIR": str(home),
            "GCE_METADATA_HOST": metadata.host,
        }
        script = tpu.metadata("qm-pool-burst-0a1b2c3d-1")["startup-script"]
        subprocess.run(["bash", "-c", script], env=env, check=True, timeout=30)
        pid = int(until(lambda: (home / "unit.pid").exists() and (home / "unit.pid").read_text().strip(), "a unit"))
        try:
            assert (home / "tpu_agent.py").read_text() == AGENT.read_text()
            tpu.set_metadata(
                "qm-pool-burst-0a1b2c3d-1",
                {**tpu.metadata("qm-pool-burst-0a1b2c3d-1"), RUN_KEY: "qm-7=x", SCRIPT_KEY: f"touch {done}\n"},
            )
            until(done.exists, "the agent runs the slice's program")
        finally:
            os.kill(pid, signal.SIGKILL)
