"""The API's OpenAPI schema: drf-spectacular's, with what it cannot see said once for every operation.

- Every operation documents its 4xx answers in the one error shape (``common.api.errors``): 400, 401, 403
  and 404 everywhere, 413 and 415 where a body is sent, 429 where a throttle applies; a 4xx an operation
  declares with a description only gets the shape too.
- A read-only field is nullable where the model field behind it is (``actor`` of a system event, ``team`` of
  an organization-wide membership): drf-spectacular only reads ``allow_null``, which read-only fields lack.
- Ids in paths are declared with their range (``common.params.MAX_ID``).
- Every query parameter allows an empty value: an empty one is as if it were not given (django-filter's
  rule, and ``common.params``'s), which is what a page's form sends for a field left blank.
- A text query parameter holds no control character (``params.TEXT_PATTERN``): the edge refuses them
  (``portal.middleware.RefuseBadInput``), and the schema says so.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import FieldDoesNotExist
from drf_spectacular import openapi
from drf_spectacular.plumbing import ResolvedComponent
from rest_framework import serializers

from common import params


class ErrorDetailSerializer(serializers.Serializer[Any]):
    status = serializers.IntegerField(help_text="The HTTP status, again.")
    code = serializers.CharField(help_text="`invalid`, `not_found`, `permission_denied`, `parse_error`, …")
    message = serializers.CharField(help_text="What is wrong, naming the offending fields.")
    # The metaclass takes declared fields off the class, so this does not shadow ``Serializer.fields``.
    fields = serializers.DictField(  # type: ignore[assignment]
        child=serializers.JSONField(),
        help_text="Each offending field's messages (a nested object for a nested field); empty when none.",
    )


class ErrorSerializer(serializers.Serializer[Any]):
    error = ErrorDetailSerializer()


ERRORS = {
    "400": "Bad input: the offending fields or parameters are named.",
    "401": "Not signed in: no token, or an expired or revoked one.",
    "403": "Signed in, but not allowed.",
    "404": "No such object, or one of another team (or a page past the last).",
}
BODY_ERRORS = {
    "413": "The body is larger than the server takes.",
    "415": "The body is not in a media type this operation takes.",
}
THROTTLED = {"429": "Too many requests: try again after `Retry-After` seconds."}


def _nullable_source(field: serializers.Field[Any, Any, Any, Any]) -> bool:
    """Whether a model field on the way to ``field``'s value may be null."""
    model = getattr(getattr(field.parent, "Meta", None), "model", None)
    if model is None or field.source == "*":
        return False
    for attr in field.source_attrs:
        try:
            model_field = model._meta.get_field(attr)
        except FieldDoesNotExist:
            return False
        if not getattr(model_field, "concrete", False):  # a reverse relation: a list, never null
            return False
        if getattr(model_field, "null", False):
            return True
        model = model_field.related_model
        if model is None:
            return False
    return False


class AutoSchema(openapi.AutoSchema):
    def _get_serializer_field_meta(self, field: Any, direction: str) -> dict[str, Any]:
        meta: dict[str, Any] = super()._get_serializer_field_meta(field, direction)  # type: ignore[no-untyped-call]
        read_only = isinstance(field, serializers.Field) and field.read_only
        if read_only and "nullable" not in meta and _nullable_source(field):
            meta["nullable"] = True
        return meta

    def _get_parameters(self) -> list[dict[str, Any]]:
        parameters: list[dict[str, Any]] = super()._get_parameters()
        for parameter in parameters:
            schema = parameter.get("schema", {})
            if parameter.get("in") == "path" and schema.get("type") == "integer":
                schema.setdefault("minimum", 1)
                schema.setdefault("maximum", params.MAX_ID)
            if parameter.get("in") == "query":
                parameter.setdefault("allowEmptyValue", True)
                text = schema.get("items", {}) if schema.get("type") == "array" else schema
                if text.get("type") == "string" and not text.keys() & {"enum", "format", "pattern"}:
                    text["pattern"] = params.TEXT_PATTERN
        return parameters

    def _get_response_bodies(self, direction: Any = "response") -> dict[str, Any]:
        responses: dict[str, Any] = super()._get_response_bodies(direction)
        if direction != "response":
            return responses
        error = self.resolve_serializer(ErrorSerializer, "response")
        wanted = dict(ERRORS)
        if self.method in ("POST", "PUT", "PATCH"):
            wanted |= BODY_ERRORS
        if getattr(self.view, "throttle_classes", None) or getattr(self.view, "throttle_scope", None):
            wanted |= THROTTLED
        for code, description in wanted.items():
            if code not in responses:
                responses[code] = self._shared_error(code, description, error.ref)
        described_only = [
            r for code, r in responses.items() if code.startswith("4") and not {"content", "$ref"} & set(r)
        ]
        for response in described_only:
            response["content"] = {"application/json": {"schema": error.ref}}
        return dict(sorted(responses.items()))

    def _shared_error(self, code: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
        """A reference to the one response for ``code`` in ``components/responses`` (registered once)."""
        component = ResolvedComponent(  # type: ignore[no-untyped-call]
            name=f"Error{code}",
            type=ResolvedComponent.RESPONSE,
            schema={"description": description, "content": {"application/json": {"schema": schema}}},
            object=f"Error{code}",
        )
        self.registry.register_on_missing(component)
        return component.ref
