"""The kinds of cluster: one folder each under ``clusters/backends/``, and in it ``kind.py`` with the kind's
descriptor ``KIND`` — everything about a kind that is not the backend itself: its name and label, the credentials
its backend reads (and how the form asks for them), the checks of its options and credentials, what it runs,
whether its gangs keep to one topology domain, how its capacity is paid for, and whether a failed job leaves
something behind that holds capacity.

``KINDS`` lists the folders; everything else is derived from the descriptors: the model field's choices, the
register form's kinds and credential fields, the checks in ``clusters.actions``, the capabilities the engine
routes by. Adding a kind is a folder and a line here (docs/extending.md, "A new kind of cluster").

Descriptors import no client library: ``load`` imports a kind's backend only when a cluster of it is used.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from clusters.backends.base import Backend

#: Every kind, in the order the register form offers them: the folder names under ``clusters/backends/``.
KINDS = ("simulated", "slurm", "kubernetes", "tpu")

#: What a cluster may run: containers (a job that names an image), batch scripts (one that does not), TPU VMs.
CONTAINERS = "containers"
BATCH = "batch_scripts"
TPU_VMS = "tpu_vms"

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
        if need == CONTAINERS:
            return get(kind).no_containers
        return "needs a container image"


#: How a kind's capacity is paid for, when neither the node's labels nor ``options["capacity_type"]`` say
#: (``clusters.capacity.capacity_type``).
ON_PREM = "on_prem"
ON_DEMAND = "on_demand"


@dataclass(frozen=True, slots=True)
class Credential:
    """One credential the backend reads, and how the register form asks for it (write-only, never shown)."""

    key: str
    label: str
    #: ``required``: always needed; ``optional``; ``one_of``: exactly one of the kind's ``one_of`` keys.
    need: str = "required"
    help_text: str = ""
    #: A multi-line value (a CA bundle, a key file): a text area, not a one-line input.
    multiline: bool = False
    #: Shown as typed (a user name) rather than as dots.
    visible: bool = False
    max_length: int = 20_000


def _no_problem(values: Mapping[str, Any]) -> str:
    return ""


def _no_gang_level(levels: Sequence[str]) -> str:
    return ""


@dataclass(frozen=True, slots=True)
class Kind:
    name: str
    label: str
    #: ``module:Class`` of the backend, imported only by ``load``.
    backend: str
    #: What its options and its runtime say it runs (``clusters.capabilities``).
    capabilities: Callable[[Mapping[str, Any]], Capabilities]
    credentials: tuple[Credential, ...] = ()
    #: What is wrong with its options, in words ("" when nothing); checked on register and edit.
    check_options: Callable[[Mapping[str, Any]], str] = _no_problem
    #: What is wrong with its credentials once merged with the stored ones, in words ("" when nothing).
    check_credentials: Callable[[Mapping[str, str]], str] = _no_problem
    #: The level whose domains a gang may not straddle when one domain could hold it ("" when none).
    gang_level: Callable[[Sequence[str]], str] = _no_gang_level
    #: Whether it has an API URL; a kind without one may still take a ``sim://`` name (the simulated kind).
    endpoint: bool = True
    #: Its capacity when nothing else says: ``ON_PREM`` or ``ON_DEMAND`` (a cloud's).
    capacity_type: str = ON_PREM
    #: A failed job stays on the cluster holding capacity until it is cancelled there (TPU queued resources).
    leaves_behind: bool = False
    #: Registered only by the installation's operators (``cluster.simulated.set``), where it runs them at all.
    operators_only: bool = False
    #: Why a job needing containers cannot run here when the options give it no runtime.
    no_containers: str = "runs no containers"
    #: What the register form's options field shows as an example for this kind.
    options_example: str = ""

    def keys(self, need: str) -> tuple[str, ...]:
        return tuple(c.key for c in self.credentials if c.need == need)


@functools.cache
def get(name: str) -> Kind:
    """The descriptor of kind ``name``; ``ValueError`` for a kind not in ``KINDS``."""
    if name not in KINDS:
        raise ValueError(f"unknown cluster kind {name!r}; choose from {', '.join(KINDS)}")
    descriptor: Kind = importlib.import_module(f"clusters.backends.{name}.kind").KIND
    assert descriptor.name == name, f"clusters/backends/{name}/kind.py describes {descriptor.name!r}"
    return descriptor


def every() -> tuple[Kind, ...]:
    return tuple(get(name) for name in KINDS)


def choices() -> list[tuple[str, str]]:
    """(name, label) of every kind: the model field's choices, the API's enum, the form's kinds."""
    return [(kind.name, kind.label) for kind in every()]


def load(name: str) -> type[Backend]:
    """The backend class of kind ``name``, imported only now."""
    module, _, attribute = get(name).backend.partition(":")
    backend: type[Backend] = getattr(importlib.import_module(module), attribute)
    return backend
