"""The one table of expected answers: every route, the methods tried on it, and the answer per relation.

A row is ``row(route, method, target, "answers", ...)``:

- ``route`` is the URL name (``api:`` for the REST API; see ``test_matrix.test_every_route_has_a_row``).
- ``target`` names the object of an organization that fills the route's ``pk`` (a key of ``Side.objects``,
  or ``"org"`` for the organization itself, named in the body or the query). The row then runs against both
  organizations' objects, for every user of both. With no target, every user acts in their own organization
  and the outsider's column is ``-``.
- ``answers`` gives, in the order of ``COLUMNS`` — anonymous, the home team's researcher (who owns the
  researcher's objects), its lead, a researcher of a neighbouring team, finance, admin, procurement (who plans
  capacity and sees no team's work), an outsider with a team role, an outsider of finance, an outsider admin,
  an outsider of procurement — the status expected. ``in`` is the sign-in refusal: a
  redirect to the sign-in page (pages; ``next`` set) or 401 (API). ``-``: not applicable.
- ``body`` and ``query`` are what is sent, built from the side (``Side``) acted on: valid, so that an answer
  of 400 cannot hide a missing permission check.
- ``perm``: the permission of the policy (``tenancy/policy.py``) the route asks for a change. Its columns
  written ``p`` are computed from the policy's table: ``ok`` (the route's answer when it is allowed) where the
  column's roles grant it, 403 where they do not (``owner``: the column that owns the target, for the
  permissions an owner holds). The answers written out are what the policy does not decide: the sign-in
  refusal, a 404 for an object the user may not see at all, a 400 for a team that is not among the choices.

Where the answer is a refusal of a change, the test also checks that nothing was written; and that the same
change, where the table allows it, does write (``writes=False`` for the few that never do, like a preview).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.utils import timezone

from clusters.models import ElasticPool
from edge.models import Device, DeviceGroup, Rollout
from registry.models import Model, ModelVersion
from tenancy import policy
from tenancy.scoping import Role
from tests.authz.world import H100, PASSWORD, Rel, Side, canary

Fill = Callable[[Side], dict[str, Any]]

#: Answer columns, in the order the table writes them. Outsiders are split by their role: a page for
#: organization roles refuses an outsider with a team role (403) before it looks at what is asked for.
COLUMNS = (
    Rel.ANON, Rel.RESEARCHER, Rel.LEAD, Rel.NEIGHBOUR, Rel.FINANCE, Rel.ADMIN, Rel.PROCUREMENT,
    "out", "ofin", "oadm", "oproc",
)  # fmt: skip


@dataclass(frozen=True)
class Row:
    route: str
    method: str
    target: str | None
    answers: dict[str, str]
    url: Fill | None = None
    body: Fill | None = None
    query: Fill | None = None
    #: Whether the change, when allowed, writes to the database (a preview does not).
    writes: bool = True
    #: The policy's permission the route asks (its ``p`` columns were computed from it).
    perm: str | None = None

    @property
    def api(self) -> bool:
        return self.route.startswith("api:")


@dataclass(frozen=True)
class Family:
    """Routes matched by a name prefix rather than one by one (the Django admin: staff only, and none of the
    roles is staff)."""

    prefix: str
    answers: dict[str, str]
    exceptions: dict[str, dict[str, str]] = field(default_factory=dict)


#: The roles each column holds in the home team and over the organization, as seen from the side's objects.
HELD: dict[str, tuple[set[Role], set[Role]]] = {
    Rel.RESEARCHER: ({Role.RESEARCHER}, set()),
    Rel.LEAD: ({Role.LEAD}, set()),
    Rel.NEIGHBOUR: (set(), set()),  # their role is in another team
    Rel.FINANCE: (set(), {Role.FINANCE}),
    Rel.ADMIN: (set(), {Role.ADMIN}),
    Rel.PROCUREMENT: (set(), {Role.PROCUREMENT}),
    "out": (set(), set()),  # outsiders hold nothing in this organization
    "ofin": (set(), set()),
    "oadm": (set(), set()),
    "oproc": (set(), set()),
}


def decided(perm: str, column: str, ok: str, owner: str | None = None) -> str:
    """The answer the policy gives ``column`` for ``perm``: ``ok`` or 403."""
    team, org = HELD[column]
    return ok if policy.PERMISSIONS[perm].decide(team, org, owns=column == owner) else "403"


def policy_grid() -> str:
    """The policy's table in words, one permission a line: what ``policy.txt`` holds, reviewed. A change to the
    table (and so to every answer computed from it) shows there first."""
    lines = []
    for name, grant in sorted(policy.PERMISSIONS.items()):
        parts = [
            f"{where}: {', '.join(sorted(roles))}"
            for where, roles in (("team", grant.team), ("org", grant.org))
            if roles
        ]
        if grant.owner:
            parts.append(
                f"owner ({grant.owner})" + (f" while {', '.join(sorted(grant.owner_team))}" if grant.owner_team else "")
            )
        parts.append("superusers" if grant.superuser else "not superusers")
        lines.append(f"{name:24} {'; '.join(parts)}")
    return "\n".join(lines) + "\n"


def row(
    route: str,
    method: str,
    target: str | None,
    answers: str,
    *,
    perm: str | None = None,
    ok: str | None = None,
    owner: str | None = None,
    **fills: Any,
) -> Row:
    tokens = answers.split()
    assert len(tokens) == len(COLUMNS), f"{route} {method}: {len(tokens)} answers for {len(COLUMNS)} columns"
    assert ("p" in tokens) == (perm is not None and ok is not None), (
        f"{route} {method}: p columns, perm and ok go together"
    )
    if perm is not None and ok is not None:
        tokens = [decided(perm, c, ok, owner) if t == "p" else t for c, t in zip(COLUMNS, tokens, strict=True)]
    return Row(route, method, target, dict(zip(COLUMNS, tokens, strict=True)), perm=perm, **fills)


def _pk(key: str) -> Fill:
    return lambda s: {"pk": s[key].pk}


def _service(s: Side) -> dict[str, Any]:
    return {"organization": s.home.organization.slug, "team": s.home.slug, "service": s["service"].name, "path": ""}


def _team(s: Side) -> dict[str, Any]:
    return {"pk": s.home.pk}


def _team_query(s: Side) -> dict[str, Any]:
    return {"team": s.home.pk}


def _org_query(s: Side) -> dict[str, Any]:
    return {"organization": s.org.slug}


# --- bodies ---------------------------------------------------------------------------------------------


def job_form(s: Side) -> dict[str, Any]:
    return {
        "team": s.home.pk, "choices_team": s.home.pk, "project": "", "name": "matrix run", "tier": s["tier"].pk,
        "preemptible": "on", "accelerator_types": [H100], "accelerators": 1, "accelerator_milli": 1000, "workers": 1,
        "cpu_cores": "4", "memory_gib": "16", "topology_level": "", "topology_mode": "required",
        "time_limit_hours": 1, "time_limit_minutes": 0, "max_retries": 3, "checkpoint_location": "",
        "image": "ghcr.io/lab/train:1", "command": "python train.py", "script": "", "env": "",
        "max_price_per_hour": "", "idempotency_key": "",
    }  # fmt: skip


def job_json(s: Side) -> dict[str, Any]:
    return {"team": s.home.pk, "name": "matrix run", "time_limit": "1h", "image": "ghcr.io/lab/train:1",
            "command": ["python", "train.py"]}  # fmt: skip


def cluster_form(s: Side) -> dict[str, Any]:
    return {"name": "Matrix kube", "slug": "", "kind": "kubernetes", "endpoint": "https://k8s.example.org:6443",
            "region": "eu", "levels": "", "options": '{"namespace": "matrix"}', "preference": "50",
            "kubernetes_token": "matrix-bearer", "kubernetes_ca_cert": ""}  # fmt: skip


def simulated_cluster_form(s: Side) -> dict[str, Any]:
    return {"name": "Matrix sim", "slug": "", "kind": "simulated", "endpoint": "sim://matrix", "region": "eu",
            "levels": "", "options": '{"nodes": 1}', "preference": "50"}  # fmt: skip


def cluster_edit_form(s: Side) -> dict[str, Any]:
    c = s["cluster"]
    return {"name": "Matrix renamed", "slug": c.slug, "endpoint": c.endpoint, "region": c.region, "levels": "",
            "options": '{"profile": "h100-onprem", "nodes": 2}', "preference": "60"}  # fmt: skip


def maintenance_form(s: Side) -> dict[str, Any]:
    start = timezone.localtime() + timedelta(days=5)
    minute = "%Y-%m-%dT%H:%M"
    return {"starts_at": start.strftime(minute), "ends_at": (start + timedelta(hours=4)).strftime(minute),
            "reason": "matrix: firmware", "nodes": s["node"].name, "drain_ahead_minutes": "60"}  # fmt: skip


def price(s: Side) -> dict[str, Any]:
    return {"cluster": s["cluster"].slug, "flavor": H100, "capacity_type": "on_demand",
            "effective_from": "2001-01-01", "hourly_rate": "5"}  # fmt: skip


def intensity(s: Side) -> dict[str, Any]:
    return {"region": "europe-west4", "effective_from": "2001-01-01", "grams_per_kwh": "250"}


def plan_change(s: Side) -> dict[str, Any]:
    return {"flavor": s["flavor"].name, "kind": "order", "accelerators": "16", "ordered_on": "2001-01-01",
            "lead_days": "90", "note": "matrix"}  # fmt: skip


def overhead(s: Side) -> dict[str, Any]:
    return {"name": "Storage", "amount": "500", "starts": "2001-01-01", "ends": ""}


def what_if(s: Side) -> dict[str, Any]:
    return {"cluster": s["cluster"].pk, "flavor": s["flavor"].pk, "nodes": 2, "days": 30}


def study(s: Side) -> dict[str, Any]:
    return {
        "name": "matrix",
        "days": 7,
        "scenarios": [{"cluster": s["cluster"].slug, "flavor": s["flavor"].name, "nodes": 2}],
    }


def study_form(s: Side) -> dict[str, Any]:
    return {"organization": s.org.slug, "name": "matrix", "days": "7", "seeds": "1",
            "scenarios": f"buy 2 {s['flavor'].name} in {s['cluster'].slug}"}  # fmt: skip


def service_form(s: Side) -> dict[str, Any]:
    return {
        "team": s.home.pk, "name": "matrix-new", "image": "serve:1", "command": "serve", "env": "", "port": "0",
        "health_path": "/health", "accelerators": "0", "cpu": "1", "memory_gib": "1", "min_replicas": "1",
        "max_replicas": "2", "metric": "rps", "target": "10", "scale_to_zero_after": "", "model_version": "",
    }  # fmt: skip


def service_edit_form(s: Side) -> dict[str, Any]:
    body = {k: v for k, v in service_form(s).items() if k not in ("team", "name")}
    return {**body, "max_replicas": "3"}


def service_json(s: Side) -> dict[str, Any]:
    return {
        "team": s.home.pk, "name": "matrix-new", "image": "serve:1", "command": ["serve"], "cpu": 1, "memory_gib": 1,
    }  # fmt: skip


def reason(s: Side) -> dict[str, Any]:
    return {"reason": "matrix: checking who may"}


def login(s: Side) -> dict[str, Any]:
    return {"username": s.users[Rel.RESEARCHER].username, "password": PASSWORD}


def new_member(s: Side) -> dict[str, Any]:
    # The neighbouring team's researcher: a user of the same organization, whom a lead may add.
    return {"username": s.users[Rel.NEIGHBOUR].username, "role": "researcher"}


def api_member(s: Side) -> dict[str, Any]:
    return {**new_member(s), "organization": s.org.pk, "team": s.home.pk}


def stranger(s: Side) -> dict[str, Any]:
    # A user of the other organization: nobody here may add them, and the answer is the one for a name that
    # does not exist (400 naming the username), so that it tells nothing about who exists elsewhere (that the
    # two answers are the same, word for word, is tests/tenancy/test_member_adding.py's).
    return {"username": s["stranger"].username, "role": "researcher"}


def api_stranger(s: Side) -> dict[str, Any]:
    return {**stranger(s), "organization": s.org.pk, "team": s.home.pk}


def service_account(s: Side) -> dict[str, Any]:
    return {"name": "matrix pipeline", "scope": "submit", "expires_in_days": "30"}


def group_mapping(s: Side) -> dict[str, Any]:
    return {"group": "matrix-leads", "role": "lead", "team": s.home.pk}


def project_quota(s: Side) -> dict[str, Any]:
    return {"target": f"project:{s['project'].pk}", "flavor": H100, "resource": "accelerator", "nominal": "2",
            "borrowing_limit": "", "lending_limit": "", "reason": "matrix: a sub-quota"}  # fmt: skip


def lending(s: Side) -> dict[str, Any]:
    return {"flavor": H100, "resource": "accelerator", "lending_limit": "4", "reason": "matrix: lend"}


def cohort_quota(s: Side) -> dict[str, Any]:
    return {"flavor": H100, "resource": "accelerator", "nominal": "16", "reason": "matrix: the pool"}


def project_budget(s: Side) -> dict[str, Any]:
    return {"target": f"project:{s['project'].pk}", "accelerator_hours": "100", "amount": "", "recipients": "",
            "webhook_url": "", "reason": "matrix: the project's share"}  # fmt: skip


def limit(s: Side) -> dict[str, Any]:
    return {"accelerators": "4", "reason": "matrix: share the pool"}


def team_cell(key: str) -> Fill:
    return lambda s: {"pk": s.home.pk, "queue": s["queue"].pk} if key == "queue" else {
        "pk": s.home.pk, "user": s.users[Rel.RESEARCHER].pk}  # fmt: skip


# --- elastic pools: the side's pool is made on first use, on its cluster ------------------------------------


def elastic_pool(s: Side) -> ElasticPool:
    """The side's elastic pool on its cluster, made once (named with its canary)."""
    if "elastic_pool" not in s.objects:
        s.objects["elastic_pool"] = ElasticPool.objects.create(
            cluster=s["cluster"], name=f"{canary(s.slug)}-burst", accelerator=s["flavor"], node_accelerators=8,
            node_cpu=110_000, node_memory=2_000_000, max_nodes=4, monthly_budget=1000,
        )  # fmt: skip
    pool: ElasticPool = s.objects["elastic_pool"]
    return pool


