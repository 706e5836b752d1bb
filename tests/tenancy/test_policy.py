"""The permission policy (tenancy/policy.py): its table answers as the code used to, and no role is asked about
anywhere else.

The answers per role and relation are tests/authz's (its change rows are computed from the same table); here
are the rules the matrix cannot see: the code holds no role query outside the policy, superusers, inactive
users, owners who left their team, the queryset form, and one membership query per question.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.utils import timezone

from governance.models import PriorityTier, Queue
from scheduler.models import Job
from tenancy import policy
from tenancy.models import Membership, Organization, Team
from tenancy.scoping import Role

ROOT = Path(__file__).resolve().parents[2]
#: The product's packages (demo data and the benchmarks' synthetic fleets make memberships by design).
PRODUCT = (
    "portal",
    "common",
    "tenancy",
    "clusters",
    "governance",
    "scheduler",
    "billing",
    "notifications",
    "serving",
    "edge",
    "registry",
    "qm",
)
#: Where roles may be named in a query or a comparison: the policy, the read rules, the models' constraints,
#: and the writes of memberships (by hand: the compare-and-set of `change_role`; by the provider's groups).
ALLOWED: dict[str, set[str]] = {
    "tenancy/policy.py": {"*"},
    "tenancy/scoping.py": {"*"},
    "tenancy/models.py": {"*"},
    "tenancy/actions/identity.py": {"*"},
    "tenancy/actions/__init__.py": {"change_role"},
    # Which sections the home page shows a user (their roles'); it changes nothing, and each section's rows are
    # read through the scoping path and the policy like any page's.
    "portal/home.py": {"sections"},
}
QUERIES = {"filter", "exclude", "get", "Q", "update_or_create", "get_or_create"}


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _is_role(node: ast.expr) -> bool:
    """``x.role``, ``x.roles``, ``Role.ADMIN``."""
    if isinstance(node, ast.Attribute):
        return node.attr in ("role", "roles") or (isinstance(node.value, ast.Name) and node.value.id == "Role")
    return False


def role_queries(source: str) -> list[tuple[int, str, str]]:
    """Where ``source`` asks about roles: (line, enclosing function, what) for each query filtering by role
    (``filter(role=…)``, ``Q(role__in=…)``) and each comparison of a role (``m.role == …``, ``Role.X in …``)."""
    found: list[tuple[int, str, str]] = []

    def visit(node: ast.AST, function: str) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            function = node.name
        if isinstance(node, ast.Call) and _name(node.func) in QUERIES:
            for keyword in node.keywords:
                if keyword.arg and (keyword.arg == "role" or keyword.arg.startswith("role__")):
                    found.append((node.lineno, function, f"{_name(node.func)}({keyword.arg}=…)"))
        if isinstance(node, ast.Compare) and any(_is_role(n) for n in [node.left, *node.comparators]):
            found.append((node.lineno, function, ast.unparse(node)[:80]))
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(ast.parse(source), "")
    return found


def outside_policy() -> list[str]:
    problems = []
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if "/migrations/" in relative:
                continue
            allowed = ALLOWED.get(relative, set())
            for line, function, what in role_queries(path.read_text()):
                if "*" not in allowed and function not in allowed:
                    problems.append(f"{relative}:{line} ({function or 'module'}): {what}")
    return problems


def test_no_role_query_outside_the_policy() -> None:
    """Who may change what is the policy's to say: a role asked about anywhere else fails here."""
    problems = outside_policy()
    assert not problems, "Role queries outside tenancy/policy.py (ask policy.can/require/permitted):\n" + "\n".join(
        problems
    )


@pytest.mark.parametrize(
    "source",
    [
        "Membership.objects.filter(user=u, role=Role.LEAD).exists()",
        "Membership.objects.filter(user=u).filter(role__in=[Role.ADMIN]).exists()",
        "Membership.objects.filter(Q(team=t, role__in=ROLES) | Q(role=Role.ADMIN), user=u)",
        "m.role == Role.ADMIN",
        "Role.FINANCE in roles",
        "membership.role in {'lead', 'admin'}",
    ],
)
def test_the_check_finds_a_role_query(source: str) -> None:
    assert role_queries(f"def may(u):\n    return {source}\n"), source


def test_the_check_lets_other_keywords_and_writes_be() -> None:
    assert not role_queries("Membership.objects.create(user=u, team=t, role=Role.LEAD)\nadd_member(a, o, role=r)\n")


