"""Price book, metering, cost attribution, reports and forecasts."""
