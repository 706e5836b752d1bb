"""The one strict path for what a request names: ids, whole numbers, datetimes and JSON, from a query
string, a path, a form or a JSON body.

Python's own parsers are too lenient for input: ``"²".isdigit()`` is true and ``int("²")`` then fails;
``int("٣")`` is 3; an id past 2**63 overflows SQLite; a datetime whose offset moves it past year 9999 (or
an offset PostgreSQL does not take) fails in the database. So every parser here takes ASCII digits only,
bounds numbers to what the database stores and datetimes to what it accepts, and refuses with one error,
``BadParameter`` (a Django ``ValidationError`` keyed by the parameter), which the API's error handler and
the pages' middleware (``portal.middleware``) both answer with a 400 naming the parameter.

Text is refused at the edge, once, when it holds characters no field may hold (``refused_character``):
NUL, which PostgreSQL cannot store, the other C0 control characters but tab and line breaks, and lone
surrogates, which cannot be encoded.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.db.models import Q
from django.http import QueryDict
from django.utils.dateparse import parse_datetime

#: The largest id: ids are 64-bit (``BigAutoField``) in every database the project runs on.
MAX_ID = 2**63 - 1

_DIGITS = re.compile(r"[0-9]+")
_INTEGER = re.compile(r"[+-]?[0-9]+")
#: C0 controls but tab, line feed and carriage return; and UTF-16 surrogates, which no UTF-8 text holds.
_REFUSED = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff]")
#: What text a parameter may hold, as the API's schema says it (an ECMA-262 pattern: no refused control character).
TEXT_PATTERN = r"^[^\x00-\x08\x0b\x0c\x0e-\x1f]*$"

#: The instants every supported database stores: PostgreSQL's ``timestamptz`` goes further, but Python's
#: ``datetime`` (and so Django and SQLite) stops at years 1 and 9999; a day inside each end, so that showing
#: one at any offset stays in range too.
EARLIEST = dt.datetime(1, 1, 2, tzinfo=dt.UTC)
LATEST = dt.datetime(9999, 12, 30, tzinfo=dt.UTC)


class BadParameter(ValidationError):
    """A parameter that is not what it must be: answered with a 400 that names it."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__({name: [message]})
        self.name = name
        self.reason = message


def refused_character(text: str) -> str | None:
    """A description of the first character of ``text`` no input may hold, else None."""
    found = _REFUSED.search(text)
    if found is None:
        return None
    char = found.group()
    if char == "\x00":
        return "NUL characters are not allowed."
    if "\ud800" <= char <= "\udfff":
        return "Unpaired surrogate characters are not allowed."
    return f"Control character U+{ord(char):04X} is not allowed."


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else str(value)


def integer(value: Any, name: str, *, low: int | None = None, high: int | None = None) -> int:
    """A whole number written in ASCII digits (an optional sign), within ``low``..``high`` when given."""
    if isinstance(value, bool):
        raise BadParameter(name, "A whole number.")
    if isinstance(value, int):
        number = value
    else:
        text = _text(value)
        if not _INTEGER.fullmatch(text) or len(text) > 40:
            raise BadParameter(name, "A whole number.")
        number = int(text)
    if low is not None and high is not None and not low <= number <= high:
        raise BadParameter(name, f"A whole number from {low} to {high}.")
    if low is not None and number < low:
        raise BadParameter(name, f"A whole number of at least {low}.")
    if high is not None and number > high:
        raise BadParameter(name, f"A whole number of at most {high}.")
    return number


def whole(value: Any, name: str, low: int, high: int, errors: dict[str, str], missing: str | None) -> int | None:
    """``integer`` for a check that names every bad field at once: the number, or None with the reason in
    ``errors[name]``; an empty value is ``missing`` there (None: an empty value is allowed)."""
    if value is None or value == "":
        if missing is not None:
            errors[name] = missing
        return None
    try:
        return integer(value, name, low=low, high=high)
    except BadParameter as bad:
        errors[name] = bad.reason
        return None


def as_id(value: Any) -> int | None:
    """``value`` as an id if it is one (ASCII digits, 1 to ``MAX_ID``), else None: for lookups by slug or id."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 1 <= value <= MAX_ID else None
    if not isinstance(value, str) or not _DIGITS.fullmatch(value) or len(value) > 19:
        return None
    number = int(value)
    return number if 1 <= number <= MAX_ID else None


class IdConverter:
    """The path converter ``<id:name>``: an id as ``as_id`` takes it (up to 19 ASCII digits, at most ``MAX_ID``).
    Anything else matches no URL, so it is a 404 on every database: Django's ``<int:…>`` takes any number of
    digits, and a foreign key compared with one past 2**63 overflows SQLite (a 500) where PostgreSQL finds
    nothing. ``portal/urls.py`` registers it before any app's URLs are read."""

    regex = "[0-9]{1,19}"

    def to_python(self, value: str) -> int:
        number = as_id(value)
        if number is None:
            raise ValueError(f"{value!r} is not an id")
        return number

    def to_url(self, value: int) -> str:
        return str(value)


