"""The quotas, budgets and priority tiers API."""
