"""Billing's API: costs and statements, the price book, forecasts and what-ifs."""
