"""Accelerator prices for placement and the estimate shown before submitting.

Until the price book (billing) exists, a cluster carries its prices in its options:
``{"prices": {"H100-SXM-80GB": 4.1}, "price_per_accelerator_hour": 2.0}`` (the second for any other type).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def accelerator_price(options: Mapping[str, Any], flavor: str) -> float:
    """Currency units per accelerator-hour of ``flavor`` on a cluster with these options (0 if unknown)."""
    prices = options.get("prices") or {}
    value = prices.get(flavor, options.get("price_per_accelerator_hour", 0.0)) if isinstance(prices, dict) else 0.0
    try:
        return max(0.0, float(value))
    except (TypeError, ValueError):
        return 0.0
