"""What a cluster can run, derived from its kind and options (docs/backends.md §What each cluster runs).

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

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

CONTAINERS = "containers"
BATCH = "batch_scripts"
TPU_VMS = "tpu_vms"
#: Container runtimes a Slurm cluster may be configured with (``options["container_runtime"]``).
SLURM_RUNTIMES = ("pyxis", "apptainer")

WORDS = {CONTAINERS: "container images", BATCH: "batch scripts", TPU_VMS: "TPU VMs"}


@dataclass(frozen=True, slots=True)
class Capabilities:
    runs: frozenset[str]
    #: How containers are run there: "kubernetes", "docker", "pyxis", "apptainer"; "" when they are not.
    container_runtime: str = ""

    def describe(self) -> list[str]:
        """In words, for the cluster's page: ["container images (pyxis)", "batch scripts"]."""
        words = []
        for capability in (CONTAINERS, BATCH, TPU_VMS):
            if capability in self.runs:
                runtime = f" ({self.container_runtime})" if capability == CONTAINERS and self.container_runtime else ""
                words.append(WORDS[capability] + runtime)
        return words

    def refuses(self, need: str, kind: str) -> str:
        """Why a job needing ``need`` cannot run here, in words; "" when it can."""
        if need in self.runs:
            return ""
        if need == CONTAINERS and kind == "slurm":
            return "runs no containers (no container runtime is configured)"
        if need == CONTAINERS:
            return "runs no containers"
        return "needs a container image"


def of(kind: str, options: Mapping[str, Any] | None) -> Capabilities:
    """The capabilities of a cluster of ``kind`` with ``options``."""
    options = options or {}
    if kind == "kubernetes":
        return Capabilities(frozenset({CONTAINERS}), "kubernetes")
    if kind == "tpu":
        return Capabilities(frozenset({CONTAINERS, BATCH, TPU_VMS}), "docker")
    if kind == "slurm":
        runtime = str(options.get("container_runtime") or "")
        if runtime in SLURM_RUNTIMES:
            return Capabilities(frozenset({CONTAINERS, BATCH}), runtime)
        return Capabilities(frozenset({BATCH}))
    runs = options.get("runs")
    if isinstance(runs, list | tuple) and runs:
        chosen = frozenset(str(r) for r in runs) & {CONTAINERS, BATCH}
        return Capabilities(chosen, "simulated" if CONTAINERS in chosen else "")
    return Capabilities(frozenset({CONTAINERS, BATCH}), "simulated")


def gang_level(kind: str, levels: Sequence[str]) -> str:
    """The level whose domains a gang may not straddle when one domain could hold it ("" when none): Slurm's
    topology/block (levels ``("block",)``, read from the cluster) refuses a node list that spans two blocks
    for a job one block could hold ("Requested node configuration is not available")."""
    return "block" if kind == "slurm" and "block" in levels else ""


def invalid_options(kind: str, options: Mapping[str, Any]) -> str:
    """What is wrong with the options that say what a cluster runs, in words ("" when nothing): a Slurm
    cluster's ``container_runtime``, a simulated cluster's ``runs``, a Kubernetes cluster's Kueue mode."""
    if kind == "kubernetes":
        return invalid_kueue_options(options)
    if kind == "slurm":
        runtime = options.get("container_runtime", "")
        if runtime and runtime not in SLURM_RUNTIMES:
            return (
                f"container_runtime must be one of {', '.join(SLURM_RUNTIMES)} "
                "(or left out: the cluster then runs batch scripts only)."
            )
    if kind == "simulated" and "runs" in options:
        runs = options["runs"]
        if not isinstance(runs, list) or not runs or any(r not in (CONTAINERS, BATCH) for r in runs):
            return f'runs is a list of "{CONTAINERS}" and/or "{BATCH}".'
    return ""


#: A Kubernetes name (a LocalQueue's): a DNS subdomain.
KUBE_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
FLAG_WORDS = ("true", "false", "yes", "no", "1", "0", "")


def invalid_kueue_options(options: Mapping[str, Any]) -> str:
    """What is wrong with a Kubernetes cluster's Kueue options (docs/kueue.md), "" when nothing: ``kueue`` is a
    yes/no, and in Kueue mode jobs need a LocalQueue: ``local_queues`` (Quartermaster queue name -> LocalQueue)
    or ``local_queue`` (for every queue ``local_queues`` leaves out), or both."""
    flag = options.get("kueue", False)
    if not isinstance(flag, bool) and not (isinstance(flag, str) and flag.strip().lower() in FLAG_WORDS):
        return "kueue is true or false."
    kueue = flag if isinstance(flag, bool) else flag.strip().lower() in ("true", "yes", "1")
    mapped = options.get("local_queues", {})
    if not isinstance(mapped, dict) or not all(
        isinstance(queue, str) and isinstance(local, str) and KUBE_NAME.fullmatch(local)
        for queue, local in mapped.items()
    ):
        return 'local_queues maps Quartermaster queue names to Kueue LocalQueue names, e.g. {"nlp": "lq-nlp"}.'
    single = options.get("local_queue", "")
    if not isinstance(single, str) or (single and not KUBE_NAME.fullmatch(single)):
        return "local_queue is the name of a Kueue LocalQueue in the cluster's namespace."
    if kueue and not mapped and not single:
        return (
            "In Kueue mode jobs go to a LocalQueue: set local_queues (a LocalQueue for each Quartermaster queue, "
            'e.g. {"nlp": "lq-nlp"}) or local_queue (one for every queue), or both.'
        )
    return ""


def need(image: str) -> str:
    """What a job's program needs: containers when it names an image, else batch scripts."""
    return CONTAINERS if image.strip() else BATCH