def slug_or_id(value: Any, relation: str = "", slug_field: str = "slug") -> Q:
    """The condition for an object named by its slug (or ``slug_field``), or by its id when ``value`` is one:
    ``team=vision`` or ``team=3``. ``relation`` leads from the queried model to it (``"budget__team"``)."""
    prefix = f"{relation}__" if relation else ""
    text = _text(value)
    match = Q(**{f"{prefix}{slug_field}": text})
    pk = as_id(text)
    if pk is not None:
        match |= Q(**{f"{prefix}pk": pk})
    return match


def id_(value: Any, name: str) -> int:
    """An object's id: ASCII digits, 1 to ``MAX_ID``."""
    found = as_id(_text(value) if isinstance(value, str) else value)
    if found is None:
        raise BadParameter(name, f"An id: a whole number from 1 to {MAX_ID}.")
    return found


def optional_integer(value: Any, name: str, *, low: int | None = None, high: int | None = None) -> int | None:
    return None if value in (None, "") else integer(value, name, low=low, high=high)


def _datetime_text(text: str) -> dt.datetime | None:
    if not text.isascii():
        return None
    try:
        if "T" in text or " " in text:
            return parse_datetime(text)
        if re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", text):
            return dt.datetime.combine(dt.date.fromisoformat(text), dt.time())
    except ValueError:
        pass
    return None


def datetime_(value: Any, name: str) -> dt.datetime:
    """An ISO 8601 date and time (``2026-05-01T09:00:00Z``; without an offset, UTC), as UTC, within the
    range every database stores (converted here: PostgreSQL refuses offsets past 15:59 that Python takes).
    A plain date is its midnight, UTC."""
    parsed = value if isinstance(value, dt.datetime) else _datetime_text(_text(value))
    if parsed is None:
        text = _text(value)[:40]
        raise BadParameter(name, f"{text!r} is not a date and time (ISO 8601, e.g. 2026-05-01T09:00:00Z).")
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    try:
        in_utc = parsed.astimezone(dt.UTC)
    except OverflowError:
        in_utc = None
    if in_utc is None or not EARLIEST <= in_utc <= LATEST:
        raise BadParameter(name, f"Must be between {EARLIEST:%Y-%m-%d} and {LATEST:%Y-%m-%d} (UTC).")
    return in_utc


def check_form(data: QueryDict) -> None:
    """Refuse a query string or form whose names or values hold a refused character, naming the field."""
    for key, values in data.lists():
        for text in (key, *values):
            problem = refused_character(text) if isinstance(text, str) else None
            if problem:
                raise BadParameter(key, problem)


#: How deep a JSON document may nest: the API's bodies nest three levels at most; Python's parser gives up
#: (RecursionError) near a thousand.
MAX_JSON_DEPTH = 32


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_json(text: str | bytes, name: str = "body") -> Any:
    """A JSON document, refused (``BadParameter`` naming ``name``, or where inside it) when it is not JSON,
    nests deeper than ``MAX_JSON_DEPTH``, holds ``NaN``/``Infinity`` or text with a refused character."""
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise BadParameter(name, f"JSON nested deeper than {MAX_JSON_DEPTH} levels.") from None
    except ValueError as error:
        raise BadParameter(name, f"Not JSON: {error}.") from None
    check_json(data, name)
    return data


def check_json(data: Any, name: str = "body") -> None:
    """Refuse parsed JSON that nests deeper than ``MAX_JSON_DEPTH`` (naming ``name``) or holds a refused
    character (naming where: ``env.HOME``, ``clusters.0``; a top-level key by itself)."""
    stack: list[tuple[Any, str, int]] = [(data, "", 1)]
    while stack:
        item, where, depth = stack.pop()
        here = where or name
        if isinstance(item, dict | list) and depth > MAX_JSON_DEPTH:
            raise BadParameter(name, f"JSON nested deeper than {MAX_JSON_DEPTH} levels.")
        if isinstance(item, dict):
            for key, value in item.items():
                inner = f"{where}.{key}" if where else str(key)
                problem = refused_character(key)
                if problem:
                    raise BadParameter(inner, f"A key: {problem}")
                stack.append((value, inner, depth + 1))
        elif isinstance(item, list):
            stack.extend((value, f"{where}.{i}" if where else str(i), depth + 1) for i, value in enumerate(item))
        elif isinstance(item, str):
            problem = refused_character(item)
            if problem:
                raise BadParameter(here, problem)


# --- the same parsers as form fields (pages' forms and django-filter's FilterSets) ---------------------------


class IdField(forms.Field):
    """An object's id through ``id_``: ASCII digits, 1 to ``MAX_ID``."""

    def to_python(self, value: Any) -> int | None:
        if value in self.empty_values:
            return None
        try:
            return id_(value, "id")
        except BadParameter as exc:
            raise ValidationError(exc.reason, code="invalid") from None


class DateTimeField(forms.Field):
    """A date and time through ``datetime_``: ISO 8601, as UTC, within what the database stores."""

    def to_python(self, value: Any) -> dt.datetime | None:
        if value in self.empty_values:
            return None
        try:
            return datetime_(value, "datetime")
        except BadParameter as exc:
            raise ValidationError(exc.reason, code="invalid") from None
