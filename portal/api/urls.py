from django.urls import include, path
from rest_framework.routers import DefaultRouter

from clusters.api.fleet import ClusterViewSet, MaintenanceWindowViewSet, NodeViewSet
from clusters.api.views import ElasticGrantViewSet, ElasticPoolViewSet, ProbeReportView
from edge.api.people import DeviceGroupViewSet, DeviceViewSet, EnrolmentTokenViewSet, RolloutViewSet
from governance.api.budgets import BudgetAlertViewSet, BudgetViewSet, MemberLimitViewSet
from governance.api.capacity import CapacityRequestViewSet
from governance.api.fairshare import FairShareViewSet
from governance.api.quotas import QueueViewSet, QuotaChangeViewSet
from governance.api.tiers import TierViewSet
from scheduler.api.arrays import ArrayViewSet, PipelineViewSet
from scheduler.api.utilization import JobUtilizationView
from scheduler.api.views import JobViewSet
from serving.api.views import ServiceViewSet
from tenancy.api import views

router = DefaultRouter(trailing_slash=True)
router.register("organizations", views.OrganizationViewSet, basename="organization")
router.register("teams", views.TeamViewSet, basename="team")
router.register("projects", views.ProjectViewSet, basename="project")
router.register("memberships", views.MembershipViewSet, basename="membership")
router.register("audit-log", views.AuditLogViewSet, basename="auditlog")
router.register("auth/tokens", views.TokenViewSet, basename="token")
router.register("service-accounts", views.ServiceAccountViewSet, basename="serviceaccount")
router.register("jobs", JobViewSet, basename="job")
router.register("arrays", ArrayViewSet, basename="array")
router.register("pipelines", PipelineViewSet, basename="pipeline")
router.register("queues", QueueViewSet, basename="queue")
router.register("quota-changes", QuotaChangeViewSet, basename="quotachange")
router.register("tiers", TierViewSet, basename="tier")
router.register("fair-share", FairShareViewSet, basename="fair-share")
router.register("capacity-requests", CapacityRequestViewSet, basename="capacityrequest")
router.register("budgets", BudgetViewSet, basename="budget")
router.register("budget-alerts", BudgetAlertViewSet, basename="budgetalert")
router.register("clusters", ClusterViewSet, basename="cluster")
router.register("nodes", NodeViewSet, basename="node")
router.register("services", ServiceViewSet, basename="service")
router.register("maintenance-windows", MaintenanceWindowViewSet, basename="maintenancewindow")
router.register("devices", DeviceViewSet, basename="device")
router.register("device-groups", DeviceGroupViewSet, basename="devicegroup")
router.register("enrolment-tokens", EnrolmentTokenViewSet, basename="enrolmenttoken")
router.register("rollouts", RolloutViewSet, basename="rollout")
router.register(r"teams/(?P<team_id>[0-9]{1,19})/member-limits", MemberLimitViewSet, basename="memberlimit")

urlpatterns = [
    path("auth/token/", views.TokenView.as_view(), name="token-obtain"),
    path("me/", views.MeView.as_view(), name="me"),
    path("probe/health/", ProbeReportView.as_view(), name="probe-health"),
    path("jobs/<str:pk>/utilization/", JobUtilizationView.as_view(), name="job-utilization"),
    path(
        "clusters/<id:pk>/elastic-pools/",
        ElasticPoolViewSet.as_view({"get": "list", "post": "create"}),
        name="elasticpool-list",
    ),
    path(
        "clusters/<id:pk>/elastic-pools/<id:pool_id>/",
        ElasticPoolViewSet.as_view({"get": "retrieve", "patch": "partial_update"}),
        name="elasticpool-detail",
    ),
    path("clusters/<id:pk>/elastic-grants/", ElasticGrantViewSet.as_view({"get": "list"}), name="elasticgrant-list"),
    path("", include(router.urls)),
    path("", include("billing.api.urls")),
    path("", include("notifications.api.urls")),
    path("", include("edge.api.urls")),
    path("", include("registry.api.urls")),
]
