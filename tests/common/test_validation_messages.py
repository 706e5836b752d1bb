"""One source for each validation message: Django's and DRF's own messages are used from where they are
defined (``common.validation``, a field's ``default_error_messages``, a validator), never retyped in the
product's code; a job request's fields are defined once (``scheduler.submission``), and the form, the API
and the ``qm`` CLI take them from there."""

from __future__ import annotations

import inspect
import io
import re
import tokenize
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django import forms
from django.core import validators
from django.core.exceptions import ValidationError
from rest_framework import fields as drf_fields

from common.validation import unknown_fields
from scheduler import submission
from scheduler.api.serializers import JobSubmissionSerializer
from scheduler.web.forms import JobForm

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("portal", "common", "tenancy", "clusters", "governance", "scheduler", "billing", "qm")
#: Where a message's own words end: its first placeholder.
PLACEHOLDER = re.compile(r"%\(|\{")


def _subclasses(cls: type) -> Iterator[type]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def library_messages() -> set[str]:
    """The fixed words of Django's form-field and validator messages and of DRF's field messages (up to
    the first placeholder), those long enough to be recognised anywhere."""
    messages: set[str] = set()
    for base in (forms.Field, drf_fields.Field):
        for cls in (base, *_subclasses(base)):
            if not cls.__module__.startswith(("django.", "rest_framework.")):
                continue  # the product's own fields: their messages are its own
            messages |= {str(m) for m in getattr(cls, "default_error_messages", {}).values()}
    for _, cls in inspect.getmembers(validators, inspect.isclass):
        if isinstance(getattr(cls, "message", None), str):
            messages.add(str(cls.message))
    words = {PLACEHOLDER.split(message)[0] for message in messages}
    return {w for w in words if len(w) >= 15}


def product_strings(root: Path = ROOT) -> Iterator[tuple[str, int, str]]:
    """Every string literal of the product's code: (file, line, text)."""
    for package in PRODUCT:
        for path in sorted((root / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            source = path.read_text()
            for token in tokenize.generate_tokens(io.StringIO(source).readline):
                if token.type == tokenize.STRING or token.type == getattr(tokenize, "FSTRING_MIDDLE", -1):
                    yield str(path.relative_to(root)), token.start[0], token.string


def test_no_message_of_django_or_drf_is_retyped_in_the_product() -> None:
    words = library_messages()
    assert "This field is required." in words
    assert "Ensure this value is less than or equal to " in words
    retyped = [f"{path}:{line}: {word!r}" for path, line, text in product_strings() for word in words if word in text]
    assert not retyped, "Use Django's message (common.validation), not a copy:\n" + "\n".join(retyped)


def test_the_form_and_the_api_take_their_bounds_from_the_one_definition() -> None:
    api: Any = JobSubmissionSerializer().fields
    assert api["name"].max_length == submission.FIELDS["name"].max_length
    assert api["image"].max_length == submission.FIELDS["image"].max_length
    assert (api["cpu"].min_value, api["cpu"].max_value) == (submission.CORES.low, submission.CORES.high)
    assert api["accelerator_fraction"].max_value == submission.FRACTION.high
    form: Any = JobForm.base_fields
    assert form["name"].max_length == api["name"].max_length
    assert (form["workers"].min_value, form["workers"].max_value) == (1, submission.MAX_WORKERS)
    assert (form["memory_gib"].min_value, form["memory_gib"].max_value) == (submission.GIB.low, submission.GIB.high)


def test_people_units_convert_one_way_for_the_form_and_the_api() -> None:
    assert submission.CORES.to_engine(Decimal("0.001")) == 1
    assert submission.GIB.to_engine(Decimal("1.5")) == 1536
    assert submission.GIB.to_engine(Decimal("0.021")) == 22  # 21.504 MiB, rounded half up
    assert submission.FRACTION.to_engine(Decimal("0.25")) == 250
    assert str(submission.GIB.from_engine(102_400)) == "100"
    assert str(submission.CORES.from_engine(2500)) == "2.5"
    assert submission.parse_duration("1h30m") == 5400
    with pytest.raises(ValueError, match="90m"):
        submission.parse_duration("soon")


def test_an_unknown_field_is_named_with_the_closest_known_one() -> None:
    known = JobSubmissionSerializer().fields
    assert unknown_fields({"acclerators": 8, "gpus": 8, "name": "x"}, known) == {
        "acclerators": ["Unknown field. Did you mean accelerators?"],
        "gpus": ["Unknown field."],
    }


def test_the_shape_checks_name_the_field_with_a_code() -> None:
    with pytest.raises(ValidationError) as raised:
        submission.check_bounds("workers", submission.MAX_WORKERS + 1)
    assert raised.value.code == "out_of_range"
    with pytest.raises(ValidationError) as raised:
        submission.check_name("x" * 121)
    assert raised.value.code == "max_length"
