"""How long one monthly attribution report takes over many usage records, on PostgreSQL:

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/qm_bench .venv/bin/python manage.py bench_billing --records 10000000

Creates a throwaway organization (``--teams`` teams with ten users each, ``--nodes`` nodes in four clusters of
different flavors and capacity types, priced, one price changing mid-month), then ``--records`` usage records in
one month: attempts of four nodes over two days each, written by the database itself (``generate_series``)
with jobs and attempts to match, and a capacity record per node and day. Then it times, on a warm cache:

- ``report_seconds``: ``attribution.attribute`` for the month (read, price, allocate idle and overhead to the cent);
- ``fleet_rows_seconds``: the fleet summary's rows from it; ``top_jobs_seconds``: the ten costliest jobs;
- ``fleet_xlsx_seconds``: the fleet summary written as XLSX.

Prints one JSON object. The organization and its rows are removed afterwards unless ``--keep``.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection, transaction
from django.utils import timezone

from billing import attribution, reports
from billing.models import CapacityRecord, Overhead, Price, UsageRecord
from clusters.capacity import CapacityType
from clusters.models import AcceleratorType, Cluster, Node
from governance.models import PriorityTier, Queue
from tenancy.models import Membership, Organization, Project, Team
from tenancy.scoping import Role

MONTH = date(2026, 10, 1)
DAYS = 31
#: (cluster slug, flavor, capacity type, rate): four pools of different kinds.
POOLS = (
    ("onprem-h100", "H100", CapacityType.ON_PREM, Decimal("2.10")),
    ("cloud-h100", "H100", CapacityType.SPOT, Decimal("3.40")),
    ("slurm-a100", "A100", CapacityType.ON_PREM, Decimal("1.20")),
    ("tpu-v5p", "v5p", CapacityType.ON_DEMAND, Decimal("4.20")),
)
RECORDS_PER_ATTEMPT = 8  # four nodes, two days


class Command(BaseCommand):
    help = "Time one monthly attribution report over --records usage records (PostgreSQL)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--records", type=int, default=1_000_000)
        parser.add_argument("--teams", type=int, default=20)
        parser.add_argument("--nodes", type=int, default=1000)
        parser.add_argument("--repeat", type=int, default=3)
        parser.add_argument("--keep", action="store_true", help="Keep the organization and its rows.")

    def handle(self, *args: Any, **options: Any) -> None:
        if connection.vendor != "postgresql":
            raise CommandError("bench_billing needs PostgreSQL: set DATABASE_URL.")
        records, teams, nodes = options["records"], options["teams"], options["nodes"]
        if records < RECORDS_PER_ATTEMPT or nodes < 8 or teams < 1:
            raise CommandError("--records must be at least 8, --nodes at least 8, --teams at least 1.")
        started = time.perf_counter()
        org = _world(teams, nodes)
        try:
            _fill(org, records, teams)
            generated = time.perf_counter() - started
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE billing_usagerecord")
                cursor.execute("SELECT pg_total_relation_size('billing_usagerecord')")
                table_bytes = cursor.fetchone()[0]
            figures = _time(org, options["repeat"])
            figures.update(
                records=UsageRecord.objects.filter(organization=org).count(),
                generate_seconds=round(generated, 1),
                usage_table_mib=round(table_bytes / 2**20),
            )
            self.stdout.write(json.dumps(figures, indent=2))
        finally:
            if not options["keep"]:
                _remove(org)


def _world(teams: int, nodes: int) -> Organization:
    stamp = timezone.now().strftime("%Y%m%d%H%M%S")
    org = Organization.objects.create(name=f"Billing bench {stamp}", slug=f"bench-billing-{stamp}")
    now = timezone.now()
    PriorityTier.objects.create(organization=org, name="normal", value=50, is_default=True)
    team_rows = Team.objects.bulk_create(
        [Team(organization=org, name=f"Team {i}", slug=f"team-{i}") for i in range(teams)]
    )
    Project.objects.bulk_create([Project(team=t, name=f"P{j}", slug=f"p{j}") for t in team_rows for j in range(3)])
    Queue.objects.bulk_create([Queue(team=t, name=f"{org.slug}-{t.slug}") for t in team_rows])
    users = User.objects.bulk_create([User(username=f"{org.slug}-u{i}") for i in range(teams * 10)])
    Membership.objects.bulk_create(
        [
            Membership(user=u, organization=org, team=team_rows[i // 10], role=Role.RESEARCHER)
            for i, u in enumerate(users)
        ]
    )
    flavors = {name: AcceleratorType.objects.create(organization=org, name=name) for name in {p[1] for p in POOLS}}
    for slug, flavor, kind, rate in POOLS:
        cluster = Cluster.objects.create(
            organization=org,
            name=slug,
            slug=slug,
            kind="simulated",
            region="eu",
            options={"capacity_type": kind},
        )
        Node.objects.bulk_create(
            [
                Node(
                    cluster=cluster,
                    name=f"n{i:05d}",
                    accelerator=flavors[flavor],
                    accelerators=8,
                    accelerators_allocatable=8,
                )
                for i in range(nodes // len(POOLS))
            ]
        )
        Price.objects.create(
            organization=org,
            cluster=cluster,
            flavor=flavors[flavor],
            capacity_type=kind,
            effective_from=date(2026, 1, 1),
            hourly_rate=rate,
            rate=rate,
            updated_at=now,
        )
    # One price changes mid-month, so the report prices days apart.
    first = Price.objects.filter(organization=org).order_by("pk").first()
    assert first is not None
    first.pk, first.effective_from, first.hourly_rate, first.rate = (
        None,
        MONTH + timedelta(days=15),
        Decimal("1.9"),
        Decimal("1.9"),
    )
    first.save()
    Overhead.objects.create(
        organization=org, name="Operations", amount=Decimal("125000.00"), starts=MONTH, updated_at=now
    )
    return org


def _fill(org: Organization, records: int, teams: int) -> None:
    """Jobs, attempts and usage records written by the database; capacity records per node and day."""
    attempts = records // RECORDS_PER_ATTEMPT
    nodes = Node.objects.filter(cluster__organization=org).order_by("pk")
    node_rows = list(nodes.values_list("pk", "cluster_id", "accelerator_id"))
    kinds = dict(Cluster.objects.filter(organization=org).values_list("pk", "options"))
    team_ids = list(Team.objects.filter(organization=org).order_by("pk").values_list("pk", flat=True))
    queue_ids = list(Queue.objects.filter(team__organization=org).order_by("team_id").values_list("pk", flat=True))
    user_ids = list(
        User.objects.filter(username__startswith=f"{org.slug}-u").order_by("pk").values_list("pk", flat=True)
    )
    project_ids = list(
        Project.objects.filter(team__organization=org).order_by("team_id", "pk").values_list("pk", flat=True)
    )
    tier = PriorityTier.objects.get(organization=org)
    month_start = datetime.combine(MONTH, datetime.min.time(), tzinfo=UTC)
    arrays = {
        "nodes": [n[0] for n in node_rows],
        "node_clusters": [n[1] for n in node_rows],
        "node_flavors": [n[2] for n in node_rows],
        "node_kinds": [kinds[n[1]]["capacity_type"] for n in node_rows],
        "teams": team_ids,
        "queues": queue_ids,
        "users": user_ids,
        "projects": project_ids,
    }
    with transaction.atomic(), connection.cursor() as cursor:
        # The rows are consistent by construction; checking ten foreign keys on each of millions of rows at the
        # commit would take longer than the rest together (as pg_restore --disable-triggers does, for this
        # transaction only; it needs a superuser, as the benchmark database's owner is).
        cursor.execute("SET LOCAL session_replication_role = replica")
        # Job i belongs to team i % teams, user (i / teams) % 10 of it, project i % 3 of it; it starts on day
        # i % (DAYS - 1) at a second of its own and holds four nodes for two days (within the month).
        cursor.execute(
            f"""
            INSERT INTO scheduler_job (team_id, project_id, queue_id, submitted_by_id, name, idempotency_key,
                accelerator_types, accelerators, accelerator_milli, workers, cpu, memory, topology_level,
                topology_mode, time_limit, tier_id, preemptible, checkpoint_location, regions, image, command,
                script, env, max_retries, state, state_changed_at, submitted_at, attempt, retries,
                pending_reason, pending_message, message)
            SELECT (%(teams)s::bigint[])[1 + i %% {teams}],
                   (%(projects)s::bigint[])[1 + (i %% {teams}) * 3 + i %% 3],
                   (%(queues)s::bigint[])[1 + i %% {teams}],
                   (%(users)s::int[])[1 + (i %% {teams}) * 10 + (i / {teams}) %% 10],
                   'bench-' || i, '', '[]', 8, 1000, 4, 1000, 4096, '', 'required', 172800, {tier.pk}, true, '',
                   '[]', '', '[]', '', '{{}}', 3, 'succeeded', %(start)s, %(start)s, 1, 0, '', '', ''
            FROM generate_series(0, {attempts - 1}) AS i
            """,  # noqa: S608 - only whole numbers are formatted in
            {**arrays, "start": month_start},
        )
        cursor.execute(
            """
            INSERT INTO scheduler_attempt (job_id, number, cluster_id, flavor, cost_per_hour, borrowing, backfilled,
                admitted_at, started_at, ended_at, outcome, backend_id, dispatch_error, cleanup_pending)
            SELECT j.id, 1, (%(node_clusters)s::bigint[])[1 + (j.rn * 4) %% cardinality(%(nodes)s::bigint[])], '',
                   0, false, false,
                   %(start)s + make_interval(days => (j.rn %% 30)::int, secs => (j.rn %% 86400)::int),
                   NULL,
                   %(start)s + make_interval(days => (j.rn %% 30)::int + 1, secs => (j.rn %% 86400)::int),
                   'succeeded', '', '', false
            FROM (SELECT id, row_number() OVER (ORDER BY id) - 1 AS rn FROM scheduler_job
                  WHERE queue_id = ANY(%(queues)s::bigint[])) AS j
            """,
            {**arrays, "start": month_start},
        )
        # Each attempt: nodes 4k .. 4k+3 (one cluster's run of nodes, wrapping), days d and d+1.
        cursor.execute(
            """
            INSERT INTO billing_usagerecord (organization_id, team_id, project_id, user_id, job_id, attempt_id,
                cluster_id, node_id, flavor_id, capacity_type, day, start, "end", seconds, milli, closed)
            SELECT %(org)s, j.team_id, j.project_id, j.submitted_by_id, j.id, a.id,
                   (%(node_clusters)s::bigint[])[1 + n.ix], (%(nodes)s::bigint[])[1 + n.ix],
                   (%(node_flavors)s::bigint[])[1 + n.ix], (%(node_kinds)s::text[])[1 + n.ix],
                   (a.admitted_at + make_interval(days => d.d))::date,
                   CASE WHEN d.d = 0 THEN a.admitted_at ELSE date_trunc('day', a.ended_at) END,
                   CASE WHEN d.d = 0 THEN date_trunc('day', a.ended_at) ELSE a.ended_at END,
                   CASE WHEN d.d = 0 THEN 86400 - extract(epoch FROM a.admitted_at::time)::int
                        ELSE extract(epoch FROM a.ended_at::time)::int END,
                   1000 * (1 + (a.id %% 8)), true
            FROM scheduler_attempt a JOIN scheduler_job j ON j.id = a.job_id,
                 LATERAL (SELECT ((a.id * 4 + k) %% cardinality(%(nodes)s::bigint[]))::int AS ix
                          FROM generate_series(0, 3) AS k) AS n,
                 generate_series(0, 1) AS d(d)
            WHERE j.queue_id = ANY(%(queues)s::bigint[])
            """,
            {**arrays, "org": org.pk},
        )
    CapacityRecord.objects.bulk_create(
        [
            CapacityRecord(
                organization=org,
                cluster_id=cluster_id,
                node_id=node_id,
                flavor_id=flavor_id,
                capacity_type=kinds[cluster_id]["capacity_type"],
                accelerators=8,
                day=MONTH + timedelta(days=d),
                start=month_start + timedelta(days=d),
                end=month_start + timedelta(days=d + 1),
                seconds=86400,
                closed=True,
            )
            for node_id, cluster_id, flavor_id in node_rows
            for d in range(DAYS)
        ],
        batch_size=5000,
    )


def _time(org: Organization, repeat: int) -> dict[str, Any]:
    def timed(function: Any) -> tuple[float, Any]:
        best, result = float("inf"), None
        for _ in range(repeat):
            started = time.perf_counter()
            result = function()
            best = min(best, time.perf_counter() - started)
        return round(best, 3), result

    report_seconds, month = timed(lambda: attribution.attribute(org, MONTH))
    rows_seconds, rows = timed(lambda: list(reports.fleet_rows(month)))
    jobs_seconds, _ = timed(lambda: attribution.job_costs(org.pk, MONTH, None, 10))  # uncached
    xlsx_seconds, _ = timed(lambda: reports.fleet_xlsx(month).close())
    allocated = sum(line.total for line in month.lines) + month.unallocated_idle + month.unallocated_overhead
    return {
        "month": MONTH.strftime("%Y-%m"),
        "report_seconds": report_seconds,
        "fleet_rows_seconds": rows_seconds,
        "top_jobs_seconds": jobs_seconds,
        "fleet_xlsx_seconds": xlsx_seconds,
        "lines": len(month.lines),
        "teams": len(rows) - 1,
        "fleet_total": str(attribution.money(month.fleet_total)),
        "allocated_equals_fleet_total": allocated == month.fleet_total,
        "repeat": repeat,
    }


def _remove(org: Organization) -> None:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("DELETE FROM billing_usagerecord WHERE organization_id = %s", [org.pk])
        cursor.execute("DELETE FROM billing_capacityrecord WHERE organization_id = %s", [org.pk])
        cursor.execute(
            "DELETE FROM scheduler_attempt WHERE job_id IN"
            " (SELECT j.id FROM scheduler_job j JOIN portal_team t ON t.id = j.team_id WHERE t.organization_id = %s)",
            [org.pk],
        )
        cursor.execute(
            "DELETE FROM scheduler_job WHERE team_id IN (SELECT id FROM portal_team WHERE organization_id = %s)",
            [org.pk],
        )
    Price.objects.filter(organization=org).delete()
    Overhead.objects.filter(organization=org).delete()
    Node.objects.filter(cluster__organization=org).delete()
    Cluster.objects.filter(organization=org).delete()
    AcceleratorType.objects.filter(organization=org).delete()
    Queue.objects.filter(team__organization=org).delete()
    PriorityTier.objects.filter(organization=org).delete()
    Membership.objects.filter(organization=org).delete()
    User.objects.filter(username__startswith=f"{org.slug}-u").delete()
    Project.objects.filter(team__organization=org).delete()
    Team.objects.filter(organization=org).delete()
    org.delete()
