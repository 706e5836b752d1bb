"""Price book, metering, cost attribution, reports and forecasts (added by the billing issue)."""
