"""One shape for every API error: `{"error": {"status", "code", "message", "fields"}}`.

`fields` maps each offending field to its messages (empty when the error is not about a field), so a
client can show each message beside its input.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404, HttpRequest, JsonResponse
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler


def error_body(status_code: int, code: str, message: str, fields: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"error": {"status": status_code, "code": code, "message": message, "fields": fields or {}}}


def _flatten(detail: Any) -> list[str]:
    if isinstance(detail, dict):
        return [f"{key}: {msg}" for key, value in detail.items() for msg in _flatten(value)]
    if isinstance(detail, list):
        return [msg for item in detail for msg in _flatten(item)]
    return [str(detail)]


def _fields(detail: Any) -> dict[str, Any]:
    if isinstance(detail, dict):
        return {key: (_fields(value) if isinstance(value, dict) else _flatten(value)) for key, value in detail.items()}
    return {"non_field_errors": _flatten(detail)}


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, DjangoValidationError):
        exc = exceptions.ValidationError(
            exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        )
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied(str(exc) or None)
    elif isinstance(exc, Http404):
        exc = exceptions.NotFound()
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    assert isinstance(exc, exceptions.APIException)
    if isinstance(exc, exceptions.ValidationError):
        fields = _fields(exc.detail)
        named = ", ".join(sorted(fields))
        body = error_body(response.status_code, "invalid", f"Invalid input: {named}.", fields)
    else:
        codes = exc.get_codes()
        code = codes if isinstance(codes, str) else "error"
        body = error_body(response.status_code, code, " ".join(_flatten(exc.detail)))
    response.data = body
    return response


def api_not_found(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return JsonResponse(error_body(404, "not_found", f"No API endpoint at {request.path}."), status=404)


def api_server_error(request: HttpRequest) -> JsonResponse:
    body = error_body(500, "server_error", "The server failed; the error has been logged.")
    return JsonResponse(body, status=status.HTTP_500_INTERNAL_SERVER_ERROR)