def test_every_permission_is_asked_for() -> None:
    """A permission of the table that no code asks for (by name, or as ``may.<name>`` in a template) is a stale
    line of the policy."""
    sources = [p for package in PRODUCT for p in (ROOT / package).rglob("*.py") if p.name != "policy.py"]
    code = "\n".join(p.read_text() for p in [*sources, *(ROOT / "templates").rglob("*.html")])
    unused = [n for n in policy.PERMISSIONS if f'"{n}"' not in code and f"may.{n.replace('.', '_')}" not in code]
    assert not unused, f"Permissions no code asks for: {unused}"


# --- the rules -----------------------------------------------------------------------------------------------


@pytest.fixture
def org(db: None) -> Organization:
    return Organization.objects.create(name="Policy Labs", slug="policy")


def _member(name: str, org: Organization, role: Role, team: Team | None = None) -> User:
    user = User.objects.create_user(name)
    Membership.objects.create(user=user, organization=org, team=team, role=role)
    return user


def test_roles_grant_where_they_are_held(org: Organization) -> None:
    home = Team.objects.create(organization=org, name="Home", slug="home")
    other = Team.objects.create(organization=org, name="Other", slug="other")
    lead, admin = _member("lead", org, Role.LEAD, home), _member("admin", org, Role.ADMIN)
    assert policy.can(lead, "member_limit.set", home)
    assert not policy.can(lead, "member_limit.set", other)  # a lead of another team
    assert not policy.can(lead, "quota.set", Queue.objects.get(team=home, project=None))  # the admin's
    assert policy.granted(lead, Queue.objects.get(team=home, project=None), "quota.set", "quota.lend") == {"quota.lend"}
    assert policy.can(admin, "quota.set", Queue.objects.get(team=other, project=None))
    finance = _member("finance", org, Role.FINANCE)
    assert policy.can(admin, "member.remove", Membership.objects.get(user=finance))  # an organization-wide role
    assert not policy.can(lead, "member.remove", Membership.objects.get(user=finance))  # no team: no lead reaches it
    rival = Organization.objects.create(name="Rival", slug="rival")
    assert not policy.can(admin, "tier.set", rival)


def test_superusers_inactive_users_and_anonymous(org: Organization) -> None:
    team = Team.objects.create(organization=org, name="Home", slug="home")
    root = User.objects.create_superuser("root")
    assert policy.can(root, "quota.set", team)
    assert policy.can(root, "group_mapping.set", org)
    assert not policy.can(root, "job.submit", team)  # a superuser submits through a membership, as before
    admin = _member("admin", org, Role.ADMIN)
    admin.is_active = False
    assert not policy.can(admin, "tier.set", org)
    assert not policy.can(None, "tier.set", org)
    with pytest.raises(PermissionDenied, match=r"^Only an organization admin may change priority tiers\.$"):
        policy.require(None, "tier.set", org)


def test_a_jobs_owner_cancels_it_while_in_its_team(org: Organization) -> None:
    team = Team.objects.create(organization=org, name="Home", slug="home")
    owner = _member("owner", org, Role.RESEARCHER, team)
    mate = _member("mate", org, Role.RESEARCHER, team)
    tier = PriorityTier.objects.create(organization=org, name="normal", value=50, is_default=True)
    now = timezone.now()
    job = Job.objects.create(
        team=team,
        queue=Queue.objects.get(team=team),
        submitted_by=owner,
        tier=tier,
        name="run",
        time_limit=3600,
        state_changed_at=now,
        submitted_at=now,
    )
    assert policy.can(owner, "job.cancel", job)
    assert not policy.can(mate, "job.cancel", job)
    assert policy.can(mate, "job.change", job)
    assert list(policy.permitted(owner, "job.cancel", Job.objects.all())) == [job]
    assert not policy.permitted(mate, "job.cancel", Job.objects.all()).exists()
    Membership.objects.filter(user=owner).delete()
    assert not policy.can(owner, "job.cancel", job)
    assert not policy.permitted(owner, "job.cancel", Job.objects.all()).exists()


def test_one_membership_query_per_question(org: Organization, django_assert_num_queries: object) -> None:
    team = Team.objects.create(organization=org, name="Home", slug="home")
    lead = _member("lead", org, Role.LEAD, team)
    with django_assert_num_queries(1):  # type: ignore[operator]
        assert policy.granted(lead, team, *[n for n in policy.PERMISSIONS if "team" in n or n.startswith("budget")])
