"""TPU generations and how many chips an accelerator type names.

Cloud TPU names a slice ``<generation>-<size>`` (``v5p-16``, ``v5litepod-8``), and the size does not mean
the same thing in every generation:

- v2, v3, v4 and v5p count **TensorCores**, two per chip: ``v4-8`` and ``v5p-8`` are 4 chips, ``v5p-16`` 8;
- v5e (``v5litepod``) and v6e count **chips**: ``v5litepod-8`` and ``v6e-8`` are 8 chips.

When the API gives the slice's ``acceleratorConfig`` its topology is the better source, generation or not:
the chips are the product of its dimensions (``2x2x1`` is 4 chips, ``2x4`` is 8). Quartermaster counts chips
everywhere (``NodeInfo.accelerators``, ``JobSpec.accelerators_per_worker``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Generation:
    model: str  # Quartermaster's accelerator model name, e.g. "v5p"
    prefix: str  # how accelerator types of this generation start, e.g. "v5litepod" for v5e
    cores_per_unit: int  # TensorCores per unit of the type's size: 2 where the size counts cores
    hbm_gib: int  # high-bandwidth memory per chip
    runtime_version: str  # the TPU VM software version a new slice gets unless the cluster says otherwise

    @property
    def generation(self) -> str:
        return f"tpu-{self.model}"

    def chips(self, size: int) -> int:
        return size // self.cores_per_unit


GENERATIONS = {
    g.prefix: g
    for g in (
        Generation("v2", "v2", 2, 16, "tpu-ubuntu2204-base"),
        Generation("v3", "v3", 2, 32, "tpu-ubuntu2204-base"),
        Generation("v4", "v4", 2, 32, "tpu-ubuntu2204-base"),
        Generation("v5p", "v5p", 2, 95, "v2-alpha-tpuv5"),
        Generation("v5e", "v5litepod", 1, 16, "v2-alpha-tpuv5-lite"),
        Generation("v6e", "v6e", 1, 32, "v2-alpha-tpuv6e"),
    )
}

_TYPE = re.compile(r"^(?P<prefix>[a-z0-9]+)-(?P<size>[1-9][0-9]*)$")
_TOPOLOGY = re.compile(r"^[1-9][0-9]*(x[1-9][0-9]*)*$")


class UnknownAcceleratorType(ValueError):
    """The type's name is not ``<generation>-<size>`` or names a generation we have no rule for."""


def split_type(accelerator_type: str) -> tuple[str, int]:
    """``"v5p-16"`` -> ``("v5p", 16)``."""
    match = _TYPE.match(accelerator_type)
    if match is None:
        raise UnknownAcceleratorType(f"accelerator type {accelerator_type!r} is not <generation>-<size>")
    return match["prefix"], int(match["size"])


def generation_of(accelerator_type: str) -> Generation:
    prefix, _ = split_type(accelerator_type)
    if prefix not in GENERATIONS:
        raise UnknownAcceleratorType(
            f"accelerator type {accelerator_type!r}: no chip-count rule for TPU generation {prefix!r} "
            "(clusters/backends/tpu/accelerators.py)"
        )
    return GENERATIONS[prefix]


def chips_in_topology(topology: str) -> int:
    """``"2x2x1"`` -> 4."""
    if not _TOPOLOGY.match(topology):
        raise UnknownAcceleratorType(f"topology {topology!r} is not like 2x2x1")
    return math.prod(int(d) for d in topology.split("x"))


def check_shape(accelerator_type: str, topology: str = "") -> int:
    """The chips of one slice of ``accelerator_type`` (and ``topology``, when given), after checking that the
    type names a known generation and that the topology's chips are the type's: ``v5p-32`` is 16 chips, so
    ``2x2x4`` fits it and ``2x2x2`` does not. ``UnknownAcceleratorType`` says what is wrong."""
    generation = generation_of(accelerator_type)
    prefix, size = split_type(accelerator_type)
    if size % generation.cores_per_unit:
        raise UnknownAcceleratorType(
            f"accelerator type {accelerator_type!r}: a {prefix} size counts TensorCores, two a chip, so it is even "
            f"(e.g. {prefix}-8)"
        )
    count = generation.chips(size)
    if count < 1:
        raise UnknownAcceleratorType(f"accelerator type {accelerator_type!r} names no whole chip")
    if topology and chips_in_topology(topology) != count:
        raise UnknownAcceleratorType(
            f"topology {topology} is {chips_in_topology(topology)} chips; a {accelerator_type} slice has {count}"
        )
    return count


def shape_of(accelerator_type: str, topology: str = "") -> str:
    """The engine's name of a slice shape (``Job.shape``, ``Node.shape``): ``v5p-32/2x2x4``, or ``v5p-32``."""
    return f"{accelerator_type}/{topology}" if topology else accelerator_type


def type_for(prefix: str, chip_count: int) -> str:
    """The accelerator type of a slice of ``chip_count`` chips of generation ``prefix``: ``("v5p", 4)`` -> v5p-8."""
    generation = GENERATIONS.get(prefix)
    return f"{prefix}-{chip_count * (generation.cores_per_unit if generation else 1)}"


def type_of_model(model: str, chip_count: int) -> str:
    """The accelerator type of a slice of ``chip_count`` chips of the generation Quartermaster calls ``model`` (an
    accelerator type's name: ``("v5p", 16)`` -> v5p-32); ``UnknownAcceleratorType`` when there is none."""
    for generation in GENERATIONS.values():
        if generation.model == model:
            accelerator_type = type_for(generation.prefix, chip_count)
            check_shape(accelerator_type)
            return accelerator_type
    known = ", ".join(g.model for g in GENERATIONS.values())
    raise UnknownAcceleratorType(f"{model!r} is not a TPU generation ({known})")


def chips(accelerator_type: str, topology: str = "") -> int:
    """Chips in a slice: from its topology when known, else from its type by the generation's rule."""
    if topology:
        return chips_in_topology(topology)
    _, size = split_type(accelerator_type)
    return generation_of(accelerator_type).chips(size)
