"""The simulated fleets: a few profiles of real hardware, laid out deterministically.

A profile is one kind of node and how nodes group into topology domains. The fleet a simulated cluster
reports is a profile and a size (``options["profile"]``, ``options["nodes"]``): node ``i`` is always the
same node, in the same rack, so a sync of the same cluster always reports the same fleet.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from clusters.backends.base import ELASTIC_POOL, AcceleratorInfo, NodeInfo

GIB = 1024  # MiB


@dataclass(frozen=True, slots=True)
class Profile:
    accelerator: AcceleratorInfo
    accelerators: int  # per node
    cpu: int  # millicores
    memory: int  # MiB
    #: Topology levels, widest first, and how many nodes each domain of that level holds.
    levels: tuple[tuple[str, int], ...]
    prefix: str
    #: What every node of the profile reports beside (a TPU slice's type and topology, as the TPU backend does).
    labels: Mapping[str, str] = field(default_factory=dict)


PROFILES = {
    # HGX H100 nodes: NVLink joins the 8 GPUs inside a node; racks of 4 nodes; InfiniBand blocks of 32.
    "h100-onprem": Profile(
        AcceleratorInfo("H100-SXM-80GB", 80, "hopper", "nvlink"),
        8,
        112_000,
        2048 * GIB,
        (("ib_block", 32), ("rack", 4)),
        "h100",
    ),
    # A Slurm-like A100 partition: racks of 8 nodes.
    "a100-slurm": Profile(
        AcceleratorInfo("A100-SXM-40GB", 40, "ampere", "nvlink"), 8, 128_000, 1024 * GIB, (("rack", 8),), "a100"
    ),
    # Cloud TPU v5p-32 slices, each a node as the TPU backend reports them: 16 chips on 4 hosts joined by ICI,
    # taken whole by one job (or one slice of a multislice job) that names the slice type.
    "tpu-slices": Profile(
        AcceleratorInfo("v5p", 95, "tpu-v5p", "ici"),
        16,
        4 * 208_000,
        4 * 448 * GIB,
        (),
        "v5p-32",
        {"tpu/accelerator-type": "v5p-32", "tpu/topology": "2x2x4", "tpu/hosts": "4"},
    ),
}


def _fraction(*parts: object) -> float:
    """A stable number in [0, 1) from its parts (the same on every run and machine)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def node(profile_name: str, seed: int, i: int, busy: float = 0.0) -> NodeInfo:
    """Node ``i`` of a fleet: its topology from its index, its background load (a fraction ``busy`` of its
    accelerators on average, for demos) from the seed."""
    profile = PROFILES[profile_name]
    topology = {level: f"{level.replace('_', '-')}-{i // size:03d}" for level, size in profile.levels}
    used = round(profile.accelerators * busy * 2 * _fraction(seed, i)) if busy else 0
    used = min(used, profile.accelerators)
    if "tpu/accelerator-type" in profile.labels and used:  # a slice is held whole or not at all
        used = profile.accelerators if _fraction(seed, i) < busy else 0
    return NodeInfo(
        name=f"{profile.prefix}-{i:05d}",
        accelerator=profile.accelerator.model,
        accelerators=profile.accelerators,
        accelerators_allocatable=profile.accelerators,
        cpu=profile.cpu,
        cpu_allocatable=profile.cpu - 2000,  # two cores for the system
        memory=profile.memory,
        memory_allocatable=profile.memory - 16 * GIB,
        accelerators_used=used,
        cpu_used=used * (profile.cpu // profile.accelerators // 2),
        memory_used=used * (profile.memory // profile.accelerators // 2),
        topology=topology,
        labels=profile.labels,
    )


def grown(profile_name: str, name: str, pool: str, capacity_type: str) -> NodeInfo:
    """A node an elastic pool added: the profile's shape, idle, in no topology domain, labelled with its pool and
    its capacity type (``clusters.capacity`` reads it)."""
    return replace(
        node(profile_name, 0, 0),
        name=name,
        topology={},
        labels={
            **PROFILES[profile_name].labels,
            ELASTIC_POOL: pool,
            "quartermaster.io/capacity-type": capacity_type,
        },
    )


def holding(node: NodeInfo, accelerators: int, cpu: int, memory: int) -> NodeInfo:
    """``node`` with what jobs the simulated cluster runs hold on it added to its use, within its capacity (a
    TPU slice any job holds is in use whole)."""
    if accelerators and "tpu/accelerator-type" in node.labels:
        accelerators = node.accelerators
    return replace(
        node,
        accelerators_used=min(node.accelerators, node.accelerators_used + accelerators),
        cpu_used=min(node.cpu, node.cpu_used + cpu),
        memory_used=min(node.memory, node.memory_used + memory),
    )
