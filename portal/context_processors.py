from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from portal import navigation as main_navigation
from tenancy import policy

#: What pages offer beside the navigation, by the policy: ``may.workers_view`` and so on in templates.
OFFERED = ("cluster.create", "workers.view")


def navigation(request: HttpRequest) -> dict[str, Any]:
    """The user's roles, and the main navigation's links for them (``portal/navigation.py``)."""
    roles = policy.request_roles(request)
    user = request.user
    links = []
    if user.is_authenticated:
        here = getattr(request.resolver_match, "url_name", None)
        links = main_navigation.links_for(user, roles, here)
    may = {name.replace(".", "_"): policy.anywhere(user, name, roles) for name in OFFERED}
    return {"user_roles": sorted(roles), "nav_links": links, "may": may}
