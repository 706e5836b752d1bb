"""The main navigation (``portal/navigation.py``, rendered by ``templates/base.html``): who sees which link, and
which link is marked current, exactly as when the base template laid the links out by hand."""

from __future__ import annotations

import itertools
import re
from types import SimpleNamespace
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.template import Context, Template
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from demo.tenancy import USERS, seed_demo
from portal.navigation import links_for
from tenancy.scoping import Role

LINK = re.compile(r'<a href="([^"]*)"( aria-current="page")?>([^<]*)</a>')
RESEARCHER = ["Home", "Teams", "Jobs", "Submit", "Models", "Clusters", "Costs", "API tokens", "API"]
EVERY_LINK = [
    "Home",
    "Teams",
    "Jobs",
    "Submit",
    "Models",
    "Clusters",
    "Quotas",
    "Costs",
    "Price book",
    "Capacity",
    "Audit log",
    "SLOs",
    "API tokens",
    "API",
]
#: The links each demo user saw, read off the base template before the navigation moved to Python.
SHOWN = {
    "alice": RESEARCHER,
    "bob": RESEARCHER,
    "lena": ["Home", "Teams", "Jobs", "Submit", "Models", "Clusters", "Quotas", "Costs", "API tokens", "API"],
    "fiona": ["Home", "Teams", "Jobs", "Clusters", "Quotas", "Costs", "Price book", "Capacity", "API tokens", "API"],
    "adam": EVERY_LINK,
    "root": EVERY_LINK,
    "paula": ["Home", "Capacity", "API tokens", "API"],
    "nobody": ["Home", "API tokens", "API"],
}

#: The navigation as ``templates/base.html`` laid it out by hand until it became ``portal/navigation.py``: the
#: reference the Python table is checked against, for every page and every combination of roles. Since then:
#: a lead's Quotas link, to the quota page of the first team they lead (team 7 here), current there too; the
#: Models link, for those who may publish models (docs/models.md), current in its whole section: the registry,
#: services, devices and rollouts; the procurement role, whose Capacity link (current on the capacity plan too)
#: is its only one, as Teams, Jobs, Clusters and Costs are for those who see the teams' work.
BEFORE = """{% with here=request.resolver_match.url_name %}
      <a href="{% url 'home' %}"{% if here == "home" %} aria-current="page"{% endif %}>Home</a>
{% if "researcher" in user_roles or "lead" in user_roles or "finance" in user_roles or is_org_admin or user.is_superuser %}<a href="{% url 'team-list' %}"{% if here == "team-list" or here == "team-detail" %} aria-current="page"{% endif %}>Teams</a>{% endif %}
      {% if "researcher" in user_roles or "lead" in user_roles or "finance" in user_roles or is_org_admin or user.is_superuser %}<a href="{% url 'job-list' %}"{% if here|slice:":4" == "job-" and here != "job-new" or here|slice:":6" == "queue-" %} aria-current="page"{% endif %}>Jobs</a>{% endif %}
      {% if "researcher" in user_roles or "lead" in user_roles or is_org_admin or user.is_superuser %}<a href="{% url 'job-new' %}"{% if here == "job-new" %} aria-current="page"{% endif %}>Submit</a>{% endif %}
      {% if "researcher" in user_roles or "lead" in user_roles or is_org_admin or user.is_superuser %}<a href="{% url 'model-list' %}"{% if here|slice:":6" == "model-" or here|slice:":8" == "service-" or here|slice:":7" == "device-" or here|slice:":8" == "rollout-" %} aria-current="page"{% endif %}>Models</a>{% endif %}
      {% if "researcher" in user_roles or "lead" in user_roles or "finance" in user_roles or is_org_admin or user.is_superuser %}<a href="{% url 'cluster-list' %}"{% if here|slice:":8" == "cluster-" or here|slice:":5" == "node-" %} aria-current="page"{% endif %}>Clusters</a>{% endif %}
      {% if is_org_admin or "finance" in user_roles or user.is_superuser %}<a href="{% url 'org-quotas' %}"{% if here == "org-quotas" or here == "team-quotas" %} aria-current="page"{% endif %}>Quotas</a>{% elif "lead" in user_roles %}<a href="/teams/7/quotas/"{% if here == "org-quotas" or here == "team-quotas" %} aria-current="page"{% endif %}>Quotas</a>{% endif %}
      {% if "researcher" in user_roles or "lead" in user_roles or "finance" in user_roles or is_org_admin or user.is_superuser %}<a href="{% url 'costs' %}"{% if here == "costs" or here == "costs-team" %} aria-current="page"{% endif %}>Costs</a>{% endif %}
      {% if is_org_admin or "finance" in user_roles or user.is_superuser %}<a href="{% url 'price-book' %}"{% if here|slice:":6" == "price-" or here|slice:":9" == "overhead-" %} aria-current="page"{% endif %}>Price book</a>{% endif %}
      {% if is_org_admin or "finance" in user_roles or "procurement" in user_roles or user.is_superuser %}<a href="{% url 'capacity-forecast' %}"{% if here|slice:":8" == "what-if-" or here == "capacity-forecast" or here|slice:":13" == "capacity-plan" %} aria-current="page"{% endif %}>Capacity</a>{% endif %}
      {% if is_org_admin or user.is_superuser %}<a href="{% url 'audit-log' %}"{% if here == "audit-log" %} aria-current="page"{% endif %}>Audit log</a>{% endif %}
      {% if is_org_admin or user.is_superuser %}<a href="{% url 'slo' %}"{% if here == "slo" %} aria-current="page"{% endif %}>SLOs</a>{% endif %}
      <a href="{% url 'token-list' %}"{% if here == "token-list" %} aria-current="page"{% endif %}>API tokens</a>
      <a href="{% url 'api-docs' %}">API</a>
{% endwith %}"""  # noqa: E501 - the template as it was, line for line


