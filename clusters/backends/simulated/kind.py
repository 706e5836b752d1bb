"""The simulated kind: the embedded default, a deterministic fleet with no cluster behind it (``backend.py``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from clusters.backends.kinds import BATCH, CONTAINERS, Capabilities, Kind


def capabilities(options: Mapping[str, Any]) -> Capabilities:
    """As ``options["runs"]`` says (containers, batch scripts or both); both by default."""
    runs = options.get("runs")
    if isinstance(runs, list | tuple) and runs:
        chosen = frozenset(str(r) for r in runs) & {CONTAINERS, BATCH}
        return Capabilities(chosen, "simulated" if CONTAINERS in chosen else "")
    return Capabilities(frozenset({CONTAINERS, BATCH}), "simulated")


def check_options(options: Mapping[str, Any]) -> str:
    from clusters.backends.simulated.fleet import PROFILES

    if options.get("profile", "h100-onprem") not in PROFILES:
        return f"profile must be one of {', '.join(PROFILES)}."
    nodes = options.get("nodes", 16)
    if isinstance(nodes, bool) or not isinstance(nodes, int) or not 0 <= nodes <= 100_000:
        return "nodes must be a whole number from 0 to 100000."
    if "runs" in options:
        runs = options["runs"]
        if not isinstance(runs, list) or not runs or any(r not in (CONTAINERS, BATCH) for r in runs):
            return f'runs is a list of "{CONTAINERS}" and/or "{BATCH}".'
    return ""


KIND = Kind(
    name="simulated",
    label="Simulated",
    backend="clusters.backends.simulated.backend:SimulatedBackend",
    capabilities=capabilities,
    check_options=check_options,
    endpoint=False,
    operators_only=True,
    options_example='{"profile": "h100-onprem", "nodes": 16}',
)
