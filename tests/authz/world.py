"""The world the authorization matrix runs in: two organizations built alike, every role in each, and one
object of every kind the routes take as a parameter, on both sides.

Each organization has a *home* team (a researcher, a lead), a *neighbour* team (a researcher) and the
organization-wide roles (finance, admin). Seen from one organization's objects, every user has one relation
(`Rel`): the home team's researcher and lead, the neighbour, finance, admin, and everybody of the other
organization is an outsider. The table of expected answers is written per relation, so one row covers both
organizations.

Names of team-private objects carry a canary (`canary(team)`), names of organization-wide objects the
organization's: an answer that shows a canary to someone outside its scope is a leak, whatever its status.
"""

from __future__ import annotations

import enum
import io
from dataclasses import dataclass, field
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

from django.contrib.auth.models import User
from django.utils import timezone

from billing.actions import periods, prices
from billing.models import CapacityChange, GridIntensity, Overhead, Price, WhatIf, WhatIfStudy
from clusters import actions as cluster_actions
from clusters.models import AcceleratorType, Cluster, MaintenanceWindow, Node
from demo.tenancy import seed_demo
from governance.actions import budgets, capacity, quotas
from governance.models import Budget, BudgetAlert, Cohort, MemberLimit, PriorityTier, Queue, QuotaChange
from registry import actions as registry_actions
from scheduler import actions as job_actions
from scheduler.actions import arrays
from scheduler.models import Checkpoint, Job, LoopState
from scheduler.states import JobState
from scheduler.submission import JobRequest
from scheduler.sweeps import ArrayRequest
from serving import actions as service_actions
from tenancy import actions
from tenancy.models import ApiToken, AuditLog, Membership, Organization, Project, ServiceAccount, Team
from tenancy.scoping import Role
from tests.clusters.factories import simulated_cluster

PASSWORD = "matrix-pw"
H100 = "H100-SXM-80GB"


class Rel(enum.StrEnum):
    """How a user stands to an organization's objects (the columns of the table)."""

    ANON = "anon"
    RESEARCHER = "res"  # a researcher of the home team (and the owner of its researcher's objects)
    LEAD = "lead"  # the home team's lead
    NEIGHBOUR = "nbr"  # a researcher of another team of the same organization
    FINANCE = "fin"
    ADMIN = "admin"
    PROCUREMENT = "proc"  # plans capacity: forecasts, the capacity plan, what-ifs; no team's work
    OUTSIDER = "out"  # any role in the other organization


def canary(scope: str) -> str:
    """The marker in the names of ``scope``'s objects (a team's or an organization's slug)."""
    return f"cnry{scope}"


@dataclass
class Side:
    """One organization and its objects, by the names the table's parameter fillers use."""

    slug: str
    org: Organization
    home: Team
    neighbour: Team
    users: dict[Rel, User]
    objects: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Any:
        return self.objects[name]


@dataclass
class World:
    sides: dict[str, Side]
    tokens: dict[str, str]  # username -> raw API token

    def other(self, side: Side) -> Side:
        return next(s for s in self.sides.values() if s is not side)

    def actors(self) -> list[tuple[str, User | None]]:
        """Everyone who acts: anonymous first, then every user of both organizations."""
        users = [(u.username, u) for side in self.sides.values() for u in side.users.values()]
        return [("anonymous", None), *users]

    def relation(self, user: User | None, side: Side) -> Rel:
        if user is None:
            return Rel.ANON
        for rel, member in side.users.items():
            if member.pk == user.pk:
                return rel
        return Rel.OUTSIDER

    def scopes_of(self, user: User) -> set[str]:
        """The canaries ``user`` may see: their organization's, their team's, every team's for finance and admin."""
        for side in self.sides.values():
            rel = self.relation(user, side)
            if rel is Rel.OUTSIDER:
                continue
            teams = {side.home.slug, side.neighbour.slug} if rel in (Rel.FINANCE, Rel.ADMIN) else set()
            teams |= {side.home.slug} if rel in (Rel.RESEARCHER, Rel.LEAD) else set()
            teams |= {side.neighbour.slug} if rel is Rel.NEIGHBOUR else set()
            return {side.slug, *teams}
        return set()

    def all_scopes(self) -> set[str]:
        return {s for side in self.sides.values() for s in (side.slug, side.home.slug, side.neighbour.slug)}


