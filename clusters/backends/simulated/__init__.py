"""The simulated backend: the embedded default, a deterministic fleet with no cluster behind it, and faults
injected on demand (``inject``, ``clear``; see ``backend.py``)."""

from .backend import SimulatedBackend, clear, inject

__all__ = ["SimulatedBackend", "clear", "inject"]
