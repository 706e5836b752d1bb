"""Interactive sessions end to end on the real Slurm lab with real JupyterLab (``deploy/slurm-lab/jupyter-venv.sh``):
submitted through the portal's action, placed by the loop, started by the generated program, which reports its
address through the job token to a live server; opened by its owner through ``/jobs/<id>/open/`` (another team:
404), JupyterLab answers with the secret, a notebook made through Jupyter's contents API lands in the checkpoint
directory, and after its idle time the session ends by itself and the job succeeds with the idle message (on the
newest lab; on the others its owner cancels it)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
import requests
from django.test import Client

from clusters.actions import sync
from clusters.models import Cluster
from scheduler import actions as job_actions
from scheduler.actions import sessions
from scheduler.models import Job
from scheduler.placement import feasibility, follow
from tests.clusters.slurm_lab import VERSIONS, SlurmLab, unavailable
from tests.scheduler.conftest import Fleet

pytestmark = pytest.mark.django_db(transaction=True)

JUPYTER_VENV = Path(os.environ.get("QM_JUPYTER_VENV", "/var/cache/quartermaster/jupyter-venv"))


def jupyter_for(lab: SlurmLab) -> Path:
    """JupyterLab for the jobs of ``lab``, built by ``deploy/slurm-lab/jupyter-venv.sh`` (with the 24.11 lab's root
    filesystem as its argument for that lab, whose jobs run inside it): its path as the jobs see it. CI builds
    both; a local run skips without them."""
    if not (lab.spec.path(JUPYTER_VENV) / "bin" / "jupyter").exists():
        root = lab.spec.root or ""
        unavailable(f"no JupyterLab in {lab.spec.path(JUPYTER_VENV)}: run deploy/slurm-lab/jupyter-venv.sh {root}")
    return JUPYTER_VENV


def wait_for(what: str, cluster: Cluster, check: Any, seconds: float) -> Any:
    """Follow the cluster until ``check()`` gives something true; fail naming ``what`` after ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        follow.follow(cluster.pk)
        found = check()
        if found:
            return found
        time.sleep(1)
    raise AssertionError(f"{what} did not happen within {seconds} s")


@pytest.mark.slurm
def test_a_jupyterlab_session_runs_opens_keeps_its_files_and_ends_when_idle(
    fleet: Fleet,
    slurm_lab: SlurmLab,
    live_server: Any,
    settings: Any,
    tmp_path: Path,
) -> None:
    jupyter_venv = jupyter_for(slurm_lab)
    settings.PUBLIC_URL = live_server.url  # where the session's program reports its address
    work = tmp_path / "notebooks"
    cluster = Cluster.objects.create(
        organization=fleet.org,
        name="Slurm lab",
        slug="slurm-lab",
        kind="slurm",
        endpoint=slurm_lab.endpoint,
        region="eu",
        options={
            **slurm_lab.options,
            "workdir": str(tmp_path),
            "session_setup": f"source {jupyter_venv}/bin/activate",
        },
    )
    cluster.set_credentials({"user": "root", "token": slurm_lab.token})
    cluster.save()
    assert sync.sync_cluster(cluster.pk).ok
    feasibility.forget(fleet.org)
    job = fleet.submit(
        name="notebook",
        kind="session",
        image="",
        command=[],
        accelerators=1,
        cpu=1000,
        memory=2048,
        time_limit=3600,
        checkpoint_location=str(work),
        session_idle_minutes=1,
        clusters=[cluster],
        max_retries=0,
    )
    fleet.cycle()

    def ready() -> bool:
        job.refresh_from_db()
        attempt = job.attempts.filter(number=job.attempt).first()
        assert job.state not in (Job.State.FAILED, Job.State.SUCCEEDED), list(job.events.values_list("message"))
        return job.state == Job.State.RUNNING and attempt is not None and bool(attempt.session_url)

    wait_for("the session reporting its address", cluster, ready, 150)
    attempt = job.attempts.get(number=job.attempt)
    assert attempt.session_url.startswith("http://127.0.0.1:"), attempt.session_url

    # another team's researcher: 404; the owner: a redirect to JupyterLab with a one-time code, not the secret
    outsider = Client()
    outsider.force_login(fleet.user("bob"))
    assert outsider.get(f"/jobs/{job.pk}/open/").status_code == 404
    owner = Client()
    owner.force_login(fleet.user("alice"))
    answer = owner.get(f"/jobs/{job.pk}/open/")
    assert answer.status_code == 302
    link = answer["Location"]
    assert link.startswith(f"{attempt.session_url}lab?qm_code=")
    secret = sessions.secret_for(attempt)
    assert secret not in link
    assert secret not in owner.get(f"/jobs/{job.pk}/").content.decode()

    def signed_in(url: str) -> bool:
        """Whether a browser with no cookies yet that opens ``url`` is then signed in to JupyterLab."""
        with requests.Session() as browser:
            opened = browser.get(url, timeout=20)
            assert opened.status_code == 200, opened.text[:500]
            return browser.get(f"{attempt.session_url}api/status", timeout=10).status_code == 200

    assert signed_in(link)  # JupyterLab, and its cookie
    assert not signed_in(link)  # once only: the link from a browser's history opens nothing
    assert not signed_in(f"{attempt.session_url}lab?token={secret}")  # nor the secret in a URL
    stale = sessions.one_time_code(secret, now=time.time() - sessions.CODE_SECONDS - 120)
    assert not signed_in(f"{attempt.session_url}lab?qm_code={stale}")
    forged = sessions.one_time_code("not-the-secret")
    assert not signed_in(f"{attempt.session_url}lab?qm_code={forged}")
    assert signed_in(owner.get(f"/jobs/{job.pk}/open/")["Location"])  # a new link opens it again
    assert requests.get(f"{attempt.session_url}api/status", timeout=10).status_code == 403  # no secret, no entry
    headers = {"Authorization": f"token {secret}"}  # a program with the secret: in a header
    status = requests.get(f"{attempt.session_url}api/status", headers=headers, timeout=10)
    assert status.status_code == 200, status.text
    notebook = {"type": "notebook", "content": {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}}
    made = requests.put(f"{attempt.session_url}api/contents/hello.ipynb", json=notebook, headers=headers, timeout=10)
    assert made.status_code == 201, made.text
    saved = work / "hello.ipynb"
    assert saved.exists()
    assert json.loads(saved.read_text())["nbformat"] == 4

    def ended() -> bool:
        job.refresh_from_db()
        return job.state in (Job.State.SUCCEEDED, Job.State.FAILED, Job.State.CANCELLED)

    if slurm_lab.spec.version != VERSIONS[-1]:
        # The idle ending is JupyterLab's, the same on every Slurm: waited for (up to two minutes) on the newest
        # lab only. Here its owner cancels it instead: the session stops, what was saved is kept.
        job_actions.cancel_job(fleet.user("alice"), job, "done for today")
        wait_for("the cancelled session ending", cluster, ended, 60)
        assert job.state == Job.State.CANCELLED, list(job.events.values_list("reason", "message"))
        assert saved.exists()
        return
    # left alone, JupyterLab stops itself after a minute (checked once a minute) and the job succeeds so
    wait_for("the idle session ending", cluster, ended, 240)
    job.refresh_from_db()
    assert job.state == Job.State.SUCCEEDED, list(job.events.values_list("reason", "message"))
    assert "ended after 1 minute idle" in job.message, job.message
    assert saved.exists()  # what the user saved is kept
    assert owner.get(f"/jobs/{job.pk}/open/").status_code == 302  # back to the job page: nothing to open
