"""The demo organization: three teams and one user per role, all with the password `demo`.

Seeding is idempotent: running it again changes nothing but resetting the demo passwords.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction

from tenancy.models import Membership, Organization, Project, Team
from tenancy.scoping import Role

DEMO_PASSWORD = "demo"  # noqa: S105 - the demo only; seed_demo refuses to run in production
TEAMS = {
    "vision": ("Vision", "Image and video models.", ["detection", "segmentation"]),
    "robotics": ("Robotics", "Policies for manipulation and locomotion.", ["manipulation"]),
    "language": ("Language", "Large language model pre-training and fine-tuning.", ["pretraining", "alignment"]),
}


@dataclass(frozen=True)
class DemoUser:
    username: str
    full_name: str
    role: Role
    team: str | None


USERS = (
    DemoUser("alice", "Alice Chen", Role.RESEARCHER, "vision"),
    DemoUser("bob", "Bob Okafor", Role.RESEARCHER, "robotics"),
    DemoUser("lena", "Lena Fischer", Role.LEAD, "vision"),
    DemoUser("fiona", "Fiona Walsh", Role.FINANCE, None),
    DemoUser("adam", "Adam Novak", Role.ADMIN, None),
    DemoUser("paula", "Paula Reyes", Role.PROCUREMENT, None),
)


@transaction.atomic
def seed_demo() -> Organization:
    if settings.PRODUCTION:
        raise ImproperlyConfigured("The demo data has well-known passwords; it is never seeded in production.")
    org, _ = Organization.objects.get_or_create(slug="demo", defaults={"name": "Demo Research Lab"})
    teams: dict[str, Team] = {}
    for slug, (name, description, projects) in TEAMS.items():
        teams[slug], _ = Team.objects.get_or_create(
            organization=org, slug=slug, defaults={"name": name, "description": description}
        )
        for project in projects:
            Project.objects.get_or_create(team=teams[slug], slug=project, defaults={"name": project.capitalize()})
    User = get_user_model()
    for demo in USERS:
        first, last = demo.full_name.split(" ", 1)
        user, _ = User.objects.get_or_create(
            username=demo.username,
            defaults={"first_name": first, "last_name": last, "email": f"{demo.username}@demo.example"},
        )
        user.set_password(DEMO_PASSWORD)
        user.save(update_fields=["password"])
        Membership.objects.get_or_create(
            user=user, organization=org, team=teams[demo.team] if demo.team else None, role=demo.role
        )
    return org
