"""The notifications API's routes, included under ``/api/v1/`` by ``portal/api/urls.py``."""

from django.urls import path

from notifications.api import views

urlpatterns = [
    path("notifications/", views.NotificationList.as_view(), name="notification-list"),
    path("notifications/preferences/", views.PreferencesView.as_view(), name="notification-preferences"),
    path("notifications/test/", views.TestNotificationView.as_view(), name="notification-test"),
    path(
        "notifications/teams/<id:team_id>/defaults/",
        views.TeamDefaultsView.as_view(),
        name="notification-team-defaults",
    ),
]
