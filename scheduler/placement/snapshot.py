"""The engine's snapshot of one organization, built from the database in a few flat queries.

Names: a cluster is its slug; a node is ``"<cluster slug>/<node name>"`` (node names repeat across
clusters); a flavor is the accelerator type's name (``"cpu"`` for nodes without accelerators); a queue,
cohort or tier is its name; a job is its primary key as a string. ``Index`` maps them back to rows.

A node's free capacity is its allocatable capacity less what is in use. What is in use is the larger of
what the cluster reports and what our own placements hold there: a job just placed is not in the
cluster's report yet, and the report also counts work we do not know about.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, cast

from django.db.models import Count, F, OuterRef, Q, Subquery, Window
from django.db.models.functions import RowNumber
from django.utils import timezone

from clusters import capabilities
from clusters.backends.base import LENT_TO
from clusters.backends.tpu.accelerators import shape_of
from clusters.capacity import CapacityType, capacity_type
from clusters.models import Cluster, Node
from governance import capacity
from governance.fairshare import decay
from governance.models import Cohort, FairShare, MemberLimit, PriorityTier, Queue, QueueUsage, Quota
from scheduler.engine import model as m
from scheduler.engine.explain import array_limit_words
from scheduler.models import Assignment, Attempt, Checkpoint, Job, JobArray, JobEvent, LoopState
from scheduler.placement import budgets, elastic, windows
from scheduler.placement.jobs import PENDING_COLUMNS, engine_job, owner, ts
from scheduler.placement.prices import Prices
from scheduler.placement.prices import prices as price_book
from scheduler.states import PLACED, WAITING
from tenancy.models import Organization

CPU_FLAVOR = "cpu"  # the flavor of nodes without accelerators
#: How long a cluster that dispatch gave up reaching (attempt reason ``undeliverable``), or that did not start
#: all of the job's workers in time (``start_timeout``), is kept from the job.
EXCLUDE_UNDELIVERABLE = timedelta(minutes=30)
#: The attempt reasons that keep a cluster from the job for ``EXCLUDE_UNDELIVERABLE``.
FOR_A_WHILE = ("undeliverable", "start_timeout", "no_capacity")
UNREACHED = "could not be reached for it"
NOT_STARTED = "did not start it in time"
NO_CAPACITY = "had no capacity for it"


@dataclass(slots=True)
class Index:
    """From the snapshot's names back to rows, and what the loop read (for compare-and-set)."""

    generation: int
    clusters: dict[str, int] = field(default_factory=dict)  # slug -> pk
    nodes: dict[str, int] = field(default_factory=dict)  # "slug/name" -> pk
    #: Waiting jobs: pk -> (state, attempt, (pending_reason, message, position, estimated_start)).
    waiting: dict[int, tuple[str, int, tuple[Any, ...]]] = field(default_factory=dict)
    #: Placed jobs: pk -> (state, attempt).
    placed: dict[int, tuple[str, int]] = field(default_factory=dict)
    grace: dict[str, int] = field(default_factory=dict)  # tier name -> grace seconds
    #: Tiers with a cap on disruption: name -> accelerator-hours of their jobs' work preemptions may lose an hour.
    disruption_caps: dict[str, Decimal] = field(default_factory=dict)
    #: The longest grace of the tiers: reservations count this long before they start (``governance.capacity``).
    lead: int = 0
    #: Elastic pools: engine name -> pk (``elastic.pools``).
    elastic: dict[str, int] = field(default_factory=dict)
    #: Waiting jobs kept from the engine (dependencies, arrays' limits), with their reasons, for ``write_pending``.
    gated: list[m.Pending] = field(default_factory=list)
    #: Arrays at their limit: pk -> (limit, the waiting tasks read); the tasks not read are told by
    #: ``gates.write_array_limits``.
    full_arrays: dict[int, tuple[int, list[int]]] = field(default_factory=dict)


