"""Slurm clusters through slurmrestd (Slurm 22.05, ``openapi/v0.0.38``, JWT); see ``backend.py``."""

from clusters.backends.slurm.backend import SlurmBackend

BACKEND = SlurmBackend

__all__ = ["BACKEND", "SlurmBackend"]
