"""The edge API's routes, included under ``/api/v1/`` by ``portal/api/urls.py``: the devices' own
(``edge/``) and people's (devices, groups, enrolment tokens, rollouts)."""

from django.urls import path

from edge.api import device

urlpatterns = [
    path("edge/enrol", device.EnrolView.as_view(), name="edge-enrol"),
    path("edge/desired", device.DesiredView.as_view(), name="edge-desired"),
    path("edge/artifacts/<id:version_id>", device.ArtifactView.as_view(), name="edge-artifact"),
    path("edge/report", device.ReportView.as_view(), name="edge-report"),
]