def _quotas(rows: list[dict[str, Any]]) -> m.Quotas:
    def units(value: Decimal | None, resource: str) -> int | None:
        return None if value is None else int(value * Quota.ENGINE_UNITS[resource])

    return {
        (row["flavor__name"], row["resource"]): m.Quota(
            units(row["nominal"], row["resource"]) or 0,
            units(row["borrowing_limit"], row["resource"]),
            units(row["lending_limit"], row["resource"]),
        )
        for row in rows
    }


def _free(accelerators: int, ours: dict[int, int], foreign: int) -> tuple[int, ...]:
    """Free milli per accelerator: ours by index, then ``foreign`` whole ones taken from the top."""
    free = [1000] * accelerators
    for index, milli in ours.items():
        if 0 <= index < accelerators:
            free[index] = max(0, free[index] - milli)
    for index in reversed(range(accelerators)):
        if foreign <= 0:
            break
        if free[index] == 1000:
            free[index] = 0
            foreign -= 1
    return tuple(free)


def loop_generation(organization: Organization) -> int:
    """How many cycles the organization's loop has applied (0 before its first, when it has no row yet)."""
    generation = LoopState.objects.filter(organization=organization).values_list("generation", flat=True).first()
    return generation or 0


def build(
    organization: Organization,
    now: datetime | None = None,
    config: m.Config | None = None,
    blocked: Mapping[int, str] | None = None,
) -> tuple[m.Snapshot, Index]:
    """The snapshot of ``organization`` at ``now`` and the index to apply its decisions with; the waiting
    jobs in ``blocked`` (unmet dependencies: ``gates.settle``) are left out, with their messages."""
    now = now or timezone.now()
    index = Index(generation=loop_generation(organization))
    placed = _placed_assignments(organization)
    prices = price_book(organization.pk, timezone.now().astimezone(UTC).date())  # the nodes' and the pools'
    clusters, nodes, every_flavor = fleet(organization, index, placed, prices)
    approved = capacity.approved(organization, now, timedelta(seconds=(config or m.Config()).backfill_window))
    tiers, cohorts, queues = governance(organization, every_flavor, index, now, approved)
    running = _running(organization, tiers, index, placed)
    hard_budgets = budgets.snapshot_budgets(organization.pk, now)
    pending = _pending(organization, now, index, hard_budgets, blocked or {})
    memory = FairShare.objects.filter(organization=organization).first() or FairShare()
    config = replace(config or m.Config(), usage_weight=memory.usage_weight)
    limits = MemberLimit.objects.filter(team__organization=organization).values_list("team", "user", "accelerators")
    member_limits = {owner(team, user): int(amount * 1000) for team, user, amount in limits}
    pools, horizons = elastic.pools(organization, now, prices, index.elastic, pending)
    if horizons:  # how long new work may run on elastic nodes whose budget pays for only so much
        nodes = tuple(replace(n, horizon=horizons[n.name]) if n.name in horizons else n for n in nodes)
    snapshot = m.Snapshot(
        now=now.timestamp(),
        clusters=clusters,
        nodes=nodes,
        tiers=tiers,
        cohorts=cohorts,
        queues=queues,
        running=running,
        pending=pending,
        config=config,
        member_limits=member_limits,
        budgets=hard_budgets,
        maintenance=windows.maintenance(organization, now, config.backfill_window),
        bookings=windows.bookings(approved),
        elastic=pools,
        usage=recent_use(organization, now, memory.kept_with or memory.half_life),
        disruption_left=disruption_left(organization, now, index.disruption_caps),
    )
    return snapshot, index


#: What the cap on disruption looks back over (docs/scheduling.md §Disruption).
DISRUPTION_WINDOW = timedelta(hours=1)


