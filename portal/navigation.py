"""The portal's main navigation, as data: which links the top bar shows, to whom, and which one is current.

``templates/base.html`` renders ``nav_links`` (from ``portal.context_processors.navigation``) with one loop;
a link is added or its audience changed here, never in a template. A link with a ``permission`` is shown to
those the policy grants it somewhere (``tenancy.policy.anywhere``: a role that grants it in any team or
organization; superusers, always), the others to everyone signed in. The page is the link's when its URL
name is one of ``current`` (a name ending in ``*`` matches every name that starts with the rest) and not one
of ``not_current``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.urls import reverse

from common.types import AnyUser
from tenancy import policy
from tenancy.scoping import Role


@dataclass(frozen=True)
class Link:
    label: str
    url_name: str
    current: tuple[str, ...] = ()
    not_current: tuple[str, ...] = ()
    permission: str | None = None

    def is_shown(self, user: AnyUser, roles: set[Role]) -> bool:
        return self.permission is None or policy.anywhere(user, self.permission, roles)

    def is_current(self, here: str) -> bool:
        if here in self.not_current:
            return False
        return any(here.startswith(name[:-1]) if name.endswith("*") else here == name for name in self.current)


LINKS = (
    Link("Home", "home", current=("home",)),
    Link("Teams", "team-list", current=("team-list", "team-detail")),
    Link("Jobs", "job-list", current=("job-*", "queue-*"), not_current=("job-new",)),
    Link("Submit", "job-new", current=("job-new",), permission="job.submit"),
    Link("Clusters", "cluster-list", current=("cluster-*", "node-*")),
    Link("Quotas", "org-quotas", current=("org-quotas",), permission="quota.org.view"),
    Link("Costs", "costs", current=("costs", "costs-team")),
    Link("Price book", "price-book", current=("price-*", "overhead-*"), permission="price.set"),
    Link("Capacity", "capacity-forecast", current=("capacity-forecast", "what-if-*"), permission="whatif.run"),
    Link("Audit log", "audit-log", current=("audit-log",), permission="audit.read"),
    Link("API tokens", "token-list", current=("token-list",)),
    Link("API", "api-docs"),
)


def links_for(user: AnyUser, roles: set[Role], here: str | None) -> list[dict[str, Any]]:
    """The links shown to ``user`` (holding ``roles``) on the page named ``here``, as the base template reads
    them."""
    return [
        {"label": link.label, "url": reverse(link.url_name), "current": link.is_current(here or "")}
        for link in LINKS
        if link.is_shown(user, roles)
    ]
