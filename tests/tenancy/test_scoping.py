"""The one scoping path: what `for_user(user, action)` gives each role, for every tenant model."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser, User

from tenancy.models import AuditLog, Membership, Organization, Project, Team
from tenancy.scoping import Action, can
from tests.conftest import World

DEMO_TEAMS = {"vision", "robotics", "language"}
VIEW_TEAMS = {
    "alice": {"vision"},
    "bob": {"robotics"},
    "lena": {"vision"},
    "fiona": DEMO_TEAMS,
    "adam": DEMO_TEAMS,
    "mallory": {"intruders"},
    "trent": {"intruders"},
}
CHANGE_TEAMS = {
    "alice": set(),
    "bob": set(),
    "lena": {"vision"},
    "fiona": set(),
    "adam": DEMO_TEAMS,
    "mallory": {"intruders"},
    "trent": {"intruders"},
}


@pytest.mark.parametrize("username", sorted(VIEW_TEAMS))
def test_teams_and_projects_visible_to_each_role(world: World, username: str) -> None:
    user = world.users[username]
    assert {t.slug for t in Team.objects.for_user(user, Action.VIEW)} == VIEW_TEAMS[username]
    assert {t.slug for t in Team.objects.for_user(user, Action.CHANGE)} == CHANGE_TEAMS[username]
    assert {p.team.slug for p in Project.objects.for_user(user, Action.VIEW)} == VIEW_TEAMS[username]
    assert {p.team.slug for p in Project.objects.for_user(user, Action.CHANGE)} == CHANGE_TEAMS[username]


@pytest.mark.parametrize("username", sorted(VIEW_TEAMS))
def test_can_agrees_with_for_user(world: World, username: str) -> None:
    user = world.users[username]
    for team in Team.objects.all():
        assert can(user, Action.VIEW, team) == (team.slug in VIEW_TEAMS[username])
        assert can(user, Action.CHANGE, team) == (team.slug in CHANGE_TEAMS[username])


def test_organizations_are_visible_only_to_their_members(world: World) -> None:
    for username in ("alice", "bob", "lena", "fiona", "adam"):
        assert list(Organization.objects.for_user(world.users[username], Action.VIEW)) == [world.org]
    assert list(Organization.objects.for_user(world.users["mallory"], Action.VIEW)) == [world.other_org]
    assert not Organization.objects.for_user(world.users["lena"], Action.CHANGE).exists()
    assert list(Organization.objects.for_user(world.users["adam"], Action.CHANGE)) == [world.org]


def test_memberships_of_a_team_are_visible_to_that_team_only(world: World) -> None:
    seen_by_alice = {m.user.username for m in Membership.objects.for_user(world.users["alice"], Action.VIEW)}
    assert seen_by_alice == {"alice", "lena"}
    seen_by_adam = {m.user.username for m in Membership.objects.for_user(world.users["adam"], Action.VIEW)}
    assert seen_by_adam == {"alice", "bob", "lena", "fiona", "adam", "paula"}
    assert not Membership.objects.for_user(world.users["paula"], Action.VIEW).exists()  # procurement: no team's people
    assert not Membership.objects.for_user(world.users["alice"], Action.CHANGE).exists()


def test_audit_log_is_read_by_admins_of_the_same_organization_only(world: World) -> None:
    AuditLog.objects.create(organization=world.org, actor_name="x", action="test.ours")
    AuditLog.objects.create(organization=world.other_org, actor_name="y", action="test.theirs")
    assert [e.action for e in AuditLog.objects.for_user(world.users["adam"], Action.VIEW)] == ["test.ours"]
    assert [e.action for e in AuditLog.objects.for_user(world.users["mallory"], Action.VIEW)] == ["test.theirs"]
    for username in ("alice", "lena", "fiona", "trent"):
        assert not AuditLog.objects.for_user(world.users[username], Action.VIEW).exists()
    assert not AuditLog.objects.for_user(world.users["adam"], Action.CHANGE).exists()


def test_anonymous_inactive_and_roleless_users_see_nothing(world: World) -> None:
    alice = world.users["alice"]
    alice.is_active = False
    alice.save()
    nobody = User.objects.create_user("nobody")
    for user in (AnonymousUser(), alice, nobody):
        for model in (Organization, Team, Project, Membership, AuditLog):
            assert not model.objects.for_user(user, Action.VIEW).exists(), (user, model)


def test_superuser_sees_everything(world: World) -> None:
    root = User.objects.create_superuser("root", password="pw")
    assert Team.objects.for_user(root, Action.CHANGE).count() == Team.objects.count()