def disruption_left(organization: Organization, now: datetime, caps: Mapping[str, Decimal]) -> dict[str, float]:
    """Per capped tier, accelerator-seconds of its jobs' work that preemptions for other jobs may still lose: its
    cap less what such preemptions of its jobs lost in the last hour (their timeline entries say it)."""
    if not caps:
        return {}
    left = {name: float(cap) * 3600 for name, cap in caps.items()}
    preempted = (
        JobEvent.objects.filter(
            job__team__organization=organization,
            created_at__gt=now - DISRUPTION_WINDOW,
            reason__startswith="preempted_",
            job__tier__name__in=list(caps),
        )
        .exclude(reason=f"preempted_{m.PreemptionReason.OVER_QUOTA}")
        .values_list("job__tier__name", "detail")
    )
    for name, detail in preempted:
        left[name] -= float((detail or {}).get("lost_accelerator_seconds", 0))
    return {name: max(0.0, amount) for name, amount in left.items()}


def recent_use(organization: Organization, now: datetime, half_life: float) -> dict[str, float]:
    """Each queue's recent use as the meter kept it, decayed to ``now`` (with the half-life it was kept with)."""
    rows = QueueUsage.objects.filter(queue__team__organization=organization).values_list(
        "queue__name", "accelerator_hours", "as_of"
    )
    return {name: decay(hours, as_of, now, half_life) for name, hours, as_of in rows if hours > 0}


def _placed_assignments(organization: Organization) -> list[dict[str, Any]]:
    """What our placed jobs hold, node by node: read once, for the nodes' free capacity and the running work."""
    live = Q(attempt__job__state__in=PLACED, attempt__outcome=Attempt.Outcome.ACTIVE)
    rows = Assignment.objects.filter(live, attempt__cluster__organization=organization).values(
        "attempt_id", "node_id", "node__name", "attempt__cluster__slug", "workers", "accelerators", "cpu", "memory"
    )
    return cast(list[dict[str, Any]], list(rows))


