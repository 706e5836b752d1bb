"""Capacity what-ifs for procurement: "add (or remove) N nodes of flavor F in cluster C", answered by replaying
the organization's last ``days`` days of jobs on today's fleet and on the changed one (``whatif_replay``, where
the choices behind the replay are written down) and comparing queue wait and utilisation.

``submit_what_if`` (finance, procurement and admins; validated field by field, audited) stores a queued ``WhatIf``
and queues ``billing.tasks.run_what_if`` at the commit. ``run`` claims the row with a compare-and-set (a claim lasts
``CLAIM_SECONDS`` and is renewed with every progress write, so two workers never run one what-if at once and a
crashed worker's claim runs out), replays both fleets reporting progress (0-0.5, then 0.5-1, at most every
``PROGRESS_SECONDS``, one UPDATE each), and stores the result, or the error with the status failed: a run never
stays "running" past its claim. ``requeue_stale`` (the beat) hands lost and abandoned runs to a worker again.
"""

from __future__ import annotations

import logging
import math
import time
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.utils import timezone

from billing.actions.prices import RateBook
from billing.models import WhatIf
from billing.whatif_replay import change_errors, in_service, what_if_result
from clusters.capacity import CapacityType
from clusters.models import AcceleratorType, Cluster, ElasticPool, Node
from common import enqueue, params
from scheduler.simulation.pools import Pool
from tenancy import policy
from tenancy.actions import audit
from tenancy.models import Organization

log = logging.getLogger(__name__)

DEFAULT_DAYS, MIN_DAYS, MAX_DAYS = 30, 1, 90
MAX_LEAD_DAYS = MAX_DAYS  # a lead time past the window: the nodes never arrive in it
MAX_NODES = 10_000  # nodes added or removed at once
CLAIM_SECONDS = 300  # a run's hold on its row, renewed by every progress write
PROGRESS_SECONDS = 0.5  # at most two progress writes a second
#: A what-if still not done this long after it was asked for is given up (a run that kills its worker).
GIVE_UP_AFTER = timedelta(hours=24)
RESEND_AFTER = timedelta(minutes=10)  # a queued what-if's task is sent again at most this often
FIELDS = ("cluster", "flavor", "nodes", "days", "kind", "lead_days", "pool", "grow_quotas")
#: How often a spot pool's node is taken back, per node and day, in a burst's replay: an assumption (clouds do not
#: say), stated on the result.
SPOT_RECLAIMS_PER_DAY = 1.0
REFUSED = "Capacity what-ifs are for the organization's finance staff, procurement and admins."


class ClaimLost(RuntimeError):
    """Another worker took the row over (this one's claim ran out): stop without writing anything."""


# ------------------------------------------------------------------------------------------------ who


def organizations_for(user: User) -> list[Organization]:
    """The organizations whose what-ifs ``user`` may ask for (finance, procurement, admin; a superuser: all)."""
    return list(policy.permitted(user, "whatif.run", Organization.objects.order_by("name")))


# ------------------------------------------------------------------------------------ asking for one


def _integer(value: Any, field: str, low: int, high: int, errors: dict[str, str]) -> int | None:
    return params.whole(value, field, low, high, errors, "Required.")


def _find(rows: QuerySet[Any], ref: Any, by: str) -> Any:
    """The row ``ref`` names: itself, its id, or its ``by`` (a string of digits no ``by`` matches is an id)."""
    if isinstance(ref, rows.model):
        return rows.filter(pk=ref.pk).first()
    if isinstance(ref, int) and not isinstance(ref, bool):
        pk = params.as_id(ref)
        return rows.filter(pk=pk).first() if pk is not None else None
    if isinstance(ref, str) and ref.strip():
        text = ref.strip()
        found = rows.filter(**{by: text}).first()
        pk = params.as_id(text)
        if found is None and pk is not None:
            found = rows.filter(pk=pk).first()
        return found
    return None


def check(
    organization: Organization,
    cluster: Any,
    flavor: Any,
    nodes: Any,
    days: Any,
    kind: Any = WhatIf.Kind.NODES,
    lead_days: Any = 0,
    pool: Any = None,
    grow_quotas: Any = False,
) -> dict[str, Any]:
    """The request's values resolved in ``organization`` (cluster by id or slug, flavor by id or name, an elastic
    pool by id or name); ``ValidationError`` names every bad field."""
    values = _check(organization, cluster, flavor, nodes, days, kind, lead_days, pool)
    if grow_quotas not in (None, "", True, False):
        raise ValidationError({"grow_quotas": "true or false."})
    return {**values, "grow_quotas": bool(grow_quotas)}


