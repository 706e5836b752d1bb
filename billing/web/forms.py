"""Forms of the price book page: they only lay the fields out and carry what was typed. Every value is judged
by ``billing/actions/prices.py`` (``set_price``, ``set_overhead``), whose ``ValidationError`` is put beside each field
(``common.web.forms.apply_errors``); so the fields here are plain text and unchecked selects, and the page shows
the same messages the API gives."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from django import forms

from billing.actions.prices import ON_PREM_FIELDS, OVERHEAD_FIELDS, PRICE_FIELDS
from billing.models import Overhead, Price
from clusters.capacity import CapacityType
from clusters.models import AcceleratorType, Cluster
from tenancy.models import Organization

MONTH = re.compile(r"^\d{4}-\d{2}$")


def _text(label: str, help_text: str = "", decimal: bool = True) -> forms.CharField:
    attrs = {"inputmode": "decimal", "autocomplete": "off"} if decimal else {}
    return forms.CharField(
        label=label, help_text=help_text, required=False, strip=True, widget=forms.TextInput(attrs=attrs)
    )


def plain(value: Decimal | int | None) -> str:
    """A stored amount as typed into a form: ``2.5`` rather than ``2.5000``; empty for none."""
    if value is None:
        return ""
    if isinstance(value, int):
        return str(value)
    return f"{value.normalize():f}"


class PriceForm(forms.Form):
    """A row of the price book. The on-prem fields sit in their own fieldset, shown by the page's script only
    when the capacity type is on-prem (without the script every field is shown, and the server decides)."""

    cluster = forms.CharField(required=False, widget=forms.Select)
    flavor = forms.CharField(label="Accelerator type", required=False, widget=forms.Select)
    capacity_type = forms.CharField(
        label="Capacity type",
        required=False,
        widget=forms.Select(choices=[("", "Choose"), *CapacityType.choices]),
    )
    effective_from = forms.CharField(
        label="Effective from",
        required=False,
        help_text="The first UTC day it applies; it holds until a later row takes over.",
        widget=forms.DateInput(attrs={"type": "date"}),
    )
    hourly_rate = _text("Price of an accelerator-hour", "Cloud capacity: on-demand, reserved or spot.")
    purchase_price = _text("Purchase price of a node")
    accelerators_per_node = _text("Accelerators per node", decimal=False)
    depreciation_months = _text("Depreciation period", "In months.", decimal=False)
    power_kw = _text("Power a node draws", "In kW.")
    energy_price = _text("Energy price", "Per kWh.")
    hosting_per_month = _text("Hosting a month", "Per node: space, cooling, support.")
    note = forms.CharField(required=False, help_text="Optional: where the figure comes from.")

    def __init__(self, organization: Organization, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        clusters = Cluster.objects.filter(organization=organization).order_by("name")
        kinds = AcceleratorType.objects.filter(organization=organization).order_by("name")
        self.fields["cluster"].widget.choices = [("", "Choose a cluster")] + [(c.slug, c.name) for c in clusters]
        self.fields["flavor"].widget.choices = [("", "Choose a type")] + [(k.name, k.name) for k in kinds]

    @property
    def on_prem_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in ON_PREM_FIELDS]

    def values(self) -> dict[str, str]:
        """What was typed, field by field, for ``prices.set_price`` (which judges it)."""
        data = self.cleaned_data if hasattr(self, "cleaned_data") else {}
        return {name: data.get(name, "") or "" for name in PRICE_FIELDS}

    @staticmethod
    def initial_of(price: Price) -> dict[str, str]:
        return {
            "cluster": price.cluster.slug,
            "flavor": price.flavor.name,
            "capacity_type": price.capacity_type,
            "effective_from": price.effective_from.isoformat(),
            "hourly_rate": plain(price.hourly_rate),
            **{name: plain(getattr(price, name)) for name in ON_PREM_FIELDS},
            "note": price.note,
        }


class OverheadForm(forms.Form):
    """A shared monthly cost (staff, storage, network, support), from one month to another (or open-ended)."""

    name = forms.CharField(required=False, help_text="What the money pays for.")
    amount = _text("Amount a month")
    starts = forms.CharField(
        label="From", required=False, help_text="The first month.", widget=forms.TextInput(attrs={"type": "month"})
    )
    ends = forms.CharField(
        label="Until",
        required=False,
        help_text="The last month; empty for no end.",
        widget=forms.TextInput(attrs={"type": "month"}),
    )

    def values(self) -> dict[str, str]:
        """What was typed, for ``prices.set_overhead``; a month ``YYYY-MM`` (what a month input sends) is
        given as its first day, which is how the overhead is kept."""
        data = self.cleaned_data if hasattr(self, "cleaned_data") else {}
        values = {name: data.get(name, "") or "" for name in OVERHEAD_FIELDS}
        for name in ("starts", "ends"):
            if MONTH.match(values[name]):
                values[name] = f"{values[name]}-01"
        return values

    @staticmethod
    def initial_of(overhead: Overhead) -> dict[str, str]:
        return {
            "name": overhead.name,
            "amount": plain(overhead.amount),
            "starts": f"{overhead.starts:%Y-%m}",
            "ends": f"{overhead.ends:%Y-%m}" if overhead.ends else "",
        }