def fleet(
    organization: Organization,
    index: Index,
    placed: list[dict[str, Any]] | None = None,
    prices: Prices | None = None,
) -> tuple[tuple[m.Cluster, ...], tuple[m.Node, ...], tuple[str, ...]]:
    """The clusters and nodes of ``organization`` with what is free on each after ``placed`` (everything, when
    None: the idle fleet), and every flavor in the default fallback order: the cheapest first, CPU-only last."""
    idle = placed is None
    clusters = list(
        Cluster.objects.filter(organization=organization)
        .exclude(status=Cluster.Status.DISABLED)
        .values("pk", "slug", "kind", "region", "levels", "preference", "status", "options")
    )
    by_pk = {c["pk"]: c for c in clusters}
    index.clusters = {c["slug"]: c["pk"] for c in clusters}

    # Our placements, per node: (accelerator index -> milli), cpu, memory.
    held_accel: dict[int, dict[int, int]] = defaultdict(dict)
    held: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for a in placed or ():
        for i, milli in a["accelerators"]:
            held_accel[a["node_id"]][i] = held_accel[a["node_id"]].get(i, 0) + milli
        held[a["node_id"]][0] += a["cpu"]
        held[a["node_id"]][1] += a["memory"]

    flavors_seen: dict[str, float] = {}
    prices = prices or price_book(organization.pk, timezone.now().astimezone(UTC).date())
    nodes = []
    for n in (
        Node.objects.filter(cluster_id__in=by_pk, present=True)
        .values(
            "pk",
            "name",
            "cluster_id",
            "accelerator_id",
            "accelerator__name",
            "labels",
            "accelerators_allocatable",
            "cpu_allocatable",
            "memory_allocatable",
            "accelerators_used",
            "cpu_used",
            "memory_used",
            "topology",
            "state",
            "ready",
            "healthy",
        )
        .order_by("cluster_id", "name")
    ):
        cluster = by_pk[n["cluster_id"]]
        flavor = n["accelerator__name"] or CPU_FLAVOR
        price = prices.of(n["cluster_id"], n["accelerator_id"], n["labels"] or {}, cluster["kind"], cluster["options"])
        flavors_seen.setdefault(flavor, price)
        name = f"{cluster['slug']}/{n['name']}"
        index.nodes[name] = n["pk"]
        count, cpu, memory = n["accelerators_allocatable"], n["cpu_allocatable"], n["memory_allocatable"]
        if idle:
            accel_free, cpu_free, memory_free = (1000,) * count, cpu, memory
        else:
            mine = held_accel.get(n["pk"], {})
            our_cpu, our_memory = held.get(n["pk"], (0, 0))
            foreign = max(0, n["accelerators_used"] - sum(1 for milli in mine.values() if milli > 0))
            accel_free = _free(count, mine, foreign)
            cpu_free = max(0, cpu - max(n["cpu_used"], our_cpu))
            memory_free = max(0, memory - max(n["memory_used"], our_memory))
        nodes.append(
            m.Node(
                name=name,
                cluster=cluster["slug"],
                flavor=flavor,
                accel_free=accel_free,
                cpu_free=cpu_free,
                memory_free=memory_free,
                cpu_capacity=cpu,
                memory_capacity=memory,
                topology=tuple(str(n["topology"].get(level, "")) for level in cluster["levels"]),
                healthy=idle or (n["healthy"] and n["ready"]),
                schedulable=idle
                or (n["state"] == Node.State.SCHEDULABLE and cluster["status"] != Cluster.Status.UNREACHABLE),
                price_per_accel_hour=price,
                shape=slice_shape(n["labels"] or {}),
                team=str((n["labels"] or {}).get(LENT_TO) or ""),
                spot=capacity_type(n["labels"] or {}, cluster["kind"], cluster["options"] or {}) == CapacityType.SPOT,
            )
        )
    every_flavor = tuple(sorted(flavors_seen, key=lambda f: (f == CPU_FLAVOR, flavors_seen[f], f)))
    engine_clusters = tuple(
        m.Cluster(
            c["slug"],
            c["region"],
            tuple(c["levels"]),
            c["preference"],
            capabilities.of(c["kind"], c["options"]).runs,
            capabilities.gang_level(c["kind"], c["levels"]),
        )
        for c in clusters
    )
    return engine_clusters, tuple(nodes), every_flavor


def slice_shape(labels: dict[str, Any]) -> str:
    """A TPU slice's shape from the labels the TPU backend reports (``v5p-32/2x2x4``); "" for other nodes."""
    accelerator_type = str(labels.get("tpu/accelerator-type") or "")
    return shape_of(accelerator_type, str(labels.get("tpu/topology") or "")) if accelerator_type else ""