def _pools(s: Side) -> dict[str, Any]:
    """The side's cluster, with its pool made (so that the list shows it)."""
    return {"pk": elastic_pool(s).cluster_id}


def _pool_page(s: Side) -> dict[str, Any]:
    return {"pk": s["cluster"].pk, "pool_pk": elastic_pool(s).pk}


def _pool_api(s: Side) -> dict[str, Any]:
    return {"pk": s["cluster"].pk, "pool_id": elastic_pool(s).pk}


def pool_form(s: Side) -> dict[str, Any]:
    return {"name": "matrix-pool", "flavor": H100, "capacity_type": "spot", "node_accelerators": "8",
            "node_cpu": "110", "node_memory_gib": "1900", "min_nodes": "0", "max_nodes": "4", "lead_time": "10m",
            "idle_release": "30m", "monthly_budget": "500", "enabled": "on"}  # fmt: skip


def pool_json(s: Side) -> dict[str, Any]:
    return {"name": "matrix-pool", "flavor": H100, "node_accelerators": 8, "node_cpu": "110",
            "node_memory_gib": "1900", "max_nodes": 4}  # fmt: skip


# --- edge devices and rollouts: their objects are made on first use (each side's, in its home team) --------


def edge(s: Side, key: str) -> Any:
    """The side's edge objects, made once: a group with a device and a running rollout, a second group with a
    device and none (to start one on), a stored version of the home team's model."""
    if "edge_group" not in s.objects:
        now = timezone.now()
        home = s.home
        model = Model.objects.create(team=home, name=f"matrix-{home.slug}", created_at=now)
        version = ModelVersion.objects.create(
            model=model, version="1", artifact_uri="upload:matrix.bin", size_bytes=4, sha256="a" * 64,
            stored=True, published_at=now, notes=canary(home.slug),
        )  # fmt: skip
        for name in ("edge_group", "edge_idle_group"):
            group = DeviceGroup.objects.create(team=home, name=f"{canary(home.slug)} {name}")
            s.objects[name] = group
            s.objects[name.replace("group", "device")] = Device.objects.create(
                team=home, group=group, name=f"{canary(home.slug)}-{name}", enrolled_at=now, last_seen_at=now,
                credential_hash=f"{name}{home.pk}".ljust(64, "0"), credential_prefix="qmdev_matrix",
            )  # fmt: skip
        s.objects["edge_version"] = version
        s.objects["edge_rollout"] = Rollout.objects.create(
            team=home, group=s.objects["edge_group"], version=version, phases=[{"percent": 100}],
            phase_started_at=now, failure_threshold=1, created_at=now,
        )  # fmt: skip
    return s.objects[key]


def _edge_pk(key: str) -> Fill:
    return lambda s: {"pk": edge(s, key).pk}


def _rollout_verb(verb: str) -> Fill:
    return lambda s: {"pk": edge(s, "edge_rollout").pk, "verb": verb}


def _start_body(s: Side) -> dict[str, Any]:
    return {"group": edge(s, "edge_idle_group").pk, "version": edge(s, "edge_version").pk}


