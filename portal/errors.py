"""Error pages: JSON in the API's error format under /api/, HTML elsewhere."""

from __future__ import annotations

from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

from common.api.errors import api_not_found, api_server_error, error_body
from common.params import BadParameter

#: What Django refuses before a view runs because the request is too large (``DATA_UPLOAD_MAX_*``).
TOO_LARGE = (RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent)


def bad_parameter(request: HttpRequest, exc: BadParameter) -> HttpResponse:
    """A 400 naming the parameter: in the API's error format under /api/, a page elsewhere."""
    fields = {exc.name: [exc.reason]}
    if request.path.startswith("/api/"):
        return JsonResponse(error_body(400, "invalid", f"Invalid input: {exc.name}.", fields), status=400)
    return render(request, "400.html", {"fields": fields}, status=400)


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """Django's own refusals (a body over the size limit, a suspicious request): never its bare HTML page
    for the API, and a 413 where the request was too large."""
    too_large = isinstance(exception, TOO_LARGE)
    if request.path.startswith("/api/"):
        if too_large:
            body = error_body(413, "too_large", f"The request is too large: {exception}")
            return JsonResponse(body, status=413)
        return JsonResponse(error_body(400, "bad_request", "The request cannot be read."), status=400)
    message = "The request is too large." if too_large else "The request cannot be read."
    return render(request, "400.html", {"message": message}, status=400)


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if request.path.startswith("/api/"):
        return api_not_found(request, exception)
    return render(request, "404.html", status=404)


def server_error(request: HttpRequest) -> HttpResponse:
    if request.path.startswith("/api/"):
        return api_server_error(request)
    return render(request, "500.html", status=500)