def _check(
    organization: Organization,
    cluster: Any,
    flavor: Any,
    nodes: Any,
    days: Any,
    kind: Any,
    lead_days: Any,
    pool: Any,
) -> dict[str, Any]:
    errors: dict[str, str] = {}
    kind = kind or WhatIf.Kind.NODES
    if kind not in WhatIf.Kind.values:
        errors["kind"] = f"{kind!r} is not one of {', '.join(WhatIf.Kind.values)}."
    lead = _integer(0 if lead_days in (None, "") else lead_days, "lead_days", 0, MAX_LEAD_DAYS, errors)
    if kind == WhatIf.Kind.BURST:
        return _check_burst(organization, pool, nodes, days, lead, errors)
    if pool not in (None, ""):
        errors["pool"] = "Only a burst names an elastic pool."
    found_cluster = _find(Cluster.objects.filter(organization=organization), cluster, "slug")
    if cluster in (None, ""):
        errors["cluster"] = "Required."
    elif found_cluster is None:
        errors["cluster"] = f"No cluster {getattr(cluster, 'slug', cluster)!s} in {organization}."
    elif found_cluster.status == Cluster.Status.DISABLED:
        errors["cluster"] = f"Cluster {found_cluster.slug} is disabled: it has no fleet to change."
    found_flavor = _find(AcceleratorType.objects.filter(organization=organization), flavor, "name")
    if flavor in (None, ""):
        errors["flavor"] = "Required."
    elif found_flavor is None:
        errors["flavor"] = f"No accelerator type {getattr(flavor, 'name', flavor)!s} in {organization}."
    count = _integer(nodes, "nodes", -MAX_NODES, MAX_NODES, errors)
    if count == 0:
        errors["nodes"] = "Add (a positive number) or remove (a negative one) at least one node."
    span = _integer(DEFAULT_DAYS if days is None else days, "days", MIN_DAYS, MAX_DAYS, errors)
    if kind == WhatIf.Kind.RESERVE and not errors:
        errors.update(_reserve_errors(organization, found_cluster, found_flavor, count, lead))
    if count is not None and count < 0 and lead:
        errors["lead_days"] = "Nodes taken away go at once: a lead time is for nodes bought."
    if not errors:
        present = Node.objects.filter(cluster=found_cluster, accelerator=found_flavor, present=True)
        assert count is not None
        serving = in_service(present).count()
        errors.update(change_errors(found_cluster.slug, found_flavor.name, count, serving, present.count()))
    if errors:
        raise ValidationError(errors)
    return {
        "cluster": found_cluster,
        "flavor": found_flavor,
        "nodes": count,
        "days": span,
        "kind": kind,
        "lead_days": lead,
    }


def _reserve_errors(
    organization: Organization, cluster: Cluster, flavor: AcceleratorType, count: int | None, lead: int | None
) -> dict[str, str]:
    errors = {}
    if count is not None and count < 0:
        errors["nodes"] = "Reserve a positive number of nodes."
    if lead:
        errors["lead_days"] = "Reserved capacity is there from the start: only bought nodes have a lead time."
    if reserved_rate(organization, cluster, flavor) is None:
        errors["kind"] = f"The price book has no reserved rate for {flavor.name} in {cluster.slug}: add one first."
    return errors


def _check_burst(
    organization: Organization, pool: Any, nodes: Any, days: Any, lead: int | None, errors: dict[str, str]
) -> dict[str, Any]:
    """A burst's values: its enabled pool, at most ``nodes`` of the pool's nodes (default its maximum)."""
    pools = ElasticPool.objects.filter(cluster__organization=organization, enabled=True).select_related(
        "cluster", "accelerator"
    )
    found = _find(pools, pool, "name")
    if pool in (None, ""):
        errors["pool"] = "Required: the elastic pool to burst into."
    elif found is None:
        names = ", ".join(sorted(pools.values_list("name", flat=True))) or "none"
        errors["pool"] = f"No enabled elastic pool {pool!s} in {organization}; its pools: {names}."
    count = None if nodes in (None, "") else _integer(nodes, "nodes", 1, MAX_NODES, errors)
    if found is not None and count is not None and count > found.max_nodes:
        errors["nodes"] = f"Pool {found.name} grows to {found.max_nodes} nodes at most."
    if lead:
        errors["lead_days"] = "A pool's nodes come when asked for (its own lead time): no lead time here."
    span = _integer(DEFAULT_DAYS if days is None else days, "days", MIN_DAYS, MAX_DAYS, errors)
    if found is not None and not errors and pool_rate(organization, found) is None:
        errors["pool"] = (
            f"The price book has no {found.capacity_type} rate for {found.accelerator.name} in "
            f"{found.cluster.slug}: add one first."
        )
    if errors:
        raise ValidationError(errors)
    assert found is not None
    return {
        "cluster": found.cluster,
        "flavor": found.accelerator,
        "nodes": count or found.max_nodes,
        "days": span,
        "kind": WhatIf.Kind.BURST,
        "lead_days": 0,
        "pool": found,
    }


