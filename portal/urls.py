"""The URLs of the whole portal: each app's pages and API, the API schema and docs, the admin."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

urlpatterns = [
    path("", include("tenancy.web.urls")),
    path("clusters/", include("clusters.web.urls")),
    path("jobs/", include("scheduler.web.urls")),
    path("", include("governance.web.urls")),  # teams/<pk>/quotas/ and quotas/
    path("billing/", include("billing.web.urls")),
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
]

handler400 = "portal.errors.bad_request"
handler404 = "portal.errors.not_found"
handler500 = "portal.errors.server_error"
