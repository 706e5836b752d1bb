"""The notification pages, included at the root by ``portal/urls.py``."""

from django.urls import path

from notifications.web import views

urlpatterns = [
    path("account/notifications/", views.settings_page, name="notification-settings"),
    path("account/notifications/test/", views.send_test, name="notification-send-test"),
    path("teams/<id:pk>/notifications/", views.team_defaults, name="team-notifications"),
]
