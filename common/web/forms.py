"""Form helpers every app's pages use."""

from __future__ import annotations

from django import forms
from django.core.exceptions import ValidationError


def apply_errors(form: forms.Form, exc: ValidationError) -> None:
    """Put an action's ValidationError on the form, on the named fields where the form has them."""
    errors = exc.message_dict if hasattr(exc, "error_dict") else {"__all__": exc.messages}
    for field, messages in errors.items():
        for message in messages:
            form.add_error(field if field in form.fields else None, message)
