"""Secret environment values: given through the form, the API or a job file, stored encrypted, shown to
nobody (not the owner, not an admin: no page, answer, export, event or audit line), handed to the cluster
when the job is dispatched, and kept by a clone only when its submitter makes it.

The rest of the environment and the script stay visible to the team, as before.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client

from clusters.backends.base import JobSpec
from clusters.backends.kubernetes.backend import KubernetesBackend
from clusters.backends.simulated.backend import SimulatedBackend
from clusters.secrets import CLUSTER_CREDENTIALS, CredentialsError, decrypt
from scheduler import actions
from scheduler.models import Attempt, Job, JobEvent
from tenancy.models import AuditLog
from tests.clusters.kube_server import TOKEN, KubeServer
from tests.clusters.test_kubernetes_backend import NS
from tests.conftest import api_client
from tests.scheduler.conftest import Fleet
from tests.scheduler.test_pages import form_data, signed_in

pytestmark = pytest.mark.django_db

SECRET = "sk-live-9f8e7d6c5b4a"
MEMBERS = ["alice", "lena", "fiona", "adam"]  # owner, lead, finance, admin


def with_secret(fleet: Fleet, **fields: Any) -> Job:
    return fleet.submit("alice", env={"SEED": "1"}, secret_env={"WANDB_API_KEY": SECRET}, **fields)


def everything_shown(client: Client, job: Job) -> list[tuple[str, bytes]]:
    """Every page and answer that shows a job or its traces, as one member sees them."""
    paths = [
        "/jobs/",
        "/jobs/rows/",
        f"/jobs/{job.pk}/",
        f"/jobs/{job.pk}/state/",
        f"/jobs/{job.pk}/clone/",
        f"/jobs/queues/{job.queue_id}/",
        "/audit/",
        "/billing/",
        "/api/v1/jobs/",
        f"/api/v1/jobs/{job.pk}/",
        f"/api/v1/jobs/{job.pk}/events/",
        "/api/v1/audit-log/",
        "/api/v1/billing/job-costs/",
        f"/api/v1/billing/statements/{job.team.slug}.csv",
    ]
    return [(path, body(client.get(path))) for path in paths]


def body(response: Any) -> bytes:
    return b"".join(response.streaming_content) if response.streaming else bytes(response.content)


def test_the_value_is_stored_encrypted_under_a_key_of_its_own(fleet: Fleet) -> None:
    job = with_secret(fleet)
    with connection.cursor() as cursor:  # the rows as the database holds them, every column
        cursor.execute("SELECT * FROM scheduler_job WHERE id = %s", [job.pk])
        row = cursor.fetchone()
    raw = b"".join(bytes(v) if isinstance(v, (bytes, memoryview)) else str(v).encode() for v in row)
    assert SECRET.encode() not in raw
    assert b"WANDB_API_KEY" in raw  # the name is not secret
    job.refresh_from_db()
    assert job.secret_env() == {"WANDB_API_KEY": SECRET}
    assert job.secret_env_names == ["WANDB_API_KEY"]
    assert job.env == {"SEED": "1"}
    with pytest.raises(CredentialsError):  # not readable as a cluster's credentials
        decrypt(bytes(job.secret_env_ciphertext), purpose=CLUSTER_CREDENTIALS)


def test_a_changed_key_makes_the_value_unreadable_and_says_so(fleet: Fleet, settings: Any) -> None:
    job = with_secret(fleet)
    settings.CREDENTIALS_KEY = "another key, after a rotation " * 3
    with pytest.raises(CredentialsError, match=f"secret environment values of job #{job.pk} cannot be decrypted"):
        Job.objects.get(pk=job.pk).secret_env()


@pytest.mark.parametrize("username", [*MEMBERS, "root"])
def test_no_page_or_answer_shows_the_value_to_anyone(fleet: Fleet, username: str) -> None:
    job = with_secret(fleet)
    fleet.cycle()  # placed and dispatched: its timeline and attempts are shown too
    actions.cancel_job(fleet.user("alice"), Job.objects.get(pk=job.pk), "done")  # an audit line
    if username == "root":
        user = User.objects.create_superuser("root", "root@example.org", "pw")
        admin_page = f"/admin/scheduler/job/{job.pk}/change/"
        shown = [(admin_page, body(signed_in_as(user).get(admin_page)))]
    else:
        client = signed_in(fleet, username)
        api = api_client(fleet.user(username))
        shown = everything_shown(client, job)
        shown += [(f"api {path}", api.get(path).content) for path in ("/api/v1/jobs/", f"/api/v1/jobs/{job.pk}/")]
    assert all(SECRET.encode() not in content for _, content in shown), [p for p, c in shown if SECRET.encode() in c]
    if username != "root":
        detail = dict(shown)[f"/jobs/{job.pk}/"]
        assert b"WANDB_API_KEY" in detail  # its name is shown
        assert b"SEED=1" in detail  # the rest of the environment stays visible to the team
        answer = api_client(fleet.user(username)).get(f"/api/v1/jobs/{job.pk}/").json()
        assert (answer["env"], answer["secret_env_names"]) == ({"SEED": "1"}, ["WANDB_API_KEY"])
    assert not JobEvent.objects.filter(message__contains=SECRET).exists()
    assert not [a for a in AuditLog.objects.all() if SECRET in str(a.__dict__)]


def signed_in_as(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_api_takes_secret_values_and_never_answers_them(fleet: Fleet) -> None:
    body = {
        "team": "vision",
        "name": "train",
        "time_limit": "1h",
        "image": "ghcr.io/lab/train:1",
        "env": {"SEED": "1"},
        "secret_env": {"HF_TOKEN": SECRET},
    }
    response = api_client(fleet.user("alice")).post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 201, response.content
    assert SECRET.encode() not in response.content
    assert response.json()["secret_env_names"] == ["HF_TOKEN"]
    assert Job.objects.get(pk=response.json()["id"]).secret_env() == {"HF_TOKEN": SECRET}


@pytest.mark.parametrize(
    ("secret_env", "field", "message"),
    [
        ({"SEED": SECRET}, "secret_env", "SEED: both secret and not; give each name in one of them."),
        ({"QM_TOKEN": SECRET}, "secret_env", "'QM_TOKEN' is not a valid environment variable name"),
        ({"OK": 7}, "secret_env", "Not a string."),
    ],
)
def test_bad_secret_values_are_refused_by_field_without_echoing_them(
    fleet: Fleet, secret_env: dict[str, Any], field: str, message: str
) -> None:
    body = {"team": "vision", "name": "x", "time_limit": 3600, "image": "i", "env": {"SEED": "1"}}
    body["secret_env"] = secret_env
    response = api_client(fleet.user("alice")).post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 400
    assert message in str(response.json()["error"]["fields"][field])
    assert SECRET.encode() not in response.content
    assert not Job.objects.exists()


def test_the_form_takes_secret_values_and_never_shows_them_back(fleet: Fleet) -> None:
    client = signed_in(fleet, "alice")
    # Refused for another field: the page comes back with what was typed, except the secret values.
    typed = form_data(fleet, secret_env=f"WANDB_API_KEY={SECRET}\n", cpu_cores="lots")
    refused = client.post("/jobs/new/", typed)
    assert refused.status_code == 400
    assert SECRET.encode() not in refused.content
    assert b"WANDB_PROJECT=resnet" in refused.content  # the plain environment is kept as typed
    preview = client.post("/jobs/new/preview/", typed)
    assert SECRET.encode() not in preview.content
    not_a_line = client.post("/jobs/new/", form_data(fleet, secret_env=SECRET))
    assert not_a_line.status_code == 400
    assert b"Line 1 is not KEY=VALUE." in not_a_line.content
    assert SECRET.encode() not in not_a_line.content
    assert not Job.objects.exists()

    created = client.post("/jobs/new/", form_data(fleet, secret_env=f"WANDB_API_KEY={SECRET}\n# a comment\n"))
    assert created.status_code == 302
    job = Job.objects.get()
    assert (job.env, job.secret_env()) == ({"WANDB_PROJECT": "resnet", "SEED": "1"}, {"WANDB_API_KEY": SECRET})


def test_the_cluster_gets_the_value_when_the_job_is_dispatched(fleet: Fleet, monkeypatch: pytest.MonkeyPatch) -> None:
    handed: list[JobSpec] = []
    real_submit = SimulatedBackend.submit

    def submit(backend: SimulatedBackend, spec: JobSpec) -> Any:  # the real backend, which is told the spec
        handed.append(spec)
        return real_submit(backend, spec)

    monkeypatch.setattr(SimulatedBackend, "submit", submit)
    job = with_secret(fleet)
    fleet.cycle()
    assert Attempt.objects.get(job=job).backend_id  # dispatched
    (spec,) = handed
    assert spec.env["WANDB_API_KEY"] == SECRET
    assert spec.env["SEED"] == "1"
    # And on the wire, as a Kubernetes API server receives the same spec.
    with KubeServer() as kube:
        kubernetes = KubernetesBackend(kube.url, {"token": TOKEN}, {"namespace": NS}, timeout=5.0)
        name = kubernetes.submit(replace(spec, nodes=("h100-a",)))
        assert isinstance(name, str)
        (container,) = kube.jobs[(NS, name)]["spec"]["template"]["spec"]["containers"]
    assert {"name": "WANDB_API_KEY", "value": SECRET} in container["env"]


def test_the_submitters_clone_keeps_the_values_unseen_and_anyone_elses_must_give_them(fleet: Fleet) -> None:
    job = with_secret(fleet)
    owner = signed_in(fleet, "alice")
    page = owner.get(f"/jobs/{job.pk}/clone/")
    assert b"Keep the secret values of #" in page.content
    assert SECRET.encode() not in page.content
    cloned = form_data(fleet, name="again", secret_env_from=job.pk, keep_secret_env="on", env="SEED=2")
    assert owner.post("/jobs/new/", cloned).status_code == 302
    clone = Job.objects.latest("pk")
    assert (clone.env, clone.secret_env()) == ({"SEED": "2"}, {"WANDB_API_KEY": SECRET})
    # A value given again replaces the kept one; unticked, nothing is kept.
    replaced = {**cloned, "name": "replaced", "secret_env": "WANDB_API_KEY=new"}
    assert owner.post("/jobs/new/", replaced).status_code == 302
    assert Job.objects.latest("pk").secret_env() == {"WANDB_API_KEY": "new"}
    dropped = {key: value for key, value in cloned.items() if key != "keep_secret_env"}
    assert owner.post("/jobs/new/", {**dropped, "name": "dropped"}).status_code == 302
    assert Job.objects.latest("pk").secret_env_names == []

    # The lead may clone the job but not its secrets: they would choose what the copy runs, and print them.
    lead = signed_in(fleet, "lena")
    page = lead.get(f"/jobs/{job.pk}/clone/")
    assert b"are not copied: only the job's submitter may reuse them" in page.content
    assert b"Keep the secret values" not in page.content
    count = Job.objects.count()
    forged = lead.post("/jobs/new/", {**cloned, "name": "forged"})
    assert forged.status_code == 400
    assert f"Only the submitter of job #{job.pk} may reuse its secret values".encode() in forged.content
    answer = api_client(fleet.user("lena")).post(
        "/api/v1/jobs/",
        {"team": "vision", "name": "forged", "time_limit": 3600, "image": "i", "secret_env_from": job.pk},
        format="json",
    )
    assert answer.status_code == 400
    assert "may reuse its secret values" in str(answer.json()["error"]["fields"]["secret_env_from"])
    # Someone who cannot see the job at all gets the answer a job that does not exist gets.
    answer = api_client(fleet.user("bob")).post(
        "/api/v1/jobs/",
        {"team": "robotics", "name": "x", "time_limit": 3600, "image": "i", "secret_env_from": job.pk},
        format="json",
    )
    assert answer.status_code == 400
    assert answer.json()["error"]["fields"]["secret_env_from"] == [f"No job {job.pk}, or not one you may see."]
    assert Job.objects.count() == count
    # Through the API, the submitter's clone keeps them too.
    answer = api_client(fleet.user("alice")).post(
        "/api/v1/jobs/",
        {"team": "vision", "name": "api clone", "time_limit": 3600, "image": "i", "secret_env_from": job.pk},
        format="json",
    )
    assert answer.status_code == 201, answer.content
    assert Job.objects.get(pk=answer.json()["id"]).secret_env() == {"WANDB_API_KEY": SECRET}