def _user(name: str, org: Organization, role: Role, team: Team | None) -> User:
    user = User.objects.create_user(name, password=PASSWORD, email=f"{name}@{org.slug}.example")
    Membership.objects.create(user=user, organization=org, team=team, role=role)
    return user


def _side(slug: str, org: Organization, home: Team, neighbour: Team, users: dict[Rel, User]) -> Side:
    """Fill one organization with one object of every kind, named with its canaries."""
    side = Side(slug, org, home, neighbour, users)
    # The placement loop's bookkeeping, made on the first read of the fleet: made now, so that no check's
    # first read counts as a write.
    LoopState.objects.get_or_create(organization=org)
    admin, lead, researcher = users[Rel.ADMIN], users[Rel.LEAD], users[Rel.RESEARCHER]
    o = side.objects
    home.description = f"{canary(home.slug)} team"
    home.save(update_fields=["description"])
    o["project"] = Project.objects.create(team=home, name=f"{canary(home.slug)} project", slug="matrix")
    Project.objects.create(team=neighbour, name=f"{canary(neighbour.slug)} project", slug="matrix")
    cluster = simulated_cluster(org, f"{slug}-east", None, nodes=2)
    Cluster.objects.filter(pk=cluster.pk).update(name=f"{canary(slug)} east")
    o["cluster"] = cluster
    o["node"] = Node.objects.filter(cluster=cluster).order_by("name").first()
    o["drained_node"] = Node.objects.filter(cluster=cluster).order_by("name").last()
    cluster_actions.drain_node(admin, o["drained_node"], "matrix: a node to resume")
    o["flavor"] = AcceleratorType.objects.get(organization=org, name=H100)
    o["probe_token"], _ = cluster_actions.issue_probe_token(admin, cluster, f"{canary(slug)} probe")
    cluster_actions.plan_maintenance(
        admin,
        cluster,
        starts_at=timezone.now() + timedelta(days=2),
        ends_at=timezone.now() + timedelta(days=3),
        reason=f"{canary(slug)} upgrade",
    )
    o["maintenance"] = MaintenanceWindow.objects.get(cluster=cluster)
    o["tier"] = PriorityTier.objects.create(organization=org, name=f"{canary(slug)}-normal", value=50, is_default=True)
    o["cohort"] = Cohort.objects.create(organization=org, name=f"{canary(slug)} cohort")
    o["queue"] = job_actions.queue_for(home, None)
    Queue.objects.filter(pk=o["queue"].pk).update(cohort=o["cohort"])
    o["neighbour_queue"] = job_actions.queue_for(neighbour, None)
    quotas.set_quota(admin, o["queue"], flavor=H100, nominal=8, reason="matrix: the home team's share")
    o["quota_change"] = QuotaChange.objects.filter(team=home).latest("pk")
    budgets.set_budget(admin, home, accelerator_hours=1000, amount=5000, reason="matrix: the month's plan")
    o["budget"] = Budget.objects.get(team=home, project=None)
    o["alert"] = BudgetAlert.objects.create(
        budget=o["budget"],
        period=date.today().replace(day=1),
        measure=BudgetAlert.Measure.HOURS,
        kind=BudgetAlert.Kind.HALF,
        limit=Decimal(1000),
        spent=Decimal(500),
        message=f"{canary(home.slug)} half of the hours",
        created_at=timezone.now(),
    )
    o["member_limit"] = MemberLimit.objects.create(team=home, user=researcher, accelerators=8)
    o["capacity_request"] = capacity.ask(
        lead,
        home,
        kind="quota",
        flavor=H100,
        accelerators=4,
        ends_at=timezone.now() + timedelta(days=30),
        reason=f"{canary(home.slug)} deadline",
    )
    o["membership"] = Membership.objects.get(user=researcher)
    o["lead_membership"] = Membership.objects.get(user=lead)
    o["finance_membership"] = Membership.objects.get(user=users[Rel.FINANCE])

    def job(user: User, name: str, state: JobState | None = None) -> Job:
        request = JobRequest(
            team=home,
            name=f"{canary(home.slug)} {name}",
            time_limit=3600,
            image="ghcr.io/lab/train:1",
            command=["python", "train.py"],
            accelerators=1,
            accelerator_types=[H100],
        )
        submitted, _ = job_actions.submit_job(user, request)
        if state is not None:
            Job.objects.filter(pk=submitted.pk).update(state=state)
        return Job.objects.get(pk=submitted.pk)

    o["job"] = job(researcher, "pending")  # the researcher's own, waiting
    o["lead_job"] = job(lead, "lead's")  # a teammate's, waiting
    o["running_job"] = job(researcher, "running", Job.State.RUNNING)
    o["failed_job"] = job(researcher, "failed", Job.State.FAILED)
    # The model registry: a model with one stored version, and a finished job with a checkpoint to publish.
    o["succeeded_job"] = job(researcher, "trained", Job.State.SUCCEEDED)
    Checkpoint.objects.create(
        job=o["succeeded_job"],
        attempt=1,
        location=f"s3://{canary(home.slug)}/ckpt",
        step=100,
        reported_at=timezone.now(),
    )
    o["model"] = registry_actions.create_model(researcher, home, f"{canary(home.slug)}-model")
    o["model_version"] = registry_actions.publish_upload(
        researcher, o["model"], io.BytesIO(canary(home.slug).encode()), "weights.bin", registry_actions.Publication()
    )
    sweep = JobRequest(
        team=home,
        name=f"{canary(home.slug)} sweep",
        time_limit=3600,
        image="ghcr.io/lab/train:1",
        accelerators=1,
        accelerator_types=[H100],
    )
    o["array"], _ = arrays.submit_array(researcher, ArrayRequest(job=sweep, range="0-1"))
    Job.objects.filter(array=o["array"], array_index=0).update(state=Job.State.FAILED)  # one to requeue
    # The researcher's service, with a rollout in progress (to roll back), and one of theirs stopped (to start);
    # its endpoint answers API tokens only, never a portal session.
    o["service"] = service_actions.create_service(
        researcher, team=home, name="matrix-api", image="serve:1", command=["serve"]
    )
    service_actions.update_service(researcher, o["service"], image="serve:2")
    o["stopped_service"] = service_actions.create_service(
        researcher, team=home, name="matrix-idle", image="serve:1", command=["serve"]
    )
    service_actions.stop_service(researcher, o["stopped_service"])
    Job.objects.create(
        team=neighbour,
        queue=o["neighbour_queue"],
        submitted_by=users[Rel.NEIGHBOUR],
        tier=o["tier"],
        name=f"{canary(neighbour.slug)} job",
        time_limit=3600,
        state_changed_at=timezone.now(),
        submitted_at=timezone.now(),
    )
    effective = date(2000, 1, 1).isoformat()
    asked = {
        "cluster": cluster.pk,
        "flavor": o["flavor"].pk,
        "capacity_type": "on_demand",
        "hourly_rate": "4.0000",
        "effective_from": effective,
        "note": canary(slug),
    }
    values = prices.clean_price(org, asked)
    o["price"] = Price.objects.create(organization=org, updated_at=timezone.now(), **values)
    o["overhead"] = Overhead.objects.create(
        organization=org,
        name=f"{canary(slug)} platform",
        amount=Decimal(1000),
        starts=date(2000, 1, 1),
        updated_at=timezone.now(),
    )
    o["grid_intensity"] = GridIntensity.objects.create(
        organization=org,
        region=f"{canary(slug)}-region",
        effective_from=date(2000, 1, 1),
        grams_per_kwh=Decimal(300),
        updated_at=timezone.now(),
    )
    o["capacity_change"] = CapacityChange.objects.create(
        organization=org,
        flavor=o["flavor"],
        kind=CapacityChange.Kind.RETIREMENT,
        accelerators=8,
        starts_on=date(2000, 1, 1),
        note=canary(slug),
        updated_at=timezone.now(),
    )
    o["what_if_study"] = WhatIfStudy.objects.create(
        organization=org, requested_by=users[Rel.FINANCE], name=f"{canary(slug)} study", created_at=timezone.now()
    )
    o["what_if"] = WhatIf.objects.create(
        organization=org,
        requested_by=users[Rel.FINANCE],
        cluster=cluster,
        flavor=o["flavor"],
        nodes=2,
        created_at=timezone.now(),
    )
    o["audit_entry"] = AuditLog.objects.filter(organization=org).latest("pk")
    # A closed month (January 2001, empty), for the rows that reopen one.
    o["period"] = periods.close(users[Rel.FINANCE], org, date(2001, 1, 1))
    o["token"] = ApiToken.objects.get(user=researcher, name="matrix")
    o["service_account"], _ = actions.create_service_account(
        admin, home, name=f"{canary(home.slug)} ci", scope=ServiceAccount.Scope.READ
    )
    o["sa_membership"] = Membership.objects.get(user=o["service_account"].user)
    # Only the installation's administrator maps the provider's groups (GroupMapping.Tenancy says why).
    root = User.objects.filter(is_superuser=True).first() or User.objects.create_superuser("root", password=PASSWORD)
    o["group_mapping"] = actions.map_group(
        root, org, group=f"{canary(slug)}-{home.slug}", role=Role.RESEARCHER, team=home
    )
    return side