# --- the table ------------------------------------------------------------------------------------------
# Columns: anonymous, the home team's researcher, its lead, a neighbouring team's researcher, finance, admin,
# procurement; outsiders: with a team role, of finance, admin, procurement.
#                                                       ano res led nbr fin adm pro out ofi oad opr
ROWS: list[Row] = [
    # Sign-in, home, health
    row("login", "GET", None,                           "200 302 302 302 302 302 302 -   -   -   -"),
    row("login", "POST", None,                          "302 302 302 302 302 302 302 -   -   -   -", body=login),
    row("logout", "GET", None,                          "405 405 405 405 405 405 405 -   -   -   -"),
    row("logout", "POST", None,                         "302 302 302 302 302 302 302 -   -   -   -"),
    row("home", "GET", None,                            "in  200 200 200 200 200 200 -   -   -   -"),
    row("healthz", "GET", None,                         "200 200 200 200 200 200 200 -   -   -   -"),
    # Teams, projects, members
    row("team-list", "GET", None,                       "in  200 200 200 200 200 200 -   -   -   -"),
    row("team-detail", "GET", "team",                   "in  200 200 404 200 200 404 404 404 404 404", url=_team),
    row("project-create", "GET", "team",                "in  405 405 405 405 405 405 405 405 405 405", url=_team),
    row("project-create", "POST", "team",               "in  p   p   404 p   p   404 404 404 404 404",
        perm="project.create", ok="302", url=_team,
        body=lambda s: {"name": "Matrix new"}),
    row("member-add", "POST", "team",                   "in  p   p   404 p   p   404 404 404 404 404",
        perm="member.add", ok="302", url=_team,
        body=new_member),
    row("member-add", "POST", "team",                   "in  p   p   404 p   p   404 404 404 404 404",
        perm="member.add", ok="400", url=_team,
        body=stranger),
    row("member-role", "POST", "membership",            "in  p   p   404 p   p   404 404 404 404 404",
        perm="member.role.set", ok="302",
        body=lambda s: {"role": "lead"}),
    row("member-role", "POST", "lead_membership",       "in  p   403 404 p   p   404 404 404 404 404",
        perm="member.role.set", ok="302",
        body=lambda s: {"role": "researcher"}),
    row("member-remove", "POST", "membership",          "in  p   p   404 p   p   404 404 404 404 404",
        perm="member.remove", ok="302"),
    row("member-remove", "POST", "finance_membership",  "in  404 404 404 p   p   404 404 404 404 404",
        perm="member.remove", ok="302"),
    # A service account's role goes with the account only (revoked below): changing or removing it is a 400.
    row("member-role", "POST", "sa_membership",         "in  p   p   404 p   p   404 404 404 404 404",
        perm="member.role.set", ok="400",
        body=lambda s: {"role": "lead"}),
    row("member-remove", "POST", "sa_membership",       "in  p   p   404 p   p   404 404 404 404 404",
        perm="member.remove", ok="400"),
    # API tokens (each user's own)
    row("token-list", "GET", None,                      "in  200 200 200 200 200 200 -   -   -   -"),
    row("token-list", "POST", None,                     "in  200 200 200 200 200 200 -   -   -   -",
        body=lambda s: {"name": "matrix laptop", "expires_in_days": "30"}),
    row("token-revoke", "POST", "token",                "in  p   404 404 404 404 404 404 404 404 404",
        perm="token.revoke", ok="302", owner="res"),
    row("audit-log", "GET", None,                       "in  p   p   p   p   p   p   -   -   -   -",
        perm="audit.read", ok="200"),
    # Notification settings: each user's own, and a team's defaults (its leads set them)
    row("notification-settings", "GET", None,          "in  200 200 200 200 200 200 -   -   -   -"),
    row("notification-settings", "POST", None,          "in  302 302 302 302 302 302 -   -   -   -",
        body=lambda s: {"event_failed": "email", "event_started": "off", "webhook_url": "", "wait_hours": "6"}),
    row("notification-send-test", "GET", None,          "in  405 405 405 405 405 405 -   -   -   -"),
    row("notification-send-test", "POST", None,         "in  302 302 302 302 302 302 -   -   -   -"),
    row("team-notifications", "GET", "team",            "in  200 200 404 200 200 404 404 404 404 404", url=_team),
    row("team-notifications", "POST", "team",           "in  p   p   404 p   p   404 404 404 404 404",
        perm="notification.defaults.set", ok="302", url=_team,
        body=lambda s: {"event_succeeded": "email", "webhook_url": "", "wait_hours": "12"}),
    row("audit-log-csv", "GET", None,                   "in  p   p   p   p   p   p   -   -   -   -",
        perm="audit.read", ok="200"),
    # The SLO page: organization admins, each seeing their own organization's
    row("slo", "GET", None,                             "in  p   p   p   p   p   p   -   -   -   -",
        perm="slo.view", ok="200"),
    # Service accounts: a team's leads and the organization's admins make and revoke them
    row("service-account-create", "POST", "team",       "in  p   p   404 p   p   404 404 404 404 404",
        perm="service_account.create", ok="200", url=_team,
        body=service_account),
    row("service-account-revoke", "POST", "service_account",
                                                        "in  404 p   404 404 p   404 404 404 404 404",
        perm="service_account.revoke", ok="302"),
    # Sign-in through the identity provider: off unless configured (tests/tenancy/test_oidc_signin.py runs it on)
    row("oidc-authenticate", "GET", None,               "404 404 404 404 404 404 404 -   -   -   -"),
    row("oidc-callback", "GET", None,                   "404 404 404 404 404 404 404 -   -   -   -",
        query=lambda s: {"code": "matrix", "state": "matrix"}),
    row("oidc-callback", "POST", None,                  "405 405 405 405 405 405 405 -   -   -   -"),
    # The provider's groups mapped onto roles: read by the organization's admins, changed by the installation's
    row("identity", "GET", None,                        "in  p   p   p   p   p   p   -   -   -   -",
        perm="identity.view", ok="200"),
    row("group-mapping-create", "POST", "org",          "in  p   p   p   p   p   p   404 404 404 404",
        perm="group_mapping.set", ok="302",
        url=lambda s: {"pk": s.org.pk}, body=group_mapping),
    row("group-mapping-remove", "POST", "group_mapping","in  404 404 404 404 p   404 404 404 404 404",
        perm="group_mapping.set", ok="302"),
    # Clusters and nodes
    row("cluster-list", "GET", None,                    "in  200 200 200 200 200 200 -   -   -   -"),
    row("cluster-create", "GET", None,                  "in  p   p   p   p   p   p   -   -   -   -",
        perm="cluster.create", ok="200"),
    row("cluster-create", "POST", None,                 "in  p   p   p   p   p   p   -   -   -   -",
        perm="cluster.create", ok="302", body=cluster_form),
    # A simulated cluster runs its replicas on the portal's host: the installation's operators only.
    row("cluster-create", "POST", None,                 "in  p   p   p   p   p   p   -   -   -   -",
        perm="cluster.simulated.set", ok="302", body=simulated_cluster_form),
    row("cluster-detail", "GET", "cluster",             "in  200 200 200 200 200 404 404 404 404 404"),
    row("cluster-edit", "GET", "cluster",               "in  p   p   p   p   p   404 404 404 404 404",
        perm="cluster.simulated.set", ok="200"),
    row("cluster-edit", "POST", "cluster",              "in  p   p   p   p   p   404 404 404 404 404",
        perm="cluster.simulated.set", ok="302",
        body=cluster_edit_form),
    row("cluster-sync", "POST", "cluster",              "in  p   p   p   p   p   404 404 404 404 404",
        perm="cluster.change", ok="302"),
    row("cluster-maintenance", "POST", "cluster",       "in  p   p   p   p   p   404 404 404 404 404",
        perm="maintenance.plan", ok="302",
        body=maintenance_form),
    row("probe-token-create", "POST", "cluster",        "in  p   p   p   p   p   404 404 404 404 404",
        perm="probe_token.issue", ok="200",
        body=lambda s: {"name": "rack 9"}),
    row("probe-token-revoke", "POST", "probe_token",    "in  p   p   p   p   p   404 404 404 404 404",
        perm="probe_token.revoke", ok="302",
        url=lambda s: {"pk": s["cluster"].pk, "token_pk": s["probe_token"].pk}),
    row("cluster-live", "GET", "cluster",               "in  200 200 200 200 200 404 404 404 404 404"),
    # Elastic pools: their admins add and change them (the cluster's page lists them to every member).
    row("elastic-pool-create", "GET", "cluster",        "in  p   p   p   p   p   404 404 404 404 404",
        perm="cluster.change", ok="200"),
    row("elastic-pool-create", "POST", "cluster",       "in  p   p   p   p   p   404 404 404 404 404",
        perm="cluster.change", ok="302", body=pool_form),
    row("elastic-pool-edit", "GET", "cluster",          "in  p   p   p   p   p   404 404 404 404 404",
        perm="cluster.change", ok="200", url=_pool_page),
    row("elastic-pool-edit", "POST", "cluster",         "in  p   p   p   p   p   404 404 404 404 404",
        perm="cluster.change", ok="302", url=_pool_page,
        body=lambda s: {**pool_form(s), "name": elastic_pool(s).name, "max_nodes": "6"}),
    row("cluster-live-tiles", "GET", "cluster",         "in  200 200 200 200 200 404 404 404 404 404"),
    row("node-detail", "GET", "node",                   "in  200 200 200 200 200 404 404 404 404 404"),
    row("node-cordon", "POST", "node",                  "in  p   p   p   p   p   404 404 404 404 404",
        perm="node.drain", ok="302", body=reason),
    row("node-drain", "POST", "node",                   "in  p   p   p   p   p   404 404 404 404 404",
        perm="node.drain", ok="302", body=reason),
    row("node-resume", "POST", "drained_node",          "in  p   p   p   p   p   404 404 404 404 404",
        perm="node.drain", ok="302", body=reason),
    # Jobs and queues
    row("job-list", "GET", None,                        "in  200 200 200 200 200 200 -   -   -   -"),
    row("job-rows", "GET", None,                        "in  200 200 200 200 200 200 -   -   -   -"),
    row("job-new", "GET", None,                         "in  200 200 200 403 200 403 -   -   -   -"),
    row("job-new", "POST", "team",                      "in  p   p   400 p   p   p   400 403 400 403",
        perm="job.submit", ok="302", body=job_form),
    row("job-preview", "POST", "team",                  "in  p   p   200 p   p   p   200 403 200 403",
        perm="job.submit", ok="200", body=job_form,
        writes=False),
    # Services answer at the data plane (tests/serving/test_endpoint.py); the portal's /serve/ tells everyone so,
    # the same way, reading nothing.
    row("serve-endpoint", "GET", "service",             "404 404 404 404 404 404 404 404 404 404 404", url=_service),
    row("job-detail", "GET", "job",                     "in  200 200 404 200 200 404 404 404 404 404"),
    row("job-debug", "GET", "job",                      "in  200 200 404 200 200 404 404 404 404 404"),
    row("job-state", "GET", "job",                      "in  200 200 404 200 200 404 404 404 404 404"),
    row("job-output", "GET", "job",                     "in  200 200 404 200 200 404 404 404 404 404"),
    row("job-utilization", "GET", "job",                "in  200 200 404 200 200 404 404 404 404 404"),
    # A team's least efficient jobs: its leads, finance and admins (the team is a 404 to whom cannot see it).
    row("team-efficiency", "GET", "team",               "in  p   p   404 p   p   404 404 404 404 404",
        perm="efficiency.read", ok="200", url=_team, writes=False),
    # The model registry: a team's models; publishing from a finished job (its latest checkpoint)
    row("model-list", "GET", None,                      "in  200 200 200 200 200 200 -   -   -   -"),
    row("model-detail", "GET", "model",                 "in  200 200 404 200 200 404 404 404 404 404"),
    row("model-publish", "GET", "succeeded_job",        "in  p   p   404 p   p   404 404 404 404 404",
        perm="model.create", ok="200", url=lambda s: {}, query=lambda s: {"job": s["succeeded_job"].pk}),
    row("model-publish", "POST", "succeeded_job",       "in  p   p   404 p   p   404 404 404 404 404",
        perm="model.publish", ok="302", url=lambda s: {}, query=lambda s: {"job": s["succeeded_job"].pk},
        body=lambda s: {"team": s.home.pk, "model": s["model"].name, "version": "", "metrics": '{"acc": 0.5}',
                        "notes": ""}),
    row("job-cancel", "POST", "job",                    "in  p   p   404 p   p   404 404 404 404 404",
        perm="job.cancel", ok="302", owner="res", body=reason),
    row("job-cancel", "POST", "lead_job",               "in  p   p   404 p   p   404 404 404 404 404",
        perm="job.cancel", ok="302", owner="lead", body=reason),
    row("job-preempt", "POST", "running_job",           "in  p   p   404 p   p   404 404 404 404 404",
        perm="job.preempt", ok="302", body=reason),
    row("job-requeue", "POST", "failed_job",            "in  p   p   404 p   p   404 404 404 404 404",
        perm="job.requeue", ok="302", body=reason),
    row("job-clone", "GET", "job",                      "in  p   p   404 p   p   404 404 404 404 404",
        perm="job.submit", ok="200"),
    row("array-detail", "GET", "array",                 "in  200 200 404 200 200 404 404 404 404 404"),
    row("array-cancel", "POST", "array",                "in  p   p   404 p   p   404 404 404 404 404",
        perm="array.cancel", ok="302", owner="res", body=reason),
    row("array-requeue", "POST", "array",               "in  p   p   404 p   p   404 404 404 404 404",
        perm="array.requeue", ok="302", owner="res"),
    # An interactive session opens for its submitter only (a notebook runs as them); this job is no session, so
    # the submitter is sent back to its page (302) where everyone else who may see it is refused.
    row("job-open", "GET", "job",                       "in  p   p   404 p   p   404 404 404 404 404",
        perm="job.session.open", ok="302", owner="res", writes=False),
    # Services: a team's members create them; their creator, the team's lead and admins change them.
    row("service-list", "GET", None,                    "in  200 200 200 200 200 200 -   -   -   -"),
    row("service-new", "GET", None,                     "in  200 200 200 403 200 403 -   -   -   -"),
    row("service-new", "POST", "team",                  "in  p   p   400 p   p   p   400 403 400 403",
        perm="service.create", ok="302", body=service_form),
    row("service-detail", "GET", "service",             "in  200 200 404 200 200 404 404 404 404 404"),
    row("service-edit", "GET", "service",               "in  p   p   404 p   p   404 404 404 404 404",
        perm="service.change", ok="200", owner="res", writes=False),
    row("service-edit", "POST", "service",              "in  p   p   404 p   p   404 404 404 404 404",
        perm="service.change", ok="302", owner="res", body=service_edit_form),
    row("service-scale", "POST", "service",             "in  p   p   404 p   p   404 404 404 404 404",
        perm="service.change", ok="302", owner="res", body=lambda s: {"min_replicas": "1", "max_replicas": "3"}),
    row("service-stop", "POST", "service",              "in  p   p   404 p   p   404 404 404 404 404",
        perm="service.change", ok="302", owner="res"),
    row("service-start", "POST", "stopped_service",     "in  p   p   404 p   p   404 404 404 404 404",
        perm="service.change", ok="302", owner="res"),
    row("service-rollback", "POST", "service",          "in  p   p   404 p   p   404 404 404 404 404",
        perm="service.change", ok="302", owner="res"),
    row("queue-list", "GET", None,                      "in  200 200 200 200 200 200 -   -   -   -"),
    row("queue-rows", "GET", None,                      "in  200 200 200 200 200 200 -   -   -   -"),
    row("queue-detail", "GET", "queue",                 "in  200 200 404 200 200 404 404 404 404 404"),
    row("queue-state", "GET", "queue",                  "in  200 200 404 200 200 404 404 404 404 404"),
    # Quotas, budgets and member limits of a team
    row("team-quotas", "GET", "team",                   "in  200 200 404 200 200 404 404 404 404 404", url=_team),
    row("team-quota-chart", "GET", "team",              "in  200 200 404 200 200 404 404 404 404 404", url=_team),
    row("team-quota-history", "GET", "team",            "in  200 200 404 200 200 404 404 404 404 404", url=_team),
    row("team-quota-new", "POST", "team",               "in  p   p   404 p   p   404 404 404 404 404",
        perm="quota.project.set", ok="302", url=_team,
        body=project_quota),
    row("team-quota-cell", "GET", "queue",              "in  200 200 404 200 200 404 404 404 404 404",
        url=team_cell("queue"), query=lambda s: {"flavor": H100}),
    row("team-quota-cell", "POST", "queue",             "in  p   p   404 p   p   404 404 404 404 404",
        perm="quota.lend", ok="200",
        url=team_cell("queue"), body=lending),
    row("team-queue-policy", "GET", "queue",            "in  200 200 404 200 200 404 404 404 404 404",
        url=team_cell("queue")),
    row("team-queue-policy", "POST", "queue",           "in  p   p   404 p   p   404 404 404 404 404",
        perm="queue.flavor_order.set", ok="200",
        url=team_cell("queue"), body=lambda s: {"flavor_order": H100, "reason": "matrix: H100 first"}),
    row("team-budgets", "GET", "team",                  "in  200 200 404 200 200 404 404 404 404 404", url=_team),
    row("team-budgets", "POST", "team",                 "in  p   p   404 p   p   404 404 404 404 404",
        perm="budget.project.set", ok="302", url=_team,
        body=project_budget),
    row("team-member-limit", "GET", "member_limit",     "in  200 200 404 200 200 404 404 404 404 404",
        url=team_cell("user")),
    row("team-member-limit", "POST", "member_limit",    "in  p   p   404 p   p   404 404 404 404 404",
        perm="member_limit.set", ok="200",
        url=team_cell("user"), body=limit),
    row("team-capacity-ask", "POST", "team",            "in  p   p   404 p   p   404 404 404 404 404",
        perm="capacity.request", ok="302", url=_team,
        body=lambda s: {"kind": "quota", "flavor": H100, "accelerators": "2", "reason": "matrix"}),
    row("team-capacity-withdraw", "POST", "capacity_request", "in  p   p   404 p   p   404 404 404 404 404",
        perm="capacity.request", ok="302",
        url=lambda s: {"pk": s.home.pk, "request_id": s["capacity_request"].pk}, body=lambda s: {"reason": "matrix"}),
    # The organization's quotas and cohorts
    row("org-quotas", "GET", None,                      "in  p   p   p   p   p   p   -   -   -   -",
        perm="quota.org.view", ok="200"),
    row("cohort-create", "POST", "org",                 "in  p   p   p   p   p   p   403 404 404 403",
        perm="cohort.set", ok="302",
        body=lambda s: {"organization": s.org.pk, "name": "matrix pool", "parent": "", "reason": "matrix: a pool"}),
    row("capacity-decide", "POST", "capacity_request",  "in  p   p   404 p   p   404 404 404 404 404",
        perm="capacity.decide", ok="302", url=lambda s: {"request_id": s["capacity_request"].pk},
        body=lambda s: {"reason": "matrix", "decision": "refuse"}),
    row("fair-share", "POST", "org",                    "in  p   p   p   p   p   p   403 404 404 403",
        perm="fair_share.set", ok="302",
        body=lambda s: {"organization": s.org.pk, "half_life_days": "2", "usage_weight": "1", "reason": "matrix"}),
    row("cohort-quota-new", "POST", "org",              "in  p   p   p   p   p   p   403 404 404 403",
        perm="cohort.quota.set", ok="302",
        body=lambda s: {"organization": s.org.pk, "cohort": s["cohort"].pk, **cohort_quota(s)}),
    row("cohort-quota-cell", "GET", "cohort",           "in  200 200 200 200 200 404 404 404 404 404",
        query=lambda s: {"flavor": H100}),
    row("cohort-quota-cell", "POST", "cohort",          "in  p   p   p   p   p   404 404 404 404 404",
        perm="cohort.quota.set", ok="200", body=cohort_quota),
    # Costs, the price book, forecasts and what-ifs
    row("costs", "GET", None,                           "in  200 200 200 200 200 200 -   -   -   -"),
    row("costs", "GET",
        "org",                          "in  200 200 200 200 200 200 404 404 404 404", query=_org_query),
    row("costs-team", "GET", "team",                    "in  200 200 404 200 200 404 404 404 404 404", url=_team),
    row("billing-codes", "GET", "org",                  "in  p   p   p   p   p   p   404 404 404 404",
        perm="price.set", ok="200", query=_org_query),
    row("billing-codes", "POST", "org",                 "in  p   p   p   p   p   p   404 404 404 404",
        perm="price.set", ok="302", body=lambda s: {"currency": "EUR", "cost_centres": ""}, query=_org_query),
    row("billing-periods", "GET", "org",                "in  p   p   p   p   p   p   404 404 404 404",
        perm="finance.read", ok="200", query=_org_query),
    row("billing-periods", "POST", "org",               "in  p   p   p   p   p   p   404 404 404 404",
        perm="period.close", ok="302", body=lambda s: {"action": "close", "month": "2001-02"}, query=_org_query),
    row("price-book", "GET", None,                      "in  p   p   p   p   p   p   -   -   -   -",
        perm="price.set", ok="200"),
    row("price-book", "GET", "org",                     "in  p   p   p   p   p   p   403 404 404 403",
        perm="price.set", ok="200", query=_org_query),
    row("price-book", "POST", "org",                    "in  p   p   p   p   p   p   403 404 404 403",
        perm="price.set", ok="302",
        body=lambda s: {"organization": s.org.pk, **price(s)}),
    row("price-edit", "GET", "price",                   "in  404 404 404 p   p   404 404 404 404 404",
        perm="price.set", ok="200"),
    row("price-edit", "POST", "price",                  "in  404 404 404 p   p   404 404 404 404 404",
        perm="price.set", ok="302", body=price),
    row("price-delete", "GET", "price",                 "in  404 404 404 p   p   404 404 404 404 404",
        perm="price.set", ok="200"),
    row("price-delete", "POST", "price",                "in  404 404 404 p   p   404 404 404 404 404",
        perm="price.set", ok="302"),
    row("overhead-add", "POST", "org",                  "in  p   p   p   p   p   p   403 404 404 403",
        perm="price.set", ok="302",
        body=lambda s: {"organization": s.org.pk, **overhead(s)}),
    row("overhead-edit", "GET", "overhead",             "in  404 404 404 p   p   404 404 404 404 404",
        perm="price.set", ok="200"),
    row("overhead-edit", "POST", "overhead",            "in  404 404 404 p   p   404 404 404 404 404",
        perm="price.set", ok="302", body=overhead),
    row("overhead-delete", "GET", "overhead",           "in  404 404 404 p   p   404 404 404 404 404",
        perm="price.set", ok="200"),
    row("overhead-delete", "POST", "overhead",          "in  404 404 404 p   p   404 404 404 404 404",
        perm="price.set", ok="302"),
    row("capacity-forecast", "GET", None,               "in  p   p   p   p   p   p   -   -   -   -",
        perm="forecast.read", ok="200"),
    row("capacity-plan", "GET", "org",                  "in  p   p   p   p   p   p   404 404 404 404",
        perm="forecast.read", ok="200", query=_org_query),
    row("capacity-plan", "POST", "org",                 "in  p   p   p   p   p   p   404 404 404 404",
        perm="capacity.plan", ok="302", body=plan_change, query=_org_query),
    row("capacity-plan-remove", "POST", "capacity_change", "in  404 404 404 p   p   p   404 404 404 404",
        perm="capacity.plan", ok="302"),
    row("what-if-list", "GET", None,                    "in  p   p   p   p   p   p   -   -   -   -",
        perm="whatif.run", ok="200"),
    row("what-if-list", "POST", "org",                  "in  p   p   p   p   p   p   403 400 400 400",
        perm="whatif.run", ok="302", body=what_if),
    row("what-if-detail", "GET", "what_if",             "in  404 404 404 p   p   p   404 404 404 404",
        perm="whatif.run", ok="200"),
    row("what-if-status", "GET", "what_if",             "in  404 404 404 p   p   p   404 404 404 404",
        perm="whatif.run", ok="200"),
    row("what-if-study-new", "POST", "org",             "in  p   p   p   p   p   p   404 404 404 404",
        perm="whatif.run", ok="302", body=study_form),
    row("what-if-study", "GET", "what_if_study",        "in  404 404 404 p   p   p   404 404 404 404",
        perm="whatif.run", ok="200"),
    row("what-if-study-status", "GET", "what_if_study", "in  404 404 404 p   p   p   404 404 404 404",
        perm="whatif.run", ok="200"),
    # The API: sign-in, the user, the probes
    row("api:token-obtain", "POST", None,               "201 201 201 201 201 201 201 -   -   -   -", body=lambda s: {
        **login(s), "name": "matrix"}),
    row("api:token-obtain", "GET", None,                "in  405 405 405 405 405 405 -   -   -   -"),
    row("api:token-obtain", "DELETE", None,             "in  204 204 204 204 204 204 -   -   -   -"),
    row("api:me", "GET", None,                          "in  200 200 200 200 200 200 -   -   -   -"),
    # Personal tokens do not reach the probe endpoint (probe tokens do: tests/clusters/test_probe.py).
    row("api:probe-health", "POST", "node",             "in  in  in  in  in  in  in  in  in  in  in", body=lambda s: {
        "node": s["node"].name, "observed_at": timezone.now().isoformat(), "gpus": []}),
    row("api:api-root", "GET", None,                    "in  200 200 200 200 200 200 -   -   -   -"),
    # The API: tenancy
    row("api:organization-list", "GET", None,           "in  200 200 200 200 200 200 -   -   -   -"),
    row("api:organization-detail", "GET", "org",        "in  200 200 200 200 200 200 404 404 404 404",
        url=lambda s: {"pk": s.org.pk}),
    row("api:team-list", "GET", None,                   "in  200 200 200 200 200 200 -   -   -   -"),
    row("api:team-list", "POST", "org",                 "in  p   p   p   p   p   p   400 400 400 400",
        perm="team.create", ok="201",
        body=lambda s: {"organization": s.org.pk, "name": "Matrix new"}),
    row("api:team-detail", "GET", "team",               "in  200 200 404 200 200 404 404 404 404 404", url=_team),
    row("api:project-list", "GET", None,                "in  200 200 200 200 200 200 -   -   -   -"),
    row("api:project-list", "POST", "team",             "in  p   p   400 p   p   400 400 400 400 400",
        perm="project.create", ok="201",
        body=lambda s: {"team": s.home.pk, "name": "Matrix new"}),
    row("api:project-detail", "GET", "project",         "in  200 200 404 200 200 404 404 404 404 404"),
    row("api:membership-list", "GET", None,             "in  200 200 200 200 200 200 -   -   -   -"),
    row("api:membership-list", "POST", "team",          "in  p   p   400 p   p   400 400 400 400 400",
        perm="member.add", ok="201", body=api_member),
    row("api:membership-list", "POST", "team",          "in  p   p   400 p   p   400 400 400 400 400",
        perm="member.add", ok="400", body=api_stranger),
    row("api:membership-detail", "GET", "membership",   "in  200 200 404 200 200 404 404 404 404 404"),
    row("api:membership-detail", "PATCH", "membership", "in  p   p   404 p   p   404 404 404 404 404",
        perm="member.role.set", ok="200",
        body=lambda s: {"role": "lead", "reason": "matrix"}),
    row("api:membership-detail", "DELETE", "membership","in  p   p   404 p   p   404 404 404 404 404",
        perm="member.remove", ok="204"),
    row("api:membership-detail", "DELETE", "finance_membership",
                                                         "in  404 404 404 p   p   404 404 404 404 404",
        perm="member.remove", ok="204"),
    row("api:membership-detail", "PATCH", "sa_membership",
                                                        "in  p   p   404 p   p   404 404 404 404 404",
        perm="member.role.set", ok="400",
        body=lambda s: {"role": "lead", "reason": "matrix"}),
    row("api:membership-detail", "DELETE", "sa_membership",
                                                        "in  p   p   404 p   p   404 404 404 404 404",
        perm="member.remove", ok="400"),
    row("api:auditlog-list", "GET", None,               "in  200 200 200 200 200 200 -   -   -   -"),
    row("api:auditlog-detail", "GET", "audit_entry",    "in  404 404 404 404 200 404 404 404 404 404"),
    row("api:token-list", "GET", None,                  "in  200 200 200 200 200 200 -   -   -   -"),
    row("api:token-detail", "GET", "token",             "in  200 404 404 404 404 404 404 404 404 404"),
    row("api:token-detail", "DELETE", "token",          "in  p   404 404 404 404 404 404 404 404 404",
        perm="token.revoke", ok="204", owner="res"),
    row("api:serviceaccount-list", "GET", None,         "in  200 200 200 200 200 200 -   -   -   -"),
    row("api:serviceaccount-list", "POST", "team",      "in  p   p   400 p   p   400 400 400 400 400",
        perm="service_account.create", ok="201",
        body=lambda s: {"team": s.home.pk, **service_account(s)}),
    row("api:serviceaccount-detail", "GET", "service_account",
                                                        "in  404 200 404 404 200 404 404 404 404 404"),
    row("api:serviceaccount-detail", "DELETE", "service_account",
                                                        "in  404 p   404 404 p   404 404 404 404 404",
        perm="service_account.revoke", ok="204"),
    # The API: jobs, queues, quotas, tiers, budgets
    # The model registry: models, their versions, a stored version's bytes
    row("api:model-list", "GET", None,                  "in  200 200 200 200 200 200 -   -   -   -"),
    row("api:model-list", "POST", "team",               "in  p   p   400 p   p   400 400 400 400 400",
        perm="model.create", ok="201", url=lambda s: {},
        body=lambda s: {"team": s.home.pk, "name": "matrix-new"}),
    row("api:model-publish", "POST", "team",            "in  p   p   400 p   p   400 400 400 400 400",
        perm="model.create", ok="201", url=lambda s: {},
        body=lambda s: {"team": s.home.pk, "name": "matrix-published", "job": s["succeeded_job"].pk}),
    row("api:model-detail", "GET", "model",             "in  200 200 404 200 200 404 404 404 404 404"),
    row("api:model-detail", "DELETE", "model",          "in  p   p   404 p   p   404 404 404 404 404",
        perm="model.delete", ok="204"),
    row("api:model-version-list", "GET", "model",       "in  200 200 404 200 200 404 404 404 404 404",
        url=lambda s: {"model_pk": s["model"].pk}),
    row("api:model-version-list", "POST", "model",      "in  p   p   404 p   p   404 404 404 404 404",
        perm="model.publish", ok="201", url=lambda s: {"model_pk": s["model"].pk},
        body=lambda s: {"job": s["succeeded_job"].pk, "metrics": {"acc": 0.5}}),
    row("api:model-version-detail", "GET", "model_version",
                                                        "in  200 200 404 200 200 404 404 404 404 404",
        url=lambda s: {"model_pk": s["model"].pk, "pk": s["model_version"].pk}),
    row("api:model-version-artifact", "GET", "model_version",
                                                        "in  200 200 404 200 200 404 404 404 404 404",
        url=lambda s: {"model_pk": s["model"].pk, "pk": s["model_version"].pk}),
    row("api:job-list", "GET", None,                    "in  200 200 200 200 200 200 -   -   -   -"),
    row("api:job-list", "POST", "team",                 "in  p   p   400 p   p   400 400 400 400 400",
        perm="job.submit", ok="201", body=job_json),
    row("api:job-preview", "POST", "team",              "in  p   p   400 p   p   400 400 400 400 400",
        perm="job.submit", ok="200", body=job_json,
        writes=False),
    row("api:job-detail", "GET", "job",                 "in  200 200 404 200 200 404 404 404 404 404"),
    row("api:job-events", "GET", "job",                 "in  200 200 404 200 200 404 404 404 404 404"),
    row("api:job-debug", "GET", "job",                  "in  200 200 404 200 200 404 404 404 404 404"),
    row("api:job-utilization", "GET", "job",            "in  200 200 404 200 200 404 404 404 404 404"),
    row("api:job-checkpoints", "GET", "job",            "in  200 200 404 200 200 404 404 404 404 404"),
    row("api:job-logs", "GET", "job",                   "in  200 200 404 200 200 404 404 404 404 404"),
    # Reported by the job itself with its attempt's token (scheduler/actions/checkpoints.py): no person may, whatever
    # the role; a job the user cannot see is still a 404.
    row("api:job-checkpoints", "POST", "job",           "in  403 403 404 403 403 404 404 404 404 404",
        body=lambda s: {"location": "s3://matrix/run"}),
    row("api:job-report", "POST", "job",                "in  403 403 404 403 403 404 404 404 404 404",
        body=lambda s: {"exit_code": 0}),
    row("api:job-progress", "POST", "job",              "in  403 403 404 403 403 404 404 404 404 404",
        body=lambda s: {"step": 1}),
    row("api:job-session", "POST", "job",               "in  403 403 404 403 403 404 404 404 404 404",
        body=lambda s: {"url": "http://10.0.0.7:8888/"}),
    row("api:job-endpoint", "POST", "job",              "in  403 403 404 403 403 404 404 404 404 404",
        body=lambda s: {"url": "http://10.0.0.7:8123/"}),
    # The link that opens a session (a one-time code in it): its submitter's alone (409 here: this job is no session).
    row("api:job-session", "GET", "job",                "in  p   p   404 p   p   404 404 404 404 404",
        perm="job.session.open", ok="409", owner="res", writes=False),
    row("api:job-cancel", "POST", "job",                "in  p   p   404 p   p   404 404 404 404 404",
        perm="job.cancel", ok="200", owner="res", body=reason),
    row("api:job-cancel", "POST", "lead_job",           "in  p   p   404 p   p   404 404 404 404 404",
        perm="job.cancel", ok="200", owner="lead", body=reason),
    row("api:job-preempt", "POST", "running_job",       "in  p   p   404 p   p   404 404 404 404 404",
        perm="job.preempt", ok="200", body=reason),
    row("api:job-requeue", "POST", "failed_job",        "in  p   p   404 p   p   404 404 404 404 404",
        perm="job.requeue", ok="200", body=reason),
    row("api:service-list", "GET", None,                "in  200 200 200 200 200 200 -   -   -   -"),
    row("api:service-list", "POST", "team",             "in  p   p   400 p   p   400 400 400 400 400",
        perm="service.create", ok="201", body=service_json),
    row("api:service-detail", "GET", "service",         "in  200 200 404 200 200 404 404 404 404 404"),
    row("api:service-detail", "PATCH", "service",       "in  p   p   404 p   p   404 404 404 404 404",
        perm="service.change", ok="200", owner="res", body=lambda s: {"max_replicas": 3}),
    row("api:service-detail", "DELETE", "service",      "in  p   p   404 p   p   404 404 404 404 404",
        perm="service.change", ok="200", owner="res"),
    row("api:service-scale", "POST", "service",         "in  p   p   404 p   p   404 404 404 404 404",
        perm="service.change", ok="200", owner="res", body=lambda s: {"max_replicas": 3}),
    row("api:service-stop", "POST", "service",          "in  p   p   404 p   p   404 404 404 404 404",
        perm="service.change", ok="200", owner="res"),
    row("api:service-start", "POST", "stopped_service", "in  p   p   404 p   p   404 404 404 404 404",
        perm="service.change", ok="200", owner="res"),
    row("api:service-rollback", "POST", "service",      "in  p   p   404 p   p   404 404 404 404 404",
        perm="service.change", ok="200", owner="res"),
    row("api:service-replicas", "GET", "service",       "in  200 200 404 200 200 404 404 404 404 404"),
    row("api:service-samples", "GET", "service",        "in  200 200 404 200 200 404 404 404 404 404"),
    row("api:array-list", "GET", None,                  "in  200 200 200 200 200 200 -   -   -   -"),
    row("api:array-list", "POST", "team",               "in  p   p   400 p   p   400 400 400 400 400",
        perm="job.submit", ok="201", body=lambda s: {"job": job_json(s), "range": "0-2"}),
    row("api:array-detail", "GET", "array",             "in  200 200 404 200 200 404 404 404 404 404"),
    row("api:array-cancel", "POST", "array",            "in  p   p   404 p   p   404 404 404 404 404",
        perm="array.cancel", ok="200", owner="res", body=reason),
    row("api:array-requeue", "POST", "array",           "in  p   p   404 p   p   404 404 404 404 404",
        perm="array.requeue", ok="200", owner="res", body=lambda s: {}),
    row("api:pipeline-list", "POST", "team",            "in  p   p   400 p   p   400 400 400 400 400",
        perm="job.submit", ok="201", body=lambda s: {"steps": [{"name": "a", "job": job_json(s)}]}),
    row("api:queue-list", "GET", None,                  "in  200 200 200 200 200 200 -   -   -   -"),
    row("api:queue-detail", "GET", "queue",             "in  200 200 404 200 200 404 404 404 404 404"),
    row("api:queue-detail", "PATCH", "queue",           "in  p   p   404 p   p   404 404 404 404 404",
        perm="queue.flavor_order.set", ok="200",
        body=lambda s: {"flavor_order": [H100], "reason": "matrix: H100 first"}),
    row("api:queue-set-quota", "POST", "queue",         "in  p   p   404 p   p   404 404 404 404 404",
        perm="quota.lend", ok="200",
        body=lambda s: {"flavor": H100, "lending_limit": 4, "reason": "matrix: lend"}),
    row("api:quotachange-list", "GET", None,            "in  200 200 200 200 200 200 -   -   -   -"),
    row("api:quotachange-detail", "GET", "quota_change","in  200 200 404 200 200 404 404 404 404 404"),
    row("api:tier-list", "GET", None,                   "in  200 200 200 200 200 200 -   -   -   -"),
    row("api:tier-list", "POST", "org",                 "in  p   p   p   p   p   p   404 404 404 404",
        perm="tier.set", ok="201",
        body=lambda s: {"organization": s.org.slug, "name": "matrix-high", "value": 90, "reason": "matrix"}),
    row("api:tier-detail", "GET", "tier",               "in  200 200 200 200 200 404 404 404 404 404"),
    row("api:fair-share-list", "GET", None,             "in  200 200 200 200 200 200 -   -   -   -"),
    row("api:fair-share-list", "POST", "org",           "in  p   p   p   p   p   p   404 404 404 404",
        perm="fair_share.set", ok="200",
        body=lambda s: {"organization": s.org.slug, "half_life": 86400, "reason": "matrix"}),
    # The API: clusters, nodes, maintenance windows (a window is planned on a cluster the body names: an admin of
    # the other organization is told it has no such cluster, anyone else that they plan nothing).
    row("api:cluster-list", "GET", None,                "in  200 200 200 200 200 200 -   -   -   -"),
    row("api:cluster-detail", "GET", "cluster",         "in  200 200 200 200 200 404 404 404 404 404"),
    row("api:elasticpool-list", "GET", "cluster",       "in  200 200 200 200 200 404 404 404 404 404", url=_pools),
    row("api:elasticpool-list", "POST", "cluster",      "in  p   p   p   p   p   404 404 404 404 404",
        perm="cluster.change", ok="201", body=pool_json),
    row("api:elasticpool-detail", "GET", "cluster",     "in  200 200 200 200 200 404 404 404 404 404", url=_pool_api),
    row("api:elasticpool-detail", "PATCH", "cluster",   "in  p   p   p   p   p   404 404 404 404 404",
        perm="cluster.change", ok="200", url=_pool_api, body=lambda s: {"max_nodes": 6, "enabled": False}),
    row("api:elasticgrant-list", "GET", "cluster",      "in  200 200 200 200 200 404 404 404 404 404"),
    row("api:node-list", "GET", None,                   "in  200 200 200 200 200 200 -   -   -   -"),
    row("api:node-detail", "GET", "node",               "in  200 200 200 200 200 404 404 404 404 404"),
    row("api:node-cordon", "POST", "node",              "in  p   p   p   p   p   404 404 404 404 404",
        perm="node.drain", ok="200", body=reason),
    row("api:node-drain", "POST", "node",               "in  p   p   p   p   p   404 404 404 404 404",
        perm="node.drain", ok="200", body=lambda s: {"reason": "matrix: drain", "grace_seconds": 60}),
    row("api:node-resume", "POST", "drained_node",      "in  p   p   p   p   p   404 404 404 404 404",
        perm="node.drain", ok="200", body=reason),
    row("api:maintenancewindow-list", "GET", None,      "in  200 200 200 200 200 200 -   -   -   -"),
    row("api:maintenancewindow-list", "POST", "cluster", "in  p   p   p   p   p   p   403 403 400 403",
        perm="maintenance.plan", ok="201", body=lambda s: {
            "cluster": s["cluster"].slug, "starts_at": (timezone.now() + timedelta(days=5)).isoformat(),
            "ends_at": (timezone.now() + timedelta(days=6)).isoformat(), "reason": "matrix: firmware"}),
    row("api:maintenancewindow-detail", "GET", "maintenance", "in  200 200 200 200 200 404 404 404 404 404"),
    row("api:maintenancewindow-detail", "DELETE", "maintenance", "in  p   p   p   p   p   404 404 404 404 404",
        perm="maintenance.plan", ok="204"),
    row("api:capacityrequest-list", "GET", None,        "in  200 200 200 200 200 200 -   -   -   -"),
    row("api:capacityrequest-list", "POST", "team",     "in  p   p   404 p   p   404 404 404 404 404",
        perm="capacity.request", ok="201",
        body=lambda s: {"team": s.home.pk, "kind": "quota", "flavor": H100, "accelerators": 2, "reason": "matrix"}),
    row("api:capacityrequest-detail", "GET", "capacity_request", "in  200 200 404 200 200 404 404 404 404 404"),
    row("api:capacityrequest-decide", "POST", "capacity_request", "in  p   p   404 p   p   404 404 404 404 404",
        perm="capacity.decide", ok="200", body=lambda s: {"approve": False, "reason": "matrix"}),
    row("api:capacityrequest-withdraw", "POST", "capacity_request", "in  p   p   404 p   p   404 404 404 404 404",
        perm="capacity.request", ok="200", body=lambda s: {"reason": "matrix"}),
    row("api:budget-list", "GET", None,                 "in  200 200 200 200 200 200 -   -   -   -"),
    row("api:budget-list", "POST", "team",              "in  p   p   404 p   p   404 404 404 404 404",
        perm="budget.project.set", ok="201",
        body=lambda s: {"team": s.home.pk, "project": s["project"].pk, "accelerator_hours": 100, "reason": "matrix"}),
    row("api:budget-detail", "GET", "budget",           "in  200 200 404 200 200 404 404 404 404 404"),
    row("api:budgetalert-list", "GET", None,            "in  200 200 200 200 200 200 -   -   -   -"),
    row("api:budgetalert-detail", "GET", "alert",       "in  200 200 404 200 200 404 404 404 404 404"),
    row("api:memberlimit-list", "GET", "team",          "in  200 200 404 200 200 404 404 404 404 404",
        url=lambda s: {"team_id": s.home.pk}),
    row("api:memberlimit-list", "POST", "team",         "in  p   p   404 p   p   404 404 404 404 404",
        perm="member_limit.set", ok="200",
        url=lambda s: {"team_id": s.home.pk},
        body=lambda s: {"user": s.users[Rel.RESEARCHER].username, "accelerators": 4, "reason": "matrix"}),
    # Notifications: each user's own choices and notifications; a team's defaults, set by its leads
    row("api:notification-list", "GET", None,           "in  200 200 200 200 200 200 -   -   -   -"),
    row("api:notification-preferences", "GET", None,    "in  200 200 200 200 200 200 -   -   -   -"),
    row("api:notification-preferences", "PUT", None,    "in  200 200 200 200 200 200 -   -   -   -",
        body=lambda s: {"events": {"failed": ["email"], "started": []}, "wait_hours": 6}),
    row("api:notification-test", "POST", None,          "in  201 201 201 201 201 201 -   -   -   -"),
    row("api:notification-team-defaults", "GET", "team", "in  200 200 404 200 200 404 404 404 404 404",
        url=lambda s: {"team_id": s.home.pk}),
    row("api:notification-team-defaults", "PUT", "team", "in  p   p   404 p   p   404 404 404 404 404",
        perm="notification.defaults.set", ok="200",
        url=lambda s: {"team_id": s.home.pk},
        body=lambda s: {"events": {"succeeded": ["email"]}, "wait_hours": 12}),
    # The API: billing
    row("api:billing-costs", "GET", None,               "in  200 200 200 200 200 200 -   -   -   -"),
    row("api:billing-costs", "GET",
        "org",              "in  200 200 200 200 200 200 404 404 404 404", query=_org_query),
    row("api:billing-job-costs", "GET",
        "org",          "in  200 200 200 200 200 200 404 404 404 404", query=_org_query),
    row("api:billing-statement", "GET", "team",         "in  200 200 404 200 200 404 404 404 404 404",
        url=lambda s: {"team": s.home.slug, "ext": "csv"}, query=_org_query),
    row("api:billing-statement", "GET", "team",         "in  200 200 404 200 200 404 404 404 404 404",
        url=lambda s: {"team": s.home.slug, "ext": "xlsx"}),
    row("api:billing-fleet", "GET", "org",              "in  p   p   p   p   p   p   404 404 404 404",
        perm="finance.read", ok="200",
        url=lambda s: {"ext": "csv"}, query=_org_query),
    row("api:billing-meter", "GET", "org",              "in  p   p   p   p   p   p   404 404 404 404",
        perm="finance.read", ok="200", query=_org_query),
    row("api:billing-codes", "GET", "org",              "in  p   p   p   p   p   p   404 404 404 404",
        perm="finance.read", ok="200", query=_org_query),
    row("api:billing-codes", "PUT", "org",              "in  p   p   p   p   p   p   404 404 404 404",
        perm="price.set", ok="200", body=lambda s: {"currency": "EUR"}, query=_org_query),
    row("api:billing-periods", "GET", "org",            "in  p   p   p   p   p   p   404 404 404 404",
        perm="finance.read", ok="200", query=_org_query),
    row("api:billing-period-close", "POST", "org",      "in  p   p   p   p   p   p   404 404 404 404",
        perm="period.close", ok="201", body=lambda s: {"month": "2001-02"}, query=_org_query),
    row("api:billing-period-reopen", "POST", "org",     "in  p   p   p   p   p   p   404 404 404 404",
        perm="period.close", ok="200", body=lambda s: {"month": "2001-01", "reason": "a late invoice"},
        query=_org_query),
    row("api:price-list", "GET", None,                  "in  200 200 200 200 200 200 -   -   -   -"),
    row("api:price-list", "POST", "org",                "in  p   p   p   p   p   p   404 404 404 404",
        perm="price.set", ok="201",
        body=price, query=_org_query),
    row("api:price-detail", "GET", "price",             "in  404 404 404 p   p   404 404 404 404 404",
        perm="price.set", ok="200"),
    row("api:price-detail", "PUT", "price",             "in  404 404 404 p   p   404 404 404 404 404",
        perm="price.set", ok="200", body=price),
    row("api:price-detail", "DELETE", "price",          "in  404 404 404 p   p   404 404 404 404 404",
        perm="price.set", ok="204"),
    row("api:overhead-list", "GET", None,               "in  200 200 200 200 200 200 -   -   -   -"),
    row("api:overhead-list", "POST", "org",             "in  p   p   p   p   p   p   404 404 404 404",
        perm="price.set", ok="201",
        body=overhead, query=_org_query),
    row("api:overhead-detail", "GET", "overhead",       "in  404 404 404 p   p   404 404 404 404 404",
        perm="price.set", ok="200"),
    row("api:overhead-detail", "PUT", "overhead",       "in  404 404 404 p   p   404 404 404 404 404",
        perm="price.set", ok="200", body=overhead),
    row("api:overhead-detail", "DELETE", "overhead",    "in  404 404 404 p   p   404 404 404 404 404",
        perm="price.set", ok="204"),
    row("api:grid-intensity-list", "GET", None,         "in  200 200 200 200 200 200 -   -   -   -"),
    row("api:grid-intensity-list", "POST", "org",       "in  p   p   p   p   p   p   404 404 404 404",
        perm="price.set", ok="201", body=intensity, query=_org_query),
    row("api:grid-intensity-detail", "GET", "grid_intensity", "in  404 404 404 p   p   404 404 404 404 404",
        perm="price.set", ok="200"),
    row("api:grid-intensity-detail", "PUT", "grid_intensity", "in  404 404 404 p   p   404 404 404 404 404",
        perm="price.set", ok="200", body=intensity),
    row("api:grid-intensity-detail", "DELETE", "grid_intensity", "in  404 404 404 p   p   404 404 404 404 404",
        perm="price.set", ok="204"),
    row("api:forecasts", "GET", None,                   "in  p   p   p   p   p   p   -   -   -   -",
        perm="forecast.read", ok="200"),
    row("api:capacity-change-list", "GET", None,        "in  200 200 200 200 200 200 -   -   -   -"),
    row("api:capacity-change-list", "POST", "org",      "in  p   p   p   p   p   p   404 404 404 404",
        perm="capacity.plan", ok="201", body=plan_change, query=_org_query),
    row("api:capacity-change-detail", "GET", "capacity_change", "in  404 404 404 p   p   p   404 404 404 404",
        perm="capacity.plan", ok="200"),
    row("api:capacity-change-detail", "PUT", "capacity_change", "in  404 404 404 p   p   p   404 404 404 404",
        perm="capacity.plan", ok="200", body=plan_change),
    row("api:capacity-change-detail", "DELETE", "capacity_change", "in  404 404 404 p   p   p   404 404 404 404",
        perm="capacity.plan", ok="204"),
    row("api:what-if-list", "GET", None,                "in  200 200 200 200 200 200 -   -   -   -"),
    row("api:what-if-list", "POST", "org",              "in  p   p   p   p   p   p   404 404 404 404",
        perm="whatif.run", ok="201",
        body=lambda s: {"organization": s.org.slug, **what_if(s)}),
    row("api:what-if-detail", "GET", "what_if",         "in  404 404 404 p   p   p   404 404 404 404",
        perm="whatif.run", ok="200"),
    row("api:what-if-study-list", "GET", None,          "in  200 200 200 200 200 200 -   -   -   -"),
    row("api:what-if-study-list", "POST", "org",        "in  p   p   p   p   p   p   404 404 404 404",
        perm="whatif.run", ok="201", body=lambda s: {"organization": s.org.slug, **study(s)}),
    row("api:what-if-study-detail", "GET", "what_if_study", "in  404 404 404 p   p   p   404 404 404 404",
        perm="whatif.run", ok="200"),
    # Lists filtered by another team's or organization's id: refused as "not one of the choices" (400) where
    # the filter names its choices, as one that does not exist is; or nothing of it (200, an empty list) where
    # it filters by id (tenancy.filters.IdFilter), as for one that does not exist.
    row("job-list", "GET",
        "team",                      "in  200 200 400 200 200 400 400 400 400 400", query=_team_query),
    row("audit-log", "GET", "org",                      "in  403 403 403 403 200 403 403 403 200 403",
        query=lambda s: {"organization": s.org.pk}),
    row("audit-log-csv", "GET", "org",                  "in  403 403 403 403 200 403 403 403 200 403",
        query=lambda s: {"organization": s.org.pk}),
    row("api:team-list", "GET", "org",                  "in  200 200 200 200 200 200 200 200 200 200",
        query=lambda s: {"organization": s.org.pk}),
    row("api:project-list", "GET",
        "team",              "in  200 200 200 200 200 200 200 200 200 200", query=_team_query),
    row("api:membership-list", "GET",
        "team",           "in  200 200 200 200 200 200 200 200 200 200", query=_team_query),
    row("api:auditlog-list", "GET", "org",              "in  200 200 200 200 200 200 200 200 200 200",
        query=lambda s: {"organization": s.org.pk}),
    row("api:job-list", "GET",
        "team",                  "in  200 200 200 200 200 200 200 200 200 200", query=_team_query),
    row("api:queue-list", "GET",
        "team",                "in  200 200 200 200 200 200 200 200 200 200", query=_team_query),
    row("api:quotachange-list", "GET",
        "team",          "in  200 200 200 200 200 200 200 200 200 200", query=_team_query),
    row("api:budget-list", "GET",
        "team",               "in  200 200 200 200 200 200 200 200 200 200", query=_team_query),
    row("api:budgetalert-list", "GET",
        "team",          "in  200 200 200 200 200 200 200 200 200 200", query=_team_query),
    row("api:billing-costs", "GET", "team",             "in  200 200 404 200 200 404 404 404 404 404",
        query=lambda s: {"team": s.home.slug}),
    row("api:billing-job-costs", "GET", "team",         "in  200 200 404 200 200 404 404 404 404 404",
        query=lambda s: {"team": s.home.slug}),
    # Edge devices and rollouts: a team sees its own; its leads and admins manage them
    row("device-list", "GET", None,                     "in  200 200 200 200 200 200 -   -   -   -"),
    row("device-detail", "GET", "device",               "in  200 200 404 200 200 404 404 404 404 404",
        url=_edge_pk("edge_device")),
    row("device-revoke", "POST", "device",              "in  p   p   404 p   p   404 404 404 404 404",
        perm="device.revoke", ok="302", url=_edge_pk("edge_device")),
    # A token that re-enrols one device (the way back for a revoked one): issued by those who issue its group's.
    row("device-reenrol", "POST", "device",             "in  p   p   404 p   p   404 404 404 404 404",
        perm="device.token.issue", ok="200", url=_edge_pk("edge_device")),
    row("device-token-new", "GET", None,                "in  200 200 200 200 200 200 -   -   -   -"),
    row("device-token-new", "POST", "group",            "in  p   p   400 p   p   400 400 400 400 400",
        perm="device.token.issue", ok="200",
        body=lambda s: {"group": edge(s, "edge_group").pk, "hours": "2"}),
    row("rollout-list", "GET", None,                    "in  200 200 200 200 200 200 -   -   -   -"),
    row("rollout-new", "GET", None,                     "in  200 200 200 200 200 200 -   -   -   -"),
    row("rollout-new", "POST", "group",                 "in  p   p   400 p   p   400 400 400 400 400",
        perm="rollout.start", ok="302", body=lambda s: {**_start_body(s), "auto_rollback": "on"}),
    row("rollout-detail", "GET", "rollout",             "in  200 200 404 200 200 404 404 404 404 404",
        url=_edge_pk("edge_rollout")),
    row("rollout-control", "POST", "rollout",           "in  p   p   404 p   p   404 404 404 404 404",
        perm="rollout.control", ok="302", url=_rollout_verb("pause")),
    # The API: edge devices' own endpoints take a device's credential, never a person's token
    row("api:edge-enrol", "POST", None,                 "400 400 400 400 400 400 400 -   -   -   -",
        body=lambda s: {"token": "qmenrol_matrix", "name": "matrix"}),
    row("api:edge-desired", "GET", None,                "in  in  in  in  in  in  in  -   -   -   -"),
    row("api:edge-artifact", "GET", None,               "in  in  in  in  in  in  in  -   -   -   -",
        url=lambda s: {"version_id": 1}),
    row("api:edge-report", "POST", None,                "in  in  in  in  in  in  in  -   -   -   -",
        body=lambda s: {"status": "idle"}),
    # The API: devices, groups, enrolment tokens, rollouts
    row("api:device-list", "GET", None,                 "in  200 200 200 200 200 200 -   -   -   -"),
    row("api:device-detail", "GET", "device",           "in  200 200 404 200 200 404 404 404 404 404",
        url=_edge_pk("edge_device")),
    row("api:device-detail", "DELETE", "device",        "in  p   p   404 p   p   404 404 404 404 404",
        perm="device.revoke", ok="204", url=_edge_pk("edge_device")),
    row("api:device-revoke", "POST", "device",          "in  p   p   404 p   p   404 404 404 404 404",
        perm="device.revoke", ok="200", url=_edge_pk("edge_device")),
    row("api:devicegroup-list", "GET", None,            "in  200 200 200 200 200 200 -   -   -   -"),
    row("api:devicegroup-list", "POST", "team",         "in  p   p   400 p   p   400 400 400 400 400",
        perm="device.group.create", ok="201",
        body=lambda s: {"team": s.home.pk, "name": "matrix new group"}),
    row("api:devicegroup-detail", "GET", "group",       "in  200 200 404 200 200 404 404 404 404 404",
        url=_edge_pk("edge_group")),
    row("api:enrolmenttoken-list", "GET", None,         "in  200 200 200 200 200 200 -   -   -   -"),
    row("api:enrolmenttoken-list", "POST", "group",     "in  p   p   400 p   p   400 400 400 400 400",
        perm="device.token.issue", ok="201", body=lambda s: {"group": edge(s, "edge_group").pk}),
    row("api:enrolmenttoken-list", "POST", "device",    "in  p   p   400 p   p   400 400 400 400 400",
        perm="device.token.issue", ok="201", body=lambda s: {"device": edge(s, "edge_device").pk}),
    row("api:rollout-list", "GET", None,                "in  200 200 200 200 200 200 -   -   -   -"),
    row("api:rollout-list", "POST", "group",            "in  p   p   400 p   p   400 400 400 400 400",
        perm="rollout.start", ok="201", body=_start_body),
    row("api:rollout-detail", "GET", "rollout",         "in  200 200 404 200 200 404 404 404 404 404",
        url=_edge_pk("edge_rollout")),
    row("api:rollout-pause", "POST", "rollout",         "in  p   p   404 p   p   404 404 404 404 404",
        perm="rollout.control", ok="200", url=_edge_pk("edge_rollout")),
    row("api:rollout-resume", "POST", "rollout",        "in  p   p   404 p   p   404 404 404 404 404",
        perm="rollout.control", ok="400", url=_edge_pk("edge_rollout"), writes=False),
    row("api:rollout-cancel", "POST", "rollout",        "in  p   p   404 p   p   404 404 404 404 404",
        perm="rollout.control", ok="200", url=_edge_pk("edge_rollout")),
    row("api:rollout-rollback", "POST", "rollout",      "in  p   p   404 p   p   404 404 404 404 404",
        perm="rollout.control", ok="200", url=_edge_pk("edge_rollout")),
    # The schema and its docs are public: the committed openapi.yaml says as much.
    row("api-schema", "GET", None,                      "200 200 200 200 200 200 200 -   -   -   -"),
    row("api-docs", "GET", None,                        "200 200 200 200 200 200 200 -   -   -   -"),
]  # fmt: skip

#: The Django admin is for staff (superusers); no role of an organization is staff. Every page of it sends
#: everyone to its own sign-in, which itself shows (200).
FAMILIES = [
    Family(
        "admin:",
        dict.fromkeys(COLUMNS, "in"),
        exceptions={
            "admin:login": dict.fromkeys(COLUMNS, "200"),
            # Its sign-out sends whoever is not staff to its index (which sends them to sign in).
            "admin:logout": dict.fromkeys(COLUMNS, "302"),
        },
    )
]