def governance(
    organization: Organization,
    every_flavor: tuple[str, ...],
    index: Index,
    now: datetime | None = None,
    approved: Sequence[capacity.Approved] = (),
) -> tuple[tuple[m.Tier, ...], tuple[m.Cohort, ...], tuple[m.Queue, ...]]:
    """Priority tiers, the cohort tree and the queues with their quotas; at ``now``, with what the ``approved``
    capacity requests add to them (``governance.capacity``)."""
    tiers = []
    for t in PriorityTier.objects.filter(organization=organization).values(
        "name", "value", "preemptible", "grace_seconds", "max_wait", "min_runtime", "max_disruption"
    ):
        tiers.append(
            m.Tier(
                t["name"],
                t["value"],
                t["preemptible"],
                t["grace_seconds"],
                float(t["max_wait"] or 0),
                float(t["min_runtime"] or 0),
            )
        )
        index.grace[t["name"]] = t["grace_seconds"]
        if t["max_disruption"] is not None:
            index.disruption_caps[t["name"]] = t["max_disruption"]

    index.lead = max(index.grace.values(), default=0)
    quota_fields = ("flavor__name", "resource", "nominal", "borrowing_limit", "lending_limit")
    cohort_quotas: dict[int, list[dict[str, Any]]] = defaultdict(list)
    queue_quotas: dict[int, list[dict[str, Any]]] = defaultdict(list)
    governed: set[str] = set()  # flavors whose accelerators some quota rations
    for q in Quota.objects.filter(flavor__organization=organization).values("queue_id", "cohort_id", *quota_fields):
        (queue_quotas[q["queue_id"]] if q["queue_id"] else cohort_quotas[q["cohort_id"]]).append(q)
        if q["resource"] == Quota.Resource.ACCELERATORS:
            governed.add(q["flavor__name"])
    cohort_rows = list(Cohort.objects.filter(organization=organization).values("pk", "name", "parent__name"))
    cohorts = [m.Cohort(c["name"], c["parent__name"], _quotas(cohort_quotas[c["pk"]])) for c in cohort_rows]
    rows = list(
        Queue.objects.filter(team__organization=organization).values(
            "pk", "name", "team_id", "project_id", "cohort__name", "flavor_order", "within_queue", "reclaim", "weight"
        )
    )
    extra: dict[tuple[int, str], Decimal] = {}
    if approved and now is not None:
        team_queue = {q["team_id"]: q["pk"] for q in rows if q["project_id"] is None}
        added = capacity.extra_quota(approved, now, timedelta(seconds=index.lead), team_queue)
        # only where quota rations the flavor: elsewhere every queue may use all of it anyway
        extra = {key: amount for key, amount in added.items() if key[1] in governed}
    # A team whose projects have queues of their own is a cohort holding the team's quota (``quotas.py``).
    split = {q["team_id"] for q in rows if q["project_id"] is not None}
    team_cohort: dict[int, str] = {}
    for q in rows:
        if q["project_id"] is None and q["team_id"] in split:
            # Its queues below bring the team's quota; the cohort keeps the team's borrowing and lending limits.
            name = team_cohort[q["team_id"]] = f"team {q['name']}"
            limits = [{**r, "nominal": Decimal(0)} for r in queue_quotas[q["pk"]]]
            cohorts.append(m.Cohort(name, q["cohort__name"], _quotas(limits)))
    given: dict[tuple[int, str, str], Decimal] = defaultdict(Decimal)  # what a team gave its projects
    for q in rows:
        if q["project_id"] is not None and q["team_id"] in team_cohort:
            for quota in queue_quotas[q["pk"]]:
                given[(q["team_id"], quota["flavor__name"], quota["resource"])] += quota["nominal"]
    queues = []
    for q in rows:
        quota_rows = queue_quotas[q["pk"]]
        cohort = q["cohort__name"]
        if q["team_id"] in team_cohort:
            cohort = team_cohort[q["team_id"]]
            if q["project_id"] is None:  # the team's own queue keeps what its projects were not given
                quota_rows = [
                    {
                        **r,
                        "nominal": max(
                            Decimal(0), r["nominal"] - given[(q["team_id"], r["flavor__name"], r["resource"])]
                        ),
                        "borrowing_limit": None,
                        "lending_limit": None,
                    }
                    for r in quota_rows
                ]
        if extra:
            quota_rows = windows.with_extra(quota_rows, extra, q["pk"])
        queues.append(
            m.Queue(
                q["name"],
                cohort,
                _quotas(quota_rows),
                tuple(q["flavor_order"]) or every_flavor,
                m.WithinQueue(q["within_queue"]),
                m.Reclaim(q["reclaim"]),
                q["weight"],
            )
        )
    return tuple(tiers), tuple(cohorts), tuple(queues)


