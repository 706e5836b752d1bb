"""A TPU job on a slice lent to its team, through the real loop: the engine places it there (and never another
team's job), dispatch gives the slice the job through its metadata, the slice's agent (``deploy/tpu_agent.py``,
a real process) runs it, the program reports its exit code through the job's token to the live portal, and the
follow round ends the job and gives the slice back to its owner."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ValidationError

from clusters.backends.tpu.backend import RUN_KEY, TEAM_LABEL, queued_resource_id
from clusters.models import Cluster, Node
from scheduler import actions
from scheduler.models import Job
from scheduler.placement import feasibility
from tests.clusters.factories import tpu_cluster
from tests.clusters.test_tpu_agent import AGENT, until
from tests.clusters.tpu_server import MetadataServer, TpuServer, _endpoints
from tests.scheduler.conftest import Fleet
from tests.scheduler.fault_harness import Scenario, events


@pytest.fixture
def lent_slice(tmp_path: Path) -> Iterator[tuple[TpuServer, MetadataServer]]:
    with TpuServer(progression=("ACCEPTED", "ACTIVE"), page_size=50) as server:
        server.add_node(
            "lab-a",
            acceleratorType="v5p-8",
            acceleratorConfig={"type": "V5P", "topology": "2x2x1"},
            state="READY",
            health="HEALTHY",
            labels={},  # lent below, once the team is known
            metadata={"startup-script": "systemctl start quartermaster-agent"},
            networkEndpoints=_endpoints(1, 7),
        )
        with MetadataServer(server, "lab-a") as metadata:
            agent = subprocess.Popen(
                [sys.executable, str(AGENT), "--state-dir", str(tmp_path / "agent"), "--grace", "1"],
                env={**os.environ, "GCE_METADATA_HOST": metadata.host},
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                yield server, metadata
            finally:
                agent.kill()
                agent.wait()


@pytest.mark.django_db(transaction=True)
def test_a_job_runs_on_a_slice_lent_to_its_team_and_only_its_team(
    live_server: Any,
    fleet: Fleet,
    settings: Any,
    django_capture_on_commit_callbacks: Any,
    lent_slice: Any,
    tmp_path: Path,
) -> None:
    settings.PUBLIC_URL = live_server.url
    server, _ = lent_slice
    team = actions.teams_for_submission(fleet.user("alice"))[0]
    other = next(
        (name, teams[0])
        for name, user in fleet.world.users.items()
        if (teams := actions.teams_for_submission(user)) and teams[0].pk != team.pk
    )
    server.nodes["lab-a"]["labels"] = {TEAM_LABEL: team.slug}
    scenario = Scenario(fleet, django_capture_on_commit_callbacks)
    Cluster.objects.filter(organization=fleet.org).update(status=Cluster.Status.DISABLED)
    # A cluster that may provision nothing of its own: the lent slice is all it offers.
    options = {"project": server.project, "zone": server.zone, "slices": {"v6e-8": 1}}
    cluster = scenario.added(tpu_cluster(fleet.org, "tpu", server.url, **options), preference=100)
    node = Node.objects.get(cluster=cluster, name="lab-a")
    assert (node.accelerators_allocatable, node.labels["qm/lent-to"]) == (4, team.slug)

    # Another team's job: no slice of that shape it may use, so it never fits, at submission.
    with pytest.raises(ValidationError, match="No v5p-8 slice exists in the clusters") as refused:
        fleet.submit(
            other[0], team=other[1].slug, tpu_type="v5p-8", accelerators=4, image="", command=[], script="true"
        )
    assert "tpu_type" in refused.value.message_dict

    ran, gate = tmp_path / "ran", tmp_path / "gate"
    # The program waits for the gate, so the job is seen running before it reports its end.
    script = f'echo "$QM_JOB_ID" >> {ran}\nwhile [ ! -e {gate} ]; do sleep 0.1; done\nexit 0\n'
    job = fleet.submit(tpu_type="v5p-8", accelerators=4, image="", command=[], script=script)
    scenario.cycle()
    job.refresh_from_db()
    attempt = job.attempts.get(number=job.attempt)
    assert attempt.backend_id == f"{queued_resource_id(attempt.backend_key)}=lab-a", events(job)
    assert server.metadata("lab-a")[RUN_KEY] == attempt.backend_id
    scenario.follow()
    assert Job.objects.get(pk=job.pk).state == Job.State.RUNNING, events(job)

    # The agent runs it; its program reports exit code 0 to the portal; the follow round ends the job.
    until(lambda: ran.exists() and ran.read_text().strip(), "the agent ran the job's program")
    gate.touch()
    until(lambda: Job.objects.get(pk=job.pk).attempts.get(number=1).reported_at, "the report reached the portal")
    scenario.follow()
    job.refresh_from_db()
    assert job.state == Job.State.SUCCEEDED, events(job)
    assert server.metadata("lab-a") == {"startup-script": "systemctl start quartermaster-agent"}
    feasibility.forget(fleet.org)