def pool_rate(organization: Organization, pool: ElasticPool) -> Decimal | None:
    """The price book's rate of an accelerator-hour of ``pool``'s nodes (its capacity type) today, if any."""
    key = (pool.cluster_id, pool.accelerator_id, pool.capacity_type)
    return RateBook.of(organization).rate(key, timezone.now().date())


def simulated_pool(what_if: WhatIf) -> Pool:
    """A burst's pool as the simulator runs it, at the price book's rate, up to the what-if's ``nodes``. Spot
    nodes are taken back ``SPOT_RECLAIMS_PER_DAY`` times a node-day on average (an assumption the page states)."""
    pool = what_if.pool
    assert pool is not None
    rate = pool_rate(what_if.organization, pool)
    if rate is None:
        raise ValidationError({"pool": f"The price book no longer has a rate for pool {pool.name}'s nodes."})
    spot = pool.capacity_type == CapacityType.SPOT
    return Pool(
        name=pool.name,
        cluster=pool.cluster.slug,
        flavor=pool.accelerator.name,
        accelerators=pool.node_accelerators,
        cpu=pool.node_cpu,
        memory=pool.node_memory,
        price_per_accel_hour=float(rate),
        lead_time=float(pool.lead_time),
        max_nodes=min(what_if.nodes, pool.max_nodes),
        idle_release=float(pool.idle_release),
        monthly_budget=float(pool.monthly_budget) if pool.monthly_budget is not None else None,
        spot=spot,
        reclaims_per_day=SPOT_RECLAIMS_PER_DAY if spot else 0.0,
        # On a cluster with a topology, the pool's nodes are a domain of their own at each level.
        topology=tuple(f"{pool.name}" for _ in pool.cluster.levels or ()),
    )


def reserved_rate(organization: Organization, cluster: Cluster, flavor: AcceleratorType) -> Decimal | None:
    """The price book's reserved rate of an accelerator-hour of ``flavor`` in ``cluster`` today, if any."""
    book = RateBook.of(organization)
    return book.rate((cluster.pk, flavor.pk, CapacityType.RESERVED), timezone.now().date())


def default_organization(user: User, organization: Organization | None) -> Organization:
    """The organization a request is for: the one named, else the user's only finance or admin one."""
    if organization is not None:
        return organization
    mine = organizations_for(user)
    if not mine:
        raise PermissionDenied(REFUSED)
    if len(mine) > 1:
        raise ValidationError({"organization": "Name the organization (its slug)."})
    return mine[0]


def submit_what_if(
    actor: User,
    organization: Organization | None = None,
    *,
    cluster: Any = None,
    flavor: Any = None,
    nodes: Any = None,
    days: Any = DEFAULT_DAYS,
    kind: Any = WhatIf.Kind.NODES,
    lead_days: Any = 0,
    pool: Any = None,
    grow_quotas: Any = False,
    http: HttpRequest | None = None,
) -> WhatIf:
    """Ask for a what-if (finance and admins of the organization: 403 otherwise, before the values are
    judged); ``ValidationError`` names every bad field and nothing is written. The run is queued at the commit."""
    organization = default_organization(actor, organization)
    policy.require(actor, "whatif.run", organization)
    values = check(organization, cluster, flavor, nodes, days, kind, lead_days, pool, grow_quotas)
    with transaction.atomic():
        what_if = WhatIf.objects.create(
            organization=organization, requested_by=actor, created_at=timezone.now(), **values
        )
        audit.record(
            "what_if.requested",
            actor=actor,
            target=what_if,
            organization=organization,
            changes={
                "cluster": values["cluster"].slug,
                "flavor": values["flavor"].name,
                "nodes": values["nodes"],
                "days": values["days"],
                "kind": values["kind"],
                "lead_days": values["lead_days"],
                **({"pool": values["pool"].name} if values.get("pool") else {}),
                **({"grow_quotas": True} if values["grow_quotas"] else {}),
            },
            request=http,
        )
        transaction.on_commit(lambda: enqueue.send("billing.tasks.run_what_if", what_if.pk))
    return what_if


# ------------------------------------------------------------------------------------------- running one