def _running(
    organization: Organization, tiers: tuple[m.Tier, ...], index: Index, placed: list[dict[str, Any]]
) -> tuple[m.Workload, ...]:
    preemptible_tier = {t.name: t.preemptible for t in tiers}
    assignments: dict[int, list[m.Assignment]] = defaultdict(list)
    for x in placed:
        assignments[x["attempt_id"]].append(
            m.Assignment(
                f"{x['attempt__cluster__slug']}/{x['node__name']}",
                x["workers"],
                tuple((int(i), int(milli)) for i, milli in x["accelerators"]),
                x["cpu"],
                x["memory"],
            )
        )
    running = []
    # The last checkpoint of each attempt, in the same query: what a preemption would lose runs from there.
    checkpoints = Checkpoint.objects.filter(job=OuterRef("job_id"), attempt=OuterRef("number"))
    last_checkpoint = Subquery(checkpoints.order_by("-reported_at").values("reported_at")[:1])
    for a in (
        Attempt.objects.filter(job__team__organization=organization, job__state__in=PLACED, outcome="active")
        .annotate(last_checkpoint_at=last_checkpoint)
        .values(
            "pk",
            "job_id",
            "number",
            "job__attempt",
            "job__state",
            "job__queue__name",
            "job__tier__name",
            "cluster__slug",
            "flavor",
            "admitted_at",
            "job__time_limit",
            "job__submitted_at",
            "job__preemptible",
            "job__team_id",
            "job__team__slug",
            "job__submitted_by_id",
            "job__spread_group",
            "last_checkpoint_at",
        )
        .order_by("job_id")
    ):
        if a["number"] != a["job__attempt"]:
            continue  # an earlier attempt that was not closed: it holds nothing the engine should count
        index.placed[a["job_id"]] = (a["job__state"], a["number"])
        running.append(
            m.Workload(
                id=str(a["job_id"]),
                queue=a["job__queue__name"],
                tier=a["job__tier__name"],
                cluster=a["cluster__slug"],
                flavor=a["flavor"],
                assignments=tuple(assignments.get(a["pk"], ())),
                admitted_at=ts(a["admitted_at"]),
                time_limit=a["job__time_limit"],
                submitted_at=ts(a["job__submitted_at"]),
                preemptible=a["job__preemptible"] and preemptible_tier.get(a["job__tier__name"], True),
                evicting=a["job__state"] == Job.State.PREEMPTING,
                owner=owner(a["job__team_id"], a["job__submitted_by_id"]),
                spread_group=a["job__spread_group"],
                last_checkpoint_at=ts(a["last_checkpoint_at"]) if a["last_checkpoint_at"] else None,
                team=a["job__team__slug"],
            )
        )
    return tuple(running)


def _exclusions(organization: Organization, now: datetime) -> dict[int, tuple[tuple[str, str], ...]]:
    """Per waiting job, the clusters it must not go to, with why: every cluster that refused it, for good;
    every cluster that dispatch could not reach for it, or that did not start all its workers in time, for
    ``EXCLUDE_UNDELIVERABLE`` after that attempt ended. One query for all waiting jobs."""
    found: dict[int, dict[str, str]] = defaultdict(dict)
    refused = Attempt.Outcome.REFUSED
    for job_id, slug, outcome, reason, message in (
        Attempt.objects.filter(job__team__organization=organization, job__state__in=WAITING)
        .filter(Q(outcome=refused) | Q(reason__in=FOR_A_WHILE, ended_at__gt=now - EXCLUDE_UNDELIVERABLE))
        .order_by("job_id", "number")
        .values_list("job_id", "cluster__slug", "outcome", "reason", "message")
    ):
        if outcome == refused:
            found[job_id][slug] = f"{m.REFUSED}: {message}" if message else m.REFUSED
        elif not found[job_id].get(slug, "").startswith(m.REFUSED):
            words = {"undeliverable": UNREACHED, "no_capacity": NO_CAPACITY}.get(reason, NOT_STARTED)
            found[job_id][slug] = f"{words}: {message}" if message else words
    return {job_id: tuple(sorted(why.items())) for job_id, why in found.items()}


