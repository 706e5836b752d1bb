"""The portal's main navigation, as data: which links the top bar shows, to whom, and which one is current.

``templates/base.html`` renders ``nav_links`` (from ``portal.context_processors.navigation``) with one loop;
a link is added or its audience changed here, never in a template. A link with a ``permission`` is shown to
those the policy grants it somewhere (``tenancy.policy.anywhere``: a role that grants it in any team or
organization; superusers, always), the others to everyone signed in. The page is the link's when its URL
name is one of ``current`` (a name ending in ``*`` matches every name that starts with the rest) and not one
of ``not_current``.

A team's lead (who may set its projects' quotas, ``quota.project.set``) without the organization's quota page
gets a Quotas link all the same: to the quota page of the first team they lead (``team_url_name``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.urls import reverse

from common.types import AnyUser
from tenancy import policy
from tenancy.models import Team
from tenancy.scoping import Action, Role


@dataclass(frozen=True)
class Link:
    label: str
    url_name: str
    current: tuple[str, ...] = ()
    not_current: tuple[str, ...] = ()
    permission: str | None = None
    #: For those without ``permission``: a page of the first team where they hold ``team_permission``.
    team_url_name: str | None = None
    team_permission: str | None = None

    def is_shown(self, user: AnyUser, roles: set[Role]) -> bool:
        return self.permission is None or policy.anywhere(user, self.permission, roles)

    def is_current(self, here: str) -> bool:
        if here in self.not_current:
            return False
        return any(here.startswith(name[:-1]) if name.endswith("*") else here == name for name in self.current)


LINKS = (
    Link("Home", "home", current=("home",)),
    Link("Teams", "team-list", current=("team-list", "team-detail"), permission="work.read"),
    Link("Jobs", "job-list", current=("job-*", "queue-*"), not_current=("job-new",), permission="work.read"),
    Link("Submit", "job-new", current=("job-new",), permission="job.submit"),
    # The model registry, and where models run: services and devices (their pages share one tab bar).
    Link("Models", "model-list", current=("model-*", "service-*", "device-*", "rollout-*"), permission="model.create"),
    Link("Clusters", "cluster-list", current=("cluster-*", "node-*"), permission="work.read"),
    Link(
        "Quotas",
        "org-quotas",
        current=("org-quotas", "team-quotas"),
        permission="quota.org.view",
        team_url_name="team-quotas",
        team_permission="quota.project.set",
    ),
    Link("Costs", "costs", current=("costs", "costs-team"), permission="work.read"),
    Link("Price book", "price-book", current=("price-*", "overhead-*"), permission="price.set"),
    Link(
        "Capacity",
        "capacity-forecast",
        current=("capacity-forecast", "capacity-plan*", "what-if-*"),
        permission="whatif.run",
    ),
    Link("Audit log", "audit-log", current=("audit-log",), permission="audit.read"),
    Link("SLOs", "slo", current=("slo",), permission="slo.view"),
    Link("API tokens", "token-list", current=("token-list",)),
    Link("API", "api-docs"),
)


def links_for(user: AnyUser, roles: set[Role], here: str | None) -> list[dict[str, Any]]:
    """The links shown to ``user`` (holding ``roles``) on the page named ``here``, as the base template reads
    them."""
    found = []
    for link in LINKS:
        if link.is_shown(user, roles):
            url = reverse(link.url_name)
        elif link.team_url_name and link.team_permission and policy.anywhere(user, link.team_permission, roles):
            team = _first_team(user, link.team_permission)
            if team is None:
                continue
            url = reverse(link.team_url_name, kwargs={"pk": team})
        else:
            continue
        found.append({"label": link.label, "url": url, "current": link.is_current(here or "")})
    return found


def _first_team(user: AnyUser, permission: str) -> int | None:
    """The first team (by name) where ``user`` holds ``permission``."""
    teams = policy.permitted(user, permission, Team.objects.for_user(user, Action.VIEW)).order_by("name", "pk")
    pk: int | None = teams.values_list("pk", flat=True).first()
    return pk
