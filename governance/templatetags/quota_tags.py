"""Template filters of the quota pages."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import template

register = template.Library()


@register.filter
def amount(value: Any) -> str:
    """A quota amount as people write it: ``4.25``, not ``4.250``; ``160``, not ``1.6E+2``."""
    if value is None or value == "":
        return ""
    number = value if isinstance(value, Decimal) else Decimal(str(value))
    return format(number.normalize(), "f") if number.is_finite() else str(value)