class Progress:
    """Writes a run's progress (and renews its claim) at most every ``PROGRESS_SECONDS``: one UPDATE of the
    row while this run still holds it; ``ClaimLost`` once another has taken it over."""

    def __init__(self, held: QuerySet[WhatIf]) -> None:
        self.held = held
        self.last = -math.inf

    def __call__(self, fraction: float, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last < PROGRESS_SECONDS:
            return
        self.last = now
        renewed = timezone.now() + timedelta(seconds=CLAIM_SECONDS)
        if not self.held.update(progress=round(min(1.0, max(0.0, fraction)), 4), claimed_until=renewed):
            raise ClaimLost


def claim(what_if_id: int, now: datetime | None = None) -> datetime | None:
    """Take a queued what-if, or a running one whose claim ran out (its worker died): compare-and-set, so one
    worker wins. Returns the claim's token (the run's ``started_at``), or None when it is not to be run."""
    now = now or timezone.now()
    takeable = Q(status=WhatIf.Status.QUEUED) | Q(status=WhatIf.Status.RUNNING, claimed_until__lt=now)
    taken = (
        WhatIf.objects.filter(pk=what_if_id)
        .filter(takeable)
        .update(
            status=WhatIf.Status.RUNNING,
            started_at=now,
            claimed_until=now + timedelta(seconds=CLAIM_SECONDS),
            progress=0.0,
            error="",
        )
    )
    return now if taken else None


def run(what_if_id: int) -> str:
    """Run a what-if if no other worker is running it: ``done``, ``failed`` (the error is stored), ``skipped``
    (not queued, or held by a live claim) or ``lost`` (taken over while it ran; the other run writes)."""
    token = claim(what_if_id)
    if token is None:
        return "skipped"
    held = WhatIf.objects.filter(pk=what_if_id, status=WhatIf.Status.RUNNING, started_at=token)
    what_if = WhatIf.objects.select_related(
        "organization", "cluster", "flavor", "pool__cluster", "pool__accelerator"
    ).get(pk=what_if_id)
    progress = Progress(held)
    try:
        rate, pool = None, None
        if what_if.kind == WhatIf.Kind.BURST:
            pool = simulated_pool(what_if)
        if what_if.kind == WhatIf.Kind.RESERVE:
            rate = reserved_rate(what_if.organization, what_if.cluster, what_if.flavor)
            if rate is None:
                raise ValidationError({"kind": "The price book no longer has a reserved rate for this type here."})
        result = what_if_result(
            what_if.organization,
            what_if.cluster.slug,
            what_if.flavor.name,
            what_if.nodes,
            what_if.days,
            progress=progress,
            lead_days=what_if.lead_days,
            rate=rate,
            pool=pool,
            seed=what_if.seed,
            grow_quotas=what_if.grow_quotas,
        )
    except ClaimLost:
        return "lost"
    except ValidationError as error:  # the fleet changed since it was asked for
        message = " ".join(f"{field}: {' '.join(texts)}" for field, texts in error.message_dict.items())
        return _end(held, WhatIf.Status.FAILED, error=message)
    except Exception as error:  # any failure is stored, never left running
        log.exception("what-if %s failed", what_if_id)
        return _end(held, WhatIf.Status.FAILED, error=f"The replay failed: {type(error).__name__}: {error}")
    return _end(held, WhatIf.Status.DONE, result=result, progress=1.0)


def _end(held: QuerySet[WhatIf], status: str, **values: Any) -> str:
    ended = held.update(status=status, finished_at=timezone.now(), claimed_until=None, **values)
    return str(status) if ended else "lost"


def requeue_stale(now: datetime | None = None) -> list[int]:
    """For the beat (every minute or so): hand lost work to a worker again. A running what-if whose claim ran
    out (its worker died) is queued again; a queued one asked for a minute or more ago whose task may have been
    lost (the broker was down, or a worker took it and died before claiming it) has its task sent again, then
    not again for ``RESEND_AFTER`` (a queued row's ``claimed_until`` says when it may be sent again), so a long
    wait for a free worker does not pile up copies. What-ifs asked for more than ``GIVE_UP_AFTER`` ago and still
    not done are failed (a run that kills its worker every time). Returns the ids whose task was sent."""
    now = now or timezone.now()
    dead = Q(status=WhatIf.Status.RUNNING, claimed_until__lt=now)
    unfinished = WhatIf.objects.filter(dead | Q(status=WhatIf.Status.QUEUED))
    unfinished.filter(created_at__lt=now - GIVE_UP_AFTER).update(
        status=WhatIf.Status.FAILED,
        finished_at=now,
        claimed_until=None,
        error="Given up: no worker finished it within a day of the request.",
    )
    revived = list(WhatIf.objects.filter(dead).values_list("pk", flat=True))
    WhatIf.objects.filter(dead, pk__in=revived).update(status=WhatIf.Status.QUEUED, claimed_until=None)
    lost = Q(created_at__lt=now - timedelta(minutes=1)) & (Q(claimed_until=None) | Q(claimed_until__lt=now))
    due = WhatIf.objects.filter(lost | Q(pk__in=revived), status=WhatIf.Status.QUEUED)
    ids = list(due.order_by("pk").values_list("pk", flat=True))
    WhatIf.objects.filter(pk__in=ids, status=WhatIf.Status.QUEUED).update(claimed_until=now + RESEND_AFTER)
    for what_if_id in ids:
        enqueue.send("billing.tasks.run_what_if", what_if_id)
    return ids
