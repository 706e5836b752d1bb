"""Jobs, queues, cohorts, quotas and the placement engine."""
