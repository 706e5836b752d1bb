"""Accelerator prices for placement and the estimate shown before submitting, read through an interface.

The price book is billing's, and billing reads the scheduler's models, so the scheduler never imports billing:
``PLACEMENT_PRICES`` in the settings names the function that gives the organization's rates on a day
(``billing.actions.prices.placement_prices``: today's rate per cluster, flavor and capacity type, 0 where the book has
none). Anything with the same ``of`` will do, e.g. a flat price list for a fleet without billing.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any, Protocol

from django.conf import settings
from django.utils.module_loading import import_string


class Prices(Protocol):
    """The organization's rates on one day, node by node, as the snapshot asks for them."""

    def of(
        self, cluster_id: int, flavor_id: int | None, labels: Mapping[str, Any], kind: str, options: Mapping[str, Any]
    ) -> float:
        """Currency units per accelerator-hour of that node (0 if there is no rate for it)."""
        ...


def prices(organization_id: int, day: dt.date) -> Prices:
    """The rates of ``PLACEMENT_PRICES`` for this organization on ``day``."""
    factory = import_string(settings.PLACEMENT_PRICES)
    book: Prices = factory(organization_id, day)
    return book
