"""``/serve/…`` on the portal: services are answered by the data plane (``serving/dataplane/``), a process of
its own, never by the portal's web processes. A request that reaches the portal there is told where to go (a
404 naming the data plane's address, ``SERVE_PUBLIC_URL``), with no database read and no waiting."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt


@login_not_required
@csrf_exempt
def endpoint(request: HttpRequest, organization: str, team: str, service: str, path: str = "") -> JsonResponse:
    there = f"{settings.SERVE_PUBLIC_URL}/serve/{organization}/{team}/{service}/{path}"
    answer = JsonResponse(
        {"detail": f"Services answer at the data plane, not the portal: {there}", "endpoint": there}, status=404
    )
    answer["Link"] = f'<{there}>; rel="alternate"'
    return answer
