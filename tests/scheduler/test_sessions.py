"""Interactive sessions without a real cluster: what a session request may be (bad input a 400 naming the field,
nothing written), its defaults (the team's lowest tier, preemptible, the idle time), the program Slurm is given
(``clusters/backends/slurm/session.py``), its secret, and the whole life on the simulated fleet: placed, its
address reported with the job token, opened by its submitter only (a teammate 403, another team 404), ended idle
as succeeded, through the API, the pages and ``qm open``. The real JupyterLab run is ``test_sessions_lab.py``."""

from __future__ import annotations

import hashlib
import hmac
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from clusters.backends.base import InvalidJob, JobSpec
from clusters.backends.slurm import session as slurm_session
from clusters.backends.slurm.backend import SlurmBackend, invalid_options
from clusters.backends.slurm.script import batch_script
from governance.models import PriorityTier
from scheduler.actions import sessions
from scheduler.actions.checkpoints import token_for
from scheduler.models import Attempt, Job
from scheduler.placement import dispatch
from tests.conftest import api_client
from tests.scheduler.conftest import Fleet
from tests.scheduler.test_cli import qm, server  # noqa: F401 - the live server fixture
from tests.scheduler.test_pages import form_data, signed_in

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs/"
SESSION: dict[str, Any] = {
    "team": "vision",
    "name": "notebook",
    "time_limit": "2h",
    "kind": "session",
    "accelerators": 1,
    "cpu": 4,
    "memory_gib": 16,
}


def submit(api: Any, **fields: Any) -> Any:
    return api("alice").post(JOBS, {**SESSION, **fields}, format="json")


def running_session(fleet: Fleet, **fields: Any) -> tuple[Job, Attempt]:
    """A session placed and running on the simulated fleet."""
    job = fleet.submit(kind="session", image="", command=[], **fields)
    fleet.cycle()
    fleet.follow()
    job.refresh_from_db()
    assert job.state == Job.State.RUNNING, list(job.events.values_list("message", flat=True))
    return job, job.attempts.get(number=job.attempt)


def job_token(attempt: Attempt) -> Any:
    client = api_client()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token_for(attempt)}")
    return client


# --- what a session request may be -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"time_limit": "9h"}, "time_limit", "at most 8 hours"),
        ({"session_app": "emacs"}, "session_app", "is not a valid choice"),
        ({"session_idle_minutes": 0}, "session_idle_minutes", "from 1 to 240 minutes"),
        ({"session_idle_minutes": 241}, "session_idle_minutes", "from 1 to 240 minutes"),
        ({"workers": 2}, "workers", "one worker"),
        ({"image": "jupyter/scipy"}, "image", "leave the image and the script empty"),
        ({"command": ["bash"]}, "command", "leave the command empty"),
        ({"entrypoint": "python x.py"}, "entrypoint", "Only a Ray job"),
    ],
)
def test_bad_session_input_is_a_400_naming_the_field(
    fleet: Fleet, api: Any, fields: dict[str, Any], field: str, words: str
) -> None:
    response = submit(api, **fields)
    assert response.status_code == 400, response.json()
    assert words in " ".join(response.json()["error"]["fields"][field]), response.json()
    assert not Job.objects.exists()


def test_session_fields_on_a_plain_job_are_refused_by_name(fleet: Fleet, api: Any) -> None:
    response = submit(api, kind="job", image="ghcr.io/lab/train:1", session_app="jupyterlab", session_idle_minutes=5)
    assert response.status_code == 400
    fields = response.json()["error"]["fields"]
    assert "Only an interactive session" in fields["session_app"][0]
    assert "Only an interactive session" in fields["session_idle_minutes"][0]
    assert not Job.objects.exists()


def test_the_longest_session_is_a_setting(fleet: Fleet, api: Any, settings: Any) -> None:
    settings.SESSION_MAX_HOURS = 1
    response = submit(api, time_limit="90m")
    assert response.status_code == 400
    assert "at most 1 hour." in response.json()["error"]["fields"]["time_limit"][0]


