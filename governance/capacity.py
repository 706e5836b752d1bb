"""What approved capacity requests (``CapacityRequest``) change, as the placement loop reads it: the quota they
add to teams' queues while they hold, and the nodes reservations book (the engine's ``Booking``).

A temporary quota adds from its start to its end. A reservation adds from its start less ``lead`` (the longest
grace period of the organization's tiers: the team's jobs may then take the booked nodes back from other teams'
preemptible work, which stops by the start) to its end. More quota for good is the queue's quota itself, raised
when it was approved, and adds nothing here. ``approved`` reads what the snapshot needs in one query; the rest
is pure.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from governance.models import CapacityRequest
from tenancy.models import Organization


@dataclass(frozen=True)
class Approved:
    """An approved request with an end that has not passed."""

    pk: int
    team_id: int
    team: str  # its slug
    kind: str
    flavor: str
    accelerators: int
    starts_at: datetime
    ends_at: datetime

    @property
    def reservation(self) -> bool:
        return self.kind == CapacityRequest.Kind.RESERVATION

    def holds(self, now: datetime, lead: timedelta) -> bool:
        """Whether it adds to its team's quota at ``now`` (a reservation from ``lead`` before its start)."""
        return self.starts_at - (lead if self.reservation else timedelta(0)) <= now < self.ends_at


def approved(organization: Organization, now: datetime, horizon: timedelta) -> list[Approved]:
    """The organization's approved requests with an end that have not ended and start within ``horizon``."""
    rows = CapacityRequest.objects.filter(
        team__organization=organization,
        state=CapacityRequest.State.APPROVED,
        ends_at__gt=now,
        starts_at__lte=now + horizon,
    ).values_list("pk", "team_id", "team__slug", "kind", "flavor__name", "accelerators", "starts_at", "ends_at")
    return [Approved(*row) for row in rows]


def extra_quota(
    requests: Sequence[Approved], now: datetime, lead: timedelta, team_queue: Mapping[int, int]
) -> dict[tuple[int, str], Decimal]:
    """Per (queue id, flavor name): accelerators that ``requests`` add to nominal quota at ``now``, each to its
    team's own queue (``team_queue``: team id -> the queue of no project)."""
    extra: dict[tuple[int, str], Decimal] = defaultdict(Decimal)
    for r in requests:
        if r.team_id in team_queue and r.holds(now, lead):
            extra[(team_queue[r.team_id], r.flavor)] += Decimal(r.accelerators)
    return dict(extra)


def booked_nodes(requests: Sequence[Approved]) -> dict[int, list[str]]:
    """Per reservation among ``requests``: its booked nodes as engine names (``<cluster>/<node>``)."""
    reservations = [r.pk for r in requests if r.reservation]
    if not reservations:
        return {}
    nodes: dict[int, list[str]] = defaultdict(list)
    for pk, slug, name in CapacityRequest.nodes.through.objects.filter(capacityrequest_id__in=reservations).values_list(
        "capacityrequest_id", "node__cluster__slug", "node__name"
    ):
        nodes[pk].append(f"{slug}/{name}")
    return {pk: sorted(names) for pk, names in nodes.items()}
