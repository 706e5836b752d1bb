"""Input refused once, at the edge, for every page and endpoint; and a bad parameter answered as a 400.

``RefuseBadInput`` answers a request whose path, query string or form body holds a character no field may
hold (``params.refused_character``: NUL, which PostgreSQL cannot store, other control characters, lone
surrogates) with a 400 naming the parameter, before any view or database sees it. The API's bodies are
checked by its parsers (``common.api.parsers``), which DRF runs when a view reads them; form bodies of the
API are left to them too, so that DRF still answers a form sent to a JSON-only endpoint with a 415.

A ``params.BadParameter`` raised by a page's view becomes the same 400 (the API's error handler answers it
for the API).

``ServeMetrics`` answers ``/metrics`` before anything else looks at the request: Prometheus scrapes a pod or a
container by its address, a Host that ``ALLOWED_HOSTS`` does not list, over plain HTTP inside the cluster, so
neither the host check nor the HTTPS redirect may stand in its way (the view has its own access rule: the
token, or this host only; it builds no URL from the Host).

``LoginRequired`` denies by default: a page needs a signed-in user unless its view says otherwise
(``login_not_required``: sign-in and out, the identity provider's views, ``/healthz/``, the data plane's
pointer at ``/serve/``). The API answers for itself (DRF's authentication and permissions: a 401 or 403 in the
API's error format, never a redirect), and so does the admin site (its own sign-in). A poll of htmx that finds
the session gone sends the whole page to sign-in (``HX-Redirect``, back to the page it polled from) rather than
have the sign-in form swapped into a table.

``MeasureRequests`` times every other answer for ``qm_http_request_duration_seconds``, labelled by the route's
template (``jobs/<id:pk>/``, never the raw path: bounded), the method and the status class.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode, urlsplit

from django.conf import settings
from django.contrib.auth.middleware import LoginRequiredMiddleware
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import resolve_url
from rest_framework.views import APIView

from common import metrics, params
from observability import scrape
from portal.errors import bad_parameter

FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


class RefuseBadInput:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        try:
            problem = params.refused_character(request.path)
            if problem:
                raise params.BadParameter("path", problem)
            params.check_form(request.GET)
            if request.method == "POST" and request.content_type in FORM_TYPES and not request.path.startswith("/api/"):
                params.check_form(request.POST)
        except params.BadParameter as refused:
            return bad_parameter(request, refused)
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, params.BadParameter):
            return bad_parameter(request, exception)
        return None


class ServeMetrics:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path == "/metrics":
            return scrape.metrics(request)
        return self.get_response(request)


class MeasureRequests:
    METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        route = "/" + match.route if match is not None and match.route else "unmatched"
        method = request.method if request.method in self.METHODS else "other"
        status = metrics.status_class(response.status_code)
        metrics.REQUEST_SECONDS.labels(route, method, status).observe(time.perf_counter() - started)
        return response


class LoginRequired(LoginRequiredMiddleware):
    def process_view(
        self, request: HttpRequest, view_func: Callable[..., Any], view_args: Any, view_kwargs: Any
    ) -> HttpResponseBase | None:
        api = getattr(view_func, "cls", None)
        match = request.resolver_match
        if (isinstance(api, type) and issubclass(api, APIView)) or (match is not None and match.namespace == "admin"):
            return None
        return super().process_view(request, view_func, view_args, view_kwargs)

    def handle_no_permission(  # type: ignore[override]  # htmx's polls get a 200 with HX-Redirect, not a 302
        self, request: HttpRequest, view_func: Callable[..., Any]
    ) -> HttpResponseBase:
        if request.headers.get("HX-Request") != "true":
            return super().handle_no_permission(request, view_func)
        # htmx names the page it polls from; only its path and query are kept, so ``next`` stays on this site.
        page = urlsplit(request.headers.get("HX-Current-URL", ""))
        target = page.path + (f"?{page.query}" if page.query else "")
        query = f"?{urlencode({'next': target})}" if target.startswith("/") else ""
        return HttpResponse(headers={"HX-Redirect": f"{resolve_url(settings.LOGIN_URL)}{query}"})