def test_a_session_defaults_to_jupyterlab_the_lowest_tier_preemptible_and_the_idle_setting(
    fleet: Fleet, api: Any
) -> None:
    low = PriorityTier.objects.create(organization=fleet.org, name="scavenger", value=1)
    response = submit(api)
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["kind"], body["session_app"], body["session_idle_minutes"]) == ("session", "jupyterlab", 60)
    assert (body["tier"], body["preemptible"], body["session_ready"]) == (low.name, True, False)
    # a tier named wins; and a job that is no session keeps the organization's default
    named = submit(api, tier="high", name="nb2", session_app="shell", session_idle_minutes=15).json()
    assert (named["tier"], named["session_app"], named["session_idle_minutes"]) == ("high", "shell", 15)
    plain = api("alice").post(JOBS, {"team": "vision", "name": "p", "time_limit": "1h", "image": "x"}, format="json")
    assert plain.json()["tier"] == "normal"


def test_the_form_submits_a_session(fleet: Fleet) -> None:
    data = form_data(fleet, kind="session", image="", command="", session_app="shell", session_idle_minutes=20)
    response = signed_in(fleet, "alice").post("/jobs/new/", data)
    assert response.status_code == 302, response.content.decode()[:2000]
    job = Job.objects.get()
    assert (job.kind, job.session_app, job.session_idle_minutes) == ("session", "shell", 20)
    refused = signed_in(fleet, "alice").post("/jobs/new/", {**data, "name": "long", "time_limit_hours": 12})
    assert refused.status_code == 400
    assert "at most 8 hours" in refused.content.decode()
    assert Job.objects.count() == 1


# --- the program Slurm runs --------------------------------------------------------------------------------------


def session_spec(**fields: Any) -> JobSpec:
    values: dict[str, Any] = {
        "id": "42-1-abc123",
        "name": "notebook",
        "workers": 1,
        "accelerators_per_worker": 1,
        "cpu_per_worker": 2000,
        "memory_per_worker": 2048,
        "nodes": ("lab-node1",),
        "time_limit": 3600,
        "kind": "session",
        "session_app": "jupyterlab",
        "session_idle_minutes": 5,
        "session_secret": "s3cret-not-in-scripts",
    }
    return JobSpec(**{**values, **fields})


def test_the_program_starts_jupyterlab_with_its_idle_shutdown_and_never_writes_the_secret() -> None:
    options = {"workdir": "/shared/jobs", "session_setup": "source /opt/jupyter/bin/activate"}
    text = batch_script(session_spec(), options)
    assert text.startswith("#!/bin/bash\n")
    assert "source /opt/jupyter/bin/activate" in text
    assert "jupyter lab --no-browser" in text
    for setting in (
        "--ServerApp.shutdown_no_activity_timeout=300",
        "--MappingKernelManager.cull_idle_timeout=300",
        "--MappingKernelManager.cull_connected=True",
        "--TerminalManager.cull_inactive_timeout=300",
        "--LabApp.extension_manager=readonly",
    ):
        assert setting in text
    assert 'JUPYTER_TOKEN="$QM_SESSION_TOKEN"' in text
    assert "s3cret" not in text  # the secret travels in the job's environment only
    assert "QM_SESSION_DIR=/shared/jobs/qm-session-42" in text  # no checkpoint directory: one of its own
    assert '/api/v1/jobs/" + sys.argv[2] + "/session/' in text
    assert 'qm_session_report "$(python3' in text
    assert '{"ended": "idle"}' in text
    backend = SlurmBackend("http://127.0.0.1:1", {"user": "root", "token": "t"}, options)
    environment = backend._job_properties(session_spec())["environment"]
    assert environment["QM_SESSION_TOKEN"] == "s3cret-not-in-scripts"
    assert "QM_SESSION_TOKEN" not in backend._job_properties(session_spec(kind="job", command=("x",)))["environment"]


