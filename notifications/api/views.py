"""The notifications API: a user's own choices, a team's defaults, their recent notifications, and a test.

Thin: choices are judged and written by ``notifications/actions/preferences.py`` (a 400 naming each bad field, nothing
written), teams are found through ``for_user`` (another organization's team, or one the user cannot see, is a
404) and a team's defaults are set only by who the policy allows (403). A team's webhook URL may be a secret:
only those who may set the defaults read it.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import generics, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from common.api.parsers import JSONParser
from common.api.serializers import StrictSerializer
from notifications.actions import outbox, preferences
from notifications.events import EVENTS
from notifications.models import Channel, Notification, Preference
from tenancy import policy
from tenancy.models import Team
from tenancy.scoping import Action

ERROR = OpenApiResponse(description="`{error: {status, code, message, fields}}`")


def _channels() -> serializers.ListField:
    return serializers.ListField(child=serializers.ChoiceField(choices=Channel.choices))


class ChoicesSerializer(serializers.Serializer[Any]):
    """One set of choices: a user's own, or a team's defaults."""

    events = serializers.DictField(
        child=_channels(),
        help_text="Chosen channels per event code (an empty list: not told); an event left out follows the "
        "team's default, then the built-in one. Codes: " + ", ".join(EVENTS) + ".",
    )
    webhook_url = serializers.CharField(
        allow_null=True, help_text="Where webhooks go; empty: none. Null for those who may not set it."
    )
    wait_hours = serializers.IntegerField(
        allow_null=True, help_text="Tell when a job is pending this many hours; null: the team's, or 24."
    )
    updated_at = serializers.DateTimeField(allow_null=True)


class EffectiveSerializer(serializers.Serializer[Any]):
    """What applies, all levels resolved: channels per event and the hours of waiting."""

    events = serializers.DictField(child=_channels())
    wait_hours = serializers.IntegerField()
    webhook = serializers.BooleanField(help_text="Whether a webhook URL is set (the user's or the team's).")


class PreferencesSerializer(ChoicesSerializer):
    team = serializers.CharField(allow_null=True, help_text="The team whose defaults apply (its slug).")
    effective = EffectiveSerializer()


class ChoicesWriteSerializer(StrictSerializer):
    events = serializers.DictField(
        child=_channels(),
        required=False,
        help_text="Channels per event code; an event left out follows the defaults. The whole set is replaced.",
    )
    webhook_url = serializers.CharField(required=False, allow_blank=True, default="")
    wait_hours = serializers.IntegerField(required=False, allow_null=True, default=None)


class NotificationSerializer(serializers.ModelSerializer[Notification]):
    state = serializers.SerializerMethodField(help_text="sent, pending, retrying or failed (given up).")

    class Meta:
        model = Notification
        fields = [
            "id",
            "event",
            "channel",
            "job",
            "subject",
            "message",
            "created_at",
            "sent_at",
            "sent_to",
            "attempts",
            "last_error",
            "state",
        ]
        read_only_fields = fields

    def get_state(self, n: Notification) -> str:
        return outbox.state(n)


def _choices(row: Preference | None, *, show_url: bool = True) -> dict[str, Any]:
    return {
        "events": dict(row.events) if row else {},
        "webhook_url": (row.webhook_url if row else "") if show_url else None,
        "wait_hours": row.wait_hours if row else None,
        "updated_at": row.updated_at if row else None,
    }


def _mine(user: Any) -> dict[str, Any]:
    team = preferences.home_team(user)
    resolved = preferences.for_user(user, team)
    return {
        **_choices(preferences.own(user)),
        "team": team.slug if team else None,
        "effective": {
            "events": {code: sorted(c) for code, c in resolved.events.items()},
            "wait_hours": resolved.wait_hours,
            "webhook": bool(resolved.webhook_url),
        },
    }


class PreferencesView(APIView):
    """Your own choices of what you are told and how, and what applies once your team's defaults are counted."""

    parser_classes = [JSONParser]

    @extend_schema(responses=PreferencesSerializer)
    def get(self, request: Request) -> Response:
        return Response(PreferencesSerializer(_mine(request.user)).data)

    @extend_schema(request=ChoicesWriteSerializer, responses={200: PreferencesSerializer, 400: ERROR})
    def put(self, request: Request) -> Response:
        form = ChoicesWriteSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        preferences.set_own(request.user, **form.validated_data)  # type: ignore[arg-type]
        return Response(PreferencesSerializer(_mine(request.user)).data)


class TeamDefaultsView(APIView):
    """A team's notification defaults: read by who may see the team, set by its leads and admins."""

    parser_classes = [JSONParser]

    def _team(self, request: Request, team_id: int) -> Team:
        team: Team = get_object_or_404(Team.objects.for_user(request.user, Action.VIEW), pk=team_id)
        return team

    @extend_schema(responses={200: ChoicesSerializer, 404: ERROR})
    def get(self, request: Request, team_id: int) -> Response:
        team = self._team(request, team_id)
        show = policy.can(request.user, preferences.SET_DEFAULTS, team)
        return Response(ChoicesSerializer(_choices(preferences.team_defaults(team), show_url=show)).data)

    @extend_schema(
        request=ChoicesWriteSerializer, responses={200: ChoicesSerializer, 400: ERROR, 403: ERROR, 404: ERROR}
    )
    def put(self, request: Request, team_id: int) -> Response:
        team = self._team(request, team_id)
        policy.require(request.user, preferences.SET_DEFAULTS, team)  # said before the body is judged
        form = ChoicesWriteSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        row = preferences.set_team_defaults(
            request.user,  # type: ignore[arg-type]
            team,
            http=request._request,
            **form.validated_data,
        )
        return Response(ChoicesSerializer(_choices(row)).data)


class NotificationList(generics.ListAPIView[Notification]):
    """Your recent notifications, newest first, with where each one's delivery stands."""

    serializer_class = NotificationSerializer

    def get_queryset(self) -> QuerySet[Notification]:
        return Notification.objects.filter(user=self.request.user.pk)


class TestNotificationView(APIView):
    """Send yourself a test notification by each channel you can be told by: e-mail if your account has an
    address, the webhook if you or your team set one."""

    @extend_schema(request=None, responses={201: NotificationSerializer(many=True)})
    def post(self, request: Request) -> Response:
        made = outbox.send_test(request.user)  # type: ignore[arg-type]
        return Response(NotificationSerializer(made, many=True).data, status=status.HTTP_201_CREATED)
