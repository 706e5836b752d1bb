"""Slurm clusters through slurmrestd (Slurm 22.05 to 24.11, JWT): the kind's descriptor is ``kind.py``, the
backend ``backend.py``."""
