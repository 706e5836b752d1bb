"""The edge pages, included at the root by ``portal/urls.py``: the fleet, a device, enrolment tokens, rollouts."""

from django.urls import path

from edge.web import views

urlpatterns = [
    path("devices/", views.fleet, name="device-list"),
    path("devices/<id:pk>/", views.device_detail, name="device-detail"),
    path("devices/<id:pk>/revoke/", views.device_revoke, name="device-revoke"),
    path("devices/<id:pk>/reenrol/", views.device_reenrol, name="device-reenrol"),
    path("devices/tokens/new", views.token_new, name="device-token-new"),
    path("rollouts/", views.rollout_list, name="rollout-list"),
    path("rollouts/new", views.rollout_new, name="rollout-new"),
    path("rollouts/<id:pk>/", views.rollout_detail, name="rollout-detail"),
    path("rollouts/<id:pk>/<str:verb>/", views.rollout_control, name="rollout-control"),
]
