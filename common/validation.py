"""Django's own words for the commonest refusals, for the checks that run outside a form or a serializer
(actions, the shared definition of a request): a required field, a text too long, a number out of range,
a name nobody knows (with the closest one). Built from Django's validators and field messages, never
retyped, so the form, the API and the action say the same thing (a test fails on a retyped message).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

from django import forms
from django.core import validators
from django.core.exceptions import ValidationError

#: Django's message for a missing value (``forms.Field``'s).
REQUIRED = str(forms.Field.default_error_messages["required"])
#: Django's message for something that is not a whole number (``forms.IntegerField``'s).
NOT_WHOLE = str(forms.IntegerField.default_error_messages["invalid"])
#: Django's message for something that is not a number (``forms.DecimalField``'s).
NOT_NUMBER = str(forms.DecimalField.default_error_messages["invalid"])


def required() -> ValidationError:
    """Django's message for a missing value (``REQUIRED``, code ``required``)."""
    return ValidationError(REQUIRED, code="required")


def check_required(value: Any) -> None:
    """Raise ``required()`` if ``value`` is empty (None, or blank text)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        raise required()


def check_max_length(value: str, limit: int) -> None:
    """Django's ``MaxLengthValidator``: at most ``limit`` characters (code ``max_length``)."""
    validators.MaxLengthValidator(limit)(value)


def check_range(value: Any, low: Any = None, high: Any = None) -> None:
    """Django's ``MinValueValidator`` and ``MaxValueValidator`` (codes ``min_value``, ``max_value``)."""
    if low is not None:
        validators.MinValueValidator(low)(value)
    if high is not None:
        validators.MaxValueValidator(high)(value)


def message_of(check: Any, *args: Any) -> str:
    """The text of the error ``check(*args)`` raises ("" if it raises none): a field's message as a string,
    for code that collects errors as ``{field: text}``."""
    try:
        check(*args)
    except ValidationError as error:
        return " ".join(error.messages)
    return ""


def closest(name: str, known: Iterable[str]) -> str:
    """The known name closest to a misspelt one, or ""."""
    found = difflib.get_close_matches(name, sorted(known), n=1)
    return found[0] if found else ""


def unknown_field(name: str, known: Iterable[str]) -> str:
    """What to say of a field nobody defines: "Unknown field." and, if one is close, which was meant."""
    close = closest(name, known)
    return "Unknown field." + (f" Did you mean {close}?" if close else "")


def unknown_fields(given: Iterable[str], known: Iterable[str]) -> dict[str, list[str]]:
    """The given names no field has, each with what to say (the closest known name, if one is close)."""
    names = set(known)
    return {name: [unknown_field(name, names)] for name in sorted(set(given) - names)}
