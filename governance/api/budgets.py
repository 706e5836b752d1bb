"""The budgets API: monthly budgets of teams and projects with where each stands this month, a budget set,
changed or removed, their alerts, and a team's member limits.

Thin, as ``quota_api``: everything is read through ``for_user`` (another team's budget, or a team or project
the user cannot see, is a 404); the month's use comes from ``placed.use_of``, once per answer; changes go
through ``budgets.set_budget`` and ``quotas.set_member_limit``. Who may is asked before the body is judged
(403); then the body is judged as a whole (400 naming each bad field, unknown fields too; nothing written).

A webhook's URL is often a secret (a chat's incoming webhook): only those who may set the budget read it, and
a failed delivery's error, which may quote it.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from decimal import Decimal
from typing import Any

import django_filters
from django.db.models import QuerySet
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import exceptions, mixins, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from common import params
from common.api.answered import Answered
from common.api.parsers import JSONParser
from common.api.serializers import ERROR, StrictSerializer
from governance import placed
from governance.actions import budgets, quotas
from governance.api.quotas import amount
from governance.models import Budget, BudgetAlert, MemberLimit
from tenancy import policy
from tenancy.filters import IdFilter, SlugOrIdFilter
from tenancy.models import Membership, Project, Team
from tenancy.rest import TenantViewSet, team_named
from tenancy.scoping import Action

TEAM_ID = OpenApiParameter("team_id", OpenApiTypes.INT, OpenApiParameter.PATH, description="The team's id.")


def figure(**kwargs: Any) -> serializers.DecimalField:
    """A budget figure: accelerator-hours or money, to three decimals."""
    return serializers.DecimalField(max_digits=17, decimal_places=3, **kwargs)


class Readers:
    """Whether the user may set (and so read the webhook of) each budget (``budgets.permission``), asked once per
    team and kind of budget (a team's own, or a project's: the rule names no particular project)."""

    def __init__(self, user: Any) -> None:
        self.user = user
        self.known: dict[tuple[int, bool], bool] = {}

    def can_set(self, budget: Budget) -> bool:
        key = (budget.team_id, budget.project_id is None)
        if key not in self.known:
            self.known[key] = policy.can(self.user, budgets.permission(budget.project), budget.team)
        return self.known[key]


# --- what is read ------------------------------------------------------------------------------------------


class StandingSerializer(serializers.Serializer[Any]):
    """Where one limited measure of a budget stands this month (UTC calendar months)."""

    measure = serializers.ChoiceField(choices=BudgetAlert.Measure.choices)
    limit = figure(help_text="The monthly limit, in accelerator-hours or money.")
    used = figure(help_text="Used this month so far.")
    committed = figure(help_text="What running jobs may still use until their time limits, within the month.")
    forecast = figure(
        allow_null=True,
        help_text="The month's use at the rate of the last seven days; null on the month's first day.",
    )
    percent = serializers.FloatField(help_text="Used, in percent of the limit.")
    usage = figure(allow_null=True, help_text="Money: the jobs' usage at their prices so far (null for hours).")
    charge = figure(
        allow_null=True,
        help_text="Money: the full charge so far (usage with its shares of idle capacity and overhead, the "
        "statement's total); null for hours.",
    )


class BudgetSerializer(serializers.ModelSerializer[Budget]):
    team = serializers.SlugRelatedField[Any](slug_field="slug", read_only=True)
    project = serializers.SlugRelatedField[Any](slug_field="slug", read_only=True, allow_null=True)
    webhook_url = serializers.SerializerMethodField(
        help_text="Where alerts are POSTed (empty: nowhere); null for those who may not set the budget."
    )
    standings = serializers.SerializerMethodField()
    currency = serializers.CharField(
        source="team.organization.currency", read_only=True, help_text="The ISO 4217 code of its money limit."
    )

    class Meta:
        model = Budget
        fields = [
            "id",
            "team",
            "project",
            "accelerator_hours",
            "amount",
            "currency",
            "counts",
            "hard",
            "recipients",
            "webhook_url",
            "updated_at",
            "standings",
        ]
        read_only_fields = fields

    def get_webhook_url(self, budget: Budget) -> str | None:
        readers: Readers = self.context["readers"]
        return budget.webhook_url if readers.can_set(budget) else None

    @extend_schema_field(StandingSerializer(many=True))
    def get_standings(self, budget: Budget) -> list[dict[str, Any]]:
        uses: dict[int, placed.Use] = self.context["uses"]
        found = budgets.standings(budget, uses[budget.pk], self.context["now"])
        return [dict(StandingSerializer(s).data) for s in found]


class BudgetAlertSerializer(serializers.ModelSerializer[BudgetAlert]):
    team = serializers.SerializerMethodField()
    project = serializers.SerializerMethodField()
    limit = figure(read_only=True, help_text="The budget's limit when the alert was raised.")
    spent = figure(read_only=True)
    forecast = figure(read_only=True, allow_null=True)
    delivered = serializers.BooleanField(read_only=True, help_text="By e-mail, and by webhook if it has one.")
    last_error = serializers.SerializerMethodField(
        help_text="Why the last delivery failed; for those who may not set the budget, only that it failed."
    )

    class Meta:
        model = BudgetAlert
        fields = [
            "id",
            "budget",
            "team",
            "project",
            "period",
            "measure",
            "kind",
            "limit",
            "spent",
            "forecast",
            "message",
            "created_at",
            "emailed_at",
            "webhook_sent_at",
            "attempts",
            "delivered",
            "last_error",
        ]
        read_only_fields = fields

    def get_team(self, alert: BudgetAlert) -> str:
        return alert.budget.team.slug

    def get_project(self, alert: BudgetAlert) -> str | None:
        return alert.budget.project.slug if alert.budget.project else None

    def get_last_error(self, alert: BudgetAlert) -> str:
        readers: Readers = self.context["readers"]
        if not alert.last_error or readers.can_set(alert.budget):
            return alert.last_error
        return "A channel failed; it is tried again."


class MemberLimitSerializer(serializers.ModelSerializer[MemberLimit]):
    user = serializers.SlugRelatedField[Any](slug_field="username", read_only=True)
    accelerators = amount(read_only=True, help_text="The most accelerators their running jobs may hold at once.")

    class Meta:
        model = MemberLimit
        fields = ["id", "user", "accelerators"]
        read_only_fields = fields


# --- what is written ---------------------------------------------------------------------------------------


def _limit(help_text: str) -> serializers.DecimalField:
    return serializers.DecimalField(
        max_digits=None, decimal_places=None, required=False, allow_null=True, help_text=help_text
    )


class BudgetWriteSerializer(StrictSerializer):
    team = serializers.CharField(help_text="The team's slug or id.")
    project = serializers.CharField(
        required=False, allow_null=True, help_text="One of the team's projects, by slug or id; null: the team's own."
    )
    accelerator_hours = _limit("A month; null: no limit. Left out, it keeps its value.")
    amount = _limit("Money a month; null: no limit. Left out, it keeps its value. Both null: the budget is removed.")
    counts = serializers.ChoiceField(
        choices=Budget.Counts.choices,
        required=False,
        help_text="What the money limit counts: usage (the jobs at their prices) or charge (with the shares of idle "
        "capacity and overhead, the statement's total). Left out, it is kept (usage for a new budget).",
    )
    hard = serializers.BooleanField(
        required=False, help_text="Hard: jobs that would pass it wait; soft: it only alerts. Left out, it is kept."
    )
    recipients = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        help_text="E-mail addresses alerted besides the team's leads. Left out, they are kept.",
    )
    webhook_url = serializers.CharField(
        required=False, allow_blank=True, help_text="Alerts are POSTed there; empty: none. Left out, it is kept."
    )
    reason = serializers.CharField(required=False, allow_blank=True, default="", help_text="Kept in the history.")
    confirm = serializers.BooleanField(
        required=False,
        default=False,
        help_text="A limit below this month's use so far is refused (400, the message by its field says what is "
        "used) unless this is true.",
    )


class MemberLimitWriteSerializer(StrictSerializer):
    user = serializers.CharField(help_text="A member of the team, by username.")
    accelerators = serializers.DecimalField(
        max_digits=None, decimal_places=None, allow_null=True, help_text="At most this many at once; null: no limit."
    )
    reason = serializers.CharField(required=False, allow_blank=True, default="", help_text="Kept in the history.")
    confirm = serializers.BooleanField(
        required=False,
        default=False,
        help_text="A limit below what the member's jobs hold now is refused (400, the message by the field says "
        "what they hold) unless this is true.",
    )


# --- filters and views -------------------------------------------------------------------------------------


# Here rather than in filters.py (the one module mypy lets subclass django-filter's untyped FilterSet), beside
# the only endpoints that use them.
class BudgetFilter(django_filters.FilterSet):  # type: ignore[misc]
    team = SlugOrIdFilter(field_name="team", help_text="A team's slug or id.")

    class Meta:
        model = Budget
        fields = ["team"]


class BudgetAlertFilter(django_filters.FilterSet):  # type: ignore[misc]
    team = SlugOrIdFilter(field_name="budget__team", help_text="A team's slug or id.")
    budget = IdFilter(field_name="budget", help_text="A budget's id.")
    kind = django_filters.ChoiceFilter(choices=BudgetAlert.Kind.choices)

    class Meta:
        model = BudgetAlert
        fields = ["team", "budget", "kind"]


class BudgetViewSet(Answered, TenantViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    """Monthly budgets of the teams and projects the user may see, each with where it stands this month. An
    organization admin sets teams' budgets; a team's lead (or an admin) its projects'."""

    model = Budget
    serializer_class = BudgetSerializer
    filterset_class = BudgetFilter
    parser_classes = [JSONParser]

    def get_queryset(self) -> QuerySet[Budget]:
        return (
            super().get_queryset().select_related("team__organization", "project")
        )  # the model's order: each team's own first

    def _answer(self, found: Iterable[Budget], many: bool, now: datetime | None = None) -> Any:
        found = list(found)
        now = now or timezone.now()
        context = {
            **self.get_serializer_context(),
            "uses": placed.use_of(found, now, both=True),
            "now": now,
            "readers": Readers(self.actor),
        }
        return BudgetSerializer(found if many else found[0], many=many, context=context).data

    def _team(self, data: Any) -> Team:
        return team_named(self.actor, data.get("team") if isinstance(data, dict) else None)

    def _project(self, team: Team, data: dict[str, Any]) -> Project | None:
        raw = data.get("project")
        if raw is None or raw == "":
            return None
        scoped = Project.objects.for_user(self.actor, Action.VIEW).filter(team=team)
        project: Project | None = scoped.filter(params.slug_or_id(raw)).first()
        if project is None:
            raise exceptions.NotFound(f"No project {raw} in team {team.slug}.")
        return project

    @extend_schema(
        request=BudgetWriteSerializer,
        responses={
            200: BudgetSerializer,
            201: BudgetSerializer,
            204: OpenApiResponse(description="Removed (both limits null), or there was none to remove."),
            400: ERROR,
            403: ERROR,
            404: ERROR,
        },
        description="Set the monthly budget of a team (organization admins) or of one of its projects (the team's "
        "lead or an admin), with a reason. Fields left out keep their values; both limits null remove it. 201 when "
        "it is new, 200 when it was there.",
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        team = self._team(request.data)
        project = self._project(team, request.data)
        policy.require(self.actor, budgets.permission(project), team)  # said before the body is judged
        form = BudgetWriteSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        scoped = self.get_queryset().filter(team=team, project=project)
        current = scoped.first()
        values = {k: getattr(current, k) for k in budgets.FIELDS} if current else {}
        values.update({k: data[k] for k in budgets.FIELDS if k in data})
        budgets.set_budget(
            self.actor, team, project, reason=data["reason"], confirm=data["confirm"], http=request._request, **values
        )
        after = scoped.first()
        if after is None:
            return Response(status=status.HTTP_204_NO_CONTENT)
        answer = self._answer([after], many=False)
        return Response(answer, status=status.HTTP_200_OK if current else status.HTTP_201_CREATED)


class BudgetAlertViewSet(TenantViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    """Alerts of the budgets the user may see, newest first: 50, 80 and 100% of a limit reached, or the month's
    forecast over it, each raised once and delivered by e-mail and webhook."""

    model = BudgetAlert
    serializer_class = BudgetAlertSerializer
    filterset_class = BudgetAlertFilter

    def get_queryset(self) -> QuerySet[BudgetAlert]:
        return super().get_queryset().select_related("budget__team", "budget__project")

    def get_serializer_context(self) -> dict[str, Any]:
        return {**super().get_serializer_context(), "readers": Readers(self.request.user)}


@extend_schema(parameters=[TEAM_ID])
class MemberLimitViewSet(TenantViewSet, mixins.ListModelMixin):
    """The limits of a team's members: the most accelerators one member's running jobs in the team may hold at
    once. Its members, finance and admins read them; its lead and admins set them."""

    model = MemberLimit
    serializer_class = MemberLimitSerializer
    parser_classes = [JSONParser]

    def team(self) -> Team:
        scoped = Team.objects.for_user(self.actor, Action.VIEW).select_related("organization")
        team: Team = get_object_or_404(scoped, pk=self.kwargs["team_id"])
        return team

    def get_queryset(self) -> QuerySet[MemberLimit]:
        if getattr(self, "swagger_fake_view", False):  # the schema is drawn without a team
            return MemberLimit.objects.none()
        return super().get_queryset().filter(team=self.team()).select_related("user").order_by("user__username")

    @extend_schema(
        request=MemberLimitWriteSerializer,
        responses={
            200: MemberLimitSerializer,
            201: MemberLimitSerializer,
            204: OpenApiResponse(description="The limit removed (accelerators null), or there was none."),
            400: ERROR,
            403: ERROR,
            404: ERROR,
        },
        description="Set or remove a member's limit, with a reason: the team's lead or an admin. 201 when it is "
        "new, 200 when it was there.",
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        team = self.team()
        policy.require(self.actor, "member_limit.set", team)  # said before the body is judged
        form = MemberLimitWriteSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        members = Membership.objects.for_user(self.actor, Action.VIEW).filter(team=team)
        member = members.filter(user__username=data["user"]).select_related("user").first()
        if member is None:
            raise exceptions.ValidationError({"user": [f"{data['user']} is not a member of team {team.slug}."]})
        scoped = MemberLimit.objects.for_user(self.actor, Action.VIEW).filter(team=team, user=member.user)
        existed = scoped.exists()
        accelerators: Decimal | None = data["accelerators"]
        quotas.set_member_limit(
            self.actor,
            team,
            member.user,
            accelerators,
            reason=data["reason"],
            confirm=data["confirm"],
            http=request._request,
        )
        after = scoped.select_related("user").first()
        if after is None:
            return Response(status=status.HTTP_204_NO_CONTENT)
        answer = MemberLimitSerializer(after, context=self.get_serializer_context()).data
        return Response(answer, status=status.HTTP_200_OK if existed else status.HTTP_201_CREATED)
