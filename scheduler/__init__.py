"""Jobs, queues, cohorts, quotas and the placement engine (added by the engine and jobs issues)."""