def links(html: str) -> list[tuple[str, bool, str]]:
    return [(href, bool(current), label) for href, current, label in LINK.findall(html)]


def main_nav(html: str) -> str:
    return html.split('<nav aria-label="Main">', 1)[1].split("</nav>", 1)[0]


def url_names() -> set[str]:
    names: set[str] = set()

    def walk(patterns: list[Any]) -> None:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns)
            elif isinstance(pattern, URLPattern) and pattern.name:
                names.add(pattern.name)

    walk(get_resolver().url_patterns)
    return names


@pytest.mark.django_db
def test_each_demo_role_sees_the_links_it_saw_before() -> None:
    seed_demo()
    User.objects.create_superuser("root", password="pw")
    User.objects.create_user("nobody", password="pw")
    assert {demo.username for demo in USERS} | {"root", "nobody"} == set(SHOWN)
    for username, shown in SHOWN.items():
        client = Client()
        client.force_login(User.objects.get(username=username))
        response = client.get(reverse("token-list"))
        assert response.status_code == 200
        found = links(main_nav(response.content.decode()))
        assert [label for _, _, label in found] == shown, username
        assert [label for _, current, label in found if current] == ["API tokens"], username
        assert all(href.startswith("/") for href, _, _ in found)


def test_every_page_marks_the_same_link_current_for_every_combination_of_roles(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("portal.navigation._first_team", lambda user, permission: 7)
    before = Template(BEFORE)
    names = [*sorted(url_names()), None]
    assert {"home", "job-new", "job-list", "queue-detail", "price-book", "what-if-detail", "node-detail"} <= set(names)
    combinations = [set(held) for size in range(len(Role) + 1) for held in itertools.combinations(Role, size)]
    for roles, superuser, here in itertools.product(combinations, (False, True), names):
        context = {
            "request": SimpleNamespace(resolver_match=SimpleNamespace(url_name=here)),
            "user": SimpleNamespace(is_superuser=superuser),
            "user_roles": sorted(roles),
            "is_org_admin": Role.ADMIN in roles,
        }
        expected = links(before.render(Context(context)))
        user = SimpleNamespace(is_superuser=superuser, is_authenticated=True, is_active=True)
        found = [(link["url"], link["current"], link["label"]) for link in links_for(user, roles, here)]  # type: ignore[arg-type]
        assert found == expected, (roles, superuser, here)


@pytest.mark.django_db
def test_a_lead_s_quotas_link_opens_the_quota_page_of_their_team() -> None:
    seed_demo()
    client = Client()
    client.force_login(User.objects.get(username="lena"))
    found = links(main_nav(client.get(reverse("home")).content.decode()))
    vision = User.objects.get(username="lena").memberships.get().team
    assert vision is not None
    assert (f"/teams/{vision.pk}/quotas/", False, "Quotas") in found
    page = client.get(reverse("team-quotas", kwargs={"pk": vision.pk}))
    assert page.status_code == 200
    assert [label for _, current, label in links(main_nav(page.content.decode())) if current] == ["Quotas"]


def test_the_phone_menu_is_a_checkbox_and_its_label_without_script() -> None:
    html = Template('{% extends "base.html" %}').render(
        Context({"user": SimpleNamespace(is_authenticated=True, get_username=lambda: "x"), "nav_links": []})
    )
    assert '<input type="checkbox" id="nav-toggle" class="nav-toggle">' in html
    assert '<label for="nav-toggle" class="nav-toggle-label" data-testid="menu">Menu</label>' in html
    assert "onclick" not in html
