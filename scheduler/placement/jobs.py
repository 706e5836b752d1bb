"""The engine's view of a job (``engine_job``), the columns it reads (``REQUEST_COLUMNS``) and those of a waiting
job the placement snapshot reads (``PENDING_COLUMNS``): one builder for the loop's snapshot, the previews
(``feasibility``) and the what-if replay of past jobs (``billing/whatif_replay.py``), so a job field the engine
uses is read in one place (docs/extending.md, "A job field the engine and the backends use").
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from clusters import capabilities
from clusters.backends.tpu.accelerators import shape_of
from scheduler.engine import model as m
from scheduler.models import Job

#: The fields of a job that say whether it has a Ray head, and its shape.
HEAD_FIELDS = ("kind", "head_accelerators", "head_cpu", "head_memory")
#: The columns of a job ``engine_job`` reads: what was asked (the placement snapshot, and the what-if replay of
#: past jobs, read these). ``clusters``, ``excluded``, ``budgets`` and ``locality`` are the readers' own (they
#: come from other tables).
REQUEST_COLUMNS = (
    "pk",
    "queue__name",
    "tier__name",
    "tier__preemptible",
    "submitted_at",
    "workers",
    "accelerators",
    "accelerator_milli",
    "cpu",
    "memory",
    "accelerator_types",
    "regions",
    "topology_level",
    "topology_mode",
    "time_limit",
    "max_price_per_hour",
    "preemptible",
    "spot",
    "image",
    "data_locality",
    "team_id",
    "team__slug",
    "submitted_by_id",
    *HEAD_FIELDS,
    "tpu_type",
    "tpu_topology",
    "spread_group",
)
#: What the snapshot reads of each waiting job: the request, and the loop's own bookkeeping (its state, attempt
#: and last pending words, written back only when they change; its array and project, for limits and budgets).
PENDING_COLUMNS = (
    *REQUEST_COLUMNS,
    "state",
    "attempt",
    "pending_reason",
    "pending_message",
    "queue_position",
    "estimated_start",
    "project_id",
    "array_id",
)


def ts(value: datetime | None) -> float:
    """A moment as the engine counts time: seconds since the epoch (0 for none)."""
    return value.timestamp() if value else 0.0


def owner(team_id: int, user_id: int | None) -> str:
    """The engine's name for a member of a team (per-member limits): ``"<team pk>:<user pk>"``."""
    return f"{team_id}:{user_id}"


def engine_job(j: dict[str, Any]) -> m.Job:
    """The engine's view of a job from its field values (a ``values()`` row, or a request being checked)."""
    level = j["topology_level"]
    price = j["max_price_per_hour"]
    tpu_type = j.get("tpu_type") or ""
    # A TPU slice comes whole, its hosts' CPU and memory with it: the job asks for the slice's chips only.
    cpu, memory = (0, 0) if tpu_type else (j["cpu"], j["memory"])
    return m.Job(
        id=str(j.get("pk") or "new"),
        queue=j["queue__name"],
        tier=j["tier__name"],
        submitted_at=ts(j["submitted_at"]),
        workers=j["workers"],
        accelerators=j["accelerators"],
        accel_milli=j["accelerator_milli"],
        cpu=cpu,
        memory=memory,
        flavors=tuple(j["accelerator_types"]),
        clusters=tuple(sorted(j["clusters"])),
        regions=tuple(j["regions"]),
        topology=m.Topology(level, m.TopologyMode(j["topology_mode"])) if level else None,
        time_limit=j["time_limit"],
        max_price_per_hour=float(price) if price is not None else None,
        # Preemptible when the job allows it and its tier does (a request being checked has no tier column).
        preemptible=j["preemptible"] and j.get("tier__preemptible", True),
        needs=capabilities.need(j["image"]) if "image" in j else "",
        excluded=j.get("excluded", ()),
        locality=j.get("locality") or j.get("data_locality") or None,
        owner=owner(j["team_id"], j["submitted_by_id"]) if "team_id" in j else "",
        budgets=j.get("budgets", ()),
        head=head_of(j),
        shape=shape_of(tpu_type, j.get("tpu_topology") or "") if tpu_type else "",
        team=j.get("team__slug") or "",
        spread_group=j.get("spread_group") or "",
        spot=bool(j.get("spot")),
    )


def head_of(j: dict[str, Any]) -> tuple[int, int, int]:
    """A Ray job's head as the engine counts it (whole accelerators, millicores, MiB); (0, 0, 0) for others."""
    if j.get("kind") != Job.Kind.RAY:
        return (0, 0, 0)
    return (j["head_accelerators"], j["head_cpu"], j["head_memory"])
