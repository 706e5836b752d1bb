"""The node probes' endpoint."""
