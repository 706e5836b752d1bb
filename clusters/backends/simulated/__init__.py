"""The simulated backend: the embedded default, a deterministic fleet with no cluster behind it."""

from .backend import SimulatedBackend

BACKEND = SimulatedBackend

__all__ = ["BACKEND", "SimulatedBackend"]
