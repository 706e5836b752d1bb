"""A job request: what someone asks to run, in the engine's units, whichever way it came (form, API, ``qm``).

The form (``scheduler/web/forms.py``) and the API (``scheduler/api/serializers.py``) turn what people type into
a ``JobRequest``; ``scheduler.actions.submit_job`` judges it and the placement preview
(``scheduler.placement.feasibility``) places it on the idle fleet. Defined here, below both, so neither imports
the other for it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from clusters.models import Cluster
from governance.models import PriorityTier
from scheduler.models import Job
from tenancy.models import Project, Team

MAX_WORKERS = 4096
MAX_TIME_LIMIT = 30 * 24 * 3600
MIN_TIME_LIMIT = 60
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass
class JobRequest:
    """What a researcher asks for, in engine units (millicores, MiB, seconds); the form and the API
    convert from the units people type."""

    team: Team
    name: str
    time_limit: int
    tier: PriorityTier | None = None  # None: the organization's default tier
    project: Project | None = None
    accelerator_types: Sequence[str] = ()
    accelerators: int = 1
    accelerator_milli: int = 1000
    workers: int = 1
    cpu: int = 1000
    memory: int = 4096
    topology_level: str = ""
    topology_mode: str = Job.TopologyMode.REQUIRED
    preemptible: bool = True
    checkpoint_location: str = ""
    clusters: Sequence[Cluster] = ()
    regions: Sequence[str] = ()
    max_price_per_hour: Decimal | None = None
    image: str = ""
    command: Sequence[str] = ()
    script: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    #: Environment values shown to nobody (stored encrypted, handed to the cluster at dispatch).
    secret_env: Mapping[str, str] = field(default_factory=dict)
    #: A job of the actor's whose secret values this one keeps (a clone), for the names not in ``secret_env``.
    secret_env_from: Job | None = None
    max_retries: int = 3
    idempotency_key: str = ""
