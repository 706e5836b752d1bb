"""The API's serializer pieces every app uses: fields that take only their own JSON type, a reference by slug or
id, request bodies that refuse unknown fields by name, money as the API writes it, and the error response as
the schema declares it (its shape is ``errors.py``'s)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema_field
from rest_framework import serializers

from common import params
from common.validation import unknown_fields

#: Any error answer, as operations declare it (``errors.error_body``).
ERROR = OpenApiResponse(description="`{error: {status, code, message, fields}}`")


class StrictCharField(serializers.CharField):
    """A string and only a string: DRF's CharField would turn 8 into "8" and True into an error, quietly
    accepting a YAML number where text was meant."""

    default_error_messages = {"not_a_string": "Not a string."}

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("not_a_string")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    """A JSON number that is whole, and only that: DRF's IntegerField would take "12" and True."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int | float) or data != int(data):
            self.fail("invalid")
        return int(super().to_internal_value(data))


class StrictFloatField(serializers.FloatField):
    """A JSON number, and only that: DRF's FloatField would take "1.5" and True."""

    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("invalid")
        return float(super().to_internal_value(data))


class RefField(serializers.Field):  # type: ignore[type-arg]
    """An object by slug (a string) or by id (a number). A string of digits that no slug matches is taken as
    an id too, so ``--team 7`` on a command line works, but a slug always wins over an id."""

    default_error_messages = {"invalid": "Give a slug or an id."}

    def to_internal_value(self, data: Any) -> int | str:
        if isinstance(data, int) and not isinstance(data, bool):
            return data
        if isinstance(data, str) and data.strip() and len(data) <= 60:
            return data.strip()
        self.fail("invalid")
        raise AssertionError  # unreachable: fail() raises

    def to_representation(self, value: Any) -> Any:
        return value


extend_schema_field({"oneOf": [{"type": "string"}, {"type": "integer"}]})(RefField)
#: An amount of money as the API writes it: a decimal string to the cent (never a float).
MONEY = {"type": "string", "format": "decimal", "pattern": r"^-?\d+\.\d{2}$", "example": "12.50"}


def find(queryset: QuerySet[Any], ref: int | str) -> list[Any]:
    """Up to two rows of ``queryset`` that ``ref`` names (two: it is ambiguous)."""
    if isinstance(ref, int):
        return list(queryset.filter(pk=ref)[:2]) if params.as_id(ref) else []
    by_slug = list(queryset.filter(slug=ref)[:2])
    pk = params.as_id(ref)
    if by_slug or pk is None:
        return by_slug
    return list(queryset.filter(pk=pk)[:2])


class StrictSerializer(serializers.Serializer[Any]):
    """A request body whose unknown fields are refused by name (a misspelt field must not pass for one left
    out), in the same answer as what is wrong with the known ones."""

    def to_internal_value(self, data: Any) -> Any:
        unknown: dict[str, list[str]] = {}
        if isinstance(data, Mapping):
            unknown = unknown_fields(data, self.fields)
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as error:
            if unknown and isinstance(error.detail, dict):
                raise serializers.ValidationError({**error.detail, **unknown}) from error
            raise
        if unknown:
            raise serializers.ValidationError(unknown)
        return value
