"""Registering and editing clusters, syncing one now, planning maintenance, probe tokens: the actions and
their pages.

Organization admins do all of it; leads, researchers and finance may look but get 403 on every change
(and see no forms); another organization's cluster is a 404. A bad field is a 400 that names it and
changes nothing. Credentials are write-only: encrypted when given, kept when left empty, removed when
cleared, and never shown back, in a page or in the audit log.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.test import Client
from django.utils import timezone

from clusters import actions
from clusters.actions import sync
from clusters.backends.simulated import backend as simulated
from clusters.models import Cluster, MaintenanceWindow, Node, ProbeToken
from tenancy.models import AuditLog, hash_token
from tests.conftest import World

NOT_ADMINS = ["lena", "alice", "fiona"]  # lead, researcher, finance
JWT = "eyJhbGciOiJIUzI1NiJ9.s3cr3t-slurm-jwt.signature"
SLURM = {"user": "qm-svc", "token": JWT}
NO_KUBE = {"kubernetes_token": "", "kubernetes_ca_cert": ""}  # the new cluster form's are filled in


@pytest.fixture(autouse=True)
def fresh_simulated_state() -> Iterator[None]:
    simulated._MEMORY.clear()
    yield
    simulated._MEMORY.clear()


@pytest.fixture
def clusters(world: World) -> dict[str, Cluster]:
    """A synced simulated cluster of the demo organization, a Slurm one with credentials, and one of the
    rival organization."""
    made = {
        "sim": Cluster.objects.create(
            organization=world.org,
            name="Sim H100",
            slug="sim",
            kind="simulated",
            endpoint="sim://admin-sim",
            region="eu",
            levels=["ib_block", "rack"],
            options={"profile": "h100-onprem", "nodes": 8},
        ),
        "slurm": Cluster.objects.create(
            organization=world.org,
            name="Slurm A100",
            slug="slurm",
            kind="slurm",
            endpoint="http://slurm.example.org:6820",
            region="eu",
            options={"partition": "gpu"},
        ),
        "rival": Cluster.objects.create(
            organization=world.other_org,
            name="Rival",
            slug="rival",
            kind="simulated",
            endpoint="sim://admin-rival",
            region="mars",
            options={"profile": "a100-slurm", "nodes": 4},
        ),
    }
    made["slurm"].set_credentials(SLURM)
    made["slurm"].save()
    for key in ("sim", "rival"):
        assert sync.sync_cluster(made[key].pk).ok
    return {key: Cluster.objects.get(pk=c.pk) for key, c in made.items()}


def signed_in(world: World, username: str) -> Client:
    client = Client()
    client.force_login(world.users[username])
    return client


def snapshot() -> tuple[Any, ...]:
    """Everything the admin pages may change."""
    return (
        list(Cluster.objects.order_by("pk").values()),
        list(MaintenanceWindow.objects.values_list("pk", flat=True)),
        list(ProbeToken.objects.values_list("pk", "revoked_at")),
        AuditLog.objects.exclude(action__startswith="auth.").count(),
    )


def new_cluster(**overrides: Any) -> dict[str, Any]:
    form = {
        "name": "Kube H200",
        "slug": "",
        "kind": "kubernetes",
        "endpoint": "https://k8s.example.org:6443",
        "region": "us-east",
        "levels": "block, rack",
        "options": '{"namespace": "research"}',
        "preference": "70",
        "kubernetes_token": "kube-bearer-s3cr3t",
        "kubernetes_ca_cert": "-----BEGIN CERTIFICATE-----\nca-pem-body\n-----END CERTIFICATE-----",
    }
    return {**form, **overrides}


def edit_form(cluster: Cluster, **overrides: Any) -> dict[str, Any]:
    form = {
        "name": cluster.name,
        "slug": cluster.slug,
        "endpoint": cluster.endpoint,
        "region": cluster.region,
        "levels": ", ".join(cluster.levels),
        "options": json.dumps(cluster.options),
        "preference": str(cluster.preference),
    }
    return {**form, **overrides}


def window_form(**overrides: Any) -> dict[str, Any]:
    start = timezone.now() + timedelta(days=2)
    form = {
        "starts_at": start.strftime("%Y-%m-%dT%H:%M"),
        "ends_at": (start + timedelta(hours=4)).strftime("%Y-%m-%dT%H:%M"),
        "drain_ahead_minutes": "90",
        "reason": "Firmware update of the IB switches",
        "nodes": "h100-00001, h100-00002",
    }
    return {**form, **overrides}


def posts(cluster: Cluster, token: ProbeToken) -> list[tuple[str, dict[str, Any]]]:
    """Every change the admin pages make to one cluster, with valid input."""
    return [
        (f"/clusters/{cluster.pk}/edit/", edit_form(cluster, name="Renamed")),
        (f"/clusters/{cluster.pk}/sync/", {}),
        (f"/clusters/{cluster.pk}/maintenance/", window_form()),
        (f"/clusters/{cluster.pk}/probe-tokens/", {"name": "rack 7"}),
        (f"/clusters/{cluster.pk}/probe-tokens/{token.pk}/revoke/", {}),
    ]


@pytest.fixture
def probe_token(world: World, clusters: dict[str, Cluster]) -> ProbeToken:
    token, _ = actions.issue_probe_token(world.users["adam"], clusters["sim"], "existing")
    return token


# --- Who may do what ------------------------------------------------------------------------------------


def test_admin_sees_every_form(world: World, clusters: dict[str, Cluster], probe_token: ProbeToken):
    adam = signed_in(world, "adam")
    body = adam.get(f"/clusters/{clusters['sim'].pk}/").content.decode()
    for form in ("sync-form", "maintenance-form", "probe-tokens", "probe-token-form"):
        assert f'data-testid="{form}"' in body, form
    assert "existing" in body
    # A simulated cluster is edited by the installation's operators only (its replicas run on this host).
    assert 'data-testid="edit-link"' not in body
    assert adam.get(f"/clusters/{clusters['sim'].pk}/edit/").status_code == 403
    assert 'data-testid="edit-link"' in adam.get(f"/clusters/{clusters['slurm'].pk}/").content.decode()
    assert 'data-testid="add-cluster"' in adam.get("/clusters/").content.decode()
    assert adam.get("/clusters/new/").status_code == 200
    assert adam.get(f"/clusters/{clusters['slurm'].pk}/edit/").status_code == 200


@pytest.mark.parametrize("username", NOT_ADMINS)
def test_who_is_not_an_admin_sees_no_form_and_gets_403_changing_nothing(
    world: World, clusters: dict[str, Cluster], probe_token: ProbeToken, username: str
):
    client = signed_in(world, username)
    cluster = clusters["sim"]
    body = client.get(f"/clusters/{cluster.pk}/").content.decode()
    for form in ("edit-link", "sync-form", "maintenance-form", "probe-tokens", "probe-token-form"):
        assert f'data-testid="{form}"' not in body, form
    assert "existing" not in body  # probe tokens are for admins' eyes
    assert 'data-testid="add-cluster"' not in client.get("/clusters/").content.decode()
    before = snapshot()
    assert client.get("/clusters/new/").status_code == 403
    assert client.post("/clusters/new/", new_cluster()).status_code == 403
    assert client.get(f"/clusters/{cluster.pk}/edit/").status_code == 403
    for path, data in posts(cluster, probe_token):
        assert client.post(path, data).status_code == 403, path
        assert client.post(path, {}).status_code == 403, path  # bad input too: refused before it is read
    assert snapshot() == before


def test_another_organizations_cluster_is_404_and_changes_nothing(
    world: World, clusters: dict[str, Cluster], probe_token: ProbeToken
):
    mallory = signed_in(world, "mallory")  # admin of Rival Labs
    before = snapshot()
    assert mallory.get(f"/clusters/{clusters['sim'].pk}/edit/").status_code == 404
    for path, data in posts(clusters["sim"], probe_token):
        assert mallory.post(path, data).status_code == 404, path
    # Her own cluster, with the demo organization's token: still 404.
    path = f"/clusters/{clusters['rival'].pk}/probe-tokens/{probe_token.pk}/revoke/"
    assert mallory.post(path).status_code == 404
    assert snapshot() == before
    # What she registers is her organization's, and the demo admin cannot reach it.
    assert mallory.post("/clusters/new/", new_cluster(slug="sim")).status_code == 302
    mine = Cluster.objects.get(organization=world.other_org, slug="sim")
    assert signed_in(world, "adam").get(f"/clusters/{mine.pk}/").status_code == 404


@pytest.mark.parametrize("username", NOT_ADMINS)
def test_the_actions_refuse_who_is_not_an_admin(world: World, clusters: dict[str, Cluster], username: str):
    user = world.users[username]
    cluster = clusters["sim"]
    with pytest.raises(PermissionDenied):
        actions.create_cluster(user, world.org, **actions_fields())
    with pytest.raises(PermissionDenied):
        actions.update_cluster(user, cluster, name="mine")
    with pytest.raises(PermissionDenied):
        actions.request_sync(user, cluster)
    token, _ = actions.issue_probe_token(world.users["adam"], cluster, "t")
    with pytest.raises(PermissionDenied):
        actions.revoke_probe_token(user, token)
    with pytest.raises(PermissionDenied):
        actions.update_cluster(world.users["mallory"], cluster, name="mine")
    token.refresh_from_db()
    assert token.revoked_at is None
    assert Cluster.objects.get(pk=cluster.pk).name == "Sim H100"


def actions_fields(**overrides: Any) -> dict[str, Any]:
    fields = {
        "name": "TPU v5p",
        "kind": "tpu",
        "endpoint": "https://tpu.googleapis.com",
        "region": "us-east5",
        "levels": ["slice"],
        "options": {"project": "acme-ml", "zone": "us-east5-a", "slices": {"v5p-32": 2}},
        "preference": 40,
    }
    return {**fields, **overrides}


# --- Register a cluster ---------------------------------------------------------------------------------


def test_admin_registers_a_cluster_and_its_first_sync_is_queued(
    world: World, clusters: dict[str, Cluster], django_capture_on_commit_callbacks: Any
):
    adam = signed_in(world, "adam")
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = adam.post("/clusters/new/", new_cluster())
    cluster = Cluster.objects.get(organization=world.org, slug="kube-h200")
    assert response.status_code == 302
    assert response["Location"] == f"/clusters/{cluster.pk}/"
    assert (cluster.kind, cluster.endpoint, cluster.levels, cluster.options, cluster.preference) == (
        "kubernetes",
        "https://k8s.example.org:6443",
        ["block", "rack"],
        {"namespace": "research"},
        70,
    )
    assert cluster.credentials() == {
        "token": "kube-bearer-s3cr3t",
        "ca_cert": "-----BEGIN CERTIFICATE-----\nca-pem-body\n-----END CERTIFICATE-----",
    }
    assert b"kube-bearer-s3cr3t" not in bytes(cluster.credentials_ciphertext)
    assert len(callbacks) == 1  # the first sync, queued once committed
    entry = AuditLog.objects.get(action="cluster.created")
    assert entry.actor == world.users["adam"]
    assert entry.changes["credentials"] is True
    assert "kube-bearer-s3cr3t" not in json.dumps(entry.changes)
    page = adam.get(f"/clusters/{cluster.pk}/").content.decode()
    assert "credentials set" in page
    assert "kube-bearer-s3cr3t" not in page


def test_a_simulated_cluster_is_registered_without_endpoint_or_credentials(
    world: World, clusters: dict[str, Cluster], operator: Any
):
    client = Client()
    client.force_login(operator)
    form = new_cluster(name="Demo A100", kind="simulated", endpoint="", options='{"profile": "a100-slurm", "nodes": 4}')
    form.pop("kubernetes_token")
    form.pop("kubernetes_ca_cert")
    assert client.post("/clusters/new/", {**form, "organization": world.org.slug}).status_code == 302
    cluster = Cluster.objects.get(slug="demo-a100")
    assert (cluster.endpoint, cluster.has_credentials) == ("", False)
    assert sync.sync_cluster(cluster.pk).ok
    assert Node.objects.filter(cluster=cluster).count() == 4


BAD_NEW_CLUSTER = [
    ({"name": ""}, "name"),
    ({"name": "x" * 121}, "name"),
    ({"slug": "sim"}, "slug"),  # taken in this organization
    ({"slug": "no spaces"}, "slug"),
    ({"kind": "mainframe"}, "kind"),
    ({"endpoint": ""}, "endpoint"),
    ({"endpoint": "ftp://k8s.example.org"}, "endpoint"),
    ({"endpoint": "k8s.example.org:6443"}, "endpoint"),
    ({"endpoint": "https://admin:hunter2@k8s.example.org"}, "endpoint"),  # a password in the URL
    ({"endpoint": "http://169.254.169.254/computeMetadata/v1/"}, "endpoint"),  # the cloud metadata service
    ({"endpoint": "http://metadata.google.internal"}, "endpoint"),
    ({"endpoint": "http://[fe80::1]:6443"}, "endpoint"),
    ({"kind": "simulated", "endpoint": "https://sim.example.org", **NO_KUBE}, "endpoint"),
    ({"region": ""}, "region"),
    ({"levels": "Rack!"}, "levels"),
    ({"levels": "rack, rack"}, "levels"),
    ({"options": "{not json"}, "options"),
    ({"options": '["a list"]'}, "options"),
    ({"options": '{"namespace": "Not A Namespace"}'}, "options"),
    ({"options": '{"api_token": "in the clear"}'}, "options"),
    ({"kind": "tpu", "options": '{"project": "acme"}', **NO_KUBE}, "options"),
    ({"kind": "tpu", "options": '{"project": "p", "zone": "z"}', **NO_KUBE}, "options"),  # no slices
    ({"kind": "tpu", "options": '{"project": "p", "zone": "z", "slices": {"v9x-8": 1}}', **NO_KUBE}, "options"),
    ({"kind": "tpu", "options": '{"project": "p", "zone": "z", "slices": {"v5p-8": -1}}', **NO_KUBE}, "options"),
    ({"kind": "simulated", "endpoint": "", "options": '{"profile": "cray-1"}', **NO_KUBE}, "options"),
    ({"preference": "101"}, "preference"),
    ({"preference": "-1"}, "preference"),
    ({"preference": "lots"}, "preference"),
    # a field of another kind
    ({"kind": "slurm", "slurm_user": "u", "slurm_token": "t", "kubernetes_ca_cert": ""}, "kubernetes_token"),
    ({"kind": "slurm", "slurm_user": "qm-svc", **NO_KUBE}, "slurm_user"),  # no token
    (
        {
            "kind": "tpu",
            "options": '{"project": "p", "zone": "z", "slices": {"v5p-8": 1}}',
            **NO_KUBE,
            "tpu_service_account_json": '{"type": "authorized_user"}',
        },
        "tpu_service_account_json",
    ),
    (
        {
            "kind": "tpu",
            "options": '{"project": "p", "zone": "z", "slices": {"v5p-8": 1}}',
            **NO_KUBE,
            "tpu_service_account_json": '{"type": "service_account"}',
            "tpu_access_token": "ya29.x",
        },
        "tpu_service_account_json",
    ),
]


@pytest.mark.parametrize(("change", "field"), BAD_NEW_CLUSTER)
def test_a_bad_field_of_a_new_cluster_is_400_naming_it(
    world: World, clusters: dict[str, Cluster], operator: Any, change: dict[str, str], field: str
):
    before = snapshot()
    if change.get("kind") == "simulated":  # offered to the installation's operators only
        client = Client()
        client.force_login(operator)
        response = client.post("/clusters/new/", new_cluster(organization=world.org.slug, **change))
    else:
        response = signed_in(world, "adam").post("/clusters/new/", new_cluster(**change))
    assert response.status_code == 400
    assert field in response.context["form"].errors, response.context["form"].errors
    body = response.content.decode()
    assert 'class="field invalid"' in body
    assert "kube-bearer-s3cr3t" not in body  # what was typed is not echoed
    assert "ca-pem-body" not in body
    assert "ya29.x" not in body
    assert snapshot() == before


def test_the_actions_name_the_bad_field(world: World, clusters: dict[str, Cluster]):
    adam = world.users["adam"]
    cases: list[tuple[dict[str, Any], str]] = [
        ({"kind": "lisp-machine"}, "kind"),
        ({"levels": "rack"}, "levels"),  # a list, not a string
        ({"levels": ["a"] * 2}, "levels"),
        ({"levels": [f"l{i}" for i in range(9)]}, "levels"),
        ({"options": {"project": "p"}}, "options"),
        ({"preference": True}, "preference"),
        ({"preference": 50.5}, "preference"),
        ({"endpoint": None}, "endpoint"),
    ]
    for change, field in cases:
        with pytest.raises(ValidationError) as caught:
            actions.create_cluster(adam, world.org, **actions_fields(**change))
        assert field in caught.value.message_dict, change
    with pytest.raises(ValidationError) as caught:
        actions.create_cluster(adam, world.org, credentials={"password": "x"}, **actions_fields())
    assert "credentials" in caught.value.message_dict
    assert "x" not in caught.value.message_dict["credentials"][0].split()
    with pytest.raises(ValidationError) as caught:
        actions.update_cluster(adam, clusters["sim"], kind="slurm")
    assert "kind" in caught.value.message_dict
    with pytest.raises(ValidationError) as caught:
        actions.update_cluster(adam, clusters["slurm"], slug="sim")
    assert "slug" in caught.value.message_dict
    with pytest.raises(TypeError):
        actions.update_cluster(adam, clusters["sim"], status="healthy")
    assert not Cluster.objects.filter(slug="tpu-v5p").exists()


def test_only_a_superuser_points_a_cluster_at_a_path_on_the_host(world: World, clusters: dict[str, Cluster]):
    cluster = clusters["slurm"]
    with pytest.raises(ValidationError, match="scontrol"):
        actions.update_cluster(world.users["adam"], cluster, options={**cluster.options, "scontrol": "/srv/x"})
    root = world.users["adam"]
    root.is_superuser = True
    actions.update_cluster(root, cluster, options={**cluster.options, "scontrol": "/usr/bin/scontrol"})
    root.is_superuser = False
    # An admin may still edit the rest of such a cluster: the host option is kept as it was.
    actions.update_cluster(root, cluster, name="Slurm renamed")
    cluster.refresh_from_db()
    assert (cluster.name, cluster.options["scontrol"]) == ("Slurm renamed", "/usr/bin/scontrol")


# --- Edit a cluster, credentials write-only -------------------------------------------------------------


def test_admin_edits_a_cluster_and_the_audit_says_what_changed(world: World, clusters: dict[str, Cluster]):
    cluster = clusters["slurm"]
    Cluster.objects.filter(pk=cluster.pk).update(next_sync_at=timezone.now() + timedelta(minutes=10), failures=2)
    adam = signed_in(world, "adam")
    form = adam.get(f"/clusters/{cluster.pk}/edit/")
    assert form.context["form"]["name"].value() == "Slurm A100"
    assert "slurm_token" in form.context["form"].fields
    assert "kubernetes_token" not in form.context["form"].fields
    response = adam.post(
        f"/clusters/{cluster.pk}/edit/",
        edit_form(cluster, endpoint="https://slurm2.example.org:6820", preference="90", levels="rack"),
    )
    assert response.status_code == 302
    cluster.refresh_from_db()
    assert (cluster.endpoint, cluster.preference, cluster.levels) == ("https://slurm2.example.org:6820", 90, ["rack"])
    assert cluster.next_sync_at is None  # the new endpoint is tried at the next beat, not after the backoff
    assert cluster.credentials() == SLURM  # empty fields keep them
    entry = AuditLog.objects.get(action="cluster.updated")
    assert entry.changes == {
        "endpoint": ["http://slurm.example.org:6820", "https://slurm2.example.org:6820"],
        "preference": [50, 90],
        "levels": [[], ["rack"]],
    }
    # Saving again without a change records nothing.
    adam.post(f"/clusters/{cluster.pk}/edit/", edit_form(cluster))
    assert AuditLog.objects.filter(action="cluster.updated").count() == 1


def test_credentials_are_write_only(world: World, clusters: dict[str, Cluster]):
    cluster = clusters["slurm"]
    adam = signed_in(world, "adam")
    path = f"/clusters/{cluster.pk}/edit/"
    page = adam.get(path).content.decode()
    assert "credentials set" in page
    for secret in (JWT, "qm-svc"):
        assert secret not in page
        assert secret not in adam.get(f"/clusters/{cluster.pk}/").content.decode()
    encrypted = bytes(cluster.credentials_ciphertext)

    # A new token alone: re-encrypted, the user kept.
    assert adam.post(path, edit_form(cluster, slurm_token="rotated-jwt-value")).status_code == 302
    cluster.refresh_from_db()
    assert bytes(cluster.credentials_ciphertext) != encrypted
    assert cluster.credentials() == {"user": "qm-svc", "token": "rotated-jwt-value"}
    entry = AuditLog.objects.filter(action="cluster.updated").latest("pk")
    assert entry.changes == {"credentials": "changed"}

    # Left empty: kept, byte for byte.
    encrypted = bytes(cluster.credentials_ciphertext)
    adam.post(path, edit_form(cluster, name="Slurm A100 (eu)"))
    cluster.refresh_from_db()
    assert bytes(cluster.credentials_ciphertext) == encrypted

    # A bad edit echoes nothing typed into a credential field and changes nothing.
    response = adam.post(path, edit_form(cluster, slurm_token="typed-but-refused", preference="500"))
    assert response.status_code == 400
    assert "typed-but-refused" not in response.content.decode()
    cluster.refresh_from_db()
    assert cluster.credentials()["token"] == "rotated-jwt-value"

    # Cleared.
    assert adam.post(path, edit_form(cluster, clear_credentials="on")).status_code == 302
    cluster.refresh_from_db()
    assert (cluster.has_credentials, cluster.credentials()) == (False, {})
    assert AuditLog.objects.filter(action="cluster.updated").latest("pk").changes == {"credentials": "cleared"}
    assert 'data-testid="credentials">none<' in adam.get(f"/clusters/{cluster.pk}/").content.decode()

    # Nowhere in the audit log.
    logged = json.dumps(list(AuditLog.objects.values("changes", "reason", "target_repr")))
    for secret in (JWT, "rotated-jwt-value", "typed-but-refused"):
        assert secret not in logged


def test_a_secret_left_in_the_options_is_hidden_on_the_edit_form(world: World, clusters: dict[str, Cluster]):
    cluster = clusters["slurm"]
    Cluster.objects.filter(pk=cluster.pk).update(options={"partition": "gpu", "api_token": "leaked-into-options"})
    adam = signed_in(world, "adam")
    page = adam.get(f"/clusters/{cluster.pk}/edit/")
    assert "leaked-into-options" not in page.content.decode()
    assert "(hidden)" in page.content.decode()
    # Saved as shown, it is refused with the reason; saved without it, it is gone.
    form = edit_form(cluster, options=page.context["form"]["options"].value())
    response = adam.post(f"/clusters/{cluster.pk}/edit/", form)
    assert response.status_code == 400
    assert "Put api_token in the credentials" in response.context["form"].errors["options"][0]
    assert "leaked-into-options" not in response.content.decode()
    adam.post(f"/clusters/{cluster.pk}/edit/", edit_form(cluster, options='{"partition": "gpu"}'))
    cluster.refresh_from_db()
    assert cluster.options == {"partition": "gpu"}


def test_tpu_credentials_are_one_or_the_other(world: World, clusters: dict[str, Cluster]):
    adam = world.users["adam"]
    key = json.dumps({"type": "service_account", "client_email": "qm@acme.iam", "private_key": "-----BEGIN"})
    cluster = actions.create_cluster(adam, world.org, credentials={"service_account_json": key}, **actions_fields())
    actions.update_cluster(adam, cluster, credentials={"access_token": "ya29.token"})
    assert cluster.credentials() == {"access_token": "ya29.token"}
    with pytest.raises(ValidationError, match="clear"):
        actions.update_cluster(adam, cluster, credentials="forget them")
    actions.update_cluster(adam, cluster, credentials=actions.CLEAR)
    assert not cluster.has_credentials
    page = signed_in(world, "adam").get(f"/clusters/{cluster.pk}/").content.decode()
    assert 'data-testid="credentials">none<' in page


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"name": ""}, "name"),
        ({"endpoint": "gopher://x"}, "endpoint"),
        ({"slug": "sim"}, "slug"),
        ({"options": "[]"}, "options"),
        ({"levels": "UPPER"}, "levels"),
        ({"preference": "1000"}, "preference"),
        ({"region": ""}, "region"),
    ],
)
def test_a_bad_field_of_an_edit_is_400_naming_it(
    world: World, clusters: dict[str, Cluster], change: dict[str, str], field: str
):
    cluster = clusters["slurm"]
    before = snapshot()
    response = signed_in(world, "adam").post(f"/clusters/{cluster.pk}/edit/", edit_form(cluster, **change))
    assert response.status_code == 400
    assert field in response.context["form"].errors
    assert snapshot() == before


# --- Sync now -------------------------------------------------------------------------------------------


def test_sync_now_clears_the_backoff_and_syncs_once_committed(
    world: World, clusters: dict[str, Cluster], django_capture_on_commit_callbacks: Any
):
    cluster = clusters["sim"]
    later = timezone.now() + timedelta(minutes=15)
    Cluster.objects.filter(pk=cluster.pk).update(next_sync_at=later, last_sync_at=None)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = signed_in(world, "adam").post(f"/clusters/{cluster.pk}/sync/")
    assert response.status_code == 302
    assert len(callbacks) == 1
    cluster.refresh_from_db()
    assert cluster.next_sync_at is None
    assert cluster.last_sync_at is not None  # the task ran (eagerly here)
    assert AuditLog.objects.get(action="cluster.sync_requested").actor == world.users["adam"]


def test_a_disabled_cluster_is_not_synced(world: World, clusters: dict[str, Cluster]):
    Cluster.objects.filter(pk=clusters["sim"].pk).update(status=Cluster.Status.DISABLED)
    response = signed_in(world, "adam").post(f"/clusters/{clusters['sim'].pk}/sync/")
    assert response.status_code == 400
    assert "is disabled" in response.content.decode()
    assert not AuditLog.objects.filter(action="cluster.sync_requested").exists()


# --- Maintenance ----------------------------------------------------------------------------------------


def test_admin_plans_maintenance_and_everyone_sees_it(world: World, clusters: dict[str, Cluster]):
    cluster = clusters["sim"]
    response = signed_in(world, "adam").post(f"/clusters/{cluster.pk}/maintenance/", window_form())
    assert response.status_code == 302
    window = MaintenanceWindow.objects.get(cluster=cluster)
    assert sorted(n.name for n in window.nodes.all()) == ["h100-00001", "h100-00002"]
    assert (window.drain_ahead_minutes, window.created_by) == (90, world.users["adam"])
    assert AuditLog.objects.get(action="maintenance.planned").reason == "Firmware update of the IB switches"
    body = signed_in(world, "alice").get(f"/clusters/{cluster.pk}/").content.decode()
    assert "Firmware update of the IB switches" in body
    assert "h100-00002" in body
    # A window that is over is no longer listed.
    MaintenanceWindow.objects.filter(pk=window.pk).update(
        starts_at=timezone.now() - timedelta(days=2), ends_at=timezone.now() - timedelta(days=1)
    )
    assert "Firmware update" not in signed_in(world, "alice").get(f"/clusters/{cluster.pk}/").content.decode()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"reason": "  "}, "reason"),
        ({"starts_at": "tomorrow-ish"}, "starts_at"),
        ({"ends_at": (timezone.now() + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")}, "ends_at"),  # before start
        ({"drain_ahead_minutes": "-5"}, "drain_ahead_minutes"),
        ({"drain_ahead_minutes": str(8 * 24 * 60)}, "drain_ahead_minutes"),
        ({"nodes": "h100-00001 no-such-node"}, "nodes"),
        ({"nodes": "a100-00001"}, "nodes"),  # the rival cluster's node
    ],
)
def test_a_bad_maintenance_field_is_400_naming_it(
    world: World, clusters: dict[str, Cluster], change: dict[str, str], field: str
):
    before = snapshot()
    response = signed_in(world, "adam").post(f"/clusters/{clusters['sim'].pk}/maintenance/", window_form(**change))
    assert response.status_code == 400
    assert field in response.context["maintenance_form"].errors
    assert 'data-testid="maintenance-form"' in response.content.decode()
    assert snapshot() == before


# --- Probe tokens ---------------------------------------------------------------------------------------


def test_a_probe_token_is_shown_once_with_its_command_then_revoked(world: World, clusters: dict[str, Cluster]):
    cluster = clusters["sim"]
    adam = signed_in(world, "adam")
    response = adam.post(f"/clusters/{cluster.pk}/probe-tokens/", {"name": "rack 7 image"})
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    raw = response.context["new_probe_token"]
    assert raw.startswith(ProbeToken.PREFIX)
    body = response.content.decode()
    assert f"QM_PROBE_TOKEN={raw} python3 node_probe.py --url http://testserver" in body
    token = ProbeToken.objects.get(cluster=cluster)
    assert (token.name, token.key_hash) == ("rack 7 image", hash_token(raw))
    assert raw not in adam.get(f"/clusters/{cluster.pk}/").content.decode()
    assert raw not in json.dumps(list(AuditLog.objects.values("changes", "target_repr")))

    report = {"node": "h100-00001", "gpus": []}
    headers = {"Authorization": f"Bearer {raw}"}
    assert Client().post("/api/v1/probe/health/", report, "application/json", headers=headers).status_code != 401
    assert adam.post(f"/clusters/{cluster.pk}/probe-tokens/{token.pk}/revoke/").status_code == 302
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert AuditLog.objects.get(action="probe_token.revoked").changes == {"cluster": "sim", "name": "rack 7 image"}
    assert Client().post("/api/v1/probe/health/", report, "application/json", headers=headers).status_code == 401
    assert 'badge muted">revoked<' in adam.get(f"/clusters/{cluster.pk}/").content.decode()
    # Revoking twice is harmless and records nothing new.
    adam.post(f"/clusters/{cluster.pk}/probe-tokens/{token.pk}/revoke/")
    assert AuditLog.objects.filter(action="probe_token.revoked").count() == 1


@pytest.mark.parametrize("name", ["", "   ", "x" * 81])
def test_a_bad_probe_token_name_is_400(world: World, clusters: dict[str, Cluster], name: str):
    before = snapshot()
    response = signed_in(world, "adam").post(f"/clusters/{clusters['sim'].pk}/probe-tokens/", {"name": name})
    assert response.status_code == 400
    assert "name" in response.context["probe_token_form"].errors
    assert response.context["new_probe_token"] is None
    assert snapshot() == before


def test_a_token_of_another_cluster_is_404(world: World, clusters: dict[str, Cluster]):
    token, _ = actions.issue_probe_token(world.users["adam"], clusters["sim"], "sim token")
    path = f"/clusters/{clusters['slurm'].pk}/probe-tokens/{token.pk}/revoke/"
    assert signed_in(world, "adam").post(path).status_code == 404
    token.refresh_from_db()
    assert token.revoked_at is None


def test_loopback_endpoints_only_where_allowed(world: World, clusters: dict[str, Cluster], settings: Any) -> None:
    """A cluster on this machine (a Slurm lab) is fine in development; in production it is refused, so an
    admin cannot point the sync at the server's own services."""
    from django.core.exceptions import ValidationError

    from clusters import actions

    def register() -> Cluster:
        return actions.create_cluster(
            world.users["adam"],
            world.org,
            name="Lab",
            slug="lab",
            kind="slurm",
            region="lab",
            endpoint="http://127.0.0.1:17080",
        )

    settings.CLUSTER_ENDPOINTS_ALLOW_LOOPBACK = False
    with pytest.raises(ValidationError) as refused:
        register()
    assert "this server itself" in refused.value.message_dict["endpoint"][0]
    settings.CLUSTER_ENDPOINTS_ALLOW_LOOPBACK = True
    assert register().endpoint.endswith(":17080")
