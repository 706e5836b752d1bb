"""Billing pages: finance's costs and price book, procurement's forecasts and what-ifs."""