def test_the_session_directory_is_the_shared_one_and_the_url_template_is_checked() -> None:
    text = batch_script(session_spec(), {"workdir": "/srv/w", "session_dir": "/shared/sessions"})
    assert "QM_SESSION_DIR=/shared/sessions/qm-session-42" in text
    assert 'case "${QM_CHECKPOINT_DIR:-}" in /*) QM_SESSION_DIR="$QM_CHECKPOINT_DIR"' in text
    with pytest.raises(InvalidJob, match="session_url"):
        batch_script(session_spec(), {"session_url": "http://{host}:{port}/"})
    with pytest.raises(InvalidJob, match="jupyterlab or shell"):
        batch_script(session_spec(session_app="vscode"), {})
    with pytest.raises(InvalidJob, match="no secret"):
        batch_script(session_spec(session_secret=""), {})
    assert "session_dir is an absolute directory path" in invalid_options({"session_dir": "shared"})
    assert "session_url option" in invalid_options({"session_url": "ftp://{node}"})
    assert invalid_options({"session_url": "https://nodes.example.org/{node}/{port}/"}) == ""
    assert slurm_session.environment(session_spec(session_secret="")) == {}


# --- its life on the simulated fleet ---------------------------------------------------------------------


def test_a_session_reports_its_address_and_opens_for_its_submitter_only(fleet: Fleet, api: Any) -> None:
    job, attempt = running_session(fleet, session_idle_minutes=30)
    secret = dispatch.spec_for(attempt).session_secret
    assert secret
    assert dispatch.spec_for(attempt).session_secret == secret  # the same for a dispatch tried again
    assert secret not in repr(dispatch.spec_for(attempt))

    # not yet reported: nothing to open
    assert api("alice").get(f"{JOBS}{job.pk}/session/").status_code == 409
    assert signed_in(fleet, "alice").get(f"/jobs/{job.pk}/open/").status_code == 302
    # only its own attempt's token reports, an address of the right shape, and no person
    assert job_token(attempt).post(f"{JOBS}{job.pk}/session/", {"url": "ftp://x"}, format="json").status_code == 400
    bad = job_token(attempt).post(f"{JOBS}{job.pk}/session/", {"url": "http://u:p@10.0.0.7:8888/"}, format="json")
    assert "url" in bad.json()["error"]["fields"]
    assert (
        api("alice").post(f"{JOBS}{job.pk}/session/", {"url": "http://10.0.0.7:1/"}, format="json").status_code == 403
    )
    other = fleet.submit(name="other")
    assert job_token(attempt).post(f"{JOBS}{other.pk}/session/", {"url": "http://10.0.0.7:1/"}).status_code == 403
    assert not Attempt.objects.exclude(session_url="").exists()
    taken = job_token(attempt).post(f"{JOBS}{job.pk}/session/", {"url": "http://10.0.0.7:8888"}, format="json")
    assert taken.status_code == 201, taken.json()
    attempt.refresh_from_db()
    assert attempt.session_url == "http://10.0.0.7:8888/"

    # the submitter opens it: the API's link (qm open) and the page's redirect, the secret in them only
    link = api("alice").get(f"{JOBS}{job.pk}/session/").json()["url"]
    assert link.startswith("http://10.0.0.7:8888/lab?")
    [code] = parse_qs(urlsplit(link).query)["qm_code"]  # a one-time code made from the secret, not the secret
    expires, nonce, mac = code.split(".")
    assert 0 < int(expires) - time.time() <= sessions.CODE_SECONDS
    assert mac == hmac.new(secret.encode(), f"{expires}.{nonce}".encode(), hashlib.sha256).hexdigest()
    assert secret not in link
    alice = signed_in(fleet, "alice")
    opened = alice.get(f"/jobs/{job.pk}/open/")
    assert (opened.status_code, opened["Cache-Control"]) == (302, "no-store")
    assert opened["Location"].startswith("http://10.0.0.7:8888/lab?qm_code=")
    assert opened["Location"] != link  # a code of its own each time
    page = alice.get(f"/jobs/{job.pk}/").content.decode()
    assert 'data-testid="open-session"' in page
    assert "Open JupyterLab" in page
    detail = api("alice").get(f"{JOBS}{job.pk}/").json()
    assert detail["session_ready"] is True
    for shown in (page, str(detail), alice.get(f"/jobs/{job.pk}/state/").content.decode()):
        assert secret not in shown

    # a teammate, its team's lead and an admin may see the job, not use the session; another team: 404
    for username in ("lena", "adam"):
        assert api(username).get(f"{JOBS}{job.pk}/session/").status_code == 403
        assert signed_in(fleet, username).get(f"/jobs/{job.pk}/open/").status_code == 403
    assert (
        "only alice, who started it, may open it" in signed_in(fleet, "lena").get(f"/jobs/{job.pk}/").content.decode()
    )
    assert api("bob").get(f"{JOBS}{job.pk}/session/").status_code == 404
    assert signed_in(fleet, "bob").get(f"/jobs/{job.pk}/open/").status_code == 404
    assert api("bob").post(f"{JOBS}{job.pk}/session/", {"url": "http://10.0.0.7:1/"}, format="json").status_code == 404


