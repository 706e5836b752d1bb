"""The scoping path as the API's base pieces: viewsets whose rows are those ``for_user`` lets the user see, and a
foreign key accepted only when the user can see its object. Every app's API builds on these (with
``common.api`` for the rest of the toolkit, and ``tenancy.authentication``/``tenancy.scopes`` for tokens)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db.models import QuerySet
from rest_framework import exceptions, serializers, viewsets

from common import params
from common.validation import REQUIRED
from tenancy.models import Organization, Team
from tenancy.scoping import Action


class SignedInViewSet(viewsets.GenericViewSet):  # type: ignore[type-arg]
    """A viewset behind IsAuthenticated; `actor` is the signed-in user, typed as such."""

    @property
    def actor(self) -> User:
        assert isinstance(self.request.user, User)
        return self.request.user


def organization_named(actor: User, slug: str | None) -> Organization:
    """The organization a request names by its slug (404 if the actor cannot see it), or the actor's only one
    (400 asking for the slug when the actor belongs to several)."""
    visible = Organization.objects.for_user(actor, Action.VIEW)
    if slug:
        found = visible.filter(slug=slug).first()
        if found is None:
            raise exceptions.NotFound(f"No organization {slug!r}.")
        return found  # type: ignore[no-any-return]
    mine = list(visible[:2])
    if len(mine) != 1:
        raise exceptions.ValidationError({"organization": ["Name the organization (its slug)."]})
    return mine[0]  # type: ignore[no-any-return]


def team_named(actor: User, raw: Any) -> Team:
    """The team a request names by its slug or id (404 if the actor cannot see it; 400 when it is missing, or
    when several teams the actor sees share the slug)."""
    if raw is None or raw == "":
        raise exceptions.ValidationError({"team": [REQUIRED]})
    found: list[Team] = list(Team.objects.for_user(actor, Action.VIEW).filter(params.slug_or_id(raw))[:2])
    if not found:
        raise exceptions.NotFound(f"No team {raw}.")
    if len(found) > 1:
        raise exceptions.ValidationError({"team": [f"More than one team is called {raw}: give its id."]})
    return found[0]


class TenantViewSet(SignedInViewSet):
    """Every tenant endpoint derives from this: its rows are exactly those `for_user` lets the user see.

    An object outside that set is a 404, whatever the verb. Changes go through `tenancy.actions`, which
    answer 403 when the user may see the object but not change it.
    """

    model: type[Any]

    def get_queryset(self) -> QuerySet[Any]:
        return self.model.objects.for_user(self.request.user, Action.VIEW)  # type: ignore[no-any-return]


class ScopedRelatedField(serializers.PrimaryKeyRelatedField):  # type: ignore[type-arg]
    """A foreign key by id, accepted only when the requesting user can see the object.

    An id the user may not see gets the same answer as one that does not exist.
    """

    def get_queryset(self) -> Any:
        request = self.context["request"]
        return self.queryset.for_user(request.user, Action.VIEW)  # type: ignore[union-attr]
