"""A simulated cluster runs its service replicas' programs on the portal's host: only the installation's operators
register or change one, production runs none unless an operator turns them on, and what a replica runs sees
nothing of the portal's (``clusters/backends/simulated/sandbox.py``).

The ways in that a security review used or could use: the form, the API, the action, an existing cluster
changed (to another kind, or its settings), an organization admin of another organization; then the program
itself, reading the portal's secret key, database, secret files, environment and processes, and another
replica's script (which holds its job token).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.test import Client

from clusters import actions
from clusters.backends.base import InvalidJob
from clusters.backends.simulated import replicas
from clusters.backends.simulated.backend import SimulatedBackend
from clusters.models import Cluster
from tenancy.models import AuditLog
from tests.clusters.factories import simulated_cluster
from tests.clusters.test_service_replicas import Api, replica, wait_for
from tests.conftest import World, api_client

SIMULATED: dict[str, Any] = {
    "name": "Sim",
    "kind": "simulated",
    "endpoint": "",
    "region": "eu",
    "options": {"nodes": 1},
}


def _form(**more: str) -> dict[str, str]:
    return {"name": "Sim", "slug": "", "kind": "simulated", "endpoint": "", "region": "eu", "levels": "",
            "options": '{"nodes": 1}', "preference": "50", **more}  # fmt: skip


@pytest.fixture
def existing(world: World) -> Cluster:
    return simulated_cluster(world.org, "sim-existing", None, nodes=1)


# --- who registers and changes one ---------------------------------------------------------------------------


def test_an_organization_admin_registers_none_by_form_api_or_action(world: World) -> None:
    adam = Client()
    adam.force_login(world.users["adam"])
    kinds = adam.get("/clusters/new/").context["form"].fields["kind"].choices
    assert "simulated" not in [value for value, _ in kinds]
    assert "kubernetes" in [value for value, _ in kinds]
    assert adam.post("/clusters/new/", _form()).status_code == 403
    assert api_client(world.users["adam"]).post("/api/v1/clusters/", SIMULATED, format="json").status_code == 405
    with pytest.raises(PermissionDenied, match="operators"):
        actions.create_cluster(world.users["adam"], world.org, **SIMULATED)
    assert not Cluster.objects.filter(kind="simulated").exists()
    assert not AuditLog.objects.filter(action="cluster.created").exists()


def test_an_admin_of_another_organization_neither_registers_one_nor_reaches_ours(
    world: World, existing: Cluster
) -> None:
    mallory = world.users["mallory"]
    with pytest.raises(PermissionDenied):
        actions.create_cluster(mallory, world.other_org, **SIMULATED)
    client = Client()
    client.force_login(mallory)
    assert client.post("/clusters/new/", _form()).status_code == 403
    assert client.get(f"/clusters/{existing.pk}/edit/").status_code == 404
    assert not Cluster.objects.filter(organization=world.other_org).exists()


def test_an_existing_one_is_changed_by_no_admin_and_no_cluster_becomes_one(world: World, existing: Cluster) -> None:
    adam = world.users["adam"]
    with pytest.raises(PermissionDenied, match="operators"):
        actions.update_cluster(adam, existing, name="Mine now", options={"nodes": 1, "profile": "a100-slurm"})
    client = Client()
    client.force_login(adam)
    assert client.get(f"/clusters/{existing.pk}/edit/").status_code == 403
    assert client.post(f"/clusters/{existing.pk}/edit/", {"name": "Mine now"}).status_code == 403
    slurm = Cluster.objects.create(
        organization=world.org, name="Slurm", slug="slurm", kind="slurm", endpoint="http://s.example:6820"
    )
    with pytest.raises(ValidationError) as caught:
        actions.update_cluster(adam, slurm, kind="simulated")
    assert "kind" in caught.value.message_dict
    existing.refresh_from_db()
    slurm.refresh_from_db()
    assert (existing.name, slurm.kind) == ("sim-existing", "slurm")


def test_the_installations_operator_registers_and_changes_one(world: World, operator: Any) -> None:
    client = Client()
    client.force_login(operator)
    kinds = client.get("/clusters/new/").context["form"].fields["kind"].choices
    assert "simulated" in [value for value, _ in kinds]
    assert client.post("/clusters/new/", _form(organization=world.org.slug)).status_code == 302
    cluster = Cluster.objects.get(kind="simulated")
    actions.update_cluster(operator, cluster, name="Sim renamed")
    cluster.refresh_from_db()
    assert cluster.name == "Sim renamed"


def test_production_runs_none_unless_an_operator_turns_them_on(
    world: World, operator: Any, settings: Any, tmp_path: Path
) -> None:
    settings.SIMULATED_CLUSTERS = False
    with pytest.raises(ValidationError) as caught:
        actions.create_cluster(operator, world.org, **SIMULATED)
    assert "SIMULATED_CLUSTERS" in caught.value.message_dict["kind"][0]
    client = Client()
    client.force_login(operator)
    kinds = client.get("/clusters/new/").context["form"].fields["kind"].choices
    assert "simulated" not in [value for value, _ in kinds]
    # A cluster registered before is left, but runs no replica.
    backend = SimulatedBackend("sim://off", options={"state_file": str(tmp_path / "off.json"), "nodes": 1})
    with pytest.raises(InvalidJob, match="SIMULATED_CLUSTERS"):
        backend.submit(replica("1-1-off", Api()))
    assert not list(Path(settings.SIMULATED_REPLICA_ROOT).glob("*/1-1-off-*"))


def test_production_turns_them_off_by_default(tmp_path: Path) -> None:
    import subprocess
    import sys

    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("DATABASE", "REDIS", "SIMULATED"))},
        "QM_ENV": "production",
        "SECRET_KEY": "x" * 20 + "production-strength-secret-key-0123456789",
        "ALLOWED_HOSTS": "qm.example.org",
        "QM_VAR_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "portal.settings",
    }
    code = "import django; django.setup(); from django.conf import settings; print(settings.SIMULATED_CLUSTERS)"
    shown = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert shown.stdout.split() == ["False"]


# --- what a replica sees -------------------------------------------------------------------------------------

PROBE = r"""
echo "uid=$(id -u)"
for f in "$VAR/secret_key" "$VAR/quartermaster.sqlite3" "$SECRET_FILE"; do
  if cat "$f" 2>/dev/null | grep -q s3cr3t; then echo "READ $f"; else echo "HIDDEN $f"; fi