def build() -> World:
    """Both organizations, their users (each with an API token) and their objects."""
    demo = seed_demo()
    for user in User.objects.all():
        user.set_password(PASSWORD)
        user.save(update_fields=["password"])
    teams = {t.slug: t for t in Team.objects.filter(organization=demo)}
    named = {u.username: u for u in User.objects.all()}
    demo_users = {
        Rel.RESEARCHER: named["alice"],
        Rel.LEAD: named["lena"],
        Rel.NEIGHBOUR: named["bob"],
        Rel.FINANCE: named["fiona"],
        Rel.ADMIN: named["adam"],
        Rel.PROCUREMENT: named["paula"],
    }
    rival = Organization.objects.create(name="Rival Labs", slug="rival")
    intruders = Team.objects.create(organization=rival, name="Intruders", slug="intruders")
    moles = Team.objects.create(organization=rival, name="Moles", slug="moles")
    Project.objects.create(team=intruders, name="Heist", slug="heist")
    rival_users = {
        Rel.ADMIN: _user("mallory", rival, Role.ADMIN, None),
        Rel.LEAD: _user("trent", rival, Role.LEAD, intruders),
        Rel.RESEARCHER: _user("ruth", rival, Role.RESEARCHER, intruders),
        Rel.NEIGHBOUR: _user("otto", rival, Role.RESEARCHER, moles),
        Rel.FINANCE: _user("fred", rival, Role.FINANCE, None),
    }
    tokens = {}
    for user in [*demo_users.values(), *rival_users.values()]:
        _, tokens[user.username] = actions.issue_token(user, name="matrix")
    # Marked as just used (for the next day), so that authenticating with them writes nothing: every write a
    # check sees is then the request's own.
    ApiToken.objects.filter(name="matrix").update(last_used_at=timezone.now() + timedelta(days=1))
    sides = {
        "demo": _side("demo", demo, teams["vision"], teams["robotics"], demo_users),
        "rival": _side("rival", rival, intruders, moles, rival_users),
    }
    # Somebody of the other organization, whom nobody here may add to a team (and who must not be told apart
    # from somebody who does not exist).
    sides["demo"].objects["stranger"] = rival_users[Rel.NEIGHBOUR]
    sides["rival"].objects["stranger"] = demo_users[Rel.NEIGHBOUR]
    return World(sides=sides, tokens=tokens)
