"""The stable endpoint of a service: ``/serve/<organization>/<team>/<service>/<path>``, any method
(docs/services.md §The endpoint).

A caller shows an API token (``Authorization: Bearer``) of someone who may view the service, unless the service
is public; another team's service is a 404. The request goes to a ready replica (``serving.router``); at zero
replicas it records the demand and holds the request up to ``SERVE_COLD_START_SECONDS`` for one to be ready,
else answers 503 with ``Retry-After``. Session cookies are not accepted: the endpoint is for programs, and a
cookie would let any page the user visits send requests as them.
"""

from __future__ import annotations

from django import db
from django.conf import settings
from django.http import HttpRequest, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions

from portal.api.authentication import ApiTokenAuthentication
from serving import router
from serving.models import Service
from tenancy.scoping import Action

RETRY_AFTER = 10


def _refusal(status: int, detail: str, **headers: str) -> JsonResponse:
    response = JsonResponse({"detail": detail}, status=status)
    for name, value in headers.items():
        response[name.replace("_", "-")] = value
    return response


@csrf_exempt
def endpoint(request: HttpRequest, organization: str, team: str, service: str, path: str = "") -> HttpResponseBase:
    try:
        found = ApiTokenAuthentication().authenticate(request)  # type: ignore[arg-type]
    except exceptions.AuthenticationFailed as failed:
        return _refusal(401, str(failed.detail), WWW_Authenticate='Bearer realm="serve"')
    user = found[0] if found else None
    target = (
        Service.objects.select_related("team")
        .filter(team__organization__slug=organization, team__slug=team, name=service)
        .first()
    )
    if user is None and (target is None or not target.public):
        return _refusal(
            401, "Show an API token (Authorization: Bearer <token>).", WWW_Authenticate='Bearer realm="serve"'
        )
    visible = target is not None and (
        target.public
        or (user is not None and Service.objects.for_user(user, Action.VIEW).filter(pk=target.pk).exists())
    )
    if target is None or not visible:
        return _refusal(404, f"No service {service} in team {team}.")
    if target.state == Service.State.STOPPED:
        return _refusal(503, f"Service {target.name} is stopped.", Retry_After=str(RETRY_AFTER * 6))
    replicas = router.ready_replicas(target.pk)
    if not replicas:
        router.record_demand(target.pk)
        replicas = router.wait_for_ready(target.pk, float(settings.SERVE_COLD_START_SECONDS))
    if not replicas:
        router.refused(target.pk)
        return _refusal(
            503,
            f"Service {target.name} has no replica ready yet; one is starting. Try again shortly.",
            Retry_After=str(RETRY_AFTER),
        )
    if not db.connection.in_atomic_block:
        # The relaying may take as long as the replica does and needs no database: a busy service's requests
        # would otherwise hold a database connection each for their whole length.
        db.connection.close()
    answer = router.proxy(
        target.pk,
        replicas,
        request.method or "GET",
        path,
        request.META.get("QUERY_STRING", ""),
        router.forward_headers(request.META),
        request.body,
    )
    if answer is None:
        router.refused(target.pk)
        return _refusal(502, f"No replica of service {target.name} answered.", Retry_After=str(RETRY_AFTER))
    response = StreamingHttpResponse(answer.body, status=answer.status)
    for name, value in answer.headers:
        response[name] = value
    # A replica's page is the service's, not the portal's: sandboxed into an origin of its own, so that its
    # scripts cannot act with a signed-in user's portal session.
    response["Content-Security-Policy"] = "sandbox"
    response["X-Content-Type-Options"] = "nosniff"
    response["X-QM-Replica"] = str(answer.replica.pk)
    response["X-QM-Revision"] = str(answer.replica.revision.number)
    return response