done
echo "var holds: [$(ls -A "$VAR" 2>/dev/null | tr '\n' ' ')]"
for f in "$ROOT"/*/replica.sh; do
  if [ "$(dirname "$f")" != "$PWD" ] && grep -q qmj_ "$f" 2>/dev/null; then echo "READ other $f"; fi
done
echo "others: [$(ls -A "$ROOT" 2>/dev/null | grep -vx "$(basename "$PWD")" | tr '\n' ' ')]"
echo "portal environ: $(cat /proc/$PORTAL/environ 2>&1 | tr '\0' ' ' | grep -c s3cr3t)"
echo "processes: $(ls /proc | grep -c '^[0-9]')"
env | grep -q s3cr3t && echo "ENV LEAK" || echo "env clean"
exec sleep 60
"""


@pytest.fixture
def host(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """The portal's files, as the embedded defaults keep them, holding secrets, where any local user could pass
    (so that only the isolation keeps a replica out); a secret file named by a ``*_FILE`` setting; a secret in
    the portal's environment."""
    base = Path(tempfile.mkdtemp(prefix="qm-isolation-"))
    base.chmod(0o755)
    var = base / "var"
    var.mkdir(mode=0o755)
    (var / "secret_key").write_text("s3cr3t-key")
    (var / "quartermaster.sqlite3").write_text("s3cr3t-rows")  # 0644, as SQLite makes it
    secret_file = base / "db-password"
    secret_file.write_text("s3cr3t-password")
    settings.VAR_DIR = var
    monkeypatch.setenv("DATABASE_PASSWORD_FILE", str(secret_file))
    monkeypatch.setenv("SECRET_KEY", "s3cr3t-env")
    yield {"var": str(var), "secret_file": str(secret_file)}
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def api() -> Iterator[Api]:
    server = Api()
    yield server
    server.server.shutdown()


def test_a_replica_sees_nothing_of_the_portal_nor_of_other_replicas(
    host: dict[str, str], api: Api, tmp_path: Path
) -> None:
    backend = SimulatedBackend("sim://isolation", options={"state_file": str(tmp_path / "iso.json"), "nodes": 2})
    probe_env = {
        "VAR": host["var"],
        "SECRET_FILE": host["secret_file"],
        "PORTAL": str(os.getpid()),
        "ROOT": str(replicas.root_of(str(tmp_path / "iso.json"))),
    }
    other = replica("7-1-other", api, env={"QM_API_URL": api.url, "QM_JOB_TOKEN": "qmj_other", "QM_JOB_ID": "7"})
    prober = replica(
        "8-1-probe",
        api,
        command=("sh", "-c", PROBE),
        env={"QM_API_URL": api.url, "QM_JOB_TOKEN": "qmj_probe", "QM_JOB_ID": "8", **probe_env},
    )
    try:
        backend.submit(other)
        backend.submit(prober)
        text = wait_for("the probe's findings", lambda: "env " in (t := backend.logs(prober.id).text) and t, 30)
    finally:
        with backend._state() as state:
            jobs = list(state["jobs"].values())
        for job in jobs:
            replicas.forget(job)
    lines = text.splitlines()
    assert f"HIDDEN {host['var']}/secret_key" in lines, text
    assert f"HIDDEN {host['var']}/quartermaster.sqlite3" in lines, text
    assert f"HIDDEN {host['secret_file']}" in lines, text
    assert "var holds: []" in lines, text
    assert not [line for line in lines if line.startswith("READ")], text
    assert "others: []" in lines, text  # its own directory only
    assert "portal environ: 0" in lines, text
    assert "env clean" in lines, text
    processes = int(next(line for line in lines if line.startswith("processes:")).split()[1])
    assert processes < 20, text  # its own few, not the host's
    if os.geteuid() == 0:
        assert "uid=65534" in lines, text  # nobody, not root


def test_the_portals_files_are_its_own(settings: Any) -> None:
    """Nobody else on the machine reads QM_VAR_DIR (SQLite makes its files readable by all)."""
    assert os.stat(settings.VAR_DIR).st_mode & 0o077 == 0