def _checkpoint_clusters(organization: Organization) -> dict[int, str]:
    """Per waiting job that has reported a checkpoint, the cluster of the latest attempt that wrote one."""
    cluster = Attempt.objects.filter(job=OuterRef("job"), number=OuterRef("attempt")).values("cluster__slug")[:1]
    found: dict[int, str] = {}
    for job_id, slug in (
        Checkpoint.objects.filter(job__team__organization=organization, job__state__in=WAITING)
        .annotate(slug=Subquery(cluster))
        .order_by("job_id", "-attempt", "-reported_at")
        .values_list("job_id", "slug")
    ):
        if slug and job_id not in found:
            found[job_id] = slug
    return found


def _array_slots(organization: Organization) -> tuple[dict[int, int], dict[int, int]]:
    """The arrays with a limit and waiting tasks: their limits, and how many more tasks each may place now."""
    limits = dict(
        JobArray.objects.filter(team__organization=organization, max_running__isnull=False, tasks__state__in=WAITING)
        .distinct()
        .values_list("pk", "max_running")
    )
    if not limits:
        return {}, {}
    placed = dict(
        Job.objects.filter(array_id__in=limits, state__in=PLACED)
        .values_list("array_id")
        .annotate(n=Count("pk"))
        .values_list("array_id", "n")
    )
    return limits, {pk: max(0, limit - placed.get(pk, 0)) for pk, limit in limits.items()}


def _gate(pk: int, reason: m.PendingReason, message: str, index: Index) -> None:
    index.gated.append(m.Pending(str(pk), reason, message))


def _pending(
    organization: Organization,
    now: datetime,
    index: Index,
    hard_budgets: dict[str, m.Budget],
    blocked: Mapping[int, str],
) -> tuple[m.Job, ...]:
    allowed_clusters: dict[int, list[str]] = defaultdict(list)
    for job_id, slug in Job.clusters.through.objects.filter(
        job__team__organization=organization, job__state__in=WAITING
    ).values_list("job_id", "cluster__slug"):
        allowed_clusters[job_id].append(slug)
    excluded = _exclusions(organization, now)
    checkpointed = _checkpoint_clusters(organization)
    limits, slots = _array_slots(organization)
    jobs = Job.objects.filter(team__organization=organization, state__in=WAITING).filter(
        Q(not_before=None) | Q(not_before__lte=now)
    )
    if limits:
        # An array at its limit costs the cycle no more than its limit: its other waiting tasks are not read.
        rank = Window(RowNumber(), partition_by=[F("array_id")], order_by=[F("submitted_at").asc(), F("pk").asc()])
        jobs = jobs.annotate(array_rank=rank).filter(
            Q(array__max_running=None) | Q(array_rank__lte=F("array__max_running"))
        )
    read: dict[int, list[int]] = defaultdict(list)
    pending = []
    for j in jobs.values(*PENDING_COLUMNS).order_by("submitted_at", "pk"):
        index.waiting[j["pk"]] = (
            j["state"],
            j["attempt"],
            (j["pending_reason"], j["pending_message"], j["queue_position"], j["estimated_start"]),
        )
        if j["pk"] in blocked:
            _gate(j["pk"], m.PendingReason.DEPENDENCY, blocked[j["pk"]], index)
            continue
        if (array := j["array_id"]) in limits:
            read[array].append(j["pk"])
            if len(read[array]) > slots[array]:
                _gate(j["pk"], m.PendingReason.ARRAY_LIMIT, array_limit_words(f"#{array}", limits[array]), index)
                continue
        j["clusters"] = allowed_clusters.get(j["pk"], ())
        j["excluded"] = excluded.get(j["pk"], ())
        j["locality"] = j["data_locality"] or checkpointed.get(j["pk"], "")
        if hard_budgets:
            j["budgets"] = budgets.charged_to(hard_budgets, j["team_id"], j["project_id"])
        pending.append(engine_job(j))
    index.full_arrays = {pk: (limits[pk], read[pk]) for pk in limits if len(read[pk]) >= slots[pk]}
    return tuple(pending)
