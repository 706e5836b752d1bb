"""What a cluster can run, derived from its kind and options (docs/backends.md §What each cluster runs): each
kind's descriptor says (``clusters/backends/<kind>/kind.py``); this module names the capabilities.

A job's program is either a **container** (it names an image) or a **batch** program (a script, run on the
host as it is). Clusters run:

| kind | containers | batch scripts | notes |
|---|---|---|---|
| Kubernetes | yes | no | every pod runs an image |
| Slurm | with ``container_runtime`` (``pyxis`` or ``apptainer``) | yes | without one, never containers |
| Google Cloud TPU | yes (Docker on the TPU VM) | yes (the startup script) | TPU VMs |
| simulated | as ``options["runs"]`` says (default both) | | |

The placement engine never routes a job where its program cannot run, the submission check refuses what
no cluster can run, and a waiting job's reason names the clusters ruled out and why (``refuses``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from clusters.backends import kinds
from clusters.backends.kinds import BATCH, CONTAINERS, TPU_VMS, Capabilities

__all__ = ["BATCH", "CONTAINERS", "TPU_VMS", "Capabilities", "gang_level", "need", "of"]


def of(kind: str, options: Mapping[str, Any] | None) -> Capabilities:
    """The capabilities of a cluster of ``kind`` with ``options`` (its descriptor's ``capabilities``)."""
    return kinds.get(kind).capabilities(options or {})


def gang_level(kind: str, levels: Sequence[str]) -> str:
    """The level whose domains a gang may not straddle when one domain could hold it ("" when none)."""
    return kinds.get(kind).gang_level(levels)


def need(image: str) -> str:
    """What a job's program needs: containers when it names an image, else batch scripts."""
    return CONTAINERS if image.strip() else BATCH
