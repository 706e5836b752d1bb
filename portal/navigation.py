"""The portal's main navigation, as data: which links the top bar shows, to whom, and which one is current.

``templates/base.html`` renders ``nav_links`` (from ``portal.context_processors.navigation``) with one loop;
a link is added or its audience changed here, never in a template. Superusers see every link; a link with
``shown_to`` is shown to users holding one of those roles in any organization, the others to everyone signed
in. The page is the link's when its URL name is one of ``current`` (a name ending in ``*`` matches every name
that starts with the rest) and not one of ``not_current``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.urls import reverse

from tenancy.scoping import Role


@dataclass(frozen=True)
class Link:
    label: str
    url_name: str
    current: tuple[str, ...] = ()
    not_current: tuple[str, ...] = ()
    shown_to: frozenset[Role] | None = None

    def is_shown(self, roles: set[Role], superuser: bool) -> bool:
        return superuser or self.shown_to is None or bool(self.shown_to & roles)

    def is_current(self, here: str) -> bool:
        if here in self.not_current:
            return False
        return any(here.startswith(name[:-1]) if name.endswith("*") else here == name for name in self.current)


SUBMITTERS = frozenset({Role.RESEARCHER, Role.LEAD, Role.ADMIN})
FLEET_MONEY = frozenset({Role.ADMIN, Role.FINANCE})
ADMINS = frozenset({Role.ADMIN})

LINKS = (
    Link("Home", "home", current=("home",)),
    Link("Teams", "team-list", current=("team-list", "team-detail")),
    Link("Jobs", "job-list", current=("job-*", "queue-*"), not_current=("job-new",)),
    Link("Submit", "job-new", current=("job-new",), shown_to=SUBMITTERS),
    Link("Clusters", "cluster-list", current=("cluster-*", "node-*")),
    Link("Quotas", "org-quotas", current=("org-quotas",), shown_to=FLEET_MONEY),
    Link("Costs", "costs", current=("costs", "costs-team")),
    Link("Price book", "price-book", current=("price-*", "overhead-*"), shown_to=FLEET_MONEY),
    Link("Capacity", "capacity-forecast", current=("capacity-forecast", "what-if-*"), shown_to=FLEET_MONEY),
    Link("Audit log", "audit-log", current=("audit-log",), shown_to=ADMINS),
    Link("API tokens", "token-list", current=("token-list",)),
    Link("API", "api-docs"),
)


def links_for(roles: set[Role], superuser: bool, here: str | None) -> list[dict[str, Any]]:
    """The links shown to a user with ``roles`` on the page named ``here``, as the base template reads them."""
    return [
        {"label": link.label, "url": reverse(link.url_name), "current": link.is_current(here or "")}
        for link in LINKS
        if link.is_shown(roles, superuser)
    ]
