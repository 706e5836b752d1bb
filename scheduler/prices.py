"""Accelerator prices for placement and the estimate shown before submitting: the price book's rates.

The price book is billing's (``billing/prices.py``): a rate per cluster, flavor and capacity type from an
effective day on. A node is priced as the capacity type its labels or its cluster say (``billing.metering.
capacity_type``), at today's rate (UTC); a node the book has no rate for costs 0 to the engine.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any


class Prices:
    """The organization's rates on ``day`` as the snapshot asks for them, node by node."""

    def __init__(self, organization_id: int, day: dt.date) -> None:
        # Billing reads the scheduler's models; this reads billing's book (so, imported when first used).
        from billing.metering import capacity_type
        from billing.prices import RateBook

        self.book = RateBook.of(organization_id)
        self.day = day
        self.capacity_type = capacity_type

    def of(self, cluster_id: int, flavor_id: int | None, labels: Mapping[str, Any], kind: str,
           options: Mapping[str, Any]) -> float:  # fmt: skip
        """Currency units per accelerator-hour of that node (0 if the book has no rate for it)."""
        if flavor_id is None:
            return 0.0
        rate = self.book.rate((cluster_id, flavor_id, self.capacity_type(labels, kind, options)), self.day)
        return float(rate) if rate is not None else 0.0
