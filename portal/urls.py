"""The URLs of the whole portal: each app's pages and API, the API schema and docs, the admin."""

from django.contrib import admin
from django.urls import include, path, re_path, register_converter
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from common.params import IdConverter
from portal import views
from serving.web.endpoint import endpoint

# Before the apps' URLs are read: every id in a path is ``<id:…>``, never ``<int:…>``
# (tests/portal/test_ids_in_urls.py).
register_converter(IdConverter, "id")

urlpatterns = [
    path("", views.home, name="home"),
    path("", include("tenancy.web.urls")),
    path("clusters/", include("clusters.web.urls")),
    path("jobs/", include("scheduler.web.urls")),
    path("", include("governance.web.urls")),  # teams/<pk>/quotas/ and quotas/
    path("billing/", include("billing.web.urls")),
    path("services/", include("serving.web.urls")),
    # /metrics is answered by portal.middleware.ServeMetrics, before the host check.
    path("slo/", include("observability.web.urls")),
    path("", include("edge.web.urls")),  # devices/ and rollouts/
    path("", include("notifications.web.urls")),  # account/notifications/ and teams/<pk>/notifications/
    path("models/", include("registry.web.urls")),
    # Namespaced, so the router's names (team-list, token-list, …) never shadow the pages' names.
    path("api/v1/", include(("portal.api.urls", "api"))),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # The split view serves its start-up script as a file (?script): the Content-Security-Policy runs no inline one.
    path(
        "api/docs/",
        SpectacularSwaggerSplitView.as_view(url_name="api-schema", template_name="portal/api_docs.html"),
        name="api-docs",
    ),
    path("admin/", admin.site.urls),
    # A service's stable endpoint, any method, any path below it (serving/web/endpoint.py).
    re_path(
        r"^serve/(?P<organization>[-\w]+)/(?P<team>[-\w]+)/(?P<service>[-\w]+)/(?P<path>.*)$",
        endpoint,
        name="serve-endpoint",
    ),
]

handler400 = "portal.errors.bad_request"
handler404 = "portal.errors.not_found"
handler500 = "portal.errors.server_error"