def test_a_shell_session_opens_on_a_terminal(fleet: Fleet, api: Any) -> None:
    job, attempt = running_session(fleet, session_app="shell")
    job_token(attempt).post(f"{JOBS}{job.pk}/session/", {"url": "http://10.0.0.7:8888/"}, format="json")
    assert "/lab/terminals/1?qm_code=" in api("alice").get(f"{JOBS}{job.pk}/session/").json()["url"]


def test_a_session_that_ended_idle_succeeds_saying_so_and_its_token_reports_no_more(fleet: Fleet, api: Any) -> None:
    job, attempt = running_session(fleet, session_idle_minutes=5)
    client = job_token(attempt)
    client.post(f"{JOBS}{job.pk}/session/", {"url": "http://10.0.0.7:8888/"}, format="json")
    assert client.post(f"{JOBS}{job.pk}/session/", {"ended": "idle"}, format="json").status_code == 201
    fleet.run_for(7200)  # the simulated cluster's program ends (exit 0), as JupyterLab does when idle
    fleet.follow()
    job.refresh_from_db()
    assert job.state == Job.State.SUCCEEDED
    assert job.message == "The session ended after 5 minutes idle; its files are kept."
    assert client.post(f"{JOBS}{job.pk}/session/", {"ended": "idle"}, format="json").status_code == 403
    assert api("alice").get(f"{JOBS}{job.pk}/session/").status_code == 409


def test_a_session_that_ends_otherwise_is_not_called_idle(fleet: Fleet) -> None:
    job, _ = running_session(fleet)
    fleet.run_for(7200)
    fleet.follow()
    job.refresh_from_db()
    assert job.state == Job.State.SUCCEEDED
    assert "idle" not in job.message


def test_kubernetes_and_tpu_clusters_refuse_sessions_for_now() -> None:
    from clusters.backends.kubernetes.backend import KubernetesBackend
    from clusters.backends.tpu.backend import TpuBackend

    for backend in (KubernetesBackend, TpuBackend):
        bare: Any = object.__new__(backend)  # refused before anything is asked of it: no client needed
        with pytest.raises(InvalidJob, match="interactive sessions run on Slurm clusters"):
            bare.submit(session_spec())


def test_qm_submits_and_opens_a_session(server: Fleet, tmp_path: Path, capsys: Any) -> None:  # noqa: F811
    job_file = tmp_path / "nb.yaml"
    job_file.write_text("team: vision\naccelerators: 1\ncpu: 2\nmemory_gib: 8\n")
    status, out, err = qm(
        capsys, "submit", str(job_file), "--name", "nb", "--time-limit", "2h", "--session", "jupyterlab",
        "--idle-minutes", "45",
    )  # fmt: skip
    assert status == 0, err
    job = Job.objects.get()
    assert (job.kind, job.session_app, job.session_idle_minutes) == ("session", "jupyterlab", 45)
    status, _, err = qm(capsys, "open", str(job.pk))
    assert status != 0
    assert "opens once it runs" in err
    server.cycle()
    server.follow()
    attempt = job.attempts.get()
    sessions.report(job, attempt.number, "http://10.0.0.7:8888/")
    status, out, err = qm(capsys, "open", str(job.pk))
    assert status == 0, err
    assert out.strip().startswith("http://10.0.0.7:8888/lab?qm_code=")  # a link that opens it once
