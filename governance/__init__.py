"""Governance of the fleet: cohorts, team queues, quotas with borrowing, member limits, priority tiers and
budgets, with who may change which (docs/architecture.md)."""
