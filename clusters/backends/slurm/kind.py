"""The Slurm kind: clusters reached through slurmrestd with a JWT (``backend.py``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from clusters.backends.kinds import BATCH, CONTAINERS, Capabilities, Credential, Kind
from clusters.backends.slurm.script import RUNTIMES


def capabilities(options: Mapping[str, Any]) -> Capabilities:
    """Batch scripts always; containers too with a ``container_runtime`` (pyxis or apptainer)."""
    runtime = str(options.get("container_runtime") or "")
    if runtime in RUNTIMES:
        return Capabilities(frozenset({CONTAINERS, BATCH}), runtime)
    return Capabilities(frozenset({BATCH}))


def check_options(options: Mapping[str, Any]) -> str:
    from clusters.backends.slurm.backend import invalid_options

    if problem := invalid_options(options):
        return problem
    runtime = options.get("container_runtime", "")
    if runtime and runtime not in RUNTIMES:
        return (
            f"container_runtime must be one of {', '.join(RUNTIMES)} "
            "(or left out: the cluster then runs batch scripts only)."
        )
    return ""


def gang_level(levels: Sequence[str]) -> str:
    """Slurm's topology/block (levels ``("block",)``, read from the cluster) refuses a node list that spans two
    blocks for a job one block could hold ("Requested node configuration is not available")."""
    return "block" if "block" in levels else ""


KIND = Kind(
    name="slurm",
    label="Slurm",
    backend="clusters.backends.slurm.backend:SlurmBackend",
    capabilities=capabilities,
    credentials=(
        Credential("user", "Slurm user", visible=True, max_length=200),
        Credential("token", "Slurm JWT", help_text="From scontrol token username=<user> lifespan=<seconds>."),
    ),
    check_options=check_options,
    gang_level=gang_level,
    no_containers="runs no containers (no container runtime is configured)",
    options_example='{"partition": "gpu"}',
)
